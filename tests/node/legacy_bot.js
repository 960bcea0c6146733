#!/usr/bin/env node
// A legacy botmesh-style bot, written with node-redis 4 against the LEGACY key names, run
// through a slotbridge proxy that applies the cluster:v1 layout (LAYOUT.md) with prefix
// `mybot`. After the bot has worked, the cluster is read DIRECTLY (plain clients on every
// master) and compared with the key set LAYOUT.md's rules predict; the listings (SCAN, KEYS)
// are read through the proxy and compared with the legacy names the bot still has.
//
// The expected cluster names come from a small implementation of LAYOUT.md in this file
// (percent-encoding and the FNV-1a bucket), checked first against LAYOUT.md's test vectors;
// nothing here asks the proxy how it names keys.
//
// Usage: node legacy_bot.js <proxy host:port> <master host:port>...
//    or: SLOTBRIDGE_PROXY=host:port SLOTBRIDGE_MASTERS=host:port,host:port node legacy_bot.js
// Exit code 0 when every check holds; 1 with the failed check on stderr otherwise.

'use strict';

const { createClient } = require('redis');

const P = 'mybot';
const OVERALL_TIMEOUT_MS = 90000;

class CheckFailed extends Error {}

function fail(message) {
  throw new CheckFailed(message);
}

function check(condition, message) {
  if (!condition) fail(message);
}

function show(value) {
  return JSON.stringify(value);
}

/// Set equality with a readable difference.
function checkSameSet(actual, expected, what) {
  const a = new Set(actual);
  const e = new Set(expected);
  const missing = [...e].filter((x) => !a.has(x)).sort();
  const extra = [...a].filter((x) => !e.has(x)).sort();
  if (missing.length || extra.length) {
    // The whole sets help only while they are short enough to read.
    const whole =
      e.size + a.size <= 24 ? `\n  expected ${show([...e].sort())}\n  got      ${show([...a].sort())}` : '';
    fail(`${what}: missing ${show(missing)}, unexpected ${show(extra)}${whole}`);
  }
}

// ---------------------------------------------------------------------------------------
// LAYOUT.md, implemented independently of the proxy.

// Bytes written as %XX: `% : { } * ? [ ] \`, every byte below 0x21, and 0x7F.
const ESCAPED = new Set([...'%:{}*?[]\\'].map((c) => c.charCodeAt(0)));

/// Percent-encodes one variable segment (on its UTF-8 bytes; non-ASCII bytes pass).
function enc(raw) {
  const out = [];
  for (const byte of Buffer.from(raw, 'utf8')) {
    if (byte < 0x21 || byte === 0x7f || ESCAPED.has(byte)) {
      out.push(...Buffer.from('%' + byte.toString(16).toUpperCase().padStart(2, '0')));
    } else {
      out.push(byte);
    }
  }
  return Buffer.from(out).toString('utf8');
}

/// 32-bit FNV-1a of the UTF-8 bytes of `raw`.
function fnv1a32(raw) {
  let hash = 2166136261;
  for (const byte of Buffer.from(raw, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 16777619) >>> 0;
  }
  return hash >>> 0;
}

/// The bucket of a record id: FNV-1a of the raw id modulo 32.
function bucket(raw) {
  return fnv1a32(raw) % 32;
}

/// LAYOUT.md's test vectors and worked examples: this implementation must agree with them
/// before it is trusted for the expectations.
function selfTest() {
  const vectors = [
    ['', 0x811c9dc5, 5],
    ['a', 0xe40c292c, 12],
    ['chat-1', 0x6e1ee9f9, 25],
    ['123456789', 0xbb86b11c, 28],
    ['user:42', 0x2f6b7b82, 2],
    ['5491122334455@s.whatsapp.net', 0x705da045, 5],
    ['ñandú', 0xb48f3ccb, 11],
  ];
  for (const [id, hash, b] of vectors) {
    check(fnv1a32(id) === hash, `self-test: fnv1a32(${show(id)}) = ${fnv1a32(id)}, want ${hash}`);
    check(bucket(id) === b, `self-test: bucket(${show(id)}) = ${bucket(id)}, want ${b}`);
  }
  const examples = [
    [chatRec('chat-1').key, 'mybot:{ch:25}:r:chat-1'],
    [chatRec('chat-1').index, 'mybot:{ch:25}:idx'],
    [chatRec('a:b{c}').key, 'mybot:{ch:1}:r:a%3Ab%7Bc%7D'],
    [checkpointRec('c2').key, 'mybot:{cp:0}:r:c2'],
    [names.msgs('chat-1'), 'mybot:{m:chat-1}:z'],
    [names.msg('chat-1', 'm1'), 'mybot:{m:chat-1}:i:m1'],
    [userRec('u1', 'prefs', 'lang').key, 'mybot:{ud:u1}:e:prefs:lang'],
    [userRec('u1', 'prefs', 'lang').member, 'prefs:lang'],
    [names.lock('team:ops'), 'mybot:{lk:team%3Aops}:l'],
    [names.turn('chat-1', 'seq'), 'mybot:co:{t:chat-1}:seq'],
    [names.term('sched'), 'mybot:co:{ld:sched}:term'],
    [enc('a b\x7f%*?[]\\é'), 'a%20b%7F%25%2A%3F%5B%5D%5Cé'],
  ];
  for (const [got, want] of examples) {
    check(got === want, `self-test: got ${show(got)}, want ${show(want)}`);
  }
}

/// cluster:v1 names of the families without an index.
const names = {
  msgs: (chat) => `${P}:{m:${enc(chat)}}:z`,
  msg: (chat, member) => `${P}:{m:${enc(chat)}}:i:${enc(member)}`,
  lock: (key) => `${P}:{lk:${enc(key)}}:l`,
  fence: (key) => `${P}:{lk:${enc(key)}}:f`,
  turn: (chatKey, field) => `${P}:co:{t:${enc(chatKey)}}:${field}`,
  leader: (name) => `${P}:co:{ld:${enc(name)}}`,
  term: (name) => `${P}:co:{ld:${enc(name)}}:term`,
};

/// An index-backed record of type `tag` (ch, ct, cp, sc): its key, index and member.
function bucketRec(tag, id) {
  const b = bucket(id);
  return { key: `${P}:{${tag}:${b}}:r:${enc(id)}`, index: `${P}:{${tag}:${b}}:idx`, member: enc(id) };
}
const chatRec = (id) => bucketRec('ch', id);
const contactRec = (id) => bucketRec('ct', id);
const checkpointRec = (id) => bucketRec('cp', id);

/// A user data entry (`ctx.user`): one slot and one index per user.
function userRec(user, ns, key) {
  return {
    key: `${P}:{ud:${enc(user)}}:e:${enc(ns)}:${enc(key)}`,
    index: `${P}:{ud:${enc(user)}}:idx`,
    member: `${enc(ns)}:${enc(key)}`,
  };
}

/// The legacy names the bot uses (LAYOUT.md's table, shipped profile).
const legacy = {
  msgs: (chat) => `${P}:msgs:${chat}`,
  msg: (chat, member) => `${P}:msg:${chat}:${member}`,
  chat: (id) => `${P}:chat:${id}`,
  contact: (id) => `${P}:contact:${id}`,
  checkpoint: (id) => `${P}:checkpoint:${id}`,
  user: (user, ns, key) => `${P}:user:${user}:${ns}:${key}`,
  lock: (key) => `${P}:lock:${key}`,
  fence: (key) => `${P}:fence:${key}`,
  turn: (chatKey, field) => `${P}:co:turn:${chatKey}:${field}`,
  leader: (name) => `${P}:co:leader:${name}`,
  term: (name) => `${P}:co:leader:${name}:term`,
  conv: (id) => `${P}:conv:${id}`,
};

// ---------------------------------------------------------------------------------------
// What the cluster must hold, kept up to date as the bot works.

class Expected {
  constructor() {
    /// cluster key -> the legacy name it stands for
    this.keys = new Map();
    /// index key -> Map(member -> record cluster key)
    this.indices = new Map();
    /// groups of cluster keys that one operation touches: they must share a slot
    this.groups = [];
  }

  key(clusterKey, legacyName) {
    this.keys.set(clusterKey, legacyName);
  }

  record(rec, legacyName) {
    this.key(rec.key, legacyName);
    if (!this.indices.has(rec.index)) this.indices.set(rec.index, new Map());
    this.indices.get(rec.index).set(rec.member, rec.key);
  }

  dropRecord(rec) {
    this.keys.delete(rec.key);
    const members = this.indices.get(rec.index);
    if (members) {
      members.delete(rec.member);
      if (members.size === 0) this.indices.delete(rec.index);
    }
  }

  sameSlot(...clusterKeys) {
    this.groups.push(clusterKeys);
  }

  /// Every cluster key that must exist: records, plain keys and the non-empty indices.
  allKeys() {
    return [...this.keys.keys(), ...this.indices.keys()];
  }

  legacyNames(prefix) {
    return [...this.keys.values()].filter((name) => name.startsWith(prefix));
  }
}

// ---------------------------------------------------------------------------------------
// The bot: legacy names only, through the proxy.

// Awkward ids, within what each pattern allows: `<x...>` captures may hold `:`, one-segment
// captures (`<user>`, `<ns>`, `<member>`) may not.
const CHATS = ['chat-1', 'grupo {ventas}:norte', '5491122334455@s.whatsapp.net', 'sala ñandú*?'];
const CONTACTS = ['5491122334455@s.whatsapp.net', 'user:42', 'José {Pérez} [vip]'];
const USERS = ['u1', 'usuario {7} ñ'];
const LOCKS = ['team:ops', 'envío {diario}'];
const LEADERS = ['sched', 'cron:diario {utc}'];

const SCRIPT_SAVE_MESSAGE = `
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return redis.call('ZCARD', KEYS[1])`;

const SCRIPT_RELEASE_LOCK = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;

// KEYS: seq, tix, serving, owner, last. ARGV: holder, now (ms), owner ttl (ms).
// Takes a ticket, queues it, and makes the holder the owner when its ticket is served.
// Returns {ticket, serving, previous owner or ''}.
const SCRIPT_TAKE_TURN = `
local ticket = redis.call('INCR', KEYS[1])
redis.call('ZADD', KEYS[2], ticket, ARGV[1])
local serving = tonumber(redis.call('GET', KEYS[3]) or '0')
if serving == 0 then
  serving = ticket
  redis.call('SET', KEYS[3], serving)
end
local previous = redis.call('GET', KEYS[4]) or ''
if serving == ticket then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[3])
end
redis.call('SET', KEYS[5], ARGV[2])
return {ticket, serving, previous}`;

// KEYS: serving, tix, owner. ARGV: holder. Ends the holder's turn and serves the next ticket.
const SCRIPT_END_TURN = `
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[1])`;

const SCRIPT_DELETE = `return redis.call('DEL', KEYS[1])`;

// A user data entry written from a script (the store's "set with TTL" helper).
const SCRIPT_USER_SET_PX = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('PTTL', KEYS[1])`;

async function runBot(proxy, exp) {
  const cmd = (args) => proxy.sendCommand(args);
  const evalScript = (script, keys, args) =>
    proxy.eval(script, { keys, arguments: args.map(String) });

  // Messages: log and item written together by one script.
  let ts = 1700000000000;
  for (const chat of CHATS) {
    const members = ['m1', 'msg {2}', 'ñ-3'];
    for (let i = 0; i < members.length; i++) {
      const member = members[i];
      const body = `hola ${i} desde ${chat}`;
      ts += 1;
      const count = await evalScript(
        SCRIPT_SAVE_MESSAGE,
        [legacy.msgs(chat), legacy.msg(chat, member)],
        [ts, member, body],
      );
      check(count === i + 1, `save message ${show(member)} in ${show(chat)}: log size ${count}, want ${i + 1}`);
      exp.key(names.msgs(chat), legacy.msgs(chat));
      exp.key(names.msg(chat, member), legacy.msg(chat, member));
      exp.sameSlot(names.msgs(chat), names.msg(chat, member));
    }
    const got = await cmd(['GET', legacy.msg(chat, 'msg {2}')]);
    check(got === `hola 1 desde ${chat}`, `read back a message of ${show(chat)}: ${show(got)}`);
  }

  // Chat and contact records: upserts (HSET twice), one chat deleted again.
  for (const id of CHATS) {
    await cmd(['HSET', legacy.chat(id), 'id', id, 'title', `Chat ${id}`]);
    await cmd(['HSET', legacy.chat(id), 'title', `Chat ${id} (renombrado)`, 'seen', '1']);
    exp.record(chatRec(id), legacy.chat(id));
  }
  const gone = 'borrar: {este} chat';
  await cmd(['HSET', legacy.chat(gone), 'id', gone]);
  check((await cmd(['DEL', legacy.chat(gone)])) === 1, 'deleteChat: DEL must remove one key');
  const title = await cmd(['HGET', legacy.chat(CHATS[1]), 'title']);
  check(title === `Chat ${CHATS[1]} (renombrado)`, `chat upsert read back: ${show(title)}`);
  for (const id of CONTACTS) {
    await cmd(['HSET', legacy.contact(id), 'id', id, 'name', `Contacto ${id}`]);
    exp.record(contactRec(id), legacy.contact(id));
  }

  // User data (ctx.user): persistent, with PX, with PX from a script, and one deleted.
  for (const user of USERS) {
    const entries = [
      ['prefs', 'lang', 'es', null],
      ['estado borrador', 'ultimo:pedido {7}', 'pizza', null],
      ['sesión', 'token', 't-1', 600000],
    ];
    for (const [ns, key, value, px] of entries) {
      const args = ['SET', legacy.user(user, ns, key), value];
      if (px) args.push('PX', String(px));
      check((await cmd(args)) === 'OK', `user data SET ${legacy.user(user, ns, key)}`);
      exp.record(userRec(user, ns, key), legacy.user(user, ns, key));
    }
    const scripted = ['sesión', 'carrito:1'];
    const pttl = await evalScript(SCRIPT_USER_SET_PX, [legacy.user(user, ...scripted)], ['x', 300000]);
    check(pttl > 0 && pttl <= 300000, `user data set by script: PTTL ${pttl}`);
    exp.record(userRec(user, ...scripted), legacy.user(user, ...scripted));
    await cmd(['SET', legacy.user(user, 'tmp', 'borrar'), '1']);
    check((await cmd(['DEL', legacy.user(user, 'tmp', 'borrar')])) === 1, 'user data DEL');
  }
  // A TTL taken away again: the index must say persistent (inf) from then on.
  check((await cmd(['PERSIST', legacy.user('u1', 'sesión', 'token')])) === 1, 'user data PERSIST');

  // A contact deleted from a script: the index follows a script's writes too.
  const dropped = 'baja: {script}';
  await cmd(['HSET', legacy.contact(dropped), 'id', dropped]);
  const deleted = await evalScript(SCRIPT_DELETE, [legacy.contact(dropped)], []);
  check(deleted === 1, `contact deleted by script: DEL gave ${deleted}`);

  // Locks: SET NX PX + INCR fence; a second holder is refused; compare-and-delete release.
  for (const key of LOCKS) {
    const first = await cmd(['SET', legacy.lock(key), 'holder-a', 'NX', 'PX', '30000']);
    check(first === 'OK', `lock ${show(key)}: first SET NX must succeed, got ${show(first)}`);
    const fence = await cmd(['INCR', legacy.fence(key)]);
    check(fence === 1, `lock ${show(key)}: first fence ${fence}, want 1`);
    const second = await cmd(['SET', legacy.lock(key), 'holder-b', 'NX', 'PX', '30000']);
    check(second === null, `lock ${show(key)}: second SET NX must be refused, got ${show(second)}`);
    const wrong = await evalScript(SCRIPT_RELEASE_LOCK, [legacy.lock(key)], ['holder-b']);
    check(wrong === 0, `lock ${show(key)}: release by a non-holder must do nothing, got ${wrong}`);
    const released = await evalScript(SCRIPT_RELEASE_LOCK, [legacy.lock(key)], ['holder-a']);
    check(released === 1, `lock ${show(key)}: release by the holder must delete, got ${released}`);
    check((await cmd(['EXISTS', legacy.lock(key)])) === 0, `lock ${show(key)} still there after release`);
    exp.key(names.fence(key), legacy.fence(key));
    exp.sameSlot(names.lock(key), names.fence(key));
  }
  // One lock stays held (with its TTL) so it is part of the key set.
  const held = LOCKS[1];
  check((await cmd(['SET', legacy.lock(held), 'holder-c', 'NX', 'PX', '60000'])) === 'OK', 'lock re-acquire');
  check((await cmd(['INCR', legacy.fence(held)])) === 2, 'fence must rise to 2 on the second acquisition');
  exp.key(names.lock(held), legacy.lock(held));

  // Coordinator turns: two holders take tickets, the first ends its turn.
  const turnKeys = (chat) => ['seq', 'tix', 'serving', 'owner', 'last'].map((f) => legacy.turn(chat, f));
  for (const chat of ['chat-1', 'wa:5491122334455@s.whatsapp.net', 'grupo {ventas} ñ']) {
    const [t1, s1, prev1] = await evalScript(SCRIPT_TAKE_TURN, turnKeys(chat), ['replica-a', Date.now(), 30000]);
    check(t1 === 1 && s1 === 1 && prev1 === '', `turn ${show(chat)}: first ticket ${show([t1, s1, prev1])}`);
    const [t2, s2, prev2] = await evalScript(SCRIPT_TAKE_TURN, turnKeys(chat), ['replica-b', Date.now(), 30000]);
    check(t2 === 2 && s2 === 1 && prev2 === 'replica-a', `turn ${show(chat)}: second ticket ${show([t2, s2, prev2])}`);
    const [seq, tix, serving, owner] = turnKeys(chat);
    const next = await evalScript(SCRIPT_END_TURN, [serving, tix, owner], ['replica-a']);
    check(next === 2, `turn ${show(chat)}: serving after the first turn ${next}, want 2`);
    check((await cmd(['GET', seq])) === '2', `turn ${show(chat)}: seq`);
    // owner was deleted by the end of the turn; seq, tix, serving and last remain.
    for (const field of ['seq', 'tix', 'serving', 'last']) {
      exp.key(names.turn(chat, field), legacy.turn(chat, field));
    }
    exp.sameSlot(...['seq', 'tix', 'serving', 'owner', 'last'].map((f) => names.turn(chat, f)));
  }

  // Leadership with a term: the first candidate wins, a second is refused.
  for (const name of LEADERS) {
    check((await cmd(['SET', legacy.leader(name), 'replica-a', 'NX', 'PX', '20000'])) === 'OK', `leader ${show(name)}`);
    check((await cmd(['INCR', legacy.term(name)])) === 1, `leader ${show(name)}: term`);
    check((await cmd(['SET', legacy.leader(name), 'replica-b', 'NX', 'PX', '20000'])) === null, `leader ${show(name)}: second candidate`);
    exp.key(names.leader(name), legacy.leader(name));
    exp.key(names.term(name), legacy.term(name));
    exp.sameSlot(names.leader(name), names.term(name));
  }

  // An unchanged-name family.
  await cmd(['SET', legacy.conv('42'), 'estado']);
  exp.key(legacy.conv('42'), legacy.conv('42'));
}

/// Long-lived checkpoints (persistent, and with PX), one re-expired with PEXPIRE.
async function writeCheckpoints(proxy, exp) {
  const cmd = (args) => proxy.sendCommand(args);
  const lasting = [
    ['c2', null],
    ['chat-1:ultimo {id}', 120000],
    ['ñandú paso 3', null],
    ['5491122334455@s.whatsapp.net', 90000],
  ];
  for (const [id, px] of lasting) {
    const args = ['SET', legacy.checkpoint(id), `offset-${id}`];
    if (px) args.push('PX', String(px));
    check((await cmd(args)) === 'OK', `checkpoint SET ${show(id)}`);
    exp.record(checkpointRec(id), legacy.checkpoint(id));
  }
  check((await cmd(['PEXPIRE', legacy.checkpoint('c2'), '240000'])) === 1, 'checkpoint PEXPIRE');
}

/// Checkpoints with a short TTL; returns their records with legacy names, and when the first
/// and the last of them expire.
async function writeShortCheckpoints(proxy, exp) {
  const short = [
    ['efímero:1', 1500],
    ['efímero {2}', 2000],
  ];
  const started = Date.now();
  for (const [id, px] of short) {
    const reply = await proxy.sendCommand(['SET', legacy.checkpoint(id), 'x', 'PX', String(px)]);
    check(reply === 'OK', `short checkpoint SET ${show(id)}`);
    exp.record(checkpointRec(id), legacy.checkpoint(id));
  }
  return {
    recs: short.map(([id]) => [checkpointRec(id), legacy.checkpoint(id)]),
    firstExpiry: started + Math.min(...short.map(([, px]) => px)),
    expiresBy: started + Math.max(...short.map(([, px]) => px)),
  };
}

// ---------------------------------------------------------------------------------------
// Reading the cluster directly, and the listings through the proxy.

/// Every key under the prefix on every master, with the master that holds it.
async function clusterKeys(masters) {
  const owner = new Map();
  for (const master of masters) {
    const keys = await master.client.sendCommand(['KEYS', `${P}:*`]);
    for (const key of keys) {
      check(!owner.has(key), `key ${show(key)} on two masters (${owner.get(key)?.addr}, ${master.addr})`);
      owner.set(key, master);
    }
  }
  return owner;
}

/// The key set, the shared slots and every index entry, read on the masters.
async function checkCluster(masters, exp, phase) {
  const owner = await clusterKeys(masters);
  const marker = `${P}:{meta}:layout`;
  const expected = exp.allKeys();
  if (owner.has(marker)) {
    const value = await owner.get(marker).client.sendCommand(['GET', marker]);
    check(value === 'cluster:v1', `${phase}: layout marker holds ${show(value)}`);
    expected.push(marker);
  }
  checkSameSet([...owner.keys()], expected, `${phase}: key set on the cluster`);

  // No legacy name may have reached the cluster (the exact set implies it; say it plainly).
  const legacyShape = new RegExp(
    `^${P}:(msgs|msg|chat|contact|checkpoint|schedule|user|lock|fence|co:turn|co:leader):`,
  );
  const leaked = [...owner.keys()].filter((k) => legacyShape.test(k));
  check(leaked.length === 0, `${phase}: legacy names on the cluster: ${show(leaked)}`);

  const any = masters[0].client;
  for (const group of exp.groups) {
    const slots = new Set();
    for (const key of group) slots.add(await any.sendCommand(['CLUSTER', 'KEYSLOT', key]));
    check(slots.size === 1, `${phase}: keys of one operation span slots: ${show(group)}`);
  }

  for (const [index, members] of exp.indices) {
    const node = owner.get(index).client;
    const flat = await node.sendCommand(['ZRANGE', index, '0', '-1', 'WITHSCORES']);
    const scores = new Map();
    for (let i = 0; i + 1 < flat.length; i += 2) scores.set(flat[i], flat[i + 1]);
    checkSameSet([...scores.keys()], [...members.keys()], `${phase}: members of ${index}`);
    for (const [member, record] of members) {
      const slotOf = async (key) => any.sendCommand(['CLUSTER', 'KEYSLOT', key]);
      check((await slotOf(record)) === (await slotOf(index)), `${phase}: ${record} and ${index} in different slots`);
      const expireAt = await owner.get(record).client.sendCommand(['PEXPIRETIME', record]);
      const score = scores.get(member);
      if (expireAt === -1) {
        check(score === 'inf', `${phase}: ${index} ${show(member)} scores ${score}, want inf (persistent)`);
      } else {
        check(expireAt > 0, `${phase}: ${record} PEXPIRETIME ${expireAt}`);
        check(Number(score) === expireAt, `${phase}: ${index} ${show(member)} scores ${score}, want PEXPIRETIME ${expireAt}`);
      }
    }
  }
  return owner;
}

/// Values the bot wrote, read on the masters under their cluster names.
async function checkValues(owner) {
  const get = async (key, args) => {
    check(owner.has(key), `value check: ${key} is not on the cluster`);
    return owner.get(key).client.sendCommand(args);
  };
  const item = names.msg('grupo {ventas}:norte', 'msg {2}');
  check((await get(item, ['GET', item])) === 'hola 1 desde grupo {ventas}:norte', `value of ${item}`);
  const log = names.msgs('sala ñandú*?');
  const members = await get(log, ['ZRANGE', log, '0', '-1']);
  check(show(members) === show(['m1', 'msg {2}', 'ñ-3']), `members of ${log}: ${show(members)}`);
  const contact = contactRec('José {Pérez} [vip]').key;
  check((await get(contact, ['HGET', contact, 'id'])) === 'José {Pérez} [vip]', `value of ${contact}`);
  const fence = names.fence('envío {diario}');
  check((await get(fence, ['GET', fence])) === '2', `value of ${fence}`);
  const lock = names.lock('envío {diario}');
  check((await get(lock, ['GET', lock])) === 'holder-c', `value of ${lock}`);
  const term = names.term('cron:diario {utc}');
  check((await get(term, ['GET', term])) === '1', `value of ${term}`);
  const serving = names.turn('grupo {ventas} ñ', 'serving');
  check((await get(serving, ['GET', serving])) === '2', `value of ${serving}`);
  const user = userRec('usuario {7} ñ', 'estado borrador', 'ultimo:pedido {7}').key;
  check((await get(user, ['GET', user])) === 'pizza', `value of ${user}`);
}

/// The short-lived checkpoints, right after they were written: listed by KEYS through the
/// proxy, and on the cluster under their cluster names with their expiry as index score.
async function checkShortCheckpoints(proxy, masters, exp, short) {
  const keys = await proxy.sendCommand(['KEYS', `${P}:checkpoint:*`]);
  checkSameSet(keys, exp.legacyNames(`${P}:checkpoint:`), `before expiry: KEYS ${P}:checkpoint:* through the proxy`);
  const owner = await clusterKeys(masters);
  for (const [rec] of short.recs) {
    check(owner.has(rec.key), `before expiry: ${rec.key} is not on the cluster`);
    const node = owner.get(rec.key).client;
    const expireAt = await node.sendCommand(['PEXPIRETIME', rec.key]);
    const score = await node.sendCommand(['ZSCORE', rec.index, rec.member]);
    check(expireAt > 0, `before expiry: ${rec.key} PEXPIRETIME ${expireAt}`);
    check(Number(score) === expireAt, `before expiry: ${rec.index} ${show(rec.member)} scores ${score}, want ${expireAt}`);
  }
}

/// SCAN through the proxy, following the cursor to 0.
async function scanAll(proxy, pattern) {
  const seen = [];
  let cursor = '0';
  for (let calls = 0; ; calls++) {
    check(calls < 10000, `SCAN MATCH ${pattern}: cursor never returned to 0`);
    const [next, keys] = await proxy.sendCommand(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '3']);
    seen.push(...keys);
    cursor = next;
    if (cursor === '0') return { keys: seen, calls: calls + 1 };
  }
}

async function checkListings(proxy, exp, phase) {
  const chats = exp.legacyNames(`${P}:chat:`);
  const scan = await scanAll(proxy, `${P}:chat:*`);
  checkSameSet(scan.keys, chats, `${phase}: SCAN MATCH ${P}:chat:* through the proxy`);
  // node-redis's own iterator parses the cursor as a number between calls.
  const iterated = [];
  for await (const key of proxy.scanIterator({ MATCH: `${P}:chat:*`, COUNT: 3 })) iterated.push(key);
  checkSameSet(iterated, chats, `${phase}: scanIterator MATCH ${P}:chat:* through the proxy`);
  const checkpoints = exp.legacyNames(`${P}:checkpoint:`);
  const keys = await proxy.sendCommand(['KEYS', `${P}:checkpoint:*`]);
  checkSameSet(keys, checkpoints, `${phase}: KEYS ${P}:checkpoint:* through the proxy`);
  check(keys.length === new Set(keys).size, `${phase}: KEYS returned duplicates: ${show(keys)}`);
  const users = exp.legacyNames(`${P}:user:`);
  const userKeys = await proxy.sendCommand(['KEYS', `${P}:user:*`]);
  checkSameSet(userKeys, users, `${phase}: KEYS ${P}:user:* through the proxy`);
  // One user's entries, as the store lists ctx.user (the id has a space, braces and UTF-8).
  const one = `${P}:user:${USERS[1]}:`;
  const oneKeys = await proxy.sendCommand(['KEYS', `${one}*`]);
  checkSameSet(oneKeys, exp.legacyNames(one), `${phase}: KEYS ${one}* through the proxy`);
  check(oneKeys.length === 4, `${phase}: KEYS ${one}* gave ${oneKeys.length} names, want 4`);
}

// ---------------------------------------------------------------------------------------

function parseArgs() {
  const argv = process.argv.slice(2);
  const proxyAddr = argv[0] || process.env.SLOTBRIDGE_PROXY;
  let masters = argv.slice(1);
  if (masters.length === 0 && process.env.SLOTBRIDGE_MASTERS) {
    masters = process.env.SLOTBRIDGE_MASTERS.split(',').filter(Boolean);
  }
  if (!proxyAddr || masters.length === 0) {
    fail('usage: node legacy_bot.js <proxy host:port> <master host:port>...');
  }
  return { proxyAddr, masters };
}

async function connect(addr) {
  const client = createClient({ url: `redis://${addr}`, socket: { connectTimeout: 5000, reconnectStrategy: false } });
  client.on('error', (e) => console.error(`connection ${addr}: ${e.message}`));
  await client.connect();
  return client;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  selfTest();
  const { proxyAddr, masters: masterAddrs } = parseArgs();
  const proxy = await connect(proxyAddr);
  const masters = [];
  for (const addr of masterAddrs) masters.push({ addr, client: await connect(addr) });
  try {
    for (const master of masters) {
      const found = await master.client.sendCommand(['KEYS', `${P}:*`]);
      check(found.length === 0, `master ${master.addr} must start without ${P}:* keys, has ${show(found)}`);
    }
    const exp = new Expected();
    await runBot(proxy, exp);
    await writeCheckpoints(proxy, exp);
    const short = await writeShortCheckpoints(proxy, exp);
    // Before the short checkpoints expire: they are listed and indexed with their expiry.
    // Only these few reads, so they fit in the TTL on a slow machine too.
    try {
      await checkShortCheckpoints(proxy, masters, exp, short);
    } catch (e) {
      if (e instanceof CheckFailed && Date.now() >= short.firstExpiry) {
        fail(`${e.message}\n  (the short checkpoints had already expired: the machine was too slow)`);
      }
      throw e;
    }

    const wait = short.expiresBy - Date.now() + 300;
    if (wait > 0) await sleep(wait);
    for (const [rec, name] of short.recs) {
      check((await proxy.sendCommand(['EXISTS', name])) === 0, `${name} must have expired`);
      exp.dropRecord(rec);
    }
    // Listings prune expired index entries, so the cluster check follows them.
    await checkListings(proxy, exp, 'after expiry');
    const owner = await checkCluster(masters, exp, 'after expiry');
    await checkValues(owner);
    console.log(
      `legacy bot: ok (${exp.keys.size} records and keys, ${exp.indices.size} indices, ` +
        `${masters.length} masters)`,
    );
  } finally {
    await Promise.allSettled([proxy.quit(), ...masters.map((m) => m.client.quit())]);
  }
}

setTimeout(() => {
  console.error(`legacy bot: no result within ${OVERALL_TIMEOUT_MS} ms`);
  process.exit(3);
}, OVERALL_TIMEOUT_MS).unref();

main().then(
  () => process.exit(0),
  (e) => {
    if (e instanceof CheckFailed) {
      console.error(`legacy bot: FAILED: ${e.message}`);
    } else {
      console.error(`legacy bot: ERROR: ${e && e.stack ? e.stack : e}`);
    }
    process.exit(1);
  },
);
