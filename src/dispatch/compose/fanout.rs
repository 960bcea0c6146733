//! Keyless commands about the whole data set, answered over every master as one server
//! would answer them: KEYS and PUBSUB SHARDCHANNELS (concatenated), PUBSUB SHARDNUMSUB
//! (each channel asked of its slot's master), SCAN (one cursor walking every master in
//! turn), DBSIZE and LATENCY RESET (summed), RANDOMKEY (a master that has keys), SLOWLOG
//! (every master's log as one, newest first), LATENCY LATEST/HISTORY (see `monitors`), and
//! admin broadcasts (FLUSHDB, FLUSHALL, CONFIG SET/RESETSTAT,
//! FUNCTION LOAD/DELETE/FLUSH/RESTORE, the KILLs). Which commands fan out, and how their
//! replies combine, follows the request and response policies Redis 7 documents for them
//! (`COMMAND DOCS`' tips).
//!
//! Invariants: masters are always taken in address order from one routing snapshot, so
//! the order is stable across refreshes that do not change the master set; a broadcast
//! reports success only when every master succeeded, and otherwise the first error in
//! that order (the masters that did succeed keep their change: Redis has no cross-node
//! rollback). With a standalone upstream every fan-out is a call to the one node.
//!
//! # SCAN cursor
//!
//! The client sees one `u64` cursor: bits 0..48 hold the current master's own cursor,
//! bits 48..54 a 6-bit fingerprint of that master's address, bits 54..64 its index in
//! the address-sorted master list (so at most [`MAX_SCAN_MASTERS`] masters). Cursor 0
//! starts at master 0; a master's cursor 0 moves on to the next master (at once, in the
//! same call, while the page holds fewer keys than COUNT, so a page is filled across
//! masters); past the last master the cursor is 0 again. Redis's own cursors are reverse-binary bucket indexes
//! of a table that would need 2^48 buckets to reach bit 48, so a node cursor that does
//! not fit is answered with an error rather than truncated.
//!
//! When the master list changes mid-iteration the fingerprint finds the master being
//! scanned at its new index (every master before it in address order was scanned in
//! full, or is new and only owns slots that moved). If that master is gone (its slots
//! moved away, or it failed over to a replica whose table order differs) the iteration
//! restarts from the first master: keys may repeat, which SCAN allows, but none present
//! for the whole iteration is missed. What can be missed: keys of a slot that moved
//! during the iteration from a master not yet scanned to one already scanned.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::join_all;

use crate::backend::BackendError;
use crate::command::FanOut;
use crate::protocol::{encode, AggregateKind, Proto, ReplyView, Request};
use crate::reply::{self, merge};
use crate::route::{key_slot, NodeAddr};

use crate::dispatch::Proxy;

/// Bits of a client SCAN cursor that carry the current master's own cursor.
pub const NODE_CURSOR_BITS: u32 = 48;
/// Bits that carry the fingerprint of the current master's address.
const FINGERPRINT_BITS: u32 = 6;
/// Bits that carry the current master's index in the sorted master list.
const INDEX_BITS: u32 = 64 - NODE_CURSOR_BITS - FINGERPRINT_BITS;
/// The most masters a SCAN can walk (the index must fit its bits).
pub const MAX_SCAN_MASTERS: usize = 1 << INDEX_BITS;

const NODE_CURSOR_MASK: u64 = (1 << NODE_CURSOR_BITS) - 1;
const FINGERPRINT_MASK: u64 = (1 << FINGERPRINT_BITS) - 1;

impl Proxy {
    pub(in crate::dispatch) async fn fanout(
        &self,
        op: FanOut,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        match op {
            FanOut::Keys => self.keys_all(request.raw.clone(), proto).await,
            FanOut::Scan => self.scan_all(&request.args, proto).await,
            FanOut::Sum => {
                self.integers_all(request.raw.clone(), proto, merge::sum_counts)
                    .await
            }
            FanOut::Oldest => {
                self.integers_all(request.raw.clone(), proto, merge::least)
                    .await
            }
            FanOut::SlowlogGet => self.slowlog_all(request, proto).await,
            FanOut::RandomKey => self.random_key(request.raw.clone(), proto).await,
            FanOut::AllOk => {
                let reply = self.broadcast_all_ok(request.raw.clone(), proto).await;
                // FLUSHALL deleted the in-use marker of databases other than 0.
                if request.args[0].eq_ignore_ascii_case(b"flushall") && reply.starts_with(b"+") {
                    self.mark_again_after_flushall().await;
                }
                reply
            }
            FanOut::AllSame => self.broadcast_all_same(request.raw.clone(), proto).await,
            FanOut::AnyOk => self.broadcast_any_ok(request.raw.clone(), proto).await,
            FanOut::ShardNumSub => self.shard_numsub(&request.args[2..], proto).await,
            FanOut::LatencyLatest => self.latency_latest(request.raw.clone(), proto).await,
            FanOut::LatencyHistory => self.latency_history(request.raw.clone(), proto).await,
            FanOut::LatencyHistogram => self.latency_histogram(request.raw.clone(), proto).await,
            FanOut::MemoryStats => self.memory_stats(request.raw.clone(), proto).await,
        }
    }

    /// PUBSUB SHARDNUMSUB over the masters of the channels' slots: one request per channel,
    /// the `channel, count` pairs concatenated in the order asked.
    async fn shard_numsub(&self, channels: &[Bytes], proto: Proto) -> Bytes {
        let slots: Vec<u16> = channels.iter().map(|c| key_slot(c)).collect();
        let frame = |i: usize, out: &mut BytesMut| {
            out.put_slice(&encode::encode_request(&[
                b"PUBSUB",
                b"SHARDNUMSUB",
                &channels[i],
            ]));
        };
        let replies = self
            .upstream
            .forward_each(&slots, frame, channels.len() * 48, proto)
            .await;
        // Redis 7.0 answers a flat array; later versions a map in RESP3. Keep the nodes' form.
        let as_map = replies.first().is_some_and(|r| r.starts_with(b"%"));
        let mut out = BytesMut::new();
        if as_map {
            encode::map_header(&mut out, proto, channels.len());
        } else {
            encode::array_header(&mut out, channels.len() * 2);
        }
        let kind = if as_map {
            AggregateKind::Map
        } else {
            AggregateKind::Array
        };
        for reply in &replies {
            match numsub_pair(reply, kind) {
                Some(pair) => out.put_slice(pair),
                None => return reply.clone(),
            }
        }
        out.freeze()
    }

    /// The masters of the current snapshot in address order, waiting (within the retry
    /// budget) for a first slot map when there is none yet. `Err` is the reply to give.
    pub async fn masters_in_order(&self) -> Result<Vec<NodeAddr>, Bytes> {
        let retry = &self.config.retry;
        let mut attempts = 0;
        loop {
            let mut masters = self.topology.routing().map.masters().to_vec();
            if !masters.is_empty() {
                masters.sort();
                masters.dedup();
                return Ok(masters);
            }
            self.topology.request_refresh();
            if attempts >= retry.attempts {
                return Err(reply::error(reply::text::SLOT_UNSERVED));
            }
            tokio::time::sleep(retry.backoff(attempts)).await;
            attempts += 1;
        }
    }

    /// Sends `request` to the node at `addr` and returns its reply frame. A request that
    /// was never written is retried within the retry budget; a lost reply is never resent.
    pub async fn call_node(&self, addr: &NodeAddr, request: Bytes, proto: Proto) -> Bytes {
        let retry = &self.config.retry;
        let conn = self.topology.node(addr, proto);
        let mut attempts = 0;
        loop {
            match conn.call(request.clone(), false).await {
                Ok(frame) => return frame,
                Err(BackendError::Lost(detail)) => {
                    self.topology.request_refresh();
                    return reply::outcome_unknown(addr, &detail);
                }
                Err(BackendError::NotSent(detail)) => {
                    self.topology.request_refresh();
                    if attempts >= retry.attempts {
                        return reply::unavailable(addr, &detail);
                    }
                    tokio::time::sleep(retry.backoff(attempts)).await;
                    attempts += 1;
                }
            }
        }
    }

    /// Sends `request` to every master in parallel; the replies in address order of the
    /// masters. `Err` when there is no master to send to.
    pub async fn broadcast(&self, request: Bytes, proto: Proto) -> Result<Vec<Bytes>, Bytes> {
        let masters = self.masters_in_order().await?;
        let calls = masters
            .iter()
            .map(|addr| self.call_node(addr, request.clone(), proto));
        Ok(join_all(calls).await)
    }

    /// Broadcasts `request`; `+OK` when every master answered `+OK`, else the first
    /// error (or first unexpected reply) in master order.
    pub async fn broadcast_all_ok(&self, request: Bytes, proto: Proto) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => all_ok(replies),
            Err(error) => error,
        }
    }

    /// Broadcasts `request`; the common reply when every master gave the same one, else
    /// the first error, or an error saying the masters disagree.
    pub async fn broadcast_all_same(&self, request: Bytes, proto: Proto) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => all_same(replies),
            Err(error) => error,
        }
    }

    /// SCRIPT KILL and FUNCTION KILL, each master asked on a connection of its own: the
    /// script to kill was sent on the shared connection, which the node stops reading
    /// while the script runs, so a KILL queued behind it would wait for the script's end.
    async fn broadcast_any_ok(&self, request: Bytes, proto: Proto) -> Bytes {
        let masters = match self.masters_in_order().await {
            Ok(masters) => masters,
            Err(error) => return error,
        };
        let calls = masters.iter().map(|addr| {
            let conn = self.topology.dedicated_once(addr, proto);
            let request = request.clone();
            async move {
                match conn.call(request, false).await {
                    Ok(frame) => frame,
                    Err(BackendError::Lost(detail)) => reply::outcome_unknown(addr, &detail),
                    Err(BackendError::NotSent(detail)) => reply::unavailable(addr, &detail),
                }
            }
        });
        any_ok(join_all(calls).await)
    }

    /// Broadcasts `request`, whose replies are integers, and answers `combine` of them.
    async fn integers_all(
        &self,
        request: Bytes,
        proto: Proto,
        combine: fn(&[Bytes]) -> Bytes,
    ) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => combine(&replies),
            Err(error) => error,
        }
    }

    /// KEYS over every master, one at a time, so memory holds at most one master's reply
    /// plus the output; the merged array, or the first reply that is not an array.
    pub(in crate::dispatch) async fn keys_all(&self, request: Bytes, proto: Proto) -> Bytes {
        let masters = match self.masters_in_order().await {
            Ok(masters) => masters,
            Err(error) => return error,
        };
        let mut body = BytesMut::new();
        let mut count: usize = 0;
        for addr in &masters {
            let frame = self.call_node(addr, request.clone(), proto).await;
            let Some((n, elements)) = aggregate_body(&frame) else {
                return frame;
            };
            count += n;
            body.put_slice(elements);
        }
        let mut out = BytesMut::with_capacity(body.len() + 24);
        encode::array_header(&mut out, count);
        out.put_slice(&body);
        out.freeze()
    }

    async fn random_key(&self, request: Bytes, proto: Proto) -> Bytes {
        let masters = match self.masters_in_order().await {
            Ok(masters) => masters,
            Err(error) => return error,
        };
        // Any start will do; RandomState is seeded per instance from the OS.
        let start = (RandomState::new().hash_one(0u8) as usize) % masters.len();
        let mut last = Bytes::new();
        for i in 0..masters.len() {
            let addr = &masters[(start + i) % masters.len()];
            let frame = self.call_node(addr, request.clone(), proto).await;
            if !is_null(&frame) {
                return frame;
            }
            last = frame;
        }
        last
    }

    async fn scan_all(&self, args: &[Bytes], proto: Proto) -> Bytes {
        let Some(cursor) = parse_cursor(&args[1]) else {
            return reply::error(reply::text::INVALID_CURSOR);
        };
        let masters = match self.masters_in_order().await {
            Ok(masters) => masters,
            Err(error) => return error,
        };
        if masters.len() > MAX_SCAN_MASTERS {
            return reply::error(&reply::refusals::scan_too_many_masters(
                MAX_SCAN_MASTERS,
                masters.len(),
            ));
        }
        let wanted = scan_count(args);
        let (mut index, mut node_cursor) = resume_point(cursor, &masters);
        let mut page = ScanPage::default();
        let next_node_cursor = loop {
            let node_cursor_text = node_cursor.to_string();
            let mut node_args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            node_args[1] = node_cursor_text.as_bytes();
            let frame = self
                .call_node(&masters[index], encode::encode_request(&node_args), proto)
                .await;
            let Some((next_node_cursor, keys)) = scan_reply(&frame) else {
                return frame;
            };
            page.add(&keys);
            // A master whose scan ended before the page holds COUNT keys hands over to
            // the next one in the same call, so a small keyspace is scanned in one call
            // and an empty one answers cursor 0 at once, as on one Redis.
            if next_node_cursor == 0 && page.count < wanted && index + 1 < masters.len() {
                index += 1;
                node_cursor = 0;
                continue;
            }
            break next_node_cursor;
        };
        let Some(next) = next_cursor(index, next_node_cursor, &masters) else {
            return reply::error(&reply::refusals::scan_cursor_too_large(
                &masters[index],
                NODE_CURSOR_BITS,
            ));
        };
        let next_text = next.to_string();
        let mut out = BytesMut::with_capacity(page.body.len() + 48);
        encode::array_header(&mut out, 2);
        encode::bulk(&mut out, next_text.as_bytes());
        encode::array_header(&mut out, page.count);
        out.put_slice(&page.body);
        out.freeze()
    }
}

/// The keys of one SCAN call, gathered from one master or several.
#[derive(Default)]
struct ScanPage {
    count: usize,
    body: BytesMut,
}

impl ScanPage {
    /// Adds the keys of a node's key array (checked by `scan_reply`).
    fn add(&mut self, keys: &Bytes) {
        if let Some((count, body)) = aggregate_body(keys) {
            self.count += count;
            self.body.extend_from_slice(body);
        }
    }
}

/// SCAN's COUNT (Redis's default, 10, when not given or not a positive number: the
/// masters answer a wrong one with their own error).
fn scan_count(args: &[Bytes]) -> usize {
    args.iter()
        .skip(2)
        .zip(args.iter().skip(3))
        .step_by(2)
        .find(|(option, _)| option.eq_ignore_ascii_case(b"count"))
        .and_then(|(_, value)| std::str::from_utf8(value).ok()?.parse::<usize>().ok())
        .filter(|&count| count > 0)
        .unwrap_or(10)
}

/// `+OK` when every reply is `+OK`; else the first one that is not.
fn all_ok(replies: Vec<Bytes>) -> Bytes {
    if let Some(error) = merge::first_error(&replies) {
        return error.clone();
    }
    match replies.into_iter().find(|r| !r.starts_with(b"+OK\r\n")) {
        Some(other) => other,
        None => Bytes::from_static(b"+OK\r\n"),
    }
}

/// The common reply of every master, the first error, or a disagreement error.
/// `+OK` when any master killed something; else the first reply that says more than
/// NOTBUSY (UNKILLABLE: a script that wrote, an unreachable master), else NOTBUSY.
fn any_ok(replies: Vec<Bytes>) -> Bytes {
    if replies.iter().any(|r| r.starts_with(b"+OK\r\n")) {
        return Bytes::from_static(b"+OK\r\n");
    }
    let telling = replies.iter().position(|r| !r.starts_with(b"-NOTBUSY"));
    replies
        .into_iter()
        .nth(telling.unwrap_or(0))
        .unwrap_or_else(|| reply::error(reply::text::SLOT_UNSERVED))
}

fn all_same(replies: Vec<Bytes>) -> Bytes {
    if let Some(error) = merge::first_error(&replies) {
        return error.clone();
    }
    let mut replies = replies.into_iter();
    let Some(first) = replies.next() else {
        return reply::error(reply::text::SLOT_UNSERVED);
    };
    if replies.all(|r| r == first) {
        first
    } else {
        reply::error(reply::text::MASTERS_DISAGREE)
    }
}

/// The element count and the element bytes (everything after the header) of an array
/// or set reply.
fn aggregate_body(frame: &[u8]) -> Option<(usize, &[u8])> {
    // A push is never a node's answer to a command: not one to merge.
    if !matches!(frame.first(), Some(b'*' | b'~')) {
        return None;
    }
    let elements = ReplyView::element_frames(frame)?;
    Some((elements.len(), elements.joined()))
}

/// The `channel, count` pair of one channel's SHARDNUMSUB reply, a map of one pair or an
/// array of two elements as `kind` says; `None` for any other reply.
fn numsub_pair(reply: &[u8], kind: AggregateKind) -> Option<&[u8]> {
    // Read from the first byte: a reply behind an attribute is passed on as it is.
    if !matches!(reply.first(), Some(b'%' | b'*')) {
        return None;
    }
    match ReplyView::parse(reply).ok()? {
        ReplyView::Aggregate(read, elements) if read == kind && elements.len() == 2 => {
            Some(elements.frames().joined())
        }
        _ => None,
    }
}

fn is_null(frame: &[u8]) -> bool {
    frame == b"$-1\r\n" || frame == b"_\r\n" || frame == b"*-1\r\n"
}

/// A client cursor as Redis 7.0 reads it (C's `strtoul`, refusing leading space and
/// overflow): an optional sign, decimal digits; a negative value wraps, and an empty
/// text is cursor 0.
fn parse_cursor(text: &[u8]) -> Option<u64> {
    let (negative, digits) = match text.first() {
        None => return Some(0),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// A 6-bit fingerprint of a master's address (FNV-1a, folded).
fn fingerprint(addr: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in addr.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    (hash ^ (hash >> 32) ^ (hash >> 16)) & FINGERPRINT_MASK
}

/// The client cursor for master `index` of `masters` at its own cursor `node_cursor`;
/// `None` when the node cursor does not fit its bits or the index does not fit its.
pub fn encode_cursor(index: usize, node_cursor: u64, masters: &[NodeAddr]) -> Option<u64> {
    if node_cursor > NODE_CURSOR_MASK || index >= MAX_SCAN_MASTERS {
        return None;
    }
    let print = fingerprint(masters.get(index)?);
    Some(
        ((index as u64) << (NODE_CURSOR_BITS + FINGERPRINT_BITS))
            | (print << NODE_CURSOR_BITS)
            | node_cursor,
    )
}

/// Where a client cursor resumes in `masters` (non-empty): the master's index and its own
/// cursor. See the module docs for what happens when the master list changed.
pub fn resume_point(cursor: u64, masters: &[NodeAddr]) -> (usize, u64) {
    if cursor == 0 {
        return (0, 0);
    }
    let node_cursor = cursor & NODE_CURSOR_MASK;
    let print = (cursor >> NODE_CURSOR_BITS) & FINGERPRINT_MASK;
    let index = (cursor >> (NODE_CURSOR_BITS + FINGERPRINT_BITS)) as usize;
    if masters.get(index).is_some_and(|m| fingerprint(m) == print) {
        return (index, node_cursor);
    }
    // The list changed: find the master by its fingerprint; unless exactly one master
    // has it, start over rather than resume a cursor on the wrong node.
    let mut found = masters
        .iter()
        .enumerate()
        .filter(|(_, m)| fingerprint(m) == print);
    match (found.next(), found.next()) {
        (Some((at, _)), None) => (at, node_cursor),
        _ => (0, 0),
    }
}

/// The client cursor after master `index` answered `node_cursor`: the same master, the
/// next one at its start, or 0 after the last. `None` when the node cursor does not fit.
pub fn next_cursor(index: usize, node_cursor: u64, masters: &[NodeAddr]) -> Option<u64> {
    if node_cursor != 0 {
        return encode_cursor(index, node_cursor, masters);
    }
    if index + 1 >= masters.len() {
        return Some(0);
    }
    encode_cursor(index + 1, 0, masters)
}

/// A node's SCAN reply: its next cursor and the raw frame of its key array.
fn scan_reply(frame: &Bytes) -> Option<(u64, Bytes)> {
    let [cursor_frame, keys] = ReplyView::element_frames(frame)?.exactly::<2>()?;
    let keys = frame.slice_ref(keys);
    aggregate_body(&keys)?;
    let ReplyView::Bulk(text) = ReplyView::parse(cursor_frame).ok()? else {
        return None;
    };
    Some((parse_cursor(text)?, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masters(names: &[&str]) -> Vec<NodeAddr> {
        names.iter().map(|n| NodeAddr::from(*n)).collect()
    }

    #[test]
    fn node_cursors_up_to_2_pow_48_round_trip_for_every_index() {
        let list: Vec<NodeAddr> = (0..MAX_SCAN_MASTERS)
            .map(|i| NodeAddr::from(format!("10.0.{}.{}:7000", i / 256, i % 256)))
            .collect();
        for index in [0, 1, 2, 511, MAX_SCAN_MASTERS - 1] {
            for node_cursor in [1u64, 12345, (1 << 47) + 3, (1 << 48) - 1] {
                let cursor = encode_cursor(index, node_cursor, &list).expect("fits");
                assert_eq!(resume_point(cursor, &list), (index, node_cursor));
            }
        }
        assert_eq!(encode_cursor(0, 1 << 48, &list), None);
        assert_eq!(encode_cursor(MAX_SCAN_MASTERS, 1, &list), None);
    }

    #[test]
    fn walk_moves_to_next_master_and_ends_at_zero() {
        let list = masters(&["a:1", "b:1", "c:1"]);
        assert_eq!(resume_point(0, &list), (0, 0));
        let second = next_cursor(0, 0, &list).unwrap();
        assert_ne!(second, 0);
        assert_eq!(resume_point(second, &list), (1, 0));
        assert_eq!(next_cursor(2, 0, &list), Some(0));
        let mid = next_cursor(2, 77, &list).unwrap();
        assert_eq!(resume_point(mid, &list), (2, 77));
    }

    #[test]
    fn resumes_on_the_same_master_after_the_list_changes() {
        let before = masters(&["b:1", "d:1", "f:1"]);
        let cursor = encode_cursor(1, 99, &before).unwrap();
        // A new master sorts first: "d:1" is now at index 2.
        let grown = masters(&["a:1", "b:1", "d:1", "f:1"]);
        let (index, node_cursor) = resume_point(cursor, &grown);
        if fingerprint("a:1") != fingerprint("d:1") && fingerprint("b:1") != fingerprint("d:1") {
            assert_eq!((index, node_cursor), (2, 99));
        }
        // The master being scanned is gone: start over, never resume on another node.
        let shrunk = masters(&["b:1", "f:1"]);
        let (index, node_cursor) = resume_point(cursor, &shrunk);
        assert!(
            (index, node_cursor) == (0, 0)
                || shrunk[index].as_ref() != "d:1"
                    && fingerprint(&shrunk[index]) == fingerprint("d:1"),
        );
    }

    #[test]
    fn cursor_text_is_an_unsigned_integer() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b" 1"), None);
        assert_eq!(parse_cursor(b"1x"), None);
    }

    #[test]
    fn scan_count_reads_the_count_option_or_is_redis_default() {
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        assert_eq!(scan_count(&args(&["SCAN", "0"])), 10);
        assert_eq!(scan_count(&args(&["SCAN", "0", "count", "250"])), 250);
        assert_eq!(
            scan_count(&args(&["SCAN", "0", "MATCH", "count", "COUNT", "3"])),
            3
        );
        assert_eq!(
            scan_count(&args(&["SCAN", "0", "TYPE", "string", "COUNT", "7"])),
            7
        );
        assert_eq!(scan_count(&args(&["SCAN", "0", "COUNT", "0"])), 10);
        assert_eq!(scan_count(&args(&["SCAN", "0", "COUNT"])), 10);
    }

    #[test]
    fn scan_reply_splits_cursor_and_keys() {
        let frame = Bytes::from_static(b"*2\r\n$2\r\n17\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        let (cursor, keys) = scan_reply(&frame).unwrap();
        assert_eq!(cursor, 17);
        assert_eq!(&keys[..], b"*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert!(scan_reply(&Bytes::from_static(b"-ERR x\r\n")).is_none());
        let not_a_bulk_cursor = Bytes::from_static(b"*2\r\n:17\r\n*0\r\n");
        assert!(scan_reply(&not_a_bulk_cursor).is_none());
        let keys_not_an_array = Bytes::from_static(b"*2\r\n$1\r\n0\r\n$1\r\na\r\n");
        assert!(scan_reply(&keys_not_an_array).is_none());
    }

    #[test]
    fn key_arrays_and_numsub_pairs_are_read_from_their_header() {
        assert_eq!(
            aggregate_body(b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            Some((2, &b"$1\r\na\r\n$1\r\nb\r\n"[..]))
        );
        assert_eq!(
            aggregate_body(b"~1\r\n$1\r\na\r\n"),
            Some((1, &b"$1\r\na\r\n"[..]))
        );
        assert_eq!(aggregate_body(b"*0\r\n"), Some((0, &b""[..])));
        for other in [
            &b"*-1\r\n"[..],
            b">1\r\n$1\r\na\r\n",
            b"%1\r\n$1\r\na\r\n:1\r\n",
            b"-ERR x\r\n",
        ] {
            assert_eq!(aggregate_body(other), None, "{other:?}");
        }
        let pair = &b"$2\r\nch\r\n:3\r\n"[..];
        let map = b"%1\r\n$2\r\nch\r\n:3\r\n";
        let array = b"*2\r\n$2\r\nch\r\n:3\r\n";
        assert_eq!(numsub_pair(map, AggregateKind::Map), Some(pair));
        assert_eq!(numsub_pair(array, AggregateKind::Array), Some(pair));
        assert_eq!(numsub_pair(map, AggregateKind::Array), None);
        assert_eq!(numsub_pair(array, AggregateKind::Map), None);
        assert_eq!(numsub_pair(b"*0\r\n", AggregateKind::Array), None);
        assert_eq!(numsub_pair(b"-ERR x\r\n", AggregateKind::Array), None);
    }

    #[test]
    fn merges() {
        let ok = || Bytes::from_static(b"+OK\r\n");
        assert_eq!(all_ok(vec![ok(), ok()]), ok());
        assert_eq!(
            all_ok(vec![ok(), Bytes::from_static(b"-ERR no\r\n")]),
            Bytes::from_static(b"-ERR no\r\n")
        );
        let name = || Bytes::from_static(b"$3\r\nlib\r\n");
        assert_eq!(all_same(vec![name(), name()]), name());
        assert!(all_same(vec![name(), Bytes::from_static(b"$1\r\nx\r\n")]).starts_with(b"-ERR"));
    }

    #[test]
    fn a_kill_is_ok_when_any_master_killed_and_names_the_telling_error_otherwise() {
        let ok = || Bytes::from_static(b"+OK\r\n");
        let notbusy = || Bytes::from_static(b"-NOTBUSY No scripts in execution right now.\r\n");
        let unkillable = || {
            Bytes::from_static(b"-UNKILLABLE Sorry the script already executed write commands\r\n")
        };
        assert_eq!(any_ok(vec![notbusy(), ok(), unkillable()]), ok());
        assert_eq!(
            any_ok(vec![notbusy(), unkillable(), notbusy()]),
            unkillable()
        );
        assert_eq!(any_ok(vec![notbusy(), notbusy()]), notbusy());
    }
}
