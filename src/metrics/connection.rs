//! Guards that count open connections: created when a connection opens, they uncount it
//! when dropped, so the gauges stay right on every exit path.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{counter, gauge, Gauge};

use super::{
    BACKEND_CONNECTIONS, BLOCKED_CLIENTS, CLIENT_BYTES_RECEIVED, CLIENT_BYTES_SENT,
    CLIENT_CONNECTIONS, CLIENT_CONNECTIONS_TOTAL, PUBSUB_SUBSCRIBERS, TOTALS,
};

/// The bytes read from and written to every client, published to the recorder when it is
/// scraped ([`publish_client_totals`]). Counted here rather than through a counter handle in
/// each connection: a handle is a pointer to follow and two atomics to add to on every read
/// and write, and with a thousand clients the connection's copy of it is seldom in cache.
/// Aligned to a line of its own: both workers add to it, and what shared the line would be
/// invalidated with it.
#[repr(align(64))]
struct ClientBytes {
    received: AtomicU64,
    sent: AtomicU64,
}

static CLIENT_BYTES: ClientBytes = ClientBytes {
    received: AtomicU64::new(0),
    sent: AtomicU64::new(0),
};

/// Sets the client byte counters and the connection gauge and counter to the totals so far,
/// for a scrape.
pub fn publish_client_totals() {
    counter!(CLIENT_BYTES_RECEIVED).absolute(CLIENT_BYTES.received.load(Ordering::Relaxed));
    counter!(CLIENT_BYTES_SENT).absolute(CLIENT_BYTES.sent.load(Ordering::Relaxed));
    gauge!(CLIENT_CONNECTIONS).set(TOTALS.clients.load(Ordering::Relaxed) as f64);
    counter!(CLIENT_CONNECTIONS_TOTAL)
        .absolute(TOTALS.connections_received.load(Ordering::Relaxed));
}

/// One open client connection: counted on creation, uncounted on drop. In the process
/// totals only, which a scrape publishes ([`publish_client_totals`]): through the recorder,
/// the gauge and the counter were two lookups of a key at every connect (about 1,200
/// instructions, a sixth of what accepting a client cost), paid in a fleet's connect burst.
pub struct ClientConnection(());

impl ClientConnection {
    /// Counts a newly accepted client connection.
    pub fn opened() -> ClientConnection {
        TOTALS.clients.fetch_add(1, Ordering::Relaxed);
        TOTALS.connections_received.fetch_add(1, Ordering::Relaxed);
        ClientConnection(())
    }

    /// `n` bytes were read from this client.
    pub fn received(&self, n: usize) {
        CLIENT_BYTES.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `n` bytes were written to this client.
    pub fn sent(&self, n: usize) {
        CLIENT_BYTES.sent.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        TOTALS.clients.fetch_sub(1, Ordering::Relaxed);
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

/// A client waiting in a blocking command: counted while it lives (dropped when the command
/// answers or the client goes away).
pub struct BlockedClient;

impl BlockedClient {
    /// Counts one more blocked client.
    pub fn enter() -> BlockedClient {
        TOTALS.blocked_clients.fetch_add(1, Ordering::Relaxed);
        gauge!(BLOCKED_CLIENTS).increment(1.0);
        BlockedClient
    }
}

impl Drop for BlockedClient {
    fn drop(&mut self) {
        TOTALS.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        gauge!(BLOCKED_CLIENTS).decrement(1.0);
    }
}

/// Whether one client is counted in the subscribers gauge; uncounted on drop.
#[derive(Default)]
pub struct Subscriber {
    counted: bool,
}

impl Subscriber {
    /// Records the client's subscribe mode after a command or event that may change it.
    pub fn update(&mut self, subscribed: bool) {
        if subscribed != self.counted {
            let delta = if subscribed { 1.0 } else { -1.0 };
            gauge!(PUBSUB_SUBSCRIBERS).increment(delta);
            self.counted = subscribed;
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.update(false);
    }
}
