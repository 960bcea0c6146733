//! One pipelined connection to one node, shared by many callers.
//!
//! A queue feeds a writer task that takes everything waiting, records the expected
//! replies in the in-flight FIFO, then writes the whole batch with one write. Before taking
//! the batch it yields once, so requests of other clients that are ready join it. A reader task
//! per TCP connection cuts complete reply frames off its read buffer and hands them to the
//! FIFO's entries in order. A queue entry is either one call (its reply goes back over a
//! oneshot) or a client's batch (its replies go to the client's sink, see `sink`). The
//! writer connects lazily, and after a failed connect it fails
//! requests fast (`NotSent`) until a capped backoff has passed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::fifo::{InFlight, Pending, ReplySender};
use super::sink::Batch;
use super::{handshake, BackendError, ConnOptions};
use crate::protocol::{Limits, ReplyScanner};
use crate::route::NodeAddr;

/// Most queue entries written in one batch (one write).
const MAX_BATCH: usize = 512;
/// Written just before a request sent with `asking`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// Wait before the first reconnect attempt after a failure; doubles up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The read buffer grows by this much when less than a quarter of it is free.
const READ_CHUNK: usize = 64 * 1024;

/// A cheap-to-clone handle to one pipelined connection to a node. Dropping every handle
/// stops the connection's tasks and closes the socket.
#[derive(Clone)]
pub struct NodeConn {
    shared: Arc<Shared>,
}

struct Shared {
    addr: NodeAddr,
    // Unbounded: what waits here is bounded by the callers, each client session keeping
    // at most `max_pipeline` requests in flight, and a send that cannot block lets a
    // session hand over a batch without suspending between its requests.
    queue: mpsc::UnboundedSender<Outbound>,
    connected: Arc<AtomicBool>,
}

/// What waits for the writer.
enum Outbound {
    /// One request whose caller awaits its reply.
    Call {
        request: Bytes,
        asking: bool,
        reply: ReplySender,
    },
    /// Requests of one client, replying to its sink.
    Batch(Batch),
}

impl Outbound {
    /// Whether every caller gave up before the write, so nothing needs writing.
    fn is_abandoned(&self) -> bool {
        match self {
            Outbound::Call { reply, .. } => reply.is_closed(),
            Outbound::Batch(batch) => batch.replies.is_abandoned(),
        }
    }

    fn write_into(&self, out: &mut BytesMut) {
        match self {
            Outbound::Call {
                request, asking, ..
            } => {
                if *asking {
                    out.extend_from_slice(ASKING);
                }
                out.extend_from_slice(request);
            }
            Outbound::Batch(batch) => out.extend_from_slice(&batch.requests),
        }
    }

    /// Records the replies this entry expects, in write order.
    fn expect_replies(self, pending: &mut VecDeque<Pending>) {
        match self {
            Outbound::Call { asking, reply, .. } => {
                if asking {
                    pending.push_back(Pending::AskingAck);
                }
                pending.push_back(Pending::Reply(reply));
            }
            Outbound::Batch(batch) => pending.push_back(Pending::Batch(batch.replies)),
        }
    }

    fn fail(self, error: &BackendError) {
        match self {
            Outbound::Call { reply, .. } => {
                let _ = reply.send(Err(error.clone()));
            }
            Outbound::Batch(mut batch) => batch.replies.fail(error),
        }
    }
}

impl std::fmt::Debug for NodeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConn")
            .field("addr", &self.shared.addr)
            .field("connected", &self.is_connected())
            .finish()
    }
}

impl NodeConn {
    /// Starts the connection's writer task (it connects on first use). Must be called
    /// from within a Tokio runtime.
    pub fn spawn(addr: NodeAddr, opts: ConnOptions) -> NodeConn {
        let (queue, requests) = mpsc::unbounded_channel();
        let connected = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            addr: addr.clone(),
            opts,
            requests,
            connected: connected.clone(),
            live: None,
            backoff: BACKOFF_MIN,
            retry_at: None,
            last_error: String::new(),
        };
        tokio::spawn(writer.run());
        NodeConn {
            shared: Arc::new(Shared {
                addr,
                queue,
                connected,
            }),
        }
    }

    /// Sends one complete RESP request (raw bytes) and returns the raw bytes of its reply
    /// frame. With `asking`, `ASKING` is written right before it in the same write and its
    /// reply is consumed here. Error replies from the node are replies, not errors.
    pub async fn call(&self, request: Bytes, asking: bool) -> Result<Bytes, BackendError> {
        let (reply, answer) = oneshot::channel();
        let outbound = Outbound::Call {
            request,
            asking,
            reply,
        };
        if self.shared.queue.send(outbound).is_err() {
            return Err(BackendError::NotSent(format!(
                "{}: connection task stopped",
                self.shared.addr
            )));
        }
        // Every path in the writer and reader answers explicitly; a dropped sender means
        // the connection went away with the request possibly written.
        answer.await.unwrap_or_else(|_| {
            Err(BackendError::Lost(format!(
                "{}: connection closed before the reply",
                self.shared.addr
            )))
        })
    }

    /// Queues a client's batch; its replies (or `NotSent`/`Lost`) reach the batch's sink.
    pub fn send_batch(&self, batch: Batch) {
        if let Err(returned) = self.shared.queue.send(Outbound::Batch(batch)) {
            returned.0.fail(&BackendError::NotSent(format!(
                "{}: connection task stopped",
                self.shared.addr
            )));
        }
    }

    /// Whether `self` and `other` are handles to the same connection.
    pub fn same(&self, other: &NodeConn) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether a connection to the node is currently established and authenticated.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// The node this handle talks to.
    pub fn addr(&self) -> &NodeAddr {
        &self.shared.addr
    }
}

/// An established connection: its write half, its FIFO and its reader task.
struct Live {
    write: OwnedWriteHalf,
    in_flight: Arc<InFlight>,
    reader: JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.reader.abort();
        self.in_flight
            .close_and_fail("connection closed before the reply");
    }
}

/// Owns the request queue and the current connection.
struct Writer {
    addr: NodeAddr,
    opts: ConnOptions,
    requests: mpsc::UnboundedReceiver<Outbound>,
    connected: Arc<AtomicBool>,
    live: Option<Live>,
    backoff: Duration,
    retry_at: Option<Instant>,
    last_error: String,
}

impl Writer {
    async fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut out = BytesMut::with_capacity(READ_CHUNK);
        // Ends when every handle is gone; dropping `self.live` then closes the socket.
        while self.requests.recv_many(&mut batch, MAX_BATCH).await > 0 {
            if batch.len() < MAX_BATCH {
                // The first request wakes this task at once (the scheduler runs a task just
                // woken next), which would make one write per request. Yielding lets the
                // client sessions that are ready run first, so their requests join this
                // write: one syscall for many requests.
                tokio::task::yield_now().await;
                while batch.len() < MAX_BATCH {
                    match self.requests.try_recv() {
                        Ok(item) => batch.push(item),
                        Err(_) => break,
                    }
                }
            }
            // A caller that gave up before its request was written needs no write.
            batch.retain(|item: &Outbound| !item.is_abandoned());
            if !batch.is_empty() {
                self.write_batch(&mut batch, &mut out).await;
            }
            batch.clear();
        }
    }

    /// Writes `batch` (emptying it) on the live connection, connecting first if needed.
    async fn write_batch(&mut self, batch: &mut Vec<Outbound>, out: &mut BytesMut) {
        out.clear();
        for item in batch.iter() {
            item.write_into(out);
        }
        // A connection found dead before anything was written gets one replacement.
        for _ in 0..2 {
            if self
                .live
                .as_ref()
                .is_none_or(|live| live.in_flight.is_closed())
            {
                self.live = None;
                if let Err(reason) = self.connect().await {
                    let reason = format!("{}: {reason}", self.addr);
                    fail_not_sent(batch.drain(..), &reason);
                    // Everyone already queued would meet the same failure: answer now.
                    while let Ok(item) = self.requests.try_recv() {
                        fail_not_sent(std::iter::once(item), &reason);
                    }
                    return;
                }
            }
            let Some(live) = self.live.as_mut() else {
                continue;
            };
            let recorded = live.in_flight.push_with(|pending| {
                for item in batch.drain(..) {
                    item.expect_replies(pending);
                }
            });
            if !recorded {
                continue;
            }
            if let Err(error) = live.write.write_all(out).await {
                tracing::warn!(addr = %self.addr, %error, "backend write failed");
                live.in_flight
                    .close_and_fail(&format!("{}: write failed: {error}", self.addr));
                self.connected.store(false, Ordering::Relaxed);
                self.live = None;
            }
            return;
        }
        fail_not_sent(
            batch.drain(..),
            &format!("{}: connection unusable", self.addr),
        );
    }

    /// Opens a new connection unless a recent failure is still backing off.
    async fn connect(&mut self) -> Result<(), String> {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Err(format!("{} (reconnect backing off)", self.last_error));
        }
        match handshake::connect(&self.addr, &self.opts).await {
            Ok((stream, leftover)) => {
                let (read, write) = stream.into_split();
                let in_flight = Arc::new(InFlight::default());
                let reader = tokio::spawn(read_replies(
                    crate::metrics::BackendConnection::opened(&self.addr),
                    read,
                    leftover,
                    in_flight.clone(),
                    self.connected.clone(),
                    self.addr.clone(),
                    self.opts.limits,
                ));
                self.connected.store(true, Ordering::Relaxed);
                self.backoff = BACKOFF_MIN;
                self.retry_at = None;
                self.live = Some(Live {
                    write,
                    in_flight,
                    reader,
                });
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(addr = %self.addr, error = %reason, "backend connect failed");
                crate::metrics::backend_connect_error(&self.addr);
                self.connected.store(false, Ordering::Relaxed);
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                self.last_error.clone_from(&reason);
                Err(reason)
            }
        }
    }
}

fn fail_not_sent(items: impl Iterator<Item = Outbound>, reason: &str) {
    let error = BackendError::NotSent(reason.to_string());
    for item in items {
        item.fail(&error);
    }
}

/// Reads replies until the connection fails, then fails whatever is still in flight.
async fn read_replies(
    // Counts the connection as open while this task lives (it ends or is aborted with it).
    _counted: crate::metrics::BackendConnection,
    read: OwnedReadHalf,
    buf: BytesMut,
    in_flight: Arc<InFlight>,
    connected: Arc<AtomicBool>,
    addr: NodeAddr,
    limits: Limits,
) {
    // Entries taken off the FIFO whose replies have not all arrived (a batch's frames can
    // straddle reads); they fail with the rest when the connection ends.
    let mut owners = VecDeque::new();
    let reason = read_loop(read, buf, &in_flight, &mut owners, &addr, limits).await;
    connected.store(false, Ordering::Relaxed);
    tracing::warn!(addr = %addr, error = %reason, "backend connection lost");
    let reason = format!("{addr}: {reason}");
    in_flight.close_and_fail(&reason);
    let error = BackendError::Lost(reason);
    for owner in owners {
        owner.fail(&error);
    }
}

/// Returns why reading stopped.
async fn read_loop(
    mut read: OwnedReadHalf,
    mut buf: BytesMut,
    in_flight: &InFlight,
    owners: &mut VecDeque<Pending>,
    addr: &NodeAddr,
    limits: Limits,
) -> String {
    let mut scanner = ReplyScanner::new(limits);
    let mut frames: Vec<Bytes> = Vec::new();
    let mut popped: Vec<Pending> = Vec::new();
    loop {
        loop {
            match scanner.next_frame_len(&buf) {
                Ok(Some(len)) => {
                    let frame = buf.split_to(len).freeze();
                    if frame.first() == Some(&b'>') {
                        // RESP3 push (e.g. invalidation): not the reply to any request.
                        tracing::debug!(addr = %addr, "skipped push frame");
                        continue;
                    }
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(error) => return format!("unreadable reply: {error}"),
            }
        }
        let mut ready = frames.drain(..);
        while ready.len() > 0 {
            if owners.is_empty() {
                // Entries taken here beyond these frames (or a batch whose frames straddle
                // reads) wait in `owners` for the next read.
                in_flight.pop_into(ready.len(), &mut popped);
                owners.extend(popped.drain(..));
                if owners.is_empty() {
                    return "reply without a request".to_string();
                }
            }
            let Some(owner) = owners.front_mut() else {
                continue;
            };
            match owner {
                Pending::Batch(batch) => {
                    batch.deliver_from(&mut ready);
                    if !batch.is_done() {
                        continue;
                    }
                }
                Pending::Reply(_) | Pending::AskingAck => {}
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
        drop(ready);
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match read.read_buf(&mut buf).await {
            Ok(0) => return "connection closed by the node".to_string(),
            Ok(_) => {}
            Err(error) => return format!("read failed: {error}"),
        }
    }
}
