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
//! - A slot that moves during the run (`MOVED`/`ASK`) does not fail it: the slot maps are
//!   re-read and the affected steps retried, which their idempotence allows. The same holds
//!   for the marker's write or removal and for deletions (pruning, `--delete-source`).
//!
//! Not done: the seed turns a schedule that exists only on the legacy side into a deletion
//! marker keeping its fencing token. That needs the schedule record's format, which no rule
//! file describes; a mirroring way back prunes such a schedule instead, and schedules are
//! otherwise copied byte for byte (so their tokens travel unchanged).

pub mod copy;
pub mod inspect;
pub mod plan;
pub mod report;
pub mod source;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::join_all;

use crate::rewrite::{Forward, Layout, Reverse, CLUSTER_V1};
use copy::{Copier, Outcome, RESTORE_SCRIPT, SET_IF_GREATER_SCRIPT};
use plan::{kind_of, CopyStep, FamilyFilter, Kind, MessageRules, Step};
use report::{MarkerOutcome, Report};
use source::{Endpoint, Reply};

pub use inspect::{inspect, Inspection};
pub use source::RedisUrl;

/// Keys copied per pipelined batch.
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

    let pattern = format!("{}:*", glob_escape(&opts.prefix));
    let keys = source.scan_all(pattern.as_bytes()).await?;
    let target_keys = if distinct_target {
        Some(target.scan_all(pattern.as_bytes()).await?)
    } else {
        None
    };
    if !opts.allow_live {
        let mut live = inspect::live_coordination(&source, &layout, &keys).await?;
        if let Some(target_keys) = &target_keys {
            live.extend(inspect::live_coordination(target, &layout, target_keys).await?);
        }
        if !live.is_empty() {
            return Err(MigrateError::Live(live));
        }
    }

    let (restore_sha, raise_sha) = if opts.dry_run {
        (Bytes::new(), Bytes::new())
    } else {
        (
            target.load_script(RESTORE_SCRIPT).await?,
            target.load_script(SET_IF_GREATER_SCRIPT).await?,
        )
    };
    let mirror = opts.mirror && opts.direction == Direction::ClusterToLegacy;
    let copier = Copier {
        source: &source,
        target,
        restore_sha,
        raise_sha,
        replace: opts.overwrite || mirror,
        dry_run: opts.dry_run,
        delete_source: opts.delete_source,
        distinct_target,
    };
    let filter = FamilyFilter::new(&opts.include);
    let mut report = Report {
        direction: opts.direction.name().to_owned(),
        dry_run: opts.dry_run,
        ..Report::default()
    };

    // Plan every key; logs are expanded into their items below.
    let mut copies: Vec<CopyStep> = Vec::new();
    let mut logs: Vec<CopyStep> = Vec::new();
    let mut items_found: Vec<(Bytes, String)> = Vec::new();
    let mut internal: Vec<Bytes> = Vec::new();
    for key in &keys {
        let step = match opts.direction {
            Direction::LegacyToCluster => {
                plan::plan_forward(&layout, key, distinct_target, &filter)
            }
            Direction::ClusterToLegacy => {
                plan::plan_reverse(&layout, key, distinct_target, &filter)
            }
        };
        match step {
            Step::Copy(copy) => copies.push(copy),
            Step::Log(log) => logs.push(log),
            Step::Item { family, key } => {
                items_found.push((key, layout.family_name(family).to_owned()));
            }
            Step::Skip { family, .. } => {
                report.family(layout.family_name(family)).skipped += 1;
            }
            Step::Unmatched => report.unmatched += 1,
            Step::Other => {
                if opts.direction == Direction::ClusterToLegacy
                    && layout.reverse(key) == Reverse::Internal
                {
                    internal.push(key.clone());
                }
            }
        }
    }
    expand_logs(
        &layout,
        &opts.prefix,
        &source,
        logs,
        &mut copies,
        &mut report,
    )
    .await?;
    let listed: HashSet<&Bytes> = copies
        .iter()
        .filter(|c| c.kind == Kind::Item)
        .map(|c| &c.from)
        .collect();
    for (item, family) in &items_found {
        if !listed.contains(item) {
            report.orphan(family, item);
        }
    }
    drop(listed);

    // Copy, batch by batch.
    let total = copies.len() as u64;
    let mut done = 0u64;
    let mut written = 0u64;
    for batch in copies.chunks(BATCH) {
        let batch = match opts.stop_after {
            Some(limit) if written >= limit => {
                report.interrupted = true;
                break;
            }
            Some(limit) => &batch[..batch.len().min((limit - written) as usize)],
            None => batch,
        };
        let results = copy_following_moves(&copier, batch).await?;
        for (step, result) in batch.iter().zip(results) {
            let deletes_source = opts.delete_source
                && !opts.dry_run
                && (step.from != step.to || distinct_target)
                && matches!(
                    result,
                    Ok(Outcome::Copied | Outcome::Replaced | Outcome::Kept)
                );
            let counts = report.family(layout.family_name(step.family));
            if deletes_source {
                counts.deleted += 1;
            }
            match result {
                Ok(Outcome::Copied) => counts.copied += 1,
                Ok(Outcome::Replaced) => counts.overwritten += 1,
                Ok(Outcome::Kept) | Ok(Outcome::Vanished) => counts.skipped += 1,
                Err(message) => report.error(layout.family_name(step.family), message),
            }
        }
        written += batch.len() as u64;
        done += batch.len() as u64;
        progress(Progress { done, total });
    }
    if opts.stop_after.is_some_and(|limit| written >= limit) && written < total {
        report.interrupted = true;
    }

    let complete = !report.interrupted && filter.is_all() && report.totals().errors == 0;
    let marker_key = crate::rewrite::marker_key(&opts.prefix);
    report.marker = Some(if !complete {
        MarkerOutcome::NotWritten(
            if report.interrupted {
                "run stopped early"
            } else if !filter.is_all() {
                "--include limits the pass"
            } else {
                "errors in the pass"
            }
            .to_owned(),
        )
    } else {
        match opts.direction {
            Direction::LegacyToCluster if opts.dry_run => {
                MarkerOutcome::NotWritten("dry run".to_owned())
            }
            Direction::LegacyToCluster => {
                let value = layout.layout_name().unwrap_or(CLUSTER_V1);
                let set: &[&[u8]] = &[b"SET", &marker_key, value.as_bytes()];
                expect_ok("SET marker", target, &[(&marker_key, set)]).await?;
                MarkerOutcome::Written
            }
            Direction::ClusterToLegacy => {
                if mirror {
                    prune(
                        &layout,
                        &copier,
                        target,
                        &pattern,
                        &copies,
                        &filter,
                        &mut report,
                    )
                    .await?;
                }
                if opts.dry_run {
                    MarkerOutcome::NotWritten("dry run".to_owned())
                } else {
                    if opts.delete_source {
                        delete_keys(&source, &internal).await?;
                    }
                    let del: &[&[u8]] = &[b"DEL", &marker_key];
                    for endpoint in [&source, target] {
                        expect_ok("DEL marker", endpoint, &[(&marker_key, del)]).await?;
                    }
                    MarkerOutcome::Removed
                }
            }
        }
    });
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Copies `batch`; steps that meet a moved slot are retried after re-reading both slot maps
/// (and loading the scripts on any new master). Retrying is safe: a step's writes are
/// idempotent (an existing target key is kept or replaced by the same rules, a counter only
/// rises). Steps still moving after [`source::MOVED_RETRIES`] attempts are reported as errors.
async fn copy_following_moves(
    copier: &Copier<'_>,
    batch: &[CopyStep],
) -> Result<Vec<Result<Outcome, String>>, MigrateError> {
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
    layout: &Layout,
    prefix: &str,
    source: &Endpoint,
    logs: Vec<CopyStep>,
    copies: &mut Vec<CopyStep>,
    report: &mut Report,
) -> Result<(), MigrateError> {
    if logs.is_empty() {
        return Ok(());
    }
    let rules = MessageRules::new(layout, prefix).ok_or_else(|| {
        MigrateError::Layout("the message log and item rules have an unexpected shape".into())
    })?;
    for batch in logs.chunks(BATCH) {
        let members = join_all(batch.iter().map(|log| async move {
            source
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

/// The mirror's second half: deletes legacy records on the target that the source no
/// longer has. Counters (fences, terms) and ephemeral keys are never pruned.
async fn prune(
    layout: &Layout,
    copier: &Copier<'_>,
    target: &Endpoint,
    pattern: &str,
    copies: &[CopyStep],
    filter: &FamilyFilter,
    report: &mut Report,
) -> Result<(), MigrateError> {
    let produced: HashSet<&Bytes> = copies.iter().map(|c| &c.to).collect();
    let mut doomed = Vec::new();
    for key in target.scan_all(pattern.as_bytes()).await? {
        if produced.contains(&key) {
            continue;
        }
        let Forward::Rewritten(r) = layout.forward(&key) else {
            continue;
        };
        // In place, a cluster:v1 key of the source can also look like a legacy name.
        if !copier.distinct_target
            && matches!(layout.reverse(&key), Reverse::Legacy(ref l) if *l != key)
        {
            continue;
        }
        let name = layout.family_name(r.family);
        let kind = kind_of(name, &key, &r.key, r.index.is_some());
        let prunable = match kind {
            Kind::Counter | Kind::Ephemeral => false,
            Kind::Unchanged => copier.distinct_target,
            _ => true,
        };
        if prunable && filter.allows(name) {
            report.family(name).pruned += 1;
            doomed.push(key);
        }
    }
    if !copier.dry_run {
        delete_keys(target, &doomed).await?;
    }
    Ok(())
}

async fn delete_keys(endpoint: &Endpoint, keys: &[Bytes]) -> Result<(), MigrateError> {
    for batch in keys.chunks(BATCH) {
        let commands: Vec<[&[u8]; 2]> = batch.iter().map(|k| [b"DEL", &k[..]]).collect();
        let requests: Vec<(&[u8], &[&[u8]])> = batch
            .iter()
            .zip(&commands)
            .map(|(k, command)| (&k[..], &command[..]))
            .collect();
        expect_ok("DEL", endpoint, &requests).await?;
    }
    Ok(())
}

/// Sends `requests` (following moved slots) and fails on the first error, naming `what`.
async fn expect_ok(
    what: &str,
    endpoint: &Endpoint,
    requests: &[(&[u8], &[&[u8]])],
) -> Result<(), MigrateError> {
    for reply in endpoint.call_keys_following_moves(requests).await? {
        if let Some(e) = reply?.error() {
            return Err(MigrateError::Redis(format!("{what}: {e}")));
        }
    }
    Ok(())
}
