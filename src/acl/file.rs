//! The users file: Redis's ACL file format, one `user <name> <rules...>` line per user
//! (what `ACL LIST` prints and `ACL SAVE` writes), read all-or-nothing by `ACL LOAD` with
//! Redis's error texts. Also the conversion of the configuration's `users` entries.
//!
//! A file without a `default` line leaves `default` closed (`off`), where Redis would
//! create an open one: the proxy keeps its rule that configured users close `default`.

use std::path::Path;

use super::catalog::Catalog;
use super::text;
use super::user::{has_spaces, AclUser, RuleError};
use crate::config::UserConfig;

/// The user a `users` entry of the configuration describes, in Redis's model.
pub fn user_from_config(entry: &UserConfig, catalog: &Catalog) -> Result<AclUser, String> {
    let name = entry.name.trim();
    if name.is_empty() || has_spaces(name.as_bytes()) {
        return Err(format!("users: invalid user name '{}'", entry.name));
    }
    let mut user = AclUser::new(name, catalog);
    let mut rules: Vec<Vec<u8>> = Vec::new();
    rules.push(if entry.is_enabled() {
        b"on".to_vec()
    } else {
        b"off".to_vec()
    });
    if let Some(password) = &entry.password {
        rules.push([b">", password.0.as_bytes()].concat());
    }
    if let Some(hash) = &entry.password_sha256 {
        rules.push(format!("#{}", hash.0.trim().to_ascii_lowercase()).into_bytes());
    }
    for rule in entry
        .keys
        .iter()
        .chain(&entry.channels)
        .chain(&entry.commands)
    {
        rules.push(rule.trim().as_bytes().to_vec());
    }
    for rule in rules {
        // The configuration has always ignored a pattern after `*`, where Redis refuses it.
        let after_all = (rule.first() == Some(&b'~') && user.allkeys)
            || (rule.first() == Some(&b'&') && user.allchannels);
        if after_all {
            continue;
        }
        if let Err(error) = user.apply(&rule, catalog) {
            let reason = match error {
                RuleError::Redis(reason) => reason.to_string(),
                RuleError::Unsupported(reason) => reason,
            };
            return Err(format!(
                "users: user '{name}': rule '{}': {reason}",
                String::from_utf8_lossy(&rule)
            ));
        }
    }
    if let Err((rule, reason)) = user.check_supported(catalog) {
        return Err(format!("users: user '{name}': rule '{rule}': {reason}"));
    }
    Ok(user)
}

/// The users of a users file's `text`, or the error ACL LOAD answers (Redis's texts:
/// `<file>:<line>: <reason>. `, every line's errors together). `filename` is the path as
/// configured.
pub fn parse(text: &[u8], filename: &str, catalog: &Catalog) -> Result<Vec<AclUser>, String> {
    let mut users: Vec<AclUser> = Vec::new();
    let mut errors = String::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line_number = i + 1;
        let line = trim(line, b" \t\r\n");
        if line.is_empty() {
            continue;
        }
        let argv: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if argv[0] != b"user" || argv.len() < 2 {
            errors.push_str(&format!(
                "{filename}:{line_number} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = String::from_utf8_lossy(argv[1]).into_owned();
        if has_spaces(argv[1]) || argv[1].is_empty() {
            errors.push_str(&format!(
                "'{filename}:{line_number}: username '{name}' contains invalid characters. "
            ));
            continue;
        }
        if users.iter().any(|u| u.name == name) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{name}' found on line {line_number}. "
            ));
            continue;
        }
        let mut user = AclUser::new(&name, catalog);
        let Some(rules) = super::commands::merge_selectors(&argv[2..]) else {
            // The user exists from here on, as in Redis: a later line naming it is a duplicate.
            users.push(user);
            errors.push_str(&format!(
                "{filename}:{line_number}: Unmatched parenthesis in selector definition."
            ));
            continue;
        };
        let mut reported = false;
        for rule in rules {
            let rule = trim(&rule, b"\t\r\n").to_vec();
            match user.apply(&rule, catalog) {
                Ok(()) => {}
                Err(RuleError::Redis(reason)) if reason == text::RULE_UNKNOWN => {
                    errors.push_str(&format!(
                        "{filename}:{line_number}: Error in applying operation '{}': {reason}. ",
                        String::from_utf8_lossy(&rule)
                    ));
                }
                Err(error) if !reported => {
                    let reason = match error {
                        RuleError::Redis(reason) => reason.to_string(),
                        RuleError::Unsupported(reason) => reason,
                    };
                    errors.push_str(&format!("{filename}:{line_number}: {reason}. "));
                    reported = true;
                }
                Err(_) => {}
            }
        }
        if let Err((rule, reason)) = user.check_supported(catalog) {
            errors.push_str(&format!("{filename}:{line_number}: '{rule}': {reason}. "));
        }
        users.push(user);
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
        );
        Err(errors)
    }
}

/// The users file text of `users` (ACL SAVE): their `ACL LIST` lines.
pub fn render<'a>(users: impl IntoIterator<Item = &'a AclUser>, catalog: &Catalog) -> String {
    let mut text = String::new();
    for user in users {
        text.push_str(&super::describe::list_line(user, catalog));
        text.push('\n');
    }
    text
}

/// Writes `text` to `path` through a temporary file renamed over it, so a reader never
/// sees half a file.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp-{}", std::process::id()));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

fn trim<'a>(mut s: &'a [u8], set: &[u8]) -> &'a [u8] {
    while let [first, rest @ ..] = s {
        if !set.contains(first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !set.contains(last) {
            break;
        }
        s = rest;
    }
    s
}
