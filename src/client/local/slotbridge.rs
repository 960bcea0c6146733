//! `SLOTBRIDGE <subcommand>`: the proxy's own commands, answered here and never sent to a
//! node. `SLOTBRIDGE EXPLAIN <command> [args...]` shows how the proxy would carry out a
//! command without running it (see `dispatch::Proxy::explain`); `SLOTBRIDGE HELP` lists
//! the subcommands.
//!
//! Who may run it: EXPLAIN reveals the topology and the layout rules, as `CLUSTER SLOTS`
//! and `CLUSTER NODES` do, so a user may run it when their ACL allows `CLUSTER SLOTS`
//! (`+@all`, `+cluster`, `+cluster|slots`, `+@slow`...); the command policy can refuse
//! it by name (`commands.deny: [slotbridge]`).

use bytes::{Bytes, BytesMut};

use crate::auth::{Denial, User};
use crate::dispatch::{Proxy, SessionShape};
use crate::protocol::encode;
use crate::reply;

use super::{answered_here, ConnState};

/// The lines of `SLOTBRIDGE HELP`.
const HELP: &[&str] = &[
    "SLOTBRIDGE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXPLAIN <command> [<arg> ...]",
    "    Show how the proxy would carry out the command, without running it.",
    "HELP",
    "    Print this help.",
];

/// The command a user's ACL must allow for them to run SLOTBRIDGE EXPLAIN.
const EXPLAIN_NEEDS: [&[u8]; 2] = [b"cluster", b"slots"];

/// Answers `SLOTBRIDGE ...` (`args[0]` is SLOTBRIDGE in any case).
pub(super) fn answer(state: &ConnState, proxy: &Proxy, args: &[Bytes]) -> Bytes {
    let Some(sub) = args.get(1) else {
        return reply::wrong_arity("slotbridge");
    };
    let sub = sub.to_ascii_lowercase();
    let live = state
        .user
        .as_deref()
        .and_then(|name| proxy.acl.users.get(name));
    let user = live.as_ref().map(|live| &live.user);
    match sub.as_slice() {
        b"help" if args.len() == 2 => help(),
        b"explain" if args.len() >= 3 => {
            if let Some(refusal) = proxy.policy.refusal("slotbridge|explain") {
                return refusal;
            }
            if let Some(refusal) = explain_refusal(proxy, user.map(|user| &**user)) {
                return refusal;
            }
            let inner = &args[2..];
            proxy
                .explain(inner, session_shape(inner), user.map(|user| &**user))
                .frame(state.proto)
        }
        b"explain" | b"help" => {
            reply::wrong_arity(&format!("slotbridge|{}", String::from_utf8_lossy(&sub)))
        }
        _ => reply::unknown_subcommand("slotbridge", &args[1]),
    }
}

/// The NOPERM refusal for a user whose ACL does not allow `CLUSTER SLOTS`.
fn explain_refusal(proxy: &Proxy, user: Option<&User>) -> Option<Bytes> {
    let user = user.filter(|user| !user.is_unrestricted())?;
    let needs: Vec<Bytes> = EXPLAIN_NEEDS
        .iter()
        .map(|w| Bytes::from_static(w))
        .collect();
    let allowed = proxy
        .commands
        .lookup(&needs)
        .is_some_and(|spec| user.denial_before_keys(spec, &needs).is_none());
    (!allowed).then(|| reply::error(&Denial::Command.text("slotbridge|explain")))
}

/// Where the client session would take `args` before routing.
fn session_shape(args: &[Bytes]) -> Option<SessionShape> {
    let name = args[0].to_ascii_lowercase();
    if answered_here(&name, args) {
        Some(SessionShape::Connection)
    } else if super::super::transaction::Transaction::handles(&name) {
        Some(SessionShape::Transaction)
    } else {
        None
    }
}

fn help() -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, HELP.len());
    for line in HELP {
        encode::simple_string(&mut out, line.as_bytes());
    }
    out.freeze()
}
