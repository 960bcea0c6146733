//! The queue-time checks of a command between MULTI and EXEC, as Redis makes them
//! (existence, arity, `no_multi`; the policy and ACL are the session's access check), plus the proxy's own: commands it
//! answers itself, commands that span masters, and the transaction's one slot.

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandFlags, CommandSpec};
use crate::config::CrossSlotTransactions;
use crate::dispatch::{keys_and_slots, Proxy};
use crate::protocol::{Proto, Request};
use crate::reply;

use super::{Admitted, Transaction, NOT_IN_MULTI};
use crate::upstream::block::Queued;

impl Transaction {
    /// The command as it will be queued, if it may join the transaction.
    pub(super) fn admit(
        &mut self,
        proxy: &Proxy,
        proto: Proto,
        request: &Request,
    ) -> Result<Admitted, Bytes> {
        let spec = proxy
            .commands
            .lookup(&request.args)
            .ok_or_else(|| reply::unknown_command(&request.args))?;
        if !spec.arity_ok(request.args.len()) {
            return Err(reply::wrong_arity(&spec.name));
        }
        // The policy and ACL were checked by the session (see `Transaction::queues`).
        if spec.flags.has(CommandFlags::NO_MULTI) {
            return Err(reply::error(NOT_IN_MULTI));
        }
        // Which connection commands are answered at EXEC and which may not be queued is the
        // command's shape (see `command::Shape`).
        if spec.shape.answered_at_exec() {
            return Ok(Admitted::Local);
        }
        if spec.shape.refused_in_multi() {
            return Err(reply::error(&reply::transaction::not_in_multi(&spec.name)));
        }
        if Proxy::spans_masters(spec) {
            return Err(reply::error(&reply::transaction::spans_masters_in_multi(
                &spec.name,
            )));
        }
        if crate::dispatch::sort_runs_in_steps(&request.args) {
            return Err(reply::error(&reply::transaction::sort_steps_in_multi(
                &spec.name,
            )));
        }
        let (args, queued) = match proxy.layout.as_deref() {
            Some(active) => {
                let rewritten = active.rewrite_request(spec, request.clone())?;
                let under = active.queued_requests(spec, &rewritten, proto);
                let queued = Queued {
                    requests: under.requests,
                    slot: None,
                    reverse: Some(spec.name.clone()),
                    needs_script: under.needs_script,
                };
                (rewritten.request.args, queued)
            }
            None => {
                let queued = Queued {
                    requests: SmallVec::from_elem(request.raw.clone(), 1),
                    slot: None,
                    reverse: None,
                    needs_script: false,
                };
                (request.args.clone(), queued)
            }
        };
        let slot = self.bind_slot(proxy, spec, &args)?;
        Ok(Admitted::Block {
            queued: Queued { slot, ..queued },
            writes: spec.is_write_or_may_replicate(),
        })
    }

    /// Checks that the keys of `args` (cluster names) fit the transaction's slot, binding
    /// it on the first keyed command; the command's slot (`None`: keyless).
    fn bind_slot(
        &mut self,
        proxy: &Proxy,
        spec: &CommandSpec,
        args: &[Bytes],
    ) -> Result<Option<u16>, Bytes> {
        let named = keys_and_slots(spec, args);
        let Some(&(first_key, slot)) = named.first() else {
            return Ok(None);
        };
        if named.iter().any(|&(_, s)| s != slot) {
            return Err(reply::cross_slot(&named));
        }
        // The slot the transaction is bound to: the watched one first.
        let bound = match (
            self.watch.as_ref().and_then(|watch| watch.parts.first()),
            self.multi.as_ref().and_then(|q| q.slot.as_ref()),
        ) {
            (Some(part), _) => Some((part.slot, part.first_key.clone())),
            (None, Some((s, key))) => Some((*s, key.clone())),
            (None, None) => None,
        };
        match bound {
            Some((bound_slot, _)) if bound_slot == slot => {}
            Some((bound_slot, bound_key)) => {
                // Under `split` each slot runs its own block; after a WATCH, every watch
                // is checked first (see `watch`).
                let split = proxy.config.cross_slot_transactions == CrossSlotTransactions::Split;
                if !split {
                    let mut all = vec![(&bound_key[..], bound_slot)];
                    all.extend(named.iter().copied());
                    return Err(reply::cross_slot(&all));
                }
            }
            None => {
                if let Some(queue) = &mut self.multi {
                    queue.slot = Some((slot, Bytes::copy_from_slice(first_key)));
                }
            }
        }
        if spec.is_write() {
            self.last_write_slot = Some(slot);
        }
        Ok(Some(slot))
    }
}
