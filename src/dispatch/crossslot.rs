//! Cross-slot reads and stores computed in the proxy (see `crate::crossslot`): each key read
//! on its own master through the forward path (redirects, retries, all keys at once), the
//! reply computed as Redis computes it, and a STORE's writes sent as one MULTI/EXEC on a
//! dedicated connection to the destination's master, as transactions are, so no other
//! client's command lands inside the block. The client's reply goes out only once EXEC
//! has applied the writes.
//!
//! Guarantee: the keys together are not one snapshot (like a split MGET); a destination is
//! replaced whole or not at all.

use bytes::{Bytes, BytesMut};

use crate::command::CommandSpec;
use crate::config::Emulation;
use crate::crossslot;
use crate::protocol::{encode, Proto};
use crate::reply;
use crate::reply::merge::array_elements;
use crate::route::key_slot;

use super::{cross_slot_error, Plan, Proxy, Target};

/// The commands `crossslot` computes that write a destination.
const STORES: &[&str] = &[
    "sunionstore",
    "sinterstore",
    "sdiffstore",
    "zunionstore",
    "zinterstore",
    "zdiffstore",
    "bitop",
    "pfmerge",
];

/// The commands `crossslot` computes that only read.
const READS: &[&str] = &[
    "sunion",
    "sinter",
    "sdiff",
    "sintercard",
    "zunion",
    "zinter",
    "zdiff",
    "zintercard",
    "lcs",
    "pfcount",
];

impl Proxy {
    /// The plan of a request of `spec` whose keys span slots: computed here when
    /// `crossslot` knows the command and its class is emulated, else `-CROSSSLOT` (naming
    /// the setting when emulation is off).
    pub(super) fn cross_slot_plan(&self, spec: &CommandSpec, args: &[Bytes]) -> Plan {
        let name = spec.name.as_str();
        let (setting, emulation) = if STORES.contains(&name) {
            ("cross_slot.stores", self.config.cross_slot.stores)
        } else if READS.contains(&name) {
            ("cross_slot.reads", self.config.cross_slot.reads)
        } else {
            return Plan::Answer(cross_slot_error(spec, args));
        };
        if emulation == Emulation::Refuse {
            return Plan::Answer(reply::error(&reply::crossslot::emulation_off(setting)));
        }
        match crossslot::parse(args) {
            Ok(request) => Plan::CrossSlot(Box::new(request)),
            Err(reply) => Plan::Answer(reply),
        }
    }

    /// Reads every key of `request` on its master, computes the reply and, for a store,
    /// writes the destination before replying.
    pub(super) async fn cross_slot(&self, request: &crossslot::Request, proto: Proto) -> Bytes {
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

    /// Each read's commands, all sent at once (one part per command, each to its key's
    /// master), and the values their replies describe, in read order.
    async fn cross_slot_reads(
        &self,
        request: &crossslot::Request,
        proto: Proto,
    ) -> Result<Vec<crossslot::Value>, Bytes> {
        let commands: Vec<Vec<Vec<Bytes>>> = request.reads.iter().map(|r| r.commands()).collect();
        let mut slots = Vec::new();
        let mut frames = Vec::new();
        for (read, commands) in request.reads.iter().zip(&commands) {
            for command in commands {
                slots.push(key_slot(&read.key));
                frames.push(request_frame(command));
            }
        }
        let size_hint = frames.iter().map(Bytes::len).sum();
        let replies = self
            .upstream
            .forward_each(
                &slots,
                |i, out: &mut BytesMut| out.extend_from_slice(&frames[i]),
                size_hint,
                proto,
            )
            .await;
        let mut values = Vec::with_capacity(request.reads.len());
        let mut at = 0;
        for (read, commands) in request.reads.iter().zip(&commands) {
            let end = at + commands.len();
            let Some(replies) = replies.get(at..end) else {
                return Err(reply::error(reply::crossslot::STORE_NOT_APPLIED));
            };
            values.push(read.value(replies)?);
            at = end;
        }
        Ok(values)
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
        let Some(elements) = array_elements(&exec) else {
            // A null EXEC: the block was discarded.
            return Err(reply::error(reply::crossslot::STORE_NOT_APPLIED));
        };
        match elements.into_iter().find(|element| is_error(element)) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Whether `frame` is an error reply (RESP2 or RESP3).
fn is_error(frame: &[u8]) -> bool {
    matches!(frame.first(), Some(b'-' | b'!'))
}

/// `args` as one RESP request.
fn request_frame(args: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(args.iter().map(|a| a.len() + 16).sum::<usize>() + 16);
    encode::array_header(&mut out, args.len());
    for arg in args {
        encode::bulk(&mut out, arg);
    }
    out.freeze()
}
