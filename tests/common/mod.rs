//! The harness every integration test shares (`mod common;`): real `redis-server` processes on
//! loopback (a cluster, or one standalone server), and the slotbridge binary in front of them.
//!
//! Invariants: every process a test starts is killed and its directory removed when its handle
//! drops, also on panic; processes behind `'static` handles ([`shared_cluster`]) are killed by a
//! watchdog shell once the test binary has exited, however it exited. Ports are free loopback
//! ports, never fixed ones, so tests and test binaries can run at the same time. A missing
//! `redis-server` or `redis-cli` fails the test with the install command; nothing is skipped.
//!
//! Faults a real server cannot be made to produce on demand are scripted with a [`FakeNode`].
//!
//! Tests that move slots, fail over or kill nodes start their own [`Cluster`]; the rest can
//! share one per test binary through [`shared_cluster`].

// Each test binary uses a different part of the harness.
#![allow(dead_code, unused_imports)]

mod bots;
mod cluster;
mod fake_node;
mod fixtures;
mod http;
mod layout;
mod node;
mod ports;
mod process;
mod prometheus;
mod proxy;
mod raw;
mod sentinel;
mod standalone;
mod tls;
mod wait;

use std::sync::OnceLock;

pub use bots::{require_node, Bot, LegacyBot, Login, Summary, MAX_STALL_MS};
pub use cluster::{run_redis_cli, Cluster};
pub use fake_node::{Answer, FakeNode, Request, Seen, SlotOwner};
pub use fixtures::{
    bucket, keys_on, migrate, migrate_ok, migrate_to_cluster, slotbridge, to_cluster_args, url,
    write_plain,
};
pub use http::{http_get, http_raw};
pub use layout::{
    layout_of, parse_cluster_nodes, ClusterLayout, NodeLine, Role, SlotRange, SLOT_COUNT,
};
pub use node::{
    connect, connect_through_stops, interrupted, query, redis_client, scan_all, scan_with,
    try_connect,
};
pub use ports::{free_cluster_port, free_port};
pub use process::require_tool;
pub use process::{new_dir, running_tests};
pub use prometheus::{repo_path, require_prometheus_tool, url_encode, Prometheus};
pub use proxy::Proxy;
pub use raw::{
    exchange, exchange_on, read_replies, read_some, read_until_close, replay_on_both,
    reply_complete, resp_command, resp_lines, split_replies, transcript, Raw,
};
pub use sentinel::{data_connect, GroupOptions, Sentinel, SentinelGroup};
pub use standalone::Standalone;
pub use tls::{require_openssl, Certs, TlsClient, TlsCluster};
pub use wait::{wait_until, wait_until_async};

/// A 3-master cluster without replicas, started on first use and shared by every test of this
/// binary. Do not move slots, fail over or kill nodes on it; start a [`Cluster`] for that.
pub fn shared_cluster() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(3, 0))
}

/// A multiplexed async connection to `addr` (a node or the proxy).
pub async fn async_connect(addr: &str) -> redis::aio::MultiplexedConnection {
    redis_client(addr)
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"))
}

/// A connected deployment of the migration tools (one node, or a cluster by its seeds), as a
/// proxy or a `slotbridge migrate` run would hold it.
pub async fn endpoint(seeds: &[String]) -> std::sync::Arc<slotbridge::migrate::source::Endpoint> {
    let urls: Vec<slotbridge::migrate::RedisUrl> = seeds
        .iter()
        .map(|addr| {
            slotbridge::migrate::RedisUrl::parse(&format!("redis://{addr}"), None, None).unwrap()
        })
        .collect();
    std::sync::Arc::new(
        slotbridge::migrate::source::Endpoint::connect_any(&urls)
            .await
            .unwrap(),
    )
}
