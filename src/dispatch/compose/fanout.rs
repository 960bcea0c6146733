//! Keyless commands about the whole data set, answered over every master as one server
//! would answer them: KEYS and PUBSUB SHARDCHANNELS (concatenated), PUBSUB SHARDNUMSUB
//! (each channel asked of its slot's master), SCAN (one cursor walking every master in
//! turn, see [`super::scan`]), DBSIZE and LATENCY RESET (summed), RANDOMKEY (a master that
//! has keys), SLOWLOG (every master's log as one, newest first), LATENCY LATEST/HISTORY
//! (see `monitors`), and admin broadcasts (FLUSHDB, FLUSHALL, CONFIG SET/RESETSTAT,
//! FUNCTION LOAD/DELETE/FLUSH/RESTORE, the KILLs). Which commands fan out, and how their
//! replies combine, follows the request and response policies Redis 7 documents for them
//! (`COMMAND DOCS`' tips).
//!
//! Invariants: masters are always taken in address order from one routing snapshot, so
//! the order is stable across refreshes that do not change the master set; a broadcast
//! reports success only when every master succeeded, and otherwise the first error in
//! that order (the masters that did succeed keep their change: Redis has no cross-node
//! rollback). With a standalone upstream every fan-out is a call to the one node.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::join_all;

use crate::backend::BackendError;
use crate::command::FanOut;
use crate::protocol::{encode, AggregateKind, Proto, ReplyView, Request};
use crate::reply::{self, merge};
use crate::route::draw::{draw_by_master, Draw};
use crate::route::{key_slot, NodeAddr};

use crate::dispatch::Proxy;

impl Proxy {
    pub(in crate::dispatch) async fn fanout(
        &self,
        op: FanOut,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        match op {
            // As clients see the keyspace: records hidden, a live migration's source added.
            FanOut::Keys => self.keys_listing(None, request, proto).await,
            FanOut::Scan => self.scan_listing(None, &request.args, proto).await,
            FanOut::Sum if request.args[0].eq_ignore_ascii_case(b"dbsize") => {
                self.dbsize_listing(request, proto).await
            }
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

    /// KEYS over every master (records of live moves left out), one at a time, so memory holds at most one master's reply
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
            let frame = super::hidden::drop_records(frame);
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
        let shown = |frame: &Bytes| (!drew_record(frame)).then(|| frame.clone());
        self.random_key_union(self.target_random_key(request, proto, shown), proto)
            .await
    }

    /// RANDOMKEY of the target: a key of a master that has any, a random one first, as
    /// `shown` shows a drawn frame; a master that draws only keys `shown` hides (records of
    /// live moves, a layout's own keys) is walked for one it shows (see `route::draw`).
    pub(in crate::dispatch) async fn target_random_key(
        &self,
        request: Bytes,
        proto: Proto,
        shown: impl Fn(&Bytes) -> Option<Bytes>,
    ) -> Bytes {
        let masters = match self.masters_in_order().await {
            Ok(masters) => masters,
            Err(error) => return error,
        };
        let shown = &shown;
        let draw = |master: usize| {
            let call = self.call_node(&masters[master], request.clone(), proto);
            async move {
                let frame = call.await;
                Ok::<_, Infallible>(if is_null(&frame) {
                    Draw::Empty
                } else {
                    shown(&frame).map_or(Draw::Hidden, Draw::Shown)
                })
            }
        };
        // A SCAN's names, each shown as a drawn one would be; a failed SCAN is the answer.
        let walk = |master: usize| {
            let found =
                self.find_on_master(&masters[master], |name| shown(&encode::bulk_frame(name)));
            async move { Ok(found.await.unwrap_or_else(Some)) }
        };
        match draw_by_master(masters.len(), draw, walk).await {
            Ok(Some(key)) => key,
            Ok(None) => encode::null_frame(proto),
            Err(never) => match never {},
        }
    }
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
pub(super) fn aggregate_body(frame: &[u8]) -> Option<(usize, &[u8])> {
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

use super::union::{drew_record, is_null_frame as is_null};

#[cfg(test)]
mod tests {
    use super::*;

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
