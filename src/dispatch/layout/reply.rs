//! The reverse rewrite: cluster key names in replies and keyspace notifications back to
//! legacy names, internal keys (indices, markers) hidden.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::ReplyView;
use crate::rewrite::Reverse;
use crate::upstream::block::BlockLayout;

use super::ActiveLayout;

impl ActiveLayout {
    /// The legacy name of a keyspace-notification channel (`__keyspace@<db>__:<key>`), for
    /// the pub/sub path: `Some(channel)` to deliver under (unchanged when not ours), `None`
    /// to drop the message (it is about an index or the marker).
    pub fn legacy_channel(&self, channel: &[u8]) -> Option<Bytes> {
        const KEYSPACE: &[u8] = b"__keyspace@";
        let untouched = || Some(Bytes::copy_from_slice(channel));
        let Some(rest) = channel.strip_prefix(KEYSPACE) else {
            return untouched();
        };
        let Some(split) = rest.windows(3).position(|w| w == b"__:") else {
            return untouched();
        };
        let head_len = KEYSPACE.len() + split + 3;
        match self.layout.reverse(&channel[head_len..]) {
            Reverse::Outside => untouched(),
            Reverse::Internal => None,
            Reverse::Legacy(key) => {
                let mut out = Vec::with_capacity(head_len + key.len());
                out.extend_from_slice(&channel[..head_len]);
                out.extend_from_slice(&key);
                Some(Bytes::from(out))
            }
        }
    }

    /// The legacy form of a keyevent notification (`__keyevent@<db>__:<event>`, payload the
    /// key): `Some(payload)` to deliver, `None` to drop it (an index or the marker).
    pub fn legacy_keyevent_payload(&self, channel: &[u8], payload: &[u8]) -> Option<Bytes> {
        if !channel.starts_with(b"__keyevent@") {
            return Some(Bytes::copy_from_slice(payload));
        }
        match self.layout.reverse(payload) {
            Reverse::Outside => Some(Bytes::copy_from_slice(payload)),
            Reverse::Internal => None,
            Reverse::Legacy(key) => Some(key),
        }
    }

    /// Rewrites the key names in `reply` (of command `name`) to legacy names; `None` when
    /// the reply names an internal key and must not be shown (RANDOMKEY).
    pub fn reverse_reply(&self, name: &str, reply: Bytes) -> Option<Bytes> {
        match ReplyKeys::of(name) {
            None => Some(reply),
            Some(keys) => self.reverse_keys(keys, reply),
        }
    }

    /// Rewrites the key names `keys` says `reply` carries to legacy names; `None` when the
    /// reply names an internal key and must not be shown (RANDOMKEY).
    pub fn reverse_keys(&self, keys: ReplyKeys, reply: Bytes) -> Option<Bytes> {
        rename_reply_keys(keys, reply, |key| self.legacy_name(key))
    }
}

/// `reply` with the key names `keys` says it carries renamed by `name_of` (the name to
/// show, `None` for a key not to show); `None` when the reply is one key not to show
/// (RANDOMKEY). Names `name_of` gives back unchanged, or refuses inside an aggregate, stay
/// as they are. The layout and the databases other than 0 show their names so.
pub fn rename_reply_keys(
    keys: ReplyKeys,
    reply: Bytes,
    name_of: impl Fn(&[u8]) -> Option<Bytes>,
) -> Option<Bytes> {
    match keys {
        ReplyKeys::Bulk => match bulk_payload(&reply) {
            Some(key) => name_of(key).map(|shown| bulk_frame(&shown)),
            None => Some(reply),
        },
        ReplyKeys::FirstElement => Some(rename_first_element(reply, &name_of)),
        ReplyKeys::StreamNames => Some(rename_stream_names(reply, &name_of)),
    }
}

fn rename_first_element(reply: Bytes, name_of: &impl Fn(&[u8]) -> Option<Bytes>) -> Bytes {
    let Some(mut elements) = ReplyView::element_frames(&reply) else {
        return reply;
    };
    let Some(first) = elements.next() else {
        return reply;
    };
    let Some(key) = bulk_payload(first) else {
        return reply;
    };
    let Some(shown) = name_of(key).filter(|shown| shown != key) else {
        return reply;
    };
    let shown = bulk_frame(&shown);
    rebuild(&reply, std::iter::once(&shown[..]).chain(elements))
}

/// XREAD/XREADGROUP: RESP2 `*N` of `[name, entries]` pairs; RESP3 `%N` name -> entries.
fn rename_stream_names(reply: Bytes, name_of: &impl Fn(&[u8]) -> Option<Bytes>) -> Bytes {
    if reply.first() == Some(&b'%') {
        let Some(mut parts) = aggregate_elements(&reply) else {
            return reply;
        };
        for pair in parts.chunks_mut(2) {
            if let Some(shown) = bulk_payload(&pair[0]).and_then(name_of) {
                pair[0] = bulk_frame(&shown);
            }
        }
        return rebuild(&reply, &parts);
    }
    let Some(streams) = ReplyView::element_frames(&reply) else {
        return reply;
    };
    let streams: Vec<Bytes> = streams
        .map(|stream| rename_first_element(reply.slice_ref(stream), name_of))
        .collect();
    rebuild(&reply, &streams)
}

/// What a transaction's blocks need from the layout, for the concrete layer that runs them.
impl BlockLayout for ActiveLayout {
    fn script_load_request(&self) -> Bytes {
        ActiveLayout::script_load_request()
    }

    fn reverse_reply(&self, name: &str, reply: Bytes) -> Option<Bytes> {
        ActiveLayout::reverse_reply(self, name, reply)
    }
}

/// Which part of a reply carries key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKeys {
    /// The reply is one key (RANDOMKEY).
    Bulk,
    /// The first element of an array reply is a key (BLPOP, LMPOP, BZPOPMIN...).
    FirstElement,
    /// Stream names (XREAD, XREADGROUP).
    StreamNames,
}

impl ReplyKeys {
    /// Where the replies of command `name` carry key names; `None` when they carry none.
    pub fn of(name: &str) -> Option<ReplyKeys> {
        Some(match name {
            "randomkey" => ReplyKeys::Bulk,
            "blpop" | "brpop" | "blmpop" | "lmpop" | "bzpopmin" | "bzpopmax" | "bzmpop"
            | "zmpop" => ReplyKeys::FirstElement,
            "xread" | "xreadgroup" => ReplyKeys::StreamNames,
            _ => return None,
        })
    }
}

/// The payload of a `$len\r\n...\r\n` frame.
pub(super) fn bulk_payload(frame: &[u8]) -> Option<&[u8]> {
    match ReplyView::parse(frame).ok()? {
        ReplyView::Bulk(payload) => Some(payload),
        _ => None,
    }
}

pub(super) fn bulk_frame(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 16);
    crate::protocol::encode::bulk(&mut out, data);
    out.freeze()
}

/// The element frames of any aggregate (a map's keys and values in turn).
pub(super) fn aggregate_elements(frame: &Bytes) -> Option<Vec<Bytes>> {
    let ReplyView::Aggregate(_, elements) = ReplyView::parse(frame).ok()? else {
        return None;
    };
    Some(
        elements
            .frames()
            .map(|element| frame.slice_ref(element))
            .collect(),
    )
}

/// `original`'s aggregate header followed by `parts`.
pub(super) fn rebuild<P: AsRef<[u8]>>(
    original: &[u8],
    parts: impl IntoIterator<Item = P>,
) -> Bytes {
    let header_end = original
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(0, |at| at + 2);
    let mut out = BytesMut::with_capacity(original.len() + 64);
    out.put_slice(&original[..header_end]);
    for part in parts {
        out.put_slice(part.as_ref());
    }
    out.freeze()
}
