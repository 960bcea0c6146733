//! Keyspace notifications (`__keyspace@<db>__:<key>`, `__keyevent@<db>__:<event>`) for one
//! client: which subscriptions concern them, the names to subscribe upstream, and the
//! messages as the client must see them. Pure; never panics on any input.
//!
//! Redis Cluster publishes keyspace notifications on the node that owns the key only, so
//! these subscriptions are made on every master (see the parent module); ordinary
//! channels stay on one connection.
//!
//! Under a key layout the client speaks legacy names while notifications carry cluster
//! names:
//!
//! - A keyspace *channel* is translated forward exactly: `__keyspace@0__:<legacy key>`
//!   subscribes `__keyspace@0__:<cluster key>`. Keyevent channels carry no key name and are
//!   subscribed as they are.
//! - A keyspace *pattern* cannot in general be translated to one cluster pattern (one
//!   legacy glob spans several rules, buckets and hash tags). The upstream pattern is a
//!   broader one that surely covers it: the exact cluster key when the key part has no
//!   wildcard; `<head><prefix>:*` when the key glob's literal start pins a layout prefix;
//!   else the pattern's literal start followed by `*`. Every message is mapped back to
//!   legacy names and then matched against the client's own glob
//!   ([`glob_match`]), so the client receives exactly what Redis would give it over a
//!   legacy keyspace. Several client patterns may share one upstream pattern; each gets
//!   its own `pmessage` naming its own pattern, as Redis delivers one per matching pattern.
//! - Notifications about internal keys (indices, the layout marker) are dropped; keyevent
//!   payloads (the key name) are mapped back too.
//!
//! A pattern whose literal start does not decide between a keyspace channel and an
//! ordinary one (`*`, `__key*`) is "mixed": it is subscribed on the ordinary connection
//! (which delivers only ordinary channels) and on every master (which deliver only
//! keyspace channels), so each message arrives once.

mod databases;

use std::collections::{HashMap, HashSet};

use bytes::{BufMut, Bytes, BytesMut};

use crate::dispatch::layout::ActiveLayout;
use crate::rewrite::glob::{escape_glob, glob_match, literal_prefix, parse};
use crate::rewrite::Forward;
pub(super) use crate::upstream::pushes::is_keyspace_channel;
use crate::upstream::pushes::{self as frames, Element, KEYEVENT, KEYSPACE};

/// Which connections a pattern needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PatternClass {
    /// Matches ordinary channels only: the ordinary connection.
    Ordinary,
    /// Matches keyspace/keyevent channels only: every master.
    Keyspace,
    /// May match both: both.
    Mixed,
}

/// The class of the pattern `pattern` (decided by its literal start).
pub(super) fn pattern_class(pattern: &[u8]) -> PatternClass {
    let literal = literal_prefix(&parse(pattern));
    if is_keyspace_channel(&literal) {
        PatternClass::Keyspace
    } else if KEYSPACE.starts_with(&literal) || KEYEVENT.starts_with(&literal) {
        PatternClass::Mixed
    } else {
        PatternClass::Ordinary
    }
}

/// The length of `__keyspace@<db>__:` at the start of `name`, if it starts so.
fn keyspace_head_len(name: &[u8]) -> Option<usize> {
    let rest = name.strip_prefix(KEYSPACE)?;
    let split = rest.windows(3).position(|w| w == b"__:")?;
    Some(KEYSPACE.len() + split + 3)
}

/// The channel to subscribe upstream for the client's keyspace channel `channel`.
/// Without a layout, `databases` (above 1) names the databases other than 0 (see
/// `databases`).
pub(super) fn upstream_channel(
    layout: Option<&ActiveLayout>,
    databases: u32,
    channel: &[u8],
) -> Bytes {
    if layout.is_none() {
        if let Some(upstream) = databases::upstream_name(channel, databases) {
            return upstream;
        }
    }
    let (Some(active), Some(head_len)) = (layout, keyspace_head_len(channel)) else {
        return Bytes::copy_from_slice(channel);
    };
    match active.layout.forward(&channel[head_len..]) {
        Forward::Rewritten(rewritten) => {
            let mut out = Vec::with_capacity(head_len + rewritten.key.len());
            out.extend_from_slice(&channel[..head_len]);
            out.extend_from_slice(&rewritten.key);
            Bytes::from(out)
        }
        Forward::Outside | Forward::Unmatched { .. } => Bytes::copy_from_slice(channel),
    }
}

/// The pattern to subscribe upstream (on every master) for the client's pattern
/// `pattern`; it matches at least every cluster channel whose legacy form the client's
/// pattern matches (see the module docs).
/// Without a layout, `databases` (above 1) names the databases other than 0.
pub(super) fn upstream_pattern(
    layout: Option<&ActiveLayout>,
    databases: u32,
    pattern: &[u8],
) -> Bytes {
    let Some(active) = layout else {
        return databases::upstream_name(pattern, databases)
            .unwrap_or_else(|| Bytes::copy_from_slice(pattern));
    };
    let tokens = parse(pattern);
    let literal = literal_prefix(&tokens);
    if literal.starts_with(KEYEVENT) {
        // Keyevent channel names carry no key: only the payload is mapped.
        return Bytes::copy_from_slice(pattern);
    }
    let broad = |literal: &[u8]| {
        let mut out = escape_glob(literal);
        out.push(b'*');
        Bytes::from(out)
    };
    let Some(head_len) = keyspace_head_len(&literal) else {
        return broad(&literal);
    };
    let head = escape_glob(&literal[..head_len]);
    let key_literal = &literal[head_len..];
    let with_head = |key_pattern: Vec<u8>| {
        let mut out = head.clone();
        out.extend_from_slice(&key_pattern);
        Bytes::from(out)
    };
    if literal.len() == tokens.len() {
        // No wildcard: one key, translated exactly.
        return with_head(match active.layout.forward(key_literal) {
            Forward::Rewritten(rewritten) => escape_glob(&rewritten.key),
            Forward::Outside | Forward::Unmatched { .. } => escape_glob(key_literal),
        });
    }
    let prefixes = active.layout.prefixes();
    if let Some(prefix) = prefixes
        .iter()
        .find(|p| key_literal.starts_with(p.as_bytes()) && key_literal.get(p.len()) == Some(&b':'))
    {
        let mut key_pattern = escape_glob(prefix.as_bytes());
        key_pattern.extend_from_slice(b":*");
        return with_head(key_pattern);
    }
    // A literal start that a prefix could still follow (`my*`) or none at all: every key
    // with that start, cluster names included; outside every prefix names are unchanged.
    with_head(broad(key_literal).to_vec())
}

/// The client's keyspace subscriptions, by the upstream name that carries them.
#[derive(Debug, Default)]
pub(super) struct Upstream {
    /// Upstream channel -> the client's channels it carries.
    pub(super) channels: HashMap<Bytes, HashSet<Bytes>>,
    /// Upstream pattern -> the client's patterns it carries.
    pub(super) patterns: HashMap<Bytes, Vec<Bytes>>,
}

impl Upstream {
    /// True when the client has no keyspace subscription.
    pub(super) fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty()
    }

    /// Records the client's channel `client` carried by `upstream`; true when `upstream`
    /// is new (it must be subscribed).
    pub(super) fn add_channel(&mut self, upstream: Bytes, client: Bytes) -> bool {
        let entry = self.channels.entry(upstream).or_default();
        entry.insert(client);
        entry.len() == 1
    }

    /// Forgets the client's channel `client`; true when `upstream` carries nothing more
    /// (it must be unsubscribed).
    pub(super) fn remove_channel(&mut self, upstream: &Bytes, client: &[u8]) -> bool {
        let Some(entry) = self.channels.get_mut(upstream) else {
            return false;
        };
        entry.remove(client);
        if entry.is_empty() {
            self.channels.remove(upstream);
            return true;
        }
        false
    }

    /// As [`Upstream::add_channel`], for patterns.
    pub(super) fn add_pattern(&mut self, upstream: Bytes, client: Bytes) -> bool {
        let entry = self.patterns.entry(upstream).or_default();
        if !entry.contains(&client) {
            entry.push(client);
        }
        entry.len() == 1
    }

    /// As [`Upstream::remove_channel`], for patterns.
    pub(super) fn remove_pattern(&mut self, upstream: &Bytes, client: &[u8]) -> bool {
        let Some(entry) = self.patterns.get_mut(upstream) else {
            return false;
        };
        entry.retain(|p| p != client);
        if entry.is_empty() {
            self.patterns.remove(upstream);
            return true;
        }
        false
    }

    /// The message frames the client receives for `frame`, a message from a keyspace
    /// connection: names mapped back to legacy ones, pattern messages once per client
    /// pattern that matches; `None` when nothing is for the client.
    /// Without a layout, `databases` (above 1) names the databases other than 0.
    pub(super) fn deliver(
        &self,
        layout: Option<&ActiveLayout>,
        databases: u32,
        frame: Bytes,
    ) -> Option<Bytes> {
        let Some(elems) = frames::elements(&frame) else {
            return Some(frame);
        };
        let bulk = |i: usize| match elems.get(i) {
            Some(Element::Bulk(data)) => Some(*data),
            _ => None,
        };
        let (pattern, channel, payload) = match frames::kind_word(&elems) {
            Some(b"message") if elems.len() == 3 => (None, bulk(1)?, bulk(2)?),
            Some(b"pmessage") if elems.len() == 4 => (Some(bulk(1)?), bulk(2)?, bulk(3)?),
            _ => return Some(frame),
        };
        let (legacy_channel, legacy_payload) = match layout {
            Some(active) => (
                active.legacy_channel(channel)?,
                active.legacy_keyevent_payload(channel, payload)?,
            ),
            None => databases::shown(channel, payload, databases),
        };
        let header = frame[0];
        let Some(pattern) = pattern else {
            let wanted = self
                .channels
                .get(channel)
                .is_some_and(|clients| clients.contains(&legacy_channel));
            return wanted.then(|| encode(header, &[b"message", &legacy_channel, &legacy_payload]));
        };
        let mut out = BytesMut::new();
        for client in self.patterns.get(pattern)? {
            // Without a layout or databases, an identical pattern already matched upstream.
            let same_names = layout.is_none() && databases <= 1;
            let matched =
                (same_names && client[..] == *pattern) || glob_match(client, &legacy_channel);
            if matched {
                out.put_slice(&encode(
                    header,
                    &[b"pmessage", client, &legacy_channel, &legacy_payload],
                ));
            }
        }
        (!out.is_empty()).then(|| out.freeze())
    }
}

/// A flat frame of bulk strings, with header byte `header` (`*` or `>`).
fn encode(header: u8, parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.put_u8(header);
    out.put_slice(format!("{}\r\n", parts.len()).as_bytes());
    for part in parts {
        out.put_slice(format!("${}\r\n", part.len()).as_bytes());
        out.put_slice(part);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

#[cfg(test)]
mod tests;
