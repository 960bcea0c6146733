//! A user entry's ACL words, parsed as Redis spells them: command rules (`+@read`,
//! `-flushall`, `allcommands`) into what each selects, and key and channel pattern lists
//! (`~p*`, `allkeys`, `&ch`, `resetchannels`).

use crate::command::{acl_category_bit, CommandSpec};

/// What one command rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Selector {
    All,
    Category(u64),
    /// A command (`config`, which covers its subcommands) or one subcommand (`config|set`).
    Command(String),
}

impl Selector {
    pub(super) fn matches(&self, spec: &CommandSpec) -> bool {
        match self {
            Selector::All => true,
            Selector::Category(bit) => spec.acl_categories & bit != 0,
            Selector::Command(name) => {
                spec.name == *name
                    || spec
                        .name
                        .split_once('|')
                        .is_some_and(|(container, _)| container == name)
            }
        }
    }
}

/// How one kind of pattern list is spelled: `~`/`allkeys`/`resetkeys` for keys, `&`/
/// `allchannels`/`resetchannels` for channels.
pub(super) struct PatternRules {
    what: &'static str,
    prefix: char,
    all: &'static str,
    reset: &'static str,
    /// The other kind's prefix and the field it belongs in, for a rule in the wrong list.
    other: (char, &'static str),
}

pub(super) const KEY_RULES: PatternRules = PatternRules {
    what: "key pattern",
    prefix: '~',
    all: "allkeys",
    reset: "resetkeys",
    other: ('&', "channels"),
};

pub(super) const CHANNEL_RULES: PatternRules = PatternRules {
    what: "channel rule",
    prefix: '&',
    all: "allchannels",
    reset: "resetchannels",
    other: ('~', "keys"),
};

/// Patterns in Redis's ACL words, applied in order (`None`: everything). As in Redis, the
/// prefix followed by `*` means everything, and a pattern after it adds nothing.
pub(super) fn parse_patterns(
    list: &[String],
    rules: PatternRules,
) -> Result<Option<Vec<Vec<u8>>>, String> {
    let mut patterns = Some(Vec::new());
    for entry in list {
        let entry = entry.trim();
        let pattern = entry.strip_prefix(rules.prefix);
        if entry == rules.all || pattern == Some("*") {
            patterns = None;
        } else if entry == rules.reset {
            patterns = Some(Vec::new());
        } else if let Some(pattern) = pattern {
            if let Some(patterns) = &mut patterns {
                patterns.push(pattern.as_bytes().to_vec());
            }
        } else if entry.starts_with(rules.other.0) {
            return Err(format!(
                "'{entry}' is not a {}: list it under {}",
                rules.what, rules.other.1
            ));
        } else {
            return Err(format!(
                "{} '{entry}' must start with '{}' (or be '{}' or '{}')",
                rules.what, rules.prefix, rules.all, rules.reset
            ));
        }
    }
    Ok(patterns)
}

/// One command rule: whether it allows or denies, and what it selects.
pub(super) fn parse_rule(rule: &str) -> Result<(bool, Selector), String> {
    let rule = rule.trim();
    match rule {
        "allcommands" => return Ok((true, Selector::All)),
        "nocommands" => return Ok((false, Selector::All)),
        _ => {}
    }
    let (allow, rest) = match rule.as_bytes().first() {
        Some(b'+') => (true, &rule[1..]),
        Some(b'-') => (false, &rule[1..]),
        _ => {
            return Err(format!(
                "command rule '{rule}' must start with '+' or '-' (e.g. +@read, -flushall)"
            ))
        }
    };
    let selector = if let Some(category) = rest.strip_prefix('@') {
        if category.eq_ignore_ascii_case("all") {
            Selector::All
        } else {
            Selector::Category(
                acl_category_bit(category.as_bytes())
                    .ok_or_else(|| format!("unknown ACL category '@{category}'"))?,
            )
        }
    } else if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_graphic()) {
        Selector::Command(rest.to_ascii_lowercase())
    } else {
        return Err(format!("invalid command rule '{rule}'"));
    };
    Ok((allow, selector))
}
