//! The answers the proxy composes as one server from what the masters say: CLUSTER
//! emulation and CONFIG GET ([`emulate`]), INFO ([`info`]), MEMORY STATS
//! ([`memory_stats`]), SLOWLOG and LATENCY merges ([`monitors`]), the fan-outs over every
//! master ([`fanout`]: KEYS, DBSIZE, admin broadcasts), SCAN over every master ([`scan`]),
//! KEYS and SCAN under a layout ([`listing`]), the keys clients never see ([`hidden`]),
//! KEYS, SCAN and DBSIZE as the union of a live migration's source and target ([`union`]), WAIT from replication offsets
//! ([`replication`]) and SORT with patterns ([`sort`]).
//!
//! The planner (`dispatch::plan`) picks one of these from the command's shape; each
//! talks to the masters through `dispatch`'s forwarding only.

pub(super) mod emulate;
pub(super) mod fanout;
pub(super) mod hidden;
pub(super) mod info;
pub(super) mod listing;
pub(super) mod memory_stats;
pub(super) mod monitors;
pub(super) mod replication;
pub(super) mod scan;
pub(super) mod sort;
pub(super) mod union;
