//! KEYS, SCAN and DBSIZE as clients see the keyspace: without a live migration, the
//! target's listings (the fan-out's, or the layout's) without the records of moves; during
//! one, the union of the source's keys (not moved yet) and the target's, under the names
//! the client uses (the source holds them; the target's are renamed back by the layout),
//! each key once where the command can promise it.
//!
//! # Order: the source first, then the target
//!
//! A key only ever moves from the source to the target, never back (`live`'s F1 and F4).
//! Asking the source first, then the target, a key present for the whole listing is seen
//! at least once: still on the source when the source is asked (or walked past its place),
//! or moved before that, and then on the target for the whole of the target's part. The
//! other order can miss a key that moves after the target's part passed its place and
//! before the source's part reaches it.
//!
//! - **KEYS**: the source's names, then the target's not listed already: each name once.
//! - **DBSIZE**: the keys left on the source (its DBSIZE less its claim records), then the
//!   target's as clients count them (see `hidden`). A key moved between the two counts, or
//!   between its move's seal and finish (when both places hold it), is counted twice for
//!   that instant; a key is never left out.
//! - **SCAN**: the source's masters are walked first, then the target (see
//!   [`UnionCursor`]). MATCH, COUNT and TYPE go to both sides. While the target is walked,
//!   names already returned from the source may be returned again (moved meanwhile): SCAN
//!   allows a name more than once, and clients must already cope with it.
//!
//! - **RANDOMKEY**: a key of either side: the side asked first is drawn at random, the other
//!   is asked when the first has none (or the source failed), so the answer is nil only when
//!   neither has a key.
//!   Records are never drawn, on either side, during the move or after it.
//!
//! Once the migration is done the source is not asked again; a SCAN started before the end
//! with a source-phase cursor goes on with the target from its start.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;

use bytes::{Bytes, BytesMut};

use crate::live::names::is_record;
use crate::live::Migration;
use crate::protocol::encode;
use crate::protocol::{Proto, ReplyView, Request};
use crate::reply;

use super::hidden::shown;
use super::listing::{bulks, keys_frame, parse_scan_reply, scan_options};
use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::Proxy;

/// The bit of a client SCAN cursor that says the walk is on the source. Target cursors
/// (the fan-out's and the layout listing's) leave it clear below 512 masters and for any
/// real node cursor, and one that sets it is refused rather than misread.
const SOURCE_PHASE: u64 = 1 << 63;
/// Bits of a source-phase cursor that carry the source master's own cursor.
const SOURCE_NODE_CURSOR_BITS: u32 = 48;
/// Bits that number the source master (in address order), between the node cursor and
/// the phase bit.
const SOURCE_MASTER_BITS: u32 = 63 - SOURCE_NODE_CURSOR_BITS;
const SOURCE_NODE_CURSOR_MASK: u64 = (1 << SOURCE_NODE_CURSOR_BITS) - 1;
const SOURCE_MASTER_MASK: u64 = (1 << SOURCE_MASTER_BITS) - 1;

/// A client's SCAN cursor while a live migration runs. Cursor 0 starts on the source; the
/// move from the source's last master to the target happens inside one call (the target's
/// first step is taken at once), so the target's cursor 0 is only ever the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnionCursor {
    /// Walking source master `master` (address order) from its cursor `cursor`.
    Source { master: usize, cursor: u64 },
    /// Walking the target from its own cursor (0: the walk is over).
    Target(u64),
}

impl UnionCursor {
    /// Reads a client cursor (already a number).
    pub fn decode(value: u64) -> UnionCursor {
        if value == 0 {
            return UnionCursor::Source {
                master: 0,
                cursor: 0,
            };
        }
        if value & SOURCE_PHASE == 0 {
            return UnionCursor::Target(value);
        }
        UnionCursor::Source {
            master: ((value >> SOURCE_NODE_CURSOR_BITS) & SOURCE_MASTER_MASK) as usize,
            cursor: value & SOURCE_NODE_CURSOR_MASK,
        }
    }

    /// The client cursor; `None` when it does not fit (a source cursor or master number
    /// too large for its bits, a target cursor with the phase bit set).
    pub fn encode(self) -> Option<u64> {
        match self {
            UnionCursor::Source { master, cursor } => {
                let master = u64::try_from(master).ok()?;
                if master > SOURCE_MASTER_MASK || cursor > SOURCE_NODE_CURSOR_MASK {
                    return None;
                }
                Some(SOURCE_PHASE | master << SOURCE_NODE_CURSOR_BITS | cursor)
            }
            UnionCursor::Target(cursor) => (cursor & SOURCE_PHASE == 0).then_some(cursor),
        }
    }
}

/// The source's names, then the target's not among them, each once (records were left
/// out by both sides; dropped here again so no path can show one).
pub fn union(source: Vec<Bytes>, target: Vec<Bytes>) -> Vec<Bytes> {
    let mut seen: HashSet<Bytes> = HashSet::with_capacity(source.len() + target.len());
    source
        .into_iter()
        .chain(target)
        .filter(|name| shown(name) && seen.insert(name.clone()))
        .collect()
}

/// The reply for a failure to read the source.
fn source_failed(error: impl std::fmt::Display) -> Bytes {
    reply::error(&reply::refusals::migration_source_failed(error))
}

impl Proxy {
    /// KEYS `pattern` (`request`) as clients see the keyspace; `active`: the layout, when
    /// the request was planned as its listing.
    pub(in crate::dispatch) async fn keys_listing(
        &self,
        active: Option<&ActiveLayout>,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        let Some(migration) = self.active_migration() else {
            return self.target_keys(active, request, proto).await;
        };
        // The source first: see the module doc.
        let source = match migration.source_keys(&request.args[1]).await {
            Ok(names) => names,
            Err(error) => return source_failed(error),
        };
        let target = self.target_keys(active, request, proto).await;
        let Some(names) = bulks(&target, &target) else {
            return target;
        };
        keys_frame(&union(source, names))
    }

    async fn target_keys(
        &self,
        active: Option<&ActiveLayout>,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        match active {
            Some(active) => self.layout_keys(active, &request.args[1], proto).await,
            None => self.keys_all(request.raw.clone(), proto).await,
        }
    }

    /// DBSIZE (`request`) as clients count keys: the source's keys not moved yet (during a
    /// migration) and the target's shown keys.
    pub(in crate::dispatch) async fn dbsize_listing(
        &self,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        let unmoved = match self.active_migration() {
            Some(migration) => match migration.source_unmoved().await {
                Ok(count) => i64::try_from(count).unwrap_or(i64::MAX),
                Err(error) => return source_failed(error),
            },
            None => 0,
        };
        match self.shown_size(request, proto).await {
            Ok(count) => encode::integer_frame(count.saturating_add(unmoved)),
            Err(reply) => reply,
        }
    }
}

impl Proxy {
    /// RANDOMKEY as clients see the keyspace (see the module doc); `target` draws from the
    /// target, records (and a layout's own keys) already left out.
    pub(in crate::dispatch) async fn random_key_union(
        &self,
        target: impl std::future::Future<Output = Bytes>,
        proto: Proto,
    ) -> Bytes {
        let Some(migration) = self.active_migration() else {
            return target.await;
        };
        // A failed source read falls back on the target: its key is as good an answer.
        let mut source = None;
        if RandomState::new().hash_one(0u8) & 1 == 0 {
            let drawn = migration.source_random_key().await;
            if let Ok(Some(name)) = &drawn {
                return encode::bulk_frame(name);
            }
            source = Some(drawn);
        }
        let drawn = target.await;
        if !is_null_frame(&drawn) {
            return drawn;
        }
        let source = match source {
            Some(source) => source,
            None => migration.source_random_key().await,
        };
        match source {
            Ok(Some(name)) => encode::bulk_frame(&name),
            Ok(None) => encode::null_frame(proto),
            // Neither an empty keyspace nor a key can be told.
            Err(error) => source_failed(error),
        }
    }
}

/// Whether `frame` is a null reply (RESP2 or RESP3).
pub(super) fn is_null_frame(frame: &[u8]) -> bool {
    frame == b"$-1\r\n" || frame == b"_\r\n" || frame == b"*-1\r\n"
}

/// Whether `frame` is a bulk reply naming a record of live moves: a RANDOMKEY draws again.
pub(in crate::dispatch) fn drew_record(frame: &Bytes) -> bool {
    matches!(ReplyView::parse(frame), Ok(ReplyView::Bulk(name)) if is_record(name))
}

impl Proxy {
    /// SCAN `cursor` [MATCH] [COUNT] [TYPE] (`args`) as clients see the keyspace; `active`:
    /// the layout, when the request was planned as its listing. During a migration (or
    /// after it, for a walk begun before its end) the cursor is a [`UnionCursor`].
    pub(in crate::dispatch) async fn scan_listing(
        &self,
        active: Option<&ActiveLayout>,
        args: &[Bytes],
        proto: Proto,
    ) -> Bytes {
        let Some(migration) = self.migration.as_deref() else {
            return self.target_scan(active, args, proto).await;
        };
        let Some(cursor) = super::scan::parse_cursor(&args[1]) else {
            return reply::error(reply::text::INVALID_CURSOR);
        };
        // Checked here for both sides: the source must not be the one to refuse them.
        if let Err(refusal) = scan_options(args) {
            return refusal;
        }
        let mut names = Vec::new();
        let target_cursor = match UnionCursor::decode(cursor) {
            UnionCursor::Source { master, cursor } if migration.is_active() => {
                match self
                    .source_step(migration, master, cursor, &args[2..])
                    .await
                {
                    Ok((Some(next), page)) => return scan_frame(next, &page),
                    Ok((None, page)) => {
                        names = page;
                        0
                    }
                    Err(reply) => return reply,
                }
            }
            // The migration ended during this walk: every key is on the target now.
            UnionCursor::Source { .. } => 0,
            UnionCursor::Target(cursor) => cursor,
        };
        let mut target_args = args.to_vec();
        target_args[1] = Bytes::from(target_cursor.to_string());
        let reply = self.target_scan(active, &target_args, proto).await;
        let Some((next, keys)) = parse_scan_reply(&reply) else {
            return reply;
        };
        let next = std::str::from_utf8(&next).ok().and_then(|n| n.parse().ok());
        let Some(next) = next.and_then(|n| UnionCursor::Target(n).encode()) else {
            return reply::error(reply::text::LIVE_SCAN_CURSOR_RANGE);
        };
        names.extend(keys.into_iter().filter(|name| shown(name)));
        scan_frame(next, &names)
    }

    /// One step on source master `master` from `cursor`: the client's next cursor, `None`
    /// when the source is done (the target is next), and the names found.
    async fn source_step(
        &self,
        migration: &Migration,
        master: usize,
        cursor: u64,
        options: &[Bytes],
    ) -> Result<(Option<u64>, Vec<Bytes>), Bytes> {
        let page = migration
            .source_scan(master, cursor, options)
            .await
            .map_err(source_failed)?;
        let next = if page.next != 0 {
            UnionCursor::Source {
                master,
                cursor: page.next,
            }
        } else if master + 1 < migration.source_walk_count() {
            UnionCursor::Source {
                master: master + 1,
                cursor: 0,
            }
        } else {
            return Ok((None, page.names));
        };
        match next.encode() {
            Some(next) => Ok((Some(next), page.names)),
            None => Err(reply::error(reply::text::LIVE_SCAN_CURSOR_RANGE)),
        }
    }

    async fn target_scan(
        &self,
        active: Option<&ActiveLayout>,
        args: &[Bytes],
        proto: Proto,
    ) -> Bytes {
        match active {
            Some(active) => self.layout_scan(active, args, proto).await,
            None => self.scan_all(args, proto).await,
        }
    }
}

/// A SCAN reply: cursor `next` and `names`.
fn scan_frame(next: u64, names: &[Bytes]) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 2);
    encode::bulk(&mut out, next.to_string().as_bytes());
    out.extend_from_slice(&keys_frame(names));
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::names::{claim_key, fence_key};

    fn names(list: &[&str]) -> Vec<Bytes> {
        list.iter()
            .map(|n| Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    #[test]
    fn source_cursors_round_trip_and_never_read_as_target_ones() {
        let start = UnionCursor::decode(0);
        assert_eq!(
            start,
            UnionCursor::Source {
                master: 0,
                cursor: 0
            }
        );
        for master in [0usize, 1, 7, (1 << SOURCE_MASTER_BITS) - 1] {
            for cursor in [0u64, 1, 12345, (1 << 47) + 9, (1 << 48) - 1] {
                let source = UnionCursor::Source { master, cursor };
                let encoded = source.encode().expect("fits");
                assert_ne!(encoded, 0, "{source:?} must not read as the end");
                assert_ne!(encoded & SOURCE_PHASE, 0);
                assert_eq!(UnionCursor::decode(encoded), source);
            }
        }
        let too_far = UnionCursor::Source {
            master: 0,
            cursor: 1 << 48,
        };
        assert_eq!(too_far.encode(), None);
        let too_many = UnionCursor::Source {
            master: 1 << SOURCE_MASTER_BITS,
            cursor: 0,
        };
        assert_eq!(too_many.encode(), None);
    }

    #[test]
    fn target_cursors_pass_as_they_are_and_zero_is_the_end() {
        let scan_all_cursor = crate::dispatch::compose::scan::encode_cursor(
            511,
            (1 << 48) - 1,
            &(0..512)
                .map(|i| crate::route::NodeAddr::from(format!("n{i}:1")))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        for cursor in [1u64, 4095, 1 << 40, scan_all_cursor, SOURCE_PHASE - 1] {
            assert_eq!(UnionCursor::Target(cursor).encode(), Some(cursor));
            assert_eq!(UnionCursor::decode(cursor), UnionCursor::Target(cursor));
        }
        assert_eq!(UnionCursor::Target(0).encode(), Some(0));
        assert_eq!(UnionCursor::Target(SOURCE_PHASE | 5).encode(), None);
    }

    #[test]
    fn the_union_lists_each_name_once_and_no_record() {
        let source = names(&["a", "b", "c"]);
        let mut target = names(&["c", "d", "a", "d"]);
        target.push(fence_key(b"d"));
        target.push(claim_key(b"e"));
        assert_eq!(union(source, target), names(&["a", "b", "c", "d"]));
        assert_eq!(union(Vec::new(), names(&["x"])), names(&["x"]));
        assert!(union(Vec::new(), Vec::new()).is_empty());
    }
}
