//! The Pub/Sub frames the relay looks into or writes itself: the kind word of a push,
//! confirmations, RESP2 subscribed-mode PING and the subscribed-mode refusal. Pure; never
//! panics on any input.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::{Proto, ReplyView};
use crate::reply;

/// One element of a flat array or push frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Element {
    /// A bulk string: where its payload lies in the frame.
    Bulk(Range<usize>),
    /// A null (`$-1`, `*-1` or `_`).
    Null,
    /// An integer.
    Int(i64),
}

/// The elements of a flat `*` or `>` frame of bulk strings, integers and nulls (every
/// Pub/Sub confirmation and message is one); `None` for anything else.
pub(super) fn elements(frame: &[u8]) -> Option<Vec<Element>> {
    if !matches!(frame.first(), Some(b'*' | b'>')) {
        return None;
    }
    let items = ReplyView::parse(frame).ok()?.elements()?;
    // Element frames follow the count line.
    let mut pos = frame.iter().position(|&b| b == b'\n')? + 1;
    let mut out = Vec::with_capacity(items.len().min(8));
    for item in items.frames() {
        out.push(match ReplyView::parse(item).ok()? {
            ReplyView::Bulk(data) => {
                let start = pos + item.len() - data.len() - 2;
                Element::Bulk(start..start + data.len())
            }
            ReplyView::Null => Element::Null,
            ReplyView::Int(n) => Element::Int(n),
            _ => return None,
        });
        pos += item.len();
    }
    Some(out)
}

/// The first element of a Pub/Sub frame (`message`, `subscribe`, ...), if it has one.
pub(super) fn kind_word<'a>(frame: &'a [u8], elems: &[Element]) -> Option<&'a [u8]> {
    match elems.first()? {
        Element::Bulk(range) => frame.get(range.clone()),
        _ => None,
    }
}

/// Whether `word` names a subscription confirmation rather than a message.
pub(super) fn is_confirmation(word: &[u8]) -> bool {
    matches!(
        word,
        b"subscribe"
            | b"unsubscribe"
            | b"psubscribe"
            | b"punsubscribe"
            | b"ssubscribe"
            | b"sunsubscribe"
    )
}

/// A subscription confirmation `[kind, channel, count]` as Redis writes it: an array in
/// RESP2, a push in RESP3; `channel` is null for an UNSUBSCRIBE of nothing.
pub(super) fn confirmation(
    proto: Proto,
    kind: &str,
    channel: Option<&[u8]>,
    count: usize,
) -> Bytes {
    let mut out = BytesMut::with_capacity(32 + channel.map_or(0, <[u8]>::len));
    out.put_slice(match proto {
        Proto::Resp2 => b"*3\r\n",
        Proto::Resp3 => b">3\r\n",
    });
    put_bulk(&mut out, kind.as_bytes());
    match (channel, proto) {
        (Some(name), _) => put_bulk(&mut out, name),
        (None, Proto::Resp2) => out.put_slice(b"$-1\r\n"),
        (None, Proto::Resp3) => out.put_slice(b"_\r\n"),
    }
    out.put_slice(format!(":{count}\r\n").as_bytes());
    out.freeze()
}

/// PING in RESP2 subscribed mode: `["pong", argument or ""]`, as Redis answers it.
pub(super) fn subscribed_pong(argument: Option<&[u8]>) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    out.put_slice(b"*2\r\n");
    put_bulk(&mut out, b"pong");
    put_bulk(&mut out, argument.unwrap_or_default());
    out.freeze()
}

/// Redis 7's refusal of a command in RESP2 subscribed mode; `name` is the command's full
/// lower-case name (`get`, `client|id`).
pub(super) fn refusal(name: &str) -> Bytes {
    reply::error(&reply::connection::subscribed_mode_refusal(name))
}

fn put_bulk(out: &mut BytesMut, data: &[u8]) {
    out.put_slice(format!("${}\r\n", data.len()).as_bytes());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_of_a_resp2_message_and_a_resp3_confirmation() {
        let message = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n";
        let elems = elements(message).expect("flat array");
        assert_eq!(kind_word(message, &elems), Some(&b"message"[..]));
        match &elems[2] {
            Element::Bulk(range) => assert_eq!(&message[range.clone()], b"hello"),
            other => panic!("payload parsed as {other:?}"),
        }
        let confirm = b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n";
        let elems = elements(confirm).expect("flat push");
        assert_eq!(elems[1], Element::Null);
        assert_eq!(elems[2], Element::Int(0));
    }

    #[test]
    fn elements_refuses_truncated_nested_or_trailing_input() {
        assert_eq!(elements(b"*2\r\n$7\r\nmessage\r\n"), None);
        assert_eq!(elements(b"*1\r\n*0\r\n"), None);
        assert_eq!(elements(b"*1\r\n:1\r\n:2\r\n"), None);
        assert_eq!(elements(b"*1\r\n$5\r\nab\r\n"), None);
        assert_eq!(elements(b"+OK\r\n"), None);
        assert_eq!(elements(b"*99999999999\r\n"), None);
    }

    #[test]
    fn confirmations_match_redis_encoding() {
        // Redis: addReplyPubsubSubscribed / addReplyPubsubUnsubscribed.
        assert_eq!(
            confirmation(Proto::Resp2, "subscribe", Some(b"a"), 1),
            Bytes::from_static(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n")
        );
        assert_eq!(
            confirmation(Proto::Resp3, "sunsubscribe", None, 0),
            Bytes::from_static(b">3\r\n$12\r\nsunsubscribe\r\n_\r\n:0\r\n")
        );
        assert_eq!(
            confirmation(Proto::Resp2, "unsubscribe", None, 0),
            Bytes::from_static(b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n")
        );
    }
}
