//! The orchestrator: the one place where the stages meet. A request goes in, its reply
//! comes out: command lookup -> key positions -> plan (one slot, split by slot, any
//! master, answered here) -> backend (with redirects and retries) -> merge.
//!
//! Connection-level state (protocol version, client name, transactions) is the client
//! session's; everything here is shared by all clients and read-only after start-up.

mod emulate;
mod forward;
mod multikey;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandTable, KeyPos};
use crate::config::Config;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::key_slot;
use crate::topology::Topology;

pub use forward::Target;

/// Everything a command needs, shared by every client session.
pub struct Proxy {
    /// The configuration the proxy runs with.
    pub config: Config,
    /// The upstream: slot map and node connections.
    pub topology: Arc<Topology>,
    /// Command names, arities, flags and key positions.
    pub commands: CommandTable,
    /// The address clients connect to, as bound (reported by CLUSTER SLOTS/NODES).
    pub listen_addr: String,
    /// Start time, for INFO's uptime.
    pub started: Instant,
    /// Proxy users (AUTH, ACL).
    pub auth: crate::auth::Auth,
    /// Commands the proxy refuses.
    pub policy: crate::policy::Policy,
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
}

impl Proxy {
    /// Runs one request and returns its complete reply frame.
    pub async fn execute(self: Arc<Self>, request: Request, proto: Proto) -> Bytes {
        let plan = self.plan(&request, None);
        self.run(plan, request, proto).await
    }

    /// Like [`Proxy::execute`], with `user`'s ACL checked first (`None`: no restrictions).
    /// The checks run now, before the returned future is first polled.
    pub fn execute_as(
        self: Arc<Self>,
        request: Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> impl std::future::Future<Output = Bytes> + Send + 'static {
        let plan = self.plan(&request, user);
        self.run(plan, request, proto)
    }

    async fn run(self: Arc<Self>, plan: Plan, request: Request, proto: Proto) -> Bytes {
        match plan {
            Plan::Answer(reply) => reply,
            Plan::Forward(target) => self.forward(target, request.raw, proto).await,
            Plan::Split(kind) => self.split(kind, &request, proto).await,
            Plan::Blocking(target) => self.forward_blocking(target, request.raw, proto).await,
            Plan::Emulate(local) => self.emulate(local, &request, proto).await,
        }
    }

    fn plan(&self, request: &Request, user: Option<&crate::auth::User>) -> Plan {
        let args = &request.args;
        let Some(spec) = self.commands.lookup(args) else {
            return Plan::Answer(reply::unknown_command(args));
        };
        if !spec.arity_ok(args.len()) {
            return Plan::Answer(reply::wrong_arity(&spec.name));
        }
        if let Some(refusal) = self.policy.refusal(&spec.name) {
            return Plan::Answer(refusal);
        }
        let user = user.filter(|user| !user.is_unrestricted());
        if user.is_some_and(|user| !user.may_run(spec)) {
            return Plan::Answer(reply::error(&crate::auth::noperm_command(&spec.name)));
        }
        if let Some(local) = emulate::Local::classify(spec, args) {
            return Plan::Emulate(local);
        }
        let mut keys: SmallVec<[KeyPos; 4]> = SmallVec::new();
        spec.keys(args, &mut keys);
        if user.is_some_and(|user| !keys.iter().all(|k| user.may_access(&args[k.index]))) {
            return Plan::Answer(reply::error(crate::auth::NOPERM_KEYS));
        }
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
        if spec.blocks(args) {
            Plan::Blocking(target)
        } else {
            Plan::Forward(target)
        }
    }

    /// A command that may block the connection it runs on gets a connection of its own,
    /// so no other client's pipeline waits behind it. Dropping the future (the client
    /// went away) drops the connection, which releases the server side too.
    async fn forward_blocking(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        let routing = self.topology.routing();
        let addr = match target {
            Target::Slot(slot) => routing.map.master_addr(slot).cloned(),
            Target::AnyMaster => routing.map.masters().first().cloned(),
        };
        drop(routing);
        let Some(addr) = addr else {
            return self.forward(target, request, proto).await;
        };
        let conn = self.topology.dedicated(&addr, proto);
        match conn.call(request.clone(), false).await {
            Ok(frame) if !is_redirect(&frame) => frame,
            // A moved slot or a failed connect: the general path knows how to recover.
            Ok(_) | Err(crate::backend::BackendError::NotSent(_)) => {
                self.forward(target, request, proto).await
            }
            Err(crate::backend::BackendError::Lost(detail)) => {
                reply::outcome_unknown(&addr, &detail)
            }
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

fn is_redirect(frame: &[u8]) -> bool {
    frame.starts_with(b"-MOVED ") || frame.starts_with(b"-ASK ") || frame.starts_with(b"-TRYAGAIN")
}
