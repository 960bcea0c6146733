//! What the proxy reads from each key's master, and what those replies mean.
//!
//! Every read is plain commands a master answers with the key's whole value; the reply
//! frames (RESP2 or RESP3, as the node connection speaks) become a [`Value`]. A reply of
//! `WRONGTYPE` is a value too (the command's reply depends on it); any other error reply is
//! handed back to be forwarded.

use bytes::Bytes;

use super::score;
use crate::protocol::{AggregateKind, Elements, ReplyView};

/// How one key is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// A set's members: `SMEMBERS`.
    Members,
    /// A sorted set's members and scores, or a set's members (score 1, as ZUNION reads a
    /// set): `ZRANGE key 0 -1 WITHSCORES` then `SMEMBERS key`, one of which is `WRONGTYPE`.
    Scored,
    /// A string: `GET`.
    Text,
}

/// One key to read and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The key.
    pub key: Bytes,
    /// How.
    pub kind: ReadKind,
}

/// What a key holds, as far as the command cares.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// No such key (Redis treats it as empty).
    Missing,
    /// A set's members.
    Members(Vec<Bytes>),
    /// A sorted set's members with their scores, in ascending order.
    Scored(Vec<(Bytes, f64)>),
    /// A string.
    Text(Bytes),
    /// A key of another type than the command reads.
    WrongType,
}

impl Read {
    /// The commands to send to the key's master, in order (a `MULTI`/`EXEC` around them
    /// makes them one snapshot).
    pub fn commands(&self) -> Vec<Vec<Bytes>> {
        let key = self.key.clone();
        let command = |args: &[&'static [u8]]| {
            let mut command: Vec<Bytes> = vec![Bytes::from_static(args[0]), key.clone()];
            command.extend(args[1..].iter().map(|arg| Bytes::from_static(arg)));
            command
        };
        match self.kind {
            ReadKind::Members => vec![command(&[b"SMEMBERS"])],
            ReadKind::Scored => vec![
                command(&[b"ZRANGE", b"0", b"-1", b"WITHSCORES"]),
                command(&[b"SMEMBERS"]),
            ],
            ReadKind::Text => vec![command(&[b"GET"])],
        }
    }

    /// The value the replies to [`Read::commands`] describe; `Err` is an error reply frame
    /// to forward to the client (the node refused a read, or replied something unexpected).
    pub fn value(&self, replies: &[Bytes]) -> Result<Value, Bytes> {
        let frames = replies
            .iter()
            .map(Reply::of)
            .collect::<Result<Vec<_>, _>>()?;
        let unexpected = || crate::reply::error("ERR proxy: unexpected reply to a cross-slot read");
        match (self.kind, frames.as_slice()) {
            (ReadKind::Members, [reply]) => members(reply).ok_or_else(unexpected),
            (ReadKind::Text, [Reply::WrongType]) => Ok(Value::WrongType),
            (ReadKind::Text, [Reply::Frame(_, ReplyView::Null)]) => Ok(Value::Missing),
            (ReadKind::Text, [Reply::Frame(frame, ReplyView::Bulk(data))]) => {
                Ok(Value::Text(frame.slice_ref(data)))
            }
            (ReadKind::Scored, [zrange, smembers]) => match zrange {
                Reply::WrongType => members(smembers).ok_or_else(unexpected),
                Reply::Frame(frame, view) => scored(frame, view).ok_or_else(unexpected),
            },
            _ => Err(unexpected()),
        }
    }
}

/// One reply: WRONGTYPE, or a frame that is not an error, with a view into it (members are
/// handed out as slices of the frame, not copies).
enum Reply<'a> {
    WrongType,
    Frame(&'a Bytes, ReplyView<'a>),
}

impl<'a> Reply<'a> {
    fn of(reply: &'a Bytes) -> Result<Reply<'a>, Bytes> {
        let view = ReplyView::parse(reply).map_err(|error| {
            crate::reply::error(&format!("ERR proxy: cross-slot read: {}", error.0))
        })?;
        match view {
            // RESP3 may carry the error as a blob error: `!<len>\r\nWRONGTYPE ...`.
            ReplyView::Error(text) if text.starts_with(b"WRONGTYPE") => Ok(Reply::WrongType),
            ReplyView::Error(_) => Err(reply.clone()),
            view => Ok(Reply::Frame(reply, view)),
        }
    }
}

/// The elements of an array or a set; a null is none.
fn elements<'a>(view: &ReplyView<'a>) -> Option<Elements<'a>> {
    match view {
        ReplyView::Aggregate(AggregateKind::Array | AggregateKind::Set, items) => {
            Some(items.clone())
        }
        ReplyView::Null => Some(Elements::default()),
        _ => None,
    }
}

/// A bulk or simple string's text, as a slice of `frame`.
fn text(frame: &Bytes, view: &ReplyView<'_>) -> Option<Bytes> {
    match view {
        ReplyView::Bulk(data) | ReplyView::Simple(data) => Some(frame.slice_ref(data)),
        _ => None,
    }
}

fn members(reply: &Reply) -> Option<Value> {
    let Reply::Frame(frame, view) = reply else {
        return Some(Value::WrongType);
    };
    let members = elements(view)?
        .map(|item| text(frame, &item))
        .collect::<Option<Vec<_>>>()?;
    // Redis deletes an emptied set: an empty reply is a missing key.
    Some(if members.is_empty() {
        Value::Missing
    } else {
        Value::Members(members)
    })
}

fn scored(frame: &Bytes, view: &ReplyView<'_>) -> Option<Value> {
    let items: Vec<ReplyView<'_>> = elements(view)?.collect();
    let score = |view: &ReplyView<'_>| match view {
        ReplyView::Double(data) | ReplyView::Bulk(data) | ReplyView::Simple(data) => {
            score::parse(data)
        }
        _ => None,
    };
    let mut pairs = Vec::with_capacity(items.len() / 2);
    if items
        .iter()
        .all(|item| matches!(item, ReplyView::Aggregate(AggregateKind::Array, _)))
    {
        // RESP3: one [member, score] array per member.
        for item in &items {
            let pair: Vec<ReplyView<'_>> = elements(item)?.collect();
            let [member, value] = pair.as_slice() else {
                return None;
            };
            pairs.push((text(frame, member)?, score(value)?));
        }
    } else {
        for pair in items.chunks(2) {
            let [member, value] = pair else { return None };
            pairs.push((text(frame, member)?, score(value)?));
        }
    }
    Some(if pairs.is_empty() {
        Value::Missing
    } else {
        Value::Scored(pairs)
    })
}
