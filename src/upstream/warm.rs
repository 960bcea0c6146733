//! Connections kept ready for clients' blocking commands, a few per master and protocol.
//!
//! A blocking command runs on a connection of its own. Opened on demand, that connection
//! first connects and authenticates, while a command another client sends just after it
//! goes out at once on the shared connection, which is already open: the later command
//! reached the master first, and of two clients blocked on one list the one that blocked
//! second could be served first (Redis serves blocked clients in the order they blocked).
//! Taking a connection that is already established and authenticated, a blocking command
//! is written as soon as the proxy reads it, like any other command, so it reaches its
//! master before what other clients send after it.
//!
//! Invariants: a connection is handed out only while connected, and to one command only;
//! it is never given back (it may still carry the blocking command when its client left),
//! a new one is opened in the background to take its place. At most [`WARM_PER_NODE`]
//! ready or opening connections per node and protocol. Every master of the slot map gets
//! its sets, in both protocols, when the upstream is built, and a new snapshot serves only
//! once they are open (or a short wait has passed); a master that appears later
//! gets them at its first blocking command. When no ready connection is there (a burst of
//! blocking commands larger than the set, a node just restarted), the command opens its
//! own, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::backend::NodeConn;
use crate::protocol::Proto;
use crate::route::NodeAddr;
use crate::topology::Topology;

/// Ready connections kept per node and protocol: enough for the clients that block on one
/// master within the time a connection takes to open; a larger burst opens its own. Six
/// idle connections per master in all, a few tens of KiB on the node.
pub const WARM_PER_NODE: usize = 3;

/// How long a new snapshot waits for its ready connections before serving anyway (a
/// master that does not answer).
pub const WARM_UP_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// What opens a connection: answered, the connection is established and authenticated.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// The ready connections of every master (see the module doc).
pub struct WarmConns {
    topology: Arc<Topology>,
    inner: Mutex<Sets>,
}

#[derive(Default)]
struct Sets {
    by_node: HashMap<(NodeAddr, Proto), WarmSet>,
}

/// One node's and protocol's connections.
#[derive(Default)]
struct WarmSet {
    ready: Vec<NodeConn>,
    /// Connections being opened, counted against [`WARM_PER_NODE`].
    opening: usize,
}

impl WarmConns {
    /// The sets of `topology`'s masters; within a Tokio runtime, their connections start
    /// opening (outside one, as in unit tests, they open at the first take).
    pub fn new(topology: Arc<Topology>) -> Arc<WarmConns> {
        let warm = Arc::new(WarmConns {
            topology,
            inner: Mutex::default(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            let masters: Vec<NodeAddr> = warm.topology.routing().map.masters().to_vec();
            for addr in &masters {
                warm.refill(addr, Proto::Resp2);
                warm.refill(addr, Proto::Resp3);
            }
        }
        warm
    }

    /// A connected connection to `addr` for one blocking command: a ready one, else a
    /// new one. Either way the set is refilled in the background.
    pub fn take(self: &Arc<Self>, addr: &NodeAddr, proto: Proto) -> NodeConn {
        let mut sets = self.lock();
        let set = sets.by_node.entry((addr.clone(), proto)).or_default();
        let mut taken = None;
        // Connections the node closed meanwhile are dropped here.
        while let Some(conn) = set.ready.pop() {
            if conn.is_connected() {
                taken = Some(conn);
                break;
            }
        }
        drop(sets);
        self.refill(addr, proto);
        taken.unwrap_or_else(|| self.topology.dedicated(addr, proto))
    }

    /// How many connections to `addr` are ready now for `proto`.
    pub fn ready_on(&self, addr: &NodeAddr, proto: Proto) -> usize {
        self.lock()
            .by_node
            .get(&(addr.clone(), proto))
            .map_or(0, |set| set.ready.len())
    }

    /// Waits until every master of the slot map has its full sets in both protocols, or
    /// `within` has passed (a master that does not answer leaves its sets short).
    pub async fn until_ready(&self, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let masters: Vec<NodeAddr> = self.topology.routing().map.masters().to_vec();
        let full = |warm: &WarmConns| {
            masters.iter().all(|addr| {
                [Proto::Resp2, Proto::Resp3]
                    .into_iter()
                    .all(|proto| warm.ready_on(addr, proto) >= WARM_PER_NODE)
            })
        };
        // Polled: this runs once per start or reload, and a connection opens in about a
        // millisecond on a healthy network.
        while !full(self) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Opens as many connections to `addr` as the set lacks, each added once its PING is
    /// answered. A node that does not answer leaves the set short until the next take.
    fn refill(self: &Arc<Self>, addr: &NodeAddr, proto: Proto) {
        let missing = {
            let mut sets = self.lock();
            let set = sets.by_node.entry((addr.clone(), proto)).or_default();
            let missing = WARM_PER_NODE.saturating_sub(set.ready.len() + set.opening);
            set.opening += missing;
            missing
        };
        for _ in 0..missing {
            let warm = self.clone();
            let addr = addr.clone();
            tokio::spawn(async move {
                let conn = warm.topology.dedicated(&addr, proto);
                let opened = matches!(
                    conn.call(Bytes::from_static(PING), false).await,
                    Ok(reply) if reply.first() != Some(&b'-')
                );
                let mut sets = warm.lock();
                let set = sets.by_node.entry((addr, proto)).or_default();
                set.opening -= 1;
                if opened {
                    set.ready.push(conn);
                }
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Sets> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
