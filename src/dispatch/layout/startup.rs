//! Start-up work for a layout: the upkeep script on every master, and the marker and
//! legacy-data checks that decide whether the proxy may start.

use bytes::Bytes;

use crate::protocol::encode::encode_request;
use crate::protocol::Proto;
use crate::rewrite::Forward;
use crate::route::key_slot;

use super::super::{Proxy, Target};
use super::reply::bulk_payload;
use super::{ActiveLayout, UPKEEP_SCRIPT};

/// Start-up work for a layout: load the upkeep script on every master, then check each
/// prefix's marker (and look for legacy data without one). `Err` refuses to start.
pub async fn start(proxy: &Proxy, active: &ActiveLayout) -> Result<(), String> {
    load_script(proxy, active).await;
    for (prefix_id, prefix) in active.layout.prefixes().iter().enumerate() {
        let Some(marker) = active.layout.marker_key(prefix_id) else {
            continue;
        };
        let get = encode_request(&[b"GET", &marker]);
        let reply = proxy
            .upstream
            .forward(Target::Slot(key_slot(&marker)), get, Proto::Resp2)
            .await;
        if reply.first() == Some(&b'-') {
            return Err(format!(
                "cannot read the layout marker {}: {}",
                marker.escape_ascii(),
                String::from_utf8_lossy(&reply).trim_end()
            ));
        }
        let expected = active.layout.layout_name();
        match (bulk_payload(&reply), expected) {
            (Some(found), Some(expected)) if found != expected.as_bytes() => {
                return Err(format!(
                    "prefix '{prefix}': the layout marker {} names layout '{}', but the rule file {} is layout '{expected}'; refusing to start",
                    marker.escape_ascii(),
                    found.escape_ascii(),
                    active.layout.source_name()
                ));
            }
            (Some(_), _) => continue,
            (None, _) => {}
        }
        if active.allow_legacy_data {
            continue;
        }
        if let Some(example) = find_legacy_key(proxy, active, prefix).await? {
            return Err(format!(
                "prefix '{prefix}': legacy keys exist (e.g. '{}') and there is no layout marker {}: run the migration first (slotbridge migrate), or set layout.allow_legacy_data",
                example.escape_ascii(),
                marker.escape_ascii()
            ));
        }
    }
    Ok(())
}

/// Most keys looked at per prefix by the legacy-data check.
pub const LEGACY_CHECK_LIMIT: usize = 10_000;

/// A key under `prefix` that the layout would rename (so: stored under its legacy name),
/// looking at no more than [`LEGACY_CHECK_LIMIT`] keys over all masters.
async fn find_legacy_key(
    proxy: &Proxy,
    active: &ActiveLayout,
    prefix: &str,
) -> Result<Option<Bytes>, String> {
    let masters = proxy.master_addrs();
    let mut pattern = crate::rewrite::glob::escape_glob(prefix.as_bytes());
    pattern.extend_from_slice(b":*");
    let mut inspected = 0usize;
    for addr in masters {
        let conn = proxy.topology.node(&addr, Proto::Resp2);
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let scan = encode_request(&[b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", b"1000"]);
            let reply = conn
                .call(scan, false)
                .await
                .map_err(|e| format!("legacy-data check on {addr}: {e:?}"))?;
            let (next, keys) = crate::dispatch::compose::listing::parse_scan_reply(&reply)
                .ok_or_else(|| format!("legacy-data check on {addr}: unexpected SCAN reply"))?;
            for key in keys {
                inspected += 1;
                if let Forward::Rewritten(rewritten) = active.layout.forward(&key) {
                    if rewritten.key != key {
                        return Ok(Some(key));
                    }
                }
                if inspected >= LEGACY_CHECK_LIMIT {
                    return Ok(None);
                }
            }
            if &next[..] == b"0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(None)
}

/// SCRIPT LOAD on every master; the SHA comes from the server.
async fn load_script(proxy: &Proxy, active: &ActiveLayout) {
    // Remembered, so new node connections load it too (see `ScriptCache::preload`).
    proxy
        .scripts
        .remember(&Bytes::from_static(UPKEEP_SCRIPT.as_bytes()));
    let masters = proxy.master_addrs();
    let load = encode_request(&[b"SCRIPT", b"LOAD", UPKEEP_SCRIPT.as_bytes()]);
    for addr in masters {
        let conn = proxy.topology.node(&addr, Proto::Resp2);
        match conn.call(load.clone(), false).await {
            Ok(reply) => match bulk_payload(&reply) {
                Some(sha) => {
                    let _ = active.script_sha.set(Bytes::copy_from_slice(sha));
                }
                None => tracing::warn!(
                    node = %addr,
                    reply = %String::from_utf8_lossy(&reply).trim_end(),
                    "SCRIPT LOAD of the index upkeep script failed"
                ),
            },
            Err(e) => tracing::warn!(node = %addr, error = ?e, "SCRIPT LOAD failed"),
        }
    }
}
