//! SCAN over every master as one server's SCAN: one client cursor walks the masters in
//! address order (see `fanout` for how the masters are listed and called).
//!
//! # SCAN cursor
//!
//! The client sees one `u64` cursor: bits 0..48 hold the current master's own cursor,
//! bits 48..54 a 6-bit fingerprint of that master's address, bits 54..64 its index in
//! the address-sorted master list (so at most [`MAX_SCAN_MASTERS`] masters). Cursor 0
//! starts at master 0; a master's cursor 0 moves on to the next master (at once, in the
//! same call, while the page holds fewer keys than COUNT, so a page is filled across
//! masters); past the last master the cursor is 0 again. Redis's own cursors are
//! reverse-binary bucket indexes of a table that would need 2^48 buckets to reach bit 48,
//! so a node cursor that does not fit is answered with an error rather than truncated.
//!
//! When the master list changes mid-iteration the fingerprint finds the master being
//! scanned at its new index (every master before it in address order was scanned in
//! full, or is new and only owns slots that moved). If that master is gone (its slots
//! moved away, or it failed over to a replica whose table order differs) the iteration
//! restarts from the first master: keys may repeat, which SCAN allows, but none present
//! for the whole iteration is missed. What can be missed: keys of a slot that moved
//! during the iteration from a master not yet scanned to one already scanned.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::{encode, Proto, ReplyView};
use crate::reply;
use crate::route::NodeAddr;

use super::fanout::aggregate_body;
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
    /// SCAN `cursor` [MATCH] [COUNT] [TYPE] over every master in turn (cursor: see the
    /// module doc).
    pub(super) async fn scan_all(&self, args: &[Bytes], proto: Proto) -> Bytes {
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
    /// Adds the keys of a node's key array (checked by `scan_reply`), records left out.
    fn add(&mut self, keys: &Bytes) {
        let keys = super::hidden::drop_records(keys.clone());
        if let Some((count, body)) = aggregate_body(&keys) {
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

/// A client cursor as Redis 7.0 reads it (C's `strtoul`, refusing leading space and
/// overflow): an optional sign, decimal digits; a negative value wraps, and an empty
/// text is cursor 0.
pub(super) fn parse_cursor(text: &[u8]) -> Option<u64> {
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
}
