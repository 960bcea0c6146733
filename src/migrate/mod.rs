//! Offline tools for a keyspace under one prefix: `migrate` copies it between the legacy
//! layout and cluster:v1 (either way, in place or to another deployment), `inspect` counts
//! it. They run while the bots are stopped; the proxy is not involved.
//!
//! # Invariants
//!
//! - Message items are reached only through their chat's log (never by parsing item
//!   names); items no log lists are reported as orphans and not copied.
//! - Remaining TTLs are kept (PTTL then RESTORE with that TTL); index entries are written
//!   in the same script as their record, scored with its expiry (+inf when persistent).
//! - Lock fences and leadership terms go through "set if greater": never lowered.
//! - An existing target key wins unless `overwrite` (or a mirroring way back).
//! - Idempotent and resumable: a re-run copies nothing already there. The marker
//!   `p:{meta}:layout` is written last, only after a complete pass with no error and no
//!   `--include` filter; the way back removes it.
//! - Nothing is copied while a coordinator is live (see [`mod@inspect`]) unless `allow_live`.
//! - Names are held one `SCAN` page at a time ([`MigrateOptions::batch_size`]): a page is
//!   planned, its logs expanded and the lot copied before the next page is read. Across
//!   pages a run keeps 64-bit fingerprints only: of listed items (orphans are what a last
//!   walk finds unlisted) and, mirroring, of written keys (what pruning spares).
//! - A pass over a cluster source whose slots changed masters meanwhile is reported as
//!   stopped early (the walk may have missed keys that moved to a master it had passed); the
//!   next run, a no-op for what was copied, completes it.
//! - A slot that moves during the run (`MOVED`/`ASK`) does not fail it: the slot maps are
//!   re-read and the affected steps retried, which their idempotence allows. The same holds
//!   for the marker's write or removal and for deletions (pruning, `--delete-source`).
//!
//! Not done: the seed turns a schedule that exists only on the legacy side into a deletion
//! marker keeping its fencing token. That needs the schedule record's format, which no rule
//! file describes; a mirroring way back prunes such a schedule instead, and schedules are
//! otherwise copied byte for byte (so their tokens travel unchanged).

pub mod copy;
mod finish;
pub mod inspect;
pub mod plan;
mod reply;
pub mod report;
mod run;
pub mod source;

use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;

use crate::rewrite::Layout;
use copy::{Copier, RESTORE_SCRIPT, SET_IF_GREATER_SCRIPT};
use plan::{FamilyFilter, Step};
use report::Report;
use run::Run;
use source::Endpoint;

pub use inspect::{inspect, Inspection};
pub use source::RedisUrl;

/// Keys read per `SCAN` page and copied per pipelined batch, unless told otherwise.
pub const BATCH: usize = 1000;

/// Why a run could not start or finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MigrateError {
    /// Bad flags or arguments.
    #[error("{0}")]
    Usage(String),
    /// The rule file could not be loaded.
    #[error("layout: {0}")]
    Layout(String),
    /// A server call failed.
    #[error("redis: {0}")]
    Redis(String),
    /// Coordinators are live (heartbeats or pending tickets); nothing was written.
    #[error("refusing to migrate while coordinators are live (stop every bot of the prefix, or pass --allow-live):\n  {}", .0.join("\n  "))]
    Live(Vec<String>),
}

impl From<crate::config::BadRedisUrl> for MigrateError {
    fn from(bad: crate::config::BadRedisUrl) -> Self {
        MigrateError::Usage(bad.to_string())
    }
}

/// Which way keys go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Legacy names to cluster:v1 names.
    #[default]
    LegacyToCluster,
    /// cluster:v1 names back to legacy names.
    ClusterToLegacy,
}

impl Direction {
    /// The flag value.
    pub fn name(self) -> &'static str {
        match self {
            Direction::LegacyToCluster => "legacy-to-cluster",
            Direction::ClusterToLegacy => "cluster-to-legacy",
        }
    }
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Where keys are read.
    pub source: RedisUrl,
    /// Where keys are written; `None`: in place, on the source.
    pub target: Option<RedisUrl>,
    /// More seeds of the target cluster, tried in order when `target` does not answer.
    pub target_seeds: Vec<RedisUrl>,
    /// The bot prefix.
    pub prefix: String,
    /// The rule file.
    pub layout: PathBuf,
    /// Read and count, write nothing.
    pub dry_run: bool,
    /// Replace existing target keys.
    pub overwrite: bool,
    /// Delete source keys once copied.
    pub delete_source: bool,
    /// Only these families (then the marker is not written).
    pub include: Vec<String>,
    /// Proceed despite live coordinators.
    pub allow_live: bool,
    /// Which way.
    pub direction: Direction,
    /// For the way back: overwrite and prune so the target mirrors the source.
    pub mirror: bool,
    /// Stop after this many keys were copied (for tests of resumption).
    pub stop_after: Option<u64>,
    /// Keys asked of `SCAN` per page and copied per pipelined batch ([`BATCH`] by default).
    /// Memory follows it, not the keyspace: names are held one page at a time.
    pub batch_size: usize,
}

/// How far a run got: keys handled of keys planned.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Keys handled.
    pub done: u64,
    /// Keys planned.
    pub total: u64,
}

/// `prefix` with glob characters escaped, for `SCAN MATCH`.
pub fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Loads the rule file for one prefix.
pub fn load_layout(path: &PathBuf, prefix: &str) -> Result<Layout, MigrateError> {
    if prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(MigrateError::Usage(format!(
            "prefix {prefix:?}: must be non-empty and may not contain '{{' or '}}'"
        )));
    }
    Layout::load(path, &[prefix.to_owned()]).map_err(|e| MigrateError::Layout(e.to_string()))
}

/// Runs one migration; `progress` is called after each batch.
pub async fn migrate(
    opts: &MigrateOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, MigrateError> {
    let started = Instant::now();
    let layout = load_layout(&opts.layout, &opts.prefix)?;
    for family in &opts.include {
        if layout.family_id(family).is_none() {
            return Err(MigrateError::Usage(format!(
                "--include {family}: no such family (known: {})",
                layout.families().join(", ")
            )));
        }
    }
    let source = Endpoint::connect(&opts.source).await?;
    let other_target = match &opts.target {
        Some(url) => {
            let mut seeds = vec![url.clone()];
            seeds.extend(opts.target_seeds.iter().cloned());
            Some(Endpoint::connect_any(&seeds).await?)
        }
        None => None,
    };
    let target = other_target.as_ref().unwrap_or(&source);
    let distinct_target = other_target.as_ref().is_some_and(|t| !t.same_as(&source));
    if opts.direction == Direction::ClusterToLegacy && target.is_cluster() {
        return Err(MigrateError::Usage(
            "the way back writes legacy names, which need a single-node target".to_owned(),
        ));
    }
    let mirror = opts.mirror && opts.direction == Direction::ClusterToLegacy;
    let run = Run {
        opts,
        layout: &layout,
        source: &source,
        target,
        copier: Copier {
            source: &source,
            target,
            restore_sha: Bytes::new(),
            raise_sha: Bytes::new(),
            replace: opts.overwrite || mirror,
            dry_run: opts.dry_run,
            delete_source: opts.delete_source,
            distinct_target,
        },
        filter: FamilyFilter::new(&opts.include),
        pattern: format!("{}:*", glob_escape(&opts.prefix)),
        page: opts.batch_size.max(1),
        mirror,
    };
    let estimate = survey(&run, distinct_target.then_some(target)).await?;
    execute(run, estimate, progress, started).await
}

/// The run once nothing refuses it: scripts loaded, the copy pass, then its end.
async fn execute(
    mut run: Run<'_>,
    estimate: u64,
    progress: &mut dyn FnMut(Progress),
    started: Instant,
) -> Result<Report, MigrateError> {
    if !run.opts.dry_run {
        run.copier.restore_sha = run.target.load_script(RESTORE_SCRIPT).await?;
        run.copier.raise_sha = run.target.load_script(SET_IF_GREATER_SCRIPT).await?;
    }
    let mut report = Report {
        direction: run.opts.direction.name().to_owned(),
        dry_run: run.opts.dry_run,
        ..Report::default()
    };
    let source_map = run.source.is_cluster().then(|| run.source.slot_map());
    let passed = run.copy_pass(estimate, &mut report, progress).await?;
    run.finish(&passed, source_map, &mut report, progress)
        .await?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// A first walk, before anything is written: refuses while coordinators are live (on the
/// source, and on `other_target`), and counts the keys the copy will take, for the
/// progress display.
async fn survey(run: &Run<'_>, other_target: Option<&Endpoint>) -> Result<u64, MigrateError> {
    let (pattern, page, allow_live) = (run.pattern.as_bytes(), run.page, run.opts.allow_live);
    let mut live = Vec::new();
    let mut estimate = 0u64;
    let mut walk = run.source.walk(pattern, page);
    while let Some(keys) = walk.next_page().await? {
        estimate += keys
            .iter()
            .filter(|key| {
                matches!(
                    run.plan(key),
                    Step::Copy(_) | Step::Log(_) | Step::Item { .. }
                )
            })
            .count() as u64;
        if !allow_live {
            live.extend(inspect::live_coordination(run.source, run.layout, &keys).await?);
        }
    }
    if let Some(target) = other_target.filter(|_| !allow_live) {
        let mut walk = target.walk(pattern, page);
        while let Some(keys) = walk.next_page().await? {
            live.extend(inspect::live_coordination(target, run.layout, &keys).await?);
        }
    }
    if live.is_empty() {
        Ok(estimate)
    } else {
        Err(MigrateError::Live(live))
    }
}
