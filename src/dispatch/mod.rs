//! The orchestrator: the one place where the stages meet. A request goes in, its reply
//! comes out: command lookup -> key positions -> layout stage (legacy names to cluster
//! names, when a layout is loaded and concerns the request) -> plan (one slot, split by
//! slot, any master, answered here) -> backend (with redirects and retries) -> merge ->
//! the reply's key names back as the layout stage recorded. The plan is a match on the
//! command's [`Shape`], decided with the command table (see `plan`); one path for every
//! request, the client session batching the plans that forward to one slot (see
//! [`Proxy::route`]).
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
mod live;
mod multikey;
mod plan;
mod scripts;
mod snapshot;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::{BoxFuture, Either};
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList, Shape};
use crate::protocol::{Proto, Request};
use crate::reply;
// The concrete layer's redirects and pinned connections, under the names the stages
// here use.
use crate::upstream::{forward, pinned};

pub use crate::topology::PUBSUB_HOME_SLOT;
use compose::{scan, sort};
pub use direct::{Direct, DirectKind, Forwardable, Route};
pub use explain::{Explanation, SessionShape, FIELDS as EXPLAIN_FIELDS};
pub use forward::{is_final, Target};
use layout::{Refused, ReplyNames, Rewrite};
pub use live::Moves;
pub use pinned::{watch_failed, BlockedOn, WatchPin, BLOCKED_ON};
pub use plan::keys_and_slots;
use plan::{cross_slot_error, key_target, known, Plan};
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
        let spec = command.and_then(|i| self.commands.spec(i));
        let refused = self.admit_spec(spec, &request, user);
        let moves = match refused {
            None => self.moves_of(spec, &request.args),
            Some(_) => None,
        };
        async move {
            let started = Instant::now();
            let this = self.clone();
            let spec = command.and_then(|i| this.commands.spec(i));
            let reply = match (refused, moves) {
                (Some(refusal), _) => refusal,
                (None, None) => self.execute_spec(spec, request, proto, staged).await,
                // Boxed: only commands during a live migration carry the moves.
                (None, Some(moves)) => {
                    Box::pin(moves.before(self.execute_spec(spec, request, proto, staged))).await
                }
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
        if let Some(refusal) = self.migration_refusal(spec) {
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
