//! Decoding one reply frame (RESP2 or RESP3) into a small [`Value`] tree.
//!
//! redis-protocol's RESP3 decoder reads every RESP2 frame too and is tried first. It
//! refuses sets whose members are aggregates ("to_set: Invalid hash key"), and Redis 7
//! sends exactly that in RESP3 `COMMAND` replies (key specs are a set of maps), so such
//! frames are read by [`read_frame`], a small reader that keeps sets as lists.
//! Invariants: the whole input must be one frame; nesting is bounded (both readers
//! recurse, so a deeper frame is measured and refused first); no input panics.

use redis_protocol::resp3::decode::complete::decode;
use redis_protocol::resp3::types::OwnedFrame;

use crate::protocol::{reply_nesting, MAX_PARSED_NESTING as MAX_DEPTH};

/// A decoded reply element, the same for RESP2 and RESP3.
pub(crate) enum Value {
    Text(Vec<u8>),
    Int(i64),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Null,
}

impl Value {
    pub(crate) fn text(&self) -> Option<&[u8]> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            Value::Text(text) => std::str::from_utf8(text).ok()?.parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            Value::Null => Some(&[]),
            _ => None,
        }
    }

    /// The name/value pairs of a RESP3 map or a RESP2 flat array (a null is empty).
    pub(crate) fn pairs(&self) -> Option<Vec<(&Value, &Value)>> {
        match self {
            Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
            Value::List(items) if items.len() % 2 == 0 => {
                Some(items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect())
            }
            Value::Null => Some(Vec::new()),
            _ => None,
        }
    }

    /// A map's entry by (case-insensitive) name: a RESP3 map or a RESP2 flat array.
    pub(crate) fn field(&self, name: &str) -> Option<&Value> {
        let is_name = |key: &Value| {
            key.text()
                .is_some_and(|k| k.eq_ignore_ascii_case(name.as_bytes()))
        };
        match self {
            Value::Map(pairs) => pairs.iter().find(|(k, _)| is_name(k)).map(|(_, v)| v),
            Value::List(items) => items
                .chunks_exact(2)
                .find(|pair| is_name(&pair[0]))
                .map(|pair| &pair[1]),
            _ => None,
        }
    }
}

/// Decodes `frame`, which must be exactly one complete RESP2 or RESP3 frame.
pub(crate) fn decode_reply(frame: &[u8]) -> Result<Value, String> {
    if reply_nesting(frame).map_err(|error| error.0)? > MAX_DEPTH {
        return Err(format!("frame nests deeper than {MAX_DEPTH} levels"));
    }
    match decode(frame) {
        Ok(Some((decoded, used))) => {
            if used != frame.len() {
                return Err(format!("{} bytes after the frame", frame.len() - used));
            }
            from_frame(decoded)
        }
        Ok(None) => Err("incomplete frame".into()),
        Err(_) => {
            let mut reader = Reader { buf: frame, at: 0 };
            let value = reader.read_frame(0)?;
            if reader.at != frame.len() {
                return Err(format!("{} bytes after the frame", frame.len() - reader.at));
            }
            Ok(value)
        }
    }
}

fn from_frame(frame: OwnedFrame) -> Result<Value, String> {
    let list = |items: Vec<OwnedFrame>| -> Result<Value, String> {
        Ok(Value::List(
            items
                .into_iter()
                .map(from_frame)
                .collect::<Result<_, _>>()?,
        ))
    };
    Ok(match frame {
        OwnedFrame::BlobString { data, .. }
        | OwnedFrame::SimpleString { data, .. }
        | OwnedFrame::VerbatimString { data, .. }
        | OwnedFrame::BigNumber { data, .. }
        | OwnedFrame::ChunkedString(data) => Value::Text(data),
        OwnedFrame::Number { data, .. } => Value::Int(data),
        OwnedFrame::Array { data, .. } | OwnedFrame::Push { data, .. } => list(data)?,
        OwnedFrame::Set { data, .. } => list(data.into_iter().collect())?,
        OwnedFrame::Map { data, .. } => Value::Map(
            data.into_iter()
                .map(|(k, v)| Ok((from_frame(k)?, from_frame(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        OwnedFrame::Null => Value::Null,
        OwnedFrame::SimpleError { data, .. } => return Err(format!("server error: {data}")),
        OwnedFrame::BlobError { data, .. } => {
            return Err(format!("server error: {}", String::from_utf8_lossy(&data)))
        }
        OwnedFrame::Double { data, .. } => Value::Text(data.to_string().into_bytes()),
        OwnedFrame::Boolean { data, .. } => Value::Int(i64::from(data)),
        OwnedFrame::Hello { .. } => return Err("unexpected HELLO frame".into()),
    })
}

/// The fallback RESP2/RESP3 reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    /// The bytes up to the next CRLF, consuming it.
    fn line(&mut self) -> Result<&[u8], String> {
        let rest = self.buf.get(self.at..).unwrap_or_default();
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("incomplete frame")?;
        self.at += end + 2;
        Ok(&rest[..end])
    }

    fn length(&mut self) -> Result<Option<usize>, String> {
        let line = self.line()?;
        if line == b"-1" || line == b"?" {
            // Null aggregate / streamed length: the latter is not used by Redis here.
            return if line == b"-1" {
                Ok(None)
            } else {
                Err("streamed aggregates are not supported".into())
            };
        }
        let text = std::str::from_utf8(line).map_err(|_| "bad length")?;
        text.parse()
            .map(Some)
            .map_err(|_| format!("bad length {text:?}"))
    }

    fn read_frame(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("frame nests too deep".into());
        }
        let kind = *self.buf.get(self.at).ok_or("incomplete frame")?;
        self.at += 1;
        match kind {
            b'*' | b'~' | b'>' => match self.length()? {
                None => Ok(Value::Null),
                Some(n) => {
                    // Every element takes at least 3 bytes: bounds the allocation.
                    let mut items = Vec::with_capacity(n.min(self.remaining() / 3));
                    for _ in 0..n {
                        items.push(self.read_frame(depth + 1)?);
                    }
                    Ok(Value::List(items))
                }
            },
            b'%' => {
                let n = self.length()?.unwrap_or(0);
                let mut pairs = Vec::with_capacity(n.min(self.remaining() / 6));
                for _ in 0..n {
                    let key = self.read_frame(depth + 1)?;
                    pairs.push((key, self.read_frame(depth + 1)?));
                }
                Ok(Value::Map(pairs))
            }
            b'|' => {
                // Attributes describe the next frame; the frame itself is what counts.
                let n = self.length()?.unwrap_or(0);
                for _ in 0..n.saturating_mul(2) {
                    self.read_frame(depth + 1)?;
                }
                self.read_frame(depth + 1)
            }
            b'$' | b'=' | b'!' => {
                let Some(len) = self.length()? else {
                    return Ok(Value::Null);
                };
                let end = self.at.checked_add(len).ok_or("bad length")?;
                let data = self.buf.get(self.at..end).ok_or("incomplete frame")?;
                if self.buf.get(end..end + 2) != Some(b"\r\n") {
                    return Err("bulk string without CRLF".into());
                }
                self.at = end + 2;
                match kind {
                    b'!' => Err(format!("server error: {}", String::from_utf8_lossy(data))),
                    // Verbatim strings start with a 3-letter format and ':'.
                    b'=' => Ok(Value::Text(data.get(4..).unwrap_or_default().to_vec())),
                    _ => Ok(Value::Text(data.to_vec())),
                }
            }
            b'+' | b',' | b'(' | b'#' => Ok(Value::Text(self.line()?.to_vec())),
            b':' => {
                let line = self.line()?;
                let text = std::str::from_utf8(line).map_err(|_| "bad integer")?;
                text.parse()
                    .map(Value::Int)
                    .map_err(|_| format!("bad integer {text:?}"))
            }
            b'_' => {
                self.line()?;
                Ok(Value::Null)
            }
            b'-' => Err(format!(
                "server error: {}",
                String::from_utf8_lossy(self.line()?)
            )),
            other => Err(format!("unknown frame type {:?}", char::from(other))),
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_of_maps_are_read() {
        // What redis-protocol refuses: a set whose member is a map.
        let frame = b"~1\r\n%1\r\n+flags\r\n~2\r\n+RO\r\n+access\r\n";
        let value = decode_reply(frame).expect("reads");
        let items = value.list().expect("list");
        let flags = items[0]
            .field("flags")
            .and_then(Value::list)
            .expect("flags");
        assert_eq!(flags.len(), 2);
        assert_eq!(flags[1].text(), Some(&b"access"[..]));
    }

    #[test]
    fn fallback_rejects_bad_frames() {
        for bad in [
            &b"~1\r\n%1\r\n+a\r\n"[..],
            b"~1\r\n%1\r\n+a\r\n+b\r\n+extra\r\n",
            b"~1\r\n%1\r\n$5\r\nab\r\n+b\r\n",
            b"~1\r\n%1\r\n:x\r\n+b\r\n",
            b"~1\r\n%1\r\n-ERR no\r\n+b\r\n",
            b"~99999999999\r\n%1\r\n",
        ] {
            assert!(decode_reply(bad).is_err(), "{bad:?}");
        }
        let deep = "~1\r\n".repeat(MAX_DEPTH + 2) + "%0\r\n";
        assert!(decode_reply(deep.as_bytes()).is_err());
    }

    #[test]
    fn any_depth_is_refused_or_read_without_overflow() {
        // Both readers recurse: the deepest frame they are given must fit a small stack,
        // and a deeper one (as a Lua script can make Redis send) is refused unread.
        let outcome = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(|| {
                let frame = |depth: usize, level: &str| level.repeat(depth) + ":1\r\n";
                let deepest = [
                    frame(MAX_DEPTH, "*1\r\n"),
                    frame(MAX_DEPTH / 2, "%1\r\n+k\r\n~1\r\n"),
                ];
                let read = deepest.iter().all(|f| decode_reply(f.as_bytes()).is_ok());
                let lua = frame(100_000, "*1\r\n");
                (read, decode_reply(lua.as_bytes()).err())
            })
            .expect("spawn")
            .join()
            .expect("no overflow");
        assert_eq!(
            outcome,
            (true, Some("frame nests deeper than 32 levels".to_owned()))
        );
    }
}
