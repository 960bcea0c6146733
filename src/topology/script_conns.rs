//! Connections for clients' scripts (EVAL, EVALSHA, FCALL and their `_RO` forms), apart
//! from the shared ones.
//!
//! A node reads nothing more from the connection a script came on until the script ends,
//! while it answers `-BUSY` on its other connections once the script runs past
//! `busy-reply-threshold`. A client's script on the shared connection would hold every
//! other client's requests behind it, unanswered, for as long as it runs (forever for an
//! endless loop, since a SCRIPT KILL sent on that connection would wait too). So each
//! script call takes a connection of its own from a small pool per node and protocol,
//! and gives it back once its reply is in.
//!
//! Invariants: a connection goes back to the pool only after a call on it was answered,
//! so nothing is outstanding on it; one whose call failed, or whose caller went away
//! before the reply (a script still running, its reply still to come), is closed instead.
//! At most [`IDLE_PER_NODE`] idle connections are kept per node and protocol. The pool
//! counts the scripts it has out per node ([`ScriptConns::running_on`]): a transaction
//! asks whether the node may be busy before its queue-time check (see
//! `client::transaction`). A call whose caller went away before its reply (the client
//! disconnected; the node runs the script on regardless) keeps its node counted until
//! that check finds it not busy ([`ScriptConns::settled`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::NodeConn;
use crate::protocol::Proto;
use crate::route::NodeAddr;

/// Idle script connections kept per node and protocol: enough for the scripts a few
/// clients run at once; more at a time open connections of their own, closed after use.
pub const IDLE_PER_NODE: usize = 8;

/// The pool of script connections of every node (see the module doc).
#[derive(Default)]
pub struct ScriptConns {
    inner: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    idle: HashMap<(NodeAddr, Proto), Vec<NodeConn>>,
    running: HashMap<NodeAddr, usize>,
    /// Nodes where a script's call ended unanswered: it may still run there.
    unsettled: HashSet<NodeAddr>,
}

impl ScriptConns {
    /// A connection to `addr` for one script call: an idle one still connected, else one
    /// from `open`. Counted in [`ScriptConns::running_on`] until the lease is dropped.
    pub fn lease(
        self: &Arc<Self>,
        addr: &NodeAddr,
        proto: Proto,
        open: impl FnOnce() -> NodeConn,
    ) -> ScriptLease {
        let mut pool = self.lock();
        *pool.running.entry(addr.clone()).or_default() += 1;
        let idle = pool.idle.get_mut(&(addr.clone(), proto)).and_then(|idle| {
            // Connections the node closed meanwhile are dropped here.
            while let Some(conn) = idle.pop() {
                if conn.is_connected() {
                    return Some(conn);
                }
            }
            None
        });
        drop(pool);
        ScriptLease {
            conn: idle.unwrap_or_else(open),
            proto,
            answered: false,
            pool: self.clone(),
        }
    }

    /// How many script calls have a connection to `addr` now, plus one while a call to it
    /// ended unanswered and the node was not found idle since.
    pub fn running_on(&self, addr: &NodeAddr) -> usize {
        let pool = self.lock();
        pool.running.get(addr).copied().unwrap_or(0) + usize::from(pool.unsettled.contains(addr))
    }

    /// `addr` answered a command a busy node refuses: no script runs there now.
    pub fn settled(&self, addr: &NodeAddr) {
        self.lock().unsettled.remove(addr);
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One script call's connection, back in the pool on drop once
/// [`ScriptLease::answered`] was called, closed otherwise.
pub struct ScriptLease {
    conn: NodeConn,
    proto: Proto,
    answered: bool,
    pool: Arc<ScriptConns>,
}

impl ScriptLease {
    /// The leased connection.
    pub fn conn(&self) -> &NodeConn {
        &self.conn
    }

    /// The call on the connection was answered: nothing is outstanding on it.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for ScriptLease {
    fn drop(&mut self) {
        let addr = self.conn.addr().clone();
        let mut pool = self.pool.lock();
        if let Some(running) = pool.running.get_mut(&addr) {
            *running -= 1;
            if *running == 0 {
                pool.running.remove(&addr);
            }
        }
        if !self.answered {
            pool.unsettled.insert(addr);
            return;
        }
        if self.conn.is_connected() {
            let idle = pool.idle.entry((addr, self.proto)).or_default();
            if idle.len() < IDLE_PER_NODE {
                idle.push(self.conn.clone());
            }
        }
    }
}
