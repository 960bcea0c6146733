//! What one node says the cluster looks like (`CLUSTER NODES`), reduced to the parts every
//! healthy node must agree on: who owns which slots, and who replicates whom.
//!
//! Invariants: a `ClusterLayout` only ever describes live nodes, by address; a view that lists a
//! live node as failing, handshaking or unknown is rejected rather than partially believed.
//! Slot ranges are merged and sorted, so two views that say the same thing compare equal.

use std::collections::{BTreeMap, BTreeSet};

/// Number of hash slots in Redis Cluster.
pub const SLOT_COUNT: u32 = 16384;

/// A contiguous run of slots owned by one master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot, inclusive.
    pub start: u16,
    /// Last slot, inclusive.
    pub end: u16,
    /// The owning master, "127.0.0.1:port".
    pub owner: String,
}

/// The role of a live node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A master (with or without slots).
    Master,
    /// A replica of the master at this address.
    ReplicaOf(String),
}

/// One node's view of the cluster, restricted to live nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterLayout {
    /// Slot ownership, sorted by slot, adjacent ranges of one owner merged.
    pub slots: Vec<SlotRange>,
    /// Role of every live node, by address.
    pub roles: BTreeMap<String, Role>,
}

impl ClusterLayout {
    /// The master owning `slot`, if any range covers it.
    pub fn owner_of(&self, slot: u16) -> Option<&str> {
        self.slots
            .iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .map(|r| r.owner.as_str())
    }

    /// Masters, in address order.
    pub fn masters(&self) -> Vec<String> {
        self.roles
            .iter()
            .filter(|(_, role)| **role == Role::Master)
            .map(|(addr, _)| addr.clone())
            .collect()
    }

    /// Replicas, in address order.
    pub fn replicas(&self) -> Vec<String> {
        self.roles
            .iter()
            .filter(|(_, role)| matches!(role, Role::ReplicaOf(_)))
            .map(|(addr, _)| addr.clone())
            .collect()
    }

    /// Replicas of `master`, in address order.
    pub fn replicas_of(&self, master: &str) -> Vec<String> {
        self.roles
            .iter()
            .filter(|(_, role)| matches!(role, Role::ReplicaOf(m) if m == master))
            .map(|(addr, _)| addr.clone())
            .collect()
    }

    /// Checks that the ranges cover every slot exactly once.
    pub fn check_full_coverage(&self) -> Result<(), String> {
        let mut next: u32 = 0;
        for range in &self.slots {
            if u32::from(range.start) != next {
                return Err(format!("slots {next}..{} have no owner", range.start));
            }
            next = u32::from(range.end) + 1;
        }
        if next != SLOT_COUNT {
            return Err(format!("slots {next}..{SLOT_COUNT} have no owner"));
        }
        Ok(())
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct NodeLine {
    /// The 40-character node id.
    pub id: String,
    /// "ip:port", without the bus port or hostname.
    pub addr: String,
    /// Flags such as `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`.
    pub flags: Vec<String>,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Owned slot ranges (migration markers in brackets are left out).
    pub slots: Vec<(u16, u16)>,
}

/// Parses the text of `CLUSTER NODES`.
pub fn parse_cluster_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Result<NodeLine, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(format!("short CLUSTER NODES line: {line:?}"));
    }
    // "ip:port@cport" or, since 7.0, "ip:port@cport,hostname".
    let addr = fields[1]
        .split(['@', ','])
        .next()
        .unwrap_or_default()
        .to_string();
    let master_id = (fields[3] != "-").then(|| fields[3].to_string());
    let mut slots = Vec::new();
    for field in &fields[8..] {
        if field.starts_with('[') {
            continue;
        }
        let (start, end) = field.split_once('-').unwrap_or((field, field));
        let parse = |s: &str| {
            s.parse::<u16>()
                .map_err(|e| format!("bad slot {field:?} in {line:?}: {e}"))
        };
        slots.push((parse(start)?, parse(end)?));
    }
    Ok(NodeLine {
        id: fields[0].to_string(),
        addr,
        flags: fields[2].split(',').map(str::to_string).collect(),
        master_id,
        slots,
    })
}

/// Reduces one node's `CLUSTER NODES` to the layout of the `live` nodes.
pub fn layout_of(lines: &[NodeLine], live: &BTreeSet<String>) -> Result<ClusterLayout, String> {
    let by_id: BTreeMap<&str, &NodeLine> = lines.iter().map(|l| (l.id.as_str(), l)).collect();
    let mut roles = BTreeMap::new();
    let mut ranges: Vec<(u16, u16, String)> = Vec::new();
    for addr in live {
        let line = lines
            .iter()
            .find(|l| &l.addr == addr)
            .ok_or_else(|| format!("does not know {addr}"))?;
        let bad_flag = line
            .flags
            .iter()
            .find(|f| matches!(f.as_str(), "fail" | "fail?" | "handshake" | "noaddr"));
        if let Some(flag) = bad_flag {
            return Err(format!("sees {addr} as {flag}"));
        }
        let role = match &line.master_id {
            Some(master_id) => {
                let master = by_id
                    .get(master_id.as_str())
                    .ok_or_else(|| format!("{addr} replicates unknown node {master_id}"))?;
                Role::ReplicaOf(master.addr.clone())
            }
            None => Role::Master,
        };
        roles.insert(addr.clone(), role);
    }
    for line in lines {
        for &(start, end) in &line.slots {
            if !live.contains(&line.addr) {
                return Err(format!(
                    "slots {start}-{end} are on {}, which is down",
                    line.addr
                ));
            }
            ranges.push((start, end, line.addr.clone()));
        }
    }
    ranges.sort();
    let mut slots: Vec<SlotRange> = Vec::new();
    for (start, end, owner) in ranges {
        match slots.last_mut() {
            Some(last) if last.owner == owner && u32::from(last.end) + 1 == u32::from(start) => {
                last.end = end;
            }
            _ => slots.push(SlotRange { start, end, owner }),
        }
    }
    Ok(ClusterLayout { slots, roles })
}
