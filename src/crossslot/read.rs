//! What the proxy reads from each key's master, and what those replies mean.
//!
//! Every read is plain commands a master answers with the key's whole value; the reply
//! frames (RESP2 or RESP3, as the node connection speaks) become a [`Value`]. A reply of
//! `WRONGTYPE` is a value too (the command's reply depends on it); any other error reply is
//! handed back to be forwarded.

use bytes::{Bytes, BytesMut};

use super::score;
use crate::protocol::{encode, AggregateKind, Elements, ReplyView};

/// How one key is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// A set's members: `SMEMBERS`.
    Members,
    /// A sorted set's members and scores, or a set's members (score 1, as ZUNION reads a
    /// set): `ZRANGE key 0 -1 WITHSCORES`, and only when that is `WRONGTYPE`, the key read
    /// again as [`ReadKind::Members`] (see [`Read::as_set`]).
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
    /// The command to send to the key's master, as arguments (what [`Read::frame_into`]
    /// frames; the proxy itself sends the frame).
    pub fn command(&self) -> Vec<Bytes> {
        let args: &[&'static [u8]] = match self.kind {
            ReadKind::Members => &[b"SMEMBERS"],
            ReadKind::Scored => &[b"ZRANGE", b"0", b"-1", b"WITHSCORES"],
            ReadKind::Text => &[b"GET"],
        };
        let mut command = Vec::with_capacity(args.len() + 1);
        command.push(Bytes::from_static(args[0]));
        command.push(self.key.clone());
        command.extend(args[1..].iter().map(|arg| Bytes::from_static(arg)));
        command
    }

    /// Appends [`Read::command`] to `out` as one RESP request. The fixed arguments are
    /// framed once, here, as constants: a read costs one header and the key.
    pub fn frame_into(&self, out: &mut BytesMut) {
        let (head, tail): (&[u8], &[u8]) = match self.kind {
            ReadKind::Members => (b"*2\r\n$8\r\nSMEMBERS\r\n", b""),
            ReadKind::Scored => (
                b"*5\r\n$6\r\nZRANGE\r\n",
                b"$1\r\n0\r\n$2\r\n-1\r\n$10\r\nWITHSCORES\r\n",
            ),
            ReadKind::Text => (b"*2\r\n$3\r\nGET\r\n", b""),
        };
        out.extend_from_slice(head);
        encode::bulk(out, &self.key);
        out.extend_from_slice(tail);
    }

    /// The value the reply to [`Read::command`] describes; `Err` is an error reply frame
    /// to forward to the client (the node refused a read, or replied something unexpected).
    /// A scored read of a key of another type is [`Value::WrongType`]: read it again with
    /// [`Read::as_set`], since a set is a valid input too.
    pub fn value(&self, reply: &Bytes) -> Result<Value, Bytes> {
        let reply = Reply::of(reply)?;
        let unexpected = || crate::reply::error("ERR proxy: unexpected reply to a cross-slot read");
        match (self.kind, &reply) {
            (_, Reply::WrongType) => Ok(Value::WrongType),
            (ReadKind::Members, reply) => members(reply).ok_or_else(unexpected),
            (ReadKind::Text, Reply::Frame(_, ReplyView::Null)) => Ok(Value::Missing),
            (ReadKind::Text, Reply::Frame(frame, ReplyView::Bulk(data))) => {
                Ok(Value::Text(frame.slice_ref(data)))
            }
            (ReadKind::Scored, Reply::Frame(frame, view)) => {
                scored(frame, view).ok_or_else(unexpected)
            }
            _ => Err(unexpected()),
        }
    }

    /// The same key read as a set: what a scored read that met `WRONGTYPE` reads next. The
    /// second read is sent only then, so a sorted set costs its master one command.
    pub fn as_set(&self) -> Option<Read> {
        (self.kind == ReadKind::Scored).then(|| Read {
            key: self.key.clone(),
            kind: ReadKind::Members,
        })
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
        // The frame came whole off a node connection: its members are checked as they
        // are read, once (see `members` and `scored`).
        let view = ReplyView::scanned(reply).map_err(|error| {
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
    let mut items = elements(view)?;
    let mut members = Vec::with_capacity(items.len());
    for item in items.by_ref() {
        members.push(text(frame, &item)?);
    }
    if !items.is_empty() {
        // A malformed element ended them.
        return None;
    }
    // Redis deletes an emptied set: an empty reply is a missing key.
    Some(if members.is_empty() {
        Value::Missing
    } else {
        Value::Members(members)
    })
}

fn scored(frame: &Bytes, view: &ReplyView<'_>) -> Option<Value> {
    let score = |view: &ReplyView<'_>| match view {
        ReplyView::Double(data) | ReplyView::Bulk(data) | ReplyView::Simple(data) => {
            score::parse(data)
        }
        _ => None,
    };
    let mut items = elements(view)?;
    let mut pairs = Vec::with_capacity(items.len());
    match items.next() {
        None => {}
        // RESP3: one [member, score] array per member.
        Some(first @ ReplyView::Aggregate(AggregateKind::Array, _)) => {
            let mut item = Some(first);
            while let Some(ReplyView::Aggregate(AggregateKind::Array, mut pair)) = item {
                let (Some(member), Some(value), None) = (pair.next(), pair.next(), pair.next())
                else {
                    return None;
                };
                pairs.push((text(frame, &member)?, score(&value)?));
                item = items.next();
            }
            if item.is_some() {
                return None;
            }
        }
        Some(first) => {
            let mut member = Some(first);
            while let Some(text_view) = member {
                let value = items.next()?;
                pairs.push((text(frame, &text_view)?, score(&value)?));
                member = items.next();
            }
        }
    }
    if !items.is_empty() {
        // A malformed element ended them.
        return None;
    }
    Some(if pairs.is_empty() {
        Value::Missing
    } else {
        Value::Scored(pairs)
    })
}
