//! ACL management and `CONFIG SET/GET requirepass`, answered over the proxy's own users
//! (see [`crate::acl`]): nothing here reaches the masters.

use bytes::Bytes;

use crate::acl::AclRequest;
use crate::dispatch::Proxy;
use crate::reply;

use super::ConnState;

/// Whether `args` is a CONFIG SET or GET the proxy answers (or refuses) because it names
/// `requirepass` as a parameter. A CONFIG GET pattern that merely matches it (`*`) goes
/// to the masters as any other.
pub fn names_requirepass(args: &[Bytes]) -> bool {
    let Some(sub) = args.get(1) else {
        return false;
    };
    let is = |arg: &Bytes| arg.eq_ignore_ascii_case(b"requirepass");
    if sub.eq_ignore_ascii_case(b"set") {
        args.iter().skip(2).step_by(2).any(is)
    } else if sub.eq_ignore_ascii_case(b"get") {
        args.iter().skip(2).any(is)
    } else {
        false
    }
}

/// `ACL <subcommand>`: refused by the command policy unless allowed (WHOAMI never is),
/// else answered by [`crate::acl::answer`].
pub fn answer_acl(state: &ConnState, proxy: &Proxy, args: &[Bytes]) -> Bytes {
    let sub = args.get(1).map(|sub| sub.to_ascii_lowercase());
    if let Some(sub) = sub.filter(|sub| sub != b"whoami") {
        let name = format!("acl|{}", String::from_utf8_lossy(&sub));
        if let Some(refusal) = proxy.policy.refusal(&name) {
            return refusal;
        }
    }
    let request = AclRequest {
        users: &proxy.acl.users,
        log: &proxy.acl.log,
        commands: &proxy.commands,
        proto: state.proto,
        whoami: Some(state.user.as_deref().unwrap_or("default")),
    };
    crate::acl::answer(&request, args)
}

/// `CONFIG SET requirepass <password>` and `CONFIG GET requirepass`, alone: the proxy's
/// `default` user; with other parameters: refused (see [`reply::acl`]).
pub fn answer_requirepass(state: &ConnState, proxy: &Proxy, args: &[Bytes]) -> Bytes {
    let set = args[1].eq_ignore_ascii_case(b"set");
    let (policy_name, alone) = match set {
        true => ("config|set", args.len() == 4),
        false => ("config|get", args.len() == 3),
    };
    if let Some(refusal) = proxy.policy.refusal(policy_name) {
        return refusal;
    }
    match (set, alone) {
        (true, true) => match proxy.acl.users.set_requirepass(&args[3]) {
            Ok(()) => Bytes::from_static(b"+OK\r\n"),
            Err(e) => reply::error(&format!("ERR {e}")),
        },
        (false, true) => proxy.acl.users.config_get_requirepass(state.proto),
        (true, false) => reply::error(reply::acl::CONFIG_SET_REQUIREPASS_ALONE),
        (false, false) => reply::error(reply::acl::CONFIG_GET_REQUIREPASS_ALONE),
    }
}
