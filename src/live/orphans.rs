//! The report of orphan message items during a live migration: items that their chat's log
//! does not list, on the source or (once the log moved) on the target. The offline copy
//! reports such items and leaves them behind; the live walker reports them and still moves
//! them, under the name the layout gives their own name, because that is where the proxy
//! serves them: a bot that reads an orphan by its name keeps reading it.
//!
//! Invariants: the report only reads. An item's chat is the one its name reads as under the
//! layout (the name's hash tag on the target is its log's), so the report agrees with where
//! requests go. It is advisory while clients run: an item checked between a client's write
//! of it and of its log entry counts as an orphan.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::Migration;
use crate::migrate::plan::{hash_tag, ITEM_FAMILY};
use crate::migrate::source::{Endpoint, Reply};
use crate::rewrite::Forward;

/// Orphan names the status keeps (the first ones met).
const NAMES_KEPT: usize = 100;

/// Where a message item's own chat log is, and the item's member in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ItemLog {
    /// The log's name on the source.
    source: Bytes,
    /// Its name on the target.
    target: Bytes,
    /// The item's member in it.
    member: Bytes,
}

impl Migration {
    /// The chat log of `key` (a source name of database 0) when it is a message item.
    fn item_log(&self, key: &[u8]) -> Option<ItemLog> {
        let layout = self.layout.as_ref()?;
        let Forward::Rewritten(item) = layout.forward(key) else {
            return None;
        };
        if layout.family_name(item.family) != ITEM_FAMILY {
            return None;
        }
        let tag = hash_tag(&item.key)?;
        self.messages.iter().find_map(|rules| {
            rules
                .item_parts(key)
                .into_iter()
                .find_map(|(chat, member)| {
                    let source = rules.log_key(chat);
                    let Forward::Rewritten(log) = layout.forward(&source) else {
                        return None;
                    };
                    (hash_tag(&log.key) == Some(tag)).then(|| ItemLog {
                        source,
                        target: log.key,
                        member: Bytes::copy_from_slice(member),
                    })
                })
        })
    }

    /// Counts the orphans among `keys`, database 0's names the walker is about to move.
    pub(super) async fn note_orphans(&self, keys: &[Bytes]) {
        if self.messages.is_empty() {
            return;
        }
        let source = &self.sides[0].source;
        let checks = keys.iter().filter_map(|key| {
            let log = self.item_log(key)?;
            Some(async move { (key, listed(source, &self.target, &log).await) })
        });
        for (key, listed) in futures_util::future::join_all(checks).await {
            match listed {
                Ok(true) => {}
                Ok(false) => self.note_orphan(key),
                Err(e) => tracing::warn!(error = %e, "live migration: an orphan check failed"),
            }
        }
    }

    fn note_orphan(&self, key: &[u8]) {
        self.counters.orphan_items.fetch_add(1, Ordering::Relaxed);
        let mut names = self.orphan_names.lock().unwrap_or_else(|e| e.into_inner());
        if names.len() < NAMES_KEPT {
            names.push(String::from_utf8_lossy(key).into_owned());
        }
    }

    /// The first orphan names met.
    pub fn orphan_names(&self) -> Vec<String> {
        self.orphan_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Whether `log` lists its member: on the source first, then on the target (a log only
/// moves from the one to the other, so asking in that order cannot miss it).
async fn listed(source: &Endpoint, target: &Endpoint, log: &ItemLog) -> Result<bool, String> {
    for (side, name) in [(source, &log.source), (target, &log.target)] {
        let reply = side
            .call_key(name, &[b"ZSCORE", name, &log.member])
            .await
            .map_err(|e| e.to_string())?;
        match reply {
            Reply::Nil => {}
            Reply::Error(e) => return Err(format!("ZSCORE {}: {e}", name.escape_ascii())),
            _ => return Ok(true),
        }
    }
    Ok(false)
}
