//! The orchestrator: the one place where the stages meet. A request goes in, its reply
//! comes out: command lookup -> key positions -> plan (one slot, split by slot, any
//! master, answered here) -> backend (with redirects and retries) -> merge.
//!
//! Connection-level state (protocol version, client name, transactions) is the client
//! session's; everything here is shared by all clients and read-only after start-up.

mod direct;
mod emulate;
mod explain;
mod fanout;
mod forward;
mod functions;
mod info;
pub mod layout;
mod listing;
mod memory_stats;
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

use crate::command::{CommandSet, CommandSpec, CommandTable, KeyList, KeyPos};
use crate::config::Config;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};
use crate::topology::Topology;

pub use crate::topology::PUBSUB_HOME_SLOT;
pub use direct::{Direct, DirectKind, Forwardable, Route};
pub use explain::{Explanation, SessionShape, FIELDS as EXPLAIN_FIELDS};
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
    /// The commands of `commands` that none of the client session's own checks concern
    /// (see `client::plain::plain_commands`): it routes them at once.
    pub plain_commands: Arc<CommandSet>,
    /// What `/readyz` reports; flip it when draining.
    pub readiness: Arc<crate::topology::Readiness>,
    /// Proxy users (AUTH, ACL).
    pub auth: crate::auth::Auth,
    /// Commands the proxy refuses.
    pub policy: crate::policy::Policy,
}

/// Whether `spec` runs a client's script (EVAL, EVALSHA, FCALL and their `_RO` forms):
/// it runs on a connection of its own (see `Proxy::run_script_alone`), so the session runs
/// it alone, as a sequence point, to keep the client's order.
pub fn runs_a_script(spec: &CommandSpec) -> bool {
    scripts::Run::of(spec).is_some()
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
            return Plan::Answer(reply::error(&reply::refusals::changes_shared_connection(
                &spec.name,
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
            return Plan::Answer(reply::error(reply::text::SUBSCRIBE_NEEDS_CLIENT));
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
