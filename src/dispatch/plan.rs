//! How one request is carried out: its [`Plan`], a match on the command's [`Shape`] from
//! the command table, with where its keys send it (one slot, any master, or across slots).
//! Deciding a plan is pure; `Proxy::run` carries it out.

use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{
    CommandSpec, Emulated, FanOut, KeyList, KeyPos, ScriptAdmin, ScriptRun, Shape, SplitKind,
};
use crate::config::Emulation;
use crate::protocol::Request;
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};

use super::compose::sort;
use super::layout::{self, ReplyNames, Rewrite};
use super::{crossslot, Proxy, Target, PUBSUB_HOME_SLOT};

/// The valid slot number in `arg`, as a cluster node reads it.
fn slot_number(arg: &[u8]) -> Option<u16> {
    let slot = crate::protocol::parse_i64(arg)?;
    u16::try_from(slot)
        .ok()
        .filter(|&slot| usize::from(slot) < SLOT_COUNT)
}

/// How one request will be carried out.
pub(super) enum Plan {
    /// The reply is already known (an error, or something answered locally).
    Answer(Bytes),
    /// Forward as is to the master of a slot, or to any master.
    Forward(Target),
    /// Keys span slots and the command can be split per slot and merged.
    Split(SplitKind),
    /// A command that may block: run it on a connection of its own.
    Blocking(Target),
    /// A write on index-backed records of the layout, run with its index upkeep.
    Upkeep(Box<layout::Upkeep>),
    /// KEYS or SCAN under a layout: listed through it, with legacy names.
    Listing(layout::Listing, Arc<layout::ActiveLayout>),
    /// Answered by the proxy as a one-node cluster would.
    Emulate(Emulated),
    /// Answered over every master (KEYS, SCAN, DBSIZE, admin broadcasts).
    Fanout(FanOut),
    /// SCRIPT LOAD/FLUSH/EXISTS over every master.
    ScriptAdmin(ScriptAdmin),
    /// EVAL/EVALSHA routed by key, with script bodies remembered and reloaded.
    Script(ScriptRun, Target),
    /// SORT with BY/GET patterns or a STORE into another slot.
    Sort(Box<sort::SortRequest>),
    /// Keys span slots and the proxy computes the reply (and a STORE's writes), or moves
    /// the data between masters, itself.
    CrossSlot(Box<crossslot::CrossSlotRun>),
}

impl Proxy {
    /// The plan of `request` without the layout's part (see [`Proxy::explain`], which shows
    /// that part on lines of its own).
    pub(super) fn plan_without_layout(
        &self,
        spec: Option<&CommandSpec>,
        request: &Request,
    ) -> Plan {
        let spec = match known(spec, &request.args) {
            Ok(spec) => spec,
            Err(plan) => return plan,
        };
        let mut keys: KeyList = SmallVec::new();
        spec.keys(&request.args, &mut keys);
        self.plan(spec, request, &keys, None)
    }

    /// How `request` (in cluster names, a `spec` command with the key positions `keys`)
    /// is carried out; `layout` is the layout stage's part when it concerns the request.
    /// A `Forward` to one slot is what the client session batches (see [`Proxy::route`]).
    // Inlined into the batched path's one caller: as a call, the plan's move out and the
    // frame cost about 40 instructions of a plain GET's.
    #[inline]
    pub(super) fn plan(
        &self,
        spec: &CommandSpec,
        request: &Request,
        keys: &[KeyPos],
        layout: Option<(&Arc<layout::ActiveLayout>, &Rewrite)>,
    ) -> Plan {
        let args = &request.args;
        if let Some((active, rewrite)) = layout {
            if let ReplyNames::Listed(listing) = rewrite.reply {
                return Plan::Listing(listing, active.clone());
            }
            if !rewrite.indexed.is_empty() {
                let then = || self.plan_shape(spec, args, keys);
                return layout::upkeep_plan(active, spec, request, keys, &rewrite.indexed, then);
            }
        }
        self.plan_shape(spec, args, keys)
    }

    /// The plan of a request of `spec` by the command's shape alone.
    fn plan_shape(&self, spec: &CommandSpec, args: &[Bytes], keys: &[KeyPos]) -> Plan {
        // One match on the shape the command table gave the command: see `command::Shape`.
        match spec.shape {
            Shape::Refused => Plan::Answer(reply::error(
                &reply::refusals::changes_shared_connection(&spec.name),
            )),
            Shape::Sort => match sort::SortRequest::classify(&spec.name, args) {
                Some(Ok(sort))
                    if sort.stores_elsewhere()
                        && self.config.cross_slot.stores == Emulation::Refuse =>
                {
                    let refusal = reply::crossslot::emulation_off("cross_slot.stores");
                    Plan::Answer(reply::error(&refusal))
                }
                Some(Ok(sort)) => Plan::Sort(sort),
                Some(Err(refusal)) => Plan::Answer(refusal),
                None => by_keys(spec, args, keys, Plan::Forward),
            },
            Shape::Emulated(local) => Plan::Emulate(local),
            Shape::FanOut(op) => Plan::Fanout(op),
            Shape::ScriptAdmin(admin) => Plan::ScriptAdmin(admin),
            Shape::Channels => Plan::Forward(Target::Slot(PUBSUB_HOME_SLOT)),
            // An invalid slot gets the node's own error from any master.
            Shape::NodeCluster => {
                Plan::Forward(match args.get(2).and_then(|arg| slot_number(arg)) {
                    Some(slot) => Target::Slot(slot),
                    None => Target::AnyMaster,
                })
            }
            Shape::ShardPublish => Plan::Forward(Target::Slot(key_slot(&args[1]))),
            // Subscriptions live on the client's own connections (client::pubsub); on a
            // shared connection they would swallow every other client's replies.
            Shape::Subscribe => Plan::Answer(reply::error(reply::text::SUBSCRIBE_NEEDS_CLIENT)),
            Shape::Split(kind) => key_target(args, keys).map_or(Plan::Split(kind), Plan::Forward),
            Shape::Script(run) => by_keys(spec, args, keys, |target| Plan::Script(run, target)),
            Shape::Blocking(_) if spec.blocks(args) => key_target(args, keys)
                .map_or_else(|| self.cross_slot_plan(spec, args, keys), Plan::Blocking),
            Shape::Blocking(_)
            | Shape::Forward
            | Shape::ConnectionLocal(_)
            | Shape::Transaction => key_target(args, keys)
                .map_or_else(|| self.cross_slot_plan(spec, args, keys), Plan::Forward),
        }
    }
}

/// `spec` when it is a known command (`Some`) and `args` has an arity it accepts, else
/// the plan that answers as Redis does: unknown command, or wrong number of arguments.
pub(super) fn known<'a>(
    spec: Option<&'a CommandSpec>,
    args: &[Bytes],
) -> Result<&'a CommandSpec, Plan> {
    match spec {
        None => Err(Plan::Answer(reply::unknown_command(args))),
        Some(spec) if !spec.arity_ok(args.len()) => {
            Err(Plan::Answer(reply::wrong_arity(&spec.name)))
        }
        Some(spec) => Ok(spec),
    }
}

/// `then` of where a request of `spec` goes by its keys, or `-CROSSSLOT` when they span
/// slots.
fn by_keys(
    spec: &CommandSpec,
    args: &[Bytes],
    keys: &[KeyPos],
    then: impl FnOnce(Target) -> Plan,
) -> Plan {
    match key_target(args, keys) {
        Some(target) => then(target),
        None => Plan::Answer(cross_slot_error(spec, args)),
    }
}

/// Where a request goes by its keys (at `keys` in `args`): the master of their one slot,
/// or any master for a keyless request; `None` when its keys span slots.
pub(super) fn key_target(args: &[Bytes], keys: &[KeyPos]) -> Option<Target> {
    match common_slot(args, keys) {
        Ok(Some(slot)) => Some(Target::Slot(slot)),
        Ok(None) => Some(Target::AnyMaster),
        Err(()) => None,
    }
}

/// The one slot every key hashes to; `Ok(None)` for a keyless command, `Err` when keys span
/// slots.
fn common_slot(args: &[Bytes], keys: &[KeyPos]) -> Result<Option<u16>, ()> {
    let mut slot = None;
    for key in keys {
        let this = key_slot(&args[key.index]);
        match slot {
            None => slot = Some(this),
            Some(s) if s != this => return Err(()),
            Some(_) => {}
        }
    }
    Ok(slot)
}

/// The `-CROSSSLOT` refusal of a request of `spec` whose keys span slots.
pub(super) fn cross_slot_error(spec: &CommandSpec, args: &[Bytes]) -> Bytes {
    reply::cross_slot(&keys_and_slots(spec, args))
}

/// Each key of a request of `spec` (at its place in `args`) with its slot, in the order
/// the command names them: what a `-CROSSSLOT` refusal lists.
pub fn keys_and_slots<'a>(spec: &CommandSpec, args: &'a [Bytes]) -> Vec<(&'a [u8], u16)> {
    let mut keys: KeyList = SmallVec::new();
    spec.keys(args, &mut keys);
    keys.iter()
        .map(|k| (&args[k.index][..], key_slot(&args[k.index])))
        .collect()
}
