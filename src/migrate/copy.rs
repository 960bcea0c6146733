//! Copying planned keys: pipelined reads from the source, pipelined writes to the target,
//! one batch at a time, each batch ordered by target slot.
//!
//! Invariants: a key is written only through the restore or set-if-greater scripts, so a
//! record and its index entry change together and a counter never goes down; an existing
//! target key is replaced only in `replace` mode; a dry run sends no write at all.

use bytes::Bytes;
use futures_util::future::join_all;

use super::plan::{CopyStep, Kind};
use super::source::{Endpoint, Reply};
use crate::route::key_slot;

/// The restore-and-index script.
pub const RESTORE_SCRIPT: &str = include_str!("../../lua/migrate_restore.lua");
/// The set-if-greater script for counters.
pub const SET_IF_GREATER_SCRIPT: &str = include_str!("../../lua/migrate_set_if_greater.lua");

/// What happened to one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Created on the target.
    Copied,
    /// The target key was there (or higher, for a counter) and was kept.
    Kept,
    /// The target key was replaced (or a counter raised).
    Replaced,
    /// The source key was gone by the time it was read.
    Vanished,
}

/// Reads from `source`, writes to `target` (the same endpoint when migrating in place).
pub struct Copier<'a> {
    /// Where keys are read.
    pub source: &'a Endpoint,
    /// Where keys are written.
    pub target: &'a Endpoint,
    /// SHA1 of [`RESTORE_SCRIPT`] on the target (unused in a dry run).
    pub restore_sha: Bytes,
    /// SHA1 of [`SET_IF_GREATER_SCRIPT`] on the target (unused in a dry run).
    pub raise_sha: Bytes,
    /// Replace existing target keys.
    pub replace: bool,
    /// Send no writes; report what would happen.
    pub dry_run: bool,
    /// Delete each source key once its target holds it.
    pub delete_source: bool,
    /// Source and target are different servers.
    pub distinct_target: bool,
}

impl Copier<'_> {
    /// Copies `steps` with every read and write of the batch in flight at once; the
    /// results come back in the order of `steps`.
    pub async fn copy_batch(&self, steps: &[CopyStep]) -> Vec<Result<Outcome, String>> {
        let mut order: Vec<usize> = (0..steps.len()).collect();
        // Writes to one slot go out together, so each master sees runs of one slot.
        order.sort_by_key(|&i| {
            let to = &steps[i].to;
            (self.target.node_of(to), key_slot(to))
        });
        let results = join_all(order.iter().map(|&i| self.copy_one(&steps[i]))).await;
        let mut out: Vec<Result<Outcome, String>> = vec![Err("not run".to_owned()); steps.len()];
        for (position, result) in order.into_iter().zip(results) {
            out[position] = result;
        }
        out
    }

    async fn copy_one(&self, step: &CopyStep) -> Result<Outcome, String> {
        let outcome = match step.kind {
            Kind::Counter => self.raise(step).await?,
            _ => self.restore(step).await?,
        };
        let same_key = step.from == step.to && !self.distinct_target;
        if self.delete_source && !self.dry_run && !same_key && outcome != Outcome::Vanished {
            self.source
                .call_key(&step.from, &[b"DEL", &step.from])
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(outcome)
    }

    async fn restore(&self, step: &CopyStep) -> Result<Outcome, String> {
        let (dump, pttl) = tokio::join!(
            self.source.call_key(&step.from, &[b"DUMP", &step.from]),
            self.source.call_key(&step.from, &[b"PTTL", &step.from]),
        );
        let dump = checked(dump, "DUMP", &step.from)?;
        let Reply::Data(payload) = dump else {
            return Ok(Outcome::Vanished);
        };
        let Some(ttl) = ttl_arg(&checked(pttl, "PTTL", &step.from)?) else {
            return Ok(Outcome::Vanished);
        };
        if self.dry_run {
            let exists = self
                .target
                .call_key(&step.to, &[b"EXISTS", &step.to])
                .await
                .map_err(|e| e.to_string())?;
            return Ok(match (exists.int(), self.replace) {
                (Some(0), _) => Outcome::Copied,
                (_, true) => Outcome::Replaced,
                _ => Outcome::Kept,
            });
        }
        let mode: &[u8] = if self.replace { b"replace" } else { b"keep" };
        let ttl = ttl.to_string();
        let reply = match &step.index {
            Some(index) => {
                self.target
                    .call_key(
                        &step.to,
                        &[
                            b"EVALSHA",
                            &self.restore_sha,
                            b"2",
                            &step.to,
                            &index.key,
                            ttl.as_bytes(),
                            &payload,
                            mode,
                            &index.member,
                        ],
                    )
                    .await
            }
            None => {
                self.target
                    .call_key(
                        &step.to,
                        &[
                            b"EVALSHA",
                            &self.restore_sha,
                            b"1",
                            &step.to,
                            ttl.as_bytes(),
                            &payload,
                            mode,
                        ],
                    )
                    .await
            }
        };
        outcome_of(checked(reply, "restore", &step.to)?)
    }

    async fn raise(&self, step: &CopyStep) -> Result<Outcome, String> {
        let (value, pttl) = tokio::join!(
            self.source.call_key(&step.from, &[b"GET", &step.from]),
            self.source.call_key(&step.from, &[b"PTTL", &step.from]),
        );
        let Reply::Data(value) = checked(value, "GET", &step.from)? else {
            return Ok(Outcome::Vanished);
        };
        let Some(ttl) = ttl_arg(&checked(pttl, "PTTL", &step.from)?) else {
            return Ok(Outcome::Vanished);
        };
        if self.dry_run {
            let current = self
                .target
                .call_key(&step.to, &[b"GET", &step.to])
                .await
                .map_err(|e| e.to_string())?;
            let wanted = Reply::Data(value).int();
            return Ok(match (current, wanted) {
                (Reply::Nil, _) => Outcome::Copied,
                (current, Some(wanted)) if current.int().is_some_and(|c| c < wanted) => {
                    Outcome::Replaced
                }
                _ => Outcome::Kept,
            });
        }
        let ttl = ttl.to_string();
        let reply = self
            .target
            .call_key(
                &step.to,
                &[
                    b"EVALSHA",
                    &self.raise_sha,
                    b"1",
                    &step.to,
                    &value,
                    ttl.as_bytes(),
                ],
            )
            .await;
        outcome_of(checked(reply, "set-if-greater", &step.to)?)
    }
}

/// The reply, or a message naming the command and key when the call or the reply failed.
fn checked(
    reply: Result<Reply, super::MigrateError>,
    what: &str,
    key: &[u8],
) -> Result<Reply, String> {
    let key = String::from_utf8_lossy(key);
    match reply {
        Ok(Reply::Error(e)) => Err(format!("{what} {key}: {e}")),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{what} {key}: {e}")),
    }
}

/// The TTL argument for a restore (0: persistent) from a PTTL reply; `None` when the key
/// is gone (-2).
fn ttl_arg(pttl: &Reply) -> Option<i64> {
    match pttl.int() {
        Some(-1) => Some(0),
        Some(ms) if ms > 0 => Some(ms),
        // 0 ms left: it expires now; -2: already gone.
        _ => None,
    }
}

fn outcome_of(reply: Reply) -> Result<Outcome, String> {
    match reply.int() {
        Some(0) => Ok(Outcome::Kept),
        Some(1) => Ok(Outcome::Copied),
        Some(2) => Ok(Outcome::Replaced),
        _ => Err(format!("unexpected script reply {reply:?}")),
    }
}
