//! Sending one command to the node that owns its slot, following MOVED/ASK and retrying
//! the answers that arrive before anything ran (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN,
//! READONLY, node unreachable). A command whose reply was lost is never resent.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};

use futures_util::future::join_all;
use smallvec::SmallVec;
use tokio::sync::watch;

use crate::backend::{BackendError, Batch, NodeConn, ReplySink};
use crate::metrics::{self, RetryReason};
use crate::protocol::Proto;
use crate::reply;
use crate::route::Redirect;

use super::Upstream;

/// Parts of [`Upstream::forward_each`] kept inline: a multi-key command splits per slot, and
/// the random keys of an MSET or MGET of up to 16 keys are as many parts, which then need no
/// allocation per part list.
pub const PARTS_INLINE: usize = 16;

/// A part of [`Upstream::forward_each`] that goes on after its first answer.
type Resumed<'a> = Pin<Box<dyn Future<Output = Bytes> + Send + 'a>>;

/// Where the first attempt of a command goes.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The master of this slot.
    Slot(u16),
    /// Any master (keyless commands).
    AnyMaster,
}

impl Upstream {
    /// Sends `request` (one raw RESP command) and returns its reply frame, after redirects
    /// and retries. Errors that reach the client are final.
    pub async fn forward(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        self.forward_from(target, request, proto, None).await
    }

    /// Like [`Upstream::forward`] for a request already sent once to `conn` (the master of
    /// its slot) that came back with `answer`: the first attempt's outcome is handled as
    /// `forward` would have handled it.
    pub async fn forward_after(
        &self,
        target: Target,
        request: Bytes,
        proto: Proto,
        conn: NodeConn,
        answer: Result<Bytes, BackendError>,
    ) -> Bytes {
        self.forward_from(target, request, proto, Some((conn, answer)))
            .await
    }

    /// Forwards `slots.len()` single-slot requests at once and returns their replies in
    /// request order, each followed through redirects and retries as [`Upstream::forward`]
    /// would. Request `i` goes to the master of `slots[i]` and is framed by `frame(i, out)`.
    /// All are framed into one buffer, grouped per master, so each master's batch is one
    /// slice of it: one allocation and no copy whatever the number of parts. The task is
    /// woken once, when the last reply is in, unless a reply needs another attempt (see
    /// [`ReplySink::joined`]).
    pub async fn forward_each(
        &self,
        slots: &[u16],
        frame: impl Fn(usize, &mut BytesMut),
        size_hint: usize,
        proto: Proto,
    ) -> Vec<Bytes> {
        let count = slots.len();
        let conns = self.masters_of(slots, proto);
        let mut missing = conns.iter().filter(|conn| conn.is_some()).count();
        let sink = ReplySink::joined(missing);
        let requests = send_grouped(&conns, frame, size_hint, &sink);
        // Every batched request gets exactly one delivery, whatever happens to its node. A
        // part that needs another attempt (a redirect while its slot moves, a retryable
        // error) starts it as soon as its own delivery is in, not once every part is: the
        // client's later requests, redirected the same way, must resend after it (see
        // `client::ordered`), and they do not wait for this command's other masters.
        let mut finished: SmallVec<[Option<Bytes>; PARTS_INLINE]> =
            (0..count).map(|_| None).collect();
        let mut resumed: Vec<(usize, Resumed<'_>)> = Vec::new();
        let mut delivered: SmallVec<[bool; PARTS_INLINE]> = (0..count).map(|_| false).collect();
        // Swapped with the sink's buffer on each take, so it needs the same room.
        let mut taken = Vec::with_capacity(count);
        while missing > 0 {
            sink.take(&mut taken).await;
            for delivery in taken.drain(..) {
                let i = delivery.seq as usize;
                let (Some(Some(conn)), Some(false)) = (conns.get(i), delivered.get(i).copied())
                else {
                    continue;
                };
                delivered[i] = true;
                missing -= 1;
                match delivery.reply {
                    Ok(frame) if is_final(&frame, conn.addr()) => finished[i] = Some(frame),
                    answer => {
                        let target = Target::Slot(slots[i]);
                        let mut retry: Resumed<'_> = Box::pin(self.forward_after(
                            target,
                            requests[i].clone(),
                            proto,
                            conn.clone(),
                            answer,
                        ));
                        match std::future::poll_fn(|cx| Poll::Ready(retry.as_mut().poll(cx))).await
                        {
                            Poll::Ready(frame) => finished[i] = Some(frame),
                            Poll::Pending => resumed.push((i, retry)),
                        }
                    }
                }
            }
        }
        for (i, conn) in conns.iter().enumerate() {
            if conn.is_none() {
                let request = requests[i].clone();
                resumed.push((
                    i,
                    Box::pin(self.forward(Target::Slot(slots[i]), request, proto)),
                ));
            }
        }
        join_resumed(finished, resumed).await
    }

    /// The master connection of each of `slots`, from one routing snapshot; `None` for a
    /// slot the slot map does not cover.
    fn masters_of(
        &self,
        slots: &[u16],
        proto: Proto,
    ) -> SmallVec<[Option<NodeConn>; PARTS_INLINE]> {
        let routing = self.topology.routing();
        slots
            .iter()
            .map(|slot| Some(routing.master_for_slot(*slot)?.get(proto).clone()))
            .collect()
    }

    async fn forward_from(
        &self,
        target: Target,
        request: Bytes,
        proto: Proto,
        mut answered: Option<(NodeConn, Result<Bytes, BackendError>)>,
    ) -> Bytes {
        let retry = &self.retry;
        let mut redirects = 0;
        let mut attempts = 0;
        // The node a redirect names, and whether it was an ASK (send ASKING first).
        let mut redirected: Option<(NodeConn, bool)> = None;
        let mut masters: Option<watch::Receiver<()>> = None;
        loop {
            let (conn, answer) = match answered.take() {
                Some(first) => first,
                None => match self
                    .attempt(target, &request, proto, redirected.take())
                    .await
                {
                    Some(attempt) => attempt,
                    None => {
                        // The slot map does not cover the slot (yet): wait for a refresh.
                        self.topology.request_refresh();
                        if attempts >= retry.attempts {
                            return reply::error(reply::text::SLOT_UNSERVED);
                        }
                        let reason = Some(RetryReason::Unreachable);
                        self.retry_after(reason, &mut attempts, &mut masters).await;
                        continue;
                    }
                },
            };
            let frame = match answer {
                Ok(frame) => frame,
                Err(BackendError::Lost(detail)) => {
                    self.topology.request_refresh();
                    return reply::outcome_unknown(conn.addr(), &detail);
                }
                Err(BackendError::NotSent(detail)) => {
                    self.topology.request_refresh();
                    if attempts >= retry.attempts {
                        return reply::unavailable(conn.addr(), &detail);
                    }
                    let reason = Some(RetryReason::Unreachable);
                    self.retry_after(reason, &mut attempts, &mut masters).await;
                    continue;
                }
            };
            let Some(redirect) = follow_up(&frame, conn.addr()) else {
                return frame;
            };
            if matches!(redirect, Redirect::Moved { .. } | Redirect::Ask { .. }) {
                redirects += 1;
                if redirects > retry.max_redirects {
                    // The nodes disagree about the slot (as for a moment after it moved):
                    // wait like a retry, then start again from the slot map.
                    if attempts >= retry.attempts {
                        return reply::error(reply::text::TOO_MANY_REDIRECTS);
                    }
                    self.topology.request_refresh();
                    self.retry_after(None, &mut attempts, &mut masters).await;
                    redirects = 0;
                    continue;
                }
            }
            redirected = self.redirected_to(&redirect, proto);
            if redirected.is_none() {
                if suggests_stale_map(&redirect) {
                    self.topology.request_refresh();
                }
                if attempts >= retry.attempts {
                    return frame;
                }
                let reason = RetryReason::from_label(redirect.retry_reason());
                self.retry_after(reason, &mut attempts, &mut masters).await;
            }
        }
    }

    /// Sends `request` on the node a redirect named (with ASKING after an ASK), else on the
    /// first attempt's connection for `target`; `None`, unsent, while the slot map does not
    /// cover its slot.
    async fn attempt(
        &self,
        target: Target,
        request: &Bytes,
        proto: Proto,
        redirected: Option<(NodeConn, bool)>,
    ) -> Option<(NodeConn, Result<Bytes, BackendError>)> {
        let (conn, asking) = match redirected {
            Some((conn, asking)) => (conn, asking),
            None => (self.first_conn(target, proto)?, false),
        };
        let answer = conn.call(request.clone(), asking).await;
        Some((conn, answer))
    }

    /// The connection a first attempt at `target` goes on; `None` while the slot map does
    /// not cover its slot.
    fn first_conn(&self, target: Target, proto: Proto) -> Option<NodeConn> {
        match target {
            Target::Slot(slot) => self.topology.master_for_slot(slot, proto),
            Target::AnyMaster => self.topology.any_master(proto),
        }
    }

    /// Where a MOVED or an ASK sends the next attempt, and whether it needs ASKING
    /// (a MOVED also updates the slot map); `None` for the other answers, which retry.
    fn redirected_to(&self, redirect: &Redirect, proto: Proto) -> Option<(NodeConn, bool)> {
        match redirect {
            Redirect::Moved { slot, addr } => {
                metrics::redirect_moved();
                self.topology.on_moved(*slot, addr);
                Some((self.topology.node(addr, proto), false))
            }
            Redirect::Ask { addr, .. } => {
                metrics::redirect_ask();
                Some((self.topology.node(addr, proto), true))
            }
            _ => None,
        }
    }

    /// Counts a retry (for `reason`, if it has a metric) and waits out the backoff before
    /// attempt `attempts + 1`, or less: once the slot map names another set of masters (a
    /// replica took over from an unreachable master, a master was added), the retry goes at
    /// once instead of sleeping through a backoff grown to its cap.
    async fn retry_after(
        &self,
        reason: Option<RetryReason>,
        attempts: &mut u32,
        masters: &mut Option<watch::Receiver<()>>,
    ) {
        if let Some(reason) = reason {
            metrics::retry(reason);
        }
        let masters = masters.get_or_insert_with(|| self.topology.watch_masters());
        tokio::select! {
            () = tokio::time::sleep(self.retry.backoff(*attempts)) => {}
            // An error (the topology is gone) only disables this branch.
            Ok(()) = masters.changed() => {}
        }
        *attempts += 1;
    }
}

/// What a reply asks the proxy to do instead of passing it on: a redirect to follow or an
/// answer to retry (`None` for a final reply).
fn follow_up(frame: &[u8], from: &str) -> Option<Redirect> {
    if frame.first() != Some(&b'-') {
        return None;
    }
    Redirect::classify(frame, from).filter(|redirect| *redirect != Redirect::NoScript)
}

/// Whether `redirect` says the slot map may be out of date (the node is a replica now, or
/// its master or the cluster is down), so a refresh is worth asking for.
fn suggests_stale_map(redirect: &Redirect) -> bool {
    matches!(
        redirect,
        Redirect::ReadOnly | Redirect::MasterDown | Redirect::ClusterDown
    )
}

/// Waits for the parts of [`Upstream::forward_each`] that went on after their first
/// answer, then returns every part's reply in request order (an error for a part that got
/// none).
async fn join_resumed(
    mut finished: SmallVec<[Option<Bytes>; PARTS_INLINE]>,
    resumed: Vec<(usize, Resumed<'_>)>,
) -> Vec<Bytes> {
    if !resumed.is_empty() {
        let outcomes = join_all(
            resumed
                .into_iter()
                .map(|(i, retry)| async move { (i, retry.await) }),
        )
        .await;
        for (i, frame) in outcomes {
            finished[i] = Some(frame);
        }
    }
    finished
        .into_iter()
        .map(|frame| frame.unwrap_or_else(|| reply::error(reply::text::NO_REPLY)))
        .collect()
}

/// Frames request `i` of `conns` with `frame(i, out)` into one buffer, grouped per master
/// (unmapped ones last, in order within a group), and sends each master's group as one
/// batch whose replies `sink` delivers under the request numbers; the requests, each a
/// slice of that buffer, in request order.
fn send_grouped(
    conns: &[Option<NodeConn>],
    frame: impl Fn(usize, &mut BytesMut),
    size_hint: usize,
    sink: &std::sync::Arc<ReplySink>,
) -> SmallVec<[Bytes; PARTS_INLINE]> {
    let mut groups: SmallVec<[NodeConn; 4]> = SmallVec::new();
    let mut order: SmallVec<[(usize, usize); 16]> = conns
        .iter()
        .enumerate()
        .map(|(i, conn)| {
            let group = match conn {
                Some(conn) => match groups.iter().position(|g| g.same(conn)) {
                    Some(group) => group,
                    None => {
                        groups.push(conn.clone());
                        groups.len() - 1
                    }
                },
                None => usize::MAX,
            };
            (group, i)
        })
        .collect();
    order.sort_unstable();
    let mut wire = BytesMut::with_capacity(size_hint);
    let mut spans: SmallVec<[Range<usize>; PARTS_INLINE]> =
        (0..conns.len()).map(|_| 0..0).collect();
    for &(_, i) in &order {
        let start = wire.len();
        frame(i, &mut wire);
        spans[i] = start..wire.len();
    }
    let wire = wire.freeze();
    let mut seqs: SmallVec<[u64; 16]> = SmallVec::new();
    for (group, conn) in groups.iter().enumerate() {
        seqs.clear();
        seqs.extend(
            order
                .iter()
                .filter(|(g, _)| *g == group)
                .map(|&(_, i)| i as u64),
        );
        let (Some(&first), Some(&last)) = (seqs.first(), seqs.last()) else {
            continue;
        };
        let joined = wire.slice(spans[first as usize].start..spans[last as usize].end);
        conn.send_batch(Batch::joined(joined, &seqs, sink.clone()));
    }
    spans.iter().map(|span| wire.slice(span.clone())).collect()
}

/// Whether `frame`, from the node at `from`, is what the client gets: neither a redirect
/// nor an error worth retrying.
// Inlined with its common answer (no error reply), as every forwarded reply asks.
#[inline]
pub fn is_final(frame: &[u8], from: &str) -> bool {
    frame.first() != Some(&b'-') || follow_up(frame, from).is_none()
}
