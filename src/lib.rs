//! slotbridge: a Redis-protocol proxy in front of a Redis Cluster.
//!
//! # Layout
//!
//! One command flows one way through these modules:
//!
//! ```text
//! client::session ──► protocol (decode, inline) ──► command (table, key positions)
//!        ▲                                                   │
//!        │                                                   ▼
//!  protocol::encode ◄── rewrite (reverse) ◄── reply (merge) ◄── dispatch
//!                                                   │            │
//!                                        rewrite (forward) ──► route (slot, slot map, plan)
//!                                                                │
//!        upstream (redirects, pinned connections, batches, subscriptions) ◄┘
//!                                                                │
//!                                       backend (one node connection) ◄┘
//! ```
//!
//! - [`protocol`]: RESP2/RESP3 framing, check-then-parse, inline commands, limits. Pure.
//! - [`command`]: the command table (from the backend's `COMMAND`, with a built-in
//!   fallback) and key positions. Pure.
//! - [`route`]: hash slots, the slot map snapshot, redirect classification. Pure.
//! - [`rewrite`]: the legacy -> cluster:v1 key layout rules, both directions. Pure.
//! - [`reply`]: client-visible error texts and reply builders. Pure.
//! - [`crossslot`]: the replies and writes of cross-slot commands computed from each key's value. Pure.
//! - [`backend`]: the endpoint: one pipelined connection to a Redis node (IO).
//! - [`topology`]: keeps the slot map fresh and owns the node connections (IO).
//! - [`dispatch`]: the only place the stages meet: one request in, one reply out.
//! - [`client`]: the session, one task per client connection (IO). It reads and decodes,
//!   runs each request through one chain of interceptors (order, access: NOAUTH, policy
//!   and ACL; the transaction; Pub/Sub; the connection's own commands) and forwards what
//!   none of them takes: a plain single-slot request is staged into its master's batch,
//!   anything else runs as a `dispatch` future. Replies leave in request order. It
//!   reaches nodes only through `upstream`.
//! - [`upstream`]: the concrete layer between `dispatch` and `backend` (IO): MOVED/ASK
//!   and retries, connections pinned to one client (WATCH, MULTI blocks, blocking
//!   commands, scripts), transaction blocks, the per-master batches of the session's
//!   direct requests, and subscription connections.
//! - [`server`]: the accept loop and shutdown (IO).
//! - [`config`]: YAML + CLI configuration, validated in one place.
//! - [`migrate`]: offline `migrate` and `inspect` tools for a keyspace (IO).
//! - [`admin`]: the admin HTTP endpoint (metrics, health, readiness) (IO).
//! - [`metrics`]: every metric name and the functions that record them.
//! - [`auth`], [`policy`]: who a client is and what it may run. Pure.
//! - [`reload`]: the live configuration (hot reload) and graceful drain (IO).
//! - [`tls`]: TLS for the client listener and the node connections (rustls).

pub mod acl;
pub mod admin;
pub mod auth;
pub mod backend;
mod buffer;
pub mod client;
pub mod command;
pub mod config;
pub mod crossslot;
pub mod dispatch;
pub mod metrics;
pub mod migrate;
pub mod policy;
pub mod protocol;
pub mod reload;
pub mod reply;
pub mod rewrite;
pub mod route;
pub mod server;
#[cfg(test)]
mod test_support;
pub mod tls;
pub mod topology;
pub mod upstream;
