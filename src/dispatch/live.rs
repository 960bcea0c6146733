//! The request path's part of a live migration (see `live`): a command whose keys this
//! process does not know are moved runs alone, after their moves; keyspace-wide writes
//! the move cannot order with (FLUSHALL, FLUSHDB, SWAPDB) are refused while it lasts.
//!
//! Invariant: a command runs on the target only once every key it declares is moved to
//! done, so a write always lands after its key's move and a read sees the key's one
//! authoritative value.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::command::{CommandSpec, KeyList};
use crate::live::Migration;
use crate::reply;

use super::Proxy;

/// Commands that change the whole keyspace of the target alone: the source's keys would
/// outlive them (FLUSHALL) or land in the wrong database (SWAPDB) afterwards.
const REFUSED_DURING_MIGRATION: &[&str] = &["flushall", "flushdb", "swapdb"];

/// The moves a command must wait for: the migration and the keys, by their client names.
pub struct Moves {
    migration: Arc<Migration>,
    keys: Vec<Bytes>,
}

impl Moves {
    /// The moves of `other` too. A key named twice is moved once (see `run`).
    pub fn extend(&mut self, other: Moves) {
        self.keys.extend(other.keys);
    }

    /// `run`, after the moves (or the moves' error reply instead).
    pub async fn before(self, run: impl Future<Output = Bytes>) -> Bytes {
        match self.run().await {
            Ok(()) => run.await,
            Err(reply) => reply,
        }
    }

    /// Moves every key to done; the error reply a client gets when one cannot be moved
    /// (`-TRYAGAIN`: nothing ran, the same command may be sent again).
    pub async fn run(mut self) -> Result<(), Bytes> {
        // Once, here: a transaction gathers its commands' moves one `extend` at a time, and
        // checking each key against those before would cost its length squared.
        self.keys.sort_unstable();
        self.keys.dedup();
        self.migration
            .move_keys(&self.keys)
            .await
            .map_err(|e| reply::error(&format!("TRYAGAIN live migration: {e}")))
    }
}

impl Proxy {
    /// The live migration, while it still consults the source.
    pub(in crate::dispatch) fn active_migration(&self) -> Option<&Arc<Migration>> {
        self.migration.as_ref().filter(|m| m.is_active())
    }

    /// Whether a request of `spec` with `args` must move keys before it runs: the session
    /// runs it alone (a sequence point), so no request of the client overtakes the moves.
    /// Asked of every request: without a migration it is one load and a branch.
    #[inline(always)]
    pub fn moves_first(&self, spec: &CommandSpec, args: &[Bytes]) -> bool {
        match &self.migration {
            None => false,
            Some(migration) => unmoved_keys(migration, spec, args),
        }
    }

    /// The moves a request of `spec` with `args` waits for, if any.
    pub fn moves_of(&self, spec: Option<&CommandSpec>, args: &[Bytes]) -> Option<Moves> {
        let migration = self.active_migration()?;
        let mut keys = KeyList::new();
        spec?.keys(args, &mut keys);
        let keys = migration.to_move(keys.iter().map(|key| &args[key.index]));
        (!keys.is_empty()).then(|| Moves {
            migration: migration.clone(),
            keys,
        })
    }

    /// The refusal of a command that cannot run while the migration consults the source.
    pub(super) fn migration_refusal(&self, spec: &CommandSpec) -> Option<Bytes> {
        self.active_migration()?;
        REFUSED_DURING_MIGRATION
            .contains(&spec.name.as_str())
            .then(|| {
                reply::error(&format!(
                    "ERR {} is not allowed during a live migration",
                    spec.name.to_uppercase()
                ))
            })
    }
}

/// Whether `migration` still consults the source and a key of the request is not known
/// moved. Kept apart so the check of every request stays small enough to inline.
#[inline(never)]
fn unmoved_keys(migration: &Migration, spec: &CommandSpec, args: &[Bytes]) -> bool {
    if !migration.is_active() {
        return false;
    }
    let mut keys = KeyList::new();
    spec.keys(args, &mut keys);
    migration.must_move(keys.iter().map(|key| &args[key.index]))
}
