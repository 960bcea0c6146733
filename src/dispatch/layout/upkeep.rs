//! Running a command with the layout in force: rewrite, route, index upkeep around
//! index-backed writes (the upkeep script, per slot), and the reverse rewrite of the reply.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::backend::{BackendError, Batch, ReplySink};
use crate::command::{CommandSpec, ScriptRun, Shape, SplitKind};
use crate::protocol::encode::encode_request;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::reply::merge;
use crate::route::key_slot;

use super::super::pinned::{EXEC, MULTI};
use super::super::{scripts, Proxy, Target};
use super::{is_script_call, ActiveLayout, IndexedKey, RewrittenRequest, UPKEEP_SCRIPT};

/// Tries of RANDOMKEY before answering null when it keeps drawing internal keys.
const RANDOMKEY_TRIES: usize = 8;

impl Proxy {
    /// Runs one request with the layout in force: rewrite, route (with index upkeep where
    /// needed), and reverse-rewrite the reply.
    pub(in crate::dispatch) async fn execute_layout(
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
        let blocks = spec.blocks(&request.args);
        let in_script = super::upkeep_in_script(spec, &request.args);
        let split = match spec.shape {
            Shape::Split(kind) => Some(kind),
            _ => None,
        };
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
        } else if let Some(reply) = self
            .exec_with_refresh(spec, &rewritten, proto, blocks)
            .await
        {
            reply
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
                        .upstream
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
        split: Option<SplitKind>,
        proto: Proto,
    ) -> Bytes {
        let args = &rewritten.request.args;
        let first_slot = rewritten.keys.first().map(|key| key_slot(&args[key.index]));
        let one_slot = rewritten
            .keys
            .iter()
            .all(|key| Some(key_slot(&args[key.index])) == first_slot);
        let Some(slot) = first_slot else {
            return reply::error(reply::text::INDEXED_WRITE_WITHOUT_KEYS);
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
        let Some(kind @ (SplitKind::Count | SplitKind::Mset)) = split else {
            // Not splittable: let the plain path give the cross-slot answer.
            let keys: Vec<(&[u8], u16)> = rewritten
                .keys
                .iter()
                .map(|k| (&args[k.index][..], key_slot(&args[k.index])))
                .collect();
            return reply::cross_slot(&keys);
        };
        let stride = if kind == SplitKind::Mset { 2 } else { 1 };
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
                self.upstream
                    .forward(Target::Slot(*slot), encode_request(&refs), proto)
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
            SplitKind::Count => merge::sum_counts(&replies),
            _ => Bytes::from_static(b"+OK\r\n"),
        }
    }

    /// Runs a command that cannot run inside the upkeep script (a script of the client's
    /// own, a `noscript` command) and the refresh of its index entries in one MULTI/EXEC,
    /// written as one piece on the slot's shared connection, so no other request runs
    /// between the two and nothing of it runs without the other. `None` when nothing ran and
    /// the caller must run the two apart: a blocking command (it would not block inside
    /// MULTI), keys in more than one slot, a refusal at queue time (a redirect, the slot
    /// moving), an EVALSHA whose script the node lacks, or the node not reachable.
    async fn exec_with_refresh(
        &self,
        spec: &CommandSpec,
        rewritten: &RewrittenRequest,
        proto: Proto,
        blocks: bool,
    ) -> Option<Bytes> {
        if blocks {
            return None;
        }
        let args = &rewritten.request.args;
        let slot = key_slot(&rewritten.indexed.first()?.record);
        let one_slot = rewritten
            .keys
            .iter()
            .all(|key| key_slot(&args[key.index]) == slot)
            && rewritten
                .indexed
                .iter()
                .all(|key| key_slot(&key.record) == slot);
        if !one_slot {
            return None;
        }
        let conn = self.topology.master_for_slot(slot, proto)?;
        // The body, not its SHA: inside EXEC there is no falling back on NOSCRIPT.
        let refresh = upkeep_frame(
            b"EVAL",
            UPKEEP_SCRIPT.as_bytes(),
            &rewritten.indexed,
            &[],
            &[],
            proto,
        );
        let mut block = BytesMut::with_capacity(rewritten.request.raw.len() + refresh.len() + 32);
        block.extend_from_slice(MULTI);
        block.extend_from_slice(&rewritten.request.raw);
        block.extend_from_slice(&refresh);
        block.extend_from_slice(EXEC);
        if spec.shape == Shape::Script(ScriptRun::Eval) {
            self.scripts.remember(&args[1]);
        }
        crate::metrics::index_upkeep();
        let sink = ReplySink::new();
        conn.send_batch(Batch::joined(block.freeze(), &[0, 1, 2, 3], sink.clone()));
        let mut exec = None;
        let mut taken = Vec::new();
        while exec.is_none() {
            sink.take(&mut taken).await;
            exec = taken.drain(..).find(|delivery| delivery.seq == 3);
        }
        let exec = match exec?.reply {
            Ok(exec) => exec,
            Err(BackendError::NotSent(_)) => return None,
            Err(BackendError::Lost(detail)) => {
                return Some(reply::outcome_unknown(conn.addr(), &detail))
            }
        };
        // An error instead of the array (EXECABORT after a refusal at queue time): nothing ran.
        let replies = merge::array_elements(&exec)?;
        let [command, refresh] = replies.as_slice() else {
            return None;
        };
        if command.starts_with(b"-NOSCRIPT") {
            // Only the refresh ran; the script path loads a remembered body and retries.
            return None;
        }
        if refresh.first() == Some(&b'-') {
            tracing::warn!(
                reply = %String::from_utf8_lossy(refresh).trim_end(),
                "index refresh in the block of a command failed"
            );
        }
        Some(if is_script_call(spec) {
            scripts::with_key_slot_hint(command.clone())
        } else {
            command.clone()
        })
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
        crate::metrics::index_upkeep();
        let build = |verb: &'static [u8], script: &[u8]| {
            upkeep_frame(verb, script, indexed, other_keys, command, proto)
        };
        if let Some(sha) = active.sha() {
            let reply = self
                .upstream
                .forward(Target::Slot(slot), build(b"EVALSHA", sha), proto)
                .await;
            if !reply.starts_with(b"-NOSCRIPT") {
                return reply;
            }
        }
        // The node lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
        self.upstream
            .forward(
                Target::Slot(slot),
                build(b"EVAL", UPKEEP_SCRIPT.as_bytes()),
                proto,
            )
            .await
    }
}

/// One upkeep script call (`verb` EVAL or EVALSHA, `script` its body or SHA) running
/// `command` (empty: refresh only) with the index entries of `indexed`.
pub(super) fn upkeep_frame(
    verb: &[u8],
    script: &[u8],
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
}

/// What a command queued inside MULTI becomes under a layout (see
/// [`ActiveLayout::queued_requests`]).
#[derive(Debug, Clone)]
pub struct QueuedUnderLayout {
    /// The requests to queue on the backend, in order; only the first one's reply is the
    /// command's, the others are index refreshes whose replies are dropped.
    pub requests: SmallVec<[Bytes; 2]>,
    /// Whether a request is an EVALSHA of the upkeep script: the node must have it
    /// loaded before the block runs (see [`ActiveLayout::script_load_request`]).
    pub needs_script: bool,
}

impl ActiveLayout {
    /// The backend requests for `rewritten` (a `spec` command) inside a transaction: the
    /// command itself, wrapped in the upkeep script when it writes an index-backed key,
    /// or followed by a refresh-only call when it cannot run inside a script. Inside
    /// MULTI the refresh runs in the same EXEC, so it is atomic with the command.
    pub fn queued_requests(
        &self,
        spec: &CommandSpec,
        rewritten: &RewrittenRequest,
        proto: Proto,
    ) -> QueuedUnderLayout {
        let mut requests: SmallVec<[Bytes; 2]> = SmallVec::new();
        if rewritten.indexed.is_empty() {
            requests.push(rewritten.request.raw.clone());
            return QueuedUnderLayout {
                requests,
                needs_script: false,
            };
        }
        let (verb, script): (&[u8], &[u8]) = match self.sha() {
            Some(sha) => (b"EVALSHA", sha),
            // SCRIPT LOAD failed at start-up: the body itself always works.
            None => (b"EVAL", UPKEEP_SCRIPT.as_bytes()),
        };
        let args = &rewritten.request.args;
        let in_script = super::upkeep_in_script(spec, args);
        if in_script {
            let keys: SmallVec<[Bytes; 4]> = rewritten
                .keys
                .iter()
                .map(|key| args[key.index].clone())
                .collect();
            requests.push(upkeep_frame(
                verb,
                script,
                &rewritten.indexed,
                &keys,
                args,
                proto,
            ));
        } else {
            requests.push(rewritten.request.raw.clone());
            requests.push(upkeep_frame(
                verb,
                script,
                &rewritten.indexed,
                &[],
                &[],
                proto,
            ));
        }
        QueuedUnderLayout {
            requests,
            needs_script: self.sha().is_some(),
        }
    }

    /// `SCRIPT LOAD` of the upkeep script: sent before a MULTI block whose EVALSHA calls
    /// need it, on the same connection, because a node that lost its script cache would
    /// fail those calls inside EXEC, where there is no falling back to EVAL.
    pub fn script_load_request() -> Bytes {
        encode_request(&[b"SCRIPT", b"LOAD", UPKEEP_SCRIPT.as_bytes()])
    }
}
