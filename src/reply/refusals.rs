//! Texts of the replies the proxy builds around a name or a number: what it refuses to
//! do as one server in front of a cluster, and why a fan-out failed.

use std::fmt::Display;

/// A key under a layout prefix that no rule matches, with `layout.strict` on.
pub fn layout_unmatched(key: impl Display, prefix: impl Display) -> String {
    format!(
        "ERR key '{key}' is under layout prefix '{prefix}' but matches no layout rule (layout.strict is on)"
    )
}

/// WAIT when the slot's master did not report its replication offset.
pub fn wait_without_offset(master: impl Display) -> String {
    format!("ERR proxy: WAIT failed: {master} did not report its replication offset as a master")
}

/// A CLUSTER subcommand (upper case) that addresses real cluster nodes.
pub fn cluster_subcommand_unavailable(subcommand: &str) -> String {
    format!(
        "ERR proxy: CLUSTER {subcommand} is not available through slotbridge (it addresses real cluster nodes)"
    )
}

/// SCAN over more masters than a cursor can number.
pub fn scan_too_many_masters(most: usize, masters: usize) -> String {
    format!("ERR proxy: SCAN walks at most {most} masters; the cluster has {masters}")
}

/// A node's SCAN cursor too large to share a cursor with the node's number.
pub fn scan_cursor_too_large(node: impl Display, bits: u32) -> String {
    format!("ERR proxy: {node} returned a SCAN cursor above 2^{bits}")
}

/// Something the proxy could not do for a client (a subscription it could not set up).
pub fn proxy_failure(reason: impl Display) -> String {
    format!("ERR proxy: {reason}")
}

/// A listing (KEYS, SCAN, DBSIZE) that could not read a live migration's source.
pub fn migration_source_failed(reason: impl Display) -> String {
    format!("ERR proxy: live migration {reason}")
}

/// A command that would change the shared backend connection it runs on.
pub fn changes_shared_connection(name: &str) -> String {
    format!(
        "ERR proxy: '{name}' is not supported: it would change the backend connection it runs on, which other clients share"
    )
}
