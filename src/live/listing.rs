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
use super::sides::Side;
use super::Migration;
use crate::migrate::source::Reply;
use crate::rewrite::glob::glob_match;
use crate::route::draw::{draw_by_master, Draw};

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
    /// How many source walks a SCAN cursor's master number counts: every master of every
    /// database of the source (database 0 first, then the others in order; each one's
    /// masters in address order).
    pub fn source_walk_count(&self) -> usize {
        self.sides
            .iter()
            .map(|side| side.source.masters().len())
            .sum()
    }

    /// The side and node (its index in the side's endpoint) of source walk `walk`.
    fn source_walk(&self, walk: usize) -> Result<(&Side, usize), MoveError> {
        let mut left = walk;
        for side in &self.sides {
            let mut masters = side.source.masters();
            if left < masters.len() {
                masters.sort();
                let addr = &masters[left];
                let node = side.source.masters().iter().position(|m| m == addr);
                let node = node.ok_or_else(|| {
                    MoveError::Source(format!("{addr} is no longer a source master"))
                })?;
                return Ok((side, node));
            }
            left -= masters.len();
        }
        Err(MoveError::Source(format!("no source master number {walk}")))
    }

    /// Every master of every side, as its side and its node (the endpoint's order, not the
    /// cursor's: for listings that visit every one whatever the order).
    fn source_walks(&self) -> impl Iterator<Item = (&Side, usize)> {
        self.sides
            .iter()
            .flat_map(|side| (0..side.source.masters().len()).map(move |node| (side, node)))
    }

    /// The source's names matching the glob `pattern` (KEYS on every master of every
    /// database), as commands name them, records left out.
    pub async fn source_keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>, MoveError> {
        let mut names = Vec::new();
        for (side, node) in self.source_walks() {
            let Some(asked) = side_pattern(&side.prefix, pattern) else {
                continue;
            };
            let reply = side
                .source
                .call_node(node, &[b"KEYS", &asked.pattern])
                .await
                .map_err(source_error)?;
            names.extend(asked.shown(side, pattern, names_of(reply)?));
        }
        Ok(names)
    }

    /// One `SCAN cursor options...` step on source walk `walk` (a number below
    /// [`Migration::source_walk_count`]); `options` are the client's MATCH, COUNT and TYPE,
    /// as they are for database 0 (the source holds the client's names), MATCH fitted to
    /// another database's names.
    pub async fn source_scan(
        &self,
        walk: usize,
        cursor: u64,
        options: &[Bytes],
    ) -> Result<SourcePage, MoveError> {
        let (side, node) = self.source_walk(walk)?;
        let mut sent: Vec<Bytes> = options.to_vec();
        let mut asked = Asked::all();
        for i in (0..sent.len().saturating_sub(1)).step_by(2) {
            if sent[i].eq_ignore_ascii_case(b"match") {
                let Some(fitted) = side_pattern(&side.prefix, &options[i + 1]) else {
                    // No name of this database can match: its walk is empty.
                    return Ok(SourcePage {
                        next: 0,
                        names: Vec::new(),
                    });
                };
                sent[i + 1] = fitted.pattern.clone();
                asked = fitted;
            }
        }
        let cursor_text = cursor.to_string();
        let mut args: Vec<&[u8]> = vec![b"SCAN", cursor_text.as_bytes()];
        args.extend(sent.iter().map(|o| &o[..]));
        let reply = side
            .source
            .call_node(node, &args)
            .await
            .map_err(source_error)?;
        let bad = || MoveError::Source(format!("source walk {walk}: SCAN: unexpected reply"));
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
        let pattern = options
            .chunks(2)
            .filter(|pair| pair[0].eq_ignore_ascii_case(b"match"))
            .filter_map(|pair| pair.get(1))
            .last();
        let names = asked.shown(side, pattern.map_or(b"*", |p| &p[..]), names_of(found)?);
        Ok(SourcePage { next, names })
    }

    /// The keys still on the source, as clients count them: every master's DBSIZE (of
    /// every database) less the claim records on it. The records are found by a SCAN MATCH
    /// of their prefix over the whole source (each master's table is walked: the cost of an
    /// exact count), each counted once however often the walk returns it.
    pub async fn source_unmoved(&self) -> Result<u64, MoveError> {
        let total = self.source_size().await?;
        let mut pattern = crate::rewrite::glob::escape_glob(RECORD_PREFIX);
        pattern.push(b'*');
        let mut records: u64 = 0;
        for side in &self.sides {
            let mut walk = side.source.walk(&pattern, WALK_COUNT);
            let mut found: HashSet<Bytes> = HashSet::new();
            while let Some(page) = walk.next_page().await.map_err(source_error)? {
                found.extend(page.into_iter().filter(|n| is_record(n)));
            }
            records += found.len() as u64;
        }
        Ok(total.saturating_sub(records))
    }

    /// The source's keys (records included): DBSIZE summed over its masters and databases.
    pub async fn source_size(&self) -> Result<u64, MoveError> {
        let mut total: u64 = 0;
        for (side, node) in self.source_walks() {
            let reply = side
                .source
                .call_node(node, &[b"DBSIZE"])
                .await
                .map_err(source_error)?;
            let size = reply_or_error(reply)?.int().unwrap_or(0);
            total += u64::try_from(size).unwrap_or(0);
        }
        Ok(total)
    }

    /// RANDOMKEY of the source: a name (as commands name it) of a master and database that
    /// has keys (a random one first), drawn again when it drew a record, walked when it drew
    /// only records; `None` when no master holds a key that is not a record.
    pub async fn source_random_key(&self) -> Result<Option<Bytes>, MoveError> {
        let walks = self.source_walk_count().max(1);
        let draw = |walk| async move {
            let (side, node) = self.source_walk(walk)?;
            let reply = side
                .source
                .call_node(node, &[b"RANDOMKEY"])
                .await
                .map_err(source_error)?;
            Ok(match reply_or_error(reply)? {
                Reply::Data(name) if !is_record(&name) => Draw::Shown(side.stored(&name)),
                Reply::Data(_) => Draw::Hidden,
                _ => Draw::Empty,
            })
        };
        let walk = |walk| async move {
            let (side, node) = self.source_walk(walk)?;
            let mut names = side.source.walk_node(node, b"*", WALK_COUNT);
            while let Some(page) = names.next_page().await.map_err(source_error)? {
                if let Some(name) = page.into_iter().find(|name| !is_record(name)) {
                    return Ok(Some(side.stored(&name)));
                }
            }
            Ok(None)
        };
        draw_by_master(walks, draw, walk).await
    }
}

/// How one database of the source is asked for the names a client's glob matches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Asked {
    /// The pattern sent, over the database's own names.
    pattern: Bytes,
    /// Whether the answers must be matched against the client's pattern again (the
    /// pattern sent is wider).
    recheck: bool,
}

impl Asked {
    fn all() -> Asked {
        Asked {
            pattern: Bytes::from_static(b"*"),
            recheck: false,
        }
    }

    /// The names of `side` found, as commands name them, that the client's `pattern` shows:
    /// records left out.
    fn shown(&self, side: &Side, pattern: &[u8], found: Vec<Bytes>) -> Vec<Bytes> {
        found
            .into_iter()
            .filter(|name| !is_record(name))
            .map(|name| side.stored(&name))
            .filter(|stored| !self.recheck || glob_match(pattern, stored))
            .collect()
    }
}

/// How the database whose stored names start with `prefix` is asked for the stored names
/// the glob `pattern` matches; `None` when none of them can match. Database 0 (no prefix)
/// gets the pattern as it is; a pattern that starts with the prefix (which holds no glob
/// metacharacter), its rest; one whose literal start agrees with the prefix so far, every
/// name, matched again.
fn side_pattern(prefix: &[u8], pattern: &[u8]) -> Option<Asked> {
    if prefix.is_empty() {
        return Some(Asked {
            pattern: Bytes::copy_from_slice(pattern),
            recheck: false,
        });
    }
    if let Some(rest) = pattern.strip_prefix(prefix) {
        return Some(Asked {
            pattern: Bytes::copy_from_slice(rest),
            recheck: false,
        });
    }
    let literal = pattern
        .iter()
        .take_while(|b| !matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .count()
        .min(prefix.len());
    let agrees = pattern[..literal] == prefix[..literal] && literal < pattern.len();
    agrees.then(|| Asked {
        pattern: Bytes::from_static(b"*"),
        recheck: true,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn asked(prefix: &[u8], pattern: &[u8]) -> Option<(Vec<u8>, bool)> {
        side_pattern(prefix, pattern).map(|asked| (asked.pattern.to_vec(), asked.recheck))
    }

    #[test]
    fn each_database_is_asked_for_what_a_pattern_can_match_there() {
        assert_eq!(asked(b"", b"user:*"), Some((b"user:*".to_vec(), false)));
        assert_eq!(
            asked(b"__db2:", b"__db2:user:*"),
            Some((b"user:*".to_vec(), false))
        );
        for never in [&b"__db3:*"[..], b"user:*", b"__db1*", b"__db"] {
            assert_eq!(asked(b"__db2:", never), None, "{never:?}");
        }
        for wide in [&b"*"[..], b"__db*", b"_?db2:k", b"\\_\\_db2:*"] {
            assert_eq!(
                asked(b"__db2:", wide),
                Some((b"*".to_vec(), true)),
                "{wide:?}"
            );
        }
    }

    proptest! {
        /// No stored name a pattern matches is lost by asking its database the narrower way.
        #[test]
        fn a_side_is_never_asked_too_narrowly(
            db in 1u32..12,
            name in "[_dbk0-9:]{0,8}",
            pattern in "[_dbk0-9:*?]{0,10}",
        ) {
            let prefix = crate::rewrite::database::prefix(db);
            let stored = [&prefix[..], name.as_bytes()].concat();
            if glob_match(pattern.as_bytes(), &stored) {
                let asked = side_pattern(&prefix, pattern.as_bytes());
                prop_assert!(asked.is_some(), "{pattern} matches {stored:?}");
                let asked = asked.unwrap();
                prop_assert!(asked.recheck || glob_match(&asked.pattern, name.as_bytes()));
            }
        }
    }
}
