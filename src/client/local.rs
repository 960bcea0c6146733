//! Commands about the connection itself, answered by the proxy as a single Redis would:
//! PING, ECHO, QUIT, SELECT, HELLO, AUTH, RESET, READONLY/READWRITE and CLIENT's
//! connection subcommands. Everything else goes to the dispatcher.

use bytes::{Bytes, BytesMut};

use crate::auth::{Auth, User};
use crate::command::{CommandFlags, CommandTable};
use crate::dispatch::Proxy;
use crate::protocol::{encode, parse_i64, Proto, Request};
use crate::reply;

use super::registry::{ClientType, CommandName, KillFilter, Registry};

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
    pub fn initial_user(auth: &Auth) -> Option<String> {
        auth.open_default().map(|user| user.name.clone())
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
/// subscriptions never reach the dispatcher's own check. As in Redis, QUIT and the
/// commands flagged `no_auth` (AUTH, HELLO, RESET) are open to every user.
pub fn acl_refusal(commands: &CommandTable, user: &User, request: &Request) -> Option<Bytes> {
    if user.is_unrestricted() || request.name().eq_ignore_ascii_case(b"quit") {
        return None;
    }
    let spec = commands.lookup(&request.args)?;
    if spec.flags.has(CommandFlags::NO_AUTH) || user.may_run(spec) {
        return None;
    }
    Some(reply::error(&crate::auth::noperm_command(&spec.name)))
}

/// A locally answered command: the reply, and whether the connection closes after it.
pub struct Answer {
    pub reply: Bytes,
    pub close: bool,
    /// The reply is not sent (CLIENT REPLY OFF and SKIP are not answered).
    pub silent: bool,
}

impl Answer {
    fn reply(reply: Bytes) -> Option<Answer> {
        Some(Answer {
            reply,
            close: false,
            silent: false,
        })
    }
}

/// Answers `request` if it is about the connection; `None` sends it on to the dispatcher.
pub fn answer(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Proxy,
    request: &Request,
) -> Option<Answer> {
    let auth = &proxy.auth;
    let args = &request.args;
    let mut name = [0u8; 16];
    let len = args[0].len();
    if len > name.len() {
        return None;
    }
    for (dst, src) in name.iter_mut().zip(args[0].iter()) {
        *dst = src.to_ascii_lowercase();
    }
    match &name[..len] {
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
        }),
        b"select" if args.len() == 2 => Answer::reply(match parse_i64(&args[1]) {
            Some(0) => ok(),
            Some(_) => reply::error(reply::text::SELECT_RANGE),
            None => reply::error("ERR value is not an integer or out of range"),
        }),
        b"select" => Answer::reply(reply::wrong_arity("select")),
        b"readonly" | b"readwrite" if args.len() == 1 => Answer::reply(ok()),
        b"auth" => {
            let reply = authenticate(state, auth, args);
            show_user(state, registry);
            Answer::reply(reply)
        }
        b"hello" => {
            let reply = hello(state, registry, auth, &proxy.server_version, args);
            show_user(state, registry);
            Answer::reply(reply)
        }
        b"acl" if args.len() == 2 && args[1].eq_ignore_ascii_case(b"whoami") => Answer::reply(
            encode::bulk_frame(state.user.as_deref().unwrap_or("default").as_bytes()),
        ),
        b"reset" if args.len() == 1 => {
            state.proto = Proto::Resp2;
            state.name = None;
            state.user = ConnState::initial_user(auth);
            state.replies = ReplyMode::On;
            registry.update(state.id, |e| {
                e.name.clear();
                e.resp = 2;
            });
            show_user(state, registry);
            Answer::reply(Bytes::from_static(b"+RESET\r\n"))
        }
        b"client" if args.len() >= 2 => client(state, registry, proxy, args),
        _ => None,
    }
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
fn authenticate(state: &mut ConnState, auth: &Auth, args: &[Bytes]) -> Bytes {
    let (user, password) = match args.len() {
        // With no password configured, `AUTH password` is a mistake worth naming, as in Redis.
        2 if auth.open_default().is_some() => {
            return reply::error(reply::text::AUTH_NOT_CONFIGURED)
        }
        2 => (&b"default"[..], &args[1]),
        3 => (&args[1][..], &args[2]),
        _ => return reply::error(reply::text::SYNTAX),
    };
    match auth.check(user, password) {
        Some(user) => {
            state.user = Some(user.name.clone());
            ok()
        }
        None => {
            crate::metrics::auth_failure();
            tracing::debug!(client = state.id, "authentication failed");
            reply::error(crate::auth::WRONGPASS)
        }
    }
}

fn hello(
    state: &mut ConnState,
    registry: &Registry,
    auth: &Auth,
    version: &str,
    args: &[Bytes],
) -> Bytes {
    let mut proto = state.proto;
    let mut name = None;
    if let Some(version) = args.get(1) {
        proto = match parse_i64(version) {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => return reply::error(reply::text::NO_PROTO),
            None => return reply::error("ERR Protocol version is not an integer or out of range"),
        };
        let mut i = 2;
        let mut authenticated = state.user.is_some();
        while i < args.len() {
            let more = args.len() - i - 1;
            if args[i].eq_ignore_ascii_case(b"AUTH") && more >= 2 {
                let credentials = [args[i].clone(), args[i + 1].clone(), args[i + 2].clone()];
                let answer = authenticate(state, auth, &credentials);
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
                return reply::error(&format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                ));
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

const SYNTAX: &str = "ERR syntax error";
const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn set_name(state: &mut ConnState, registry: &Registry, name: Bytes) {
    let shown = String::from_utf8_lossy(&name).into_owned();
    state.name = (!name.is_empty()).then_some(name);
    registry.update(state.id, |e| e.name = shown);
}

fn client(
    state: &mut ConnState,
    registry: &Registry,
    proxy: &Proxy,
    args: &[Bytes],
) -> Option<Answer> {
    let auth = &proxy.auth;
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
        (b"setinfo", 4) => ok(),
        (b"info", 2) => text(
            state.proto,
            &registry.line(state.id, &names).unwrap_or_default(),
        ),
        (b"list", _) => list(state.proto, registry, &names, args),
        (b"kill", 3..) => return kill(state, registry, auth, args),
        (b"help", 2) => help(),
        (b"tracking", 3..) => tracking(registry, args),
        (b"trackinginfo", 2) => tracking_info(state.proto),
        // Tracking is never on, so this is Redis's answer whatever the argument.
        (b"caching", 3) => reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with \
             OPTIN or OPTOUT mode enabled",
        ),
        // The proxy never pauses its clients: nothing to resume.
        (b"unpause", 2) => ok(),
        (
            b"setname" | b"getname" | b"id" | b"setinfo" | b"info" | b"kill" | b"help"
            | b"tracking" | b"trackinginfo" | b"caching" | b"unpause",
            _,
        ) => reply::wrong_arity(&format!("client|{}", String::from_utf8_lossy(&sub))),
        (b"no-evict" | b"no-touch", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" | b"off" => ok(),
            _ => reply::error(SYNTAX),
        },
        (b"reply", 3) => {
            let mode = match args[2].to_ascii_lowercase().as_slice() {
                b"on" => ReplyMode::On,
                b"off" => ReplyMode::Off,
                // As in Redis, SKIP while replies are off changes nothing.
                b"skip" if state.replies == ReplyMode::Off => ReplyMode::Off,
                b"skip" => ReplyMode::SkipNext,
                _ => return Answer::reply(reply::error(SYNTAX)),
            };
            state.replies = mode;
            return Some(Answer {
                reply: ok(),
                close: false,
                silent: mode != ReplyMode::On,
            });
        }
        (b"reply", _) => reply::wrong_arity("client|reply"),
        (b"getredir", 2) => encode::integer_frame(-1),
        _ => reply::unknown_subcommand("client", &args[1]),
    };
    Answer::reply(reply)
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
                    return reply::error("ERR Invalid client ID");
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
    reply::error(&format!(
        "ERR Unknown client type '{}'",
        String::from_utf8_lossy(name)
    ))
}

/// CLIENT KILL addr (answers +OK, and may end the caller's own connection) or CLIENT KILL
/// filter value ... (answers how many clients it ended, sparing the caller unless SKIPME
/// no). Ended clients are closed at once, their pending replies dropped, as in Redis.
fn kill(state: &ConnState, registry: &Registry, auth: &Auth, args: &[Bytes]) -> Option<Answer> {
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
        (true, 0) => reply::error("ERR No such client"),
        (true, _) => ok(),
        (false, n) => encode::integer_frame(n as i64),
    };
    Some(Answer {
        reply,
        close: caller_killed,
        silent: false,
    })
}

fn kill_filter(auth: &Auth, options: &[Bytes]) -> Result<KillFilter, Bytes> {
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
                None => return Err(reply::error("ERR client-id should be greater than 0")),
            },
            b"type" => match ClientType::parse(value) {
                Some(client_type) => filter.client_type = Some(client_type),
                None => return Err(unknown_client_type(value)),
            },
            b"addr" => filter.addr = Some(lossy(value)),
            b"laddr" => filter.laddr = Some(lossy(value)),
            b"user" => {
                let name = lossy(value);
                if !auth.exists(&name) {
                    return Err(reply::error(&format!("ERR No such user '{name}'")));
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

/// CLIENT TRACKING on|off [options]: options are checked as Redis checks them; OFF is
/// answered OK (tracking is never on), ON is refused: the proxy does not relay the
/// invalidation messages client-side caching depends on.
fn tracking(registry: &Registry, args: &[Bytes]) -> Bytes {
    let mut redirect = false;
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        match args[j].to_ascii_lowercase().as_slice() {
            b"redirect" if more => {
                j += 1;
                if redirect {
                    return reply::error("ERR A client can only redirect to a single other client");
                }
                redirect = true;
                let Some(id) = parse_i64(&args[j]) else {
                    return reply::error("ERR value is not an integer or out of range");
                };
                if !u64::try_from(id).is_ok_and(|id| registry.contains(id)) {
                    return reply::error("ERR The client ID you want redirect to does not exist");
                }
            }
            b"prefix" if more => j += 1,
            b"bcast" | b"optin" | b"optout" | b"noloop" => {}
            _ => return reply::error(SYNTAX),
        }
        j += 1;
    }
    match args[2].to_ascii_lowercase().as_slice() {
        b"off" => ok(),
        b"on" => reply::error(
            "ERR proxy: CLIENT TRACKING ON is not supported (slotbridge does not relay the \
             invalidation messages client-side caching needs)",
        ),
        _ => reply::error(SYNTAX),
    }
}

/// CLIENT TRACKINGINFO of a client that does not track, as Redis answers it.
fn tracking_info(proto: Proto) -> Bytes {
    let mut out = BytesMut::new();
    encode::map_header(&mut out, proto, 3);
    encode::bulk(&mut out, b"flags");
    encode::set_header(&mut out, proto, 1);
    encode::bulk(&mut out, b"off");
    encode::bulk(&mut out, b"redirect");
    encode::integer(&mut out, -1);
    encode::bulk(&mut out, b"prefixes");
    encode::array_header(&mut out, 0);
    out.freeze()
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

fn ok() -> Bytes {
    Bytes::from_static(b"+OK\r\n")
}
