//! The slot map: which master serves each of the 16384 slots. An immutable snapshot.

/// A node address as `host:port` (after any address remapping).
pub type NodeAddr = std::sync::Arc<str>;

/// Which master owns each slot, plus every node known (masters and replicas) as seeds.
#[derive(Debug, Clone)]
pub struct SlotMap {}
