//! XREAD whose streams span slots, with and without `BLOCK` (`cross_slot.reads` for the
//! plain form, `cross_slot.blocking` for the blocking one). Pure: what to send to each
//! stream's master and what the replies mean; the planner (`dispatch::crossslot::streams`)
//! does the IO.
//!
//! # Design
//!
//! XREAD takes nothing, so unlike the multi-key pops (`super::blocking`) nothing can be
//! read twice or lost; what is to get right is which entries count as new.
//!
//! 1. **Probe** every stream at once, each on its master: `XREAD [COUNT n] STREAMS key id`,
//!    or, for a stream whose ID is `$` ("what arrives from now on"), its last entry
//!    (`XREVRANGE key + - COUNT 1`), whose ID (or `0-0` for an empty or missing stream)
//!    stands for `$` from then on. The first error in stream order is the reply, as one
//!    Redis checks each stream's type and then its ID in order before it serves any.
//! 2. Every stream with entries after its ID is in the reply, in the client's order, as
//!    one Redis serves them (RESP2 `[[key, entries]...]`, RESP3 a map). When none has any,
//!    plain XREAD answers the null array.
//! 3. **Wait** (BLOCK) on every stream at once, each on a connection of its own:
//!    `XREAD [COUNT n] BLOCK ms STREAMS key id` with the IDs the probe fixed and `ms` what
//!    is left of the timeout. The first wait to answer is the reply as the node gave it
//!    (the stream that got entries, a null at the timeout's end, or an error); the others
//!    are ended by closing their connections. Over more than [`MAX_WAITS`] streams the
//!    probe is repeated instead, every [`POLL_MIN`]..[`POLL_MAX`], with a wait on the first
//!    stream in between, so one client cannot open connections without bound.
//!
//! # Guarantee
//!
//! Every entry the client gets is one Redis would give for the IDs it sent; `$` means the
//! last entry when the probe ran, which only differs from Redis's last generated ID after
//! an `XSETID` lowered it. Weaker than one Redis: the probe is not one snapshot of the
//! streams (like a split MGET), and a blocked client gets the first stream that a node
//! reports, which for entries added to two streams at nearly the same moment may be
//! either. Over more than [`MAX_WAITS`] streams, entries added to other than the first
//! stream reach the client up to [`POLL_MAX`] later, possibly together with others'.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, parse_i64, Proto, ReplyView};
use crate::reply::{self, crossslot as text};

use super::blocking::Waited;
use super::moves::request_frame;

pub use super::blocking::{POLL_MAX, POLL_MIN};

/// The most streams of one XREAD waited on at once, one connection each.
pub const MAX_WAITS: usize = 16;

/// `XREAD` with `GROUP` or `NOACK`, which only XREADGROUP takes.
fn group_only(option: &str) -> String {
    format!("ERR The {option} option is only supported by XREADGROUP. You called XREAD instead.")
}
/// STREAMS followed by an odd number of arguments (Redis 7.0's wording).
const UNBALANCED: &str =
    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.";

/// A parsed XREAD over streams in several slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRead {
    /// The streams, in the client's order.
    pub keys: Vec<Bytes>,
    /// Each stream's ID as the client gave it; `$` until a probe fixes it.
    ids: Vec<Bytes>,
    /// `COUNT n` (`None`: no COUNT, or one of 0 or less, which Redis reads as no limit).
    count: Option<i64>,
    /// `None` without `BLOCK`; `Some(None)` for `BLOCK 0` (for ever).
    pub block: Option<Option<Duration>>,
}

/// What one probe of every stream found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// The client's reply: the streams with entries, or the first error in stream order.
    Reply(Bytes),
    /// No stream has entries after its ID; the IDs to wait with (`$` fixed).
    Empty(Vec<Bytes>),
}

/// Parses `args` (`args[0]` the command's name) when it is XREAD; `Err` is the reply Redis
/// gives to such arguments before it looks at a stream.
pub fn parse_stream_read(args: &[Bytes]) -> Option<Result<StreamRead, Bytes>> {
    if !args.first()?.eq_ignore_ascii_case(b"xread") {
        return None;
    }
    Some(parse_options(args))
}

/// XREAD's options in Redis's order: each as it comes (a repeated one counts last), up to
/// STREAMS, whose arguments must pair up.
fn parse_options(args: &[Bytes]) -> Result<StreamRead, Bytes> {
    let error = |text: &str| reply::error(text);
    let (mut count, mut block) = (None, None);
    let mut at = 1;
    while at < args.len() {
        let option = &args[at];
        let value = args.get(at + 1);
        match value {
            Some(value) if option.eq_ignore_ascii_case(b"block") => {
                block = Some(parse_block(value)?);
            }
            Some(value) if option.eq_ignore_ascii_case(b"count") => {
                let n = parse_i64(value).ok_or_else(|| error(text::NOT_INTEGER))?;
                count = (n > 0).then_some(n);
            }
            Some(_) if option.eq_ignore_ascii_case(b"streams") => {
                let streams = &args[at + 1..];
                if streams.len() % 2 != 0 {
                    return Err(error(UNBALANCED));
                }
                let (keys, ids) = streams.split_at(streams.len() / 2);
                return Ok(StreamRead {
                    keys: keys.to_vec(),
                    ids: ids.to_vec(),
                    count,
                    block,
                });
            }
            Some(_) if option.eq_ignore_ascii_case(b"group") && args.len() - at > 2 => {
                return Err(error(&group_only("GROUP")));
            }
            _ if option.eq_ignore_ascii_case(b"noack") => {
                return Err(error(&group_only("NOACK")));
            }
            _ => return Err(error(text::SYNTAX)),
        }
        at += 2;
    }
    Err(error(text::SYNTAX))
}

/// BLOCK's milliseconds as Redis reads them: an integer, not negative, 0 for ever.
fn parse_block(arg: &[u8]) -> Result<Option<Duration>, Bytes> {
    let millis =
        parse_i64(arg).ok_or_else(|| reply::error(reply::connection::TIMEOUT_NOT_INTEGER))?;
    match u64::try_from(millis) {
        Err(_) => Err(reply::error(reply::connection::TIMEOUT_NEGATIVE)),
        Ok(0) => Ok(None),
        Ok(millis) => Ok(Some(Duration::from_millis(millis))),
    }
}

impl StreamRead {
    /// The IDs as the client gave them, for the first probe.
    pub fn client_ids(&self) -> &[Bytes] {
        &self.ids
    }

    /// The probe of stream `n` with `ids`: its entries after its ID, or its last entry
    /// when the ID is still `$`.
    pub fn probe(&self, n: usize, ids: &[Bytes]) -> Bytes {
        let key = self.keys[n].clone();
        if ids[n].as_ref() == b"$" {
            return request_frame(&[
                Bytes::from_static(b"XREVRANGE"),
                key,
                Bytes::from_static(b"+"),
                Bytes::from_static(b"-"),
                Bytes::from_static(b"COUNT"),
                Bytes::from_static(b"1"),
            ]);
        }
        self.read(key, ids[n].clone(), None)
    }

    /// The wait on stream `n` with `ids` (as the probe fixed them) for at most `span`
    /// (`None`: no end).
    pub fn wait(&self, n: usize, ids: &[Bytes], span: Option<Duration>) -> Bytes {
        // A wait of less than a millisecond would be BLOCK 0, which never ends.
        let millis = span.map_or(0, |span| span.as_millis().max(1));
        self.read(self.keys[n].clone(), ids[n].clone(), Some(millis))
    }

    /// `XREAD [COUNT n] [BLOCK ms] STREAMS key id`.
    fn read(&self, key: Bytes, id: Bytes, block: Option<u128>) -> Bytes {
        let mut args = vec![Bytes::from_static(b"XREAD")];
        if let Some(count) = self.count {
            args.push(Bytes::from_static(b"COUNT"));
            args.push(Bytes::from(count.to_string()));
        }
        if let Some(millis) = block {
            args.push(Bytes::from_static(b"BLOCK"));
            args.push(Bytes::from(millis.to_string()));
        }
        args.extend([Bytes::from_static(b"STREAMS"), key, id]);
        request_frame(&args)
    }

    /// What the probes' `replies` (one per stream, sent with `ids` in `proto`) mean.
    pub fn probed(&self, ids: &[Bytes], replies: &[Bytes], proto: Proto) -> Probed {
        let mut fixed = ids.to_vec();
        let mut served: Vec<&[u8]> = Vec::new();
        for (n, reply) in replies.iter().enumerate() {
            if matches!(reply.first(), Some(b'-' | b'!')) {
                return Probed::Reply(reply.clone());
            }
            if ids[n].as_ref() == b"$" {
                match last_id(reply) {
                    Some(id) => fixed[n] = id,
                    None => return Probed::Reply(reply::error(text::UNEXPECTED_PROBE)),
                }
                continue;
            }
            match served_stream(reply) {
                Some(Some(stream)) => served.push(stream),
                Some(None) => {}
                None => return Probed::Reply(reply::error(text::UNEXPECTED_PROBE)),
            }
        }
        if served.is_empty() {
            return Probed::Empty(fixed);
        }
        let size = served.iter().map(|s| s.len()).sum::<usize>() + 16;
        let mut out = BytesMut::with_capacity(size);
        match proto {
            Proto::Resp2 => encode::array_header(&mut out, served.len()),
            Proto::Resp3 => encode::map_header(&mut out, proto, served.len()),
        }
        for stream in served {
            out.extend_from_slice(stream);
        }
        Probed::Reply(out.freeze())
    }

    /// What a wait's `reply` (sent in the client's protocol) means; `unblocked` when a
    /// `CLIENT UNBLOCK` was sent for the client meanwhile. A null ends a wait for the
    /// client's whole timeout; a poll's wait (`poll`) ends with a null at the end of its
    /// interval too, and only the unblock makes it the client's reply.
    pub fn waited(reply: &Bytes, unblocked: bool, poll: bool) -> Waited {
        match reply.as_ref() {
            b"*-1\r\n" | b"_\r\n" if poll && !unblocked => Waited::Probe,
            _ => Waited::Reply(reply.clone()),
        }
    }
}

/// One stream's XREAD reply (`*1` / `%1` of `key, entries`): `Some(Some(element))` with the
/// bytes that follow that header (RESP2 `[key, entries]`, RESP3 `key entries`),
/// `Some(None)` for the null of no entries, `None` for anything else.
fn served_stream(reply: &[u8]) -> Option<Option<&[u8]>> {
    match reply {
        b"*-1\r\n" | b"_\r\n" => Some(None),
        _ => reply
            .strip_prefix(b"*1\r\n")
            .or_else(|| reply.strip_prefix(b"%1\r\n"))
            .filter(|rest| !rest.is_empty())
            .map(Some),
    }
}

/// The ID of the entry in an `XREVRANGE ... COUNT 1` reply, `0-0` when it is empty;
/// `None` when the reply is not such a list.
fn last_id(reply: &[u8]) -> Option<Bytes> {
    let ReplyView::Aggregate(_, mut entries) = ReplyView::parse(reply).ok()? else {
        return None;
    };
    let Some(entry) = entries.next() else {
        return Some(Bytes::from_static(b"0-0"));
    };
    let id = entry.elements()?.next()?.text()?;
    Some(Bytes::copy_from_slice(id))
}

#[cfg(test)]
#[path = "streams_tests.rs"]
mod tests;
