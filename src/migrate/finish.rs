//! What a run does after its copy pass: checks whether a cluster source's slots moved under
//! it, reports the orphan message items, and settles the layout marker: written last, only
//! after a complete pass with no error and no `--include` filter; removed by the way back
//! (after pruning, when it mirrors).

use bytes::Bytes;

use super::plan::{self, kind_of, FamilyFilter, Kind, Step};
use super::report::{MarkerOutcome, Report};
use super::run::{Fingerprints, Passed, Run};
use super::source::{Endpoint, KeyWalk};
use super::{Direction, MigrateError, Progress, BATCH};
use crate::rewrite::{Forward, Layout, Reverse, CLUSTER_V1};
use crate::route::SlotMap;

impl Run<'_> {
    /// Everything after the copy pass; `source_map` is the cluster source's map before it.
    pub(super) async fn finish(
        &self,
        passed: &Passed,
        source_map: Option<SlotMap>,
        report: &mut Report,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), MigrateError> {
        // A slot that changed masters during the walk may have taken keys from a master not
        // yet walked to one already walked: this pass is not complete, the next one is.
        let mut source_moved = false;
        if let (Some(before), false) = (&source_map, report.interrupted) {
            self.source.refresh().await?;
            source_moved = !self.source.slot_map().same_owners(before);
            report.interrupted = source_moved;
        }
        if !report.interrupted && passed.reported.done != passed.reported.total {
            // The estimate counted keys that were gone, or items no log lists, by now.
            progress(Progress {
                done: passed.done,
                total: passed.done,
            });
        }
        if passed.items_found > 0 && !report.interrupted {
            let walk = self.source.walk(self.pattern.as_bytes(), self.page);
            report_orphans(
                self.layout,
                walk,
                &self.filter,
                &passed.listed_items,
                report,
            )
            .await?;
        }
        let marker = match self.unfinished(source_moved, report) {
            Some(reason) => MarkerOutcome::NotWritten(reason.to_owned()),
            None => self.settle_marker(passed, report).await?,
        };
        report.marker = Some(marker);
        Ok(())
    }

    /// Why this pass may not write the marker, if it may not.
    fn unfinished(&self, source_moved: bool, report: &Report) -> Option<&'static str> {
        if source_moved {
            Some("slots of the source moved during the pass: run again to finish")
        } else if report.interrupted {
            Some("run stopped early")
        } else if !self.filter.is_all() {
            Some("--include limits the pass")
        } else if report.totals().errors != 0 {
            Some("errors in the pass")
        } else {
            None
        }
    }

    /// After a complete pass: writes the marker, or, on the way back, prunes (mirroring),
    /// deletes the source's internal keys (`--delete-source`) and removes the marker.
    async fn settle_marker(
        &self,
        passed: &Passed,
        report: &mut Report,
    ) -> Result<MarkerOutcome, MigrateError> {
        let opts = self.opts;
        let marker_key = crate::rewrite::marker_key(&opts.prefix);
        Ok(match opts.direction {
            Direction::LegacyToCluster if opts.dry_run => {
                MarkerOutcome::NotWritten("dry run".to_owned())
            }
            Direction::LegacyToCluster => {
                let value = self.layout.layout_name().unwrap_or(CLUSTER_V1);
                let set: &[&[u8]] = &[b"SET", &marker_key, value.as_bytes()];
                expect_ok("SET marker", self.target, &[(&marker_key, set)]).await?;
                MarkerOutcome::Written
            }
            Direction::ClusterToLegacy => {
                if self.mirror {
                    let walk = self.target.walk(self.pattern.as_bytes(), self.page);
                    self.prune(walk, &passed.produced, report).await?;
                }
                if opts.dry_run {
                    MarkerOutcome::NotWritten("dry run".to_owned())
                } else {
                    if opts.delete_source {
                        delete_keys(self.source, &passed.internal).await?;
                    }
                    let del: &[&[u8]] = &[b"DEL", &marker_key];
                    for endpoint in [self.source, self.target] {
                        expect_ok("DEL marker", endpoint, &[(&marker_key, del)]).await?;
                    }
                    MarkerOutcome::Removed
                }
            }
        })
    }

    /// The mirror's second half: deletes legacy records on the target that the source no
    /// longer has (none of the `produced` names). Counters (fences, terms) and ephemeral
    /// keys are never pruned.
    async fn prune(
        &self,
        mut walk: KeyWalk,
        produced: &Fingerprints,
        report: &mut Report,
    ) -> Result<(), MigrateError> {
        let (layout, copier) = (self.layout, &self.copier);
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
                if prunable && self.filter.allows(name) {
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
