//! Batch staging: a client's direct requests, staged per master while the session admits
//! a read's worth of them, leave in one queue message per master; their replies come back
//! through the client's one [`ReplySink`], tagged with each request's sequence number.
//!
//! Invariant: a batch leaves only when [`Staging::send`] is called, so the session decides
//! where a read's batches fall among the futures it starts (see `client::pipeline`).
//!
//! The batches under construction live in one place per worker thread, not one per client:
//! a session stages and sends within one synchronous pass (no await between, see
//! `Session::admit_buffered`), so the place is free again before another session runs, and
//! with a thousand clients it stays in cache where a client's own would have to be fetched
//! from memory on every request. Each staged request is kept with its client's sink: should
//! a pass ever end unsent, its batches still leave with their own replies' sink.

use std::cell::RefCell;
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
}

/// A worker thread's batches under construction (see the module doc), and the sink of the
/// client they belong to.
struct Scratch {
    owner: Option<Arc<ReplySink>>,
    staged: Batches,
}

impl Scratch {
    /// Whether what is staged is `sink`'s client's.
    fn owned_by(&self, sink: &Arc<ReplySink>) -> bool {
        self.owner
            .as_ref()
            .is_some_and(|owner| Arc::ptr_eq(owner, sink))
    }

    /// Sends what is staged with its owner's sink.
    fn send(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.staged.send(&owner);
        }
    }
}

thread_local! {
    // Initialized as a constant: every access would otherwise first check that it was.
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            owner: None,
            staged: Batches::new(),
        })
    };
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
        SCRATCH.with_borrow_mut(|scratch| {
            if !scratch.owned_by(&self.sink) {
                // Another client's pass left batches unsent: they leave now, theirs.
                debug_assert!(scratch.owner.is_none(), "a pass ended with batches unsent");
                scratch.send();
                scratch.owner = Some(self.sink.clone());
            }
            scratch.staged.push(conn, request, seq);
        });
    }

    /// Sends the staged batches, one per master.
    pub fn send(&mut self) {
        SCRATCH.with_borrow_mut(|scratch| {
            if scratch.owned_by(&self.sink) {
                scratch.send();
            }
        });
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
