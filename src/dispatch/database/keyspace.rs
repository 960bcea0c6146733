//! `INFO keyspace` per database: `db0:keys=...` and one `db<n>:keys=...` line per database
//! other than 0 that holds keys, as one Redis shows them.
//!
//! The cluster counts every database's keys as its own database 0's, so the proxy walks
//! the other databases' keys (SCAN `MATCH __db*`) and reads each one's PTTL: `keys` and
//! `expires` are counted, `avg_ttl` is the mean remaining time to live of the keys with
//! one, in milliseconds (Redis's own is an estimate from samples). Database 0's line is the
//! cluster's less the others'; its `avg_ttl` stays the masters'. The walk costs a pass
//! over the whole keyspace, so only `INFO keyspace` asked by name splits the line; plain
//! `INFO` (and `INFO all`) shows the cluster's one `db0` line; and it is skipped while the
//! in-use marker says no client has selected another database (see `rewrite::database`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use smallvec::smallvec;

use crate::protocol::{encode, Proto, ReplyView};
use crate::reply::merge;
use crate::rewrite::database::{self, OTHER_DATABASES_PATTERN};

use super::super::Proxy;
use super::request_of;
use super::run::Walk;

/// One database's line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct DbCounts {
    keys: i64,
    expires: i64,
    /// Sum of the remaining TTLs of the keys that expire, milliseconds.
    ttl_sum: i64,
}

/// Whether `args` is `INFO keyspace` (the section asked by name, alone).
pub fn asks_keyspace(args: &[Bytes]) -> bool {
    args.len() == 2 && args[1].eq_ignore_ascii_case(b"keyspace")
}

impl Proxy {
    /// `INFO keyspace` with a line per database (see the module doc).
    pub(super) async fn info_keyspace(self: &Arc<Self>, proto: Proto) -> Bytes {
        let info = self.ask_args(&[b"INFO", b"keyspace"], proto).await;
        let mut text = match ReplyView::parse(&info) {
            Ok(ReplyView::Bulk(text)) => text.to_vec(),
            Ok(ReplyView::Verbatim { text, .. }) => text.to_vec(),
            _ => return info,
        };
        // With a live migration the masters know only the keys moved so far, and hold the
        // moves' records (during it and after): the keys are counted as DBSIZE counts them
        // (the source's too, the records' not).
        if self.migration.is_some() {
            let size = self.ask_args(&[b"DBSIZE"], Proto::Resp2).await;
            match merge::integer(&size) {
                Some(keys) => text = with_db0_keys(&String::from_utf8_lossy(&text), keys).into(),
                None => return size,
            }
        }
        let databases = self.config.databases;
        let mut counts: BTreeMap<u32, DbCounts> = BTreeMap::new();
        match self.other_databases_in_use().await {
            Ok(true) => {}
            Ok(false) => {
                let lines = keyspace_lines(&String::from_utf8_lossy(&text), &counts, 0);
                let mut out = BytesMut::with_capacity(lines.len() + 16);
                encode::verbatim(&mut out, proto, *b"txt", lines.as_bytes());
                return out.freeze();
            }
            Err(error) => return error,
        }
        // Keys of no database (the in-use marker): not in database 0's line, nor shown.
        let mut hidden = 0;
        // During a live migration the walk may meet a key twice (on the source, then on the
        // target once its PTTL below moved it): each is counted once.
        let mut seen: Option<HashSet<Bytes>> = self.active_migration().map(|_| HashSet::new());
        let mut walk = Walk::new(Bytes::from_static(OTHER_DATABASES_PATTERN));
        loop {
            let keys = match walk.page(self).await {
                Err(error) => return error,
                Ok(None) => break,
                Ok(Some(keys)) => keys,
            };
            let keys: Vec<(u32, Bytes)> = keys
                .into_iter()
                .filter(|key| seen.as_mut().is_none_or(|seen| seen.insert(key.clone())))
                .map(|key| (database::split(&key, databases).0, key))
                .filter(|(db, _)| *db != 0)
                .filter(|(db, _)| {
                    let shown = *db != database::NO_DATABASE;
                    hidden += i64::from(!shown);
                    shown
                })
                .collect();
            let ttls = join_all(keys.iter().map(|(_, key)| {
                let pttl = smallvec![Bytes::from_static(b"PTTL"), key.clone()];
                self.clone().execute(request_of(pttl), Proto::Resp2)
            }))
            .await;
            for ((db, _), ttl) in keys.iter().zip(ttls) {
                let line = counts.entry(*db).or_default();
                line.keys += 1;
                if let Some(ttl) = merge::integer(&ttl).filter(|ttl| *ttl >= 0) {
                    line.expires += 1;
                    line.ttl_sum += ttl;
                }
            }
        }
        let lines = keyspace_lines(&String::from_utf8_lossy(&text), &counts, hidden);
        let mut out = BytesMut::with_capacity(lines.len() + 16);
        encode::verbatim(&mut out, proto, *b"txt", lines.as_bytes());
        out.freeze()
    }
}

/// The masters' `# Keyspace` section with `keys` as database 0's count (the expiring keys
/// no more than that): a line added when the masters had none.
fn with_db0_keys(cluster: &str, keys: i64) -> String {
    let mut out = String::new();
    let mut seen = false;
    for line in cluster.lines() {
        match line.strip_prefix("db0:") {
            Some(fields) => {
                seen = true;
                let fields: Vec<String> = fields
                    .split(',')
                    .map(|field| match field.split_once('=') {
                        Some(("keys", _)) => format!("keys={keys}"),
                        Some(("expires", n)) => {
                            let n: i64 = n.parse().unwrap_or(0);
                            format!("expires={}", n.min(keys))
                        }
                        _ => field.to_owned(),
                    })
                    .collect();
                out.push_str(&format!("db0:{}\r\n", fields.join(",")));
            }
            None => out.push_str(&format!("{line}\r\n")),
        }
    }
    if !seen && keys > 0 {
        out.push_str(&format!("db0:keys={keys},expires=0,avg_ttl=0\r\n"));
    }
    out
}

/// The `# Keyspace` section: the cluster's `db0` line (from `cluster`, the masters' summed
/// section) less the other databases' `counts` and `hidden` keys of none, then theirs.
fn keyspace_lines(cluster: &str, counts: &BTreeMap<u32, DbCounts>, hidden: i64) -> String {
    let field = |line: &str, name: &str| -> i64 {
        line.split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let db0 = cluster
        .lines()
        .find_map(|line| line.strip_prefix("db0:"))
        .unwrap_or("");
    let others = counts
        .values()
        .fold(DbCounts::default(), |sum, c| DbCounts {
            keys: sum.keys + c.keys,
            expires: sum.expires + c.expires,
            ttl_sum: 0,
        });
    let mut out = String::from("# Keyspace\r\n");
    let keys = field(db0, "keys") - others.keys - hidden;
    if keys > 0 {
        let expires = (field(db0, "expires") - others.expires).max(0);
        let avg_ttl = field(db0, "avg_ttl");
        out.push_str(&format!(
            "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
        ));
    }
    for (db, c) in counts {
        let avg_ttl = if c.expires > 0 {
            c.ttl_sum / c.expires
        } else {
            0
        };
        out.push_str(&format!(
            "db{db}:keys={},expires={},avg_ttl={avg_ttl}\r\n",
            c.keys, c.expires
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_zero_is_the_cluster_less_the_others() {
        let mut counts = BTreeMap::new();
        counts.insert(
            3,
            DbCounts {
                keys: 4,
                expires: 2,
                ttl_sum: 3000,
            },
        );
        counts.insert(
            12,
            DbCounts {
                keys: 1,
                expires: 0,
                ttl_sum: 0,
            },
        );
        let cluster = "# Keyspace\r\ndb0:keys=10,expires=3,avg_ttl=700\r\n";
        assert_eq!(
            keyspace_lines(cluster, &counts, 0),
            "# Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=700\r\n\
             db3:keys=4,expires=2,avg_ttl=1500\r\ndb12:keys=1,expires=0,avg_ttl=0\r\n"
        );
    }

    #[test]
    fn a_migrations_count_stands_for_the_masters_one() {
        let masters = "# Keyspace\r\ndb0:keys=10,expires=3,avg_ttl=700\r\n";
        assert_eq!(
            with_db0_keys(masters, 25),
            "# Keyspace\r\ndb0:keys=25,expires=3,avg_ttl=700\r\n"
        );
        assert_eq!(
            with_db0_keys(masters, 2),
            "# Keyspace\r\ndb0:keys=2,expires=2,avg_ttl=700\r\n"
        );
        assert_eq!(
            with_db0_keys("# Keyspace\r\n", 4),
            "# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=0\r\n"
        );
        assert_eq!(with_db0_keys("# Keyspace\r\n", 0), "# Keyspace\r\n");
    }

    #[test]
    fn an_empty_database_zero_has_no_line() {
        let mut counts = BTreeMap::new();
        counts.insert(
            2,
            DbCounts {
                keys: 2,
                expires: 0,
                ttl_sum: 0,
            },
        );
        assert_eq!(
            keyspace_lines(
                "# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n",
                &counts,
                0
            ),
            "# Keyspace\r\ndb2:keys=2,expires=0,avg_ttl=0\r\n"
        );
        assert_eq!(
            keyspace_lines("# Keyspace\r\n", &BTreeMap::new(), 0),
            "# Keyspace\r\n"
        );
    }
}
