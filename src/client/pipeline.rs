//! One client's requests in flight, kept in request order until their replies are written.
//!
//! Most requests are [`Direct`]: one slot, a plain forward of the bytes as sent. Those are
//! staged per master (`upstream::batch`), one queue message for all of a client's requests
//! to that master found in one read, and their replies come back tagged with the
//! request's sequence number. Everything else runs as a future. A direct
//! request whose reply is not final (a redirect, a retryable error, a lost connection)
//! becomes a future that carries on as `Upstream::forward` would.
//!
//! Order: a batch leaves when the session finishes a read's worth of requests, and before
//! any later future is first polled, so requests reach each node in the order the client
//! sent them, as far as their futures send on first poll (as with plain futures).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::dispatch::{Direct, Proxy};
use crate::metrics::Outcome;
use crate::protocol::Proto;
use crate::upstream::batch::{Answer, Staging};

use super::flow::{Owed, ReplyEstimate};
use super::ordered::OrderedFutures;

/// A request that is not a plain forward, or a forward that needs another attempt.
pub type Running = Pin<Box<dyn Future<Output = Bytes> + Send>>;

/// Requests in flight the bookkeeping keeps room for once a deeper pipeline is answered
/// (see [`Pipeline::shrink_if_idle`]); the benchmark's pipelines of 16 never pass it.
const USUAL_DEPTH: usize = 64;

/// A direct request sent in a batch, with what it takes to finish it if its reply is not
/// final. One cache line, and aligned to one: a client's slot is written when its request
/// leaves and read when the reply comes in, the requests of every other client in between,
/// and across two lines (its 88 bytes before) it missed the cache twice each time.
#[repr(align(64))]
struct Sent {
    proxy: Arc<Proxy>,
    direct: Direct,
    request: Bytes,
    started: Micros,
    proto: Proto,
    /// Whether it is the first request of its read (see [`Pipeline::waits_for_its_read`]).
    read_start: bool,
}

/// Where one request stands.
enum Slot {
    /// Its reply, waiting for the replies before it.
    Ready(Bytes),
    /// Sent in a batch; its reply arrives through the sink.
    Sent(Sent),
    /// A future in `Rare::running` produces its reply.
    Running,
}

/// What only some clients' requests use, made when first used: inline, its 72 bytes put
/// the fields every request reads on a third cache line.
#[derive(Default)]
struct Rare {
    /// Futures of requests not answered yet, polled in request order (see `ordered`).
    running: OrderedFutures<Bytes>,
    /// Sequence numbers whose replies are not written (CLIENT REPLY OFF / SKIP), ascending.
    muted: VecDeque<u64>,
}

/// A client's requests in flight, in request order.
#[derive(Default)]
pub struct Pipeline {
    /// One per request not yet written to the client, oldest first.
    slots: VecDeque<Slot>,
    /// The sequence number of `slots[0]`.
    first_seq: u64,
    /// Direct requests of the current read, per master, not yet sent, and the replies of
    /// those sent.
    staging: Staging,
    /// Whether a request was pushed since the batches were last sent: the next one pushed
    /// starts a read when not (see [`Pipeline::waits_for_its_read`]).
    read_open: bool,
    /// Slots that hold their reply, and the bytes of those replies, and slots sent in a
    /// batch and not answered (flow control).
    ready: usize,
    sent: usize,
    ready_bytes: usize,
    /// How large the client's replies are (flow control).
    estimate: ReplyEstimate,
    rare: Option<Box<Rare>>,
}

impl Pipeline {
    /// Requests whose replies are not yet written (answered or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Gives back the room a pipeline of more than four times [`USUAL_DEPTH`] requests
    /// grew the bookkeeping to, once every reply is written: a client that pipelined
    /// `limits.max_pipeline` requests once would otherwise hold their entries (about 230
    /// KiB at 1,024) for as long as it stays connected.
    pub fn shrink_if_idle(&mut self) {
        if !self.slots.is_empty() || self.slots.capacity() <= 4 * USUAL_DEPTH {
            return;
        }
        self.slots.shrink_to(USUAL_DEPTH);
        self.staging.shrink_to(USUAL_DEPTH);
        if let Some(rare) = &mut self.rare {
            rare.muted.shrink_to(USUAL_DEPTH);
            rare.running.shrink_to(USUAL_DEPTH);
        }
    }

    /// Gives back the bookkeeping's allocations when nothing is in flight: for a client
    /// that went idle (they are taken again by its next request).
    pub fn release_if_idle(&mut self) {
        if !self.slots.is_empty() {
            return;
        }
        self.slots.shrink_to(0);
        self.staging.shrink_to(0);
        // Nothing in flight: no future runs and no reply is muted.
        self.rare = None;
    }

    /// What the client owes, with `output` its unwritten replies (see `flow`).
    pub fn owed(&self, output: usize) -> Owed {
        Owed {
            held: output + self.ready_bytes,
            unanswered: self.slots.len() - self.ready,
            direct: self.sent,
            estimate: self.estimate,
        }
    }

    /// Queues a reply known already.
    pub fn push_ready(&mut self, reply: Bytes) {
        self.note_ready(reply.len());
        self.read_open = true;
        self.slots.push_back(Slot::Ready(reply));
    }

    /// Counts a reply that took its slot.
    fn note_ready(&mut self, len: usize) {
        self.ready += 1;
        self.ready_bytes += len;
        self.estimate.note(len);
    }

    /// Stages a direct request; it leaves with its batch (see [`Pipeline::send_staged`]).
    pub fn push_direct(
        &mut self,
        proxy: Arc<Proxy>,
        direct: Direct,
        request: Bytes,
        proto: Proto,
        started: Micros,
    ) {
        let seq = self.next_seq();
        self.staging.stage(&direct.conn, &request, seq);
        self.sent += 1;
        let read_start = !std::mem::replace(&mut self.read_open, true);
        self.slots.push_back(Slot::Sent(Sent {
            proxy,
            direct,
            request,
            started,
            proto,
            read_start,
        }));
    }

    /// Sends the staged batches, one per master; the next request pushed starts another
    /// read.
    pub fn send_staged(&mut self) {
        self.staging.send();
        self.read_open = false;
    }

    /// Whether the replies in order so far should wait for the rest of their read: the
    /// next one is a batched forward (due within a round trip to its master) of the same
    /// read. Redis answers a read's commands with one write; a read whose requests span
    /// masters would otherwise leave in one write per master.
    #[inline]
    pub fn waits_for_its_read(&self) -> bool {
        matches!(self.slots.front(), Some(Slot::Sent(sent)) if !sent.read_start)
    }

    /// Runs `future` for the next request: the staged batches leave first, then the
    /// future is polled once, so whatever it sends on its first poll follows the
    /// requests before it and precedes those after it. It is polled here rather than
    /// through `running`, whose next turn may come after the session has read and sent
    /// later requests. Boxed by the caller: the session's own future then holds a pointer
    /// at this await, not the largest of the futures it runs.
    pub async fn push_future(&mut self, mut future: Running) {
        self.send_staged();
        let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        match first {
            Poll::Ready(reply) => self.push_ready(reply),
            Poll::Pending => {
                // `running` polls it again on its next turn, with its own waker.
                let seq = self.next_seq();
                self.read_open = true;
                self.slots.push_back(Slot::Running);
                self.rare().running.push(seq, future);
            }
        }
    }

    /// Moves finished replies into their slots; ready when the oldest has its reply.
    pub fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let waited = self.waits_for_its_read();
        if let Poll::Ready(mut delivered) = self.staging.poll_take(cx) {
            // One clock read times every reply of this wake-up.
            let mut clock = Clock::new(Instant::now());
            let mut tally = Tally::default();
            for (seq, answer) in delivered.drain() {
                self.complete(seq, answer, &mut clock, &mut tally);
            }
            tally.record();
            self.staging.give_back(delivered);
        }
        self.poll_running(cx);
        match self.slots.front() {
            Some(Slot::Ready(_)) => Poll::Ready(()),
            // The forward the replies before it waited for became a retry (a redirect):
            // they need not wait any longer.
            Some(Slot::Running) if waited => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }

    /// Appends the replies that are next in order to `out`, leaving out the muted ones.
    pub fn write_ready(&mut self, out: &mut BytesMut) {
        while let Some(Slot::Ready(reply)) = self.slots.front() {
            let muted = self.rare.as_mut().is_some_and(|rare| {
                rare.muted.front() == Some(&self.first_seq) && rare.muted.pop_front().is_some()
            });
            if !muted {
                out.extend_from_slice(reply);
            }
            // Saturating: the session may have replaced a reply in place (EXEC's).
            self.ready_bytes = self.ready_bytes.saturating_sub(reply.len());
            self.ready -= 1;
            self.slots.pop_front();
            self.first_seq += 1;
        }
        if self.slots.is_empty() {
            self.ready_bytes = 0;
        }
    }

    /// The reply next in order, taken for a write of its own when it is the only one ready
    /// and not muted: at one request per client read, nearly every reply. Written from
    /// where it was read, it is not copied into the client's output buffer first.
    pub fn take_lone_ready(&mut self) -> Option<Bytes> {
        let muted = |rare: &Rare| rare.muted.front() == Some(&self.first_seq);
        if self.ready != 1 || self.rare.as_deref().is_some_and(muted) {
            return None;
        }
        if !matches!(self.slots.front(), Some(Slot::Ready(_))) {
            return None;
        }
        let Some(Slot::Ready(reply)) = self.slots.pop_front() else {
            return None;
        };
        self.ready = 0;
        self.ready_bytes = 0;
        self.first_seq += 1;
        Some(reply)
    }

    /// The reply of request `seq`, once it is in and not yet written.
    pub fn ready_reply_mut(&mut self, seq: u64) -> Option<&mut Bytes> {
        match self.slot(seq)? {
            Slot::Ready(reply) => Some(reply),
            _ => None,
        }
    }

    /// The reply of the next request pushed is not written to the client.
    pub fn mute_next(&mut self) {
        let seq = self.next_seq();
        self.rare().muted.push_back(seq);
    }

    /// The sequence number the next request pushed gets.
    pub fn next_seq(&self) -> u64 {
        self.first_seq + self.slots.len() as u64
    }

    fn slot(&mut self, seq: u64) -> Option<&mut Slot> {
        slot_of(&mut self.slots, self.first_seq, seq)
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    fn poll_running(&mut self, cx: &mut Context<'_>) {
        // A future is pushed only by the session, which polls progress before it waits.
        let Some(rare) = self.rare.as_mut().filter(|rare| !rare.running.is_empty()) else {
            return;
        };
        let (slots, first_seq) = (&mut self.slots, self.first_seq);
        let (mut ready, mut ready_bytes, mut estimate) = (0, 0, self.estimate);
        rare.running.poll_each(cx, |seq, reply| {
            if let Some(slot) = slot_of(slots, first_seq, seq) {
                ready += 1;
                ready_bytes += reply.len();
                estimate.note(reply.len());
                *slot = Slot::Ready(reply);
            }
        });
        self.ready += ready;
        self.ready_bytes += ready_bytes;
        self.estimate = estimate;
    }

    /// Settles a direct request with its first answer.
    fn complete(&mut self, seq: u64, answer: Answer, clock: &mut Clock, tally: &mut Tally) {
        let Some(slot) = self.slot(seq) else {
            return;
        };
        let Slot::Sent(Sent {
            proxy,
            direct,
            request,
            proto,
            started,
            ..
        }) = std::mem::replace(slot, Slot::Running)
        else {
            debug_assert!(false, "a delivery for a request not sent in a batch");
            return;
        };
        let answer = match answer {
            Ok(reply) if direct.settles(&reply) => {
                tally.add(proxy, direct.command, &reply, clock.since(started));
                let len = reply.len();
                *slot = Slot::Ready(reply);
                self.sent -= 1;
                self.note_ready(len);
                return;
            }
            answer => answer,
        };
        self.sent -= 1;
        // Polled after this turn's deliveries, with the woken futures, in request order.
        let started = clock.instant_of(started);
        let future = proxy.follow_up(direct, request, proto, answer, started);
        self.rare().running.push(seq, Box::pin(future));
    }
}

/// One reading of the clock, and the latest time taken from it: the requests of one pass
/// share their start, so most replies of a wake-up take the same time, computed once.
struct Clock {
    now: Instant,
    micros: Micros,
    last: Option<(Micros, Duration)>,
}

impl Clock {
    fn new(now: Instant) -> Self {
        Clock {
            now,
            micros: Micros::of(now),
            last: None,
        }
    }

    /// The time from `started` to the clock's reading.
    fn since(&mut self, started: Micros) -> Duration {
        match self.last {
            Some((last, elapsed)) if last == started => elapsed,
            _ => {
                let elapsed = started.until(self.micros);
                self.last = Some((started, elapsed));
                elapsed
            }
        }
    }

    /// `started` as an `Instant` (to the microsecond).
    fn instant_of(&mut self, started: Micros) -> Instant {
        let elapsed = self.since(started);
        self.now.checked_sub(elapsed).unwrap_or(self.now)
    }
}

/// A moment, as the microseconds since the process first took one, wrapping every 71
/// minutes: what a slot keeps of its request's start (4 bytes, where an `Instant` takes 16).
/// A request answered within 71 minutes of its start is timed right; none waits that long
/// in a batch (a master that does not answer fails its connection's requests long before).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Micros(u32);

impl Micros {
    pub fn of(at: Instant) -> Self {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        // A second before the first moment taken: a start read just before it (on another
        // thread, or converted after a later reading) still counts from the epoch.
        let epoch = *EPOCH.get_or_init(|| at.checked_sub(Duration::from_secs(1)).unwrap_or(at));
        let since = at.saturating_duration_since(epoch);
        // Wrapping on purpose: the difference of two readings wraps as they do.
        let seconds = (since.as_secs() as u32).wrapping_mul(1_000_000);
        Micros(seconds.wrapping_add(since.subsec_micros()))
    }

    /// The time from this moment to `later`.
    fn until(self, later: Micros) -> Duration {
        Duration::from_micros(u64::from(later.0.wrapping_sub(self.0)))
    }
}

/// Settled replies alike (one command, outcome and latency: a pipeline's, mostly) counted
/// until one differs, then recorded with one update of each series: the command metrics
/// are atomic counters, three per reply otherwise.
#[derive(Default)]
struct Tally {
    run: Option<Run>,
}

struct Run {
    // Whose metrics: the proxy a request was sent by, moved out of its `Sent`.
    proxy: Arc<Proxy>,
    command: u16,
    outcome: Outcome,
    elapsed: Duration,
    count: u64,
}

impl Tally {
    fn add(&mut self, proxy: Arc<Proxy>, command: u16, reply: &[u8], elapsed: Duration) {
        if !proxy.command_metrics.is_enabled() {
            return;
        }
        let outcome = Outcome::of_reply(reply);
        if let Some(run) = &mut self.run {
            if run.command == command
                && run.outcome == outcome
                && run.elapsed == elapsed
                && Arc::ptr_eq(&run.proxy.command_metrics, &proxy.command_metrics)
            {
                run.count += 1;
                return;
            }
        }
        self.record();
        self.run = Some(Run {
            proxy,
            command,
            outcome,
            elapsed,
            count: 1,
        });
    }

    /// Records the replies counted so far.
    fn record(&mut self) {
        if let Some(run) = self.run.take() {
            run.proxy.command_metrics.record_many(
                Some(usize::from(run.command)),
                run.outcome,
                run.elapsed,
                run.count,
            );
        }
    }
}

/// The slot of request `seq` in `slots`, whose first is request `first_seq`.
fn slot_of(slots: &mut VecDeque<Slot>, first_seq: u64, seq: u64) -> Option<&mut Slot> {
    let index = usize::try_from(seq.checked_sub(first_seq)?).ok()?;
    slots.get_mut(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(pipeline: &mut Pipeline) -> String {
        let mut out = BytesMut::new();
        pipeline.write_ready(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn a_start_is_timed_across_the_wrap_of_its_microseconds() {
        let before_wrap = Micros(u32::MAX - 10);
        assert_eq!(before_wrap.until(Micros(5)), Duration::from_micros(16));
        let now = Instant::now();
        let started = now - Duration::from_millis(3);
        let mut clock = Clock::new(now);
        let elapsed = clock.since(Micros::of(started));
        assert!(
            elapsed.abs_diff(Duration::from_millis(3)) <= Duration::from_micros(1),
            "{elapsed:?}"
        );
        // Two moments across the wrap of the microseconds (2^32 of them, 71.6 minutes).
        let later = now + Duration::from_secs(4_294) + Duration::from_micros(7);
        assert_eq!(
            Micros::of(now).until(Micros::of(later)),
            Duration::from_secs(4_294) + Duration::from_micros(7)
        );
        let again = clock.instant_of(Micros::of(started));
        assert!(again.max(started) - again.min(started) <= Duration::from_micros(1));
    }

    #[tokio::test]
    async fn replies_leave_in_request_order_whatever_order_they_finish_in() {
        let mut pipeline = Pipeline::default();
        let (first_done, first) = tokio::sync::oneshot::channel::<()>();
        pipeline.push_ready(Bytes::from_static(b"a"));
        pipeline
            .push_future(Box::pin(async move {
                let _ = first.await;
                Bytes::from_static(b"b")
            }))
            .await;
        pipeline
            .push_future(Box::pin(async { Bytes::from_static(b"c") }))
            .await;
        pipeline.push_ready(Bytes::from_static(b"d"));
        assert_eq!(pipeline.len(), 4);
        // "c" is done already, but waits behind "b".
        assert_eq!(written(&mut pipeline), "a");
        assert_eq!(pipeline.len(), 3);
        first_done.send(()).expect("the future waits");
        std::future::poll_fn(|cx| pipeline.poll_progress(cx)).await;
        assert_eq!(written(&mut pipeline), "bcd");
        assert!(pipeline.is_empty());
    }

    /// Futures that wake themselves while they are polled (a reply arriving from another
    /// thread, Tokio's budget for the task spent) do not delay a new one: it still runs to
    /// its first await at once, so whatever it sends leaves before the requests after it.
    #[tokio::test]
    async fn a_new_future_starts_before_push_future_returns_whatever_runs_beside_it() {
        let mut pipeline = Pipeline::default();
        for _ in 0..2 {
            pipeline
                .push_future(Box::pin(std::future::poll_fn(|cx| {
                    cx.waker().wake_by_ref();
                    Poll::<Bytes>::Pending
                })))
                .await;
        }
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = started.clone();
        pipeline
            .push_future(Box::pin(async move {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                std::future::pending::<Bytes>().await
            }))
            .await;
        assert!(
            started.load(std::sync::atomic::Ordering::Relaxed),
            "the third future ran to its first await before push_future returned"
        );
    }
}
