//! The one reader of a cluster's slot map, for the proxy and the offline tools alike:
//! `CLUSTER SHARDS`, or `CLUSTER SLOTS` from nodes before Redis 7.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use super::SlotMapError;
use crate::backend::NodeConn;
use crate::route::SlotMap;

/// What a slot map read must cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// The map as `CLUSTER SHARDS` serves it, gaps included: the proxy leaves the slots of
    /// a failed master unserved rather than send commands to it.
    AsServed,
    /// Every slot (the offline tools): `CLUSTER SLOTS` is asked too when the shards leave
    /// a gap or cannot be read, and a map with a gap is an error.
    Complete,
}

/// The slot map as the cluster node behind `conn` (at `addr`) sees it: `CLUSTER SHARDS`,
/// or `CLUSTER SLOTS` when the node refuses that (before Redis 7) or, for
/// [`Coverage::Complete`], when the shards do not cover every slot. The one reader of a
/// cluster's map, for the proxy and the offline tools alike.
pub async fn read_slot_map(
    conn: &NodeConn,
    addr: &str,
    remap: &HashMap<String, String>,
    port: crate::route::NodePort,
    coverage: Coverage,
) -> Result<SlotMap, SlotMapError> {
    let shards = call_with_timeout(conn, "*2\r\n$7\r\nCLUSTER\r\n$6\r\nSHARDS\r\n").await?;
    if !shards.starts_with(b"-") {
        let map =
            SlotMap::from_cluster_shards_on(&shards, remap, port).map_err(SlotMapError::Malformed);
        match coverage {
            Coverage::AsServed => return map,
            Coverage::Complete if map.as_ref().is_ok_and(SlotMap::is_complete) => return map,
            Coverage::Complete => {}
        }
    }
    let slots = call_with_timeout(conn, "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n").await?;
    if slots.starts_with(b"-") {
        return Err(SlotMapError::Refused(
            String::from_utf8_lossy(&slots[1..]).trim_end().to_string(),
        ));
    }
    let map = SlotMap::from_cluster_slots(&slots, addr, remap).map_err(SlotMapError::Malformed)?;
    if coverage == Coverage::Complete && !map.is_complete() {
        return Err(SlotMapError::Incomplete {
            covered: map.slots_covered(),
        });
    }
    Ok(map)
}

async fn call_with_timeout(conn: &NodeConn, request: &'static str) -> Result<Bytes, SlotMapError> {
    let call = conn.call(Bytes::from_static(request.as_bytes()), false);
    match tokio::time::timeout(Duration::from_secs(2), call).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(SlotMapError::Call(e)),
        Err(_) => Err(SlotMapError::TimedOut),
    }
}
