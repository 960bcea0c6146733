//! Reading a `COMMAND` reply (RESP2 or RESP3 bytes) into [`CommandSpec`]s.
//!
//! The frame is read through [`ReplyView`], where a RESP3 map and a RESP2 flat key/value
//! array read the same. Missing optional parts (tips,
//! key specs, subcommands: Redis 6 sends only 7 fields) are accepted; anything that is
//! not a command entry is an error naming what was wrong.

use bytes::Bytes;

use super::getkeys::GetKeysProc;
use super::keys::{BeginSearch, FindKeys, KeyFlags, KeyRule, KeySpec};
use super::shape::{CrossSlot, Shape};
use super::table::{acl_category_bit, CommandFlags, CommandSpec};
use crate::protocol::{reply_nesting, ReplyView, MAX_PARSED_NESTING};

/// Every command (top-level first, then its subcommands) of a `COMMAND` reply.
pub(crate) fn parse_command_reply(frame: &[u8]) -> Result<Vec<CommandSpec>, String> {
    let reply = read_reply(frame).map_err(|e| format!("COMMAND reply: {e}"))?;
    let entries = reply
        .elements_or_empty()
        .ok_or("COMMAND reply is not an array")?;
    let mut specs = Vec::with_capacity(entries.len() * 2);
    for entry in entries {
        parse_entry(&entry, &mut specs)?;
    }
    Ok(specs)
}

/// The view of `frame`, one whole reply that is not an error. Reading subcommands
/// recurses, so a reply nesting deeper than any `COMMAND` reply does is refused unread.
fn read_reply(frame: &[u8]) -> Result<ReplyView<'_>, String> {
    if reply_nesting(frame).map_err(|error| error.0)? > MAX_PARSED_NESTING {
        return Err(format!(
            "frame nests deeper than {MAX_PARSED_NESTING} levels"
        ));
    }
    match ReplyView::parse(frame).map_err(|error| error.0)? {
        ReplyView::Error(text) => Err(format!("server error: {}", String::from_utf8_lossy(text))),
        view => Ok(view),
    }
}

/// One command entry, pushed to `specs` followed by its subcommands.
fn parse_entry(entry: &ReplyView<'_>, specs: &mut Vec<CommandSpec>) -> Result<(), String> {
    let fields: Vec<ReplyView<'_>> = entry
        .elements_or_empty()
        .ok_or("command entry is not an array")?
        .collect();
    // A nil entry is what COMMAND INFO gives for an unknown name: skip it.
    if fields.is_empty() {
        return Ok(());
    }
    if fields.len() < 6 {
        return Err(format!(
            "command entry has {} fields, at least 6 expected",
            fields.len()
        ));
    }
    let name = fields[0].text().ok_or("command name is not a string")?;
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    let context = |what: &str| format!("command {name}: {what}");

    let int_field = |index: usize, what: &str| -> Result<i32, String> {
        fields[index]
            .integer()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| context(what))
    };
    let arity = int_field(1, "arity is not a small integer")?;
    let first_key = int_field(3, "first key is not a small integer")?;
    let last_key = int_field(4, "last key is not a small integer")?;
    let step = int_field(5, "key step is not a small integer")?;

    let flags = parse_flags(&fields[2]).map_err(context)?;
    let acl_categories = parse_acl_categories(fields.get(6)).map_err(context)?;

    let key_specs = match fields.get(8) {
        Some(raw_specs) => parse_key_specs(raw_specs).map_err(|e| context(&e))?,
        None => Vec::new(),
    };

    let subcommands = match fields.get(9) {
        Some(subs) => subs
            .elements_or_empty()
            .ok_or_else(|| context("subcommands are not a list"))?,
        None => Default::default(),
    };

    let getkeys = GetKeysProc::for_command(&name);
    let key_rule = KeyRule::of(&key_specs, getkeys);
    let shape = Shape::of(&name, flags);
    let cross_slot = CrossSlot::of(&name);
    specs.push(CommandSpec {
        name,
        arity,
        flags,
        first_key,
        last_key,
        step,
        acl_categories,
        key_specs,
        getkeys,
        key_rule,
        has_subcommands: !subcommands.is_empty(),
        shape,
        cross_slot,
    });
    for sub in subcommands {
        parse_entry(&sub, specs)?;
    }
    Ok(())
}

/// A command's flags (the 3rd field of its `COMMAND` entry).
fn parse_flags(field: &ReplyView<'_>) -> Result<CommandFlags, &'static str> {
    named_bits(
        field,
        ["flags are not a list", "a flag is not a string"],
        CommandFlags::from_name,
    )
    .map(CommandFlags)
}

/// A command's ACL categories (the 7th field of its `COMMAND` entry; none when the entry
/// has no such field).
fn parse_acl_categories(field: Option<&ReplyView<'_>>) -> Result<u64, &'static str> {
    match field {
        Some(categories) => named_bits(
            categories,
            [
                "ACL categories are not a list",
                "an ACL category is not a string",
            ],
            acl_category_bit,
        ),
        None => Ok(0),
    }
}

/// The bits of a list of names (command flags, ACL categories) ORed together; a name
/// `bit` does not know adds none. `errors`: what to say when `list` is not a list, and
/// when one of its names is not a string.
fn named_bits<T: Default + std::ops::BitOrAssign>(
    list: &ReplyView<'_>,
    errors: [&'static str; 2],
    bit: impl Fn(&[u8]) -> Option<T>,
) -> Result<T, &'static str> {
    let mut bits = T::default();
    for name in list.elements_or_empty().ok_or(errors[0])? {
        bits |= bit(name.text().ok_or(errors[1])?).unwrap_or_default();
    }
    Ok(bits)
}

/// A command's key specs (the 9th field of its `COMMAND` entry).
fn parse_key_specs(raw_specs: &ReplyView<'_>) -> Result<Vec<KeySpec>, String> {
    raw_specs
        .elements_or_empty()
        .ok_or("key specs are not a list")?
        .map(|raw| parse_key_spec(&raw))
        .collect()
}

fn parse_key_spec(raw: &ReplyView<'_>) -> Result<KeySpec, String> {
    let mut flags = KeyFlags::default();
    if let Some(names) = raw.field("flags") {
        for flag in names
            .elements_or_empty()
            .ok_or("key spec flags are not a list")?
        {
            let flag = flag.text().ok_or("a key spec flag is not a string")?;
            flags.0 |= KeyFlags::from_name(flag).unwrap_or(0);
        }
    }

    let small = |value: Option<ReplyView<'_>>, what: &str| -> Result<i32, String> {
        value
            .and_then(|value| value.integer())
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| format!("key spec {what} is missing or not a small integer"))
    };

    let begin = raw
        .field("begin_search")
        .ok_or("key spec without begin_search")?;
    let begin_type = begin
        .field("type")
        .as_ref()
        .and_then(ReplyView::text)
        .unwrap_or(b"unknown");
    let begin_spec = begin.field("spec");
    let field = |name: &str| begin_spec.as_ref().and_then(|s| s.field(name));
    let begin_search = if begin_type.eq_ignore_ascii_case(b"index") {
        BeginSearch::Index(small(field("index"), "index")?)
    } else if begin_type.eq_ignore_ascii_case(b"keyword") {
        let keyword = field("keyword")
            .as_ref()
            .and_then(ReplyView::text)
            .ok_or("key spec keyword is missing")?;
        BeginSearch::Keyword {
            keyword: Bytes::copy_from_slice(keyword),
            startfrom: small(field("startfrom"), "startfrom")?,
        }
    } else {
        BeginSearch::Unknown
    };

    let find = raw.field("find_keys").ok_or("key spec without find_keys")?;
    let find_type = find
        .field("type")
        .as_ref()
        .and_then(ReplyView::text)
        .unwrap_or(b"unknown");
    let find_spec = find.field("spec");
    let field = |name: &str| find_spec.as_ref().and_then(|s| s.field(name));
    let find_keys = if find_type.eq_ignore_ascii_case(b"range") {
        FindKeys::Range {
            lastkey: small(field("lastkey"), "lastkey")?,
            step: small(field("keystep"), "keystep")?,
            limit: small(field("limit"), "limit")?,
        }
    } else if find_type.eq_ignore_ascii_case(b"keynum") {
        FindKeys::Keynum {
            keynumidx: small(field("keynumidx"), "keynumidx")?,
            firstkey: small(field("firstkey"), "firstkey")?,
            step: small(field("keystep"), "keystep")?,
        }
    } else {
        FindKeys::Unknown
    };

    Ok(KeySpec {
        flags,
        begin_search,
        find_keys,
    })
}
