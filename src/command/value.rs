//! Decoding one reply frame (RESP2 or RESP3) into a small [`Value`] tree.
//!
//! Read through [`ReplyView`], which keeps sets as lists in their order, so the sets of
//! maps Redis 7 sends in RESP3 `COMMAND` replies (key specs) read as well as anything.
//! Invariants: the whole input must be one frame; nesting is bounded (building the tree
//! recurses, so a deeper frame is measured and refused first); no input panics.

use crate::protocol::{reply_nesting, AggregateKind, ReplyView, MAX_PARSED_NESTING as MAX_DEPTH};

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
    from_view(ReplyView::parse(frame).map_err(|error| error.0)?)
}

/// The value of `view`; recursion is bounded by the nesting measured above.
fn from_view(view: ReplyView<'_>) -> Result<Value, String> {
    Ok(match view {
        ReplyView::Bulk(text)
        | ReplyView::Simple(text)
        | ReplyView::BigNumber(text)
        | ReplyView::Verbatim { text, .. } => Value::Text(text.to_vec()),
        // As a double reads back (`1.50` is `1.5`), its text when it is not a number.
        ReplyView::Double(text) => Value::Text(
            std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .map_or_else(|| text.to_vec(), |d| d.to_string().into_bytes()),
        ),
        ReplyView::Int(n) => Value::Int(n),
        ReplyView::Boolean(b) => Value::Int(i64::from(b)),
        ReplyView::Null => Value::Null,
        ReplyView::Error(text) => {
            return Err(format!("server error: {}", String::from_utf8_lossy(text)))
        }
        ReplyView::Aggregate(AggregateKind::Map, mut items) => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                pairs.push((from_view(key)?, from_view(value)?));
            }
            Value::Map(pairs)
        }
        ReplyView::Aggregate(_, items) => {
            Value::List(items.map(from_view).collect::<Result<_, _>>()?)
        }
    })
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
    fn bad_frames_are_refused() {
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
        // Building the tree recurses: the deepest frame read must fit a small stack,
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
