//! The orchestrator: the one place where the stages meet. A request goes in, its reply
//! comes out: command lookup -> key positions -> plan (one slot, split by slot, any
//! master, answered here) -> backend (with redirects and retries) -> merge.
//!
//! Connection-level state (protocol version, client name, transactions) is the client
//! session's; everything here is shared by all clients and read-only after start-up.

mod emulate;
mod fanout;
mod forward;
mod functions;
mod info;
pub mod layout;
mod listing;
mod monitors;
mod multikey;
mod pinned;
mod replication;
mod scripts;
mod sort;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::backend::{BackendError, NodeConn};
use crate::command::{CommandSpec, CommandTable, KeyList, KeyPos};
use crate::config::Config;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};
use crate::topology::Topology;

pub use crate::topology::PUBSUB_HOME_SLOT;
pub use fanout::{MAX_SCAN_MASTERS, NODE_CURSOR_BITS};
pub use forward::{is_final, Target};
pub use pinned::{watch_failed, BlockedOn, WatchPin, BLOCKED_ON};
pub use scripts::ScriptCache;

/// Everything a command needs, shared by every client session.
pub struct Proxy {
    /// The configuration the proxy runs with.
    pub config: Config,
    /// The upstream: slot map and node connections.
    pub topology: Arc<Topology>,
    /// Command names, arities, flags and key positions.
    pub commands: CommandTable,
    /// The backend's Redis version, read with the command table (HELLO reports it).
    pub server_version: Arc<str>,
    /// The address clients connect to, as bound (reported by CLUSTER SLOTS/NODES).
    pub listen_addr: String,
    /// Start time, for INFO's uptime.
    pub started: Instant,
    /// Lua script bodies seen, by SHA1, to load them where `-NOSCRIPT` says they are missing.
    pub scripts: Arc<ScriptCache>,
    /// The legacy key layout in force, if any.
    pub layout: Option<Arc<layout::ActiveLayout>>,
    /// Per-command metric handles (labels from `commands`).
    pub command_metrics: Arc<crate::metrics::CommandMetrics>,
    /// Which commands of `commands` a single-slot request forwards as is.
    pub forwardable: Arc<Forwardable>,
    /// What `/readyz` reports; flip it when draining.
    pub readiness: Arc<crate::admin::Readiness>,
    /// Proxy users (AUTH, ACL).
    pub auth: crate::auth::Auth,
    /// Commands the proxy refuses.
    pub policy: crate::policy::Policy,
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

/// A request the client session may send straight to the master of its slot, batched
/// with its neighbours: a known command, allowed, whose keys share one slot, and whose plan
/// is a plain forward (no split, script, block or emulation); under a layout prefix, one
/// that needs no more than its keys renamed (see [`layout::DirectRewrite`]).
pub struct Direct {
    /// The command's index in the command table (for its metrics).
    pub command: usize,
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
    /// A command inside an EVALSHA of the layout's upkeep script (see
    /// [`layout::DirectRewrite::upkeep`]): `-NOSCRIPT` means "again, by the script's body".
    Upkeep,
    /// EVAL or EVALSHA of the client's own: an error may need the script loaded again
    /// (`-NOSCRIPT`) or a hint added (see [`scripts`]).
    Script,
}

impl Direct {
    /// Whether `reply`, the first answer to this request, is its final one; else
    /// [`Proxy::follow_up`] finishes it.
    pub fn settles(&self, reply: &[u8]) -> bool {
        is_final(reply, self.conn.addr())
            && match self.kind {
                DirectKind::Plain => true,
                DirectKind::Upkeep => !reply.starts_with(b"-NOSCRIPT"),
                DirectKind::Script => reply.first() != Some(&b'-'),
            }
    }
}

/// How the client session runs a request, decided with one command-name lookup.
pub enum Route {
    /// Straight to a master, in the client's batch for it; with the frame to send when
    /// the layout renamed its keys (else the request's own).
    Direct(Direct, Option<Bytes>),
    /// As a future ([`Proxy::execute_indexed`]), with the command's table index if known.
    Planned(Option<usize>),
}

/// Per command-table index: whether the planner forwards a single-slot request of that
/// command as is (no emulation, fan-out, script handling, blocking or special route), or
/// runs it as a client's script (EVAL, EVALSHA), and the command policy allows it, so
/// [`Proxy::direct`] skips the planner's name checks and the policy's name lookup for the
/// common commands.
pub struct Forwardable(Box<[Batchable]>);

/// How [`Proxy::direct`] may batch a command (see [`Forwardable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batchable {
    No,
    AsIs,
    Script,
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
                    spec if forwards_as_is(spec) => Batchable::AsIs,
                    spec if matches!(
                        scripts::Run::of(spec),
                        Some(scripts::Run::Eval | scripts::Run::EvalSha)
                    ) =>
                    {
                        Batchable::Script
                    }
                    _ => Batchable::No,
                })
                .collect(),
        )
    }

    fn get(&self, command: usize) -> Batchable {
        self.0.get(command).copied().unwrap_or(Batchable::No)
    }
}

/// Whether [`Proxy::plan`] sends a single-slot request of `spec` on as it came, whatever
/// its arguments: none of its special cases applies. `direct` asserts in debug builds that
/// the plan agrees.
fn forwards_as_is(spec: &CommandSpec) -> bool {
    emulate::Local::classify(spec, &[]).is_none()
        && fanout::Op::classify(spec).is_none()
        && scripts::Admin::classify(spec).is_none()
        && !routes_specially(spec)
        && !asks_about_a_slot(spec)
        && !changes_its_connection(spec)
        && scripts::Run::of(spec).is_none()
        && !spec.may_block()
        // SORT's patterns decide (see `sort::SortRequest::classify`).
        && !matches!(spec.name.as_str(), "sort" | "sort_ro")
}

/// PUBLISH and the PUBSUB subcommands about ordinary channels and patterns.
fn is_about_channels(spec: &CommandSpec) -> bool {
    matches!(
        spec.name.as_str(),
        "publish" | "pubsub|channels" | "pubsub|numsub" | "pubsub|numpat"
    )
}

fn routes_specially(spec: &CommandSpec) -> bool {
    matches!(
        spec.name.as_str(),
        "spublish"
            | "subscribe"
            | "psubscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "sunsubscribe"
    )
}

/// Commands that turn the connection they arrive on into something else (the script
/// debugger's session, a MONITOR or replication stream, a replica's link): on a backend
/// connection shared by many clients every later reply on it would be wrong. Refused
/// whatever the policy says; the policy's own refusal comes first for those it denies.
pub fn changes_its_connection(spec: &CommandSpec) -> bool {
    matches!(
        spec.name.as_str(),
        "script|debug" | "monitor" | "sync" | "psync" | "replconf"
    )
}

/// CLUSTER COUNTKEYSINSLOT and GETKEYSINSLOT: keyless, but only the master that owns the
/// slot they name knows the answer (any other has no keys there).
fn asks_about_a_slot(spec: &CommandSpec) -> bool {
    matches!(
        spec.name.as_str(),
        "cluster|countkeysinslot" | "cluster|getkeysinslot"
    )
}

/// The valid slot number in `arg`, as a cluster node reads it.
fn slot_number(arg: &[u8]) -> Option<u16> {
    let slot = crate::protocol::parse_i64(arg)?;
    u16::try_from(slot)
        .ok()
        .filter(|&slot| usize::from(slot) < SLOT_COUNT)
}

/// How one request will be carried out.
enum Plan {
    /// The reply is already known (an error, or something answered locally).
    Answer(Bytes),
    /// Forward as is to the master of a slot, or to any master.
    Forward(Target),
    /// Keys span slots and the command can be split per slot and merged.
    Split(multikey::Kind),
    /// A command that may block: run it on a connection of its own.
    Blocking(Target),
    /// Answered by the proxy as a one-node cluster would.
    Emulate(emulate::Local),
    /// Answered over every master (KEYS, SCAN, DBSIZE, admin broadcasts).
    Fanout(fanout::Op),
    /// SCRIPT LOAD/FLUSH/EXISTS over every master.
    ScriptAdmin(scripts::Admin),
    /// EVAL/EVALSHA routed by key, with script bodies remembered and reloaded.
    Script(scripts::Run, Target),
    /// SORT with BY/GET patterns or a STORE into another slot.
    Sort(Box<sort::SortRequest>),
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
        self.execute_indexed(command, request, proto, user)
    }

    /// Like [`Proxy::execute_as`] for a request whose command-table index is known: one name
    /// lookup per command serves the checks, the plan and the metrics.
    pub fn execute_indexed(
        self: Arc<Self>,
        command: Option<usize>,
        request: Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> impl std::future::Future<Output = Bytes> + Send + 'static {
        let refused = self.admit_spec(command.and_then(|i| self.commands.spec(i)), &request, user);
        async move {
            let started = Instant::now();
            let this = self.clone();
            let spec = command.and_then(|i| this.commands.spec(i));
            let layout = self
                .layout
                .as_ref()
                .filter(|active| active.concerns(spec, &request.args))
                .cloned();
            let reply = match (refused, layout) {
                (Some(refusal), _) => refusal,
                // Boxed: the layout path's future is several times the plain one's, and
                // this future is moved into the session's reply queue for every command.
                (None, Some(active)) => {
                    Box::pin(self.execute_layout(&active, request, proto)).await
                }
                (None, None) => self.execute_spec(spec, request, proto).await,
            };
            this.command_metrics.record(command, &reply, started);
            reply
        }
    }

    /// Whether `request` can go straight to a master ([`Route::Direct`]: the same checks
    /// and the same plan as [`Proxy::execute_as`], stopped where that would forward the raw
    /// bytes) or runs as a future.
    pub fn route(
        &self,
        request: &Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> Route {
        let command = self.commands.lookup_index(&request.args);
        match command.and_then(|command| self.direct(command, request, proto, user)) {
            Some((direct, frame)) => Route::Direct(direct, frame),
            None => Route::Planned(command),
        }
    }

    fn direct(
        &self,
        command: usize,
        request: &Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> Option<(Direct, Option<Bytes>)> {
        let args = &request.args;
        let batchable = self.forwardable.get(command);
        if batchable == Batchable::No {
            return None;
        }
        let spec = self.commands.spec(command)?;
        // The policy's refusals are not forwardable (see `Forwardable::of`).
        if !spec.arity_ok(args.len()) || Self::user_refusal(spec, request, user).is_some() {
            return None;
        }
        let mut keys: KeyList = SmallVec::new();
        spec.keys(args, &mut keys);
        let concerns_layout = self
            .layout
            .as_ref()
            .is_some_and(|active| active.concerns_keys(args, &keys));
        let (slot, frame, kind) = match &self.layout {
            Some(active) if concerns_layout => {
                let rewrite = active.direct_rewrite(spec, args, &keys, proto)?;
                let kind = match batchable {
                    Batchable::Script => DirectKind::Script,
                    _ if rewrite.upkeep => DirectKind::Upkeep,
                    _ => DirectKind::Plain,
                };
                (rewrite.slot, rewrite.frame, kind)
            }
            _ => {
                let Ok(Some(slot)) = common_slot(args, &keys) else {
                    return None;
                };
                let kind = if batchable == Batchable::Script {
                    DirectKind::Script
                } else {
                    DirectKind::Plain
                };
                debug_assert!(
                    matches!(
                        (kind, self.plan(Some(spec), request)),
                        (DirectKind::Plain, Plan::Forward(Target::Slot(s)))
                            | (DirectKind::Script, Plan::Script(_, Target::Slot(s))) if s == slot
                    ),
                    "{} is flagged forwardable but the planner does otherwise",
                    spec.name
                );
                (slot, None, kind)
            }
        };
        let conn = self.topology.master_for_slot(slot, proto)?;
        if scripts::Run::of(spec) == Some(scripts::Run::Eval) {
            self.scripts.remember(&args[1]);
        }
        let direct = Direct {
            command,
            slot,
            writes: spec.is_write(),
            kind,
            conn,
        };
        Some((direct, frame))
    }

    /// Finishes a [`Direct`] request whose first answer was not final (a redirect, a
    /// retryable error, a connection failure, `-NOSCRIPT` for the upkeep script, an error
    /// of a client's script), as [`Proxy::forward`] and the script path would have, and
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
            .forward_after(target, request, proto, direct.conn, answer)
            .await;
        match (direct.kind, sent) {
            // The node lost its script cache (restart, failover, SCRIPT FLUSH): EVAL loads it.
            (DirectKind::Upkeep, Some(sent)) if reply.starts_with(b"-NOSCRIPT") => {
                if let Some(eval) = layout::upkeep_as_eval(&sent) {
                    reply = self.forward(target, eval, proto).await;
                }
            }
            (DirectKind::Script, Some(sent)) => {
                reply = self.script_reply(target, sent, reply, proto).await;
            }
            _ => {}
        }
        self.command_metrics
            .record(Some(direct.command), &reply, started);
        reply
    }

    /// Whether the proxy runs `spec` on every master or answers it from all of them (KEYS,
    /// DBSIZE, FLUSHALL, INFO, SCRIPT LOAD...): such a command cannot join one node's
    /// MULTI block without acting on, or seeing, that node only.
    pub fn spans_masters(spec: &CommandSpec) -> bool {
        // CONFIG GET is one master's answer: inside MULTI the transaction's node gives it.
        emulate::Local::classify(spec, &[]).is_some_and(|local| local != emulate::Local::ConfigGet)
            || fanout::Op::classify(spec).is_some()
            || scripts::Admin::classify(spec).is_some()
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
        if let Some(refusal) = self.policy.refusal(&spec.name) {
            return Some(refusal);
        }
        Self::user_refusal(spec, request, user)
    }

    /// The refusal for a command `user`'s ACL does not allow (`None`: allowed, or no user
    /// restrictions). ACL key patterns see the names the client sent.
    fn user_refusal(
        spec: &CommandSpec,
        request: &Request,
        user: Option<&crate::auth::User>,
    ) -> Option<Bytes> {
        let args = &request.args;
        let user = user.filter(|user| !user.is_unrestricted())?;
        if !user.may_run(spec) {
            return Some(reply::error(&crate::auth::noperm_command(&spec.name)));
        }
        let mut keys: KeyList = SmallVec::new();
        spec.keys(args, &mut keys);
        if !keys.iter().all(|k| user.may_access(&args[k.index])) {
            return Some(reply::error(crate::auth::NOPERM_KEYS));
        }
        None
    }

    /// Runs one request whose keys are cluster names already.
    async fn execute_plain(self: Arc<Self>, request: Request, proto: Proto) -> Bytes {
        let this = self.clone();
        let spec = this.commands.lookup(&request.args);
        self.execute_spec(spec, request, proto).await
    }

    async fn execute_spec(
        self: Arc<Self>,
        spec: Option<&CommandSpec>,
        request: Request,
        proto: Proto,
    ) -> Bytes {
        // Every command's future is as large as the largest plan's and is moved into the
        // session's reply queue, so the rarer, larger plans run boxed: the plain forward
        // path stays small and allocation-free.
        match self.plan(spec, &request) {
            Plan::Answer(reply) => reply,
            Plan::Forward(target) => self.forward(target, request.raw, proto).await,
            Plan::Split(kind) => Box::pin(self.split(kind, &request, proto)).await,
            Plan::Blocking(target) => Box::pin(self.run_blocking(target, request.raw, proto)).await,
            Plan::Emulate(local) => Box::pin(self.emulate(local, &request, proto)).await,
            Plan::Fanout(op) => Box::pin(self.fanout(op, &request, proto)).await,
            Plan::ScriptAdmin(admin) => Box::pin(self.script_admin(admin, &request, proto)).await,
            Plan::Script(run, target) => {
                Box::pin(self.run_script(run, target, &request, proto)).await
            }
            Plan::Sort(sort) => Box::pin(self.sort(&sort, proto)).await,
        }
    }

    fn plan(&self, spec: Option<&CommandSpec>, request: &Request) -> Plan {
        let args = &request.args;
        let Some(spec) = spec else {
            return Plan::Answer(reply::unknown_command(args));
        };
        if !spec.arity_ok(args.len()) {
            return Plan::Answer(reply::wrong_arity(&spec.name));
        }
        if changes_its_connection(spec) {
            return Plan::Answer(reply::error(&format!(
                "ERR proxy: '{}' is not supported: it would change the backend connection it runs on, which other clients share",
                spec.name
            )));
        }
        if let Some(sort) = sort::SortRequest::classify(&spec.name, args) {
            return match sort {
                Ok(sort) => Plan::Sort(sort),
                Err(refusal) => Plan::Answer(refusal),
            };
        }
        if let Some(local) = emulate::Local::classify(spec, args) {
            return Plan::Emulate(local);
        }
        if let Some(op) = fanout::Op::classify(spec) {
            return Plan::Fanout(op);
        }
        if let Some(admin) = scripts::Admin::classify(spec) {
            return Plan::ScriptAdmin(admin);
        }
        if is_about_channels(spec) {
            return Plan::Forward(Target::Slot(PUBSUB_HOME_SLOT));
        }
        if asks_about_a_slot(spec) {
            // An invalid slot gets the node's own error from any master.
            return Plan::Forward(match args.get(2).and_then(|arg| slot_number(arg)) {
                Some(slot) => Target::Slot(slot),
                None => Target::AnyMaster,
            });
        }
        if routes_specially(spec) {
            // Redis 7 marks shard channels `not_key`, yet they route by slot like keys.
            if spec.name == "spublish" {
                return Plan::Forward(Target::Slot(key_slot(&args[1])));
            }
            // Subscriptions live on the client's own connections (client::pubsub); on a
            // shared connection they would swallow every other client's replies.
            return Plan::Answer(reply::error(
                "ERR proxy: subscriptions are only possible on a client connection",
            ));
        }
        let mut keys: KeyList = SmallVec::new();
        spec.keys(args, &mut keys);
        let target = match common_slot(args, &keys) {
            Ok(Some(slot)) => Target::Slot(slot),
            Ok(None) => Target::AnyMaster,
            Err(()) => {
                return match multikey::Kind::of(spec) {
                    Some(kind) => Plan::Split(kind),
                    None => Plan::Answer(cross_slot_error(args, &keys)),
                }
            }
        };
        if let Some(run) = scripts::Run::of(spec) {
            return Plan::Script(run, target);
        }
        if spec.blocks(args) {
            Plan::Blocking(target)
        } else {
            Plan::Forward(target)
        }
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

fn cross_slot_error(args: &[Bytes], keys: &[KeyPos]) -> Bytes {
    let named: Vec<(&[u8], u16)> = keys
        .iter()
        .map(|k| (&args[k.index][..], key_slot(&args[k.index])))
        .collect();
    reply::cross_slot(&named)
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
    fn client_scripts_are_batched_unless_the_policy_refuses_them() {
        let table = CommandTable::builtin();
        let flags = Forwardable::of(&table, &crate::policy::Policy::default());
        for name in ["eval", "evalsha", "eval_ro", "evalsha_ro"] {
            assert_eq!(batchable(&table, &flags, name), Batchable::Script, "{name}");
        }
        for name in ["fcall", "script load", "script kill"] {
            assert_eq!(batchable(&table, &flags, name), Batchable::No, "{name}");
        }
        let policy = crate::policy::Policy::from_config(&crate::config::CommandsConfig {
            allow: vec![],
            deny: vec!["evalsha".to_string()],
        })
        .unwrap();
        let flags = Forwardable::of(&table, &policy);
        assert_eq!(batchable(&table, &flags, "evalsha"), Batchable::No);
        assert_eq!(batchable(&table, &flags, "eval"), Batchable::Script);
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
