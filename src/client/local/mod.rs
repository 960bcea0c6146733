//! Commands about the connection itself, answered by the proxy as a single Redis would:
//! PING, ECHO, QUIT, SELECT, HELLO, AUTH, RESET, READONLY/READWRITE, ASKING, CLIENT's
//! connection subcommands, ACL and CONFIG SET/GET requirepass (the proxy's own users),
//! MONITOR (of this proxy's traffic, see `monitor`). Everything else goes to the
//! dispatcher.

mod acl;
mod client;
mod slotbridge;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use smallvec::SmallVec;

use crate::acl::{AclLog, Context, Reason, UserSet};
use crate::auth::{Denial, User};
use crate::command::{CommandFlags, CommandTable};
use crate::dispatch::Proxy;
use crate::protocol::{encode, parse_i64, FoldedName, Proto, Request};
use crate::reply;

use super::monitor::Feed;
use super::registry::Registry;

/// What a single Redis keeps per connection, as far as the proxy emulates it.
#[derive(Debug)]
pub struct ConnState {
    pub id: u64,
    pub proto: Proto,
    pub name: Option<Bytes>,
    /// The authenticated user's name; `None` until the client authenticates.
    pub user: Option<String>,
    /// Which replies the client is sent (CLIENT REPLY).
    pub replies: ReplyMode,
    /// The lines MONITOR shows the client, while it monitors.
    pub monitor: Option<Box<Feed>>,
    /// The arguments of the commands queued in MULTI while somebody monitors: MONITOR
    /// shows them at EXEC, as Redis.
    pub shown_at_exec: Vec<SmallVec<[Bytes; 4]>>,
    /// The database SELECT chose (see `dispatch::database`); 0 until then.
    pub db: u32,
    /// The client's CLIENT TRACKING, while on.
    pub tracking: Option<Box<super::tracking::Enabled>>,
}

/// What CLIENT REPLY set.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    #[default]
    On,
    Off,
    /// The reply to the next command is not sent (SKIP), then replies are on again.
    SkipNext,
}

impl ReplyMode {
    /// Whether the reply to the command starting now is not sent; ends a SKIP. (CLIENT
    /// REPLY and RESET decide about their own replies instead, see [`sets_reply_mode`].)
    pub fn mutes(&mut self) -> bool {
        match *self {
            ReplyMode::On => false,
            ReplyMode::Off => true,
            ReplyMode::SkipNext => {
                *self = ReplyMode::On;
                true
            }
        }
    }
}

/// Whether `request` sets the reply mode (CLIENT REPLY, RESET): its own reply follows the
/// new mode, not the old one.
pub fn sets_reply_mode(request: &Request) -> bool {
    let name = request.name();
    name.eq_ignore_ascii_case(b"reset")
        || name.eq_ignore_ascii_case(b"client")
            && request
                .args
                .get(1)
                .is_some_and(|sub| sub.eq_ignore_ascii_case(b"reply"))
}

impl ConnState {
    /// The user a new connection starts as: `default` when it needs no password.
    pub fn initial_user(users: &UserSet) -> Option<String> {
        users.open_default().map(|user| user.acl.name.clone())
    }
}

/// Whether a client that has not authenticated may send this command (as Redis: AUTH,
/// HELLO, QUIT and RESET; everything else gets `-NOAUTH`).
pub fn allowed_before_auth(request: &Request) -> bool {
    let name = &request.args[0];
    [&b"auth"[..], b"hello", b"quit", b"reset"]
        .iter()
        .any(|allowed| name.eq_ignore_ascii_case(allowed))
}

/// The NOPERM reply when `user`'s ACL does not allow `request`. Checked before anything
/// else looks at the request: the commands answered in this module, transactions and
/// subscriptions never reach the dispatcher's own check (which adds the key patterns).
/// As in Redis, QUIT and the commands flagged `no_auth` (AUTH, HELLO, RESET) are open to
/// every user.
pub fn acl_refusal(
    commands: &CommandTable,
    user: &User,
    request: &Request,
    on_denial: impl FnOnce(Reason, &[u8]),
) -> Option<Bytes> {
    if user.is_unrestricted() || request.name().eq_ignore_ascii_case(b"quit") {
        return None;
    }
    let spec = commands.lookup(&request.args)?;
    if spec.flags.has(CommandFlags::NO_AUTH) {
        return None;
    }
    let denial = user.denial_before_keys(spec, &request.args)?;
    match denial {
        // As Redis logs it: the first channel refused (approximated by the first named).
        Denial::Channels => on_denial(
            Reason::Channel,
            request.args.get(1).map_or(&b""[..], |arg| &arg[..]),
        ),
        Denial::Keys => on_denial(Reason::Key, spec.name.as_bytes()),
        Denial::Command | Denial::Scripts => on_denial(Reason::Command, spec.name.as_bytes()),
    }
    Some(reply::error(&denial.text(&spec.name)))
}

/// A locally answered command: the reply, and whether the connection closes after it.
pub struct Answer {
    pub reply: Bytes,
    pub close: bool,
    /// The reply is not sent (CLIENT REPLY OFF and SKIP are not answered).
    pub silent: bool,
    /// The reply comes from this future instead of `reply` (CLIENT UNBLOCK asks a node).
    pub pending: Option<BoxFuture<'static, Bytes>>,
}

impl Answer {
    fn reply(reply: Bytes) -> Option<Answer> {
        Some(Answer {
            reply,
            close: false,
            silent: false,
            pending: None,
        })
    }
}

/// Whether [`answer`] answers a request of these `args` (command name `name`, folded to
/// lower case): [`answer`] sends everything else on, and SLOTBRIDGE EXPLAIN reads its
/// "answered by the proxy" shape here.
pub fn answered_here(name: &[u8], args: &[Bytes]) -> bool {
    match name {
        b"ping" | b"echo" | b"quit" | b"select" | b"asking" | b"auth" | b"hello" => true,
        b"slotbridge" => true,
        b"readonly" | b"readwrite" | b"reset" | b"monitor" => args.len() == 1,
        b"acl" => args.len() >= 2,
        b"config" => acl::names_requirepass(args),
        b"client" => args.len() >= 2,
        _ => false,
    }
}

/// Answers `request` if it is about the connection; `None` sends it on to the dispatcher.
pub fn answer(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Arc<Proxy>,
    request: &Request,
    name: &FoldedName,
) -> Option<Answer> {
    let users = &proxy.acl.users;
    let args = &request.args;
    if !answered_here(name.as_bytes(), args) {
        return None;
    }
    match name.as_bytes() {
        b"ping" => match args.len() {
            1 => Answer::reply(Bytes::from_static(b"+PONG\r\n")),
            2 => Answer::reply(encode::bulk_frame(&args[1])),
            _ => Answer::reply(reply::wrong_arity("ping")),
        },
        b"echo" if args.len() == 2 => Answer::reply(encode::bulk_frame(&args[1])),
        b"echo" => Answer::reply(reply::wrong_arity("echo")),
        b"quit" => Some(Answer {
            reply: Bytes::from_static(b"+OK\r\n"),
            close: true,
            silent: false,
            pending: None,
        }),
        b"select" if args.len() == 2 => select(state, registry, proxy, &args[1]),
        b"select" => Answer::reply(reply::wrong_arity("select")),
        b"readonly" | b"readwrite" if args.len() == 1 => Answer::reply(ok()),
        // ASKING marks the connection for its next command: on a shared backend connection
        // it would apply to another client's. The proxy follows ASK itself; clients never
        // need it.
        b"asking" if args.len() == 1 => Answer::reply(ok()),
        b"asking" => Answer::reply(reply::wrong_arity("asking")),
        b"auth" => {
            let reply = authenticate(state, registry, proxy, args);
            show_user(state, registry);
            Answer::reply(reply)
        }
        b"hello" => {
            let reply = hello(state, registry, proxy, args);
            show_user(state, registry);
            Answer::reply(reply)
        }
        b"acl" => Answer::reply(acl::answer_acl(state, proxy, args)),
        b"config" => Answer::reply(acl::answer_requirepass(state, proxy, args)),
        b"reset" if args.len() == 1 => {
            state.proto = Proto::Resp2;
            state.name = None;
            state.user = ConnState::initial_user(users);
            state.replies = ReplyMode::On;
            state.monitor = None;
            state.db = 0;
            state.tracking = None;
            registry.update(state.id, |e| {
                e.name.clear();
                e.resp = 2;
                e.db = 0;
                e.tracking = Default::default();
            });
            show_user(state, registry);
            Answer::reply(Bytes::from_static(b"+RESET\r\n"))
        }
        b"monitor" => monitor(state, registry, proxy),
        b"client" if args.len() >= 2 => client::answer(state, registry, proxy, args),
        b"slotbridge" => Answer::reply(slotbridge::answer(state, proxy, args)),
        _ => None,
    }
}

/// SELECT `index`: the client's keys are database `index`'s from now on (see
/// `dispatch::database`), within the configured `databases`; a database other than 0 is
/// marked in use before the client is told `+OK`.
fn select(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Arc<Proxy>,
    index: &[u8],
) -> Option<Answer> {
    let Some(db) = parse_i64(index) else {
        return Answer::reply(reply::error(reply::text::NOT_AN_INTEGER));
    };
    let Some(db) = u32::try_from(db)
        .ok()
        .filter(|&db| db < proxy.config.databases)
    else {
        return Answer::reply(reply::error(reply::text::SELECT_RANGE));
    };
    if db != 0 && !proxy.has_other_databases() {
        return Answer::reply(reply::error(reply::database::SELECT_UNDER_LAYOUT));
    }
    state.db = db;
    registry.update(state.id, |e| e.db = db);
    if db == 0 {
        return Answer::reply(ok());
    }
    // `reply` is what an EXEC answers for a SELECT it ran (see `splice_local_answers`).
    Some(Answer {
        reply: ok(),
        close: false,
        silent: false,
        pending: Some(Box::pin(proxy.clone().mark_other_databases_in_use())),
    })
}

/// MONITOR: the client is shown every command of every client from now on. As Redis, a
/// second MONITOR is not answered.
fn monitor(state: &mut ConnState, registry: &Registry, proxy: &Proxy) -> Option<Answer> {
    if let Some(refusal) = proxy.policy.refusal("monitor") {
        return Answer::reply(refusal);
    }
    let silent = state.monitor.is_some();
    if !silent {
        state.monitor = Some(Box::new(Feed::open(registry.monitors(), state.id)));
    }
    Some(Answer {
        reply: ok(),
        close: false,
        silent,
        pending: None,
    })
}

/// The client's CLIENT LIST line, as the ACL log keeps it.
pub fn client_info(state: &ConnState, registry: &Registry, proxy: &Proxy) -> String {
    let names = |index: usize| proxy.commands.spec(index).map(|spec| spec.name.as_str());
    registry.line(state.id, &names).unwrap_or_default()
}

/// Records a refusal of `user`'s command in the ACL log.
pub fn log_denial(
    log: &AclLog,
    reason: Reason,
    multi: bool,
    object: &[u8],
    user: &str,
    info: &str,
) {
    let context = if multi {
        Context::Multi
    } else {
        Context::TopLevel
    };
    log.record(reason, context, object, user.as_bytes(), info.as_bytes());
}

/// Shows the connection's user in CLIENT LIST (`default` before authentication, as Redis).
fn show_user(state: &ConnState, registry: &Registry) {
    let user = state.user.as_deref().unwrap_or("default");
    registry.update(state.id, |e| {
        if e.user != user {
            e.user = user.to_owned();
        }
    });
}

/// AUTH [user] password: on success the connection runs as that user.
fn authenticate(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Proxy,
    args: &[Bytes],
) -> Bytes {
    let users = &proxy.acl.users;
    let (user, password) = match args.len() {
        // With no password configured, `AUTH password` is a mistake worth naming, as in Redis.
        2 if users.open_default().is_some() => {
            return reply::error(reply::text::AUTH_NOT_CONFIGURED)
        }
        2 => (&b"default"[..], &args[1]),
        3 => (&args[1][..], &args[2]),
        0 | 1 => return reply::wrong_arity("auth"),
        _ => return reply::error(reply::text::SYNTAX),
    };
    match users.check(user, password) {
        Some(live) => {
            state.user = Some(live.acl.name.clone());
            ok()
        }
        None => {
            let info = client_info(state, registry, proxy);
            proxy.acl.log.record(
                Reason::Auth,
                Context::TopLevel,
                &args[0],
                user,
                info.as_bytes(),
            );
            crate::metrics::auth_failure();
            tracing::debug!(client = state.id, "authentication failed");
            reply::error(crate::auth::WRONGPASS)
        }
    }
}

fn hello(state: &mut ConnState, registry: &Registry, proxy: &Proxy, args: &[Bytes]) -> Bytes {
    let version: &str = &proxy.server_version;
    let mut proto = state.proto;
    let mut name = None;
    if let Some(version) = args.get(1) {
        proto = match parse_i64(version) {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => return reply::error(reply::text::NO_PROTO),
            None => return reply::error(reply::connection::PROTOVER_NOT_INTEGER),
        };
        let mut i = 2;
        let mut authenticated = state.user.is_some();
        while i < args.len() {
            let more = args.len() - i - 1;
            if args[i].eq_ignore_ascii_case(b"AUTH") && more >= 2 {
                let credentials = [args[0].clone(), args[i + 1].clone(), args[i + 2].clone()];
                let answer = authenticate(state, registry, proxy, &credentials);
                if answer.first() == Some(&b'-') {
                    return answer;
                }
                authenticated = true;
                i += 3;
            } else if args[i].eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
                if !valid_name(&args[i + 1]) {
                    return reply::error(BAD_NAME);
                }
                name = Some(args[i + 1].clone());
                i += 2;
            } else {
                return reply::error(&reply::connection::hello_syntax(&String::from_utf8_lossy(
                    &args[i],
                )));
            }
        }
        if !authenticated {
            return reply::error(crate::auth::NOAUTH_HELLO);
        }
    } else if state.user.is_none() {
        return reply::error(crate::auth::NOAUTH_HELLO);
    }
    state.proto = proto;
    if let Some(name) = name {
        set_name(state, registry, name);
    }
    registry.update(state.id, |e| {
        e.resp = if proto == Proto::Resp3 { 3 } else { 2 }
    });
    let mut out = BytesMut::new();
    let fields: [(&str, HelloValue); 7] = [
        ("server", HelloValue::Text("redis")),
        ("version", HelloValue::Text(version)),
        (
            "proto",
            HelloValue::Int(if proto == Proto::Resp3 { 3 } else { 2 }),
        ),
        ("id", HelloValue::Int(state.id as i64)),
        ("mode", HelloValue::Text("standalone")),
        ("role", HelloValue::Text("master")),
        ("modules", HelloValue::EmptyArray),
    ];
    encode::map_header(&mut out, proto, fields.len());
    for (key, value) in fields {
        encode::bulk(&mut out, key.as_bytes());
        match value {
            HelloValue::Text(text) => encode::bulk(&mut out, text.as_bytes()),
            HelloValue::Int(n) => encode::integer(&mut out, n),
            HelloValue::EmptyArray => encode::array_header(&mut out, 0),
        }
    }
    out.freeze()
}

enum HelloValue<'a> {
    Text(&'a str),
    Int(i64),
    EmptyArray,
}

const SYNTAX: &str = reply::text::SYNTAX;
const BAD_NAME: &str = reply::connection::BAD_NAME;

fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn set_name(state: &mut ConnState, registry: &Registry, name: Bytes) {
    let shown = String::from_utf8_lossy(&name).into_owned();
    state.name = (!name.is_empty()).then_some(name);
    registry.update(state.id, |e| e.name = shown);
}

fn ok() -> Bytes {
    Bytes::from_static(b"+OK\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn answered_here_follows_the_guards_of_answer() {
        for words in [
            &["ping"][..],
            &["echo", "x"],
            &["client", "setname", "x"],
            &["acl", "WHOAMI"],
            &["acl", "cat"],
            &["config", "set", "requirepass", "x"],
            &["config", "GET", "maxmemory", "requirepass"],
            &["reset"],
            &["monitor"],
            &["slotbridge", "explain", "get", "k"],
        ] {
            assert!(
                answered_here(words[0].as_bytes(), &args(words)),
                "{words:?}"
            );
        }
        for words in [
            &["get", "k"][..],
            &["acl"],
            &["config", "get", "*"],
            &["config", "set", "maxmemory", "requirepass"],
            &["client"],
            &["readonly", "x"],
            &["reset", "x"],
            &["monitor", "x"],
        ] {
            assert!(
                !answered_here(words[0].as_bytes(), &args(words)),
                "{words:?}"
            );
        }
    }
}
