//! The batched path's admission: which requests the client session may send straight to
//! a master in its batch ([`Route::Direct`]) instead of running them as futures, and how
//! such a request is finished when its first answer is not final.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::backend::{BackendError, NodeConn};
use crate::command::CommandTable;
use crate::protocol::{Proto, Request};
use crate::topology::Routing;

use super::layout::ReplyNames;
use super::{is_final, layout, Plan, Proxy, Staged, Target};

/// A request the client session may send straight to the master of its slot, batched
/// with its neighbours: a known command, allowed, whose plan (after the layout stage, when
/// a layout concerns it) forwards it to one slot (no split, block, emulation or script: a
/// client's script runs on a connection of its own, see `scripts`), or runs it inside the
/// loaded upkeep script in one slot; and whose reply names no key the layout would show
/// under another name.
pub struct Direct {
    /// The command's index in the command table (for its metrics). Narrow, as every field
    /// here: a request in flight keeps its `Direct` in the client's pipeline slot, which
    /// fits one cache line (see `client::pipeline`).
    pub command: u16,
    /// The slot of its keys.
    pub slot: u16,
    /// Whether the command writes (the client's next WAIT goes to this slot's master).
    pub writes: bool,
    /// Which answers are final for it.
    pub kind: DirectKind,
    /// The shared connection to that slot's master.
    pub conn: NodeConn,
}

/// What a [`Direct`] request is, for the answers that are not final for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectKind {
    /// A command sent as it came, or with its keys renamed by the layout.
    Plain,
    /// A command inside an EVALSHA of the layout's upkeep script: `-NOSCRIPT` means
    /// "again, by the script's body" (see [`layout::upkeep_as_eval`]).
    Upkeep,
}

impl Direct {
    /// Whether `reply`, the first answer to this request, is its final one; else
    /// [`Proxy::follow_up`] finishes it.
    // Inlined, as `one_frame`: both run once per direct request, and as calls (when the code
    // is split differently between codegen units) cost about 45 instructions of a pipelined
    // SET's 3,000.
    #[inline]
    pub fn settles(&self, reply: &[u8]) -> bool {
        is_final(reply, self.conn.addr())
            && match self.kind {
                DirectKind::Plain => true,
                DirectKind::Upkeep => !reply.starts_with(b"-NOSCRIPT"),
            }
    }
}

/// How the client session runs a request, decided with one command-name lookup.
pub enum Route {
    /// Straight to a master, in the client's batch for it; with the frame to send when
    /// the layout renamed its keys (else the request's own).
    Direct(Direct, Option<Bytes>),
    /// As a future ([`Proxy::execute_indexed`]), with the command's table index if known,
    /// and the request's layout stage and plan when this routing made them already (a
    /// batchable command whose plan turned out not to be one frame to one master).
    Planned(Option<usize>, Option<Box<Staged>>),
}

/// Per command-table index: whether the planner may forward a single-slot request of that
/// command as is (its shape says so, see [`crate::command::Shape::forwards_as_is`]) and the
/// command policy allows it: [`Proxy::route`] stages and plans only those, and skips the
/// policy's name lookup for them; the plan decides.
pub struct Forwardable(Box<[Batchable]>);

/// How [`Proxy::direct`] may batch a command (see [`Forwardable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Batchable {
    No,
    AsIs,
}

impl Forwardable {
    /// The flags for every command of `table`, in its order, under `policy` (a refused
    /// command takes the planned path, which answers the refusal).
    pub fn of(table: &CommandTable, policy: &crate::policy::Policy) -> Forwardable {
        Forwardable(
            table
                .iter()
                .map(|spec| match spec {
                    spec if policy.refuses(&spec.name) => Batchable::No,
                    spec if spec.shape.forwards_as_is() => Batchable::AsIs,
                    _ => Batchable::No,
                })
                .collect(),
        )
    }

    pub(super) fn get(&self, command: usize) -> Batchable {
        self.0.get(command).copied().unwrap_or(Batchable::No)
    }
}

impl Proxy {
    /// Whether `request`, of the table's `command` (its [`CommandTable::lookup_index`]),
    /// can go straight to a master ([`Route::Direct`]: the same checks, the same layout
    /// stage and the same plan as [`Proxy::execute_as`], stopped where that would send
    /// one frame to one slot) or runs as a future. `routing` is this proxy's topology's, as
    /// recent as the caller's routing.
    pub fn route(
        &self,
        command: Option<usize>,
        request: &Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
        routing: &Routing,
    ) -> Route {
        let Some(index) = command else {
            return Route::Planned(None, None);
        };
        match self.direct(index, request, proto, user, routing) {
            Ok((direct, frame)) => Route::Direct(direct, frame),
            Err(staged) => Route::Planned(command, staged),
        }
    }

    fn direct(
        &self,
        command: usize,
        request: &Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
        routing: &Routing,
    ) -> Result<(Direct, Option<Bytes>), Option<Box<Staged>>> {
        let args = &request.args;
        // A command past the 65,536th (no table has that many) takes the planned path.
        let Ok(index) = u16::try_from(command) else {
            return Err(None);
        };
        let batchable = self.forwardable.get(command);
        if batchable == Batchable::No {
            return Err(None);
        }
        let Some(spec) = self.commands.spec(command) else {
            return Err(None);
        };
        // The policy's refusals are not forwardable (see `Forwardable::of`).
        if !spec.arity_ok(args.len()) || Self::user_refusal(spec, request, user).is_some() {
            return Err(None);
        }
        // Its keys move first, on the planned path (see `live`).
        if self.moves_first(spec, args) {
            return Err(None);
        }
        // The one plan, with the layout stage before it when a layout concerns the request.
        let staged = self.stage_and_plan_known(spec, request);
        let Some((slot, kind, frame)) = one_frame(&staged, request, proto) else {
            return Err(Some(Box::new(staged)));
        };
        let Some(master) = routing.master_for_slot(slot) else {
            return Err(Some(Box::new(staged)));
        };
        let conn = master.get(proto).clone();
        let layout = staged.layout;
        // Counted once it is sure to leave this way: without a master for its slot it
        // takes the planned path, which counts it.
        if let Some(staging) = &layout {
            staging.active.count(&staging.counts);
            if kind == DirectKind::Upkeep {
                crate::metrics::index_upkeep();
            }
        }
        let direct = Direct {
            command: index,
            slot,
            writes: spec.is_write(),
            kind,
            conn,
        };
        Ok((direct, frame))
    }

    /// Finishes a [`Direct`] request whose first answer was not final (a redirect, a
    /// retryable error, a connection failure, `-NOSCRIPT` for the upkeep script), as
    /// [`Upstream::forward`](crate::upstream::Upstream::forward) and the upkeep path would have, and
    /// records it in the command metrics.
    pub async fn follow_up(
        self: Arc<Self>,
        direct: Direct,
        request: Bytes,
        proto: Proto,
        answer: Result<Bytes, BackendError>,
        started: Instant,
    ) -> Bytes {
        let target = Target::Slot(direct.slot);
        let sent = (direct.kind != DirectKind::Plain).then(|| request.clone());
        let mut reply = self
            .upstream
            .forward_after(target, request, proto, direct.conn, answer)
            .await;
        match (direct.kind, sent) {
            // The node lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
            (DirectKind::Upkeep, Some(sent)) if reply.starts_with(b"-NOSCRIPT") => {
                if let Some(eval) = layout::upkeep_as_eval(&sent) {
                    reply = self.upstream.forward(target, eval, proto).await;
                }
            }
            _ => {}
        }
        self.command_metrics
            .record(Some(usize::from(direct.command)), &reply, started);
        reply
    }
}

/// The slot, kind and frame (`None`: the request's own) of a staged request that leaves
/// as one frame to one master; `None` when its plan is anything else, or its reply is not
/// shown as the node sends it.
#[inline]
fn one_frame(
    staged: &Staged,
    request: &Request,
    proto: Proto,
) -> Option<(u16, DirectKind, Option<Bytes>)> {
    let layout = staged.layout.as_ref();
    if layout.is_some_and(|staging| staging.reply != ReplyNames::Unchanged) {
        return None;
    }
    let renamed = layout.and_then(|staging| staging.renamed.as_ref());
    match &staged.plan {
        Plan::Forward(Target::Slot(slot)) => Some((
            *slot,
            DirectKind::Plain,
            renamed.map(|request| request.raw.clone()),
        )),
        Plan::Upkeep(upkeep) => {
            let args = &renamed.unwrap_or(request).args;
            let (slot, frame) = upkeep.batched(args, proto)?;
            Some((slot, DirectKind::Upkeep, Some(frame)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batchable(table: &CommandTable, flags: &Forwardable, name: &str) -> Batchable {
        let args: Vec<Bytes> = name
            .split(' ')
            .map(|part| Bytes::copy_from_slice(part.as_bytes()))
            .collect();
        let index = table.lookup_index(&args).expect(name);
        flags.get(index)
    }

    fn forwardable(table: &CommandTable, flags: &Forwardable, name: &str) -> bool {
        batchable(table, flags, name) == Batchable::AsIs
    }

    #[test]
    fn client_scripts_are_never_batched_on_a_shared_connection() {
        let table = CommandTable::builtin();
        let flags = Forwardable::of(&table, &crate::policy::Policy::default());
        for name in [
            "eval",
            "evalsha",
            "eval_ro",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
            "script load",
            "script kill",
        ] {
            assert_eq!(batchable(&table, &flags, name), Batchable::No, "{name}");
        }
    }

    #[test]
    fn only_commands_the_planner_forwards_as_is_are_forwardable() {
        let table = CommandTable::builtin();
        let flags = Forwardable::of(&table, &crate::policy::Policy::default());
        for name in [
            "get", "set", "incr", "hset", "zadd", "lrange", "expire", "mget",
        ] {
            assert!(forwardable(&table, &flags, name), "{name}");
        }
        for name in [
            "eval",
            "evalsha",
            "blpop",
            "xread",
            "wait",
            "keys",
            "scan",
            "dbsize",
            "info",
            "cluster info",
            "script load",
            "flushall",
            "spublish",
            "subscribe",
        ] {
            assert!(!forwardable(&table, &flags, name), "{name}");
        }
    }

    #[test]
    fn commands_the_policy_refuses_are_not_forwardable() {
        let table = CommandTable::builtin();
        let policy = crate::policy::Policy::from_config(&crate::config::CommandsConfig {
            allow: vec![],
            deny: vec!["get".to_string(), "object".to_string()],
        })
        .unwrap();
        let flags = Forwardable::of(&table, &policy);
        for name in ["get", "object encoding"] {
            assert!(!forwardable(&table, &flags, name), "{name}");
        }
        assert!(forwardable(&table, &flags, "set"));
    }
}
