//! A node connection's outbox: what callers queued for the writer, and the established
//! link it is written to (see `conn` for who writes when).

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::task::JoinHandle;

use super::fifo::{InFlight, Pending, ReplySender};
use super::sink::Batch;
use super::{BackendError, NodeWriter};
use crate::buffer::Resizer;
use crate::route::NodeAddr;

/// Queued request bytes, or requests, at which the caller that queues more writes them
/// itself. Small enough that a burst of pipelined clients leaves in several writes the node
/// can start on (Redis reads 16 KiB per connection per turn of its event loop), large enough
/// that unpipelined clients still share one write per turn of the proxy's. The count
/// matters for short requests: 8 KiB of GETs is about 200 of them, and their replies are
/// the long part.
pub(super) const FLUSH_BYTES: usize = 8 * 1024;
pub(super) const FLUSH_REQUESTS: usize = 64;
/// Written just before a request sent with `asking`.
pub(super) const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
#[derive(Default)]
pub(super) struct Outbox {
    /// Entries not yet written, oldest first.
    pub(super) queued: Vec<Outbound>,
    /// The request bytes of `queued`, and how many requests it holds.
    pub(super) queued_bytes: usize,
    pub(super) queued_requests: usize,
    /// The established connection, if any (only the writer task connects).
    pub(super) link: Option<Link>,
    /// Every handle is gone.
    pub(super) closed: bool,
}

/// How far a flush of the outbox got.
pub(super) enum Flushed {
    /// Everything queued is written.
    All,
    /// The socket's buffer is full; the rest waits in the link's `unwritten`.
    Blocked(Arc<NodeWriter>),
    /// No usable connection (none yet, or it just failed): the writer must (re)connect
    /// before anything still queued is written.
    NoLink,
}

impl Outbox {
    pub(super) fn queue(&mut self, item: Outbound) {
        self.queued_bytes += item.len();
        self.queued_requests += item.requests();
        self.queued.push(item);
    }

    /// Whether enough is queued to write now rather than wait for more.
    pub(super) fn is_full(&self) -> bool {
        self.queued_bytes >= FLUSH_BYTES || self.queued_requests >= FLUSH_REQUESTS
    }

    /// Records the queued entries' replies in the in-flight FIFO and writes as much as the
    /// socket takes without waiting. A failed write drops the connection (its in-flight
    /// entries fail as lost).
    pub(super) fn flush(&mut self, addr: &NodeAddr, connected: &AtomicBool) -> Flushed {
        let Some(link) = self.link.as_mut() else {
            return Flushed::NoLink;
        };
        if !self.queued.is_empty() {
            let unwritten = &mut link.unwritten;
            let queued = &mut self.queued;
            let recorded = link.in_flight.push_with(|pending| {
                // A caller that gave up before its request was written needs no write.
                for item in queued.drain(..).filter(|item| !item.is_abandoned()) {
                    item.write_into(unwritten);
                    item.expect_replies(pending);
                }
            });
            if !recorded {
                // The reader stopped: nothing of the queue was taken.
                self.link = None;
                return Flushed::NoLink;
            }
            link.unwritten_resizer.note(&link.unwritten);
            self.queued_bytes = 0;
            self.queued_requests = 0;
        }
        while !link.unwritten.is_empty() {
            match link.write.try_write(&link.unwritten) {
                Ok(n) => link.unwritten.advance(n),
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    return Flushed::Blocked(link.write.clone());
                }
                Err(error) => {
                    tracing::warn!(addr = %addr, %error, "backend write failed");
                    link.in_flight
                        .close_and_fail(&format!("{addr}: write failed: {error}"));
                    connected.store(false, Ordering::Relaxed);
                    self.link = None;
                    return Flushed::NoLink;
                }
            }
        }
        if link.write.has_unsent() {
            // A TLS record the socket took in part: the writer waits to send the rest.
            return Flushed::Blocked(link.write.clone());
        }
        link.unwritten_resizer.shrink_if_idle(&mut link.unwritten);
        Flushed::All
    }
}

/// What waits for the writer.
pub(super) enum Outbound {
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
    pub(super) fn is_abandoned(&self) -> bool {
        match self {
            Outbound::Call { reply, .. } => reply.is_closed(),
            Outbound::Batch(batch) => batch.replies.is_abandoned(),
        }
    }

    /// How many requests (not counting `ASKING`) this entry carries.
    pub(super) fn requests(&self) -> usize {
        match self {
            Outbound::Call { .. } => 1,
            Outbound::Batch(batch) => batch.replies.len(),
        }
    }

    /// The bytes [`Outbound::write_into`] writes.
    pub(super) fn len(&self) -> usize {
        match self {
            Outbound::Call {
                request, asking, ..
            } => request.len() + if *asking { ASKING.len() } else { 0 },
            Outbound::Batch(batch) => batch.requests.len(),
        }
    }

    pub(super) fn write_into(&self, out: &mut BytesMut) {
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
    pub(super) fn expect_replies(self, pending: &mut VecDeque<Pending>) {
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

    pub(super) fn fail(self, error: &BackendError) {
        match self {
            Outbound::Call { reply, .. } => {
                let _ = reply.send(Err(error.clone()));
            }
            Outbound::Batch(mut batch) => batch.replies.fail(error),
        }
    }
}

/// An established connection: its write half, its FIFO, its reader task, and the bytes of
/// recorded requests the socket has not taken yet.
pub(super) struct Link {
    pub(super) write: Arc<NodeWriter>,
    pub(super) in_flight: Arc<InFlight>,
    pub(super) reader: JoinHandle<()>,
    pub(super) unwritten: BytesMut,
    /// Gives back what a burst of large requests grew `unwritten` to.
    pub(super) unwritten_resizer: Resizer<{ super::conn::OUTBOX_CAPACITY }>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
        self.in_flight
            .close_and_fail("connection closed before the reply");
    }
}
