//! Guards that count open connections: created when a connection opens, they uncount it
//! when dropped, so the gauges stay right on every exit path.

use std::sync::atomic::Ordering;

use metrics::{counter, gauge, Counter, Gauge};

use super::{
    BACKEND_CONNECTIONS, CLIENT_BYTES_RECEIVED, CLIENT_BYTES_SENT, CLIENT_CONNECTIONS,
    CLIENT_CONNECTIONS_TOTAL, TOTALS,
};

/// One open client connection: counted on creation, uncounted on drop.
pub struct ClientConnection {
    open: Gauge,
    received: Counter,
    sent: Counter,
}

impl ClientConnection {
    /// Counts a newly accepted client connection.
    pub fn opened() -> ClientConnection {
        TOTALS.clients.fetch_add(1, Ordering::Relaxed);
        counter!(CLIENT_CONNECTIONS_TOTAL).increment(1);
        let open = gauge!(CLIENT_CONNECTIONS);
        open.increment(1.0);
        ClientConnection {
            open,
            received: counter!(CLIENT_BYTES_RECEIVED),
            sent: counter!(CLIENT_BYTES_SENT),
        }
    }

    /// `n` bytes were read from this client.
    pub fn received(&self, n: usize) {
        self.received.increment(n as u64);
    }

    /// `n` bytes were written to this client.
    pub fn sent(&self, n: usize) {
        self.sent.increment(n as u64);
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        TOTALS.clients.fetch_sub(1, Ordering::Relaxed);
        self.open.decrement(1.0);
    }
}

/// One open backend connection to a node: counted on creation, uncounted on drop.
pub struct BackendConnection {
    open: Gauge,
}

impl BackendConnection {
    /// Counts a new connection to `node` (a cluster node address: a bounded set).
    pub fn opened(node: &str) -> BackendConnection {
        let open = gauge!(BACKEND_CONNECTIONS, "node" => node.to_string());
        open.increment(1.0);
        BackendConnection { open }
    }
}

impl Drop for BackendConnection {
    fn drop(&mut self) {
        self.open.decrement(1.0);
    }
}
