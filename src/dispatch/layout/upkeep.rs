//! Running what the layout stage adds to a plan: index upkeep around index-backed writes
//! (the upkeep script, per slot, or a refresh after the command), KEYS and SCAN listed
//! through the layout, and the reverse rewrite of the reply. The upkeep script's call
//! frames are built in `queued`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::backend::{BackendError, Batch, ReplySink};
use crate::command::{CommandSpec, KeyPos, ScriptRun, Shape, SplitKind};
use crate::protocol::encode::encode_request;
use crate::protocol::{Proto, ReplyView, Request};
use crate::reply;
use crate::reply::merge;
use crate::route::key_slot;

use super::super::compose::union::drew_record;
use super::super::pinned::{EXEC, MULTI};
use super::super::{cross_slot_error, scripts, Plan, Proxy, Target};
use super::queued::upkeep_frame;
use super::reply::ReplyKeys;
use super::{is_script_call, ActiveLayout, IndexedKey, Listing, ReplyNames, UPKEEP_SCRIPT};

/// How a write on index-backed records runs with its index upkeep (see the module doc):
/// the plan of such a request.
pub(in crate::dispatch) struct Upkeep {
    active: Arc<ActiveLayout>,
    /// The records it writes, with their index entries.
    indexed: SmallVec<[IndexedKey; 2]>,
    how: UpkeepRun,
}

enum UpkeepRun {
    /// Inside the upkeep script in `slot`, the one slot of its keys, whose cluster names
    /// the script gets as its other keys.
    InScript {
        slot: u16,
        key_names: SmallVec<[Bytes; 4]>,
    },
    /// A DEL/UNLINK (`Count`) or MSET whose keys span slots: one script call per slot.
    SplitInScript(SplitKind),
    /// A command that cannot run inside the script: in one MULTI/EXEC with a refresh in
    /// `block_slot` when it can, else its own plan `then` followed by the refresh.
    Refreshed {
        block_slot: Option<u16>,
        /// An EVAL: its body is remembered, as the script path does.
        remembers_body: bool,
        /// A client's script: its reply gets the key-slot hint.
        script_call: bool,
        then: Plan,
    },
}

/// The plan of `request` (a `spec` command in cluster names, with its key positions
/// `keys`) that writes the index-backed records `indexed`; `then` makes the plan it
/// would have without them.
pub(in crate::dispatch) fn upkeep_plan(
    active: &Arc<ActiveLayout>,
    spec: &CommandSpec,
    request: &Request,
    keys: &[KeyPos],
    indexed: &[IndexedKey],
    then: impl FnOnce() -> Plan,
) -> Plan {
    let args = &request.args;
    let in_one_slot = |slot: u16| keys.iter().all(|key| key_slot(&args[key.index]) == slot);
    let how = if super::upkeep_in_script(spec, args) {
        let Some(slot) = keys.first().map(|key| key_slot(&args[key.index])) else {
            return Plan::Answer(reply::error(reply::text::INDEXED_WRITE_WITHOUT_KEYS));
        };
        match spec.shape {
            _ if in_one_slot(slot) => UpkeepRun::InScript {
                slot,
                key_names: keys.iter().map(|key| args[key.index].clone()).collect(),
            },
            Shape::Split(kind @ (SplitKind::Count | SplitKind::Mset)) => {
                UpkeepRun::SplitInScript(kind)
            }
            // Not splittable: the cross-slot answer the plain plan would give.
            _ => return Plan::Answer(cross_slot_error(spec, args)),
        }
    } else {
        // A blocking command would not block inside MULTI.
        let block_slot = indexed
            .first()
            .map(|key| key_slot(&key.record))
            .filter(|&slot| !spec.blocks(args) && in_one_slot(slot))
            .filter(|&slot| indexed.iter().all(|key| key_slot(&key.record) == slot));
        UpkeepRun::Refreshed {
            block_slot,
            remembers_body: spec.shape == Shape::Script(ScriptRun::Eval),
            script_call: is_script_call(spec),
            then: then(),
        }
    };
    Plan::Upkeep(Box::new(Upkeep {
        active: active.clone(),
        indexed: indexed.iter().cloned().collect(),
        how,
    }))
}

impl Upkeep {
    /// The slot and frame of this upkeep when the client session may batch it like a
    /// plain forward: one call of the loaded upkeep script (EVALSHA) in one slot, records
    /// and index entries included; `args` is the command in cluster names.
    pub(in crate::dispatch) fn batched(
        &self,
        args: &[Bytes],
        proto: Proto,
    ) -> Option<(u16, Bytes)> {
        let UpkeepRun::InScript { slot, key_names } = &self.how else {
            return None;
        };
        if self
            .indexed
            .iter()
            .any(|key| key_slot(&key.entry.key) != *slot)
        {
            return None;
        }
        let sha = self.active.sha()?;
        let frame = upkeep_frame(b"EVALSHA", sha, &self.indexed, key_names, args, proto);
        Some((*slot, frame))
    }
}

impl Proxy {
    /// Runs `request` (in cluster names) with the index upkeep `upkeep` plans.
    pub(in crate::dispatch) async fn run_upkeep(
        self: Arc<Self>,
        upkeep: Upkeep,
        request: Request,
        proto: Proto,
    ) -> Bytes {
        let Upkeep {
            active,
            indexed,
            how,
        } = upkeep;
        match how {
            UpkeepRun::InScript { slot, key_names } => {
                self.upkeep_call(&active, slot, &indexed, &key_names, &request.args, proto)
                    .await
            }
            UpkeepRun::SplitInScript(kind) => {
                self.split_with_upkeep(&active, kind, &indexed, &request.args, proto)
                    .await
            }
            UpkeepRun::Refreshed {
                block_slot,
                remembers_body,
                script_call,
                then,
            } => {
                let block = Refresh {
                    remembers_body,
                    script_call,
                };
                if let Some(slot) = block_slot {
                    let ran = self.exec_with_refresh(slot, &indexed, &request, block, proto);
                    if let Some(reply) = ran.await {
                        return reply;
                    }
                }
                let reply = Box::pin(self.clone().run(then, request, proto)).await;
                self.refresh_entries(&active, &indexed, proto).await;
                reply
            }
        }
    }

    /// KEYS or SCAN (`request`) listed through the layout, with legacy names (and, during
    /// a live migration, the source's names: see `compose::union`).
    pub(in crate::dispatch) async fn run_listing(
        &self,
        listing: Listing,
        active: &ActiveLayout,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        match listing {
            Listing::Keys => self.keys_listing(Some(active), request, proto).await,
            Listing::Scan => self.scan_listing(Some(active), &request.args, proto).await,
        }
    }

    /// `reply` with the key names `names` says it carries shown as legacy names;
    /// RANDOMKEY draws again while it draws an internal key.
    pub(in crate::dispatch) async fn show_reply(
        &self,
        active: &ActiveLayout,
        names: ReplyNames,
        reply: Bytes,
        proto: Proto,
    ) -> Bytes {
        match names {
            ReplyNames::Rewritten(ReplyKeys::Bulk) => {
                self.random_key_union(self.randomkey(active, reply, proto), proto)
                    .await
            }
            ReplyNames::Rewritten(keys) => {
                active.reverse_keys(keys, reply.clone()).unwrap_or(reply)
            }
            ReplyNames::Unchanged | ReplyNames::Listed(_) => reply,
        }
    }

    /// RANDOMKEY under the layout: a key clients see, under its legacy name; the layout's
    /// own keys and records of live moves are drawn again, master by master.
    async fn randomkey(&self, active: &ActiveLayout, first: Bytes, proto: Proto) -> Bytes {
        let shown = |frame: &Bytes| match drew_record(frame) {
            true => None,
            false => active.reverse_keys(ReplyKeys::Bulk, frame.clone()),
        };
        if let Some(shown) = shown(&first) {
            return shown;
        }
        let request = Bytes::from_static(b"*1\r\n$9\r\nRANDOMKEY\r\n");
        self.target_random_key(request, proto, shown).await
    }

    /// A DEL/UNLINK or MSET whose keys span slots, per slot, each part with an index-backed
    /// record inside the upkeep script.
    async fn split_with_upkeep(
        &self,
        active: &ActiveLayout,
        kind: SplitKind,
        indexed: &[IndexedKey],
        args: &[Bytes],
        proto: Proto,
    ) -> Bytes {
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
            part.2
                .extend(indexed.iter().filter(|key| key.arg == first).cloned());
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
    /// own, a `noscript` command) and the refresh of its index entries (`indexed`, in
    /// `slot` with every key of `request`) in one MULTI/EXEC, written as one piece on the
    /// slot's shared connection, so no other request runs between the two and nothing of
    /// it runs without the other. `None` when nothing ran and the caller must run the two
    /// apart: a refusal at queue time (a redirect, the slot moving), an EVALSHA whose
    /// script the node lacks, or the node not reachable. (A blocking command, which would
    /// not block inside MULTI, and keys in more than one slot are planned apart.)
    async fn exec_with_refresh(
        &self,
        slot: u16,
        indexed: &[IndexedKey],
        request: &Request,
        block: Refresh,
        proto: Proto,
    ) -> Option<Bytes> {
        let args = &request.args;
        let conn = self.topology.master_for_slot(slot, proto)?;
        // The body, not its SHA: inside EXEC there is no falling back on NOSCRIPT.
        let refresh = upkeep_frame(b"EVAL", UPKEEP_SCRIPT.as_bytes(), indexed, &[], &[], proto);
        let mut frames = BytesMut::with_capacity(request.raw.len() + refresh.len() + 32);
        frames.extend_from_slice(MULTI);
        frames.extend_from_slice(&request.raw);
        frames.extend_from_slice(&refresh);
        frames.extend_from_slice(EXEC);
        if block.remembers_body {
            self.scripts.remember(&args[1]);
        }
        crate::metrics::index_upkeep();
        let sink = ReplySink::new();
        conn.send_batch(Batch::joined(frames.freeze(), &[0, 1, 2, 3], sink.clone()));
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
        let [command, refresh] = ReplyView::element_frames(&exec)?.exactly::<2>()?;
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
        let command = exec.slice_ref(command);
        Some(if block.script_call {
            scripts::with_key_slot_hint(command)
        } else {
            command
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

/// What the MULTI/EXEC of a command with its refresh does besides sending the block.
#[derive(Debug, Clone, Copy)]
struct Refresh {
    /// The command is an EVAL: its body is remembered, as the script path does.
    remembers_body: bool,
    /// The command is a client's script: its reply gets the key-slot hint.
    script_call: bool,
}
