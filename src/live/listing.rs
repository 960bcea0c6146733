//! What the listings of the union (KEYS, SCAN, DBSIZE, RANDOMKEY through the proxy while keys
//! move) need from the source: its names matching a pattern, one SCAN step of one of its
//! masters, how many keys it still holds, and a random one of them. The source holds client names (a layout renames keys
//! only on the target), so its names are listed as they are.
//!
//! Invariants: records of the moves (claim records, see [`super::names`]) are never among
//! the names or the count; the source's masters are taken in address order, so a SCAN
//! cursor numbering one of them names the same master across calls while the source's
//! topology stays the same (a source rarely changes its masters during a migration; if it
//! does, a cursor may resume on another master, and the walk may miss keys of that step).

use std::collections::HashSet;

use bytes::Bytes;

use super::mover::MoveError;
use super::names::{is_record, RECORD_PREFIX};
use super::Migration;
use crate::migrate::source::{Endpoint, Reply};
use crate::route::draw::{draw_by_master, Draw};
use crate::route::NodeAddr;

/// How many names one SCAN call asks a source master for (counting records, drawing a key).
const WALK_COUNT: usize = 1000;

/// One SCAN step of a source master: the master's next cursor (0: that master is done)
/// and the names it gave, records left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePage {
    /// The master's next cursor.
    pub next: u64,
    /// The names found, without records.
    pub names: Vec<Bytes>,
}

impl Migration {
    /// The source deployment keys move from.
    pub fn source(&self) -> &Endpoint {
        &self.source
    }

    /// The target deployment keys move to (the proxy's upstream).
    pub fn target(&self) -> &Endpoint {
        &self.target
    }

    /// The source's masters in address order: what a SCAN cursor's master number counts.
    pub fn source_masters(&self) -> Vec<NodeAddr> {
        let mut masters = self.source.masters();
        masters.sort();
        masters
    }

    /// The source's names matching the glob `pattern` (KEYS on every master), records
    /// left out.
    pub async fn source_keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>, MoveError> {
        let mut names = Vec::new();
        for node in 0..self.source.masters().len() {
            let reply = self
                .source
                .call_node(node, &[b"KEYS", pattern])
                .await
                .map_err(source_error)?;
            names.extend(names_of(reply)?.into_iter().filter(|n| !is_record(n)));
        }
        Ok(names)
    }

    /// One `SCAN cursor options...` step on source master `master` (a number in
    /// [`Migration::source_masters`]); `options` are the client's MATCH, COUNT and TYPE,
    /// passed as they are (the source holds the client's names).
    pub async fn source_scan(
        &self,
        master: usize,
        cursor: u64,
        options: &[Bytes],
    ) -> Result<SourcePage, MoveError> {
        let addr = self
            .source_masters()
            .get(master)
            .cloned()
            .ok_or_else(|| MoveError::Source(format!("no source master number {master}")))?;
        let node = self
            .source
            .masters()
            .iter()
            .position(|m| *m == addr)
            .ok_or_else(|| MoveError::Source(format!("{addr} is no longer a source master")))?;
        let cursor_text = cursor.to_string();
        let mut args: Vec<&[u8]> = vec![b"SCAN", cursor_text.as_bytes()];
        args.extend(options.iter().map(|o| &o[..]));
        let reply = self
            .source
            .call_node(node, &args)
            .await
            .map_err(source_error)?;
        let bad = || MoveError::Source(format!("{addr}: SCAN: unexpected reply"));
        let Reply::List(mut parts) = reply_or_error(reply)? else {
            return Err(bad());
        };
        let (Some(found), Some(next), true) = (parts.pop(), parts.pop(), parts.is_empty()) else {
            return Err(bad());
        };
        let next = next.int().and_then(|n| u64::try_from(n).ok()).or_else(|| {
            let text = next.data()?;
            std::str::from_utf8(text).ok()?.parse().ok()
        });
        let next = next.ok_or_else(bad)?;
        let names = names_of(found)?.into_iter().filter(|n| !is_record(n));
        Ok(SourcePage {
            next,
            names: names.collect(),
        })
    }

    /// The keys still on the source, as clients count them: every master's DBSIZE less the
    /// claim records on it. The records are found by a SCAN MATCH of their prefix over the
    /// whole source (each master's table is walked: the cost of an exact count), each
    /// counted once however often the walk returns it.
    pub async fn source_unmoved(&self) -> Result<u64, MoveError> {
        let total = self.source_size().await?;
        let mut pattern = crate::rewrite::glob::escape_glob(RECORD_PREFIX);
        pattern.push(b'*');
        let mut walk = self.source.walk(&pattern, WALK_COUNT);
        let mut records: HashSet<Bytes> = HashSet::new();
        while let Some(page) = walk.next_page().await.map_err(source_error)? {
            records.extend(page.into_iter().filter(|n| is_record(n)));
        }
        Ok(total.saturating_sub(records.len() as u64))
    }

    /// The source's keys (records included): DBSIZE summed over its masters.
    pub async fn source_size(&self) -> Result<u64, MoveError> {
        let mut total: u64 = 0;
        for node in 0..self.source.masters().len() {
            let reply = self
                .source
                .call_node(node, &[b"DBSIZE"])
                .await
                .map_err(source_error)?;
            let size = reply_or_error(reply)?.int().unwrap_or(0);
            total += u64::try_from(size).unwrap_or(0);
        }
        Ok(total)
    }

    /// RANDOMKEY of the source: a name of a master that has keys (a random one first), drawn
    /// again when it drew a record, walked when it drew only records; `None` when no master
    /// holds a key that is not a record.
    pub async fn source_random_key(&self) -> Result<Option<Bytes>, MoveError> {
        let masters = self.source.masters().len().max(1);
        let draw = |node| async move {
            let reply = self
                .source
                .call_node(node, &[b"RANDOMKEY"])
                .await
                .map_err(source_error)?;
            Ok(match reply_or_error(reply)? {
                Reply::Data(name) if !is_record(&name) => Draw::Shown(name),
                Reply::Data(_) => Draw::Hidden,
                _ => Draw::Empty,
            })
        };
        let walk = |node| async move {
            let mut walk = self.source.walk_node(node, b"*", WALK_COUNT);
            while let Some(page) = walk.next_page().await.map_err(source_error)? {
                if let Some(name) = page.into_iter().find(|name| !is_record(name)) {
                    return Ok(Some(name));
                }
            }
            Ok(None)
        };
        draw_by_master(masters, draw, walk).await
    }
}

fn source_error(error: impl std::fmt::Display) -> MoveError {
    MoveError::Source(error.to_string())
}

/// `reply`, or the source's error reply as an error.
fn reply_or_error(reply: Reply) -> Result<Reply, MoveError> {
    match reply {
        Reply::Error(text) => Err(MoveError::Source(text)),
        other => Ok(other),
    }
}

/// The names of an array reply of names.
fn names_of(reply: Reply) -> Result<Vec<Bytes>, MoveError> {
    match reply_or_error(reply)? {
        Reply::List(items) => Ok(items
            .into_iter()
            .filter_map(|i| i.data().cloned())
            .collect()),
        other => Err(MoveError::Source(format!(
            "expected a list of names, got {other:?}"
        ))),
    }
}
