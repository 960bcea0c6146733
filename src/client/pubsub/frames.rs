//! The Pub/Sub frames the session writes itself: confirmations, RESP2 subscribed-mode
//! PING and the subscribed-mode refusal (reading a node's pushes is `upstream::pushes`).
//! Pure.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::Proto;
use crate::reply;

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
