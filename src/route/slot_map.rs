//! The slot map: which master serves each of the 16384 slots. An immutable snapshot.
//!
//! Built from a node's `CLUSTER SHARDS` reply (Redis 7) or, on older servers, from
//! `CLUSTER SLOTS`, in either RESP2 or RESP3 form. Invariants: every slot owner is an index
//! into [`SlotMap::masters`]; every address is in canonical `host:port` form (IPv6 hosts in
//! brackets) after address remapping; failed nodes are left out. A change (a `MOVED`)
//! produces a new map, so readers can share one snapshot without locks.

use std::collections::HashMap;
use std::sync::Arc;

use crate::protocol::ReplyView;

use super::SLOT_COUNT;

/// A node address as `host:port` (after any address remapping).
pub type NodeAddr = std::sync::Arc<str>;

/// Marks a slot that no reachable master serves.
const NO_OWNER: u16 = u16::MAX;

/// Which master owns each slot, plus every node known (masters and replicas) as seeds.
#[derive(Debug, Clone)]
pub struct SlotMap {
    /// For each slot, the index of its master in `masters`, or [`NO_OWNER`].
    owner: Vec<u16>,
    masters: Vec<NodeAddr>,
    nodes: Vec<NodeAddr>,
    covered: usize,
}

impl SlotMap {
    /// Whether every slot has the same master (by address) in both maps.
    pub fn same_owners(&self, other: &SlotMap) -> bool {
        (0..SLOT_COUNT as u16).all(|slot| self.master_addr(slot) == other.master_addr(slot))
    }

    /// A map that serves no slot yet (before the first refresh).
    pub fn empty() -> SlotMap {
        SlotMap {
            owner: vec![NO_OWNER; SLOT_COUNT],
            masters: Vec::new(),
            nodes: Vec::new(),
            covered: 0,
        }
    }

    /// A map for a standalone (non-cluster) upstream: every slot lives on `addr`.
    pub fn single(addr: NodeAddr) -> SlotMap {
        SlotMap {
            owner: vec![0; SLOT_COUNT],
            masters: vec![addr.clone()],
            nodes: vec![addr],
            covered: SLOT_COUNT,
        }
    }

    /// Builds the map from the raw reply to `CLUSTER SHARDS` (RESP2 or RESP3).
    ///
    /// Node addresses use the `ip` field, or `endpoint` when `ip` is absent; `?` endpoints
    /// and nodes whose health is `fail` are skipped. Every address is looked up in `remap`
    /// (announced `host:port` -> reachable `host:port`). An error reply, or a reply that
    /// is not shaped like `CLUSTER SHARDS`, is an error naming what was wrong.
    pub fn from_cluster_shards(
        frame: &[u8],
        remap: &HashMap<String, String>,
    ) -> Result<SlotMap, String> {
        SlotMap::from_cluster_shards_on(frame, remap, NodePort::Plain)
    }

    /// As [`SlotMap::from_cluster_shards`], with the nodes reached on `port`: over TLS a
    /// node's `tls-port` (a `tls-cluster yes` node), else its `port` (a node behind a TLS
    /// terminator announces that one).
    pub fn from_cluster_shards_on(
        frame: &[u8],
        remap: &HashMap<String, String>,
        port: NodePort,
    ) -> Result<SlotMap, String> {
        let mut builder = Builder::new();
        for shard in read_reply(frame)?.read_list("CLUSTER SHARDS reply")? {
            let fields = shard.read_fields("shard")?;
            let slots = field(&fields, "slots")?.read_list("shard slots")?;
            let mut master = None;
            for node in field(&fields, "nodes")?.read_list("shard nodes")? {
                let node = node.read_fields("shard node")?;
                let healthy = optional_text(&node, "health")
                    .is_none_or(|health| health != "fail" && health != "failed");
                let Some(addr) = shard_node_addr(&node, remap, port)? else {
                    continue;
                };
                if !healthy {
                    continue;
                }
                builder.add_node(&addr);
                let is_master = optional_text(&node, "role").is_some_and(|r| r == "master");
                if is_master && master.is_none() {
                    master = Some(addr);
                }
            }
            let Some(master) = master else { continue };
            if slots.len() % 2 != 0 {
                return Err("shard slots: odd number of range bounds".to_string());
            }
            for range in slots.chunks(2) {
                let start = range[0].read_slot("slot range start")?;
                let end = range[1].read_slot("slot range end")?;
                builder.assign(start, end, &master)?;
            }
        }
        Ok(builder.finish())
    }

    /// Builds the map from the raw reply to `CLUSTER SLOTS` (RESP2 or RESP3).
    ///
    /// `from` is the `host:port` of the node that answered: an empty or null endpoint
    /// means "the host you asked", as Redis documents. `?` endpoints are skipped.
    /// Every address is looked up in `remap` as in [`SlotMap::from_cluster_shards`].
    pub fn from_cluster_slots(
        frame: &[u8],
        from: &str,
        remap: &HashMap<String, String>,
    ) -> Result<SlotMap, String> {
        let from_host = split_host_port(from).map(|(host, _)| host).unwrap_or("");
        let mut builder = Builder::new();
        for entry in read_reply(frame)?.read_list("CLUSTER SLOTS reply")? {
            let entry = entry.read_list("slot range")?;
            if entry.len() < 3 {
                return Err("slot range: fewer than 3 elements".to_string());
            }
            let start = entry[0].read_slot("slot range start")?;
            let end = entry[1].read_slot("slot range end")?;
            let mut master = None;
            for (position, node) in entry[2..].iter().enumerate() {
                let Some(addr) = slots_node_addr(node, from_host, remap)? else {
                    continue;
                };
                builder.add_node(&addr);
                if position == 0 {
                    master = Some(addr);
                }
            }
            if let Some(master) = master {
                builder.assign(start, end, &master)?;
            }
        }
        Ok(builder.finish())
    }

    /// Canonical form of `addr` (`host:port`, IPv6 hosts in brackets) after `remap`.
    /// Use it on addresses taken from redirects before [`SlotMap::with_slot_moved`].
    pub fn remap_addr(addr: &str, remap: &HashMap<String, String>) -> NodeAddr {
        let canonical = match split_host_port(addr) {
            Some((host, port)) => join_host_port(host, port),
            None => addr.to_string(),
        };
        match remap.get(&canonical).or_else(|| remap.get(addr)) {
            Some(reachable) => Arc::from(reachable.as_str()),
            None => Arc::from(canonical),
        }
    }

    /// Index into [`SlotMap::masters`] of the master serving `slot`, if any.
    pub fn master_index(&self, slot: u16) -> Option<usize> {
        match self.owner.get(usize::from(slot)) {
            Some(&index) if index != NO_OWNER => Some(usize::from(index)),
            _ => None,
        }
    }

    /// Address of the master serving `slot`, if any.
    pub fn master_addr(&self, slot: u16) -> Option<&NodeAddr> {
        self.master_index(slot).and_then(|i| self.masters.get(i))
    }

    /// Index into [`SlotMap::masters`] of the master at `addr`, if it is one.
    pub fn master_index_of(&self, addr: &str) -> Option<usize> {
        self.masters.iter().position(|m| &**m == addr)
    }

    /// Masters that served at least one slot when the map was built, plus `MOVED` targets.
    pub fn masters(&self) -> &[NodeAddr] {
        &self.masters
    }

    /// Every healthy node seen (masters and replicas): seeds for the next refresh.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    /// How many of the 16384 slots have a master.
    pub fn slots_covered(&self) -> usize {
        self.covered
    }

    /// Whether every slot has a master.
    pub fn is_complete(&self) -> bool {
        self.covered == SLOT_COUNT
    }

    /// A copy of this map with `slot` served by `addr` (already remapped), as a `MOVED`
    /// reply says, to use until the next full refresh. An out-of-range slot is ignored.
    pub fn with_slot_moved(&self, slot: u16, addr: NodeAddr) -> SlotMap {
        let mut moved = self.clone();
        if usize::from(slot) >= SLOT_COUNT {
            return moved;
        }
        let index = match moved.master_index_of(&addr) {
            Some(index) => index,
            None => {
                moved.masters.push(addr.clone());
                moved.masters.len() - 1
            }
        };
        if !moved.nodes.contains(&addr) {
            moved.nodes.push(addr);
        }
        let owner = &mut moved.owner[usize::from(slot)];
        if *owner == NO_OWNER {
            moved.covered += 1;
        }
        // A map never holds more masters than slots, so the index fits.
        *owner = u16::try_from(index).unwrap_or(NO_OWNER);
        moved
    }
}

/// Collects nodes and slot owners while a reply is walked.
struct Builder {
    owner: Vec<u16>,
    masters: Vec<NodeAddr>,
    nodes: Vec<NodeAddr>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            owner: vec![NO_OWNER; SLOT_COUNT],
            masters: Vec::new(),
            nodes: Vec::new(),
        }
    }

    fn add_node(&mut self, addr: &NodeAddr) {
        if !self.nodes.contains(addr) {
            self.nodes.push(addr.clone());
        }
    }

    fn assign(&mut self, start: u16, end: u16, master: &NodeAddr) -> Result<(), String> {
        if start > end {
            return Err(format!("slot range {start}-{end} is reversed"));
        }
        let index = match self.masters.iter().position(|m| m == master) {
            Some(index) => index,
            None => {
                self.masters.push(master.clone());
                self.masters.len() - 1
            }
        };
        let index = u16::try_from(index).map_err(|_| "too many masters".to_string())?;
        for owner in &mut self.owner[usize::from(start)..=usize::from(end)] {
            *owner = index;
        }
        Ok(())
    }

    fn finish(self) -> SlotMap {
        let covered = self.owner.iter().filter(|&&o| o != NO_OWNER).count();
        SlotMap {
            owner: self.owner,
            masters: self.masters,
            nodes: self.nodes,
            covered,
        }
    }
}

/// Which port of a `CLUSTER SHARDS` node the proxy connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePort {
    /// `port`: plain TCP.
    Plain,
    /// `tls-port` when announced, else `port`: TLS.
    Tls,
}

/// The address of one node of a `CLUSTER SHARDS` shard, or None when it has no usable one.
fn shard_node_addr(
    node: &[(String, ReplyView<'_>)],
    remap: &HashMap<String, String>,
    reached_on: NodePort,
) -> Result<Option<NodeAddr>, String> {
    let host = match optional_text(node, "ip").filter(|ip| !ip.is_empty()) {
        Some(ip) => ip,
        None => match optional_text(node, "endpoint") {
            Some(endpoint) if !endpoint.is_empty() && endpoint != "?" => endpoint,
            _ => return Ok(None),
        },
    };
    let port_of = |field: &str| {
        node.iter()
            .find(|(name, _)| name == field)
            .map(|(_, value)| value.read_port("node port"))
            .transpose()
    };
    let port = match reached_on {
        NodePort::Tls => match port_of("tls-port")? {
            Some(port) => Some(port),
            None => port_of("port")?,
        },
        NodePort::Plain => port_of("port")?,
    };
    // A node announcing only a TLS port cannot be reached over plain TCP.
    let Some(port) = port else {
        return Ok(None);
    };
    Ok(Some(SlotMap::remap_addr(
        &join_host_port(&host, port),
        remap,
    )))
}

/// The address of one `[endpoint, port, id, ...]` node of a `CLUSTER SLOTS` range.
fn slots_node_addr(
    node: &ReplyView<'_>,
    from_host: &str,
    remap: &HashMap<String, String>,
) -> Result<Option<NodeAddr>, String> {
    let node = node.read_list("slot range node")?;
    if node.len() < 2 {
        return Err("slot range node: fewer than 2 elements".to_string());
    }
    let host = match &node[0] {
        ReplyView::Null => from_host.to_string(),
        other => other.read_text("node endpoint")?,
    };
    let host = if host.is_empty() {
        from_host.to_string()
    } else {
        host
    };
    if host == "?" || host.is_empty() {
        return Ok(None);
    }
    let port = node[1].read_port("node port")?;
    Ok(Some(SlotMap::remap_addr(
        &join_host_port(&host, port),
        remap,
    )))
}

/// `host:port`, with an IPv6 host in brackets so sockets can parse it.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Splits `host:port`, `[v6]:port` or a bare `v6:port` (as Redis writes in redirects).
pub(crate) fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = match addr.strip_prefix('[') {
        Some(rest) => {
            let (host, port) = rest.split_once("]:")?;
            (host, port)
        }
        None => addr.rsplit_once(':')?,
    };
    let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
    Some((host, port))
}

/// The top-level view of a `CLUSTER SHARDS` or `CLUSTER SLOTS` reply (RESP2 or RESP3),
/// or the error that answered instead.
fn read_reply(frame: &[u8]) -> Result<ReplyView<'_>, String> {
    // No slot map nests this deep: such a reply is refused before it is walked.
    let nesting = crate::protocol::reply_nesting(frame).map_err(|error| error.0)?;
    if nesting > crate::protocol::MAX_PARSED_NESTING {
        return Err(format!("reply nests {nesting} levels deep"));
    }
    match ReplyView::parse(frame) {
        Ok(ReplyView::Error(text)) => Err(String::from_utf8_lossy(text).into_owned()),
        Ok(view) => Ok(view),
        Err(error) => Err(format!("unparsable reply: {}", error.0)),
    }
}

/// What the walk over a slot map reply reads from each of its parts; `what` names the part
/// in the error when it is not of the expected shape.
trait SlotMapPart<'a> {
    /// The elements of an aggregate; a RESP3 map reads as its keys and values in turn,
    /// RESP2's shape, so one walk reads both.
    fn read_list(&self, what: &str) -> Result<Vec<ReplyView<'a>>, String>;
    /// A flat `name, value, name, value...` list as (name, value) pairs.
    fn read_fields(&self, what: &str) -> Result<Vec<(String, ReplyView<'a>)>, String>;
    /// A string or an integer, as text.
    fn read_text(&self, what: &str) -> Result<String, String>;
    /// An integer, or a string of one.
    fn read_int(&self, what: &str) -> Result<i64, String>;
    /// A slot number.
    fn read_slot(&self, what: &str) -> Result<u16, String>;
    /// A port number other than 0.
    fn read_port(&self, what: &str) -> Result<u16, String>;
}

impl<'a> SlotMapPart<'a> for ReplyView<'a> {
    fn read_list(&self, what: &str) -> Result<Vec<ReplyView<'a>>, String> {
        match self {
            ReplyView::Aggregate(_, items) => Ok(items.clone().collect()),
            other => Err(format!("{what}: expected an array, got {other:?}")),
        }
    }

    fn read_fields(&self, what: &str) -> Result<Vec<(String, ReplyView<'a>)>, String> {
        let items = self.read_list(what)?;
        if items.len() % 2 != 0 {
            return Err(format!("{what}: odd number of map elements"));
        }
        let mut fields = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(name), Some(value)) = (items.next(), items.next()) {
            fields.push((name.read_text(what)?, value));
        }
        Ok(fields)
    }

    fn read_text(&self, what: &str) -> Result<String, String> {
        match self {
            ReplyView::Bulk(text)
            | ReplyView::Simple(text)
            | ReplyView::BigNumber(text)
            | ReplyView::Verbatim { text, .. } => {
                String::from_utf8(text.to_vec()).map_err(|_| format!("{what}: not valid UTF-8"))
            }
            ReplyView::Int(n) => Ok(n.to_string()),
            other => Err(format!("{what}: expected a string, got {other:?}")),
        }
    }

    fn read_int(&self, what: &str) -> Result<i64, String> {
        match self {
            ReplyView::Int(n) => Ok(*n),
            ReplyView::Bulk(text)
            | ReplyView::Simple(text)
            | ReplyView::BigNumber(text)
            | ReplyView::Verbatim { text, .. } => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| format!("{what}: not an integer")),
            other => Err(format!("{what}: expected an integer, got {other:?}")),
        }
    }

    fn read_slot(&self, what: &str) -> Result<u16, String> {
        let n = self.read_int(what)?;
        u16::try_from(n)
            .ok()
            .filter(|&slot| usize::from(slot) < SLOT_COUNT)
            .ok_or_else(|| format!("{what}: slot {n} out of range"))
    }

    fn read_port(&self, what: &str) -> Result<u16, String> {
        let n = self.read_int(what)?;
        u16::try_from(n)
            .ok()
            .filter(|&port| port != 0)
            .ok_or_else(|| format!("{what}: port {n} out of range"))
    }
}

fn field<'f, 'a>(
    fields: &'f [(String, ReplyView<'a>)],
    name: &str,
) -> Result<&'f ReplyView<'a>, String> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value)
        .ok_or_else(|| format!("missing field {name:?}"))
}

fn optional_text(fields: &[(String, ReplyView<'_>)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, value)| value.read_text(name).ok())
}

#[cfg(test)]
mod tests;
