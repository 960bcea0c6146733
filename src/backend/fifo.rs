//! The queue of requests written to a connection and still waiting for their reply.
//!
//! The writer pushes (in write order, before writing); the reader pops one entry per reply
//! frame. Once closed it accepts nothing more, so an entry can never be stranded on a
//! connection that no reader serves.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::sink::BatchReplies;
use super::BackendError;

/// Where a caller waits for its reply.
pub(super) type ReplySender = oneshot::Sender<Result<Bytes, BackendError>>;

/// One reply the connection expects.
pub(super) enum Pending {
    /// The `+OK` to an `ASKING` written before a request: consumed here.
    AskingAck,
    /// A caller's reply.
    Reply(ReplySender),
    /// The replies of a client's batch (one frame per request of the batch).
    Batch(BatchReplies),
}

impl Pending {
    /// Answers the caller(s) with `error` (the `ASKING` acknowledgement has none).
    pub(super) fn fail(self, error: &BackendError) {
        match self {
            Pending::AskingAck => {}
            Pending::Reply(sender) => {
                let _ = sender.send(Err(error.clone()));
            }
            Pending::Batch(mut batch) => batch.fail(error),
        }
    }
}

#[derive(Default)]
struct State {
    pending: VecDeque<Pending>,
    closed: bool,
}

/// In-flight requests of one connection, shared by its writer and reader.
#[derive(Default)]
pub(super) struct InFlight {
    state: Mutex<State>,
}

impl InFlight {
    /// Lets `fill` append entries unless the connection is closed (then `fill` is not
    /// called and the caller still owns what it meant to push); returns whether it ran.
    pub(super) fn push_with(&self, fill: impl FnOnce(&mut VecDeque<Pending>)) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.closed {
            return false;
        }
        fill(&mut state.pending);
        true
    }

    /// Whether the reader has stopped (or the writer gave up on this connection).
    pub(super) fn is_closed(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed
    }

    /// Whether no reply is expected.
    pub(super) fn is_empty(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .is_empty()
    }

    /// Removes the oldest `count` entries (fewer if fewer are queued) into `out`.
    pub(super) fn pop_into(&self, count: usize, out: &mut VecDeque<Pending>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let take = count.min(state.pending.len());
        out.extend(state.pending.drain(..take));
    }

    /// Closes the queue and fails every waiting caller with `Lost(reason)`.
    pub(super) fn close_and_fail(&self, reason: &str) {
        let drained: Vec<Pending> = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.closed = true;
            state.pending.drain(..).collect()
        };
        for entry in drained {
            entry.fail(&BackendError::Lost(reason.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    /// The writer queues an entry per batch, one per request at one request per client
    /// read, and the reader moves it out; at a thousand clients each line of the queue is a
    /// cache miss (see `seqs`). It was 96 bytes.
    #[test]
    fn an_in_flight_entry_stays_small() {
        let size = std::mem::size_of::<super::Pending>();
        assert!(size <= 40, "an in-flight entry is {size} bytes");
    }
}
