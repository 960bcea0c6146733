//! The source's databases a live migration moves, each a [`Side`]: database 0 always and,
//! from a single node, every other database that holds keys when the proxy starts. A key
//! `k` of database `n > 0` moves to `__db<n>:k` on the target, the name `SELECT n` gives it
//! through the proxy (`rewrite::database`), so a client in database `n` finds it there
//! before and after its move alike.
//!
//! Invariants: the sides are fixed at start (the source never gains a key, so a database
//! empty then stays empty); a side's movers and walks use connections that selected its
//! database, so the claim protocol runs unchanged inside it; names on a side are the
//! source's own, and `stored` names (the database's prefix and the name) are what commands,
//! the known-moved set and listings use.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::mover::{MoveError, Mover};
use crate::migrate::source::Endpoint;
use crate::migrate::RedisUrl;
use crate::rewrite::database;

/// One database of the source, and the movers over connections that selected it.
#[derive(Debug)]
pub(super) struct Side {
    /// The source's database number.
    pub(super) db: u32,
    /// Its keys' prefix on the target (`__db<n>:`; empty for database 0).
    pub(super) prefix: Bytes,
    /// The source, this database selected.
    pub(super) source: Arc<Endpoint>,
    /// Moves for commands.
    pub(super) mover: Mover,
    /// The walker's moves, over connections of their own: a command's move never waits
    /// behind a batch of the walker's in a connection's pipeline.
    pub(super) walker: Mover,
}

impl Side {
    /// The stored name (as clients' commands reach the migration) of this side's `name`:
    /// database 0's names are their own.
    pub(super) fn stored(&self, name: &Bytes) -> Bytes {
        match self.prefix.is_empty() {
            true => name.clone(),
            false => database::in_database(&self.prefix, name),
        }
    }
}

/// How the sides are reached.
pub(super) struct Reach<'a> {
    pub(super) source: &'a RedisUrl,
    pub(super) target: &'a [RedisUrl],
    pub(super) lease: Duration,
    pub(super) read_timeout: Option<Duration>,
}

/// Connects database 0's side and every other database of the source with keys; returns
/// the target (database 0's mover's connections) and the sides, database 0 first.
/// `databases`: how many `SELECT` offers; `layout`: whether a key layout is configured
/// (its rules name database 0's keys only, and clients under it cannot select another).
pub(super) async fn connect(
    reach: &Reach<'_>,
    databases: u32,
    layout: bool,
) -> Result<(Arc<Endpoint>, Vec<Side>), MoveError> {
    let (target, zero) = connect_side(reach, 0).await?;
    let others = other_databases_in_use(&zero.source).await?;
    for &db in &others {
        let refusal = if layout {
            Some("a key layout is configured, and its clients cannot SELECT another database")
        } else if db >= databases {
            Some("it is beyond the proxy's `databases`")
        } else {
            None
        };
        if let Some(why) = refusal {
            return Err(MoveError::Source(format!(
                "the source holds keys in database {db}, which a live migration cannot move \
                 here: {why}; move them into database 0 (or another deployment) first"
            )));
        }
    }
    let mut sides = vec![zero];
    for db in others {
        sides.push(connect_side(reach, db).await?.1);
    }
    if sides.len() > 1 {
        mark_databases_in_use(&target).await?;
    }
    Ok((target, sides))
}

/// Writes the target's in-use marker of databases other than 0 (`rewrite::database`)
/// before any of their keys moves: without it, database 0's counts would leave the walk
/// for other databases' keys out, and count the moved ones as its own.
async fn mark_databases_in_use(target: &Endpoint) -> Result<(), MoveError> {
    let marker = database::IN_USE_MARKER;
    match target.call_key(marker, &[b"SET", marker, b"1"]).await {
        Ok(crate::migrate::source::Reply::Data(_)) => Ok(()),
        Ok(other) => Err(MoveError::Target(format!(
            "writing the databases' in-use marker: {other:?}"
        ))),
        Err(e) => Err(MoveError::Target(format!(
            "writing the databases' in-use marker: {e}"
        ))),
    }
}

/// The side of database `db`, and the target its mover reaches.
async fn connect_side(reach: &Reach<'_>, db: u32) -> Result<(Arc<Endpoint>, Side), MoveError> {
    let (source, target, mover) = connect_movers(reach, db).await?;
    let (_, _, walker) = connect_movers(reach, db).await?;
    let side = Side {
        db,
        prefix: database::prefix(db),
        source,
        mover,
        walker,
    };
    Ok((target, side))
}

/// Both sides, connected (the source with database `db` selected), and a mover over them
/// with the scripts loaded.
async fn connect_movers(
    reach: &Reach<'_>,
    db: u32,
) -> Result<(Arc<Endpoint>, Arc<Endpoint>, Mover), MoveError> {
    let seeds = std::slice::from_ref(reach.source);
    let source = match db {
        0 => Endpoint::connect_any_within(seeds, reach.read_timeout).await,
        db => Endpoint::connect_database(seeds, reach.read_timeout, db).await,
    };
    let source = source.map_err(|e| MoveError::Source(e.to_string()))?;
    let target = Endpoint::connect_any_within(reach.target, reach.read_timeout)
        .await
        .map_err(|e| MoveError::Target(e.to_string()))?;
    if source.same_as(&target) {
        return Err(MoveError::Source(
            "migration.source is the proxy's own upstream".into(),
        ));
    }
    let (source, target) = (Arc::new(source), Arc::new(target));
    let mover = Mover::new(source.clone(), target.clone(), reach.lease).await?;
    Ok((source, target, mover))
}

/// The databases other than 0 holding keys on the source (none on a cluster, which has only
/// database 0), from `INFO keyspace` of every master.
async fn other_databases_in_use(source: &Endpoint) -> Result<Vec<u32>, MoveError> {
    let source_error = |e: String| MoveError::Source(e);
    let mut found = Vec::new();
    for node in 0..source.masters().len() {
        let reply = source
            .call_node(node, &[b"INFO", b"keyspace"])
            .await
            .map_err(|e| source_error(e.to_string()))?;
        let Some(text) = reply.data() else {
            return Err(source_error(format!("INFO keyspace answered {reply:?}")));
        };
        for db in other_databases(&String::from_utf8_lossy(text)) {
            if !found.contains(&db) {
                found.push(db);
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The databases other than 0 that `INFO keyspace` (its text) lists with keys.
fn other_databases(info: &str) -> Vec<u32> {
    info.lines()
        .filter_map(|line| {
            let (db, stats) = line.trim().strip_prefix("db")?.split_once(':')?;
            let keys = stats.strip_prefix("keys=")?.split(',').next()?;
            let db: u32 = db.parse().ok()?;
            (db != 0 && keys.parse::<u64>().ok()? > 0).then_some(db)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::other_databases;

    #[test]
    fn databases_other_than_0_with_keys_are_found_in_info_keyspace() {
        let info = "# Keyspace\r\ndb0:keys=12,expires=0,avg_ttl=0\r\n\
                    db3:keys=5,expires=1,avg_ttl=100\r\ndb7:keys=0,expires=0,avg_ttl=0\r\n";
        assert_eq!(other_databases(info), [3]);
        assert!(other_databases("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n").is_empty());
        assert!(other_databases("# Keyspace\r\n").is_empty());
    }
}
