//! How Redis 7.0 describes a user: the commands string of `ACL GETUSER` and `ACL LIST`
//! (`ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, the best-fitting categories,
//! then single commands), the `ACL LIST` line, and the `ACL GETUSER` reply.
//!
//! Redis emits the single-command tail in the order of its command dictionary, a hash
//! table seeded at random per process, so two Redis processes print the same rules in
//! different orders. Here they come in the command table's order; the set of rules, the
//! categories before them and everything else are Redis's byte for byte.

use bytes::{Bytes, BytesMut};

use super::catalog::Catalog;
use super::user::{AclUser, Sanitize, KEY_ALL, KEY_READ};
use crate::command::ACL_CATEGORIES;
use crate::protocol::{encode, Proto};

/// The command rules of `user`, as Redis's `ACLDescribeSelectorCommandRules`.
pub fn command_rules(user: &AclUser, catalog: &Catalog) -> String {
    let additive = !user.future_commands;
    let mut rules = String::from(if additive { "-@all " } else { "+@all " });
    let mut fake = vec![!additive; catalog.len()];
    // What is left to explain, with each applied category taken back out.
    let mut temp = user.commands.clone();
    let mut applied = [false; ACL_CATEGORIES.len()];
    loop {
        let mut best = None;
        let (mut min_diff, mut max_same) = (u64::from(u32::MAX >> 1), 0u64);
        for (j, done) in applied.iter().enumerate() {
            if *done {
                continue;
            }
            let (on, off) = count(&temp, catalog, 1 << j);
            let (diff, same) = if additive { (off, on) } else { (on, off) };
            if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                best = Some(j);
                min_diff = diff;
                max_same = same;
            }
        }
        let Some(j) = best else { break };
        set_category(&mut fake, catalog, 1 << j, additive);
        set_category(&mut temp, catalog, 1 << j, !additive);
        rules.push_str(if additive { "+@" } else { "-@" });
        rules.push_str(ACL_CATEGORIES[j]);
        rules.push(' ');
        applied[j] = true;
    }
    for index in 0..catalog.len() {
        let bit = user.commands[index];
        if bit != fake[index] {
            rules.push(if bit { '+' } else { '-' });
            rules.push_str(&catalog.names[index]);
            rules.push(' ');
            fake[index] = bit;
            for &sub in &catalog.children[index] {
                fake[sub] = bit;
            }
        }
        if !bit {
            for (_, arg) in user.first_args.iter().filter(|(i, _)| *i == index) {
                rules.push('+');
                rules.push_str(&catalog.names[index]);
                rules.push('|');
                rules.push_str(&String::from_utf8_lossy(arg));
                rules.push(' ');
            }
        }
    }
    rules.pop();
    rules
}

fn count(bits: &[bool], catalog: &Catalog, category: u64) -> (u64, u64) {
    let (mut on, mut off) = (0, 0);
    for (index, &bit) in bits.iter().enumerate() {
        if catalog.categories[index] & category != 0 {
            if bit {
                on += 1;
            } else {
                off += 1;
            }
        }
    }
    (on, off)
}

/// `+@cat` / `-@cat` on a bitmap, containers' subcommands included (they carry their own
/// categories, as in Redis).
fn set_category(bits: &mut [bool], catalog: &Catalog, category: u64, value: bool) {
    for index in 0..bits.len() {
        if catalog.categories[index] & category != 0 {
            bits[index] = value;
            for &sub in &catalog.children[index] {
                bits[sub] = value;
            }
        }
    }
}

/// The flags of `user` in Redis's order (`on`/`off`, `nopass`, the sanitize flag).
pub fn flags(user: &AclUser) -> Vec<&'static str> {
    let mut flags = vec![if user.enabled { "on" } else { "off" }];
    if user.nopass {
        flags.push("nopass");
    }
    match user.sanitize {
        Some(Sanitize::Skip) => flags.push("skip-sanitize-payload"),
        Some(Sanitize::Always) => flags.push("sanitize-payload"),
        None => {}
    }
    flags
}

fn key_pattern(pattern: &[u8], flags: u8) -> String {
    let prefix = match flags {
        KEY_ALL => "~",
        KEY_READ => "%R~",
        _ => "%W~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(pattern))
}

/// The `keys` field of ACL GETUSER (`~*`, or the patterns separated by spaces).
pub fn keys(user: &AclUser) -> String {
    if user.allkeys {
        return "~*".into();
    }
    let patterns: Vec<String> = user.keys.iter().map(|(p, f)| key_pattern(p, *f)).collect();
    patterns.join(" ")
}

/// The `channels` field of ACL GETUSER (`&*`, or the patterns separated by spaces).
pub fn channels(user: &AclUser) -> String {
    if user.allchannels {
        return "&*".into();
    }
    let patterns: Vec<String> = user
        .channels
        .iter()
        .map(|c| format!("&{}", String::from_utf8_lossy(c)))
        .collect();
    patterns.join(" ")
}

/// The `ACL LIST` line of `user`: `user <name> <flags> <#digests> <keys> <channels>
/// <commands>`, as Redis's `ACLDescribeUser` (also a line of the users file).
pub fn list_line(user: &AclUser, catalog: &Catalog) -> String {
    let mut line = format!("user {} ", user.name);
    for flag in flags(user) {
        line.push_str(flag);
        line.push(' ');
    }
    for digest in &user.passwords {
        line.push('#');
        line.push_str(digest);
        line.push(' ');
    }
    if user.allkeys {
        line.push_str("~* ");
    } else {
        for (pattern, flags) in &user.keys {
            line.push_str(&key_pattern(pattern, *flags));
            line.push(' ');
        }
    }
    if user.allchannels {
        line.push_str("&* ");
    } else {
        line.push_str("resetchannels ");
        for channel in &user.channels {
            line.push('&');
            line.push_str(&String::from_utf8_lossy(channel));
            line.push(' ');
        }
    }
    line.push_str(&command_rules(user, catalog));
    line
}

/// The `ACL GETUSER` reply: a map (RESP3) or flat array (RESP2) of `flags` (a set),
/// `passwords`, `commands`, `keys`, `channels` and `selectors` (always empty here).
pub fn getuser_reply(user: &AclUser, catalog: &Catalog, proto: Proto) -> Bytes {
    let mut out = BytesMut::new();
    encode::map_header(&mut out, proto, 6);
    encode::bulk(&mut out, b"flags");
    let flags = flags(user);
    encode::set_header(&mut out, proto, flags.len());
    for flag in flags {
        encode::bulk(&mut out, flag.as_bytes());
    }
    encode::bulk(&mut out, b"passwords");
    encode::array_header(&mut out, user.passwords.len());
    for digest in &user.passwords {
        encode::bulk(&mut out, digest.as_bytes());
    }
    encode::bulk(&mut out, b"commands");
    encode::bulk(&mut out, command_rules(user, catalog).as_bytes());
    encode::bulk(&mut out, b"keys");
    encode::bulk(&mut out, keys(user).as_bytes());
    encode::bulk(&mut out, b"channels");
    encode::bulk(&mut out, channels(user).as_bytes());
    encode::bulk(&mut out, b"selectors");
    encode::array_header(&mut out, 0);
    out.freeze()
}
