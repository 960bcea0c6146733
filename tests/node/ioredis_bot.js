#!/usr/bin/env node
// A bot of a Node.js fleet written with ioredis 5 for one Redis, run through a slotbridge proxy
// by tests/ioredis_bot.rs. For `--seconds` it runs, concurrently: cache-aside (GET, miss ->
// SET EX, with invalidations), sessions in hashes with a TTL (HSET + EXPIRE, HGETALL read
// back), rate limiting (INCR + EXPIRE, and a Lua script through defineCommand/EVALSHA), a Lua
// lock (SET NX PX, release by a script comparing the token), a stream with a consumer group
// (XGROUP CREATE MKSTREAM, XADD, XREADGROUP BLOCK on a connection of its own, XACK), pub/sub
// (a second connection subscribed, messages counted) and scanStream over its keys.
//
// It records every acknowledged write (key -> last acknowledged value, stream ids, acks) and
// every error the app would surface, then reads every acknowledged write back through a fresh
// connection and prints one JSON summary line on stdout.
//
// What counts as surfaced: a rejected command promise (the app's await throws), an `error`
// from scanStream, a session read back that is not what the bot just wrote, a lock the bot
// held but could not release (its token was gone). Not surfaced: NOGROUP from XREADGROUP,
// which the bot handles as such apps do, by creating the group again (counted in
// `groupRecreated`); and `error` events of a connection, which ioredis emits for a failed
// (re)connection before retrying on its own: they are listed in `errorEvents` with the
// reconnect counters, for the test to judge.
//
// A cutover (the proxy's upstream moves, with no data copied) is marked by two SIGUSR2: the
// first just before the move, the second once it is done. The final check covers only keys
// whose last acknowledged write was sent after the second (earlier ones are counted in
// `skippedBeforeCutover`), and a session or lock check that fails for an operation that
// spans the move (sent before the second signal, seen failing after the first) is counted in
// `crossedCutover`, not surfaced: its first half reached the old node, its second the new one.
// Pub/sub: every message published must reach the subscriber (`missedMessages`), except those
// published from the first signal to 500 ms after the second (`missedDuringCutover`): the
// proxy subscribes a subscriber again on the new upstream only once the reload is done, so a
// message published there in between is not delivered.
//
// Usage: node ioredis_bot.js --host H --port P [--username U] [--password W] --seconds N
//                            --prefix K [--cluster]
// With --cluster every connection is `new Redis.Cluster([{host, port}])`, and the bot also
// sends multi-key commands across slots and pipelines, and reports the nodes it saw.

'use strict';

const { connect, connectCluster, stats } = require('./ioredis_conn');

function parseArgs(argv) {
  const args = { host: '127.0.0.1', username: '', password: '', seconds: 5, prefix: 'bot' };
  for (let i = 0; i < argv.length; i += 1) {
    const flag = argv[i];
    if (flag === '--cluster') args.cluster = true;
    else args[flag.replace(/^--/, '')] = argv[++i];
  }
  args.port = Number(args.port);
  args.seconds = Number(args.seconds);
  return args;
}

const args = parseArgs(process.argv.slice(2));
const P = args.prefix;
const BUCKET_MS = 500;
const TTL_SECONDS = 600;

const state = {
  startedAt: Date.now(),
  deadline: Date.now() + args.seconds * 1000,
  cutoverStartAt: null,
  cutoverAt: null,
  // Session and lock checks that failed: {what, message, sentAt, seenAt}, judged at the end.
  anomalies: [],
  ops: 0,
  buckets: new Map(),
  lastAckAt: null,
  maxGapMs: 0,
  surfaced: [],
  surfacedCount: 0,
  // key -> {kind, value, sentAt}: the last acknowledged write of the key.
  acked: new Map(),
  streamIds: [],
  xacked: [],
  groupRecreated: 0,
  published: 0,
  received: 0,
  publishedMessages: [],
  receivedMessages: new Set(),
  scans: 0,
  scannedKeysMax: 0,
  nodesSeen: new Set(),
  counts: {},
};

process.on('SIGUSR2', () => {
  if (state.cutoverStartAt === null) state.cutoverStartAt = Date.now();
  else state.cutoverAt = Date.now();
});

const running = () => Date.now() < state.deadline;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const pick = (n) => Math.floor(Math.random() * n);

function progress(kind) {
  const now = Date.now();
  state.ops += 1;
  state.counts[kind] = (state.counts[kind] || 0) + 1;
  const bucket = now - (now % BUCKET_MS);
  state.buckets.set(bucket, (state.buckets.get(bucket) || 0) + 1);
  if (state.lastAckAt !== null) state.maxGapMs = Math.max(state.maxGapMs, now - state.lastAckAt);
  state.lastAckAt = now;
}

const SURFACED_SHOWN = 30;

function surface(what, message) {
  state.surfacedCount += 1;
  // The count is what matters; the first few say what went wrong.
  if (state.surfaced.length < SURFACED_SHOWN) state.surfaced.push(`${what}: ${message}`);
}

/// Awaits one app operation: its result, or null with the rejection recorded as surfaced.
async function op(kind, promise) {
  try {
    const result = await promise;
    progress(kind);
    return result;
  } catch (err) {
    surface(kind, err.message);
    return null;
  }
}

/// A check of the bot's own state failed for an operation begun at `sentAt`.
function anomaly(what, message, sentAt) {
  state.anomalies.push({ what, message, sentAt, seenAt: Date.now() });
}

/// Surfaces the anomalies, except those of operations that spanned a cutover.
function judgeAnomalies() {
  let crossed = 0;
  for (const { what, message, sentAt, seenAt } of state.anomalies) {
    const spanned =
      state.cutoverStartAt !== null && seenAt >= state.cutoverStartAt && state.cutoverAt !== null && sentAt <= state.cutoverAt;
    if (spanned) crossed += 1;
    else surface(what, message);
  }
  return crossed;
}

function ack(key, kind, value, sentAt) {
  state.acked.set(key, { kind, value, sentAt });
}

async function cacheAside(redis) {
  while (running()) {
    const key = `${P}:cache:${pick(20)}`;
    const sentAt = Date.now();
    const hit = await op('cache-get', redis.get(key));
    if (hit === null) {
      const value = `v-${sentAt}-${pick(1e6)}`;
      if ((await op('cache-set', redis.set(key, value, 'EX', TTL_SECONDS))) === 'OK') {
        ack(key, 'string', value, sentAt);
      }
    } else if (pick(5) === 0) {
      // An invalidation: the next read misses and refills.
      if ((await op('cache-del', redis.del(key))) !== null) ack(key, 'string', null, sentAt);
    }
  }
}

async function sessions(redis) {
  let seq = 0;
  while (running()) {
    const key = `${P}:session:${pick(10)}`;
    seq += 1;
    const sentAt = Date.now();
    const written = await op('session-hset', redis.hset(key, { user: `u${seq % 7}`, seq }));
    if (written === null) continue;
    ack(key, 'hash-seq', String(seq), sentAt);
    await op('session-expire', redis.expire(key, TTL_SECONDS));
    const session = await op('session-hgetall', redis.hgetall(key));
    if (session !== null && session.seq !== String(seq)) {
      anomaly('session-read', `${key} has seq ${session.seq}, just wrote ${seq}`, sentAt);
    }
  }
}

async function rateLimits(redis) {
  redis.defineCommand('ratelimit', {
    numberOfKeys: 1,
    lua: 'local n = redis.call("INCR", KEYS[1]) if n == 1 then redis.call("EXPIRE", KEYS[1], ARGV[1]) end return n',
  });
  // Replies of one connection come in order: the latest reply is the latest count.
  const counted = (key, n, sentAt) => ack(key, 'counter', String(n), sentAt);
  // An increment whose reply was lost (its connection died) may have run: the counter may
  // then hold one more than its last acknowledged value, never less.
  const unknown = (key) => {
    const last = state.acked.get(key);
    if (last) last.maybeOneMore = true;
  };
  while (running()) {
    const window = Math.floor(Date.now() / 2000);
    const user = pick(5);
    const incrKey = `${P}:rl:incr:${user}:${window}`;
    const luaKey = `${P}:rl:lua:${user}:${window}`;
    const sentAt = Date.now();
    const n = await op('rate-incr', redis.incr(incrKey));
    if (n !== null) {
      counted(incrKey, n, sentAt);
      if (n === 1) await op('rate-expire', redis.expire(incrKey, TTL_SECONDS));
    } else unknown(incrKey);
    const m = await op('rate-lua', redis.ratelimit(luaKey, TTL_SECONDS));
    if (m !== null) counted(luaKey, m, sentAt);
    else unknown(luaKey);
  }
}

const RELEASE = 'if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end';

async function locks(redis) {
  let held = 0;
  while (running()) {
    const key = `${P}:lock:${pick(3)}`;
    const token = `t-${process.pid}-${(held += 1)}`;
    const sentAt = Date.now();
    const got = await op('lock-acquire', redis.set(key, token, 'PX', 10000, 'NX'));
    if (got !== 'OK') continue;
    ack(key, 'string', token, sentAt);
    const countKey = `${P}:lock:count`;
    const n = await op('lock-work', redis.incr(countKey));
    if (n !== null) ack(countKey, 'counter', String(n), sentAt);
    const released = await op('lock-release', redis.eval(RELEASE, 1, key, token));
    if (released === 1) ack(key, 'string', null, sentAt);
    else if (released === 0) anomaly('lock-release', `${key}: token ${token} was gone`, sentAt);
  }
}

const STREAM = () => `${P}:stream`;
const GROUP = 'workers';

async function ensureGroup(redis) {
  try {
    await redis.xgroup('CREATE', STREAM(), GROUP, '0', 'MKSTREAM');
  } catch (err) {
    if (!err.message.startsWith('BUSYGROUP')) throw err;
  }
}

async function streamProducer(redis) {
  let seq = 0;
  while (running()) {
    seq += 1;
    const sentAt = Date.now();
    const id = await op('stream-xadd', redis.xadd(STREAM(), '*', 'seq', seq));
    if (id !== null) state.streamIds.push({ id, sentAt });
    await sleep(5);
  }
}

async function streamConsumer(redis, blocking) {
  while (running()) {
    let reply;
    const sentAt = Date.now();
    try {
      reply = await blocking.xreadgroup('GROUP', GROUP, 'c1', 'COUNT', 50, 'BLOCK', 300, 'STREAMS', STREAM(), '>');
      progress('stream-read');
    } catch (err) {
      if (!err.message.startsWith('NOGROUP')) {
        surface('stream-xreadgroup', err.message);
        continue;
      }
      state.groupRecreated += 1;
      await op('stream-xgroup', ensureGroup(redis));
      continue;
    }
    if (!reply) continue;
    const ids = reply[0][1].map(([id]) => id);
    if ((await op('stream-xack', redis.xack(STREAM(), GROUP, ...ids))) !== null) {
      for (const id of ids) state.xacked.push({ id, sentAt });
    }
  }
}

async function pubsub(redis, subscriber) {
  const channel = `${P}:events`;
  subscriber.on('message', (ch, message) => {
    if (ch !== channel) return;
    state.received += 1;
    state.receivedMessages.add(message);
  });
  await op('subscribe', subscriber.subscribe(channel));
  let seq = 0;
  while (running()) {
    const message = `m${(seq += 1)}`;
    const sentAt = Date.now();
    if ((await op('publish', redis.publish(channel, message))) !== null) {
      state.published += 1;
      state.publishedMessages.push({ message, sentAt });
    }
    await sleep(10);
  }
}

/// How long after a cutover the subscriber may still be moving to the new upstream.
const RESUBSCRIBE_GRACE_MS = 500;

/// Published messages the subscriber never got: [outside a cutover, during one].
function missedMessages() {
  const outside = [];
  let during = 0;
  for (const { message, sentAt } of state.publishedMessages) {
    if (state.receivedMessages.has(message)) continue;
    const inCutover =
      state.cutoverStartAt !== null &&
      sentAt >= state.cutoverStartAt &&
      (state.cutoverAt === null || sentAt <= state.cutoverAt + RESUBSCRIBE_GRACE_MS);
    if (inCutover) during += 1;
    else outside.push(`${message} published at ${sentAt}`);
  }
  return [outside, during];
}

function scanOnce(node) {
  return new Promise((resolve) => {
    const keys = new Set();
    const stream = node.scanStream({ match: `${P}:*`, count: 100 });
    stream.on('data', (batch) => batch.forEach((k) => keys.add(k)));
    stream.on('error', (err) => {
      surface('scanStream', err.message);
      resolve(null);
    });
    stream.on('end', () => resolve(keys.size));
  });
}

async function scans(redis) {
  while (running()) {
    // A cluster app scans every master; through the proxy that is the proxy alone.
    const nodes = args.cluster ? redis.nodes('master') : [redis];
    for (const node of nodes) {
      const found = await scanOnce(node);
      if (found !== null) {
        progress('scan');
        state.scans += 1;
        state.scannedKeysMax = Math.max(state.scannedKeysMax, found);
      }
    }
    await sleep(300);
  }
}

/// Cluster-client only: multi-key commands across slots and a pipeline, through the proxy.
/// ioredis refuses, client-side, a pipeline holding one command whose keys span slots, and an
/// auto-pipeline is a pipeline: the whole batch would fail. So, as a cluster app must, these
/// go on a client of their own without auto-pipelining.
async function crossSlot(redis) {
  let seq = 0;
  while (running()) {
    seq += 1;
    const keys = ['a', 'b', 'c', 'd'].map((k) => `${P}:multi:${k}`);
    const sentAt = Date.now();
    if ((await op('mset', redis.mset(...keys.flatMap((k) => [k, `${k}=${seq}`])))) === 'OK') {
      keys.forEach((k) => ack(k, 'string', `${k}=${seq}`, sentAt));
    }
    const values = await op('mget', redis.mget(...keys));
    if (values !== null && values.some((v, i) => v !== `${keys[i]}=${seq}`)) {
      surface('mget', `read ${JSON.stringify(values)} after writing seq ${seq}`);
    }
    const pipeKeys = ['x', 'y', 'z'].map((k) => `${P}:pipe:${k}`);
    const pipeline = redis.pipeline();
    pipeKeys.forEach((k) => pipeline.set(k, `${k}=${seq}`));
    pipeline.incr(`${P}:pipe:count`);
    const results = await op('pipeline', pipeline.exec());
    if (results !== null) {
      results.forEach(([err], i) => err && surface('pipeline', `command ${i}: ${err.message}`));
      pipeKeys.forEach((k, i) => !results[i][0] && ack(k, 'string', `${k}=${seq}`, sentAt));
      if (!results[3][0]) ack(`${P}:pipe:count`, 'counter', String(results[3][1]), sentAt);
    }
  }
}

function watchNodes(client) {
  if (!args.cluster) return;
  client.on('+node', (node) => state.nodesSeen.add(`${node.options.host}:${node.options.port}`));
}

function newClient(name, autoPipelining = true) {
  const settings = { ...args, name, autoPipelining };
  const client = args.cluster ? connectCluster(settings, name) : connect(settings, name);
  watchNodes(client);
  return client;
}

const after = (sentAt) => state.cutoverAt === null || sentAt > state.cutoverAt;

/// Reads every acknowledged write back through a fresh connection: the list of mismatches.
async function verify() {
  const redis = newClient('ioredis-bot-verify');
  const lost = [];
  let verified = 0;
  let skipped = 0;
  for (const [key, { kind, value, sentAt, maybeOneMore }] of state.acked) {
    if (!after(sentAt)) {
      skipped += 1;
      continue;
    }
    const actual = kind === 'hash-seq' ? await redis.hget(key, 'seq') : await redis.get(key);
    verified += 1;
    const oneMore = maybeOneMore && kind === 'counter' && actual === String(Number(value) + 1);
    if (actual !== value && !oneMore) lost.push(`${key}: acknowledged ${JSON.stringify(value)}, read ${JSON.stringify(actual)}`);
  }
  const entries = await redis.xrange(STREAM(), '-', '+');
  const present = new Set(entries.map(([id]) => id));
  for (const { id, sentAt } of state.streamIds) {
    if (!after(sentAt)) skipped += 1;
    else if (!present.has(id)) lost.push(`${STREAM()}: acknowledged XADD ${id} is missing`);
    else verified += 1;
  }
  const pending = new Set((await redis.xpending(STREAM(), GROUP, '-', '+', 100000)).map(([id]) => id));
  for (const { id, sentAt } of state.xacked) {
    if (!after(sentAt)) skipped += 1;
    else if (pending.has(id)) lost.push(`${STREAM()}: acknowledged XACK ${id} is still pending`);
    else verified += 1;
  }
  await redis.quit();
  return { lost, verified, skipped };
}

async function main() {
  const redis = newClient('ioredis-bot');
  const blocking = newClient('ioredis-bot-reader');
  const subscriber = newClient('ioredis-bot-subscriber');
  await ensureGroup(redis);
  const workers = [
    cacheAside(redis),
    cacheAside(redis),
    sessions(redis),
    rateLimits(redis),
    locks(redis),
    locks(redis),
    streamProducer(redis),
    streamConsumer(redis, blocking),
    pubsub(redis, subscriber),
    scans(redis),
  ];
  const multi = args.cluster ? newClient('ioredis-bot-multi', false) : null;
  if (multi) workers.push(crossSlot(multi));
  await Promise.all(workers);
  // Let the last published messages arrive.
  await sleep(300);
  const crossed = judgeAnomalies();
  const [missed, missedDuring] = missedMessages();
  const { lost, verified, skipped } = await verify();
  await Promise.all([redis, blocking, subscriber, multi].filter(Boolean).map((c) => c.quit()));
  const summary = {
    startedAt: state.startedAt,
    endedAt: Date.now(),
    cutoverStartAt: state.cutoverStartAt,
    cutoverAt: state.cutoverAt,
    ops: state.ops,
    counts: state.counts,
    progress: [...state.buckets.entries()].sort((a, b) => a[0] - b[0]),
    maxGapMs: state.maxGapMs,
    surfacedCount: state.surfacedCount,
    surfaced: state.surfaced,
    errorEvents: stats.errorEvents,
    reconnectAttempts: stats.reconnectAttempts,
    reconnectOnError: stats.reconnectOnError,
    ackedKeys: state.acked.size,
    streamAdded: state.streamIds.length,
    streamAcked: state.xacked.length,
    groupRecreated: state.groupRecreated,
    published: state.published,
    received: state.received,
    missedMessages: missed.length,
    missed: missed.slice(0, SURFACED_SHOWN),
    missedDuringCutover: missedDuring,
    scans: state.scans,
    scannedKeysMax: state.scannedKeysMax,
    verified,
    skippedBeforeCutover: skipped,
    crossedCutover: crossed,
    lostCount: lost.length,
    lost: lost.slice(0, SURFACED_SHOWN),
    nodesSeen: [...state.nodesSeen].sort(),
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`ioredis bot crashed: ${err.stack}\n`);
    process.exit(1);
  },
);
