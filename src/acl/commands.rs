//! The answers to `ACL <subcommand>`, as Redis 7.0's `aclCommand` gives them, over the
//! proxy's live [`UserSet`] and [`AclLog`]. Pure apart from the users file of SAVE/LOAD.

use bytes::{Bytes, BytesMut};

use super::describe;
use super::log::AclLog;
use super::set::UserSet;
use super::text;
use super::user::{has_spaces, AclUser, RuleError};
use crate::auth::Denial;
use crate::command::{CommandTable, KeyList, ACL_CATEGORIES};
use crate::protocol::{encode, parse_i64, Proto};
use crate::reply;
use crate::rewrite::glob::glob_match;

/// What an ACL command needs besides its arguments.
pub struct AclRequest<'a> {
    /// The live users.
    pub users: &'a UserSet,
    /// The ACL log.
    pub log: &'a AclLog,
    /// The command table (DRYRUN's command lookup and arity).
    pub commands: &'a CommandTable,
    /// The client's protocol.
    pub proto: Proto,
    /// The client's user (ACL WHOAMI).
    pub whoami: Option<&'a str>,
}

/// The reply to `args` (`ACL <subcommand> ...`, the command name included).
pub fn answer(request: &AclRequest<'_>, args: &[Bytes]) -> Bytes {
    let Some(sub) = args.get(1) else {
        return reply::wrong_arity("acl");
    };
    let spec = request
        .commands
        .lookup(args)
        .filter(|s| s.name.contains('|'));
    if let Some(spec) = spec {
        if !spec.arity_ok(args.len()) {
            return reply::wrong_arity(&spec.name);
        }
    }
    let known_subcommand = spec.is_some();
    let sub = sub.to_ascii_lowercase();
    let users = request.users;
    let catalog = users.catalog();
    match (sub.as_slice(), args.len()) {
        (b"setuser", n) if n >= 3 => setuser(users, &args[2], &args[3..]),
        (b"deluser", n) if n >= 3 => deluser(users, &args[2..]),
        (b"getuser", 3) => match std::str::from_utf8(&args[2])
            .ok()
            .and_then(|n| users.get(n))
        {
            Some(live) => describe::getuser_reply(&live.acl, catalog, request.proto),
            None => encode::null_frame(request.proto),
        },
        (b"list" | b"users", 2) => {
            let snapshot = users.snapshot();
            let mut out = BytesMut::new();
            encode::array_header(&mut out, snapshot.len());
            for live in snapshot.values() {
                let line = if sub == b"users" {
                    live.acl.name.clone()
                } else {
                    describe::list_line(&live.acl, catalog)
                };
                encode::bulk(&mut out, line.as_bytes());
            }
            out.freeze()
        }
        (b"whoami", 2) => match request.whoami {
            Some(name) => encode::bulk_frame(name.as_bytes()),
            None => encode::null_frame(request.proto),
        },
        (b"load" | b"save", _) if users.users_file.is_none() => reply::error(text::NO_ACL_FILE),
        (b"load", 2) => load(users),
        (b"save", 2) => save(users),
        (b"cat", 2) => bulk_array(ACL_CATEGORIES.iter().map(|c| c.as_bytes())),
        (b"cat", 3) => category(request.commands, &args[2]),
        (b"log", 2 | 3) => log(request, args.get(2)),
        (b"dryrun", n) if n >= 4 => dryrun(request, &args[2], &args[3..]),
        (b"genpass", 2 | 3) => genpass(args.get(2)),
        (b"help", 2) => {
            let mut out = BytesMut::new();
            encode::array_header(&mut out, text::HELP.len());
            for line in text::HELP {
                encode::simple_string(&mut out, line.as_bytes());
            }
            out.freeze()
        }
        // A known subcommand with arguments aclCommand does not take (`CAT a b`).
        _ if known_subcommand => reply::error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            String::from_utf8_lossy(&args[1])
        )),
        _ => reply::unknown_subcommand("acl", &args[1]),
    }
}

fn ok() -> Bytes {
    Bytes::from_static(b"+OK\r\n")
}

/// Redis's `ACLMergeSelectorArguments`: a `(` argument without its `)` swallows the
/// following ones up to the one that ends with `)`; `None` for an unclosed one.
pub fn merge_selectors(args: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let mut merged = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for &arg in args {
        if let Some(selector) = &mut open {
            selector.push(b' ');
            selector.extend_from_slice(arg);
            if arg.last() == Some(&b')') {
                merged.extend(open.take());
            }
        } else if arg.first() == Some(&b'(') && arg.last() != Some(&b')') {
            open = Some(arg.to_vec());
        } else {
            merged.push(arg.to_vec());
        }
    }
    open.is_none().then_some(merged)
}

/// `ACL SETUSER name rules...`: all rules apply or none (Redis stages them on a copy).
pub fn setuser(users: &UserSet, name: &[u8], rules: &[Bytes]) -> Bytes {
    if has_spaces(name) {
        return reply::error(text::USERNAME_SPACES);
    }
    let name = String::from_utf8_lossy(name).into_owned();
    let args: Vec<&[u8]> = rules.iter().map(|r| &r[..]).collect();
    let Some(merged) = merge_selectors(&args) else {
        let start = args
            .iter()
            .position(|a| a.first() == Some(&b'(') && a.last() != Some(&b')'));
        return reply::error(&text::unmatched_parenthesis(
            start.map_or(&b""[..], |i| args[i]),
        ));
    };
    let catalog = users.catalog();
    let result = users.update(false, |set, generation| {
        let old = set.get(&name);
        let mut acl = old.map_or_else(|| AclUser::new(&name, catalog), |live| live.acl.clone());
        for rule in &merged {
            if let Err(error) = acl.apply(rule, catalog) {
                let reason = match error {
                    RuleError::Redis(reason) => reason.to_string(),
                    RuleError::Unsupported(reason) => reason,
                };
                return Err(text::setuser_error(rule, &reason));
            }
        }
        if let Err((rule, reason)) = acl.check_supported(catalog) {
            return Err(text::setuser_error(rule.as_bytes(), &reason));
        }
        let scripts = old.and_then(|live| live.scripts);
        let live = users
            .live(acl, scripts, generation)
            .map_err(|e| format!("ERR {e}"))?;
        set.insert(name.clone(), live);
        Ok(())
    });
    match result {
        Ok(()) => ok(),
        Err(error) => reply::error(&error),
    }
}

/// `ACL DELUSER name...`: the number deleted; `default` cannot be.
pub fn deluser(users: &UserSet, names: &[Bytes]) -> Bytes {
    if names.iter().any(|n| &n[..] == b"default") {
        return reply::error(text::DELETE_DEFAULT);
    }
    let deleted = users.update(false, |set, _| {
        let mut deleted = 0;
        for name in names {
            if set.remove(&*String::from_utf8_lossy(name)).is_some() {
                deleted += 1;
            }
        }
        Ok(deleted)
    });
    encode::integer_frame(deleted.unwrap_or(0))
}

fn load(users: &UserSet) -> Bytes {
    match load_users_file(users, false) {
        Ok(()) => ok(),
        Err(e) => reply::error(&e),
    }
}

/// ACL LOAD: the users file replaces the whole set (the error is the reply's text). With
/// `missing_ok` (start-up and reload) a file that does not exist yet leaves the set as is,
/// so ACL SAVE can create it.
pub fn load_users_file(users: &UserSet, missing_ok: bool) -> Result<(), String> {
    let Some(path) = &users.users_file else {
        return Err(text::NO_ACL_FILE.into());
    };
    let filename = path.display().to_string();
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(format!(
                "ERR Error loading ACLs, opening file '{filename}': {}",
                io_text(&e)
            ))
        }
    };
    let catalog = users.catalog();
    let loaded = super::file::parse(&data, &filename, catalog).map_err(|e| format!("ERR {e}"))?;
    users
        .update(true, |set, generation| {
            let mut next = super::set::Users::new();
            for acl in loaded {
                let scripts = set.get(&acl.name).and_then(|live| live.scripts);
                next.insert(acl.name.clone(), users.live(acl, scripts, generation)?);
            }
            if !next.contains_key("default") {
                let mut default = AclUser::default_user(catalog);
                default.enabled = false;
                default.nopass = false;
                next.insert("default".into(), users.live(default, None, generation)?);
            }
            *set = next;
            Ok(())
        })
        .map_err(|e| format!("ERR {e}"))
}

/// The `strerror` text of an IO error, as Redis prints it.
fn io_text(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => error.to_string(),
    }
}

fn save(users: &UserSet) -> Bytes {
    let Some(path) = &users.users_file else {
        return reply::error(text::NO_ACL_FILE);
    };
    let snapshot = users.snapshot();
    let rendered = super::file::render(snapshot.values().map(|live| &live.acl), users.catalog());
    match super::file::write(path, &rendered) {
        Ok(()) => ok(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ACL SAVE could not write the users file");
            reply::error(text::SAVE_FAILED)
        }
    }
}

fn category(commands: &CommandTable, name: &[u8]) -> Bytes {
    let Some(bit) = crate::command::acl_category_bit(name).filter(|_| !name.starts_with(b"@"))
    else {
        let shown: String = String::from_utf8_lossy(name).chars().take(128).collect();
        return reply::error(&format!("ERR Unknown category '{shown}'"));
    };
    let names: Vec<&[u8]> = commands
        .iter()
        .filter(|spec| spec.acl_categories & bit != 0)
        .map(|spec| spec.name.as_bytes())
        .collect();
    bulk_array(names)
}

/// `ACL GENPASS [bits]`: that many random bits (256 by default) as hex digits, from the
/// operating system's random source.
fn genpass(bits: Option<&Bytes>) -> Bytes {
    let bits = match bits.map(|b| parse_i64(b)) {
        None => 256,
        Some(Some(bits)) => bits,
        Some(None) => return reply::error("ERR value is not an integer or out of range"),
    };
    if !(1..=4096).contains(&bits) {
        return reply::error(text::GENPASS_BITS);
    }
    let chars = (bits as usize).div_ceil(4);
    let mut random = vec![0u8; chars.div_ceil(2)];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut source| std::io::Read::read_exact(&mut source, &mut random));
    if let Err(e) = read {
        return reply::error(&format!("ERR cannot read random bytes: {e}"));
    }
    let mut hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(chars);
    encode::bulk_frame(hex.as_bytes())
}

fn bulk_array<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let items: Vec<&[u8]> = items.into_iter().collect();
    let mut out = BytesMut::new();
    encode::array_header(&mut out, items.len());
    for item in items {
        encode::bulk(&mut out, item);
    }
    out.freeze()
}

fn log(request: &AclRequest<'_>, arg: Option<&Bytes>) -> Bytes {
    let mut count = 10;
    if let Some(arg) = arg {
        if arg.eq_ignore_ascii_case(b"reset") {
            request.log.reset();
            return ok();
        }
        match parse_i64(arg) {
            Some(n) => count = n.max(0) as usize,
            None => return reply::error("ERR value is not an integer or out of range"),
        }
    }
    request.log.reply(count, request.proto)
}

/// `ACL DRYRUN user command args...`: `OK`, or Redis's description of the denial as a
/// bulk string; the proxy's script refusal is described with its own text.
fn dryrun(request: &AclRequest<'_>, name: &[u8], command: &[Bytes]) -> Bytes {
    let live = std::str::from_utf8(name)
        .ok()
        .and_then(|n| request.users.get(n));
    let Some(live) = live else {
        return reply::error(&format!(
            "ERR User '{}' not found",
            String::from_utf8_lossy(name)
        ));
    };
    let index = request.commands.lookup_index(command).filter(|&i| {
        let spec = request.commands.spec(i);
        !(spec.is_some_and(|s| s.has_subcommands) && command.len() >= 2)
    });
    let Some(spec) = index.and_then(|i| request.commands.spec(i)) else {
        return reply::error(&format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(&command[0])
        ));
    };
    if !spec.arity_ok(command.len()) {
        return reply::wrong_arity(&spec.name);
    }
    let acl = &live.acl;
    let catalog = request.users.catalog();
    let allowed = catalog
        .lookup(spec.name.as_bytes())
        .is_some_and(|i| acl.commands[i] || catalog.no_auth[i]);
    if !allowed {
        return denial(format!(
            "This user has no permissions to run the '{}' command",
            spec.name
        ));
    }
    if !acl.allkeys {
        let mut keys = KeyList::new();
        spec.keys(command, &mut keys);
        for key in keys.iter() {
            let name = &command[key.index];
            if !acl.keys.iter().any(|(p, _)| glob_match(p, name)) {
                return denial(format!(
                    "This user has no permissions to access the '{}' key",
                    String::from_utf8_lossy(name)
                ));
            }
        }
    }
    if let Some(channel) = denied_channel(acl, &spec.name, command) {
        return denial(format!(
            "This user has no permissions to access the '{}' channel",
            String::from_utf8_lossy(channel)
        ));
    }
    // Redis's checks passed: what is left is the proxy's own script trust.
    match live.user.denial(spec, command) {
        Some(Denial::Scripts) => denial(Denial::Scripts.text(&spec.name)),
        _ => ok(),
    }
}

fn denial(text: String) -> Bytes {
    encode::bulk_frame(text.as_bytes())
}

/// The first channel of a publish or subscribe command outside `acl`'s channel rules
/// (a PSUBSCRIBE pattern must be one of them literally), as Redis 7.0 checks them.
fn denied_channel<'a>(acl: &AclUser, name: &str, command: &'a [Bytes]) -> Option<&'a Bytes> {
    if acl.allchannels {
        return None;
    }
    let (channels, literal) = match name {
        "publish" | "spublish" => (command.get(1..2)?, false),
        "subscribe" | "ssubscribe" => (command.get(1..)?, false),
        "psubscribe" => (command.get(1..)?, true),
        _ => return None,
    };
    channels.iter().find(|channel| {
        !acl.channels.iter().any(|rule| {
            if literal {
                rule[..] == channel[..]
            } else {
                glob_match(rule, channel)
            }
        })
    })
}
