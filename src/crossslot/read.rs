//! What the proxy reads from each key's master, and what those replies mean.
//!
//! Every read is plain commands a master answers with the key's whole value; the reply
//! frames (RESP2 or RESP3, as the node connection speaks) become a [`Value`]. A reply of
//! `WRONGTYPE` is a value too (the command's reply depends on it); any other error reply is
//! handed back to be forwarded.

use bytes::Bytes;

use super::score;
use crate::protocol::{parse_frame, BytesFrame};

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
            (ReadKind::Text, [Reply::Frame(BytesFrame::Null)]) => Ok(Value::Missing),
            (ReadKind::Text, [Reply::Frame(BytesFrame::BlobString { data, .. })]) => {
                Ok(Value::Text(data.clone()))
            }
            (ReadKind::Scored, [zrange, smembers]) => match zrange {
                Reply::WrongType => members(smembers).ok_or_else(unexpected),
                Reply::Frame(frame) => scored(frame).ok_or_else(unexpected),
            },
            _ => Err(unexpected()),
        }
    }
}

/// One reply: WRONGTYPE, or a frame that is not an error.
enum Reply {
    WrongType,
    Frame(BytesFrame),
}

impl Reply {
    fn of(reply: &Bytes) -> Result<Reply, Bytes> {
        // RESP3 may carry the error as a blob error: `!<len>\r\nWRONGTYPE ...`.
        let blob_wrongtype =
            reply.starts_with(b"!") && reply.windows(9).any(|window| window == b"WRONGTYPE");
        if reply.starts_with(b"-WRONGTYPE") || blob_wrongtype {
            return Ok(Reply::WrongType);
        }
        if reply.starts_with(b"-") || reply.starts_with(b"!") {
            return Err(reply.clone());
        }
        parse_frame(reply)
            .map(Reply::Frame)
            .map_err(|error| crate::reply::error(&format!("ERR proxy: cross-slot read: {error}")))
    }
}

fn elements(frame: &BytesFrame) -> Option<Vec<&BytesFrame>> {
    match frame {
        BytesFrame::Array { data, .. } => Some(data.iter().collect()),
        BytesFrame::Set { data, .. } => Some(data.iter().collect()),
        BytesFrame::Null => Some(Vec::new()),
        _ => None,
    }
}

fn text(frame: &BytesFrame) -> Option<Bytes> {
    match frame {
        BytesFrame::BlobString { data, .. } | BytesFrame::SimpleString { data, .. } => {
            Some(data.clone())
        }
        _ => None,
    }
}

fn members(reply: &Reply) -> Option<Value> {
    let Reply::Frame(frame) = reply else {
        return Some(Value::WrongType);
    };
    let members = elements(frame)?
        .into_iter()
        .map(text)
        .collect::<Option<Vec<_>>>()?;
    // Redis deletes an emptied set: an empty reply is a missing key.
    Some(if members.is_empty() {
        Value::Missing
    } else {
        Value::Members(members)
    })
}

fn scored(frame: &BytesFrame) -> Option<Value> {
    let items = elements(frame)?;
    let score = |frame: &BytesFrame| match frame {
        BytesFrame::Double { data, .. } => Some(*data),
        other => score::parse(&text(other)?),
    };
    let mut pairs = Vec::with_capacity(items.len() / 2);
    if items
        .iter()
        .all(|item| matches!(item, BytesFrame::Array { .. }))
    {
        // RESP3: one [member, score] array per member.
        for item in items {
            let pair = elements(item)?;
            let [member, value] = pair.as_slice() else {
                return None;
            };
            pairs.push((text(member)?, score(value)?));
        }
    } else {
        for pair in items.chunks(2) {
            let [member, value] = pair else { return None };
            pairs.push((text(member)?, score(value)?));
        }
    }
    Some(if pairs.is_empty() {
        Value::Missing
    } else {
        Value::Scored(pairs)
    })
}
