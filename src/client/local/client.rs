//! CLIENT's subcommands, answered about the proxy's own clients as one Redis answers them
//! about its clients: SETNAME/GETNAME/ID/INFO/LIST (with TYPE and ID filters), KILL in
//! both forms, UNBLOCK, REPLY, TRACKING and what goes with it (client-side caching, see
//! `tracking`), HELP.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;

use crate::acl::UserSet;
use crate::config::Emulation;
use crate::dispatch::Proxy;
use crate::protocol::{encode, parse_i64, Proto};
use crate::reply;

use super::super::pause::PauseMode;
use super::super::registry::{ClientType, CommandName, KillFilter, Registry, TrackingShown};
use super::super::tracking::{self, Switch};
use super::{ok, set_name, valid_name, Answer, ConnState, ReplyMode, BAD_NAME, SYNTAX};

/// Answers CLIENT `args[1]` (always: an unknown subcommand gets Redis's error).
pub(super) fn answer(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Arc<Proxy>,
    args: &[Bytes],
) -> Option<Answer> {
    let auth = &*proxy.acl.users;
    let names = |index: usize| proxy.commands.spec(index).map(|spec| spec.name.as_str());
    let sub = args[1].to_ascii_lowercase();
    let reply = match (sub.as_slice(), args.len()) {
        (b"setname", 3) => {
            if !valid_name(&args[2]) {
                reply::error(BAD_NAME)
            } else {
                set_name(state, registry, args[2].clone());
                ok()
            }
        }
        (b"getname", 2) => match &state.name {
            Some(name) => encode::bulk_frame(name),
            None => encode::null_frame(state.proto),
        },
        (b"id", 2) => encode::integer_frame(state.id as i64),
        (b"setinfo", 4) => setinfo(state, registry, &args[2], &args[3]),
        (b"info", 2) => text(
            state.proto,
            &registry.line(state.id, &names).unwrap_or_default(),
        ),
        (b"list", _) => list(state.proto, registry, &names, args),
        (b"kill", 3..) => return kill(state, registry, auth, args),
        (b"unblock", 3 | 4) => return unblock(registry, proxy, args),
        (b"help", 2) => help(),
        (b"tracking", 3..) => return tracking(state, registry, proxy, args),
        (b"trackinginfo", 2) => tracking_info(state, registry),
        (b"caching", 3) => caching(state, &args[2]),
        (b"pause", 3 | 4) => pause(registry, &args[2..]),
        (b"pause", 2) => reply::wrong_arity("client|pause"),
        (b"pause", _) => reply::error(&reply::connection::client_subcommand(
            &String::from_utf8_lossy(&args[1]),
        )),
        (b"unpause", 2) => {
            registry.pause().unpause();
            ok()
        }
        (b"no-evict" | b"no-touch", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" | b"off" => ok(),
            _ => reply::error(SYNTAX),
        },
        (b"getredir", 2) => {
            let redirect = state
                .tracking
                .as_ref()
                .map_or(-1, |t| t.options.redirect as i64);
            encode::integer_frame(redirect)
        }
        (
            b"setname" | b"getname" | b"id" | b"setinfo" | b"info" | b"kill" | b"help"
            | b"tracking" | b"trackinginfo" | b"caching" | b"unpause" | b"unblock" | b"no-evict"
            | b"no-touch" | b"getredir",
            _,
        ) => reply::wrong_arity(&format!("client|{}", String::from_utf8_lossy(&sub))),
        (b"reply", 3) => return reply_mode(state, &args[2]),
        (b"reply", _) => reply::wrong_arity("client|reply"),
        _ => reply::unknown_subcommand("client", &args[1]),
    };
    Answer::reply(reply)
}

/// CLIENT REPLY ON|OFF|SKIP: whether the next replies are sent; this one is not when
/// replies go off.
fn reply_mode(state: &mut ConnState, mode: &[u8]) -> Option<Answer> {
    let mode = match mode.to_ascii_lowercase().as_slice() {
        b"on" => ReplyMode::On,
        b"off" => ReplyMode::Off,
        // As in Redis, SKIP while replies are off changes nothing.
        b"skip" if state.replies == ReplyMode::Off => ReplyMode::Off,
        b"skip" => ReplyMode::SkipNext,
        _ => return Answer::reply(reply::error(SYNTAX)),
    };
    state.replies = mode;
    Some(Answer {
        reply: ok(),
        close: false,
        silent: mode != ReplyMode::On,
        pending: None,
    })
}

/// CLIENT SETINFO LIB-NAME|LIB-VER value, checked as Redis checks it and shown by CLIENT
/// LIST and INFO (`lib-name=`, `lib-ver=`). Clients (redis-py, node-redis) send it on
/// connecting.
fn setinfo(state: &ConnState, registry: &Registry, attr: &[u8], value: &[u8]) -> Bytes {
    let attr_shown = String::from_utf8_lossy(attr);
    let is_name = attr.eq_ignore_ascii_case(b"lib-name");
    if !is_name && !attr.eq_ignore_ascii_case(b"lib-ver") {
        return reply::error(&reply::connection::unrecognized_option(&attr_shown));
    }
    // Redis's check of what CLIENT LIST shows: printable ASCII, no space.
    if !value.iter().all(|b| (b'!'..=b'~').contains(b)) {
        return reply::error(&reply::connection::unshowable_value(&attr_shown));
    }
    // Printable ASCII, so the bytes are the text.
    let value = String::from_utf8_lossy(value).into_owned();
    registry.update(state.id, |entry| {
        if is_name {
            entry.lib_name = value;
        } else {
            entry.lib_ver = value;
        }
    });
    ok()
}

/// CLIENT PAUSE timeout [WRITE|ALL], with Redis's checks and error texts.
fn pause(registry: &Registry, args: &[Bytes]) -> Bytes {
    let Some(timeout) = parse_i64(&args[0]) else {
        return reply::error(reply::connection::TIMEOUT_NOT_INTEGER);
    };
    let Ok(timeout) = u64::try_from(timeout) else {
        return reply::error(reply::connection::TIMEOUT_NEGATIVE);
    };
    let mode = match args.get(1).map(|m| m.to_ascii_lowercase()).as_deref() {
        None | Some(b"all") => PauseMode::All,
        Some(b"write") => PauseMode::Write,
        Some(_) => return reply::error(reply::connection::PAUSE_MODE),
    };
    match tokio::time::Instant::now().checked_add(std::time::Duration::from_millis(timeout)) {
        Some(until) => {
            registry.pause().pause(until, mode);
            ok()
        }
        None => reply::error(reply::connection::TIMEOUT_RANGE),
    }
}

/// How often, and how far apart, CLIENT UNBLOCK looks for a command that is still on its
/// way to the node.
const UNBLOCK_ATTEMPTS: usize = 10;
const UNBLOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: a client of the proxy blocks on a connection of its
/// own to a node, so the node unblocks it: the proxy finds that connection among the node's
/// clients (its `addr=` is the connection's local address) and sends the node CLIENT
/// UNBLOCK with the node's id for it. The blocked client then gets the node's answer (a
/// timeout's reply, or `-UNBLOCKED`). `:0` when the client is not blocked, as Redis.
fn unblock(registry: &Registry, proxy: &Arc<Proxy>, args: &[Bytes]) -> Option<Answer> {
    let mode: &'static [u8] = match args.get(3).map(|m| m.to_ascii_lowercase()).as_deref() {
        None | Some(b"timeout") => b"TIMEOUT",
        Some(b"error") => b"ERROR",
        Some(_) => return Answer::reply(reply::error(reply::connection::UNBLOCK_REASON)),
    };
    let Some(id) = parse_i64(&args[2]) else {
        return Answer::reply(reply::error(reply::text::NOT_AN_INTEGER));
    };
    let blocked = u64::try_from(id)
        .ok()
        .and_then(|id| registry.blocked_on(id));
    let Some((blocked, conn)) = blocked.and_then(|b| b.current().map(|now| (b, now))) else {
        return Answer::reply(encode::integer_frame(0));
    };
    let node = conn.addr().clone();
    let proxy = proxy.clone();
    let pending = async move {
        // The command may still be on its way to the node (its connection is opened for
        // it): a few tries, as long as the client still waits on the same connection.
        for attempt in 0..UNBLOCK_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(UNBLOCK_RETRY).await;
                if !blocked.current().is_some_and(|now| now.same(&conn)) {
                    break;
                }
            }
            let Some(local) = conn.local_addr() else {
                continue;
            };
            let list = encode::encode_request(&[b"CLIENT", b"LIST", b"TYPE", b"normal"]);
            let listed = proxy.call_node(&node, list, Proto::Resp2).await;
            if listed.first() == Some(&b'-') {
                return listed;
            }
            let Some(node_id) = node_client_id(&listed, &local.to_string()) else {
                continue;
            };
            let request =
                encode::encode_request(&[b"CLIENT", b"UNBLOCK", node_id.as_bytes(), mode]);
            // A wait of the proxy's own ends with the same null on its timeout.
            blocked.note_unblock(true);
            let answer = proxy.call_node(&node, request, Proto::Resp2).await;
            if &answer[..] != b":0\r\n" {
                return answer;
            }
            blocked.note_unblock(false);
        }
        encode::integer_frame(0)
    };
    Some(Answer {
        reply: Bytes::new(),
        close: false,
        silent: false,
        pending: Some(pending.boxed()),
    })
}

/// The `id=` of the client whose `addr=` is `addr` in a node's CLIENT LIST reply.
fn node_client_id(listed: &[u8], addr: &str) -> Option<String> {
    let text = String::from_utf8_lossy(listed);
    let wanted = format!(" addr={addr} ");
    let line = text.lines().find(|line| line.contains(&wanted))?;
    let id = line
        .split(' ')
        .find_map(|field| field.strip_prefix("id="))?;
    Some(id.to_owned())
}

/// CLIENT INFO / LIST output: a verbatim string in RESP3, as Redis sends it.
fn text(proto: Proto, text: &str) -> Bytes {
    let mut out = BytesMut::new();
    encode::verbatim(&mut out, proto, *b"txt", text.as_bytes());
    out.freeze()
}

/// CLIENT LIST [TYPE type | ID id ...], with Redis's argument rules and errors.
fn list(proto: Proto, registry: &Registry, names: CommandName<'_>, args: &[Bytes]) -> Bytes {
    let option = args.get(2).map(|option| option.to_ascii_lowercase());
    match (option.as_deref(), args.len()) {
        (None, _) => text(proto, &registry.list(None, names)),
        (Some(b"type"), 4) => match ClientType::parse(&args[3]) {
            Some(client_type) => text(proto, &registry.list(Some(client_type), names)),
            None => unknown_client_type(&args[3]),
        },
        (Some(b"id"), 4..) => {
            let mut lines = String::new();
            for id in &args[3..] {
                let Some(id) = parse_i64(id) else {
                    return reply::error(reply::connection::INVALID_CLIENT_ID);
                };
                if let Some(line) = u64::try_from(id)
                    .ok()
                    .and_then(|id| registry.line(id, names))
                {
                    lines.push_str(&line);
                }
            }
            text(proto, &lines)
        }
        _ => reply::error(SYNTAX),
    }
}

fn unknown_client_type(name: &[u8]) -> Bytes {
    reply::error(&reply::connection::unknown_client_type(
        &String::from_utf8_lossy(name),
    ))
}

/// CLIENT KILL addr (answers +OK, and may end the caller's own connection) or CLIENT KILL
/// filter value ... (answers how many clients it ended, sparing the caller unless SKIPME
/// no). Ended clients are closed at once, their pending replies dropped, as in Redis.
fn kill(state: &ConnState, registry: &Registry, auth: &UserSet, args: &[Bytes]) -> Option<Answer> {
    let old_form = args.len() == 3;
    let filter = if old_form {
        KillFilter {
            addr: Some(String::from_utf8_lossy(&args[2]).into_owned()),
            ..KillFilter::default()
        }
    } else {
        match kill_filter(auth, &args[2..]) {
            Ok(filter) => filter,
            Err(error) => return Answer::reply(error),
        }
    };
    let (killed, caller_killed) = registry.kill(&filter, state.id);
    let reply = match (old_form, killed) {
        (true, 0) => reply::error(reply::connection::NO_SUCH_CLIENT),
        (true, _) => ok(),
        (false, n) => encode::integer_frame(n as i64),
    };
    Some(Answer {
        reply,
        close: caller_killed,
        silent: false,
        pending: None,
    })
}

fn kill_filter(auth: &UserSet, options: &[Bytes]) -> Result<KillFilter, Bytes> {
    let mut filter = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    let lossy = |value: &Bytes| String::from_utf8_lossy(value).into_owned();
    for pair in options.chunks(2) {
        let [option, value] = pair else {
            return Err(reply::error(SYNTAX));
        };
        match option.to_ascii_lowercase().as_slice() {
            b"id" => match parse_i64(value).filter(|&id| id > 0) {
                Some(id) => filter.id = Some(id as u64),
                None => return Err(reply::error(reply::connection::CLIENT_ID_POSITIVE)),
            },
            b"type" => match ClientType::parse(value) {
                Some(client_type) => filter.client_type = Some(client_type),
                None => return Err(unknown_client_type(value)),
            },
            b"addr" => filter.addr = Some(lossy(value)),
            b"laddr" => filter.laddr = Some(lossy(value)),
            b"user" => {
                let name = lossy(value);
                if auth.get(&name).is_none() {
                    return Err(reply::error(&reply::connection::no_such_user(&name)));
                }
                filter.user = Some(name);
            }
            b"skipme" => match value.to_ascii_lowercase().as_slice() {
                b"yes" => filter.skip_me = true,
                b"no" => filter.skip_me = false,
                _ => return Err(reply::error(SYNTAX)),
            },
            _ => return Err(reply::error(SYNTAX)),
        }
    }
    Ok(filter)
}

/// CLIENT TRACKING on|off [options], checked as Redis checks them (see `tracking`). ON
/// answers once the masters' tracking connections report (see `tracking::READY_WAIT`).
fn tracking(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Arc<Proxy>,
    args: &[Bytes],
) -> Option<Answer> {
    let current = state.tracking.as_ref().map(|t| &t.options);
    let options = match tracking::parse(args, current, |id| registry.contains(id)) {
        Ok(Switch::On(options)) => options,
        Ok(Switch::Off) => {
            state.tracking = None;
            registry.update(state.id, |e| e.tracking = TrackingShown::default());
            return Answer::reply(ok());
        }
        Err(error) => return Answer::reply(error),
    };
    if proxy.config.client_tracking == Emulation::Refuse {
        return Answer::reply(reply::error(reply::connection::TRACKING_REFUSED));
    }
    let shown = TrackingShown {
        on: true,
        bcast: options.bcast,
        broken: false,
        redirect: options.redirect,
    };
    registry.update(state.id, |e| e.tracking = shown);
    let hub = registry.tracking();
    let mailboxes = registry.mailboxes();
    let naming = tracking::Naming::of(proxy);
    let ready = hub.enable(
        state.id,
        options.clone(),
        &proxy.topology,
        &mailboxes,
        naming,
    );
    match &mut state.tracking {
        // Replaced in place: dropping the old handle would turn tracking off.
        Some(enabled) => enabled.options = options,
        None => {
            let enabled = tracking::Enabled::new(hub.clone(), state.id, options);
            state.tracking = Some(Box::new(enabled));
        }
    }
    let Some(mut ready) = ready else {
        return Answer::reply(ok());
    };
    let pending = async move {
        let _ = tokio::time::timeout(tracking::READY_WAIT, ready.wait_for(|up| *up)).await;
        ok()
    };
    // The reply without the wait serves an ON queued in MULTI (answered at EXEC): reads
    // are then invalidated right behind their replies until the connections are up.
    Some(Answer {
        reply: ok(),
        close: false,
        silent: false,
        pending: Some(pending.boxed()),
    })
}

/// CLIENT TRACKINGINFO, as Redis answers it.
fn tracking_info(state: &ConnState, registry: &Registry) -> Bytes {
    let enabled = state.tracking.as_deref();
    let broken = enabled.is_some() && registry.tracking_shown(state.id).broken;
    let options = enabled.map(|t| &t.options);
    let caching = enabled.is_some_and(|t| t.caching);
    tracking::info(state.proto, options, caching, broken)
}

/// CLIENT CACHING yes|no: the next command's keys are tracked (OPTIN) or not (OPTOUT).
fn caching(state: &mut ConnState, value: &[u8]) -> Bytes {
    let Some(enabled) = state.tracking.as_deref_mut() else {
        return reply::error(reply::connection::CACHING_WITHOUT_TRACKING);
    };
    let allowed = match value.to_ascii_lowercase().as_slice() {
        b"yes" => enabled.options.optin,
        b"no" => enabled.options.optout,
        _ => return reply::error(SYNTAX),
    };
    if !allowed {
        let text = match value.eq_ignore_ascii_case(b"yes") {
            true => reply::connection::CACHING_YES_WITHOUT_OPTIN,
            false => reply::connection::CACHING_NO_WITHOUT_OPTOUT,
        };
        return reply::error(text);
    }
    enabled.caching = true;
    ok()
}

/// CLIENT HELP: Redis's text for the subcommands the proxy answers.
fn help() -> Bytes {
    const LINES: &[&str] = &[
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETREDIR",
        "    Return the client ID we are redirecting to when tracking is enabled.",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "    * ID <client-id>",
        "      Kill connections by client id.",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "    * ID <client-id> [<client-id> ...]",
        "      Return clients with the specified IDs.",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]",
        "    Unblock the specified blocked client.",
        "UNPAUSE",
        "    Stop the current client pause, resuming traffic.",
        "PAUSE <timeout> [WRITE|ALL]",
        "    Suspend all, or just write, clients for <timeout> milliseconds.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "NO-EVICT (ON|OFF)",
        "    Protect current client connection from eviction.",
        "HELP",
        "    Prints this help.",
    ];
    let mut out = BytesMut::new();
    encode::array_header(&mut out, LINES.len());
    for line in LINES {
        encode::simple_string(&mut out, line.as_bytes());
    }
    out.freeze()
}
