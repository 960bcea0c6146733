//! One ACL user as Redis 7.0 models it (flags, password digests, key and channel
//! patterns, a command bitmap) and `ACL SETUSER`'s rules applied to it exactly as Redis's
//! `ACLSetUser` applies them, errors included. The proxy enforces a subset of that model
//! (see `acl` module docs): what it cannot enforce is refused by [`AclUser::check_supported`].

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::catalog::Catalog;
use super::text;
use crate::command::acl_category_bit;

/// Read permission of a key pattern (`%R~`).
pub const KEY_READ: u8 = 1;
/// Write permission of a key pattern (`%W~`).
pub const KEY_WRITE: u8 = 2;
/// Both (`~`, `%RW~`): the only kind the proxy's users have.
pub const KEY_ALL: u8 = KEY_READ | KEY_WRITE;

/// RESTORE payload sanitizing flag of a user (`sanitize-payload`, `skip-sanitize-payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sanitize {
    /// `sanitize-payload` (what `reset` sets).
    Always,
    /// `skip-sanitize-payload`.
    Skip,
}

/// One user in Redis's ACL model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    /// The user name.
    pub name: String,
    /// `on` (else `off`).
    pub enabled: bool,
    /// `nopass`: any password works.
    pub nopass: bool,
    /// The payload sanitizing flag, if one was set.
    pub sanitize: Option<Sanitize>,
    /// SHA-256 digests, lower-case hex, in the order they were added.
    pub passwords: Vec<String>,
    /// `allkeys` / `~*`.
    pub allkeys: bool,
    /// Key patterns with their [`KEY_ALL`]-style permissions, in the order they were added.
    pub keys: Vec<(Vec<u8>, u8)>,
    /// `allchannels` / `&*`.
    pub allchannels: bool,
    /// Channel patterns, in the order they were added.
    pub channels: Vec<Vec<u8>>,
    /// Allowed commands, indexed like the [`Catalog`].
    pub commands: Vec<bool>,
    /// Redis's reserved "future commands" bit: set by `+@all`, cleared only by `-@all`.
    pub future_commands: bool,
    /// `+cmd|first-arg` grants on commands without subcommands (not enforceable here).
    pub first_args: Vec<(usize, Vec<u8>)>,
}

/// Why a rule was not applied: Redis's reasons (its `errno` cases) and the proxy's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// Redis's `ACLSetUserStringError` text.
    Redis(&'static str),
    /// A valid Redis rule the proxy's users cannot express.
    Unsupported(String),
}

impl AclUser {
    /// A user as `ACL SETUSER name` creates it: off, no password, no key, no channel
    /// (Redis 7's `acl-pubsub-default resetchannels`), no command.
    pub fn new(name: &str, catalog: &Catalog) -> AclUser {
        AclUser {
            name: name.into(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
            commands: vec![false; catalog.len()],
            future_commands: false,
            first_args: Vec::new(),
        }
    }

    /// Redis's `default` user: `on nopass ~* &* +@all`.
    pub fn default_user(catalog: &Catalog) -> AclUser {
        let mut user = AclUser::new("default", catalog);
        for rule in ["+@all", "~*", "&*", "on", "nopass"] {
            // These rules are valid by construction.
            let _ = user.apply(rule.as_bytes(), catalog);
        }
        user
    }

    /// Applies one rule, as Redis's `ACLSetUser` (case-insensitive keywords).
    pub fn apply(&mut self, op: &[u8], catalog: &Catalog) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let word = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if word("on") || word("off") {
            self.enabled = word("on");
        } else if word("skip-sanitize-payload") {
            self.sanitize = Some(Sanitize::Skip);
        } else if word("sanitize-payload") {
            self.sanitize = Some(Sanitize::Always);
        } else if word("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if word("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = password_hash(op)?;
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = password_hash(op)?;
            let at = self.passwords.iter().position(|p| *p == hash);
            let at = at.ok_or(RuleError::Redis(text::RULE_NO_SUCH_PASSWORD))?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            return Err(RuleError::Unsupported(text::SELECTORS_UNSUPPORTED.into()));
        } else if word("clearselectors") {
        } else if word("reset") {
            for rule in [
                "resetpass",
                "resetkeys",
                "resetchannels",
                "off",
                "sanitize-payload",
            ] {
                self.apply(rule.as_bytes(), catalog)?;
            }
            self.apply(b"-@all", catalog)?;
        } else {
            self.apply_selector_rule(op, catalog)?;
        }
        Ok(())
    }

    /// The rules of Redis's `ACLSetSelector`: keys, channels, commands.
    fn apply_selector_rule(&mut self, op: &[u8], catalog: &Catalog) -> Result<(), RuleError> {
        let word = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if word("allkeys") || op == b"~*" {
            self.allkeys = true;
            self.keys.clear();
        } else if word("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if word("allchannels") || op == b"&*" {
            self.allchannels = true;
            self.channels.clear();
        } else if word("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if word("allcommands") || word("+@all") {
            self.commands.iter_mut().for_each(|c| *c = true);
            self.future_commands = true;
            self.first_args.clear();
        } else if word("nocommands") || word("-@all") {
            self.commands.iter_mut().for_each(|c| *c = false);
            self.future_commands = false;
            self.first_args.clear();
        } else if op[0] == b'~' || op[0] == b'%' {
            self.add_key_pattern(op)?;
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::Redis(text::RULE_CHANNEL_AFTER_ALL));
            }
            let pattern = &op[1..];
            if has_spaces(pattern) {
                return Err(RuleError::Redis(text::RULE_SYNTAX));
            }
            if !self.channels.iter().any(|c| c == pattern) {
                self.channels.push(pattern.to_vec());
            }
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let bit = acl_category_bit(&op[2..]).ok_or(RuleError::Redis(text::RULE_UNKNOWN))?;
            let allow = op[0] == b'+';
            for index in 0..catalog.len() {
                if catalog.categories[index] & bit != 0 {
                    self.change_perm(index, allow, catalog);
                }
            }
        } else if op[0] == b'+' {
            self.allow_command(&op[1..], catalog)?;
        } else if op[0] == b'-' {
            let index = catalog
                .lookup(&op[1..])
                .ok_or(RuleError::Redis(text::RULE_UNKNOWN))?;
            self.change_perm(index, false, catalog);
        } else {
            return Err(RuleError::Redis(text::RULE_SYNTAX));
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::Redis(text::RULE_KEY_AFTER_ALL));
        }
        let (mut flags, mut offset) = (0u8, 1);
        if op[0] == b'%' {
            while offset < op.len() {
                let c = op[offset];
                offset += 1;
                if c.eq_ignore_ascii_case(&b'r') && flags & KEY_READ == 0 {
                    flags |= KEY_READ;
                } else if c.eq_ignore_ascii_case(&b'w') && flags & KEY_WRITE == 0 {
                    flags |= KEY_WRITE;
                } else if c == b'~' {
                    break;
                } else {
                    return Err(RuleError::Redis(text::RULE_SYNTAX));
                }
            }
        } else {
            flags = KEY_ALL;
        }
        let pattern = &op[offset..];
        if flags == 0 || has_spaces(pattern) {
            return Err(RuleError::Redis(text::RULE_SYNTAX));
        }
        match self.keys.iter_mut().find(|(p, _)| p == pattern) {
            Some((_, existing)) => *existing |= flags,
            None => self.keys.push((pattern.to_vec(), flags)),
        }
        Ok(())
    }

    /// `+cmd` and `+container|sub`; `+cmd|arg` on a command without subcommands is Redis's
    /// deprecated first-arg grant, kept so that a later rule can clear it.
    fn allow_command(&mut self, name: &[u8], catalog: &Catalog) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let index = catalog
                .lookup(name)
                .ok_or(RuleError::Redis(text::RULE_UNKNOWN))?;
            self.change_perm(index, true, catalog);
            return Ok(());
        };
        let (command, sub) = (&name[..bar], &name[bar + 1..]);
        let index = catalog
            .lookup(command)
            .ok_or(RuleError::Redis(text::RULE_UNKNOWN))?;
        if catalog.parent[index].is_some() {
            return Err(RuleError::Redis(text::RULE_FIRST_ARG_OF_SUBCOMMAND));
        }
        if sub.is_empty() {
            return Err(RuleError::Redis(text::RULE_SYNTAX));
        }
        if catalog.children[index].is_empty() {
            let sub = sub.to_ascii_lowercase();
            if !self
                .first_args
                .iter()
                .any(|(i, s)| *i == index && *s == sub)
            {
                self.first_args.push((index, sub));
            }
            return Ok(());
        }
        let index = catalog
            .lookup(name)
            .ok_or(RuleError::Redis(text::RULE_UNKNOWN))?;
        self.change_perm(index, true, catalog);
        Ok(())
    }

    /// Redis's `ACLChangeSelectorPerm`: a command and, for a container, its subcommands.
    pub(crate) fn change_perm(&mut self, index: usize, allow: bool, catalog: &Catalog) {
        self.commands[index] = allow;
        self.first_args.retain(|(i, _)| *i != index);
        for &sub in &catalog.children[index] {
            self.commands[sub] = allow;
        }
    }

    /// Refuses what Redis accepts but the proxy's users cannot enforce: read-only or
    /// write-only key patterns, first-arg grants, `skip-sanitize-payload`. The text names
    /// the rule, as Redis's own errors name the modifier.
    pub fn check_supported(&self, catalog: &Catalog) -> Result<(), (String, String)> {
        if let Some((pattern, flags)) = self.keys.iter().find(|(_, f)| *f != KEY_ALL) {
            let prefix = if *flags == KEY_READ { "%R~" } else { "%W~" };
            let rule = format!("{prefix}{}", String::from_utf8_lossy(pattern));
            return Err((rule, text::KEY_PERMISSIONS_UNSUPPORTED.into()));
        }
        if let Some((index, arg)) = self.first_args.first() {
            let rule = format!(
                "+{}|{}",
                catalog.names[*index],
                String::from_utf8_lossy(arg)
            );
            return Err((rule, text::FIRST_ARGS_UNSUPPORTED.into()));
        }
        let keys = self.keys.iter().map(|(p, _)| ('~', p));
        let mut patterns = keys.chain(self.channels.iter().map(|c| ('&', c)));
        if let Some((prefix, pattern)) = patterns.find(|(_, p)| std::str::from_utf8(p).is_err()) {
            let rule = format!("{prefix}{}", String::from_utf8_lossy(pattern));
            return Err((rule, text::BINARY_PATTERN_UNSUPPORTED.into()));
        }
        if self.sanitize == Some(Sanitize::Skip) {
            return Err((
                "skip-sanitize-payload".into(),
                text::SKIP_SANITIZE_UNSUPPORTED.into(),
            ));
        }
        Ok(())
    }

    /// Whether `password` is one of this user's (or the user is `nopass`), compared in
    /// constant time over every stored digest, as `auth::User` compares.
    pub fn password_matches(&self, password: &[u8]) -> bool {
        let offered: [u8; 32] = Sha256::digest(password).into();
        let mut matched = subtle::Choice::from(0u8);
        for stored in self.digests() {
            matched |= stored.ct_eq(&offered);
        }
        self.nopass || bool::from(matched)
    }

    /// The password digests as bytes, for the proxy's `auth::User`.
    pub fn digests(&self) -> Vec<[u8; 32]> {
        self.passwords
            .iter()
            .filter_map(|hex| parse_hex(hex))
            .collect()
    }
}

/// The lower-case hex SHA-256 of `password`, as Redis's `ACLHashPassword`.
pub fn sha256_hex(password: &[u8]) -> String {
    Sha256::digest(password)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// The digest a `>pass`, `<pass`, `#hash` or `!hash` rule names.
fn password_hash(op: &[u8]) -> Result<String, RuleError> {
    if op[0] == b'>' || op[0] == b'<' {
        return Ok(sha256_hex(&op[1..]));
    }
    let hash = &op[1..];
    let valid = hash.len() == 64 && hash.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !valid {
        return Err(RuleError::Redis(text::RULE_BAD_HASH));
    }
    Ok(String::from_utf8_lossy(hash).into_owned())
}

/// Redis's `ACLStringHasSpaces`: white space or NUL.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&b| b == 0 || matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
}
