//! Batches: many requests of one client to one node, sent as one queue message, with
//! their replies handed to the client's [`ReplySink`].
//!
//! A oneshot channel per request costs an allocation and a wake-up per command; a batch
//! costs one queue message, one in-flight entry and one wake-up per node per client read,
//! however many requests it carries. Replies are tagged with the sequence numbers the
//! client session gave its requests, so the session puts them back in request order.
//! Invariant: every request of a batch gets exactly one delivery (its reply, `NotSent` or
//! `Lost`), whichever way the batch ends, even when it is dropped unanswered.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;

use super::seqs::Seqs;
use super::{BackendError, NodeConn};

/// One reply for one request of a batch.
#[derive(Debug)]
pub struct Delivery {
    /// The sequence number the session gave the request.
    pub seq: u64,
    /// The reply frame, or why there is none.
    pub reply: Result<Bytes, BackendError>,
}

#[derive(Default)]
struct SinkState {
    delivered: Vec<Delivery>,
    closed: bool,
    /// For a joined sink, the deliveries still to come before its task is woken; 0 wakes
    /// it at every delivery.
    awaited: usize,
}

/// Where one client session collects the replies of its batches.
#[derive(Default)]
pub struct ReplySink {
    state: Mutex<SinkState>,
    waker: AtomicWaker,
}

impl ReplySink {
    /// An open sink.
    pub fn new() -> Arc<ReplySink> {
        Arc::new(ReplySink::default())
    }

    /// An open sink for the `replies` parts of one split command, which arrive from
    /// several nodes: room for them all (a growing buffer would be reallocated for each),
    /// and its task woken once, when the last is in, rather than once per node. An error
    /// reply or a failed request wakes it at once: such a part may need another attempt,
    /// which must not wait for the other nodes.
    pub fn joined(replies: usize) -> Arc<ReplySink> {
        let sink = ReplySink::default();
        {
            let mut state = sink.lock();
            state.delivered.reserve_exact(replies);
            state.awaited = replies;
        }
        Arc::new(sink)
    }

    /// Moves the replies delivered so far into `into`; otherwise registers the task to be
    /// woken by the next delivery.
    pub fn poll_take(&self, cx: &mut Context<'_>, into: &mut Vec<Delivery>) -> Poll<()> {
        // Registered before looking, so a delivery racing with this call still wakes.
        self.waker.register(cx.waker());
        let mut state = self.lock();
        if state.delivered.is_empty() {
            return Poll::Pending;
        }
        std::mem::swap(&mut state.delivered, into);
        Poll::Ready(())
    }

    /// Waits for [`ReplySink::poll_take`].
    pub async fn take(&self, into: &mut Vec<Delivery>) {
        std::future::poll_fn(|cx| self.poll_take(cx, into)).await
    }

    /// Gives back the room for deliveries beyond `replies`, when none is waiting.
    pub fn shrink_to(&self, replies: usize) {
        let mut state = self.lock();
        if state.delivered.is_empty() {
            state.delivered.shrink_to(replies);
        }
    }

    /// Refuses every later delivery (the client went away): replies then go nowhere
    /// instead of piling up, and batches not yet written are not written.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.delivered = Vec::new();
    }

    /// Whether the client went away.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Consumes `deliveries` even when closed: the caller counts what was taken.
    fn deliver(&self, deliveries: impl Iterator<Item = Delivery>) {
        let wake = {
            let mut state = self.lock();
            if state.closed {
                deliveries.for_each(drop);
                return;
            }
            let before = state.delivered.len();
            state.delivered.extend(deliveries);
            if state.awaited == 0 {
                true
            } else {
                let arrived = &state.delivered[before..];
                // An error reply or a failed request: it may need another attempt.
                let urgent = arrived.iter().any(|delivery| match &delivery.reply {
                    Ok(frame) => frame.first() == Some(&b'-'),
                    Err(_) => true,
                });
                state.awaited = state.awaited.saturating_sub(arrived.len());
                urgent || state.awaited == 0
            }
        };
        if wake {
            self.waker.wake();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Collects one client's requests to one node: their bytes, back to back, and their
/// sequence numbers.
#[derive(Default)]
pub struct BatchBuilder {
    /// The only request so far, kept as is so a batch of one copies nothing.
    single: Option<Bytes>,
    joined: BytesMut,
    seqs: Seqs,
}

impl BatchBuilder {
    /// Adds one complete RESP request whose reply is delivered under `seq`. Borrowed: only
    /// a batch's first request is kept as is (a reference count each way), the others are
    /// copied into the batch's buffer.
    pub fn push(&mut self, request: &Bytes, seq: u64) {
        if self.seqs.is_empty() {
            self.single = Some(request.clone());
        } else {
            if let Some(first) = self.single.take() {
                // Room for a few more of the same size: one allocation for most batches.
                self.joined.reserve(4 * (first.len() + request.len()));
                self.joined.extend_from_slice(&first);
            }
            self.joined.extend_from_slice(request);
        }
        self.seqs.push(seq);
    }

    /// The batch, replying into `sink`.
    pub fn finish(self, sink: Arc<ReplySink>) -> Batch {
        let requests = match self.single {
            Some(single) => single,
            None => self.joined.freeze(),
        };
        Batch {
            requests,
            replies: BatchReplies {
                sink,
                seqs: self.seqs,
            },
        }
    }
}

/// Batches under construction, one per node.
#[derive(Default)]
pub struct Batches {
    staged: Vec<(NodeConn, BatchBuilder)>,
}

impl Batches {
    /// No batch yet (a constant: it can start a thread-local without lazy initialization).
    pub const fn new() -> Batches {
        Batches { staged: Vec::new() }
    }

    /// Adds `request` to `conn`'s batch; its reply is delivered under `seq`.
    pub fn push(&mut self, conn: &NodeConn, request: &Bytes, seq: u64) {
        let index = match self.staged.iter().position(|(c, _)| c.same(conn)) {
            Some(index) => index,
            None => {
                self.staged.push((conn.clone(), BatchBuilder::default()));
                self.staged.len() - 1
            }
        };
        self.staged[index].1.push(request, seq);
    }

    /// Sends every batch, its replies going to `sink`.
    pub fn send(&mut self, sink: &Arc<ReplySink>) {
        for (conn, builder) in self.staged.drain(..) {
            conn.send_batch(builder.finish(sink.clone()));
        }
    }
}

/// Requests to write as one, and where their replies go.
pub struct Batch {
    pub(super) requests: Bytes,
    pub(super) replies: BatchReplies,
}

impl Batch {
    /// Requests framed back to back already, one per sequence number in `seqs`, replying
    /// into `sink`.
    pub fn joined(requests: Bytes, seqs: &[u64], sink: Arc<ReplySink>) -> Batch {
        Batch {
            requests,
            replies: BatchReplies {
                sink,
                seqs: Seqs::of(seqs),
            },
        }
    }
}

/// The replies a batch still owes, in request order.
pub(super) struct BatchReplies {
    sink: Arc<ReplySink>,
    /// Those of the requests not answered yet.
    seqs: Seqs,
}

impl BatchReplies {
    /// Whether the client went away, so writing the batch is pointless.
    pub(super) fn is_abandoned(&self) -> bool {
        self.sink.is_closed()
    }

    /// How many requests the batch carries (before any is answered).
    pub(super) fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Whether every request got its delivery.
    pub(super) fn is_done(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Hands as many of `frames` (front first) as this batch still expects to the sink.
    pub(super) fn deliver_from(&mut self, frames: &mut impl Iterator<Item = Bytes>) {
        let seqs = &mut self.seqs;
        self.sink.deliver(std::iter::from_fn(|| {
            // A frame is taken only for a request that expects one.
            if seqs.is_empty() {
                return None;
            }
            let reply = Ok(frames.next()?);
            seqs.pop_front().map(|seq| Delivery { seq, reply })
        }));
    }

    /// Answers every request not answered yet with `error`.
    pub(super) fn fail(&mut self, error: &BackendError) {
        let seqs = &mut self.seqs;
        self.sink.deliver(std::iter::from_fn(|| {
            let seq = seqs.pop_front()?;
            Some(Delivery {
                seq,
                reply: Err(error.clone()),
            })
        }));
    }
}

impl Drop for BatchReplies {
    fn drop(&mut self) {
        if !self.is_done() {
            self.fail(&BackendError::Lost(
                "connection closed before the reply".to_string(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn take(sink: &ReplySink) -> Vec<(u64, Result<Bytes, BackendError>)> {
        let mut into = Vec::new();
        let mut cx = Context::from_waker(Waker::noop());
        let _ = sink.poll_take(&mut cx, &mut into);
        into.into_iter().map(|d| (d.seq, d.reply)).collect()
    }

    #[test]
    fn a_batch_of_one_keeps_the_request_bytes() {
        let mut builder = BatchBuilder::default();
        let request = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n");
        builder.push(&request, 7);
        let batch = builder.finish(ReplySink::new());
        assert_eq!(batch.requests.as_ptr(), request.as_ptr());
    }

    #[test]
    fn replies_are_tagged_in_order_across_partial_deliveries() {
        let sink = ReplySink::new();
        let mut builder = BatchBuilder::default();
        for (seq, request) in [(3, "a"), (5, "b"), (9, "c")] {
            builder.push(&Bytes::from(request), seq);
        }
        let mut batch = builder.finish(sink.clone());
        assert_eq!(&batch.requests[..], b"abc");
        let mut first = [Bytes::from("+1")].into_iter();
        batch.replies.deliver_from(&mut first);
        assert!(!batch.replies.is_done());
        let mut rest = [Bytes::from("+2"), Bytes::from("+3"), Bytes::from("+next")].into_iter();
        batch.replies.deliver_from(&mut rest);
        assert!(batch.replies.is_done());
        assert_eq!(
            rest.next().as_deref(),
            Some(&b"+next"[..]),
            "frames of the next owner"
        );
        let got = take(&sink);
        let seqs: Vec<u64> = got.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(seqs, [3, 5, 9]);
        assert_eq!(got[2].1.as_deref().ok(), Some(&b"+3"[..]));
    }

    #[test]
    fn a_dropped_batch_fails_what_it_still_owes_as_lost() {
        let sink = ReplySink::new();
        let mut builder = BatchBuilder::default();
        builder.push(&Bytes::from("a"), 1);
        builder.push(&Bytes::from("b"), 2);
        let mut batch = builder.finish(sink.clone());
        batch
            .replies
            .deliver_from(&mut [Bytes::from("+1")].into_iter());
        drop(batch);
        let got = take(&sink);
        assert_eq!(got.len(), 2);
        assert!(matches!(got[1], (2, Err(BackendError::Lost(_)))));
    }

    /// A waker that counts its wakes.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A batch of one request to one node, delivering under `seq` into `sink`.
    fn one(sink: &Arc<ReplySink>, seq: u64) -> Batch {
        let mut builder = BatchBuilder::default();
        builder.push(&Bytes::from("req"), seq);
        builder.finish(sink.clone())
    }

    #[test]
    fn a_joined_sink_wakes_once_every_part_is_in_or_at_an_error() {
        let wakes = Arc::new(Wakes(Default::default()));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut into = Vec::new();
        let sink = ReplySink::joined(3);
        let mut batches: Vec<Batch> = (0..3).map(|seq| one(&sink, seq)).collect();
        assert!(sink.poll_take(&mut cx, &mut into).is_pending());
        batches[0]
            .replies
            .deliver_from(&mut [Bytes::from("+a")].into_iter());
        assert_eq!(wakes.count(), 0, "two parts are still out");
        batches[1]
            .replies
            .deliver_from(&mut [Bytes::from("-MOVED 1 h:1")].into_iter());
        assert_eq!(
            wakes.count(),
            1,
            "an error may need another attempt at once"
        );
        assert!(sink.poll_take(&mut cx, &mut into).is_ready());
        assert_eq!(into.len(), 2);
        batches[2]
            .replies
            .deliver_from(&mut [Bytes::from("+c")].into_iter());
        assert_eq!(wakes.count(), 2, "the last part");
        let plain = ReplySink::new();
        let mut batch = one(&plain, 7);
        assert!(plain.poll_take(&mut cx, &mut Vec::new()).is_pending());
        batch
            .replies
            .deliver_from(&mut [Bytes::from("+x")].into_iter());
        assert_eq!(wakes.count(), 3, "a plain sink wakes at every delivery");
    }

    #[test]
    fn a_closed_sink_takes_nothing() {
        let sink = ReplySink::new();
        let mut builder = BatchBuilder::default();
        builder.push(&Bytes::from("a"), 1);
        let mut batch = builder.finish(sink.clone());
        sink.close();
        assert!(batch.replies.is_abandoned());
        batch
            .replies
            .fail(&BackendError::NotSent("test".to_string()));
        assert!(take(&sink).is_empty());
    }
}
