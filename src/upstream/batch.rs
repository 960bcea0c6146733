//! Batch staging: a client's direct requests, staged per master while the session admits
//! a read's worth of them, leave in one queue message per master; their replies come back
//! through the client's one [`ReplySink`], tagged with each request's sequence number.
//!
//! Invariant: a batch leaves only when [`Staging::send`] is called, so the session decides
//! where a read's batches fall among the futures it starts (see `client::pipeline`).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::backend::{BackendError, Batches, Delivery, NodeConn, ReplySink};

/// A direct request's first answer: its reply frame, or why there is none.
pub type Answer = Result<Bytes, BackendError>;

/// One client's staged batches and the sink their replies come back through.
pub struct Staging {
    sink: Arc<ReplySink>,
    /// Deliveries taken off the sink (kept to reuse its buffer).
    delivered: Vec<Delivery>,
    /// Direct requests of the current read, per master, not yet sent.
    staged: Batches,
}

/// Replies taken off the sink by [`Staging::poll_take`]; given back with
/// [`Staging::give_back`] once handled, so their buffer is reused.
pub struct Deliveries(Vec<Delivery>);

impl Deliveries {
    /// The replies in delivery order: the request's sequence number, and its answer.
    pub fn drain(&mut self) -> impl Iterator<Item = (u64, Answer)> + '_ {
        self.0
            .drain(..)
            .map(|delivery| (delivery.seq, delivery.reply))
    }
}

impl Default for Staging {
    fn default() -> Self {
        Staging {
            sink: ReplySink::new(),
            delivered: Vec::new(),
            staged: Batches::default(),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.sink.close();
    }
}

impl Staging {
    /// Adds `request` to the batch for `conn`; its reply is delivered under `seq`.
    pub fn stage(&mut self, conn: &NodeConn, request: &Bytes, seq: u64) {
        self.staged.push(conn, request, seq);
    }

    /// Sends the staged batches, one per master.
    pub fn send(&mut self) {
        self.staged.send(&self.sink);
    }

    /// The replies delivered since the last call, once there are any.
    pub fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<Deliveries> {
        match self.sink.poll_take(cx, &mut self.delivered) {
            Poll::Ready(()) => Poll::Ready(Deliveries(std::mem::take(&mut self.delivered))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Takes back the buffer of handled [`Deliveries`].
    // Inlined: a move of a vector, which as a call cost 28 instructions per wake-up.
    #[inline]
    pub fn give_back(&mut self, deliveries: Deliveries) {
        self.delivered = deliveries.0;
    }

    /// Gives back the room a deep pipeline grew the reply buffers to.
    pub fn shrink_to(&mut self, replies: usize) {
        self.delivered.shrink_to(replies);
        self.sink.shrink_to(replies);
    }
}
