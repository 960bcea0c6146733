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
pub mod inspect;
pub mod plan;
pub mod report;
pub mod source;

use std::collections::HashSet;
use std::hash::Hasher;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::join_all;

use crate::rewrite::{Forward, Layout, Reverse, CLUSTER_V1};
use copy::{Copier, Outcome, RESTORE_SCRIPT, SET_IF_GREATER_SCRIPT};
use plan::{kind_of, CopyStep, FamilyFilter, Kind, MessageRules, Step};
use report::{MarkerOutcome, Report};
use source::{Endpoint, KeyWalk, Reply};

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

    let pattern = format!("{}:*", glob_escape(&opts.prefix));
    let page = opts.batch_size.max(1);
    let filter = FamilyFilter::new(&opts.include);
    let plan = |key: &Bytes| match opts.direction {
        Direction::LegacyToCluster => plan::plan_forward(&layout, key, distinct_target, &filter),
        Direction::ClusterToLegacy => plan::plan_reverse(&layout, key, distinct_target, &filter),
    };
    let estimate = survey(
        &pattern,
        page,
        opts.allow_live,
        &layout,
        &source,
        distinct_target.then_some(target),
        &plan,
    )
    .await?;

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
    let mut report = Report {
        direction: opts.direction.name().to_owned(),
        dry_run: opts.dry_run,
        ..Report::default()
    };

    // The copy, one page of the walk at a time: a page's keys are planned, its logs
    // expanded into their items, and the lot copied before the next page is read. What
    // outlives a page is one fingerprint per listed item (for the orphan check) and, for a
    // mirroring way back, per key written (for the pruning).
    let mut listed_items = Fingerprints::default();
    let mut produced = Fingerprints::default();
    let mut items_found = 0u64;
    let mut internal: Vec<Bytes> = Vec::new();
    let mut done = 0u64;
    let mut reported = Progress::default();
    let source_map = source.is_cluster().then(|| source.slot_map());
    let mut walk = source.walk(pattern.as_bytes(), page);
    'walk: while let Some(keys) = walk.next_page().await? {
        let mut copies: Vec<CopyStep> = Vec::new();
        let mut logs: Vec<CopyStep> = Vec::new();
        for key in &keys {
            match plan(key) {
                Step::Copy(copy) => copies.push(copy),
                Step::Log(log) => logs.push(log),
                Step::Item { .. } => items_found += 1,
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
            page,
            logs,
            &mut copies,
            &mut report,
        )
        .await?;
        for copy in &copies {
            if copy.kind == Kind::Item {
                listed_items.insert(&copy.from);
            }
            if mirror {
                produced.insert(&copy.to);
            }
        }
        for chunk in copies.chunks(page) {
            let room = opts
                .stop_after
                .map_or(usize::MAX, |limit| limit.saturating_sub(done) as usize);
            let batch = &chunk[..chunk.len().min(room)];
            if batch.is_empty() {
                report.interrupted = true;
                break 'walk;
            }
            let results = copy_following_moves(&copier, batch).await?;
            for (step, result) in batch.iter().zip(results) {
                count_outcome(&mut report, &layout, opts, distinct_target, step, result);
            }
            done += batch.len() as u64;
            reported = Progress {
                done,
                total: estimate.max(done),
            };
            progress(reported);
            if batch.len() < chunk.len() {
                report.interrupted = true;
                break 'walk;
            }
        }
    }
    // A slot that changed masters during the walk may have taken keys from a master not
    // yet walked to one already walked: this pass is not complete, the next one is.
    let mut source_moved = false;
    if let (Some(before), false) = (&source_map, report.interrupted) {
        source.refresh().await?;
        source_moved = !source.slot_map().same_owners(before);
        report.interrupted = source_moved;
    }
    if !report.interrupted && reported.done != reported.total {
        // The estimate counted keys that were gone, or items no log lists, by now.
        progress(Progress { done, total: done });
    }
    if items_found > 0 && !report.interrupted {
        let walk = source.walk(pattern.as_bytes(), page);
        report_orphans(&layout, walk, &filter, &listed_items, &mut report).await?;
    }

    let complete = !report.interrupted && filter.is_all() && report.totals().errors == 0;
    let marker_key = crate::rewrite::marker_key(&opts.prefix);
    report.marker = Some(if !complete {
        MarkerOutcome::NotWritten(
            if source_moved {
                "slots of the source moved during the pass: run again to finish"
            } else if report.interrupted {
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
                    let walk = target.walk(pattern.as_bytes(), page);
                    prune(&layout, &copier, walk, &produced, &filter, &mut report).await?;
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

/// A first walk, before anything is written: refuses while coordinators are live (on the
/// source, and on `other_target`), and counts the keys the copy will take, for the
/// progress display.
async fn survey(
    pattern: &str,
    page: usize,
    allow_live: bool,
    layout: &Layout,
    source: &Endpoint,
    other_target: Option<&Endpoint>,
    plan: &impl Fn(&Bytes) -> Step,
) -> Result<u64, MigrateError> {
    let mut live = Vec::new();
    let mut estimate = 0u64;
    let mut walk = source.walk(pattern.as_bytes(), page);
    while let Some(keys) = walk.next_page().await? {
        estimate += keys
            .iter()
            .filter(|key| matches!(plan(key), Step::Copy(_) | Step::Log(_) | Step::Item { .. }))
            .count() as u64;
        if !allow_live {
            live.extend(inspect::live_coordination(source, layout, &keys).await?);
        }
    }
    if let Some(target) = other_target.filter(|_| !allow_live) {
        let mut walk = target.walk(pattern.as_bytes(), page);
        while let Some(keys) = walk.next_page().await? {
            live.extend(inspect::live_coordination(target, layout, &keys).await?);
        }
    }
    if live.is_empty() {
        Ok(estimate)
    } else {
        Err(MigrateError::Live(live))
    }
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
    page: usize,
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
    for batch in logs.chunks(page) {
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
/// longer has (none of the `produced` names). Counters (fences, terms) and ephemeral keys are
/// never pruned.
async fn prune(
    layout: &Layout,
    copier: &Copier<'_>,
    mut walk: KeyWalk,
    produced: &Fingerprints,
    filter: &FamilyFilter,
    report: &mut Report,
) -> Result<(), MigrateError> {
    while let Some(keys) = walk.next_page().await? {
        let mut doomed = Vec::new();
        for key in keys {
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
            delete_keys(copier.target, &doomed).await?;
        }
    }
    Ok(())
}

/// Reports the message items under the prefix that no log listed (a second walk: whether
/// an item is listed is known only once every log has been read).
async fn report_orphans(
    layout: &Layout,
    mut walk: KeyWalk,
    filter: &FamilyFilter,
    listed: &Fingerprints,
    report: &mut Report,
) -> Result<(), MigrateError> {
    while let Some(keys) = walk.next_page().await? {
        for key in &keys {
            if let Step::Item { family, key } = plan::plan_forward(layout, key, false, filter) {
                if !listed.contains(&key) {
                    report.orphan(layout.family_name(family), &key);
                }
            }
        }
    }
    Ok(())
}

/// Adds one copied step's outcome to the report.
fn count_outcome(
    report: &mut Report,
    layout: &Layout,
    opts: &MigrateOptions,
    distinct_target: bool,
    step: &CopyStep,
    result: Result<Outcome, String>,
) {
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

/// 64-bit fingerprints of key names: what a run keeps of the keys it has passed, 8 bytes
/// a key instead of its name. Two of n names share one with a chance of about n²/2⁶⁵ (one
/// run in 370,000 at ten million keys); an orphan sharing a listed item's would go
/// unreported, and a record sharing a written key's would not be pruned.
#[derive(Default)]
struct Fingerprints(HashSet<u64>);

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

    fn contains(&self, key: &[u8]) -> bool {
        self.0.contains(&Self::of(key))
    }
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
