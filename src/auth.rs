//! Proxy-side authentication and ACL decisions: who a client is (AUTH, HELLO AUTH) and
//! whether that user may run a command on its keys. Pure: no IO, no clock.
//!
//! Invariants:
//! - Passwords are kept only as SHA-256 digests and compared in constant time, so neither
//!   the secret nor its length leaks through timing; an unknown user costs a comparison too.
//! - Command rules apply in order, as Redis's: for one command the last rule that matches it
//!   decides, and a command no rule matches is denied.
//! - Key patterns match the names the client sends (the legacy layout), with Redis's glob;
//!   channel rules match channel names the same way, and a PSUBSCRIBE pattern only when a
//!   rule is that very pattern (Redis 7's `ACLCheckChannelAgainstList`). A user entry
//!   without channel rules has no channel, as Redis 7's `acl-pubsub-default resetchannels`.
//! - Scripts and functions run as the proxy's backend user, which no proxy user's rules
//!   bind, so a user whose rules leave out any command, key or channel may not run or
//!   define code unless its entry says `scripts: trusted` ([`SCRIPT_COMMANDS`]).
//! - With no `requirepass` and no users the `default` user is open (`nopass`), as in Redis;
//!   once any user is configured, `default` is closed unless it is configured too.

use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use smallvec::SmallVec;
use subtle::ConstantTimeEq;

use crate::command::{CommandSpec, KeyList, NameMap};
use crate::rewrite::glob::glob_match;

mod rules;
mod user_config;

use rules::{parse_patterns, parse_rule, Selector, CHANNEL_RULES, KEY_RULES};
pub use user_config::{ScriptTrust, Secret, UserConfig};

pub use crate::reply::access::{
    noperm_command, noperm_script, NOAUTH, NOAUTH_HELLO, NOPERM_CHANNELS, NOPERM_KEYS, WRONGPASS,
};

/// Commands that run code on the upstream, or change the code other users' FCALL runs.
/// The code runs as the proxy's backend user, so none of a proxy user's rules hold inside
/// it: they need [`ScriptTrust::Trusted`]. FUNCTION DELETE and FLUSH are here because the
/// libraries are every user's: an untrusted user must not take away the code a trusted
/// one calls.
pub const SCRIPT_COMMANDS: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    "function|load",
    "function|restore",
    "function|delete",
    "function|flush",
    "script|load",
];

/// Why a user may not run a command; checked in this order, Redis's for the first three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// No command rule allows the command.
    Command,
    /// A key the command names is outside the user's key patterns.
    Keys,
    /// A channel (or PSUBSCRIBE pattern) is outside the user's channel rules.
    Channels,
    /// A script command ([`SCRIPT_COMMANDS`]) from a user whose scripts are not trusted.
    Scripts,
}

impl Denial {
    /// The error text refusing the command named `command` (`eval`, `function|load`).
    pub fn text(self, command: &str) -> String {
        match self {
            Denial::Command => noperm_command(command),
            Denial::Keys => NOPERM_KEYS.into(),
            Denial::Channels => NOPERM_CHANNELS.into(),
            Denial::Scripts => noperm_script(command),
        }
    }
}

/// One proxy user: credentials, command rules, key patterns, channel rules, script trust.
#[derive(Clone)]
pub struct User {
    /// The user name (`ACL WHOAMI`).
    pub name: String,
    enabled: bool,
    /// Accepts any password (the open `default` user).
    nopass: bool,
    digests: Vec<[u8; 32]>,
    /// `(allow, selector)` in configuration order.
    rules: Vec<(bool, Selector)>,
    /// `None`: every key.
    key_patterns: Option<Vec<Vec<u8>>>,
    /// `None`: every channel.
    channel_patterns: Option<Vec<Vec<u8>>>,
    /// May run [`SCRIPT_COMMANDS`] (which its command rules must still allow).
    scripts_trusted: bool,
    /// Fast path: every command, key and channel, and scripts trusted.
    unrestricted: bool,
}

impl std::fmt::Debug for User {
    // Digests stay out of logs too: they are as good as the password for an offline attack.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl User {
    /// A user with every command and key (the `default` user of `requirepass`).
    fn superuser(name: &str, nopass: bool, digests: Vec<[u8; 32]>) -> User {
        User {
            name: name.into(),
            enabled: true,
            nopass,
            digests,
            rules: vec![(true, Selector::All)],
            key_patterns: None,
            channel_patterns: None,
            scripts_trusted: true,
            unrestricted: true,
        }
    }

    fn from_config(config: &UserConfig) -> Result<User, String> {
        let name = config.name.trim();
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(format!("users: invalid user name '{}'", config.name));
        }
        let context = |what: &str| format!("users: user '{name}': {what}");
        let mut digests = Vec::new();
        if let Some(password) = &config.password {
            digests.push(digest(password.0.as_bytes()));
        }
        if let Some(hex) = &config.password_sha256 {
            digests.push(parse_hex_digest(&hex.0).ok_or_else(|| {
                context("password_sha256 must be 64 hex digits (a SHA-256 digest)")
            })?);
        }
        if digests.is_empty() {
            return Err(context("needs a password or password_sha256"));
        }
        let mut rules = Vec::new();
        for rule in &config.commands {
            rules.push(parse_rule(rule).map_err(|e| context(&e))?);
        }
        let key_patterns = parse_patterns(&config.keys, KEY_RULES).map_err(|e| context(&e))?;
        let channel_patterns =
            parse_patterns(&config.channels, CHANNEL_RULES).map_err(|e| context(&e))?;
        let all_commands = rules.last() == Some(&(true, Selector::All));
        let everything = all_commands && key_patterns.is_none() && channel_patterns.is_none();
        let scripts_trusted = match config.scripts {
            Some(ScriptTrust::Trusted) => true,
            Some(ScriptTrust::Refused) => false,
            None => everything,
        };
        Ok(User {
            name: name.into(),
            enabled: config.is_enabled(),
            nopass: false,
            digests,
            unrestricted: everything && scripts_trusted,
            rules,
            key_patterns,
            channel_patterns,
            scripts_trusted,
        })
    }

    /// A user managed at run time (`acl::UserSet`): `config`'s rules, with these password
    /// digests (`nopass`: any password) instead of `config`'s password fields.
    pub fn from_acl(
        config: &UserConfig,
        digests: Vec<[u8; 32]>,
        nopass: bool,
    ) -> Result<User, String> {
        let rules_only = UserConfig {
            password: Some(Secret(String::new())),
            password_sha256: None,
            ..config.clone()
        };
        let mut user = User::from_config(&rules_only)?;
        user.digests = digests;
        user.nopass = nopass;
        Ok(user)
    }

    /// Why this user may not run `spec` with `args` (`None`: it may): its command rules,
    /// its key patterns on the keys the client named, its channel rules, its script trust.
    pub fn denial(&self, spec: &CommandSpec, args: &[Bytes]) -> Option<Denial> {
        if self.unrestricted {
            return None;
        }
        if !self.may_run(spec) {
            return Some(Denial::Command);
        }
        if self.key_patterns.is_some() {
            let mut keys: KeyList = SmallVec::new();
            spec.keys(args, &mut keys);
            if !keys.iter().all(|k| self.may_access(&args[k.index])) {
                return Some(Denial::Keys);
            }
        }
        self.channel_or_script_denial(spec, args)
    }

    /// [`User::denial`] without the key patterns, which the dispatcher checks: what the
    /// session checks before the commands it answers itself, subscriptions among them.
    pub fn denial_before_keys(&self, spec: &CommandSpec, args: &[Bytes]) -> Option<Denial> {
        if self.unrestricted {
            return None;
        }
        if !self.may_run(spec) {
            return Some(Denial::Command);
        }
        self.channel_or_script_denial(spec, args)
    }

    fn channel_or_script_denial(&self, spec: &CommandSpec, args: &[Bytes]) -> Option<Denial> {
        if !self.may_use_channels(spec, args) {
            return Some(Denial::Channels);
        }
        if !self.scripts_trusted && SCRIPT_COMMANDS.contains(&spec.name.as_str()) {
            return Some(Denial::Scripts);
        }
        None
    }

    /// Whether the channels `args` publish or subscribe to are all within this user's
    /// channel rules, as Redis 7 checks them: PUBLISH, SPUBLISH, SUBSCRIBE and SSUBSCRIBE
    /// match each channel against the rules' globs; PSUBSCRIBE needs each pattern to be one
    /// of the rules, literally. Unsubscribing is always allowed.
    fn may_use_channels(&self, spec: &CommandSpec, args: &[Bytes]) -> bool {
        let Some(rules) = &self.channel_patterns else {
            return true;
        };
        // A wrong arity is Redis's first answer; the caller gives it.
        if !spec.arity_ok(args.len()) {
            return true;
        }
        let (channels, literal) = match spec.name.as_str() {
            "publish" | "spublish" => (args.get(1..2), false),
            "subscribe" | "ssubscribe" => (args.get(1..), false),
            "psubscribe" => (args.get(1..), true),
            _ => return true,
        };
        channels.unwrap_or_default().iter().all(|channel| {
            rules.iter().any(|rule| {
                if literal {
                    rule[..] == channel[..]
                } else {
                    glob_match(rule, channel)
                }
            })
        })
    }

    /// Whether this user may use every key (`allkeys`): SORT's BY and GET patterns, which
    /// name keys no check can see beforehand, are refused otherwise, as in Redis.
    pub fn may_access_every_key(&self) -> bool {
        self.key_patterns.is_none()
    }

    /// Whether this user may run the command `spec` (whatever its keys).
    pub fn may_run(&self, spec: &CommandSpec) -> bool {
        if self.unrestricted {
            return true;
        }
        self.rules
            .iter()
            .rev()
            .find(|(_, selector)| selector.matches(spec))
            .is_some_and(|(allow, _)| *allow)
    }

    /// Whether this user may use `key` (as the client named it).
    pub fn may_access(&self, key: &[u8]) -> bool {
        match &self.key_patterns {
            None => true,
            Some(patterns) => patterns.iter().any(|p| glob_match(p, key)),
        }
    }

    /// Whether every command, key and channel is allowed and scripts are trusted (no
    /// per-command check needed).
    pub fn is_unrestricted(&self) -> bool {
        self.unrestricted
    }

    /// Whether `password` is this user's, in constant time over the stored digests.
    fn password_matches(&self, password: &[u8]) -> bool {
        let offered = digest(password);
        let mut matched = subtle::Choice::from(0u8);
        for stored in &self.digests {
            matched |= stored.ct_eq(&offered);
        }
        self.nopass || bool::from(matched)
    }
}

/// Every proxy user, built from one configuration.
#[derive(Debug, Clone)]
pub struct Auth {
    /// Looked up for every command (a reload may disable a user): the table's fast hasher.
    users: NameMap<String, Arc<User>>,
}

impl Auth {
    /// The configured users: `requirepass` (the `default` user's password) and `users`.
    pub fn new(configured: &[UserConfig], requirepass: Option<&Secret>) -> Result<Auth, String> {
        let mut users = NameMap::default();
        for user in configured {
            let user = User::from_config(user)?;
            if users.contains_key(&user.name) {
                return Err(format!("users: user '{}' is defined twice", user.name));
            }
            users.insert(user.name.clone(), Arc::new(user));
        }
        if let Some(password) = requirepass {
            if users.contains_key("default") {
                return Err(
                    "requirepass and a user named 'default' both set the default user's password; keep one"
                        .into(),
                );
            }
            if password.0.is_empty() {
                return Err("requirepass must not be empty".into());
            }
            let default = User::superuser("default", false, vec![digest(password.0.as_bytes())]);
            users.insert("default".into(), Arc::new(default));
        } else if users.is_empty() {
            users.insert(
                "default".into(),
                Arc::new(User::superuser("default", true, Vec::new())),
            );
        }
        Ok(Auth { users })
    }

    /// Whether a new connection must authenticate before running commands.
    pub fn auth_required(&self) -> bool {
        self.open_default().is_none()
    }

    /// The `default` user when it takes any password: new clients are logged in as it.
    pub fn open_default(&self) -> Option<&Arc<User>> {
        self.users
            .get("default")
            .filter(|user| user.nopass && user.enabled)
    }

    /// The enabled user called `name`.
    pub fn user(&self, name: &str) -> Option<&Arc<User>> {
        self.users.get(name).filter(|user| user.enabled)
    }

    /// Whether a user called `name` is defined, enabled or not (CLIENT KILL USER).
    pub fn exists(&self, name: &str) -> bool {
        self.users.contains_key(name)
    }

    /// Checks a username/password pair; `None` for an unknown or disabled user or a wrong
    /// password (the caller answers [`WRONGPASS`] to all three alike).
    pub fn check(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        let user = std::str::from_utf8(name)
            .ok()
            .and_then(|name| self.users.get(name));
        match user {
            Some(user) => (user.password_matches(password) && user.enabled).then(|| user.clone()),
            None => {
                // Same work as a known user, so timing does not tell which names exist.
                let _ = digest(password).ct_eq(&[0u8; 32]);
                None
            }
        }
    }
}

fn digest(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.chunks(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::CommandTable;

    fn user(commands: &[&str], keys: &[&str]) -> User {
        User::from_config(&UserConfig {
            name: "bot".into(),
            password: Some(Secret("pw".into())),
            commands: commands.iter().map(|s| s.to_string()).collect(),
            keys: keys.iter().map(|s| s.to_string()).collect(),
            ..UserConfig::default()
        })
        .unwrap()
    }

    fn spec<'a>(table: &'a CommandTable, args: &[&str]) -> &'a CommandSpec {
        let args: Vec<bytes::Bytes> = args
            .iter()
            .map(|a| bytes::Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        table.lookup(&args).unwrap()
    }

    #[test]
    fn last_matching_rule_decides() {
        let table = CommandTable::builtin();
        let u = user(&["+@all", "-@dangerous", "+flushall"], &["allkeys"]);
        assert!(u.may_run(spec(&table, &["get"])));
        // KEYS is in @dangerous in Redis 7; FLUSHALL too, but it is allowed again.
        assert!(!u.may_run(spec(&table, &["keys"])));
        assert!(u.may_run(spec(&table, &["flushall"])));
        let reader = user(&["+@read", "-config|get"], &[]);
        assert!(reader.may_run(spec(&table, &["get"])));
        assert!(!reader.may_run(spec(&table, &["set"])));
        assert!(!reader.may_run(spec(&table, &["config", "get"])));
        let none = user(&[], &[]);
        assert!(!none.may_run(spec(&table, &["get"])));
        let container = user(&["+config", "-config|set"], &[]);
        assert!(container.may_run(spec(&table, &["config", "get"])));
        assert!(!container.may_run(spec(&table, &["config", "set"])));
    }

    #[test]
    fn key_patterns_use_redis_glob() {
        let u = user(&["+@all"], &["~mybot:*", "~exact"]);
        assert!(u.may_access(b"mybot:1"));
        assert!(u.may_access(b"exact"));
        assert!(!u.may_access(b"other:1"));
        assert!(!user(&["+@all"], &[]).may_access(b"k"));
        assert!(user(&["+@all"], &["allkeys"]).may_access(b"k"));
    }

    fn user_with(
        commands: &[&str],
        keys: &[&str],
        channels: &[&str],
        scripts: Option<ScriptTrust>,
    ) -> Result<User, String> {
        User::from_config(&UserConfig {
            name: "bot".into(),
            password: Some(Secret("pw".into())),
            commands: commands.iter().map(|s| s.to_string()).collect(),
            keys: keys.iter().map(|s| s.to_string()).collect(),
            channels: channels.iter().map(|s| s.to_string()).collect(),
            scripts,
            ..UserConfig::default()
        })
    }

    fn denial(table: &CommandTable, user: &User, line: &str) -> Option<Denial> {
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        user.denial(table.lookup(&args).unwrap(), &args)
    }

    #[test]
    fn channel_rules_match_as_redis_7() {
        let table = CommandTable::builtin();
        let u = user_with(&["+@all"], &["allkeys"], &["&news:*", "&exact"], None).unwrap();
        for allowed in [
            "PUBLISH news:1 m",
            "SPUBLISH exact m",
            "SUBSCRIBE news:1 exact",
            "SSUBSCRIBE news:2",
            "PSUBSCRIBE news:*",
            "UNSUBSCRIBE other",
            "PUNSUBSCRIBE o*",
            "PUBSUB NUMSUB other",
        ] {
            assert_eq!(denial(&table, &u, allowed), None, "{allowed}");
        }
        for refused in [
            "PUBLISH other m",
            "SPUBLISH other m",
            "SUBSCRIBE news:1 other",
            "SSUBSCRIBE other",
            "SUBSCRIBE __keyspace@0__:news:1",
            // A pattern must be one of the rules, literally, even one a rule covers.
            "PSUBSCRIBE news:1",
            "PSUBSCRIBE news:a*",
            "PSUBSCRIBE *",
        ] {
            assert_eq!(
                denial(&table, &u, refused),
                Some(Denial::Channels),
                "{refused}"
            );
        }
        // No channel rule: no channel (acl-pubsub-default resetchannels).
        let none = user_with(&["+@all"], &["allkeys"], &[], None).unwrap();
        assert_eq!(
            denial(&table, &none, "PUBLISH any m"),
            Some(Denial::Channels)
        );
        let all = user_with(&["+@all"], &["allkeys"], &["allchannels"], None).unwrap();
        assert!(all.is_unrestricted());
        let star = user_with(&["+@all"], &["~*"], &["&*"], None).unwrap();
        assert!(star.is_unrestricted());
        let reset = user_with(&["+@all"], &["allkeys"], &["&*", "resetchannels"], None).unwrap();
        assert_eq!(
            denial(&table, &reset, "PSUBSCRIBE *"),
            Some(Denial::Channels)
        );
    }

    #[test]
    fn scripts_need_trust_unless_the_user_may_do_everything() {
        let table = CommandTable::builtin();
        let restricted = user_with(&["+@all", "-@dangerous"], &["~didi:*"], &[], None).unwrap();
        for line in [
            "EVAL x 1 didi:1",
            "EVALSHA x 0",
            "EVAL_RO x 0",
            "EVALSHA_RO x 0",
            "FCALL f 0",
            "FCALL_RO f 0",
            "FUNCTION LOAD x",
            "FUNCTION RESTORE x",
            "FUNCTION DELETE lib",
            "FUNCTION FLUSH",
            "SCRIPT LOAD x",
        ] {
            assert_eq!(
                denial(&table, &restricted, line),
                Some(Denial::Scripts),
                "{line}"
            );
        }
        // Keys are checked first, as Redis checks them before running anything.
        assert_eq!(
            denial(&table, &restricted, "EVAL x 1 secret:1"),
            Some(Denial::Keys)
        );
        for line in ["SCRIPT EXISTS x", "FUNCTION LIST", "GET didi:1"] {
            assert_eq!(denial(&table, &restricted, line), None, "{line}");
        }
        // The command rules still decide first.
        let no_eval = user_with(&["+@read"], &["~didi:*"], &[], None).unwrap();
        assert_eq!(denial(&table, &no_eval, "EVAL x 0"), Some(Denial::Command));
        let trusted = user_with(&["+@all"], &["~didi:*"], &[], Some(ScriptTrust::Trusted));
        assert_eq!(denial(&table, &trusted.unwrap(), "EVAL x 0"), None);
        // Every key and command but no channel: a script's PUBLISH would escape the rules.
        let no_channels = user_with(&["+@all"], &["allkeys"], &[], None).unwrap();
        assert_eq!(
            denial(&table, &no_channels, "FCALL f 0"),
            Some(Denial::Scripts)
        );
        let everything = user_with(&["+@all"], &["allkeys"], &["allchannels"], None).unwrap();
        assert_eq!(denial(&table, &everything, "EVAL x 0"), None);
        let refused = user_with(
            &["+@all"],
            &["allkeys"],
            &["allchannels"],
            Some(ScriptTrust::Refused),
        )
        .unwrap();
        assert!(!refused.is_unrestricted());
        assert_eq!(denial(&table, &refused, "EVAL x 0"), Some(Denial::Scripts));
        assert_eq!(denial(&table, &refused, "GET k"), None);
        let text = Denial::Scripts.text("eval");
        assert!(
            text.starts_with(&noperm_command("eval")) && text.contains("scripts: trusted"),
            "{text}"
        );
    }

    #[test]
    fn key_and_channel_rules_in_the_wrong_list_are_config_errors() {
        let error = user_with(&["+@all"], &["&news"], &[], None).unwrap_err();
        assert!(error.contains("list it under channels"), "{error}");
        let error = user_with(&["+@all"], &[], &["~k"], None).unwrap_err();
        assert!(error.contains("list it under keys"), "{error}");
        let error = user_with(&["+@all"], &[], &["news"], None).unwrap_err();
        assert!(error.contains("must start with '&'"), "{error}");
    }

    #[test]
    fn passwords_and_sha256_digests() {
        let sha = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"; // "password"
        let users = [UserConfig {
            name: "app".into(),
            password_sha256: Some(Secret(sha.into())),
            commands: vec!["+@all".into()],
            keys: vec!["allkeys".into()],
            ..UserConfig::default()
        }];
        let auth = Auth::new(&users, Some(&Secret("s3cret".into()))).unwrap();
        assert!(auth.auth_required());
        assert!(auth.check(b"default", b"s3cret").is_some());
        assert!(auth.check(b"default", b"s3cre").is_none());
        assert!(auth.check(b"app", b"password").is_some());
        assert!(auth.check(b"nobody", b"password").is_none());
    }

    #[test]
    fn disabled_user_cannot_log_in() {
        let users = [UserConfig {
            name: "off".into(),
            password: Some(Secret("pw".into())),
            state: Some(false),
            ..UserConfig::default()
        }];
        let auth = Auth::new(&users, None).unwrap();
        assert!(auth.check(b"off", b"pw").is_none());
        // Users configured without a default user: the default user is closed.
        assert!(auth.auth_required());
        assert!(auth.check(b"default", b"").is_none());
    }

    #[test]
    fn open_default_without_any_auth() {
        let auth = Auth::new(&[], None).unwrap();
        assert!(!auth.auth_required());
        assert!(auth.check(b"default", b"anything").is_some());
    }

    #[test]
    fn bad_rules_are_config_errors() {
        for commands in [&["@read"][..], &["+@nosuch"], &["+"]] {
            let config = UserConfig {
                name: "u".into(),
                password: Some(Secret("p".into())),
                commands: commands.iter().map(|s| s.to_string()).collect(),
                ..UserConfig::default()
            };
            assert!(User::from_config(&config).is_err(), "{commands:?}");
        }
    }

    #[test]
    fn secrets_do_not_reach_debug_output() {
        let requirepass = Secret("hunter2".into());
        assert!(!format!("{requirepass:?}").contains("hunter2"));
        let auth = Auth::new(&[], Some(&requirepass)).unwrap();
        assert!(!format!("{auth:?}").contains("digests"));
    }
}
