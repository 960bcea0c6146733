//! A single non-cluster `redis-server`, for the proxy's standalone upstream mode.
//!
//! Invariants: same hygiene as a cluster node (own port and directory, nothing persisted,
//! killed and cleaned up on drop); a restart comes back empty on the same port.

use super::node::{connect, redis_client, NodeMode, RedisNode};

/// A running standalone redis-server.
pub struct Standalone {
    node: RedisNode,
}

impl Standalone {
    /// Starts a server on a free loopback port and waits until it answers.
    pub fn start() -> Standalone {
        Standalone {
            node: RedisNode::start(NodeMode::Standalone),
        }
    }

    /// "127.0.0.1:port".
    pub fn addr(&self) -> &str {
        self.node.addr()
    }

    /// A `redis::Client` for this server.
    pub fn client(&self) -> redis::Client {
        redis_client(self.addr())
    }

    /// A blocking connection, as [`connect`] makes it.
    pub fn connect(&self) -> redis::Connection {
        connect(self.addr())
    }

    /// Kills the server with SIGKILL.
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Stops (`SIGSTOP`) or continues the server: stopped, it keeps its connections open
    /// but answers nothing, like a hung process.
    pub fn set_paused(&self, paused: bool) {
        self.node.set_paused(paused);
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.node.restart();
    }
}
