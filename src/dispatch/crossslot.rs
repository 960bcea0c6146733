//! Cross-slot reads and stores computed in the proxy (see `crate::crossslot`): each key read
//! on its own master through the forward path (redirects, retries, all keys at once), the
//! reply computed as Redis computes it, and a STORE's writes sent as one MULTI/EXEC on a
//! dedicated connection to the destination's master, as transactions are, so no other
//! client's command lands inside the block. The client's reply goes out only once EXEC
//! has applied the writes. Moves (RENAME, SMOVE, LMOVE... and COPY) run step by step in
//! `moves`; multi-key pops probe, pop and (the blocking ones) wait in `blocking`.
//!
//! Guarantee: the keys together are not one snapshot (like a split MGET); a destination is
//! replaced whole or not at all; a move copies before it removes, so a failure between
//! duplicates and never loses (see `crossslot::moves`). Which class a command belongs to,
//! and so which setting turns it off, is its `command::CrossSlot`.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use super::forward::PARTS_INLINE;
use crate::command::{CommandSpec, CrossSlot, KeyList, KeyPos};
use crate::config::Emulation;
use crate::crossslot;
use crate::crossslot::moves::request_frame;
use crate::protocol::{Proto, ReplyView};
use crate::reply;
use crate::route::{key_slot, tag_in_slot};

use super::{cross_slot_error, key_target, Plan, Proxy, Target};

mod blocking;
mod moves;
mod streams;

/// A cross-slot command the proxy carries out itself.
pub(super) enum CrossSlotRun {
    /// Read every key, compute the reply (and a store's writes).
    Compute(crossslot::Request),
    /// Copy to the destination, then remove from the source (see `crossslot::moves`).
    Move(crossslot::moves::MoveRequest),
    /// The source's master computes the result, the destination's stores it (see
    /// `crossslot::SourceStore`).
    SourceStore(crossslot::SourceStore),
    /// Pop the first key in order with data, else wait on them all, or answer null for
    /// LMPOP and ZMPOP (see `crossslot::blocking`).
    BlockingPop(crossslot::blocking::BlockingPop),
    /// XREAD: every stream probed, else (with BLOCK) a wait on them all (see
    /// `crossslot::streams`).
    Streams(crossslot::streams::StreamRead),
}

impl CrossSlotRun {
    /// How it runs, for EXPLAIN.
    pub(super) fn route(&self) -> &'static str {
        match self {
            CrossSlotRun::Compute(_) => {
                "each key read on its master, computed by the proxy, a STORE as one MULTI/EXEC"
            }
            CrossSlotRun::Move(_) => {
                "copied to the destination's master, then removed from the source's \
                 (a failure between duplicates, never loses)"
            }
            CrossSlotRun::SourceStore(_) => {
                "computed on the source's master, the destination written as one MULTI/EXEC"
            }
            CrossSlotRun::BlockingPop(pop) if !pop.blocks => {
                "every key probed on its master, the first with data popped, else the null array"
            }
            CrossSlotRun::BlockingPop(_) => {
                "every key probed on its master, the first with data popped, else a wait \
                 that takes nothing on every key (sorted sets polled)"
            }
            CrossSlotRun::Streams(read) if read.block.is_none() => {
                "every stream read on its master, those with entries replied in order"
            }
            CrossSlotRun::Streams(_) => {
                "every stream read on its master, those with entries replied in order, else \
                 a wait on every stream"
            }
        }
    }
}

impl Proxy {
    /// Whether a request of `spec` is a store or a move this proxy carries out in steps
    /// across slots (see `CrossSlot::runs_in_steps`). Under a layout the client's names
    /// are not the names that decide the slots, so every such command counts.
    pub fn runs_in_steps_across_slots(&self, spec: &CommandSpec, args: &[Bytes]) -> bool {
        if !spec.cross_slot.is_some_and(CrossSlot::runs_in_steps) {
            return false;
        }
        let mut keys = KeyList::new();
        spec.keys(args, &mut keys);
        // GEORADIUS without STORE names one key: nothing to run in steps.
        keys.len() > 1 && (self.layout.is_some() || key_target(args, &keys).is_none())
    }

    /// The plan of a request of `spec` whose keys span slots: carried out here when the
    /// command has a cross-slot class (see `command::CrossSlot`) that is emulated, else
    /// `-CROSSSLOT` (naming the setting or the reason when the class is refused). `keys`
    /// are the request's key positions, as the plan found them.
    pub(super) fn cross_slot_plan(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        keys: &[KeyPos],
    ) -> Plan {
        let settings = &self.config.cross_slot;
        let (setting, emulation) = match spec.cross_slot {
            Some(CrossSlot::Read) => ("cross_slot.reads", settings.reads),
            Some(CrossSlot::Store) => ("cross_slot.stores", settings.stores),
            Some(CrossSlot::Move) => ("cross_slot.moves", settings.moves),
            Some(CrossSlot::Blocking | CrossSlot::Pop) => {
                ("cross_slot.blocking", settings.blocking)
            }
            Some(CrossSlot::Streams) if spec.blocks(args) => {
                ("cross_slot.blocking", settings.blocking)
            }
            Some(CrossSlot::Streams) => ("cross_slot.reads", settings.reads),
            Some(CrossSlot::AllOrNothing) => {
                return Plan::Answer(reply::error(reply::crossslot::MSETNX_ACROSS_SLOTS))
            }
            None => return Plan::Answer(cross_slot_error(spec, args)),
        };
        if emulation == Emulation::Refuse {
            return Plan::Answer(reply::error(&reply::crossslot::emulation_off(setting)));
        }
        // A read is one of the computed commands: the parsers of the other classes'
        // commands need not look at it.
        let run = if spec.cross_slot == Some(CrossSlot::Read) {
            crossslot::parse(args).map(CrossSlotRun::Compute)
        } else if let Some(parsed) = crossslot::moves::parse_move(args) {
            parsed.map(CrossSlotRun::Move)
        } else if let Some(parsed) = crossslot::blocking::parse_blocking_pop(args) {
            parsed.map(CrossSlotRun::BlockingPop)
        } else if let Some(parsed) = crossslot::streams::parse_stream_read(args) {
            parsed.map(CrossSlotRun::Streams)
        } else if let Some(store) = crossslot::parse_source_store(args, keys) {
            Ok(CrossSlotRun::SourceStore(store))
        } else {
            crossslot::parse(args).map(CrossSlotRun::Compute)
        };
        match run {
            Ok(run) => Plan::CrossSlot(Box::new(run)),
            Err(reply) => Plan::Answer(reply),
        }
    }

    /// Carries out a cross-slot command: a move, or a computation.
    pub(super) async fn cross_slot(&self, run: &CrossSlotRun, proto: Proto) -> Bytes {
        match run {
            CrossSlotRun::Compute(request) => self.cross_slot_compute(request, proto).await,
            CrossSlotRun::Move(request) => self.cross_slot_move(request, proto).await,
            CrossSlotRun::SourceStore(store) => self.cross_slot_source_store(store, proto).await,
            CrossSlotRun::BlockingPop(pop) if !pop.blocks => self.cross_slot_pop(pop, proto).await,
            CrossSlotRun::BlockingPop(pop) => self.cross_slot_blocking_pop(pop, proto).await,
            CrossSlotRun::Streams(read) => self.cross_slot_stream_read(read, proto).await,
        }
    }

    /// Reads every key of `request` on its master, computes the reply and, for a store,
    /// writes the destination before replying.
    async fn cross_slot_compute(&self, request: &crossslot::Request, proto: Proto) -> Bytes {
        let values = match self.cross_slot_reads(request, proto).await {
            Ok(values) => values,
            Err(reply) => return reply,
        };
        let limits = self.config.cross_slot.limits();
        let outcome = crossslot::compute(request, &values, proto, &limits);
        if outcome.writes.is_empty() {
            return outcome.reply;
        }
        let Some(destination) = request.destination.as_ref() else {
            return reply::error(reply::crossslot::STORE_NOT_APPLIED);
        };
        let target = Target::Slot(key_slot(destination));
        match self.cross_slot_writes(target, &outcome.writes, proto).await {
            Ok(()) => outcome.reply,
            Err(error) => error,
        }
    }

    /// Every read's value, in read order: each key read on its master, all at once; a
    /// scored read that met `WRONGTYPE` is read again as a set, in a second round.
    async fn cross_slot_reads(
        &self,
        request: &crossslot::Request,
        proto: Proto,
    ) -> Result<Vec<crossslot::Value>, Bytes> {
        let mut values = self.read_round(&request.reads, proto).await?;
        let (at, again): (Vec<usize>, Vec<crossslot::Read>) = request
            .reads
            .iter()
            .zip(&values)
            .enumerate()
            .filter(|(_, (_, value))| matches!(value, crossslot::Value::WrongType))
            .filter_map(|(at, (read, _))| Some((at, read.as_set()?)))
            .unzip();
        if !again.is_empty() {
            let sets = self.read_round(&again, proto).await?;
            for (at, value) in at.into_iter().zip(sets) {
                if let Some(slot) = values.get_mut(at) {
                    *slot = value;
                }
            }
        }
        Ok(values)
    }

    /// One command per read, all sent at once (one part each, to its key's master), and
    /// the values their replies describe, in read order.
    async fn read_round(
        &self,
        reads: &[crossslot::Read],
        proto: Proto,
    ) -> Result<Vec<crossslot::Value>, Bytes> {
        let slots: SmallVec<[u16; PARTS_INLINE]> =
            reads.iter().map(|read| key_slot(&read.key)).collect();
        // Each read is framed straight into the one buffer of the round: a header, the
        // key, and at most 48 bytes of fixed arguments.
        let size_hint = reads.iter().map(|read| read.key.len() + 64).sum();
        let replies = self
            .upstream
            .forward_each(
                &slots,
                |i, out: &mut BytesMut| reads[i].frame_into(out),
                size_hint,
                proto,
            )
            .await;
        if replies.len() != reads.len() {
            return Err(reply::error(reply::crossslot::STORE_NOT_APPLIED));
        }
        reads
            .iter()
            .zip(&replies)
            .map(|(read, reply)| read.value(reply))
            .collect()
    }

    /// Runs `store` on the source's master into a scratch key of its slot, then writes the
    /// result to the destination's master before replying.
    async fn cross_slot_source_store(&self, store: &crossslot::SourceStore, proto: Proto) -> Bytes {
        let source_slot = key_slot(&store.source);
        let scratch = crossslot::SourceStore::scratch_key(tag_in_slot(source_slot));
        let max_members = self.config.cross_slot.max_members;
        let script = request_frame(&store.script(&scratch, max_members));
        // The script's reply is read in RESP2; the count is the same frame in RESP3.
        let reply = self
            .upstream
            .forward(Target::Slot(source_slot), script, Proto::Resp2)
            .await;
        let (reply, writes) = match store.outcome(&reply, max_members) {
            Ok(outcome) => outcome,
            Err(reply) => return reply,
        };
        let target = Target::Slot(key_slot(&store.destination));
        match self.cross_slot_writes(target, &writes, proto).await {
            Ok(()) => reply,
            Err(error) => error,
        }
    }

    /// Sends a store's writes to `target`'s master: one command as it is, or the
    /// `MULTI` ... `EXEC` block on a dedicated connection. `Err` is the client's reply.
    async fn cross_slot_writes(
        &self,
        target: Target,
        writes: &[Vec<Bytes>],
        proto: Proto,
    ) -> Result<(), Bytes> {
        let is = |command: Option<&Vec<Bytes>>, name: &[u8]| {
            command
                .and_then(|c| c.first())
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        };
        if let [write] = writes {
            let reply = self
                .upstream
                .forward(target, request_frame(write), proto)
                .await;
            return if is_error(&reply) { Err(reply) } else { Ok(()) };
        }
        let inner = match writes {
            [_, inner @ .., _] if is(writes.first(), b"MULTI") && is(writes.last(), b"EXEC") => {
                inner
            }
            _ => return Err(reply::error(reply::crossslot::STORE_NOT_APPLIED)),
        };
        let commands: Vec<Bytes> = inner.iter().map(|c| request_frame(c)).collect();
        let exec = self
            .upstream
            .exec_block(target, &[], &commands, None, None, proto)
            .await;
        if is_error(&exec) {
            return Err(exec);
        }
        let Some(mut elements) = ReplyView::element_frames(&exec) else {
            // A null EXEC: the block was discarded.
            return Err(reply::error(reply::crossslot::STORE_NOT_APPLIED));
        };
        match elements.find(|element| is_error(element)) {
            Some(error) => Err(exec.slice_ref(error)),
            None => Ok(()),
        }
    }
}

/// Whether `frame` is an error reply (RESP2 or RESP3).
fn is_error(frame: &[u8]) -> bool {
    matches!(frame.first(), Some(b'-' | b'!'))
}
