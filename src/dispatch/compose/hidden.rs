//! The keys the target holds that clients never see: the records of live moves
//! (`slotbridge:live:...`, see `live::names`) always, and under a layout its own index keys
//! and marker. Listings drop records by name ([`drop_records`], [`shown`]; the layout's
//! listing drops its internal keys itself); DBSIZE subtracts both ([`Proxy::shown_size`]).
//!
//! Costs of DBSIZE, besides every master's own DBSIZE:
//! - without a layout, with a live migration configured (done or not), one `EXISTS` per slot
//!   (16,384, framed into one batch per master): the moved-fences are the only records on
//!   the target, one per slot, named from the slot alone, so they are counted exactly
//!   without walking the keyspace; without a migration configured, nothing;
//! - under a layout, a SCAN of every master's whole keyspace (COUNT 1000 a call), keeping
//!   the index keys, markers and records it meets (each once, so SCAN's repeats do not
//!   count twice) to subtract: exact, but a walk of every key per DBSIZE, as the other
//!   databases' DBSIZE is (see `database::run`). Index keys have no common name pattern a
//!   MATCH could narrow the walk to.
//!
//! Neither is atomic: keys written during the count may or may not be counted.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};

use crate::live::names::{fence_key, is_record, slot_tag};
use crate::protocol::encode::{self, encode_request};
use crate::protocol::{Proto, ReplyView, Request};
use crate::reply::merge;
use crate::rewrite::Reverse;
use crate::route::{NodeAddr, SLOT_COUNT};

use super::listing::parse_scan_reply;
use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::Proxy;

/// The COUNT of each SCAN call of DBSIZE's walk under a layout.
const WALK_COUNT: &[u8] = b"1000";

/// Whether a name the target gave is shown to clients (records never are).
pub(in crate::dispatch) fn shown(name: &[u8]) -> bool {
    !is_record(name)
}

/// Whether `element` (one frame of a reply's array) is a bulk string naming a record.
fn is_record_frame(element: &[u8]) -> bool {
    matches!(ReplyView::parse(element), Ok(ReplyView::Bulk(name)) if is_record(name))
}

/// An array (or set) reply of names without the records' names; any other reply, and an
/// array naming no record, as it is (no copy).
pub(in crate::dispatch) fn drop_records(frame: Bytes) -> Bytes {
    if !matches!(frame.first(), Some(b'*' | b'~')) {
        return frame;
    }
    let Some(elements) = ReplyView::element_frames(&frame) else {
        return frame;
    };
    if !elements.clone().any(is_record_frame) {
        return frame;
    }
    let kept: Vec<&[u8]> = elements.filter(|e| !is_record_frame(e)).collect();
    let mut out = BytesMut::with_capacity(frame.len());
    encode::array_header(&mut out, kept.len());
    for element in kept {
        out.extend_from_slice(element);
    }
    out.freeze()
}

impl Proxy {
    /// DBSIZE of the target as clients count it: every master's DBSIZE (`request`) less the
    /// records and the layout's internal keys (see the module doc for the cost). `Err` is
    /// the reply to give (a master's error).
    pub(in crate::dispatch) async fn shown_size(
        &self,
        request: &Request,
        proto: Proto,
    ) -> Result<i64, Bytes> {
        let replies = self.broadcast(request.raw.clone(), proto).await?;
        let summed = merge::sum_counts(&replies);
        let total = merge::integer(&summed).ok_or(summed)?;
        let hidden = match &self.layout {
            Some(active) => self.hidden_by_walk(active).await?,
            // Fences exist only where a live migration ran: without one configured, a plain
            // DBSIZE (bots that poll it pay nothing for a feature they do not use).
            None if self.migration.is_some() => self.fences().await?,
            None => 0,
        };
        Ok(total.saturating_sub(hidden).max(0))
    }

    /// How many moved-fences the target holds: one `EXISTS` of each slot's fence.
    async fn fences(&self) -> Result<i64, Bytes> {
        let slots: Vec<u16> = (0..SLOT_COUNT as u16).collect();
        let frame = |i: usize, out: &mut BytesMut| {
            let fence = fence_key(slot_tag(slots[i]));
            out.extend_from_slice(&encode_request(&[b"EXISTS", &fence]));
        };
        let replies = self
            .upstream
            .forward_each(&slots, frame, SLOT_COUNT * 48, Proto::Resp2)
            .await;
        let summed = merge::sum_counts(&replies);
        merge::integer(&summed).ok_or(summed)
    }

    /// How many keys a walk of every master finds that clients never see under the layout
    /// `active`: its index keys and markers, and records.
    async fn hidden_by_walk(&self, active: &ActiveLayout) -> Result<i64, Bytes> {
        let mut hidden: HashSet<Bytes> = HashSet::new();
        for addr in self.masters_in_order().await? {
            self.walk_master(&addr, |name| {
                if is_record(name) || active.layout.reverse(name) == Reverse::Internal {
                    hidden.insert(Bytes::copy_from_slice(name));
                }
            })
            .await?;
        }
        Ok(hidden.len() as i64)
    }

    /// SCAN over the whole keyspace of master `addr`, each name given to `each`.
    async fn walk_master(&self, addr: &NodeAddr, mut each: impl FnMut(&[u8])) -> Result<(), Bytes> {
        self.find_on_master(addr, |name| {
            each(name);
            None::<()>
        })
        .await?;
        Ok(())
    }

    /// SCAN over the keyspace of master `addr` until `find` finds something in a name.
    pub(in crate::dispatch) async fn find_on_master<T>(
        &self,
        addr: &NodeAddr,
        mut find: impl FnMut(&[u8]) -> Option<T>,
    ) -> Result<Option<T>, Bytes> {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let call = encode_request(&[b"SCAN", &cursor, b"COUNT", WALK_COUNT]);
            let reply = self.call_node(addr, call, Proto::Resp2).await;
            let Some((next, names)) = parse_scan_reply(&reply) else {
                return Err(reply);
            };
            if let Some(found) = names.iter().find_map(|name| find(name)) {
                return Ok(Some(found));
            }
            if &next[..] == b"0" {
                return Ok(None);
            }
            cursor = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_leave_a_name_array_and_nothing_else_changes() {
        let fence = fence_key(b"k");
        let mut with_record = BytesMut::new();
        encode::array_header(&mut with_record, 3);
        encode::bulk(&mut with_record, b"a");
        encode::bulk(&mut with_record, &fence);
        encode::bulk(&mut with_record, b"b");
        let dropped = drop_records(with_record.freeze());
        assert_eq!(&dropped[..], b"*2\r\n$1\r\na\r\n$1\r\nb\r\n");

        let plain = Bytes::from_static(b"*1\r\n$1\r\na\r\n");
        assert_eq!(drop_records(plain.clone()), plain);
        let error = Bytes::from_static(b"-ERR x\r\n");
        assert_eq!(drop_records(error.clone()), error);
        assert!(!shown(&fence) && shown(b"slotbridge:other") && shown(b"a"));
    }
}
