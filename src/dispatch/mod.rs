//! The orchestrator: the one place where the stages meet. A request goes in, its reply
//! comes out: command lookup -> key positions -> layout stage (legacy names to cluster
//! names, when a layout is loaded and concerns the request) -> plan (one slot, split by
//! slot, any master, answered here) -> backend (with redirects and retries) -> merge ->
//! the reply's key names back as the layout stage recorded. The plan is a match on the
//! command's [`Shape`], decided with the command table; one path for every request, the
//! client session batching the plans that forward to one slot (see [`Proxy::route`]).
//!
//! Connection-level state (protocol version, client name, transactions) is the client
//! session's; everything here is shared by all clients and read-only after start-up.

mod compose;
mod crossslot;
pub mod database;
mod direct;
mod explain;
mod functions;
pub mod layout;
mod multikey;
mod scripts;
mod snapshot;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::{BoxFuture, Either};
use smallvec::SmallVec;

use crate::command::{
    CommandSpec, Emulated, FanOut, KeyList, KeyPos, ScriptAdmin, ScriptRun, Shape, SplitKind,
};
use crate::config::Emulation;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};
// The concrete layer's redirects and pinned connections, under the names the stages
// here use.
use crate::upstream::{forward, pinned};

pub use crate::topology::PUBSUB_HOME_SLOT;
use compose::{scan, sort};
pub use direct::{Direct, DirectKind, Forwardable, Route};
pub use explain::{Explanation, SessionShape, FIELDS as EXPLAIN_FIELDS};
pub use forward::{is_final, Target};
use layout::{Refused, ReplyNames, Rewrite};
pub use pinned::{watch_failed, BlockedOn, WatchPin, BLOCKED_ON};
pub use scan::{MAX_SCAN_MASTERS, NODE_CURSOR_BITS};
pub use scripts::ScriptCache;
pub use snapshot::{Builder, Fixed, Proxy};

/// Whether `spec` runs a client's script (EVAL, EVALSHA, FCALL and their `_RO` forms):
/// it runs on a connection of its own (see `Upstream::run_script_alone`), so the session runs
/// it alone, as a sequence point, to keep the client's order.
pub fn runs_a_script(spec: &CommandSpec) -> bool {
    matches!(spec.shape, Shape::Script(_))
}

/// Whether `args` is a SORT or SORT_RO the proxy runs in several steps (BY or GET
/// patterns, STORE into another slot): the session runs it alone, as a sequence point.
pub fn sort_runs_in_steps(args: &[Bytes]) -> bool {
    let name = if args[0].eq_ignore_ascii_case(b"sort") {
        "sort"
    } else if args[0].eq_ignore_ascii_case(b"sort_ro") {
        "sort_ro"
    } else {
        return false;
    };
    matches!(sort::SortRequest::classify(name, args), Some(Ok(_)))
}

/// Whether the session runs a request of `spec` alone, as a sequence point: it may block
/// (a dedicated connection), runs a client's script (a connection of its own), is a SORT
/// run in steps (its pattern reads and STORE must not overtake, or be overtaken by, the
/// requests around it), or may switch the protocol (HELLO, RESET).
pub fn runs_alone(spec: &CommandSpec, args: &[Bytes]) -> bool {
    match spec.shape {
        Shape::Sort => sort_runs_in_steps(args),
        Shape::Script(_) => true,
        shape => shape.may_switch_protocol() || shape.blocks(args),
    }
}

/// Commands that turn the connection they arrive on into something else (the script
/// debugger's session, a MONITOR or replication stream, a replica's link): on a backend
/// connection shared by many clients every later reply on it would be wrong. Refused
/// whatever the policy says; the policy's own refusal comes first for those it denies.
pub fn changes_its_connection(spec: &CommandSpec) -> bool {
    spec.shape == Shape::Refused
}

/// The valid slot number in `arg`, as a cluster node reads it.
fn slot_number(arg: &[u8]) -> Option<u16> {
    let slot = crate::protocol::parse_i64(arg)?;
    u16::try_from(slot)
        .ok()
        .filter(|&slot| usize::from(slot) < SLOT_COUNT)
}

/// A request after the layout stage and the plan (opaque outside `dispatch`: the routing
/// hands it back to [`Proxy::execute_indexed`] so a request is staged once).
pub struct Staged {
    plan: Plan,
    /// The layout's part: `None` when no layout is loaded or it leaves the request alone.
    layout: Option<Staging>,
}

/// What the layout stage leaves for after the plan: what to count once the request is
/// sent, the request to send, and how to show the reply.
struct Staging {
    active: Arc<layout::ActiveLayout>,
    renamed: Option<Request>,
    reply: ReplyNames,
    counts: layout::RewriteCounts,
}

/// How one request will be carried out.
enum Plan {
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
    /// The addresses of the masters in the current slot map, in its order.
    pub(crate) fn master_addrs(&self) -> Vec<String> {
        self.topology
            .routing()
            .map
            .masters()
            .iter()
            .map(|addr| addr.to_string())
            .collect()
    }

    /// Runs one request and returns its complete reply frame.
    pub async fn execute(self: Arc<Self>, request: Request, proto: Proto) -> Bytes {
        self.execute_as(request, proto, None).await
    }

    /// Like [`Proxy::execute`], with the command policy and `user`'s ACL checked first
    /// (`None`: no restrictions). The checks run now, before the returned future is first
    /// polled, so the future does not borrow `user`. ACL key patterns see the names the
    /// client sent (legacy names, before any layout rewrite).
    pub fn execute_as(
        self: Arc<Self>,
        request: Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> impl std::future::Future<Output = Bytes> + Send + 'static {
        let command = self.commands.lookup_index(&request.args);
        self.execute_indexed(command, request, proto, user, None)
    }

    /// Like [`Proxy::execute_as`] for a request whose command-table index is known: one name
    /// lookup per command serves the checks, the plan and the metrics.
    pub fn execute_indexed(
        self: Arc<Self>,
        command: Option<usize>,
        request: Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
        staged: Option<Box<Staged>>,
    ) -> impl std::future::Future<Output = Bytes> + Send + 'static {
        let refused = self.admit_spec(command.and_then(|i| self.commands.spec(i)), &request, user);
        async move {
            let started = Instant::now();
            let this = self.clone();
            let spec = command.and_then(|i| this.commands.spec(i));
            let reply = match refused {
                Some(refusal) => refusal,
                None => self.execute_spec(spec, request, proto, staged).await,
            };
            this.command_metrics.record(command, &reply, started);
            reply
        }
    }

    /// Whether the proxy runs `spec` on every master or answers it from all of them (KEYS,
    /// DBSIZE, FLUSHALL, INFO, SCRIPT LOAD...): such a command cannot join one node's
    /// MULTI block without acting on, or seeing, that node only.
    pub fn spans_masters(spec: &CommandSpec) -> bool {
        spec.shape.spans_masters()
    }

    /// The refusal for a command the policy or the user's ACL does not allow (`None`:
    /// allowed, or not a known command with a valid arity, which the caller answers).
    /// ACL key patterns see the names the client sent.
    pub fn admit(&self, request: &Request, user: Option<&crate::auth::User>) -> Option<Bytes> {
        self.admit_spec(self.commands.lookup(&request.args), request, user)
    }

    fn admit_spec(
        &self,
        spec: Option<&CommandSpec>,
        request: &Request,
        user: Option<&crate::auth::User>,
    ) -> Option<Bytes> {
        let args = &request.args;
        let spec = spec?;
        if !spec.arity_ok(args.len()) {
            return None;
        }
        if let Some(refusal) = self.policy_refusal(spec, args) {
            return Some(refusal);
        }
        Self::user_refusal(spec, request, user)
    }

    /// The command policy's refusal of a request of `spec`: none for `REPLICAOF NO ONE`,
    /// which the proxy answers itself without reaching a master (the policy refuses
    /// REPLICAOF for what it would do to the cluster).
    fn policy_refusal(&self, spec: &CommandSpec, args: &[Bytes]) -> Option<Bytes> {
        self.policy
            .refusal(&spec.name)
            .filter(|_| !Self::is_replicaof_no_one(spec, args))
    }

    /// The refusal for a command `user`'s ACL does not allow (`None`: allowed, or no user
    /// restrictions). ACL key patterns and channel rules see the names the client sent.
    fn user_refusal(
        spec: &CommandSpec,
        request: &Request,
        user: Option<&crate::auth::User>,
    ) -> Option<Bytes> {
        let args = &request.args;
        let user = user.filter(|user| !user.is_unrestricted())?;
        if let Some(denial) = user.denial(spec, args) {
            return Some(reply::error(&denial.text(&spec.name)));
        }
        if !user.may_access_every_key() {
            // The keys SORT's patterns form are known only once it runs, so Redis refuses
            // the patterns themselves to a user without every key.
            if let Some(text) = sort::pattern_denial(&spec.name, args) {
                return Some(reply::error(text));
            }
        }
        None
    }

    /// The future that runs one request of `spec` (`None`: not a known command): the
    /// layout stage and the plan are made now, or were by the routing (`staged`); the run, and the reply shown as the layout
    /// stage says. The layout's part runs boxed: every command's future is moved into the
    /// session's reply queue, and most commands have no layout part to carry.
    fn execute_spec(
        self: Arc<Self>,
        spec: Option<&CommandSpec>,
        request: Request,
        proto: Proto,
        staged: Option<Box<Staged>>,
    ) -> Either<impl Future<Output = Bytes> + Send, BoxFuture<'static, Bytes>> {
        let Staged { plan, layout } = match staged {
            Some(staged) => *staged,
            None => self.stage_and_plan(spec, &request),
        };
        let Some(staging) = layout else {
            return Either::Left(self.run(plan, request, proto));
        };
        Either::Right(Box::pin(async move {
            let Staging {
                active,
                renamed,
                reply: names,
                counts,
            } = staging;
            active.count(&counts);
            let reply = self
                .clone()
                .run(plan, renamed.map_or(request, layout::framed), proto)
                .await;
            self.show_reply(&active, names, reply, proto).await
        }))
    }

    /// The layout stage of `request` (when a layout is loaded and concerns it), then its
    /// plan: the one way from a request to what runs, for the batched path and the
    /// planned one alike. Counts nothing.
    fn stage_and_plan(&self, spec: Option<&CommandSpec>, request: &Request) -> Staged {
        match known(spec, &request.args) {
            Ok(spec) => self.stage_and_plan_known(spec, request),
            Err(plan) => Staged { plan, layout: None },
        }
    }

    /// [`Proxy::stage_and_plan`] of a request `spec` knows, with an arity it accepts.
    fn stage_and_plan_known(&self, spec: &CommandSpec, request: &Request) -> Staged {
        let mut keys: KeyList = SmallVec::new();
        spec.keys(&request.args, &mut keys);
        let Some(active) = self.layout.as_ref() else {
            return Staged {
                plan: self.plan(spec, request, &keys, None),
                layout: None,
            };
        };
        match active.stage(spec, request, &keys) {
            Ok(None) => Staged {
                plan: self.plan(spec, request, &keys, None),
                layout: None,
            },
            Ok(Some(rewrite)) => {
                let plan = self.plan(
                    spec,
                    rewrite.request(request),
                    &keys,
                    Some((active, &rewrite)),
                );
                let Rewrite {
                    renamed,
                    reply,
                    counts,
                    ..
                } = rewrite;
                Staged {
                    plan,
                    layout: Some(Staging {
                        active: active.clone(),
                        renamed,
                        reply,
                        counts,
                    }),
                }
            }
            Err(Refused { reply, counts }) => Staged {
                plan: Plan::Answer(reply),
                layout: Some(Staging {
                    active: active.clone(),
                    renamed: None,
                    reply: ReplyNames::Unchanged,
                    counts,
                }),
            },
        }
    }

    /// Carries out `plan` for `request` (in cluster names).
    async fn run(self: Arc<Self>, plan: Plan, request: Request, proto: Proto) -> Bytes {
        // Every command's future is as large as the largest plan's and is moved into the
        // session's reply queue, so the rarer, larger plans run boxed: the plain forward
        // path stays small and allocation-free.
        match plan {
            Plan::Answer(reply) => reply,
            Plan::Forward(target) => self.upstream.forward(target, request.raw, proto).await,
            Plan::Split(kind) => Box::pin(self.split(kind, &request, proto)).await,
            Plan::Blocking(target) => {
                Box::pin(self.upstream.run_blocking(target, request.raw, proto)).await
            }
            Plan::Emulate(local) => Box::pin(self.emulate(local, &request, proto)).await,
            Plan::Fanout(op) => Box::pin(self.fanout(op, &request, proto)).await,
            Plan::ScriptAdmin(admin) => Box::pin(self.script_admin(admin, &request, proto)).await,
            Plan::Script(run, target) => {
                Box::pin(self.run_script(run, target, &request, proto)).await
            }
            Plan::Sort(sort) => Box::pin(self.sort(&sort, proto)).await,
            Plan::CrossSlot(request) => Box::pin(self.cross_slot(&request, proto)).await,
            Plan::Upkeep(upkeep) => Box::pin(self.run_upkeep(*upkeep, request, proto)).await,
            Plan::Listing(listing, active) => {
                Box::pin(self.run_listing(listing, &active, &request, proto)).await
            }
        }
    }

    /// The plan of `request` without the layout's part (see [`Proxy::explain`], which shows
    /// that part on lines of its own).
    fn plan_without_layout(&self, spec: Option<&CommandSpec>, request: &Request) -> Plan {
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
    fn plan(
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
fn known<'a>(spec: Option<&'a CommandSpec>, args: &[Bytes]) -> Result<&'a CommandSpec, Plan> {
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
fn key_target(args: &[Bytes], keys: &[KeyPos]) -> Option<Target> {
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
fn cross_slot_error(spec: &CommandSpec, args: &[Bytes]) -> Bytes {
    let mut keys: KeyList = SmallVec::new();
    spec.keys(args, &mut keys);
    let named: Vec<(&[u8], u16)> = keys
        .iter()
        .map(|k| (&args[k.index][..], key_slot(&args[k.index])))
        .collect();
    reply::cross_slot(&named)
}

#[cfg(test)]
mod tests {
    /// The size of the future `f` returns, without making one.
    fn future_size<A, B, C, F>(_: impl Fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn the_layout_part_does_not_grow_every_commands_future() {
        // Every planned command's future is moved into its session's reply queue; the
        // layout stage's part (the renamed request, the counts) is boxed apart. About
        // 1.6 KiB with the plain forward inline when this was written.
        let size = future_size(super::Proxy::execute);
        assert!(
            size < 2 * 1024,
            "a command's future is {size} bytes: box what only layout requests carry"
        );
    }
}
