//! Applying the key layout (see [`crate::rewrite`]) to requests and replies: legacy key
//! names in, cluster:v1 names to the cluster, legacy names back out.
//!
//! One job: make a legacy client see its legacy keyspace while the data lives under the
//! cluster:v1 names. The pieces, in the order a request meets them:
//!
//! - **Forward rewrite** ([`ActiveLayout::rewrite_request`]): every key position the command
//!   table knows (`spec.keys()`) goes through [`Layout::forward`] before routing. A new frame
//!   is built only when some key changes; a key outside every prefix costs a prefix check.
//!   A key under a prefix that no rule matches passes through (counted per prefix) or, with
//!   `strict`, the command is refused.
//! - **Index upkeep**: a command that writes (`KeyFlags::writes`) a key of an index-backed
//!   family runs inside `lua/index_upkeep.lua` (EVALSHA, EVAL on NOSCRIPT): the command,
//!   then the index entry (score = PEXPIRETIME, `+inf` when persistent; removed when the
//!   key is gone), atomically, in the record's slot. Multi-key DEL/UNLINK/MSET spanning
//!   slots are split per slot here, each part with its own upkeep. Commands that cannot
//!   run in a script (blocking, `noscript`: EVAL, EVALSHA, FCALL...) run as they are and
//!   are followed by a refresh-only call of the same script on their index-backed keys:
//!   the refresh is atomic on its own, not together with the command.
//! - **Reverse rewrite** of replies that carry key names (RANDOMKEY, the list/zset pops,
//!   XREAD/XREADGROUP); KEYS and SCAN are answered by [`super::listing`].
//!
//! Replies of wrapped commands pass through Lua. Under RESP2 every reply a write command
//! gives (status, integer, bulk, null, array, error) survives byte for byte. Under RESP3
//! the script switches to RESP3 (`redis.setresp(3)`), so nulls, maps and doubles come
//! back typed; a double is re-printed by Lua (`%.17g`), so its digits may differ from the
//! server's own shortest form (e.g. `ZINCRBY` on an indexed key; records are strings and
//! hashes in practice).

use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;

use crate::command::{CommandFlags, CommandSpec, KeyPos};
use crate::protocol::encode::encode_request;
use crate::protocol::{Limits, Proto, ReplyScanner, Request};
use crate::reply;
use crate::reply::merge;
use crate::rewrite::{Forward, IndexEntry, Layout, Reverse};
use crate::route::key_slot;

use super::multikey::Kind;
use super::{Proxy, Target};

/// The index upkeep script (see its header for KEYS and ARGV).
pub const UPKEEP_SCRIPT: &str = include_str!("../../lua/index_upkeep.lua");

/// Tries of RANDOMKEY before answering null when it keeps drawing internal keys.
const RANDOMKEY_TRIES: usize = 8;

/// A layout in force: the rules plus the run-time policy around them.
#[derive(Debug)]
pub struct ActiveLayout {
    /// The compiled rules.
    pub layout: Layout,
    /// Refuse keys under a prefix that match no rule.
    pub strict: bool,
    /// Start even over legacy data without a marker.
    pub allow_legacy_data: bool,
    /// SHA1 of [`UPKEEP_SCRIPT`] as the server reported it at SCRIPT LOAD.
    script_sha: OnceLock<Bytes>,
}

/// A record key written by a command, with the index entry that lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedKey {
    /// The argument position of the (rewritten) key in the request.
    pub arg: usize,
    /// The cluster key of the record.
    pub record: Bytes,
    /// Its index entry.
    pub entry: IndexEntry,
}

/// A request after the forward rewrite.
#[derive(Debug, Clone)]
pub struct RewrittenRequest {
    /// The request to send: the original when no key changed.
    pub request: Request,
    /// Every key position of the request.
    pub keys: SmallVec<[KeyPos; 4]>,
    /// Record keys of index-backed families the command may create, change or delete.
    pub indexed: SmallVec<[IndexedKey; 2]>,
}

impl ActiveLayout {
    /// A layout in force with this policy.
    pub fn new(layout: Layout, strict: bool, allow_legacy_data: bool) -> ActiveLayout {
        ActiveLayout {
            layout,
            strict,
            allow_legacy_data,
            script_sha: OnceLock::new(),
        }
    }

    /// Rewrites every key of `request` (a `spec` command) to its cluster name; `Err` is the
    /// reply to give instead (a key matching no rule under `strict`).
    pub fn rewrite_request(
        &self,
        spec: &CommandSpec,
        request: Request,
    ) -> Result<RewrittenRequest, Bytes> {
        let mut keys: SmallVec<[KeyPos; 4]> = SmallVec::new();
        spec.keys(&request.args, &mut keys);
        // Scripts declare keys they may write whatever the key spec flags say.
        let script = is_script_call(spec);
        let mut replaced: SmallVec<[(usize, Bytes); 4]> = SmallVec::new();
        let mut indexed: SmallVec<[IndexedKey; 2]> = SmallVec::new();
        for key in &keys {
            let name = &request.args[key.index];
            match self.layout.forward(name) {
                Forward::Outside => {}
                Forward::Unmatched { prefix } => {
                    let prefix_name = self.layout.prefixes()[prefix].clone();
                    metrics::counter!("slotbridge_layout_unmatched_keys_total", "prefix" => prefix_name.clone())
                        .increment(1);
                    if self.strict {
                        return Err(reply::error(&format!(
                            "ERR key '{}' is under layout prefix '{prefix_name}' but matches no layout rule (layout.strict is on)",
                            name.escape_ascii()
                        )));
                    }
                }
                Forward::Rewritten(rewritten) => {
                    if rewritten.key != *name {
                        metrics::counter!("slotbridge_layout_rewrites_total", "family" => self.layout.family_name(rewritten.family).to_owned())
                            .increment(1);
                    }
                    if let Some(entry) = rewritten.index {
                        if script || key.flags.writes() {
                            indexed.push(IndexedKey {
                                arg: key.index,
                                record: rewritten.key.clone(),
                                entry,
                            });
                        }
                    }
                    if rewritten.key != *name {
                        replaced.push((key.index, rewritten.key));
                    }
                }
            }
        }
        let request = if replaced.is_empty() {
            request
        } else {
            let mut args = request.args;
            for (at, key) in replaced {
                args[at] = key;
            }
            let refs: SmallVec<[&[u8]; 8]> = args.iter().map(|arg| &arg[..]).collect();
            let raw = encode_request(&refs);
            drop(refs);
            Request { raw, args }
        };
        Ok(RewrittenRequest {
            request,
            keys,
            indexed,
        })
    }

    /// The legacy name of a keyspace-notification channel (`__keyspace@<db>__:<key>`), for
    /// the pub/sub path: `Some(channel)` to deliver under (unchanged when not ours), `None`
    /// to drop the message (it is about an index or the marker).
    pub fn legacy_channel(&self, channel: &[u8]) -> Option<Bytes> {
        const KEYSPACE: &[u8] = b"__keyspace@";
        let untouched = || Some(Bytes::copy_from_slice(channel));
        let Some(rest) = channel.strip_prefix(KEYSPACE) else {
            return untouched();
        };
        let Some(split) = rest.windows(3).position(|w| w == b"__:") else {
            return untouched();
        };
        let head_len = KEYSPACE.len() + split + 3;
        match self.layout.reverse(&channel[head_len..]) {
            Reverse::Outside => untouched(),
            Reverse::Internal => None,
            Reverse::Legacy(key) => {
                let mut out = Vec::with_capacity(head_len + key.len());
                out.extend_from_slice(&channel[..head_len]);
                out.extend_from_slice(&key);
                Some(Bytes::from(out))
            }
        }
    }

    /// The legacy form of a keyevent notification (`__keyevent@<db>__:<event>`, payload the
    /// key): `Some(payload)` to deliver, `None` to drop it (an index or the marker).
    pub fn legacy_keyevent_payload(&self, channel: &[u8], payload: &[u8]) -> Option<Bytes> {
        if !channel.starts_with(b"__keyevent@") {
            return Some(Bytes::copy_from_slice(payload));
        }
        match self.layout.reverse(payload) {
            Reverse::Outside => Some(Bytes::copy_from_slice(payload)),
            Reverse::Internal => None,
            Reverse::Legacy(key) => Some(key),
        }
    }

    /// The legacy name to show for a cluster key, `None` for an internal key.
    pub fn legacy_name(&self, cluster_key: &[u8]) -> Option<Bytes> {
        match self.layout.reverse(cluster_key) {
            Reverse::Outside => Some(Bytes::copy_from_slice(cluster_key)),
            Reverse::Internal => None,
            Reverse::Legacy(key) => Some(key),
        }
    }

    /// Rewrites the key names in `reply` (of command `name`) to legacy names; `None` when
    /// the reply names an internal key and must not be shown (RANDOMKEY).
    pub fn reverse_reply(&self, name: &str, reply: Bytes) -> Option<Bytes> {
        match ReplyKeys::of(name) {
            None => Some(reply),
            Some(ReplyKeys::Bulk) => match bulk_payload(&reply) {
                Some(key) => self.legacy_name(key).map(|legacy| bulk_frame(&legacy)),
                None => Some(reply),
            },
            Some(ReplyKeys::FirstElement) => Some(self.rewrite_first_element(reply)),
            Some(ReplyKeys::StreamNames) => Some(self.rewrite_stream_names(reply)),
        }
    }

    fn rewrite_first_element(&self, reply: Bytes) -> Bytes {
        let Some(elements) = merge::array_elements(&reply) else {
            return reply;
        };
        let Some(first) = elements.first() else {
            return reply;
        };
        let Some(key) = bulk_payload(first) else {
            return reply;
        };
        let Some(legacy) = self.legacy_name(key).filter(|legacy| legacy != key) else {
            return reply;
        };
        let mut parts = elements;
        parts[0] = bulk_frame(&legacy);
        rebuild(&reply, &parts)
    }

    /// XREAD/XREADGROUP: RESP2 `*N` of `[name, entries]` pairs; RESP3 `%N` name -> entries.
    fn rewrite_stream_names(&self, reply: Bytes) -> Bytes {
        if reply.first() == Some(&b'%') {
            let Some(mut parts) = aggregate_elements(&reply, 2) else {
                return reply;
            };
            for pair in parts.chunks_mut(2) {
                if let Some(legacy) = bulk_payload(&pair[0]).and_then(|key| self.legacy_name(key)) {
                    pair[0] = bulk_frame(&legacy);
                }
            }
            return rebuild(&reply, &parts);
        }
        let Some(mut streams) = merge::array_elements(&reply) else {
            return reply;
        };
        for stream in streams.iter_mut() {
            *stream = self.rewrite_first_element(stream.clone());
        }
        rebuild(&reply, &streams)
    }

    fn sha(&self) -> Option<&Bytes> {
        self.script_sha.get()
    }
}

/// Which part of a reply carries key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyKeys {
    /// The reply is one key (RANDOMKEY).
    Bulk,
    /// The first element of an array reply is a key (BLPOP, LMPOP, BZPOPMIN...).
    FirstElement,
    /// Stream names (XREAD, XREADGROUP).
    StreamNames,
}

impl ReplyKeys {
    fn of(name: &str) -> Option<ReplyKeys> {
        Some(match name {
            "randomkey" => ReplyKeys::Bulk,
            "blpop" | "brpop" | "blmpop" | "lmpop" | "bzpopmin" | "bzpopmax" | "bzmpop"
            | "zmpop" => ReplyKeys::FirstElement,
            "xread" | "xreadgroup" => ReplyKeys::StreamNames,
            _ => return None,
        })
    }
}

fn is_script_call(spec: &CommandSpec) -> bool {
    matches!(spec.name.as_str(), "eval" | "evalsha" | "fcall")
}

/// The payload of a `$len\r\n...\r\n` frame.
fn bulk_payload(frame: &[u8]) -> Option<&[u8]> {
    let rest = frame.strip_prefix(b"$")?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    rest.get(end + 2..end + 2 + len)
}

fn bulk_frame(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 16);
    crate::protocol::encode::bulk(&mut out, data);
    out.freeze()
}

/// The element frames of any aggregate; `per_entry` is 2 for maps (keys and values).
fn aggregate_elements(frame: &Bytes, per_entry: usize) -> Option<Vec<Bytes>> {
    let header_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let count: usize = std::str::from_utf8(frame.get(1..header_end)?)
        .ok()?
        .parse()
        .ok()?;
    let mut elements = Vec::new();
    let mut offset = header_end + 2;
    for _ in 0..count.checked_mul(per_entry)? {
        let mut scanner = ReplyScanner::new(Limits::default());
        let len = scanner.next_frame_len(frame.get(offset..)?).ok()??;
        elements.push(frame.slice(offset..offset + len));
        offset += len;
    }
    Some(elements)
}

/// `original`'s aggregate header followed by `parts`.
fn rebuild(original: &[u8], parts: &[Bytes]) -> Bytes {
    let header_end = original
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(0, |at| at + 2);
    let mut out = BytesMut::with_capacity(original.len() + 64);
    out.put_slice(&original[..header_end]);
    for part in parts {
        out.put_slice(part);
    }
    out.freeze()
}

impl Proxy {
    /// Runs one request with the layout in force: rewrite, route (with index upkeep where
    /// needed), and reverse-rewrite the reply.
    pub(super) async fn execute_layout(
        self: Arc<Self>,
        active: &ActiveLayout,
        request: Request,
        proto: Proto,
    ) -> Bytes {
        let Some(spec) = self
            .commands
            .lookup(&request.args)
            .filter(|spec| spec.arity_ok(request.args.len()))
        else {
            return self.execute_plain(request, proto).await;
        };
        match spec.name.as_str() {
            "keys" => return self.layout_keys(active, &request.args[1], proto).await,
            "scan" => return self.layout_scan(active, &request.args, proto).await,
            _ => {}
        }
        let name = spec.name.clone();
        let script = is_script_call(spec);
        let in_script =
            !script && !spec.blocks(&request.args) && !spec.flags.has(CommandFlags::NOSCRIPT);
        let split = Kind::of(spec);
        let rewritten = match active.rewrite_request(spec, request) {
            Ok(rewritten) => rewritten,
            Err(reply) => return reply,
        };
        let reply = if rewritten.indexed.is_empty() {
            self.clone()
                .execute_plain(rewritten.request.clone(), proto)
                .await
        } else if in_script {
            self.run_with_upkeep(active, &rewritten, split, proto).await
        } else {
            let reply = self
                .clone()
                .execute_plain(rewritten.request.clone(), proto)
                .await;
            self.refresh_entries(active, &rewritten.indexed, proto)
                .await;
            reply
        };
        if name == "randomkey" {
            return self.randomkey(active, reply, proto).await;
        }
        active.reverse_reply(&name, reply.clone()).unwrap_or(reply)
    }

    async fn randomkey(&self, active: &ActiveLayout, first: Bytes, proto: Proto) -> Bytes {
        let mut reply = first;
        for _ in 0..RANDOMKEY_TRIES {
            match active.reverse_reply("randomkey", reply.clone()) {
                Some(shown) => return shown,
                None => {
                    reply = self
                        .forward(
                            Target::AnyMaster,
                            Bytes::from_static(b"*1\r\n$9\r\nRANDOMKEY\r\n"),
                            proto,
                        )
                        .await;
                }
            }
        }
        // Only internal keys drawn: to a legacy client the keyspace looks empty.
        let mut out = BytesMut::new();
        crate::protocol::encode::null(&mut out, proto);
        out.freeze()
    }

    /// Runs a write on index-backed keys inside the upkeep script, per slot.
    async fn run_with_upkeep(
        &self,
        active: &ActiveLayout,
        rewritten: &RewrittenRequest,
        split: Option<Kind>,
        proto: Proto,
    ) -> Bytes {
        let args = &rewritten.request.args;
        let first_slot = rewritten.keys.first().map(|key| key_slot(&args[key.index]));
        let one_slot = rewritten
            .keys
            .iter()
            .all(|key| Some(key_slot(&args[key.index])) == first_slot);
        let Some(slot) = first_slot else {
            return reply::error("ERR internal: indexed write without keys");
        };
        if one_slot {
            let other_keys: SmallVec<[Bytes; 4]> = rewritten
                .keys
                .iter()
                .map(|key| args[key.index].clone())
                .collect();
            return self
                .upkeep_call(active, slot, &rewritten.indexed, &other_keys, args, proto)
                .await;
        }
        let Some(kind @ (Kind::Count | Kind::Mset)) = split else {
            // Not splittable: let the plain path give the cross-slot answer.
            let keys: Vec<(&[u8], u16)> = rewritten
                .keys
                .iter()
                .map(|k| (&args[k.index][..], key_slot(&args[k.index])))
                .collect();
            return reply::cross_slot(&keys);
        };
        let stride = if kind == Kind::Mset { 2 } else { 1 };
        let mut parts: Vec<(u16, Vec<Bytes>, SmallVec<[IndexedKey; 2]>)> = Vec::new();
        for first in (1..args.len()).step_by(stride) {
            let slot = key_slot(&args[first]);
            let at = match parts.iter().position(|(s, _, _)| *s == slot) {
                Some(at) => at,
                None => {
                    parts.push((slot, vec![args[0].clone()], SmallVec::new()));
                    parts.len() - 1
                }
            };
            let part = &mut parts[at];
            part.1.extend(
                args[first..(first + stride).min(args.len())]
                    .iter()
                    .cloned(),
            );
            part.2.extend(
                rewritten
                    .indexed
                    .iter()
                    .filter(|key| key.arg == first)
                    .cloned(),
            );
        }
        let calls = parts.iter().map(|(slot, part_args, indexed)| async move {
            let keys: SmallVec<[Bytes; 4]> =
                part_args.iter().skip(1).step_by(stride).cloned().collect();
            if indexed.is_empty() {
                let refs: Vec<&[u8]> = part_args.iter().map(|a| &a[..]).collect();
                self.forward(Target::Slot(*slot), encode_request(&refs), proto)
                    .await
            } else {
                self.upkeep_call(active, *slot, indexed, &keys, part_args, proto)
                    .await
            }
        });
        let replies = futures_util::future::join_all(calls).await;
        if let Some(error) = merge::first_error(&replies) {
            return error.clone();
        }
        match kind {
            Kind::Count => {
                let mut total = 0i64;
                for reply in &replies {
                    match merge::integer(reply) {
                        Some(n) => total += n,
                        None => return reply.clone(),
                    }
                }
                merge::integer_frame(total)
            }
            _ => Bytes::from_static(b"+OK\r\n"),
        }
    }

    /// After a command that could not run inside the script: bring the index entries of
    /// `indexed` in line with their records, one script call per slot.
    async fn refresh_entries(&self, active: &ActiveLayout, indexed: &[IndexedKey], proto: Proto) {
        let mut slots: SmallVec<[(u16, SmallVec<[IndexedKey; 2]>); 2]> = SmallVec::new();
        for key in indexed {
            let slot = key_slot(&key.record);
            match slots.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, keys)) => keys.push(key.clone()),
                None => slots.push((slot, SmallVec::from_elem(key.clone(), 1))),
            }
        }
        for (slot, keys) in slots {
            let reply = self.upkeep_call(active, slot, &keys, &[], &[], proto).await;
            if reply.first() == Some(&b'-') {
                tracing::warn!(
                    reply = %String::from_utf8_lossy(&reply).trim_end(),
                    "index refresh after a script failed"
                );
            }
        }
    }

    /// One call of the upkeep script in `slot`: `command` (may be empty: refresh only).
    async fn upkeep_call(
        &self,
        active: &ActiveLayout,
        slot: u16,
        indexed: &[IndexedKey],
        other_keys: &[Bytes],
        command: &[Bytes],
        proto: Proto,
    ) -> Bytes {
        let mut keys: Vec<&[u8]> = Vec::with_capacity(indexed.len() * 2 + other_keys.len());
        for key in indexed {
            keys.push(&key.entry.key);
            keys.push(&key.record);
        }
        keys.extend(other_keys.iter().map(|key| &key[..]));
        let pairs = indexed.len().to_string();
        let numkeys = keys.len().to_string();
        let resp: &[u8] = if proto == Proto::Resp3 { b"3" } else { b"2" };
        let build = |verb: &'static [u8], script: &[u8]| {
            let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + command.len() + 8);
            args.push(verb);
            args.push(script);
            args.push(numkeys.as_bytes());
            args.extend(keys.iter().copied());
            args.push(pairs.as_bytes());
            args.push(resp);
            args.extend(indexed.iter().map(|key| &key.entry.member[..]));
            args.extend(command.iter().map(|arg| &arg[..]));
            encode_request(&args)
        };
        if let Some(sha) = active.sha() {
            let reply = self
                .forward(Target::Slot(slot), build(b"EVALSHA", sha), proto)
                .await;
            if !reply.starts_with(b"-NOSCRIPT") {
                return reply;
            }
        }
        // The node lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
        self.forward(
            Target::Slot(slot),
            build(b"EVAL", UPKEEP_SCRIPT.as_bytes()),
            proto,
        )
        .await
    }
}

/// Start-up work for a layout: load the upkeep script on every master, then check each
/// prefix's marker (and look for legacy data without one). `Err` refuses to start.
pub async fn start(proxy: &Proxy, active: &ActiveLayout) -> Result<(), String> {
    load_script(proxy, active).await;
    for (prefix_id, prefix) in active.layout.prefixes().iter().enumerate() {
        let Some(marker) = active.layout.marker_key(prefix_id) else {
            continue;
        };
        let get = encode_request(&[b"GET", &marker]);
        let reply = proxy
            .forward(Target::Slot(key_slot(&marker)), get, Proto::Resp2)
            .await;
        if reply.first() == Some(&b'-') {
            return Err(format!(
                "cannot read the layout marker {}: {}",
                marker.escape_ascii(),
                String::from_utf8_lossy(&reply).trim_end()
            ));
        }
        let expected = active.layout.layout_name();
        match (bulk_payload(&reply), expected) {
            (Some(found), Some(expected)) if found != expected.as_bytes() => {
                return Err(format!(
                    "prefix '{prefix}': the layout marker {} names layout '{}', but the rule file {} is layout '{expected}'; refusing to start",
                    marker.escape_ascii(),
                    found.escape_ascii(),
                    active.layout.source_name()
                ));
            }
            (Some(_), _) => continue,
            (None, _) => {}
        }
        if active.allow_legacy_data {
            continue;
        }
        if let Some(example) = find_legacy_key(proxy, active, prefix).await? {
            return Err(format!(
                "prefix '{prefix}': legacy keys exist (e.g. '{}') and there is no layout marker {}: run the migration first (slotbridge migrate), or set layout.allow_legacy_data",
                example.escape_ascii(),
                marker.escape_ascii()
            ));
        }
    }
    Ok(())
}

/// Most keys looked at per prefix by the legacy-data check.
pub const LEGACY_CHECK_LIMIT: usize = 10_000;

/// A key under `prefix` that the layout would rename (so: stored under its legacy name),
/// looking at no more than [`LEGACY_CHECK_LIMIT`] keys over all masters.
async fn find_legacy_key(
    proxy: &Proxy,
    active: &ActiveLayout,
    prefix: &str,
) -> Result<Option<Bytes>, String> {
    let masters: Vec<String> = proxy
        .topology
        .routing()
        .map
        .masters()
        .iter()
        .map(|addr| addr.to_string())
        .collect();
    let mut pattern = crate::rewrite::glob::escape_glob(prefix.as_bytes());
    pattern.extend_from_slice(b":*");
    let mut inspected = 0usize;
    for addr in masters {
        let conn = proxy.topology.node(&addr, Proto::Resp2);
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let scan = encode_request(&[b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", b"1000"]);
            let reply = conn
                .call(scan, false)
                .await
                .map_err(|e| format!("legacy-data check on {addr}: {e:?}"))?;
            let (next, keys) = super::listing::parse_scan_reply(&reply)
                .ok_or_else(|| format!("legacy-data check on {addr}: unexpected SCAN reply"))?;
            for key in keys {
                inspected += 1;
                if let Forward::Rewritten(rewritten) = active.layout.forward(&key) {
                    if rewritten.key != key {
                        return Ok(Some(key));
                    }
                }
                if inspected >= LEGACY_CHECK_LIMIT {
                    return Ok(None);
                }
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(None)
}

/// SCRIPT LOAD on every master; the SHA comes from the server.
async fn load_script(proxy: &Proxy, active: &ActiveLayout) {
    let masters: Vec<String> = proxy
        .topology
        .routing()
        .map
        .masters()
        .iter()
        .map(|addr| addr.to_string())
        .collect();
    let load = encode_request(&[b"SCRIPT", b"LOAD", UPKEEP_SCRIPT.as_bytes()]);
    for addr in masters {
        let conn = proxy.topology.node(&addr, Proto::Resp2);
        match conn.call(load.clone(), false).await {
            Ok(reply) => match bulk_payload(&reply) {
                Some(sha) => {
                    let _ = active.script_sha.set(Bytes::copy_from_slice(sha));
                }
                None => tracing::warn!(
                    node = %addr,
                    reply = %String::from_utf8_lossy(&reply).trim_end(),
                    "SCRIPT LOAD of the index upkeep script failed"
                ),
            },
            Err(e) => tracing::warn!(node = %addr, error = ?e, "SCRIPT LOAD failed"),
        }
    }
}

#[cfg(test)]
mod tests;
