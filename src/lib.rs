//! slotbridge: a Redis-protocol proxy in front of a Redis Cluster.
//!
//! # Layout
//!
//! A request walks down a stack of layers and its reply walks back up; a layer imports
//! only the ones below it (`tests/module_graph.rs` keeps the modules free of circles):
//!
//! ```text
//!  client      the session: read and decode, admit (access, transaction, Pub/Sub,
//!    │         the connection's own commands), replies in request order
//!    ▼
//!  dispatch    the logical layer: layout rewrite, plan on the command's shape, the
//!    │         answers composed as one server (INFO, CLUSTER, SORT, fan-outs), merges
//!    ▼
//!  upstream    the concrete layer: redirects and retries, pinned connections (WATCH,
//!    │         MULTI blocks, blocking commands, scripts), batches, subscriptions
//!    ▼
//!  backend     the endpoint: one pipelined connection to one node
//!
//!  topology    beside the stack: the slot map and the node connections (upstream
//!              routes with it; dispatch and client read it)
//!  pure        protocol, command, route, rewrite, reply, crossslot, auth, policy: used
//!              by every layer, importing none of them
//! ```
//!
//! Two shortcuts skip a floor: `client` stages plain single-slot requests straight into
//! `upstream`'s per-master batches (and runs transaction blocks and subscription
//! connections there), and `dispatch` names `backend`'s connection, batch and error
//! types where it finishes those direct requests and sends the layout's upkeep batches.
//!
//! - [`client`]: the session, one task per client connection (IO). It reads and decodes,
//!   runs each request through one chain of interceptors (order, access: NOAUTH, policy
//!   and ACL; the transaction; Pub/Sub; the connection's own commands) and forwards what
//!   none of them takes: a plain single-slot request is staged into its master's batch,
//!   anything else runs as a `dispatch` future. Replies leave in request order. It
//!   reaches nodes only through `upstream`.
//! - [`dispatch`]: the logical layer, where the stages meet: one request in, one reply
//!   out. Holds the [`dispatch::Proxy`] snapshot, built for start-up and every reload.
//! - [`upstream`]: the concrete layer between `dispatch` and `backend` (IO), with its own
//!   [`upstream::Upstream`] (topology, retry limits): MOVED/ASK and retries, connections
//!   pinned to one client (WATCH, MULTI blocks, blocking commands, scripts) and those kept
//!   ready for blocking commands, transaction blocks (and the check of a WATCH across slots
//!   before they run), the per-master batches of the session's direct requests, subscription
//!   connections, and the tracking connections that report every key a master modifies
//!   (client-side caching).
//! - [`backend`]: the endpoint: one pipelined connection to a Redis node (IO).
//! - [`topology`]: keeps the slot map fresh and owns the node connections (IO).
//! - [`protocol`]: RESP2/RESP3 framing, check-then-parse, inline commands, limits. Pure.
//! - [`command`]: the command table (from the backend's `COMMAND`, with a built-in
//!   fallback), key positions and each command's shape. Pure.
//! - [`route`]: hash slots, the slot map snapshot, redirect classification. Pure.
//! - [`rewrite`]: the legacy -> cluster:v1 key layout rules, both directions, and the key
//!   prefixes of the databases other than 0 (`SELECT n`). Pure.
//! - [`reply`]: client-visible error texts and reply builders. Pure.
//! - [`crossslot`]: the replies and writes of cross-slot commands computed from each key's value,
//!   and the steps of cross-slot moves and multi-key pops (blocking ones, LMPOP, ZMPOP). Pure.
//! - [`auth`], [`policy`]: who a client is and what it may run. Pure.
//! - [`acl`]: ACL management of the proxy's users, as Redis manages its own.
//! - [`server`]: the accept loop and shutdown (IO).
//! - [`config`]: YAML + CLI configuration, validated in one place.
//! - [`reload`]: the live configuration (hot reload) and graceful drain (IO).
//! - [`admin`]: the admin HTTP endpoint (metrics, health, readiness) (IO).
//! - [`metrics`]: every metric name and the functions that record them.
//! - [`migrate`]: offline `migrate` and `inspect` tools for a keyspace (IO).
//! - [`live`]: live migration's claim protocol, one key's move between two deployments
//!   while clients keep running (IO); not yet in the request path.
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
pub mod live;
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
