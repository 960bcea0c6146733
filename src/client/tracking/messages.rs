//! The messages that tell a tracking client what to drop, framed as Redis frames them:
//! `>2 invalidate [keys]` (or `_` for everything) to a RESP3 client, a `message` on
//! `__redis__:invalidate` to a subscribed RESP2 client that a REDIRECT names, and
//! `>2 tracking-redir-broken <id>` when that client went away.

use bytes::{BufMut, Bytes, BytesMut};

use super::super::registry::{ClientEntry, Mailboxes};
use super::Tracking;

/// The channel Redis sends invalidations on to a RESP2 client that REDIRECT names.
const CHANNEL: &[u8] = b"__redis__:invalidate";

/// One message for one tracking client.
pub(super) enum Message {
    Keys(Vec<Bytes>),
    Flush,
}

/// Messages to post: to client `id` (or to its REDIRECT client).
pub(super) type Posts = Vec<(u64, u64, Message)>;

/// Posts each message to its client, or to the client its REDIRECT names; a REDIRECT
/// client that went away is reported to the tracking client (RESP3), as Redis reports it.
pub(super) fn post_all(tracking: &Tracking, mailboxes: &Mailboxes, posts: Posts) {
    for (id, redirect, message) in posts {
        let kind = match message {
            Message::Keys(_) => "keys",
            Message::Flush => "flush",
        };
        let delivered = match redirect {
            0 => mailboxes.post(id, |entry| push(entry, &message)),
            to => mailboxes.post(to, |entry| match entry.resp {
                3 => push(entry, &message),
                _ if entry.subscriptions.any() => {
                    Some(frame(b"*3\r\n$7\r\nmessage\r\n", &message, 2, true))
                }
                _ => None,
            }),
        };
        if delivered == Some(true) {
            crate::metrics::tracking_invalidation(kind);
        } else if delivered.is_none() && redirect != 0 && tracking.tracks(id) {
            mailboxes.post(id, |entry| {
                entry.tracking.broken = true;
                (entry.resp == 3).then(|| redirect_broken(redirect))
            });
        }
    }
}

/// The `invalidate` push for a RESP3 client.
fn push(entry: &ClientEntry, message: &Message) -> Option<Bytes> {
    (entry.resp == 3).then(|| frame(b">2\r\n", message, 3, false))
}

/// `head` (a push or a message's header), then for a Pub/Sub message the channel,
/// `invalidate` for a push, and the keys (or a null) in protocol `resp`.
fn frame(head: &[u8], message: &Message, resp: u8, pubsub: bool) -> Bytes {
    let mut out = BytesMut::new();
    out.put_slice(head);
    let word: &[u8] = if pubsub { CHANNEL } else { b"invalidate" };
    crate::protocol::encode::bulk(&mut out, word);
    match message {
        Message::Flush if resp == 3 => out.put_slice(b"_\r\n"),
        Message::Flush => out.put_slice(b"$-1\r\n"),
        Message::Keys(keys) => {
            crate::protocol::encode::array_header(&mut out, keys.len());
            for key in keys {
                crate::protocol::encode::bulk(&mut out, key);
            }
        }
    }
    out.freeze()
}

/// `>2 tracking-redir-broken <id>`.
fn redirect_broken(redirect: u64) -> Bytes {
    Bytes::from(format!(
        ">2\r\n$21\r\ntracking-redir-broken\r\n:{redirect}\r\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_as_redis_sends_them() {
        let keys = Message::Keys(vec![Bytes::from_static(b"k")]);
        let push = frame(b">2\r\n", &keys, 3, false);
        assert_eq!(&push[..], b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n");
        let null = frame(b">2\r\n", &Message::Flush, 3, false);
        assert_eq!(&null[..], b">2\r\n$10\r\ninvalidate\r\n_\r\n");
        let message = frame(b"*3\r\n$7\r\nmessage\r\n", &keys, 2, true);
        assert_eq!(
            &message[..],
            b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
        );
        let flushed = frame(b"*3\r\n$7\r\nmessage\r\n", &Message::Flush, 2, true);
        assert!(flushed.ends_with(b"__redis__:invalidate\r\n$-1\r\n"));
        assert_eq!(
            &redirect_broken(12)[..],
            b">2\r\n$21\r\ntracking-redir-broken\r\n:12\r\n"
        );
    }
}
