//! One pipelined connection to one node, shared by many callers.
//!
//! Callers append their requests to the connection's outbox; a writer task takes everything
//! waiting, records the expected replies in the in-flight FIFO, then writes it all with one
//! write. Before that it yields once, so requests of other clients that are ready join the
//! write: one syscall for many requests. When the outbox is full (see `outbox`), the
//! caller that filled it writes it at once instead, so a burst of pipelined clients
//! reaches the node in a few writes that the node starts on while the proxy still reads
//! the rest of the burst, rather than in one write after the whole burst was read. Every write happens under the outbox's lock, from the front of its unwritten
//! bytes, so requests reach the node in the order they were queued. A reader task per TCP
//! connection (see `reader`) cuts complete reply frames off its read buffer and hands them
//! to the FIFO's entries in order. A queue entry is either one call (its reply goes back
//! over a oneshot) or a client's batch (its replies go to the client's sink, see `sink`).
//! The writer connects lazily, and after a failed connect it fails requests fast
//! (`NotSent`) until a capped backoff has passed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::fifo::InFlight;
use super::outbox::{Flushed, Link, Outbound, Outbox};
use super::sink::Batch;
use super::{handshake, BackendError, ConnOptions, NodeWriter};
use crate::buffer::Resizer;
use crate::route::NodeAddr;

/// Wait before the first reconnect attempt after a failure; doubles up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The outbox's usual capacity, to which it returns after a burst of large requests.
pub(super) const OUTBOX_CAPACITY: usize = 64 * 1024;

/// A cheap-to-clone handle to one pipelined connection to a node. Dropping every handle
/// stops the connection's tasks and closes the socket.
#[derive(Clone)]
pub struct NodeConn {
    shared: Arc<Shared>,
}

struct Shared {
    addr: NodeAddr,
    channel: Arc<Channel>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle is gone: the writer writes what is queued, then ends.
        self.channel.lock().closed = true;
        self.channel.wake.notify_one();
    }
}

/// What the handles and the writer task share.
struct Channel {
    // Unbounded: what waits here is bounded by the callers, each client session keeping
    // at most `max_pipeline` requests in flight, and a queue that cannot block lets a
    // session hand over a batch without suspending between its requests.
    outbox: Mutex<Outbox>,
    /// Wakes the writer task when the queue gets its first entry, a write is blocked, or
    /// the last handle is gone.
    wake: Notify,
    /// Whether a connection is established and authenticated (see `NodeConn::is_connected`).
    connected: AtomicBool,
}

impl Channel {
    fn lock(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
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
        let channel = Arc::new(Channel {
            outbox: Mutex::new(Outbox::default()),
            wake: Notify::new(),
            connected: AtomicBool::new(false),
        });
        let writer = Writer {
            addr: addr.clone(),
            opts,
            channel: channel.clone(),
            backoff: BACKOFF_MIN,
            retry_at: None,
            last_error: String::new(),
            linked: false,
        };
        tokio::spawn(writer.run());
        NodeConn {
            shared: Arc::new(Shared { addr, channel }),
        }
    }

    /// Sends one complete RESP request (raw bytes) and returns the raw bytes of its reply
    /// frame. With `asking`, `ASKING` is written right before it in the same write and its
    /// reply is consumed here. Error replies from the node are replies, not errors.
    pub async fn call(&self, request: Bytes, asking: bool) -> Result<Bytes, BackendError> {
        self.call_written(request, asking, false).await
    }

    /// Like [`NodeConn::call`], but on an established connection the caller writes the
    /// request itself, at once, rather than the writer task after it yields for others'
    /// requests to join: for a connection of one client's own, whose blocking command must
    /// reach the node before what other clients send after it.
    pub async fn call_at_once(&self, request: Bytes, asking: bool) -> Result<Bytes, BackendError> {
        self.call_written(request, asking, true).await
    }

    #[inline]
    async fn call_written(
        &self,
        request: Bytes,
        asking: bool,
        at_once: bool,
    ) -> Result<Bytes, BackendError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(
            Outbound::Call {
                request,
                asking,
                reply,
            },
            at_once,
        );
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
        self.enqueue(Outbound::Batch(batch), false);
    }

    /// Queues `item` for the writer, or writes the queue now once it is full
    /// ([`FLUSH_BYTES`] or [`FLUSH_REQUESTS`]) or when `at_once`.
    #[inline]
    fn enqueue(&self, item: Outbound, at_once: bool) {
        let shared = &*self.shared;
        let mut outbox = shared.channel.lock();
        let first = outbox.queued.is_empty();
        outbox.queue(item);
        let wake = if (at_once || outbox.is_full()) && outbox.link.is_some() {
            // A blocked write or a lost connection is the writer's to finish.
            !matches!(
                outbox.flush(&shared.addr, &shared.channel.connected),
                Flushed::All
            )
        } else {
            first
        };
        drop(outbox);
        if wake {
            shared.channel.wake.notify_one();
        }
    }

    /// Whether `self` and `other` are handles to the same connection.
    pub fn same(&self, other: &NodeConn) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Whether a connection to the node is currently established and authenticated.
    pub fn is_connected(&self) -> bool {
        self.shared.channel.connected.load(Ordering::Relaxed)
    }

    /// The node this handle talks to.
    pub fn addr(&self) -> &NodeAddr {
        &self.shared.addr
    }

    /// The local address of the established connection (the node shows it as the
    /// client's `addr=`); `None` while not connected.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        let outbox = self.shared.channel.lock();
        outbox.link.as_ref()?.write.local_addr().ok()
    }
}

/// What the writer does next, decided under the outbox's lock and done without it.
enum Next {
    /// Wait for more requests.
    Idle,
    /// Wait until the socket takes more bytes.
    Writable(Arc<NodeWriter>),
    /// Open a connection for what is queued.
    Connect,
    /// Every handle is gone and everything queued is written.
    Stop,
}

/// Connects, and writes whatever the callers did not write themselves.
struct Writer {
    addr: NodeAddr,
    opts: ConnOptions,
    channel: Arc<Channel>,
    backoff: Duration,
    retry_at: Option<Instant>,
    last_error: String,
    /// Whether a connection was ever established (see `ConnOptions::reconnect`).
    linked: bool,
}

impl Writer {
    async fn run(mut self) {
        loop {
            self.channel.wake.notified().await;
            if !self.channel.lock().is_full() {
                // The first request wakes this task at once (the scheduler runs a task just
                // woken next), which would make one write per request. Yielding lets the
                // client sessions that are ready run first, so their requests join this
                // write: one syscall for many requests.
                tokio::task::yield_now().await;
            }
            // A connection found dead before anything was written gets one replacement.
            let mut connects = 0;
            loop {
                let next = {
                    let mut outbox = self.channel.lock();
                    if outbox
                        .link
                        .as_ref()
                        .is_some_and(|link| link.in_flight.is_closed())
                    {
                        outbox.link = None;
                    }
                    match outbox.flush(&self.addr, &self.channel.connected) {
                        Flushed::Blocked(write) => Next::Writable(write),
                        Flushed::NoLink if !outbox.queued.is_empty() => Next::Connect,
                        Flushed::All | Flushed::NoLink if outbox.closed => Next::Stop,
                        Flushed::All | Flushed::NoLink => Next::Idle,
                    }
                };
                match next {
                    Next::Idle => break,
                    Next::Stop => {
                        // Dropping the link closes the socket and fails what is in flight.
                        self.channel.lock().link = None;
                        return;
                    }
                    Next::Writable(write) => {
                        if let Err(error) = write.writable().await {
                            tracing::warn!(addr = %self.addr, %error, "backend write failed");
                            self.drop_link(&format!("{}: write failed: {error}", self.addr));
                        }
                    }
                    // After a failure the loop goes round once more: the queue is empty
                    // then (idle, or the end if every handle is gone) unless more came.
                    Next::Connect if connects == 2 => {
                        self.fail_queued(&format!("{}: connection unusable", self.addr));
                    }
                    Next::Connect => {
                        connects += 1;
                        if let Err(reason) = self.connect().await {
                            self.fail_queued(&format!("{}: {reason}", self.addr));
                        }
                    }
                }
            }
        }
    }

    /// Fails everything queued as not sent: it would meet the same failure.
    fn fail_queued(&self, reason: &str) {
        let queued = {
            let mut outbox = self.channel.lock();
            outbox.queued_bytes = 0;
            outbox.queued_requests = 0;
            std::mem::take(&mut outbox.queued)
        };
        let error = BackendError::NotSent(reason.to_string());
        for item in queued {
            item.fail(&error);
        }
    }

    /// Drops the connection after a failed write: what it had in flight is lost.
    fn drop_link(&self, reason: &str) {
        let link = self.channel.lock().link.take();
        if let Some(link) = link {
            link.in_flight.close_and_fail(reason);
        }
        self.channel.connected.store(false, Ordering::Relaxed);
    }

    /// Opens a new connection unless a recent failure is still backing off.
    async fn connect(&mut self) -> Result<(), String> {
        if self.linked && !self.opts.reconnect {
            return Err("connection closed, and this one is not reopened".to_string());
        }
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Err(format!("{} (reconnect backing off)", self.last_error));
        }
        match handshake::connect(&self.addr, &self.opts).await {
            Ok((stream, leftover)) => {
                let (read, write) = stream.into_split();
                let in_flight = Arc::new(InFlight::default());
                let reader = tokio::spawn(super::reader::read_replies(
                    crate::metrics::BackendConnection::opened(&self.addr),
                    read,
                    leftover,
                    in_flight.clone(),
                    WriterSide(Arc::downgrade(&self.channel)),
                    self.addr.clone(),
                    self.opts.clone(),
                ));
                self.channel.connected.store(true, Ordering::Relaxed);
                self.linked = true;
                self.backoff = BACKOFF_MIN;
                self.retry_at = None;
                self.channel.lock().link = Some(Link {
                    write: Arc::new(write),
                    in_flight,
                    reader,
                    unwritten: BytesMut::with_capacity(OUTBOX_CAPACITY),
                    unwritten_resizer: Resizer::new(),
                });
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(addr = %self.addr, error = %reason, "backend connect failed");
                crate::metrics::backend_connect_error(&self.addr);
                self.channel.connected.store(false, Ordering::Relaxed);
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                self.last_error.clone_from(&reason);
                Err(reason)
            }
        }
    }
}

/// What the reader of a connection does to the writer's side when the connection ends.
/// Weak: the channel owns the reader task's handle.
pub(super) struct WriterSide(Weak<Channel>);

impl WriterSide {
    /// Marks the node as not connected, before the requests in flight fail.
    pub(super) fn lost(&self) {
        if let Some(channel) = self.0.upgrade() {
            channel.connected.store(false, Ordering::Relaxed);
        }
    }

    /// Wakes the writer, which closes the socket.
    pub(super) fn wake(&self) {
        if let Some(channel) = self.0.upgrade() {
            channel.wake.notify_one();
        }
    }
}
