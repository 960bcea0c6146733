//! The rest of a session's turn: settle after the admit step (budget, memory, whether the
//! connection ends now) and wait for the next event (`woken` handles it).
//!
//! The wait polls the usual sources in place, in a fixed order (replies first, so they
//! leave before more requests are read; input last but for the signals and timers), and
//! writes replies with `try_write` as soon as they are in order, which saves a turn of
//! the loop per reply. The reply of the last request in flight, where nothing else changes
//! with it, leaves from within the wait itself, which goes on waiting (`LastReply`).

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::ops::ControlFlow;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use super::super::flow::{ClientFlow, Gate, SharedBudget};
use super::super::pipeline::Pipeline;
use super::super::pubsub::{PubSub, Relay};
use super::super::registry::{ClientGuard, Registry, Signal, Signals};
use super::super::stream::ClientIo;
use super::woken::write_lone_ready;
use super::{
    Conn, Flow, Session, ACTIVITY_GRAIN, CLOSE_LINGER, HELD_INPUT, HELD_OUTPUT,
    OUTPUT_BACKPRESSURE, READ_BUFFER,
};

/// What [`Session::settle`] decided for this turn's wait.
pub(super) struct Turn {
    can_read: bool,
    subscribed: bool,
    /// Whether the reply of the last request in flight leaves from within the wait.
    last_reply: bool,
    /// The idle timeout's deadline, where no other timer runs (see `IdleTimer`).
    idle_alone: Option<Instant>,
    /// The next moment a limit may close the client without any event of its own, where
    /// that is not the idle timeout's alone (`idle_alone`).
    close_deadline: Option<Instant>,
}

/// How a session that settled to its end closes.
pub(super) enum Close {
    /// Every complete request the client sent before closing its side is answered, as
    /// Redis does: close (see `ClientIo::close_after_client`).
    Shutdown,
    /// It is done (QUIT, bad input, drained): half-close, then linger.
    Linger,
    /// At once (over its soft output limit).
    Now,
}

/// What ended a session's wait.
pub(super) enum Woken {
    /// The oldest request in flight has its reply, or replies may leave without it.
    Progress,
    Wrote(std::io::Result<usize>),
    /// The subscriber exceeded its message buffer.
    Overflowed,
    Relay(Relay),
    /// MONITOR lines for the client; `None`: it was dropped for falling behind.
    Monitor(Option<bytes::Bytes>),
    Read(std::io::Result<usize>),
    Signal(Signal),
    /// The CLIENT PAUSE holding a request ended or changed.
    PauseChanged,
    /// The process budget the client waited for has room again.
    BudgetFreed,
    /// A probation place is free for the new client: handed to it (`true`), or found free.
    PlaceFreed(bool),
    /// The idle timeout, the soft output limit's time or the drain's grace passed.
    Deadline,
}

impl<'a> Session<'a> {
    /// After the admit step: brings the client's budget up to date, gives back memory,
    /// and tells whether and how the connection ends now.
    pub(super) fn settle(&mut self) -> Result<Turn, Close> {
        let Session {
            conn,
            flow,
            order,
            end,
            ..
        } = self;
        if conn.input.is_empty() && order.held.is_none() {
            flow.gate = Gate::Open;
        }
        flow.budget
            .charge(order.in_flight.owed(conn.output.len()), flow.gate);
        if flow.gate != Gate::Open {
            // A paused client may wait long: it keeps only what it has not read.
            conn.output_resizer.compact_if_spent(&mut conn.output);
        }
        order.in_flight.shrink_if_idle();
        conn.input_resizer.shrink_if_idle(&mut conn.input);
        conn.output_resizer.shrink_if_idle(&mut conn.output);
        let answered = order.in_flight.is_empty() && conn.output.is_empty();
        if answered && end.peer_closed && order.held.is_none() && flow.gate == Gate::Open {
            return Err(Close::Shutdown);
        }
        let drained = end.drain_until.is_some_and(|until| Instant::now() >= until);
        if answered && (end.closing || drained) {
            return Err(Close::Linger);
        }
        if let Some(limit) = flow.limits.soft_limit {
            let held = order.in_flight.owed(conn.output.len()).held;
            if flow.soft_watch.exceeded(limit, held, Instant::now()) {
                tracing::info!(client = %conn.peer, bytes = held, "closing client over its soft output buffer limit");
                crate::metrics::client_output_limit_disconnect();
                return Err(Close::Now);
            }
        }
        Ok(self.turn(answered))
    }

    /// What the wait of this turn looks at.
    fn turn(&self, answered: bool) -> Turn {
        let Session {
            conn,
            flow,
            order,
            end,
            subs,
            ..
        } = self;
        let input = conn.input.len();
        // Past its budget, a client's input waits in TCP, not here (a little is still
        // read, so a client that hangs up is noticed).
        let can_read = !end.closing
            && !end.peer_closed
            && order.held.is_none()
            && order.in_flight.len() < flow.limits.max_pipeline
            && conn.output.len() < OUTPUT_BACKPRESSURE
            && (flow.gate == Gate::Open || input < READ_BUFFER)
            && !(order.sequence_point && input >= HELD_INPUT);
        let subscribed = subs.pubsub.is_used() && subs.pubsub.is_subscribed();
        let idle_deadline = self.idle_deadline();
        let soft_deadline = flow.soft_watch.deadline(flow.limits.soft_limit);
        let drain_deadline = end.drain_until.filter(|_| answered);
        // The idle timeout alone (where `timeout` is set, every idle client's) is timed by
        // the client's own idle timer, moved from wait to wait; the other deadlines, and
        // the idle one among them, by a timer made for the wait.
        let idle_alone = idle_deadline.filter(|_| {
            soft_deadline.is_none() && drain_deadline.is_none() && order.paused_until.is_none()
        });
        let close_deadline = [idle_deadline, soft_deadline, drain_deadline]
            .into_iter()
            .flatten()
            .min()
            .filter(|_| idle_alone.is_none());
        // Nothing of this turn changes when the last reply leaves but the idle timeout's
        // clock, which the wait starts itself, and no one else waits for it (see
        // `LastReply`).
        let last_reply = can_read
            && input == 0
            && conn.output.is_empty()
            && close_deadline.is_none()
            && idle_alone.is_none()
            && order.paused_until.is_none()
            && end.drain_until.is_none()
            && flow.limits.soft_limit.is_none()
            && !subs.pubsub.is_used()
            && self.ident.state.monitor.is_none()
            && self.tx.exec_locals.is_none();
        Turn {
            can_read,
            subscribed,
            last_reply,
            idle_alone,
            close_deadline,
        }
    }

    /// When `timeout` closes the client if nothing happens before. As in Redis, a client
    /// waiting for a reply (a blocked one among them), held by a pause, subscribed or
    /// monitoring never idles out. Without a timeout, one load.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let Session {
            conn,
            flow,
            order,
            subs,
            ident,
            ..
        } = self;
        let answered = || order.in_flight.is_empty() && conn.output.is_empty();
        let subscribed = || subs.pubsub.is_used() && subs.pubsub.is_subscribed();
        flow.limits
            .idle_timeout
            .filter(|_| answered() && order.paused_until.is_none())
            .filter(|_| !subscribed() && ident.state.monitor.is_none())
            .map(|timeout| conn.last_active + timeout)
    }

    /// Closes the connection as `close` says.
    pub(super) async fn close(&mut self, close: Close) {
        let conn = &mut self.conn;
        match close {
            Close::Shutdown => conn.io.close_after_client().await,
            // Boxed: its discard buffer would otherwise be part of every connected
            // client's session, most of which never get here before their peer closes.
            Close::Linger => Box::pin(linger_close(&mut conn.io)).await,
            Close::Now => {}
        }
    }

    /// Waits for the next event of the client, its replies, subscriptions, signals and
    /// timers.
    ///
    /// Not an async fn: the session's task holds this future while the client waits, and
    /// a closure over the places it polls (a pointer each) takes one cache line, where an
    /// async fn's frame, its locals beside its closure, took more than four. Each turn
    /// writes it and each wake-up reads it, in a task a thousand other clients' requests
    /// have pushed out of the cache since.
    pub(super) fn wait<'w, 's>(
        &'w mut self,
        turn: Turn,
        mut signals: Pin<&'w mut Signals<'s>>,
    ) -> impl Future<Output = Woken> + use<'w, 'a, 's> {
        let Session {
            client,
            conn,
            flow,
            order,
            end,
            subs,
            ident,
            ..
        } = self;
        let Turn {
            can_read,
            subscribed,
            last_reply,
            idle_alone,
            close_deadline,
        } = turn;
        let mut idle_timed = conn.idle_timer.time(idle_alone);
        let in_flight = &mut order.in_flight;
        let write_held = waits_for_its_read(in_flight, &conn.output);
        let backpressure = conn.output.len() >= OUTPUT_BACKPRESSURE;
        // Messages wait in the subscription's bounded buffer while the client is slow,
        // so `pubsub.max_buffer_bytes` is what limits a subscriber that does not read.
        let relaying = subs.pubsub.is_used() && !end.closing && !backpressure;
        // The rarely used sources are futures made only when they are used, the others
        // are polled in place: a `select!` over all of them, which built every branch's
        // future on each turn, cost 3 % of an unpipelined request's instructions.
        let listening = subscribed || relaying;
        let open = !end.closing && !backpressure;
        let mut monitor = ident.state.monitor.as_deref_mut().filter(|_| open);
        let pubsub = &mut subs.pubsub;
        // Boxed, as the two below: about 450 bytes that only subscribers use. A subscriber
        // pays an allocation per turn, beside the write each relayed message costs.
        let mut pubsub_event =
            listening.then(|| Box::pin(pubsub_event(pubsub, subscribed, relaying)));
        let paused_until = order.paused_until;
        let timed = paused_until.is_some() || close_deadline.is_some();
        // A paused or closing client's timer: about 500 bytes, a tokio `Sleep` among them.
        let registry = client.registry;
        let mut timer = timed.then(|| Box::pin(timer(registry, paused_until, close_deadline)));
        let (mut freed, mut last_reply) = flow.waits(client.guard, last_reply);
        poll_fn(move |cx| {
            // In this order: replies first, so they leave before more requests are
            // read; input last but for the signals and timers.
            if !in_flight.is_empty() && in_flight.poll_progress(cx).is_ready() {
                match last_reply.as_mut().map(|last| last.write(in_flight, conn)) {
                    Some(Ok(started)) => idle_timed |= started,
                    Some(Err(woken)) => return Poll::Ready(woken),
                    None => return Poll::Ready(Woken::Progress),
                }
            }
            let Conn {
                io,
                input,
                output,
                idle_timer,
                ..
            } = &mut *conn;
            if !output.is_empty() && !write_held {
                if let Poll::Ready(written) = Pin::new(&mut *io).poll_write(cx, output) {
                    return Poll::Ready(Woken::Wrote(written));
                }
            }
            if let Some(Poll::Ready(woken)) =
                pubsub_event.as_mut().map(|event| event.as_mut().poll(cx))
            {
                return Poll::Ready(woken);
            }
            if let Some(Poll::Ready(lines)) = monitor.as_mut().map(|feed| feed.poll_lines(cx)) {
                return Poll::Ready(Woken::Monitor(lines));
            }
            if can_read {
                if let Poll::Ready(read) = poll_read_input(io, input, cx) {
                    return Poll::Ready(Woken::Read(read));
                }
            }
            if let Poll::Ready(signal) = signals.as_mut().poll(cx) {
                return Poll::Ready(Woken::Signal(signal));
            }
            if let Some(Poll::Ready(woken)) = freed.as_mut().map(|freed| freed.as_mut().poll(cx)) {
                return Poll::Ready(woken);
            }
            if idle_timed && idle_timer.poll_expired(cx).is_ready() {
                return Poll::Ready(Woken::Deadline);
            }
            timer
                .as_mut()
                .map_or(Poll::Pending, |timer| timer.as_mut().poll(cx))
        })
    }
}

impl<'a> Flow<'a> {
    /// What the wait holds of the client's flow: for a client waiting for the process
    /// budget or a probation place, the wait for it; for the others, where the turn said so,
    /// what the last reply leaves from within the wait with.
    fn waits<'w>(
        &'w mut self,
        guard: &'w ClientGuard,
        last_reply: bool,
    ) -> (
        Option<Pin<Box<impl Future<Output = Woken> + use<'w, 'a>>>>,
        Option<LastReply<'w, 'a>>,
    ) {
        let gate = self.gate;
        if matches!(gate, Gate::Shared | Gate::Probation) {
            return (
                Some(Box::pin(gate_opened(self.budget.shared(), gate))),
                None,
            );
        }
        let output_limit = self.limits.output_limit;
        let idle_timeout = self.limits.idle_timeout;
        let budget = &mut self.budget;
        let budget = (!budget.settled_once_answered()).then_some(budget);
        let last_reply = last_reply.then_some(LastReply {
            budget,
            guard,
            output_limit,
            idle_timeout,
        });
        (None, last_reply)
    }
}

/// Writes the reply of a client's last request in flight from within the wait, which then
/// goes on waiting for the client's next request, instead of ending the wait for the turn
/// of the loop that would write it: at one request per client read, that turn was half of
/// every request's turns, and at a thousand clients it read a dozen cache lines of the
/// session (the limits, the flags, the buffers' resizers) that no other client's turn left
/// in the cache, to find nothing else to do.
///
/// Taken only where that turn would find nothing else to do (see `Session::turn`): the wait
/// reads the input, none is buffered, no timer but the idle timeout's starts or moves with
/// the reply (no soft limit, pause or drain), the client neither listens nor monitors, and
/// no transaction's locals wait for the reply. What the turn would still have done, it does:
/// count the bytes, note the activity, give back bookkeeping a deep pipeline grew, bring
/// the budget up to date (a first request's reply ends its probation), and with `timeout`
/// set, time the idle client from its reply on.
struct LastReply<'w, 'a> {
    /// The client's budget, when the reply changes it (see `ClientFlow::settled_once_answered`).
    budget: Option<&'w mut ClientFlow<'a>>,
    guard: &'w ClientGuard,
    output_limit: usize,
    /// `timeout`: once the reply is written, the wait also ends this long after it.
    idle_timeout: Option<std::time::Duration>,
}

impl LastReply<'_, '_> {
    /// After replies came in: `Ok` when the last one in flight was written whole and the
    /// wait goes on (`true`: it now ends at the idle timeout too); otherwise what ends the
    /// wait (`Progress`: the loop's turn writes).
    // Inlined into the wait, as it was before it returned a `Result`: called out of line,
    // it cost an unpipelined request 55-70 instructions (its large return value moved).
    #[inline]
    fn write(&mut self, in_flight: &mut Pipeline, conn: &mut Conn) -> Result<bool, Woken> {
        if in_flight.len() != 1 {
            return Err(Woken::Progress);
        }
        match write_lone_ready(in_flight, conn, self.guard, self.output_limit) {
            ControlFlow::Continue(Some(true)) => {}
            // Not written, or not all of it: what is left waits for the loop's turn.
            ControlFlow::Continue(_) => return Err(Woken::Progress),
            // The socket failed: what a write taking nothing ends in.
            ControlFlow::Break(()) => return Err(Woken::Wrote(Ok(0))),
        }
        in_flight.shrink_if_idle();
        if let Some(budget) = self.budget.as_mut() {
            budget.charge(in_flight.owed(0), Gate::Open);
        }
        // Answered: the client idles from its reply on, as the loop's turn would have
        // timed it.
        let idle_deadline = self.idle_timeout.map(|idle| conn.last_active + idle);
        Ok(conn.idle_timer.time(idle_deadline))
    }
}

thread_local! {
    /// Where a worker thread reads its clients' requests (allocated on first use).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Reads what the client sent into `input`, through the worker's scratch buffer: only the
/// bytes read are copied into `input`, so a client between requests holds an allocation the
/// size of what it sends at once, not a read buffer of its own (Redis 7.4's shared query
/// buffer does the same). That is most of what a thousand clients at one request each held,
/// and a large request costs one copy more than a read into `input` would.
fn poll_read_input(
    io: &mut ClientIo,
    input: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    SCRATCH.with_borrow_mut(|scratch| {
        if scratch.is_empty() {
            scratch.resize(READ_BUFFER, 0);
        }
        let mut buf = ReadBuf::new(scratch);
        ready!(Pin::new(io).poll_read(cx, &mut buf))?;
        input.extend_from_slice(buf.filled());
        Poll::Ready(Ok(buf.filled().len()))
    })
}

/// The next event of a client's subscriptions: it overflowed (looked at only while
/// `subscribed`) or a message or reason to close arrived (only while `relaying`).
async fn pubsub_event(pubsub: &mut PubSub, subscribed: bool, relaying: bool) -> Woken {
    let overflowed = pubsub.overflowed();
    tokio::select! {
        biased;
        () = overflowed, if subscribed => Woken::Overflowed,
        relay = pubsub.next_event(), if relaying => Woken::Relay(relay),
    }
}

/// Waits for the end or a change of the pause ending at `paused_until`, or for
/// `deadline`, whichever comes first; never returns when both are `None`.
async fn timer(
    registry: &Registry,
    paused_until: Option<Instant>,
    deadline: Option<Instant>,
) -> Woken {
    tokio::select! {
        biased;
        () = wait_pause(registry, paused_until), if paused_until.is_some() => Woken::PauseChanged,
        () = sleep_until(deadline), if deadline.is_some() => Woken::Deadline,
    }
}

/// Returns when what a client whose gate is `gate` waits for is free: the process budget's
/// room (`Gate::Shared`) or a probation place (`Gate::Probation`), at a release or at once
/// when it is free already.
async fn gate_opened(budget: &SharedBudget, gate: Gate) -> Woken {
    let probation = gate == Gate::Probation;
    // Made before the budget is looked at, so a release after the look wakes it.
    let mut released = pin!(if probation {
        budget.place_freed()
    } else {
        budget.freed()
    });
    poll_fn(|cx| {
        let called = released.as_mut().poll(cx).is_ready();
        match probation {
            true if called || budget.has_place() => Poll::Ready(Woken::PlaceFreed(called)),
            false if called || budget.has_room() => Poll::Ready(Woken::BudgetFreed),
            _ => Poll::Pending,
        }
    })
    .await
}

/// Whether the replies in `output` wait for the rest of their read, a round trip away, to
/// leave with it in one write (see `Pipeline::waits_for_its_read`).
// Inlined, as the pipeline's own: asked on every pass and every reply, it is a few
// comparisons, and as a call cost 17 instructions a time.
#[inline]
pub(super) fn waits_for_its_read(in_flight: &Pipeline, output: &BytesMut) -> bool {
    output.len() < HELD_OUTPUT && in_flight.waits_for_its_read()
}

/// Accounts for `n` bytes of the output written to the client, at the client's last
/// interaction.
pub(super) fn wrote(n: usize, conn: &mut Conn, guard: &ClientGuard) {
    conn.counted.sent(n);
    // All of it written (the usual case): emptied where it starts, the next replies are
    // appended without `BytesMut` first moving its start back (about 80 instructions of
    // an unpipelined request).
    if n == conn.output.len() {
        conn.output.clear();
    } else {
        conn.output.advance(n);
    }
    conn.active(guard);
}

impl Conn {
    /// The client was active now (a read or a write): idle time counts from here, and
    /// others see it within `ACTIVITY_GRAIN`.
    pub(super) fn active(&mut self, guard: &ClientGuard) {
        self.last_active = Instant::now();
        if self.last_active >= self.show_activity_at {
            guard.active_at(self.last_active.into_std());
            self.show_activity_at = self.last_active + ACTIVITY_GRAIN;
        }
    }
}

/// Returns when the pause ending at `end` ends or changes; never for `None`.
async fn wait_pause(registry: &Registry, end: Option<Instant>) {
    match end {
        Some(end) => registry.pause().wait(end).await,
        None => std::future::pending().await,
    }
}

/// Waits until `deadline`; never returns for `None` (the caller guards the branch anyway).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Half-closes the connection after the last reply, then discards input for a moment,
/// so unread client bytes do not turn the close into a reset.
async fn linger_close(io: &mut ClientIo) {
    let _ = io.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        while let Ok(n) = io.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}
