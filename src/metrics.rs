//! Every metric the proxy exports: its name, help text, unit, and the function that records
//! it, in this one place. The per-command series live in `command` (their latency
//! histograms, kept by the proxy rather than the recorder, in `histogram`), the guards that
//! count open connections in `connection`. The live migration's series are rendered by
//! `live::metrics` from the migration's own counters.
//!
//! Invariants: every name is `slotbridge_*`; label values come only from bounded sets (the
//! command table, the cluster's node addresses, rule families and prefixes, fixed reason
//! words), never from client input. Recording on the per-command path allocates nothing:
//! [`CommandMetrics`] holds each command's handles, created once on first use.
//! Without an installed recorder (`admin.metrics: false`) every call is a no-op, except
//! the few process totals INFO reports, which are plain atomics.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use metrics::{counter, gauge, Counter};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

mod command;
mod connection;
mod describe;
mod histogram;

pub use command::{CommandMetrics, Outcome};
pub use connection::{
    publish_client_totals, BackendConnection, BlockedClient, ClientConnection, Subscriber,
};

/// Commands by name and outcome.
pub const COMMANDS: &str = "slotbridge_commands_total";
/// Time from dispatch to complete reply, per command.
pub const COMMAND_DURATION: &str = "slotbridge_command_duration_seconds";
/// MOVED and ASK replies followed.
pub const REDIRECTS: &str = "slotbridge_redirects_total";
/// Retries by reason.
pub const RETRIES: &str = "slotbridge_retries_total";
/// Slot map refreshes by result.
pub const TOPOLOGY_REFRESHES: &str = "slotbridge_topology_refreshes_total";
/// Slots the current slot map covers.
pub const SLOTS_COVERED: &str = "slotbridge_slots_covered";
/// Masters in the current slot map.
pub const MASTERS: &str = "slotbridge_masters";
/// Open client connections.
pub const CLIENT_CONNECTIONS: &str = "slotbridge_client_connections";
/// Client connections accepted.
pub const CLIENT_CONNECTIONS_TOTAL: &str = "slotbridge_client_connections_total";
/// Client connections refused.
pub const CLIENT_CONNECTIONS_REJECTED: &str = "slotbridge_client_connections_rejected_total";
/// Clients disconnected for exceeding their output buffer limit.
pub const CLIENT_OUTPUT_LIMIT_DISCONNECTS: &str =
    "slotbridge_client_output_limit_disconnects_total";
/// Monitors dropped for not reading their lines fast enough.
pub const MONITOR_DROPS: &str = "slotbridge_monitor_drops_total";
/// Clients with CLIENT TRACKING on.
pub const TRACKING_CLIENTS: &str = "slotbridge_tracking_clients";
/// Keys in the table of what tracking clients read (bounded by `tracking_table_max_keys`).
pub const TRACKING_KEYS: &str = "slotbridge_tracking_keys";
/// Invalidation messages sent to tracking clients, by kind (keys, flush).
pub const TRACKING_INVALIDATIONS: &str = "slotbridge_tracking_invalidations_total";
/// Bytes every client owes together: replies held for them and the estimate of those in
/// flight (flow control, against `max_buffered_bytes`).
pub const BUFFERED_BYTES: &str = "slotbridge_buffered_bytes";
/// The process budget those bytes count against (`max_buffered_bytes`; 0: none).
pub const MAX_BUFFERED_BYTES: &str = "slotbridge_max_buffered_bytes";
/// Clients whose requests wait because they owe their budget or the process's.
pub const FLOW_PAUSED_CLIENTS: &str = "slotbridge_flow_paused_clients";
/// Open backend connections per node.
pub const BACKEND_CONNECTIONS: &str = "slotbridge_backend_connections";
/// Failed backend connects per node.
pub const BACKEND_CONNECT_ERRORS: &str = "slotbridge_backend_connect_errors_total";
/// Backend connections closed because the node sent nothing while replies were due.
pub const BACKEND_READ_TIMEOUTS: &str = "slotbridge_backend_read_timeouts_total";
/// Bytes read from clients.
pub const CLIENT_BYTES_RECEIVED: &str = "slotbridge_client_bytes_received_total";
/// Bytes written to clients.
pub const CLIENT_BYTES_SENT: &str = "slotbridge_client_bytes_sent_total";
/// Multi-key commands refused with CROSSSLOT.
pub const CROSSSLOT_REFUSALS: &str = "slotbridge_crossslot_refusals_total";
/// Keys rewritten, by rule family.
pub const REWRITES: &str = "slotbridge_layout_rewrites_total";
/// Keys no rule matched, by legacy prefix.
pub const UNMATCHED_KEYS: &str = "slotbridge_layout_unmatched_keys_total";
/// Index upkeep operations, by rule family.
pub const INDEX_UPKEEP: &str = "slotbridge_layout_index_upkeep_total";
/// Clients in subscribe mode.
pub const PUBSUB_SUBSCRIBERS: &str = "slotbridge_pubsub_subscribers";
/// Clients waiting in a blocking command.
pub const BLOCKED_CLIENTS: &str = "slotbridge_blocked_clients";
/// Transactions split across slots.
pub const SPLIT_TRANSACTIONS: &str = "slotbridge_split_transactions_total";
/// Split transactions with WATCH of which some parts were applied and a part was aborted
/// by its master (a watched key changed after EXEC's check).
pub const SPLIT_TRANSACTIONS_PARTLY_APPLIED: &str =
    "slotbridge_split_transactions_partly_applied_total";
/// Failed client AUTH/HELLO AUTH attempts.
pub const AUTH_FAILURES: &str = "slotbridge_auth_failures_total";
/// Configuration reloads by result.
pub const CONFIG_RELOADS: &str = "slotbridge_config_reloads_total";
/// The kind of upstream in force: 1 for it, 0 for the others.
pub const UPSTREAM_INFO: &str = "slotbridge_upstream_info";
/// A single-node upstream's master: 1 for the current one, 0 for those before it.
pub const UPSTREAM_MASTER_INFO: &str = "slotbridge_upstream_master_info";
/// Times a Sentinel-managed upstream's master changed.
pub const UPSTREAM_SWITCHES: &str = "slotbridge_upstream_switches_total";

/// Help text of [`COMMAND_DURATION`], a histogram [`CommandMetrics`] keeps and renders
/// itself (buckets: `histogram::BUCKETS`, 100 µs to 1 s).
pub const COMMAND_DURATION_HELP: &str =
    "Time from dispatching a command to its complete reply, by command";

/// Builds the Prometheus recorder, installs it as the process-wide recorder and describes
/// every metric. Returns the handle that renders the exposition; `Err` when a recorder is
/// already installed (only one per process).
pub fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
    describe::describe();
    Ok(handle)
}

/// Process totals that INFO's `# Proxy` section reports; kept as atomics because the
/// recorder can't be read back (and may not be installed).
struct Totals {
    clients: AtomicI64,
    blocked_clients: AtomicI64,
    tracking_clients: AtomicI64,
    tracking_keys: AtomicU64,
    tracking_items: AtomicU64,
    tracking_prefixes: AtomicU64,
    connections_received: AtomicU64,
    connections_rejected: AtomicU64,
    moved: AtomicU64,
    ask: AtomicU64,
    retries: AtomicU64,
    refreshes_ok: AtomicU64,
    refreshes_error: AtomicU64,
    upstream_switches: AtomicU64,
}

static TOTALS: Totals = Totals {
    clients: AtomicI64::new(0),
    blocked_clients: AtomicI64::new(0),
    tracking_clients: AtomicI64::new(0),
    tracking_keys: AtomicU64::new(0),
    tracking_items: AtomicU64::new(0),
    tracking_prefixes: AtomicU64::new(0),
    connections_received: AtomicU64::new(0),
    connections_rejected: AtomicU64::new(0),
    moved: AtomicU64::new(0),
    ask: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    refreshes_ok: AtomicU64::new(0),
    refreshes_error: AtomicU64::new(0),
    upstream_switches: AtomicU64::new(0),
};

/// A snapshot of the process totals, for INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyTotals {
    /// Open client connections.
    pub clients: i64,
    /// Clients waiting in a blocking command.
    pub blocked_clients: i64,
    /// Clients with CLIENT TRACKING on.
    pub tracking_clients: i64,
    /// The tracking table's keys, client ids over them, and BCAST prefixes.
    pub tracking_table: [u64; 3],
    /// Client connections accepted since start.
    pub connections_received: u64,
    /// Client connections refused since start.
    pub connections_rejected: u64,
    /// MOVED redirects followed.
    pub moved: u64,
    /// ASK redirects followed.
    pub ask: u64,
    /// Retries of any reason.
    pub retries: u64,
    /// Successful slot map refreshes.
    pub refreshes_ok: u64,
    /// Failed slot map refreshes.
    pub refreshes_error: u64,
    /// Master switches of a Sentinel-managed upstream.
    pub upstream_switches: u64,
}

/// The process totals now.
pub fn totals() -> ProxyTotals {
    ProxyTotals {
        clients: TOTALS.clients.load(Ordering::Relaxed),
        blocked_clients: TOTALS.blocked_clients.load(Ordering::Relaxed),
        tracking_clients: TOTALS.tracking_clients.load(Ordering::Relaxed),
        tracking_table: [
            TOTALS.tracking_keys.load(Ordering::Relaxed),
            TOTALS.tracking_items.load(Ordering::Relaxed),
            TOTALS.tracking_prefixes.load(Ordering::Relaxed),
        ],
        connections_received: TOTALS.connections_received.load(Ordering::Relaxed),
        connections_rejected: TOTALS.connections_rejected.load(Ordering::Relaxed),
        moved: TOTALS.moved.load(Ordering::Relaxed),
        ask: TOTALS.ask.load(Ordering::Relaxed),
        retries: TOTALS.retries.load(Ordering::Relaxed),
        refreshes_ok: TOTALS.refreshes_ok.load(Ordering::Relaxed),
        refreshes_error: TOTALS.refreshes_error.load(Ordering::Relaxed),
        upstream_switches: TOTALS.upstream_switches.load(Ordering::Relaxed),
    }
}

/// A MOVED redirect was followed.
pub fn redirect_moved() {
    TOTALS.moved.fetch_add(1, Ordering::Relaxed);
    counter!(REDIRECTS, "kind" => "moved").increment(1);
}

/// An ASK redirect was followed.
pub fn redirect_ask() {
    TOTALS.ask.fetch_add(1, Ordering::Relaxed);
    counter!(REDIRECTS, "kind" => "ask").increment(1);
}

/// Why a command is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryReason {
    /// `-TRYAGAIN` (a multi-key command during a slot migration).
    TryAgain,
    /// `-CLUSTERDOWN`.
    ClusterDown,
    /// `-LOADING` (the node is loading its dataset).
    Loading,
    /// `-READONLY` (the node became a replica).
    ReadOnly,
    /// `-MASTERDOWN`.
    MasterDown,
    /// The node could not be reached, or the slot had no master yet.
    Unreachable,
}

impl RetryReason {
    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            RetryReason::TryAgain => "tryagain",
            RetryReason::ClusterDown => "clusterdown",
            RetryReason::Loading => "loading",
            RetryReason::ReadOnly => "readonly",
            RetryReason::MasterDown => "masterdown",
            RetryReason::Unreachable => "unreachable",
        }
    }

    /// The reason for a retryable redirect (`retry_reason()` of `route::Redirect`), if it
    /// is one of the retry reasons.
    pub fn from_label(label: &str) -> Option<RetryReason> {
        Some(match label {
            "tryagain" => RetryReason::TryAgain,
            "clusterdown" => RetryReason::ClusterDown,
            "loading" => RetryReason::Loading,
            "readonly" => RetryReason::ReadOnly,
            "masterdown" => RetryReason::MasterDown,
            "unreachable" => RetryReason::Unreachable,
            _ => return None,
        })
    }
}

/// A command is about to be retried.
pub fn retry(reason: RetryReason) {
    TOTALS.retries.fetch_add(1, Ordering::Relaxed);
    let counter = match reason {
        RetryReason::TryAgain => counter!(RETRIES, "reason" => "tryagain"),
        RetryReason::ClusterDown => counter!(RETRIES, "reason" => "clusterdown"),
        RetryReason::Loading => counter!(RETRIES, "reason" => "loading"),
        RetryReason::ReadOnly => counter!(RETRIES, "reason" => "readonly"),
        RetryReason::MasterDown => counter!(RETRIES, "reason" => "masterdown"),
        RetryReason::Unreachable => counter!(RETRIES, "reason" => "unreachable"),
    };
    counter.increment(1);
}

/// A slot map refresh finished.
pub fn topology_refresh(ok: bool) {
    if ok {
        TOTALS.refreshes_ok.fetch_add(1, Ordering::Relaxed);
        counter!(TOPOLOGY_REFRESHES, "result" => "ok").increment(1);
    } else {
        TOTALS.refreshes_error.fetch_add(1, Ordering::Relaxed);
        counter!(TOPOLOGY_REFRESHES, "result" => "error").increment(1);
    }
}

/// A new slot map was installed.
pub fn slot_map(slots_covered: usize, masters: usize) {
    gauge!(SLOTS_COVERED).set(slots_covered as f64);
    gauge!(MASTERS).set(masters as f64);
}

/// A client connection was refused (`maxclients` reached).
pub fn client_rejected() {
    TOTALS.connections_rejected.fetch_add(1, Ordering::Relaxed);
    counter!(CLIENT_CONNECTIONS_REJECTED).increment(1);
}

/// The gauge of what all clients owe (flow control).
pub fn buffered_bytes() -> metrics::Gauge {
    gauge!(BUFFERED_BYTES)
}

/// The process budget for what all clients owe (`max_buffered_bytes`).
pub fn max_buffered_bytes(limit: usize) {
    gauge!(MAX_BUFFERED_BYTES).set(limit as f64);
}

/// The gauge of clients paused by flow control.
pub fn flow_paused_clients() -> metrics::Gauge {
    gauge!(FLOW_PAUSED_CLIENTS)
}

/// A client was disconnected for exceeding its output buffer limit.
pub fn client_output_limit_disconnect() {
    counter!(CLIENT_OUTPUT_LIMIT_DISCONNECTS).increment(1);
}

/// A client turned tracking on (`delta` 1) or off (-1).
pub fn tracking_clients(delta: i64) {
    TOTALS.tracking_clients.fetch_add(delta, Ordering::Relaxed);
    gauge!(TRACKING_CLIENTS).increment(delta as f64);
}

/// The tracking table holds `keys` keys, `items` client ids over them, and BCAST clients
/// `prefixes` distinct prefixes.
pub fn tracking_table(keys: usize, items: usize, prefixes: usize) {
    TOTALS.tracking_keys.store(keys as u64, Ordering::Relaxed);
    TOTALS.tracking_items.store(items as u64, Ordering::Relaxed);
    TOTALS
        .tracking_prefixes
        .store(prefixes as u64, Ordering::Relaxed);
    gauge!(TRACKING_KEYS).set(keys as f64);
}

/// An invalidation message of `kind` (`keys`, `flush`) was sent.
pub fn tracking_invalidation(kind: &'static str) {
    counter!(TRACKING_INVALIDATIONS, "kind" => kind).increment(1);
}

/// A monitor was disconnected for falling behind its feed.
pub fn monitor_drop() {
    counter!(MONITOR_DROPS).increment(1);
}

/// A connect (TCP or handshake) to `node` failed.
pub fn backend_connect_error(node: &str) {
    counter!(BACKEND_CONNECT_ERRORS, "node" => node.to_string()).increment(1);
}

/// A connection to `node` was closed: replies were due and none came within the read timeout.
pub fn backend_read_timeout(node: &str) {
    counter!(BACKEND_READ_TIMEOUTS, "node" => node.to_string()).increment(1);
}

/// A multi-key command was refused because its keys span slots.
pub fn crossslot_refusals(count: u64) {
    counter!(CROSSSLOT_REFUSALS).increment(count);
}

/// A key was rewritten by a rule of `family` (a rule family name from the rules file).
pub fn rewrite(family: &str) -> Counter {
    counter!(REWRITES, "family" => family.to_string())
}

/// A key under the legacy `prefix` (the rule prefix from the rules file, never the key
/// itself) matched no rule.
pub fn unmatched(prefix: &str) -> Counter {
    counter!(UNMATCHED_KEYS, "prefix" => prefix.to_string())
}

/// An index upkeep script call ran (one per slot of a write to index-backed keys).
pub fn index_upkeep() {
    counter!(INDEX_UPKEEP).increment(1);
}

/// A transaction spanning slots was split.
pub fn split_transaction() {
    counter!(SPLIT_TRANSACTIONS).increment(1);
}

/// A split transaction with WATCH had parts applied and a part aborted by its master.
pub fn split_transaction_partly_applied() {
    counter!(SPLIT_TRANSACTIONS_PARTLY_APPLIED).increment(1);
}

/// A client authentication attempt failed.
pub fn auth_failure() {
    counter!(AUTH_FAILURES).increment(1);
}

/// A configuration reload finished.
pub fn config_reload(ok: bool) {
    let result = if ok { "ok" } else { "error" };
    counter!(CONFIG_RELOADS, "result" => result).increment(1);
}

/// `kind` (`cluster`, `standalone`, `sentinel`) is the upstream in force now.
pub fn upstream_kind(kind: &'static str) {
    for each in ["cluster", "standalone", "sentinel"] {
        gauge!(UPSTREAM_INFO, "kind" => each).set(if each == kind { 1.0 } else { 0.0 });
    }
    if kind == "sentinel" {
        // Shown from the start, so an alert on its increase has a series to watch.
        counter!(UPSTREAM_SWITCHES).increment(0);
    }
}

/// The upstream's single master is now `current` (`None`: none known, or a cluster); the
/// one shown before, whichever upstream it belonged to, drops to 0.
pub fn upstream_master(current: Option<&str>) {
    static SHOWN: Mutex<Option<String>> = Mutex::new(None);
    let mut shown = SHOWN.lock().unwrap_or_else(PoisonError::into_inner);
    if shown.as_deref() == current {
        return;
    }
    if let Some(previous) = shown.take() {
        gauge!(UPSTREAM_MASTER_INFO, "address" => previous).set(0.0);
    }
    if let Some(current) = current {
        gauge!(UPSTREAM_MASTER_INFO, "address" => current.to_string()).set(1.0);
        *shown = Some(current.to_string());
    }
}

/// A Sentinel-managed upstream's master changed.
pub fn upstream_switch() {
    TOTALS.upstream_switches.fetch_add(1, Ordering::Relaxed);
    counter!(UPSTREAM_SWITCHES).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_follows_reply_type() {
        assert_eq!(Outcome::of_reply(b"+OK\r\n"), Outcome::Ok);
        assert_eq!(Outcome::of_reply(b"$-1\r\n"), Outcome::Ok);
        assert_eq!(Outcome::of_reply(b"-ERR wrong\r\n"), Outcome::Error);
        assert_eq!(Outcome::of_reply(b"!5\r\nERR x\r\n"), Outcome::Error);
        assert_eq!(Outcome::of_reply(b""), Outcome::Ok);
        let crossslot = crate::reply::cross_slot(&[(b"a", 15495), (b"b", 3300)]);
        assert_eq!(Outcome::of_reply(&crossslot), Outcome::CrossSlot);
        let lost = crate::reply::outcome_unknown("127.0.0.1:1", "reset");
        assert_eq!(Outcome::of_reply(&lost), Outcome::Lost);
        let unavailable = crate::reply::unavailable("127.0.0.1:1", "refused");
        assert_eq!(Outcome::of_reply(&unavailable), Outcome::Error);
    }

    #[test]
    fn every_name_is_a_slotbridge_name() {
        let names = [
            COMMANDS,
            COMMAND_DURATION,
            REDIRECTS,
            RETRIES,
            TOPOLOGY_REFRESHES,
            SLOTS_COVERED,
            MASTERS,
            CLIENT_CONNECTIONS,
            CLIENT_CONNECTIONS_TOTAL,
            CLIENT_CONNECTIONS_REJECTED,
            BACKEND_CONNECTIONS,
            BACKEND_CONNECT_ERRORS,
            BACKEND_READ_TIMEOUTS,
            CLIENT_BYTES_RECEIVED,
            CLIENT_BYTES_SENT,
            CROSSSLOT_REFUSALS,
            REWRITES,
            UNMATCHED_KEYS,
            INDEX_UPKEEP,
            PUBSUB_SUBSCRIBERS,
            BLOCKED_CLIENTS,
            TRACKING_CLIENTS,
            TRACKING_KEYS,
            TRACKING_INVALIDATIONS,
            SPLIT_TRANSACTIONS,
            SPLIT_TRANSACTIONS_PARTLY_APPLIED,
            AUTH_FAILURES,
            CONFIG_RELOADS,
            UPSTREAM_INFO,
            UPSTREAM_MASTER_INFO,
            UPSTREAM_SWITCHES,
        ];
        for name in names {
            let rest = name.strip_prefix("slotbridge_").unwrap_or("");
            assert!(
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
    }

    #[test]
    fn retry_reasons_round_trip() {
        for reason in [
            RetryReason::TryAgain,
            RetryReason::ClusterDown,
            RetryReason::Loading,
            RetryReason::ReadOnly,
            RetryReason::MasterDown,
            RetryReason::Unreachable,
        ] {
            assert_eq!(RetryReason::from_label(reason.label()), Some(reason));
        }
        assert_eq!(RetryReason::from_label("moved"), None);
    }
}
