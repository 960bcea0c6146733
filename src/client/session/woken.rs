//! What a session does with what ended its wait: replies ready, input read, a signal
//! (kill, pause, reload), mail for its pub/sub or tracking, or a timer.

use std::ops::ControlFlow;

use bytes::Bytes;
use tokio::time::Instant;

use crate::protocol::FoldedName;
use crate::reply;

use super::super::local;
use super::super::pipeline::{Micros, Pipeline};
use super::super::pubsub::Relay;
use super::super::registry::{ClientGuard, Signal};
use super::super::stream::ClientIo;
use super::super::transaction::splice_local_answers;
use super::wait::{waits_for_its_read, wrote, Woken};
use super::{Conn, Session, DRAIN_GRACE};

impl Session<'_> {
    /// Handles what ended the wait; `Break` when the connection closes now.
    pub(super) fn on_woken(&mut self, woken: Woken) -> ControlFlow<()> {
        let conn = &mut self.conn;
        let guard = self.client.guard;
        match woken {
            Woken::Progress => return self.on_progress(),
            Woken::Wrote(Ok(n)) if n > 0 => wrote(n, conn, guard),
            Woken::Wrote(_) => return ControlFlow::Break(()),
            // A subscriber that stopped reading must not hold its messages forever.
            Woken::Overflowed => return ControlFlow::Break(()),
            Woken::Relay(relay) => match relay {
                // Behind the replies already queued: never ahead of its own confirmation.
                Relay::Push(message) => {
                    self.subs.shown.update(&self.subs.pubsub);
                    self.order.in_flight.push_ready(message);
                }
                Relay::Close => return ControlFlow::Break(()),
                Relay::Idle => {}
            },
            Woken::Monitor(Some(lines)) => self.order.in_flight.push_ready(lines),
            Woken::Monitor(None) => return ControlFlow::Break(()),
            Woken::Read(read) => return self.on_read(read),
            // CLIENT KILL from another client: closed at once, as Redis frees it.
            Woken::Signal(Signal::Kill) => {
                tracing::debug!(client = %conn.peer, "closing client killed by CLIENT KILL");
                return ControlFlow::Break(());
            }
            // The limits are read again at the top of the loop. A client nudged for idling
            // gives back its buffers (they are taken again when it next sends).
            Woken::Signal(Signal::Nudge) => {
                self.take_mail();
                let conn = &mut self.conn;
                if self.order.in_flight.is_empty() && self.order.held.is_none() {
                    conn.input_resizer.release_if_empty(&mut conn.input);
                    conn.output_resizer.release_if_empty(&mut conn.output);
                    self.order.in_flight.release_if_idle();
                }
            }
            Woken::Signal(Signal::Drain) => {
                self.end.draining = true;
                self.end.drain_until = Some(Instant::now() + DRAIN_GRACE);
            }
            // The process budget has room again: the loop looks at the gate.
            Woken::BudgetFreed => self.flow.budget.woken(),
            Woken::PlaceFreed(called) => self.flow.budget.place_woken(called),
            // The pause ended or changed: the held request looks again.
            Woken::PauseChanged => self.order.paused_until = None,
            // The idle timeout's is told here, from the client as it is now (the wait may
            // have answered its last request and started the clock); the top of the loop
            // tells the others.
            Woken::Deadline => {
                if self
                    .idle_deadline()
                    .is_some_and(|deadline| Instant::now() >= deadline)
                {
                    tracing::debug!(client = %self.conn.peer, "closing idle client");
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Replies came in: those in order go to the output, and are written at once while
    /// the socket takes them.
    fn on_progress(&mut self) -> ControlFlow<()> {
        self.splice_exec_locals();
        let Session {
            client,
            conn,
            flow,
            order,
            ..
        } = self;
        let in_flight = &mut order.in_flight;
        let output_limit = flow.limits.output_limit;
        if conn.output.is_empty()
            && write_lone_ready(in_flight, conn, client.guard, output_limit)?.is_some()
        {
            return ControlFlow::Continue(());
        }
        // Everything answered, in order, leaves in the same write.
        in_flight.write_ready(&mut conn.output);
        conn.output_resizer.note(&conn.output);
        let held = in_flight.owed(conn.output.len()).held;
        if output_limit > 0 && held > output_limit {
            tracing::info!(client = %conn.peer, bytes = held, "closing client over its output buffer limit");
            crate::metrics::client_output_limit_disconnect();
            return ControlFlow::Break(());
        }
        // Written at once while the socket takes it: one turn of this loop less per
        // reply than waiting for the write branch of the wait.
        if !conn.output.is_empty() && !waits_for_its_read(in_flight, &conn.output) {
            let written = try_send(&mut conn.io, &conn.output)?;
            if written > 0 {
                wrote(written, conn, client.guard);
            }
        }
        ControlFlow::Continue(())
    }

    /// Once the reply of an EXEC with queued connection commands is in, answers those
    /// commands and puts their answers in their places.
    fn splice_exec_locals(&mut self) {
        let Some((seq, _)) = &self.tx.exec_locals else {
            return;
        };
        let seq = *seq;
        let Session {
            client,
            order,
            tx,
            ident,
            ..
        } = self;
        let Some(reply) = order.in_flight.ready_reply_mut(seq) else {
            return;
        };
        let block_reply = std::mem::take(reply);
        let (_, locals) = tx.exec_locals.take().unwrap_or_default();
        *reply = splice_local_answers(block_reply, locals, |request| {
            let name = FoldedName::of(request);
            local::answer(
                &mut ident.state,
                client.registry,
                &ident.snapshot,
                request,
                &name,
            )
            .map(|answer| answer.reply)
            .unwrap_or_else(|| reply::error("ERR proxy: no reply"))
        });
        ident.forget_if_switched();
    }

    /// Invalidations (client-side caching) posted to the client, behind every reply
    /// already due.
    fn take_mail(&mut self) {
        for message in self.client.guard.take_mail() {
            self.order.in_flight.push_ready(message);
        }
    }

    /// After a read, the mail posted since the last look: a client that keeps sending would
    /// otherwise leave the nudge that posted it unpolled. While nothing was posted to any
    /// client, one load of a count they all share, not of the client's own entry.
    fn take_mail_if_posted(&mut self) {
        if let Some(posted) = self.client.mail_seen.moved(self.client.registry) {
            self.client.mail_seen.mark(posted);
            self.take_mail();
        }
    }

    /// The client sent bytes, closed its side, or its connection failed.
    fn on_read(&mut self, read: std::io::Result<usize>) -> ControlFlow<()> {
        let conn = &mut self.conn;
        match read {
            // As Redis, which frees a blocked client or a subscriber that hangs up.
            Ok(0) if self.client.blocked.current().is_some() || self.subs.pubsub.is_used() => {
                return ControlFlow::Break(())
            }
            Ok(0) => {
                self.end.peer_closed = true;
                return ControlFlow::Continue(());
            }
            Err(_) => return ControlFlow::Break(()),
            Ok(n) => conn.counted.received(n),
        }
        self.take_mail_if_posted();
        let conn = &mut self.conn;
        conn.active(self.client.guard);
        conn.pass_started = Some(Micros::of(conn.last_active.into_std()));
        conn.input_resizer.note(&conn.input);
        ControlFlow::Continue(())
    }
}

/// Takes the reply next in order when it is the only one ready, and writes it from where it
/// was read (the client's output buffer is a cache line more per request, out of the cache at
/// a thousand clients), unless it must wait in that buffer: over the output limit, or for the
/// rest of its read. Called with the output buffer empty. `Break` when the connection failed;
/// otherwise `None` when no reply was written (none was the only one ready, or it waits in the
/// output buffer), else whether all of it was.
pub(super) fn write_lone_ready(
    in_flight: &mut Pipeline,
    conn: &mut Conn,
    guard: &ClientGuard,
    output_limit: usize,
) -> ControlFlow<(), Option<bool>> {
    let Some(reply) = in_flight.take_lone_ready() else {
        return ControlFlow::Continue(None);
    };
    let over = output_limit > 0 && in_flight.owed(reply.len()).held > output_limit;
    if over || waits_for_its_read(in_flight, &conn.output) {
        conn.output.extend_from_slice(&reply);
        return ControlFlow::Continue(None);
    }
    write_lone(&reply, conn, guard).map_continue(Some)
}

/// Writes `reply`, the only one due, as it is; what the socket does not take waits in the
/// output buffer. `Break` when the connection failed; otherwise whether all of it was
/// written.
fn write_lone(reply: &Bytes, conn: &mut Conn, guard: &ClientGuard) -> ControlFlow<(), bool> {
    if reply.is_empty() {
        return ControlFlow::Continue(true);
    }
    let written = try_send(&mut conn.io, reply)?;
    if written > 0 {
        conn.counted.sent(written);
        conn.active(guard);
    }
    if written < reply.len() {
        conn.output.extend_from_slice(&reply[written..]);
        conn.output_resizer.note(&conn.output);
        return ControlFlow::Continue(false);
    }
    ControlFlow::Continue(true)
}

/// What the socket takes of `buf` now, 0 when it takes nothing; `Break` when the connection
/// failed.
fn try_send(io: &mut ClientIo, buf: &[u8]) -> ControlFlow<(), usize> {
    match io.try_write(buf) {
        Ok(n) if n > 0 => ControlFlow::Continue(n),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => ControlFlow::Continue(0),
        _ => ControlFlow::Break(()),
    }
}
