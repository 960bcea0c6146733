//! `inspect`: what a keyspace under one prefix holds, per layout and family, whether the
//! layout marker is set, and whether coordinators are live.
//!
//! Live coordination, precisely (both layouts): a **heartbeat** is an existing turn
//! `owner` key (`p:co:turn:<chat>:owner` or `p:co:{t:<chat>}:owner`; its holder keeps it
//! alive, Redis expires it when the holder stops); a **pending ticket** is a turn whose
//! `tix` counter is greater than its `serving` counter (a missing `serving` counts as 0):
//! a replica took a ticket that has not been served yet.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use futures_util::future::join_all;

use super::plan::EPHEMERAL_FAMILIES;
use super::source::{Endpoint, Reply};
use super::{glob_escape, MigrateError, BATCH};
use crate::rewrite::{Forward, Layout, Reverse};

/// Counts of one keyspace.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    /// The prefix inspected.
    pub prefix: String,
    /// The masters walked.
    pub masters: Vec<String>,
    /// Whether the deployment is a cluster.
    pub is_cluster: bool,
    /// Key counts by (layout, family). Layouts: `legacy`, `cluster:v1` (families, plus
    /// `index` and `marker`), `unchanged` (names both layouts share), `unmatched`.
    pub counts: BTreeMap<(String, String), u64>,
    /// The marker's value, if set.
    pub marker: Option<String>,
    /// Live coordinator heartbeats and pending tickets, one line each.
    pub live: Vec<String>,
}

impl Inspection {
    /// Total keys of `layout`.
    pub fn layout_total(&self, layout: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((l, _), _)| l == layout)
            .map(|(_, n)| n)
            .sum()
    }

    /// A report for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "prefix {}: {} ({})",
            self.prefix,
            if self.is_cluster {
                "cluster"
            } else {
                "single node"
            },
            self.masters.join(", ")
        );
        for layout in ["legacy", "cluster:v1", "unchanged", "unmatched"] {
            let _ = writeln!(out, "{layout}: {} keys", self.layout_total(layout));
            for ((l, family), n) in &self.counts {
                if l == layout && layout != "unmatched" {
                    let _ = writeln!(out, "  {family:<14} {n}");
                }
            }
        }
        let _ = writeln!(
            out,
            "marker: {}",
            self.marker.as_deref().unwrap_or("(not set)")
        );
        if self.live.is_empty() {
            let _ = writeln!(out, "live coordination: none");
        } else {
            let _ = writeln!(out, "live coordination: {}", self.live.len());
            for line in &self.live {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

/// Walks every master of `endpoint` under `prefix` and counts.
pub async fn inspect(
    endpoint: &Endpoint,
    layout: &Layout,
    prefix: &str,
) -> Result<Inspection, MigrateError> {
    let mut walk = endpoint.walk(format!("{}:*", glob_escape(prefix)).as_bytes(), BATCH);
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut live = Vec::new();
    while let Some(page) = walk.next_page().await? {
        for key in &page {
            let (which, family) = classify(layout, key);
            *counts.entry((which.to_owned(), family)).or_default() += 1;
        }
        live.extend(live_coordination(endpoint, layout, &page).await?);
    }
    let marker_key = crate::rewrite::marker_key(prefix);
    let marker = match endpoint
        .call_key(&marker_key, &[b"GET", &marker_key])
        .await?
    {
        Reply::Data(value) => Some(String::from_utf8_lossy(&value).into_owned()),
        _ => None,
    };
    Ok(Inspection {
        prefix: prefix.to_owned(),
        masters: endpoint.masters().iter().map(|a| a.to_string()).collect(),
        is_cluster: endpoint.is_cluster(),
        counts,
        marker,
        live,
    })
}

/// (layout, family) of one key.
fn classify(layout: &Layout, key: &Bytes) -> (&'static str, String) {
    match layout.reverse(key) {
        Reverse::Internal => {
            let what = if layout
                .prefix_of(key)
                .and_then(|p| layout.marker_key(p))
                .as_ref()
                == Some(key)
            {
                "marker"
            } else {
                "index"
            };
            return ("cluster:v1", what.to_owned());
        }
        Reverse::Legacy(legacy) if legacy != *key => {
            if let Forward::Rewritten(r) = layout.forward(&legacy) {
                return ("cluster:v1", layout.family_name(r.family).to_owned());
            }
        }
        _ => {}
    }
    match layout.forward(key) {
        Forward::Rewritten(r) if r.key == *key => {
            ("unchanged", layout.family_name(r.family).to_owned())
        }
        Forward::Rewritten(r) => ("legacy", layout.family_name(r.family).to_owned()),
        _ => ("unmatched", String::new()),
    }
}

/// The coordinator turn field (`owner`, `tix`, ...) of `key` if it is a turn key of
/// either layout.
fn turn_field<'k>(layout: &Layout, key: &'k Bytes) -> Option<&'k [u8]> {
    let legacy = match layout.reverse(key) {
        Reverse::Legacy(legacy) => legacy,
        _ => key.clone(),
    };
    let Forward::Rewritten(r) = layout.forward(&legacy) else {
        return None;
    };
    if !EPHEMERAL_FAMILIES.contains(&layout.family_name(r.family)) {
        return None;
    }
    // The field is the last segment in both layouts.
    let at = key.iter().rposition(|&b| b == b':')?;
    Some(&key[at + 1..])
}

/// Heartbeats and pending tickets among `keys` (see the module docs), one line each.
pub async fn live_coordination(
    endpoint: &Endpoint,
    layout: &Layout,
    keys: &[Bytes],
) -> Result<Vec<String>, MigrateError> {
    let mut owners = Vec::new();
    let mut tickets = Vec::new();
    for key in keys {
        match turn_field(layout, key) {
            Some(b"owner") => owners.push(key.clone()),
            Some(b"tix") => {
                let mut serving = key[..key.len() - 3].to_vec();
                serving.extend_from_slice(b"serving");
                tickets.push((key.clone(), Bytes::from(serving)));
            }
            _ => {}
        }
    }
    let mut live = Vec::new();
    let owner_replies = join_all(
        owners
            .iter()
            .map(|key| async move { endpoint.call_key(key, &[b"GET", key]).await }),
    )
    .await;
    for (key, reply) in owners.iter().zip(owner_replies) {
        if let Reply::Data(holder) = reply? {
            live.push(format!(
                "heartbeat {} (owner {})",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&holder)
            ));
        }
    }
    let ticket_replies = join_all(tickets.iter().map(|(tix, serving)| async move {
        let tix_value = endpoint.call_key(tix, &[b"GET", tix]).await?;
        let serving_value = endpoint.call_key(serving, &[b"GET", serving]).await?;
        Ok::<_, MigrateError>((tix_value.int(), serving_value.int().unwrap_or(0)))
    }))
    .await;
    for ((key, _), reply) in tickets.iter().zip(ticket_replies) {
        if let (Some(tix), serving) = reply? {
            if tix > serving {
                live.push(format!(
                    "pending tickets {} (tix {tix} > serving {serving})",
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }
    Ok(live)
}
