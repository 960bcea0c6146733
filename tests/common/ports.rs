//! Free loopback ports for the servers a test starts.
//!
//! Invariants: a port handed out is free on 127.0.0.1 at the time it is handed out (probe-bound),
//! and for cluster nodes so is `port + CLUSTER_BUS_OFFSET`. Client ports come from one range and
//! bus ports from the range just above it, so a proxy port can never be another node's bus port.
//! Both ranges sit below the kernel's usual ephemeral range (32768..), so outgoing connections
//! never occupy them. Each test process starts at a random point of the range and walks it with
//! a process-wide counter: threads of one binary never get the same port, and two binaries
//! running at once rarely race; when they do, the server fails to bind and the caller retries
//! with the next port.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Redis Cluster's bus listens on the client port plus this offset (fixed by Redis).
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// First client port handed out; lower ports are more often taken by local services.
const CLIENT_PORT_FIRST: u16 = 12000;
/// Number of client ports; the bus ports (client + 10000) then end below 32768.
const CLIENT_PORT_COUNT: u32 = 10000;

/// Position of the next candidate port, relative to `CLIENT_PORT_FIRST`.
fn counter() -> &'static AtomicU32 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    NEXT.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        hasher.write_u128(nanos);
        AtomicU32::new((hasher.finish() % u64::from(CLIENT_PORT_COUNT)) as u32)
    })
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn next_port(with_bus: bool) -> u16 {
    for _ in 0..CLIENT_PORT_COUNT {
        let offset = counter().fetch_add(1, Ordering::Relaxed) % CLIENT_PORT_COUNT;
        // The range constants keep this below u16::MAX; the fallback is never taken.
        let port = CLIENT_PORT_FIRST.saturating_add(u16::try_from(offset).unwrap_or(0));
        if is_free(port) && (!with_bus || is_free(port + CLUSTER_BUS_OFFSET)) {
            return port;
        }
    }
    panic!("no free loopback port in {CLIENT_PORT_FIRST}..+{CLIENT_PORT_COUNT}");
}

/// A free port for a plain listener (a standalone redis-server, the proxy, its admin port).
pub fn free_port() -> u16 {
    next_port(false)
}

/// A free port whose cluster bus port (`port + CLUSTER_BUS_OFFSET`) is free as well.
pub fn free_cluster_port() -> u16 {
    next_port(true)
}
