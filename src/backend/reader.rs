//! The reader of one node connection: cuts complete reply frames off its read buffer and
//! hands them to the in-flight FIFO's entries in order, and notices a node that stops
//! answering (`backend.read_timeout_ms`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;

use super::conn::WriterSide;
use super::fifo::{InFlight, Pending};
use super::{BackendError, ConnOptions, NodeReader};
use crate::buffer::Resizer;
use crate::protocol::{ProtocolError, ReplyScanner};
use crate::route::NodeAddr;

/// The read buffer grows by this much when less than a quarter of it is free.
const READ_CHUNK: usize = 64 * 1024;

/// Reads replies until the connection fails, then fails whatever is still in flight and
/// wakes the writer, which closes the socket (a node that stopped answering must not keep
/// a half-open connection until the next request for it comes).
pub(super) async fn read_replies(
    // Counts the connection as open while this task lives (it ends or is aborted with it).
    _counted: crate::metrics::BackendConnection,
    read: NodeReader,
    buf: BytesMut,
    in_flight: Arc<InFlight>,
    writer: WriterSide,
    addr: NodeAddr,
    opts: ConnOptions,
) {
    // Entries taken off the FIFO whose replies have not all arrived (a batch's frames can
    // straddle reads); they fail with the rest when the connection ends.
    let mut owners = VecDeque::new();
    let reason = read_loop(read, buf, &in_flight, &mut owners, &addr, &opts).await;
    writer.lost();
    tracing::warn!(addr = %addr, error = %reason, "backend connection lost");
    let reason = format!("{addr}: {reason}");
    in_flight.close_and_fail(&reason);
    let error = BackendError::Lost(reason);
    for owner in owners {
        owner.fail(&error);
    }
    writer.wake();
}

/// Notices a node that stops answering: a hung process or a silent network keeps the TCP
/// connection open, and everything sent on it would wait as long as TCP retransmits. It
/// checks every half `timeout` (a timer per read would cost the hot path), so a node that
/// sent nothing for between `timeout` and 1.5 x `timeout` while replies were due counts as
/// stalled.
struct Watchdog {
    timeout: Duration,
    ticks: tokio::time::Interval,
    /// Consecutive checks that found replies due and nothing read since the one before.
    quiet_checks: u32,
}

impl Watchdog {
    fn new(timeout: Duration) -> Watchdog {
        let mut ticks = tokio::time::interval((timeout / 2).max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Watchdog {
            timeout,
            ticks,
            quiet_checks: 0,
        }
    }

    /// Reads into `buf`, or returns why the node counts as stalled.
    async fn read(
        &mut self,
        read: &mut NodeReader,
        buf: &mut BytesMut,
        replies_due: impl Fn() -> bool,
    ) -> Result<std::io::Result<usize>, String> {
        loop {
            tokio::select! {
                biased;
                // Cancel-safe: a tick that wins has read nothing.
                result = read.read_buf(buf) => {
                    self.quiet_checks = 0;
                    return Ok(result);
                }
                _ = self.ticks.tick() => {
                    if !replies_due() {
                        self.quiet_checks = 0;
                        continue;
                    }
                    // The first check may come just after the request was written; three
                    // in a row span at least `timeout`.
                    self.quiet_checks += 1;
                    if self.quiet_checks >= 3 {
                        return Err(format!("no reply within {} ms", self.timeout.as_millis()));
                    }
                }
            }
        }
    }
}

/// Returns why reading stopped.
async fn read_loop(
    mut read: NodeReader,
    mut buf: BytesMut,
    in_flight: &InFlight,
    owners: &mut VecDeque<Pending>,
    addr: &NodeAddr,
    opts: &ConnOptions,
) -> String {
    let mut scanner = ReplyScanner::new(opts.limits);
    let mut watchdog = opts.read_timeout.map(Watchdog::new);
    let mut frames: Vec<Bytes> = Vec::new();
    let mut buf_resizer = Resizer::<READ_CHUNK>::new();
    loop {
        if let Err(error) = take_frames(&mut scanner, &mut buf, &mut frames, addr) {
            return format!("unreadable reply: {error}");
        }
        if let Err(reason) = deliver(&mut frames, owners, in_flight, addr) {
            return reason.to_string();
        }
        buf_resizer.shrink_if_idle(&mut buf);
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        buf_resizer.note(&buf);
        let result = match watchdog.as_mut() {
            None => read.read_buf(&mut buf).await,
            Some(watchdog) => {
                let replies_due = || !owners.is_empty() || !in_flight.is_empty();
                match watchdog.read(&mut read, &mut buf, replies_due).await {
                    Ok(result) => result,
                    Err(reason) => {
                        crate::metrics::backend_read_timeout(addr);
                        return reason;
                    }
                }
            }
        };
        match result {
            Ok(0) => return "connection closed by the node".to_string(),
            Ok(_) => {}
            Err(error) => return format!("read failed: {error}"),
        }
    }
}

/// Moves every whole reply at the front of `buf` to `frames`, skipping RESP3 pushes (an
/// invalidation, say: the reply to no request).
#[inline(always)]
fn take_frames(
    scanner: &mut ReplyScanner,
    buf: &mut BytesMut,
    frames: &mut Vec<Bytes>,
    addr: &NodeAddr,
) -> Result<(), ProtocolError> {
    while let Some(len) = scanner.next_frame_len(buf)? {
        let frame = buf.split_to(len).freeze();
        if frame.first() == Some(&b'>') {
            tracing::debug!(addr = %addr, "skipped push frame");
            continue;
        }
        frames.push(frame);
    }
    Ok(())
}

/// Hands `frames`, in order, to the requests that own them: the entries of `owners`, then
/// of `in_flight`, moved straight into `owners`. A batch takes as many as it has requests;
/// entries left over (or a batch whose frames straddle reads) wait in `owners` for the next
/// read. `Err` when a reply has no request.
// Not through a vector in between: at a thousand clients a vector of hundreds of entries is
// out of the cache by the next read; the extra move cost about 3.5 last-level cache misses
// per request (cachegrind, GET at 1,000 clients, when an entry took most of two lines).
#[inline(always)]
fn deliver(
    frames: &mut Vec<Bytes>,
    owners: &mut VecDeque<Pending>,
    in_flight: &InFlight,
    addr: &NodeAddr,
) -> Result<(), &'static str> {
    let mut ready = frames.drain(..);
    while ready.len() > 0 {
        if owners.is_empty() {
            in_flight.pop_into(ready.len(), owners);
            if owners.is_empty() {
                return Err("reply without a request");
            }
        }
        let Some(owner) = owners.front_mut() else {
            continue;
        };
        if let Pending::Batch(batch) = owner {
            batch.deliver_from(&mut ready);
            if !batch.is_done() {
                continue;
            }
        }
        match owners.pop_front() {
            Some(Pending::Reply(sender)) => {
                if let Some(frame) = ready.next() {
                    // The caller may have given up; its reply is simply dropped.
                    let _ = sender.send(Ok(frame));
                }
            }
            Some(Pending::AskingAck) => {
                if !ready.next().is_some_and(|frame| frame.starts_with(b"+OK")) {
                    tracing::debug!(addr = %addr, "ASKING not acknowledged");
                }
            }
            Some(Pending::Batch(_)) | None => {}
        }
    }
    Ok(())
}
