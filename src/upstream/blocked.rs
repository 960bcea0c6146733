//! Where a client's blocking command waits: the session's [`BlockedOn`], set while a
//! blocking command runs on its dedicated connection, so CLIENT UNBLOCK and CLIENT LIST
//! of other clients can find it; and whether a CLIENT UNBLOCK was sent for it, for a
//! command the proxy carries out as several waits (a cross-slot blocking pop), where the
//! null a wait answers may be its own timeout or the unblock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::backend::NodeConn;

/// Where a client's blocking command waits now: its dedicated connection to the node, so
/// CLIENT UNBLOCK from another client can reach it (and CLIENT LIST show it blocked).
#[derive(Debug, Default)]
pub struct BlockedOn {
    conn: Mutex<Option<NodeConn>>,
    /// A CLIENT UNBLOCK was sent to the node for the command running now.
    unblocking: AtomicBool,
}

impl BlockedOn {
    /// The connection of the blocking command running now, if any.
    pub fn current(&self) -> Option<NodeConn> {
        self.lock().clone()
    }

    /// Notes that a CLIENT UNBLOCK goes to the node for the command running now (`true`),
    /// or that the node found nothing to unblock (`false`).
    pub fn note_unblock(&self, sent: bool) {
        self.unblocking.store(sent, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<NodeConn>> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a CLIENT UNBLOCK was sent for the running session's blocking command since the
/// last call (which clears it); `false` outside a session.
pub fn take_unblock() -> bool {
    BLOCKED_ON
        .try_with(|blocked| blocked.unblocking.swap(false, Ordering::SeqCst))
        .unwrap_or(false)
}

tokio::task_local! {
    /// The running client session's [`BlockedOn`]. A session sets it around the futures
    /// of the commands that may block (see `runs_alone` in the session); elsewhere
    /// (migrate, tests) it is unset and nothing is recorded. A task-local rather than an
    /// argument: the blocking path is reached through every planner (plain, layout,
    /// WAIT), none of which knows the client.
    pub static BLOCKED_ON: Arc<BlockedOn>;
}

/// Shows a blocking command in its session's [`BlockedOn`] while it lives.
pub(super) struct ShownBlocked(Option<Arc<BlockedOn>>);

impl ShownBlocked {
    pub(super) fn record(conn: &NodeConn) -> ShownBlocked {
        ShownBlocked(
            BLOCKED_ON
                .try_with(|blocked| {
                    *blocked.lock() = Some(conn.clone());
                    blocked.clone()
                })
                .ok(),
        )
    }
}

impl Drop for ShownBlocked {
    fn drop(&mut self) {
        if let Some(blocked) = &self.0 {
            *blocked.lock() = None;
        }
    }
}
