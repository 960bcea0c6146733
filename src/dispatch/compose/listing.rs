//! KEYS and SCAN under a layout: legacy names out, internal keys (indices, markers) never.
//!
//! A listing follows [`crate::rewrite::ListingPlan`]: index-backed families are read from
//! their indices (`lua/index_list.lua` prunes expired entries by the server clock and
//! returns the members), which go through the normal redirect path, so a listing stays
//! exact while slots move. Whatever the indices cannot serve is found by a fan-out over
//! every master with a broad cluster-side pattern; each key found is mapped back to its
//! legacy name (or dropped when internal or already served by an index) and filtered by
//! the client's glob. KEYS removes duplicates.
//!
//! # SCAN cursor
//!
//! The cursor is a u64 (decimal, as Redis's): the low 12 bits are the phase, the bits
//! above hold a node's own SCAN cursor.
//!
//! - phase `0`: the start (same as phase `1`).
//! - phase `1 + i` (`i < 2047`): the index phase; the call reads the whole index `i` of
//!   the plan's index keys (in plan order) and moves to `i + 1`. A whole index per call
//!   keeps SCAN's guarantee (every record present for the whole scan is returned)
//!   without rank offsets, which shift when entries are removed.
//! - phase `2048 + j`: the scan phase on target `j` = pattern `j / masters`, master
//!   `j % masters` (masters sorted by address); the node cursor is the high bits.
//!
//! A scan-phase cursor assumes the same set of masters between calls; a node cursor is
//! below its table size, so cursors stay under 2^53 (safe for JavaScript clients) for
//! tables below 2^41 buckets.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;

use crate::protocol::encode::{self, encode_request};
use crate::protocol::{Proto, ReplyView};
use crate::reply;
use crate::rewrite::{Forward, ListingPlan};
use crate::route::key_slot;

use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::{Proxy, Target};

/// The index read script (see its header).
pub const LIST_SCRIPT: &str = include_str!("../../../lua/index_list.lua");

const PHASE_BITS: u32 = 12;
const PHASE_MASK: u64 = (1 << PHASE_BITS) - 1;
const SCAN_PHASE: u64 = 2048;

/// A decoded listing SCAN cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingCursor {
    /// Read index number `.0` of the plan next.
    Index(usize),
    /// Scan target `target` (pattern and master) from node cursor `node`.
    Scan {
        /// `pattern * masters + master`.
        target: usize,
        /// The node's SCAN cursor.
        node: u64,
    },
}

impl ListingCursor {
    /// Decodes a client cursor; `None` when it is not a number.
    pub fn decode(text: &[u8]) -> Option<ListingCursor> {
        let value: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
        let phase = value & PHASE_MASK;
        let node = value >> PHASE_BITS;
        Some(if phase >= SCAN_PHASE {
            ListingCursor::Scan {
                target: (phase - SCAN_PHASE) as usize,
                node,
            }
        } else {
            ListingCursor::Index(phase.saturating_sub(1) as usize)
        })
    }

    /// Encodes the cursor; `None` when it does not fit (too many indices or targets, or a
    /// node cursor wider than 52 bits).
    pub fn encode(self) -> Option<u64> {
        match self {
            ListingCursor::Index(at) => {
                let phase = u64::try_from(at).ok()?.checked_add(1)?;
                (phase < SCAN_PHASE).then_some(phase)
            }
            ListingCursor::Scan { target, node } => {
                let phase = SCAN_PHASE.checked_add(u64::try_from(target).ok()?)?;
                if phase > PHASE_MASK || node >> (64 - PHASE_BITS) != 0 {
                    return None;
                }
                Some(node << PHASE_BITS | phase)
            }
        }
    }
}

/// `(cursor, keys)` of a SCAN reply.
pub fn parse_scan_reply(reply: &Bytes) -> Option<(Bytes, Vec<Bytes>)> {
    let [cursor, keys] = ReplyView::element_frames(reply)?.exactly::<2>()?;
    let cursor = bulk(reply, cursor)?;
    let keys = bulks(reply, keys)?;
    Some((cursor, keys))
}

/// The payload of `element`, a bulk string frame inside `reply`, as a slice of `reply`.
fn bulk(reply: &Bytes, element: &[u8]) -> Option<Bytes> {
    match ReplyView::parse(element).ok()? {
        ReplyView::Bulk(payload) => Some(reply.slice_ref(payload)),
        _ => None,
    }
}

/// The payloads of `array`, an array of bulk strings inside `reply` (or `reply` itself),
/// as slices of `reply`; `None` when it is not such an array.
pub(super) fn bulks(reply: &Bytes, array: &[u8]) -> Option<Vec<Bytes>> {
    ReplyView::element_frames(array)?
        .map(|element| bulk(reply, element))
        .collect()
}

pub(super) fn keys_frame(keys: &[Bytes]) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, keys.len());
    for key in keys {
        encode::bulk(&mut out, key);
    }
    out.freeze()
}

/// SCAN's options after the cursor.
pub(super) struct ScanOptions {
    pattern: Bytes,
    count: Bytes,
    kind: Option<Bytes>,
}

pub(super) fn scan_options(args: &[Bytes]) -> Result<ScanOptions, Bytes> {
    let mut options = ScanOptions {
        pattern: Bytes::from_static(b"*"),
        count: Bytes::from_static(b"10"),
        kind: None,
    };
    let mut at = 2;
    while at < args.len() {
        let value = args
            .get(at + 1)
            .cloned()
            .ok_or_else(|| reply::error(reply::text::SYNTAX))?;
        let option = &args[at];
        if option.eq_ignore_ascii_case(b"match") {
            options.pattern = value;
        } else if option.eq_ignore_ascii_case(b"count") {
            match std::str::from_utf8(&value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(n) if n >= 1 => options.count = value,
                Some(_) => return Err(reply::error(reply::text::SYNTAX)),
                None => return Err(reply::error(reply::text::NOT_AN_INTEGER)),
            }
        } else if option.eq_ignore_ascii_case(b"type") {
            options.kind = Some(value);
        } else {
            return Err(reply::error(reply::text::SYNTAX));
        }
        at += 2;
    }
    Ok(options)
}

impl Proxy {
    /// The masters, sorted, so a scan-phase cursor names the same node between calls.
    fn sorted_masters(&self) -> Vec<String> {
        let mut masters = self.master_addrs();
        masters.sort();
        masters
    }

    /// Reads (and prunes) one index: its members, or the error reply.
    async fn read_index(&self, index_key: &Bytes) -> Result<Vec<Bytes>, Bytes> {
        let call = encode_request(&[b"EVAL", LIST_SCRIPT.as_bytes(), b"1", index_key]);
        let reply = self
            .upstream
            .forward(Target::Slot(key_slot(index_key)), call, Proto::Resp2)
            .await;
        bulks(&reply, &reply).ok_or(reply)
    }

    /// The legacy names of `plan`'s index `index_key` matching the glob (and `kind`).
    async fn listed_from_index(
        &self,
        active: &ActiveLayout,
        plan: &ListingPlan,
        index_key: &Bytes,
        kind: Option<&Bytes>,
    ) -> Result<Vec<Bytes>, Bytes> {
        let members = self.read_index(index_key).await?;
        let names: Vec<Bytes> = members
            .iter()
            .filter_map(|member| plan.legacy_from_index(&active.layout, index_key, member))
            .collect();
        match kind {
            None => Ok(names),
            Some(kind) => Ok(self.filter_type(active, names, kind).await),
        }
    }

    /// Keeps the legacy names whose record has type `kind` (SCAN ... TYPE).
    async fn filter_type(
        &self,
        active: &ActiveLayout,
        names: Vec<Bytes>,
        kind: &Bytes,
    ) -> Vec<Bytes> {
        let checks = names.iter().map(|name| async move {
            let cluster = match active.layout.forward(name) {
                Forward::Rewritten(rewritten) => rewritten.key,
                _ => name.clone(),
            };
            let reply = self
                .upstream.forward(
                    Target::Slot(key_slot(&cluster)),
                    encode_request(&[b"TYPE", &cluster]),
                    Proto::Resp2,
                )
                .await;
            matches!(ReplyView::parse(&reply), Ok(ReplyView::Simple(t)) if t.eq_ignore_ascii_case(kind))
        });
        let keep = join_all(checks).await;
        names
            .into_iter()
            .zip(keep)
            .filter_map(|(name, keep)| keep.then_some(name))
            .collect()
    }

    /// KEYS `pattern` with legacy names.
    pub(in crate::dispatch) async fn layout_keys(
        &self,
        active: &ActiveLayout,
        pattern: &Bytes,
        _proto: Proto,
    ) -> Bytes {
        let plan = active.layout.listing_plan(pattern);
        let mut seen: HashSet<Bytes> = HashSet::new();
        let mut listed: Vec<Bytes> = Vec::new();
        let index_keys: Vec<&Bytes> = plan
            .index_reads
            .iter()
            .flat_map(|read| read.index_keys.iter())
            .collect();
        let reads = index_keys
            .iter()
            .map(|key| self.listed_from_index(active, &plan, key, None));
        for names in join_all(reads).await {
            match names {
                Ok(names) => {
                    for name in names {
                        if seen.insert(name.clone()) {
                            listed.push(name);
                        }
                    }
                }
                Err(reply) => return reply,
            }
        }
        for found in self.keys_on_all_masters(&plan.scan_patterns).await {
            match found {
                Ok(keys) => {
                    for key in keys {
                        if let Some(name) = plan.legacy_from_scanned(&active.layout, &key) {
                            if seen.insert(name.clone()) {
                                listed.push(name);
                            }
                        }
                    }
                }
                Err(reply) => return reply,
            }
        }
        keys_frame(&listed)
    }

    /// KEYS with each of `patterns` on every master (the fan-out for non-indexed keys),
    /// through the fan-out module's KEYS.
    async fn keys_on_all_masters(&self, patterns: &[Bytes]) -> Vec<Result<Vec<Bytes>, Bytes>> {
        let calls = patterns.iter().map(|pattern| async move {
            let reply = self
                .keys_all(encode_request(&[b"KEYS", pattern]), Proto::Resp2)
                .await;
            bulks(&reply, &reply).ok_or(reply)
        });
        join_all(calls).await
    }

    /// SCAN `cursor` [MATCH] [COUNT] [TYPE] with legacy names (cursor: see the module doc).
    pub(in crate::dispatch) async fn layout_scan(
        &self,
        active: &ActiveLayout,
        args: &[Bytes],
        _proto: Proto,
    ) -> Bytes {
        let Some(cursor) = ListingCursor::decode(&args[1]) else {
            return reply::error(reply::text::INVALID_CURSOR);
        };
        let options = match scan_options(args) {
            Ok(options) => options,
            Err(reply) => return reply,
        };
        let plan = active.layout.listing_plan(&options.pattern);
        let index_keys: Vec<&Bytes> = plan
            .index_reads
            .iter()
            .flat_map(|read| read.index_keys.iter())
            .collect();
        let masters = self.sorted_masters();
        let targets = plan.scan_patterns.len() * masters.len();
        let scan_start = if targets > 0 {
            ListingCursor::Scan { target: 0, node: 0 }.encode()
        } else {
            Some(0)
        };
        let (next, names) = match cursor {
            ListingCursor::Index(at) if at < index_keys.len() => {
                let names = match self
                    .listed_from_index(active, &plan, index_keys[at], options.kind.as_ref())
                    .await
                {
                    Ok(names) => names,
                    Err(reply) => return reply,
                };
                let next = if at + 1 < index_keys.len() {
                    ListingCursor::Index(at + 1).encode()
                } else {
                    scan_start
                };
                (next, names)
            }
            ListingCursor::Index(_) => (scan_start, Vec::new()),
            ListingCursor::Scan { target, node } if target < targets => {
                let pattern = &plan.scan_patterns[target / masters.len()];
                let addr = &masters[target % masters.len()];
                let (node_next, keys) = match self.scan_node(addr, node, pattern, &options).await {
                    Ok(scanned) => scanned,
                    Err(reply) => return reply,
                };
                let next = cursor_after_scan(target, targets, node_next);
                let names = keys
                    .iter()
                    .filter(|key| super::hidden::shown(key))
                    .filter_map(|key| plan.legacy_from_scanned(&active.layout, key))
                    .collect();
                (next, names)
            }
            ListingCursor::Scan { .. } => (Some(0), Vec::new()),
        };
        let Some(next) = next else {
            return reply::error(reply::text::LISTING_CURSOR_RANGE);
        };
        let mut out = BytesMut::new();
        encode::array_header(&mut out, 2);
        encode::bulk(&mut out, next.to_string().as_bytes());
        out.extend_from_slice(&keys_frame(&names));
        out.freeze()
    }

    /// One SCAN step of `addr` from `node_cursor` for `pattern`: the node's next cursor and
    /// the cluster names it gave, or the reply the client gets instead.
    async fn scan_node(
        &self,
        addr: &str,
        node_cursor: u64,
        pattern: &[u8],
        options: &ScanOptions,
    ) -> Result<(u64, Vec<Bytes>), Bytes> {
        let node_cursor = node_cursor.to_string();
        let mut call: Vec<&[u8]> = vec![
            b"SCAN",
            node_cursor.as_bytes(),
            b"MATCH",
            pattern,
            b"COUNT",
            &options.count,
        ];
        if let Some(kind) = &options.kind {
            call.extend([&b"TYPE"[..], kind]);
        }
        let conn = self.topology.node(addr, Proto::Resp2);
        let reply = match conn.call(encode_request(&call), false).await {
            Ok(reply) => reply,
            Err(e) => return Err(reply::unavailable(addr, &format!("{e:?}"))),
        };
        let Some((node_next, keys)) = parse_scan_reply(&reply) else {
            return Err(reply);
        };
        match std::str::from_utf8(&node_next)
            .ok()
            .and_then(|n| n.parse().ok())
        {
            Some(node_next) => Ok((node_next, keys)),
            None => Err(reply::error("ERR unexpected SCAN cursor from a node")),
        }
    }
}

/// The client's cursor after scan target `target` (of `targets`) answered with node cursor
/// `node_next`: that target's next step, else the next target's first, else 0 (done).
fn cursor_after_scan(target: usize, targets: usize, node_next: u64) -> Option<u64> {
    if node_next != 0 {
        ListingCursor::Scan {
            target,
            node: node_next,
        }
        .encode()
    } else if target + 1 < targets {
        ListingCursor::Scan {
            target: target + 1,
            node: 0,
        }
        .encode()
    } else {
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_zero_is_the_start() {
        assert_eq!(ListingCursor::decode(b"0"), Some(ListingCursor::Index(0)));
        for cursor in [
            ListingCursor::Index(0),
            ListingCursor::Index(31),
            ListingCursor::Index(2046),
            ListingCursor::Scan { target: 0, node: 0 },
            ListingCursor::Scan {
                target: 5,
                node: (1 << 40) + 7,
            },
        ] {
            let encoded = cursor.encode().unwrap();
            assert_ne!(encoded, 0, "{cursor:?} must not look finished");
            assert_eq!(
                ListingCursor::decode(encoded.to_string().as_bytes()),
                Some(cursor)
            );
        }
        assert_eq!(ListingCursor::Index(2047).encode(), None);
        assert_eq!(
            ListingCursor::Scan {
                target: 0,
                node: u64::MAX
            }
            .encode(),
            None
        );
        assert_eq!(ListingCursor::decode(b"abc"), None);
        assert_eq!(ListingCursor::decode(b"-1"), None);
    }

    #[test]
    fn scan_reply_parses() {
        let reply = Bytes::from_static(b"*2\r\n$2\r\n17\r\n*2\r\n$1\r\na\r\n$3\r\nb:c\r\n");
        let (cursor, keys) = parse_scan_reply(&reply).unwrap();
        assert_eq!(&cursor[..], b"17");
        assert_eq!(
            keys,
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b:c")]
        );
    }
}
