//! The help text and unit of every metric, given to the recorder once at start-up.

use metrics::{describe_counter, describe_gauge, Unit};

// The metric names, every one of which is described here.
use super::*;

/// Help texts and units of every metric.
pub(super) fn describe() {
    describe_counter!(
        COMMANDS,
        Unit::Count,
        "Commands handled, by lower-case command name (unknown commands as \"unknown\") and outcome (ok, error, crossslot, lost)"
    );
    describe_counter!(REDIRECTS, Unit::Count, "MOVED and ASK redirects followed");
    describe_counter!(
        RETRIES,
        Unit::Count,
        "Commands retried after a transient answer or an unreachable node, by reason"
    );
    describe_counter!(
        TOPOLOGY_REFRESHES,
        Unit::Count,
        "Slot map refreshes, by result (ok, error)"
    );
    describe_gauge!(
        SLOTS_COVERED,
        Unit::Count,
        "Hash slots (of 16384) the current slot map assigns to a master"
    );
    describe_gauge!(MASTERS, Unit::Count, "Masters in the current slot map");
    describe_gauge!(CLIENT_CONNECTIONS, Unit::Count, "Open client connections");
    describe_counter!(
        CLIENT_CONNECTIONS_TOTAL,
        Unit::Count,
        "Client connections accepted"
    );
    describe_counter!(
        CLIENT_CONNECTIONS_REJECTED,
        Unit::Count,
        "Client connections refused (connection limit, shutting down)"
    );
    describe_counter!(
        CLIENT_OUTPUT_LIMIT_DISCONNECTS,
        Unit::Count,
        "Clients disconnected for exceeding their output buffer limit (hard, or soft for its seconds)"
    );
    describe_counter!(
        MONITOR_DROPS,
        Unit::Count,
        "MONITOR clients disconnected for holding more unsent lines than their buffer allows"
    );
    describe_gauge!(
        BUFFERED_BYTES,
        Unit::Bytes,
        "Replies held for clients plus the estimate of those in flight, all clients together (max_buffered_bytes)"
    );
    describe_gauge!(
        MAX_BUFFERED_BYTES,
        Unit::Bytes,
        "The budget of slotbridge_buffered_bytes, max_buffered_bytes (0: none)"
    );
    describe_gauge!(
        FLOW_PAUSED_CLIENTS,
        Unit::Count,
        "Clients whose requests wait because they owe their own budget or the process's"
    );
    describe_gauge!(
        BACKEND_CONNECTIONS,
        Unit::Count,
        "Open connections to each cluster node"
    );
    describe_backend_and_layout();
    describe_clients_and_upstream();
}

/// [`describe`]'s node connection, traffic and layout metrics.
fn describe_backend_and_layout() {
    describe_counter!(
        BACKEND_CONNECT_ERRORS,
        Unit::Count,
        "Failed connects (TCP or handshake) to each cluster node"
    );
    describe_counter!(
        BACKEND_READ_TIMEOUTS,
        Unit::Count,
        "Connections to each cluster node closed after backend.read_timeout_ms without a reply"
    );
    describe_counter!(
        CLIENT_BYTES_RECEIVED,
        Unit::Bytes,
        "Bytes read from client connections"
    );
    describe_counter!(
        CLIENT_BYTES_SENT,
        Unit::Bytes,
        "Bytes written to client connections"
    );
    describe_counter!(
        CROSSSLOT_REFUSALS,
        Unit::Count,
        "Multi-key commands refused because their keys span slots"
    );
    describe_counter!(REWRITES, Unit::Count, "Keys rewritten, by rule family");
    describe_counter!(
        UNMATCHED_KEYS,
        Unit::Count,
        "Keys under a legacy prefix that no rule matched, by prefix"
    );
    describe_counter!(
        INDEX_UPKEEP,
        Unit::Count,
        "Index upkeep script calls (writes to index-backed keys, one per slot)"
    );
}

/// [`describe`]'s client state, transaction, reload and upstream metrics.
fn describe_clients_and_upstream() {
    describe_gauge!(PUBSUB_SUBSCRIBERS, Unit::Count, "Clients in subscribe mode");
    describe_gauge!(
        BLOCKED_CLIENTS,
        Unit::Count,
        "Clients waiting in a blocking command"
    );
    describe_gauge!(
        TRACKING_CLIENTS,
        Unit::Count,
        "Clients with CLIENT TRACKING on"
    );
    describe_gauge!(
        TRACKING_KEYS,
        Unit::Count,
        "Keys tracking clients read and are owed an invalidation for"
    );
    describe_counter!(
        TRACKING_INVALIDATIONS,
        Unit::Count,
        "Invalidation messages sent to tracking clients, by kind (keys, flush)"
    );
    describe_counter!(
        SPLIT_TRANSACTIONS,
        Unit::Count,
        "MULTI/EXEC transactions whose keys spanned slots and were split"
    );
    describe_counter!(
        SPLIT_TRANSACTIONS_PARTLY_APPLIED,
        Unit::Count,
        "Split transactions with WATCH answered with some parts applied and a part aborted because a watched key changed after the check"
    );
    describe_counter!(
        AUTH_FAILURES,
        Unit::Count,
        "Failed client authentication attempts"
    );
    describe_counter!(
        CONFIG_RELOADS,
        Unit::Count,
        "Configuration reloads, by result (ok, error)"
    );
    describe_gauge!(
        UPSTREAM_INFO,
        Unit::Count,
        "The upstream in force, by kind (cluster, standalone, sentinel): 1 for it, 0 for the others"
    );
    describe_gauge!(
        UPSTREAM_MASTER_INFO,
        Unit::Count,
        "A standalone or Sentinel upstream's master, by address: 1 for the current one, 0 for earlier ones"
    );
    describe_counter!(
        UPSTREAM_SWITCHES,
        Unit::Count,
        "Times the Sentinels' master changed and the proxy moved new commands to the new one"
    );
}
