//! What commands route with: an immutable snapshot of the slot map and, per master, its
//! shared connections. A snapshot never changes; the topology swaps in a new one.

use crate::backend::NodeConn;
use crate::protocol::Proto;
use crate::route::SlotMap;

/// One node's shared connections, one per protocol version, so replies pass byte-exact.
#[derive(Clone)]
pub struct NodeConns {
    pub(super) resp2: NodeConn,
    pub(super) resp3: NodeConn,
}

impl NodeConns {
    /// The connection that speaks `proto`.
    pub fn get(&self, proto: Proto) -> &NodeConn {
        match proto {
            Proto::Resp2 => &self.resp2,
            Proto::Resp3 => &self.resp3,
        }
    }
}

/// An immutable routing snapshot: the slot map and a connection handle per master.
pub struct Routing {
    /// The slot map this snapshot was built from.
    pub map: SlotMap,
    /// Connections of `map.masters()`, same order.
    pub(super) masters: Vec<NodeConns>,
}

impl Routing {
    /// The master serving `slot`, if the slot is covered.
    pub fn master_for_slot(&self, slot: u16) -> Option<&NodeConns> {
        self.map
            .master_index(slot)
            .and_then(|i| self.masters.get(i))
    }

    /// Every master's connections.
    pub fn masters(&self) -> &[NodeConns] {
        &self.masters
    }
}
