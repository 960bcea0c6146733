//! One run's copy pass: the walk over the source, a page at a time, each page planned, its
//! logs expanded into their items, and the lot copied (following moved slots) before the
//! next page is read; each copied step counted in the report and the progress told.

use std::collections::HashSet;
use std::hash::Hasher;

use bytes::Bytes;
use futures_util::future::join_all;

use super::copy::{Copier, Outcome, RESTORE_SCRIPT, SET_IF_GREATER_SCRIPT};
use super::plan::{self, CopyStep, FamilyFilter, Kind, MessageRules, Step};
use super::report::Report;
use super::source::{self, Endpoint, Reply};
use super::{Direction, MigrateError, MigrateOptions, Progress};
use crate::rewrite::{Layout, Reverse};

/// What one run works with, once its endpoints are connected and its scripts loaded.
pub(super) struct Run<'a> {
    pub opts: &'a MigrateOptions,
    pub layout: &'a Layout,
    pub source: &'a Endpoint,
    pub target: &'a Endpoint,
    pub copier: Copier<'a>,
    pub filter: FamilyFilter,
    /// `SCAN MATCH` pattern of the prefix.
    pub pattern: String,
    /// Keys per `SCAN` page and per copied batch.
    pub page: usize,
    /// A mirroring way back: the target's records the source lacks are pruned.
    pub mirror: bool,
}

/// What the copy pass leaves for the rest of the run. Across pages it keeps 64-bit
/// fingerprints only: of listed items (orphans are what a last walk finds unlisted) and,
/// mirroring, of written keys (what pruning spares).
#[derive(Default)]
pub(super) struct Passed {
    pub listed_items: Fingerprints,
    pub produced: Fingerprints,
    /// Message items the walk met (reached only through their logs).
    pub items_found: u64,
    /// The way back's internal keys (indices, the marker) to delete with the source.
    pub internal: Vec<Bytes>,
    /// Keys handled.
    pub done: u64,
    /// The progress last told.
    pub reported: Progress,
}

impl Run<'_> {
    /// The step `key` takes in this run's direction.
    pub fn plan(&self, key: &Bytes) -> Step {
        let distinct = self.copier.distinct_target;
        match self.opts.direction {
            Direction::LegacyToCluster => {
                plan::plan_forward(self.layout, key, distinct, &self.filter)
            }
            Direction::ClusterToLegacy => {
                plan::plan_reverse(self.layout, key, distinct, &self.filter)
            }
        }
    }

    /// The copy, one page of the walk at a time; stops early (marking the report
    /// interrupted) at `stop_after`.
    pub async fn copy_pass(
        &self,
        estimate: u64,
        report: &mut Report,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Passed, MigrateError> {
        let mut passed = Passed::default();
        let mut walk = self.source.walk(self.pattern.as_bytes(), self.page);
        while let Some(keys) = walk.next_page().await? {
            let copies = self.plan_page(&keys, &mut passed, report).await?;
            let finished = self
                .copy_page(&copies, estimate, &mut passed, report, progress)
                .await?;
            if !finished {
                report.interrupted = true;
                break;
            }
        }
        Ok(passed)
    }

    /// The copies of one page: its keys planned, its logs expanded into their items.
    async fn plan_page(
        &self,
        keys: &[Bytes],
        passed: &mut Passed,
        report: &mut Report,
    ) -> Result<Vec<CopyStep>, MigrateError> {
        let mut copies: Vec<CopyStep> = Vec::new();
        let mut logs: Vec<CopyStep> = Vec::new();
        for key in keys {
            match self.plan(key) {
                Step::Copy(copy) => copies.push(copy),
                Step::Log(log) => logs.push(log),
                Step::Item { .. } => passed.items_found += 1,
                Step::Skip { family, .. } => {
                    report.family(self.layout.family_name(family)).skipped += 1;
                }
                Step::Unmatched => report.unmatched += 1,
                Step::Other => {
                    if self.opts.direction == Direction::ClusterToLegacy
                        && self.layout.reverse(key) == Reverse::Internal
                    {
                        passed.internal.push(key.clone());
                    }
                }
            }
        }
        self.expand_logs(logs, &mut copies, report).await?;
        for copy in &copies {
            if copy.kind == Kind::Item {
                passed.listed_items.insert(&copy.from);
            }
            if self.mirror {
                passed.produced.insert(&copy.to);
            }
        }
        Ok(copies)
    }

    /// Copies one page's steps in batches; `false` when `stop_after` cut it short.
    async fn copy_page(
        &self,
        copies: &[CopyStep],
        estimate: u64,
        passed: &mut Passed,
        report: &mut Report,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<bool, MigrateError> {
        for chunk in copies.chunks(self.page) {
            let room = self.opts.stop_after.map_or(usize::MAX, |limit| {
                limit.saturating_sub(passed.done) as usize
            });
            let batch = &chunk[..chunk.len().min(room)];
            if batch.is_empty() {
                return Ok(false);
            }
            let results = self.copy_following_moves(batch).await?;
            for (step, result) in batch.iter().zip(results) {
                self.count_outcome(report, step, result);
            }
            passed.done += batch.len() as u64;
            passed.reported = Progress {
                done: passed.done,
                total: estimate.max(passed.done),
            };
            progress(passed.reported);
            if batch.len() < chunk.len() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Copies `batch`; steps that meet a moved slot are retried after re-reading both slot
    /// maps (and loading the scripts on any new master). Retrying is safe: a step's writes
    /// are idempotent (an existing target key is kept or replaced by the same rules, a
    /// counter only rises). Steps still moving after [`source::MOVED_RETRIES`] attempts are
    /// reported as errors.
    async fn copy_following_moves(
        &self,
        batch: &[CopyStep],
    ) -> Result<Vec<Result<Outcome, String>>, MigrateError> {
        let copier = &self.copier;
        let mut results = copier.copy_batch(batch).await;
        let refresh = || async move {
            copier.source.refresh().await?;
            copier.target.refresh().await?;
            if !copier.dry_run {
                copier.target.load_script(RESTORE_SCRIPT).await?;
                copier.target.load_script(SET_IF_GREATER_SCRIPT).await?;
            }
            Ok(())
        };
        let redo = |again: Vec<usize>| async move {
            let retry: Vec<CopyStep> = again.iter().map(|&i| batch[i].clone()).collect();
            copier.copy_batch(&retry).await
        };
        source::follow_moves(&mut results, |e| source::is_moved(e), refresh, redo).await?;
        Ok(results)
    }

    /// Reads every log's members and plans the items they name (in the log's chat only).
    async fn expand_logs(
        &self,
        logs: Vec<CopyStep>,
        copies: &mut Vec<CopyStep>,
        report: &mut Report,
    ) -> Result<(), MigrateError> {
        if logs.is_empty() {
            return Ok(());
        }
        let layout = self.layout;
        let rules = MessageRules::new(layout, &self.opts.prefix).ok_or_else(|| {
            MigrateError::Layout("the message log and item rules have an unexpected shape".into())
        })?;
        for batch in logs.chunks(self.page) {
            let members = join_all(batch.iter().map(|log| async move {
                self.source
                    .call_key(&log.from, &[b"ZRANGE", &log.from, b"0", b"-1"])
                    .await
            }))
            .await;
            for (log, members) in batch.iter().zip(members) {
                let members = match members? {
                    Reply::List(members) => members,
                    Reply::Error(e) => {
                        report.error(layout.family_name(log.family), format!("ZRANGE: {e}"));
                        continue;
                    }
                    _ => Vec::new(),
                };
                let Some(chat) = rules.chat_of(&log.from) else {
                    continue;
                };
                for member in members.iter().filter_map(Reply::data) {
                    let item = rules.item_key(chat, member);
                    match plan::plan_item(layout, log, &item) {
                        Some(copy) => copies.push(copy),
                        None => report.family(plan::ITEM_FAMILY).skipped += 1,
                    }
                }
                copies.push(log.clone());
            }
        }
        Ok(())
    }

    /// Adds one copied step's outcome to the report.
    fn count_outcome(&self, report: &mut Report, step: &CopyStep, result: Result<Outcome, String>) {
        let opts = self.opts;
        let deletes_source = opts.delete_source
            && !opts.dry_run
            && (step.from != step.to || self.copier.distinct_target)
            && matches!(
                result,
                Ok(Outcome::Copied | Outcome::Replaced | Outcome::Kept)
            );
        let counts = report.family(self.layout.family_name(step.family));
        if deletes_source {
            counts.deleted += 1;
        }
        match result {
            Ok(Outcome::Copied) => counts.copied += 1,
            Ok(Outcome::Replaced) => counts.overwritten += 1,
            Ok(Outcome::Kept) | Ok(Outcome::Vanished) => counts.skipped += 1,
            Err(message) => report.error(self.layout.family_name(step.family), message),
        }
    }
}

/// 64-bit fingerprints of key names: what a run keeps of the keys it has passed, 8 bytes
/// a key instead of its name. Two of n names share one with a chance of about n²/2⁶⁵ (one
/// run in 370,000 at ten million keys); an orphan sharing a listed item's would go
/// unreported, and a record sharing a written key's would not be pruned.
#[derive(Default)]
pub(super) struct Fingerprints(HashSet<u64>);

impl Fingerprints {
    fn of(key: &[u8]) -> u64 {
        // SipHash with fixed keys: the same name gives the same fingerprint all run long.
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(key);
        hasher.finish()
    }

    fn insert(&mut self, key: &[u8]) {
        self.0.insert(Self::of(key));
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.0.contains(&Self::of(key))
    }
}
