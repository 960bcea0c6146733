//! The walker's moves in batches: the claims of many keys in one call of the claim script,
//! their seals at once, their finishes in one call of the finish script. Each key still
//! takes its own [`KeyMove`] through claim, seal and finish, as if alone: the scripts treat
//! every key of a call on its own, so a batch is the one-key protocol with fewer round
//! trips (two calls to the source per batch instead of two per key).
//!
//! Invariants: the keys of one call share a node of the source (a single node) or a slot
//! (a cluster), as a script's keys must; a batch's keys share one token, which is fresh
//! per batch, so no other move holds it; a key the batch leaves unfinished (busy, taken
//! over, its lease spent before its seal) goes on alone with the same token and its machine
//! where it stopped, the way [`Mover::drive`] resumes one.

use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;

use super::claim::{KeyMove, Phase};
use super::migration::{Migration, Source};
use super::mover::{MoveError, MoveSpec, Mover};
use crate::route::key_slot;

/// Seals of one batch in flight at once.
const CONCURRENT_SEALS: usize = 64;

impl Migration {
    /// Moves `keys` of side `side` (its own names, not known moved) in batches by node or
    /// slot; one result per key, with its name on the target.
    pub(super) async fn move_batch(
        &self,
        side: usize,
        keys: Vec<Bytes>,
    ) -> Vec<(Bytes, Result<(), MoveError>)> {
        let mut groups: Vec<Vec<Bytes>> = Vec::new();
        match self.sides[side].source.is_cluster() {
            false => groups.push(keys),
            true => {
                let mut by_slot: Vec<(u16, Vec<Bytes>)> = Vec::new();
                for key in keys {
                    let slot = key_slot(&key);
                    match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, group)) => group.push(key),
                        None => by_slot.push((slot, vec![key])),
                    }
                }
                groups.extend(by_slot.into_iter().map(|(_, group)| group));
            }
        }
        let mut out = Vec::new();
        for group in groups {
            out.extend(self.move_group(side, group).await);
        }
        out
    }

    /// The batched steps for keys of one node or slot, then each unfinished key alone.
    async fn move_group(
        &self,
        side: usize,
        keys: Vec<Bytes>,
    ) -> Vec<(Bytes, Result<(), MoveError>)> {
        let specs: Vec<MoveSpec> = keys
            .into_iter()
            .map(|key| self.spec_in(side, key))
            .collect();
        let side = &self.sides[side];
        let walker = &side.walker;
        let mut machines: Vec<KeyMove> = specs.iter().map(|_| KeyMove::new()).collect();
        let token = Mover::token();
        let claimed_at = Instant::now();
        // A failed batched step leaves every machine where it was: each goes on alone.
        if let Ok(claims) = walker.claim_many(&specs, &token).await {
            for (machine, claim) in machines.iter_mut().zip(claims) {
                machine.on_claim(claim);
            }
            // Sealed only while the claims are surely live; else each claims again alone.
            if claimed_at.elapsed() < walker.lease() / 2 {
                self.seal_all(walker, &specs, &mut machines).await;
                self.check_one(walker, &specs, &machines).await;
                self.finish_all(walker, &specs, &mut machines, &token).await;
            }
        }
        // Owned items: a stream over borrowed ones does not satisfy `tokio::spawn`.
        let owned: Vec<(MoveSpec, KeyMove)> = specs.into_iter().zip(machines).collect();
        let token = &token;
        let rest = owned.into_iter().map(|(spec, machine)| async move {
            let done = match machine.phase() {
                Phase::Done(_) => Ok(machine),
                _ => walker.drive(&spec, token, machine, |_| false).await,
            };
            let result = done.map(|machine| match machine.phase() {
                Phase::Done(outcome) => {
                    self.note_moved(&side.stored(&spec.from), *outcome, Source::Walker)
                }
                other => unreachable!("drive stops only when done: {other:?}"),
            });
            if let Err(e) = &result {
                self.note_failed(e);
            }
            (spec.to, result)
        });
        futures_util::stream::iter(rest)
            .buffer_unordered(CONCURRENT_SEALS)
            .collect()
            .await
    }

    /// Seals every machine about to seal, at most [`CONCURRENT_SEALS`] at once; a failed
    /// seal leaves its machine about to seal.
    async fn seal_all(&self, walker: &Mover, specs: &[MoveSpec], machines: &mut [KeyMove]) {
        let due: Vec<(usize, MoveSpec, Option<super::Value>)> = machines
            .iter()
            .enumerate()
            .filter_map(|(i, machine)| match machine.phase() {
                Phase::Seal(value) => Some((i, specs[i].clone(), value.clone())),
                _ => None,
            })
            .collect();
        let seals = due
            .into_iter()
            .map(|(i, spec, value)| async move { (i, walker.seal(&spec, value.as_ref()).await) });
        let sealed: Vec<_> = futures_util::stream::iter(seals)
            .buffer_unordered(CONCURRENT_SEALS)
            .collect()
            .await;
        for (i, seal) in sealed {
            if let Ok(seal) = seal {
                machines[i].on_seal(seal);
            }
        }
    }

    /// Checks the value of one sealed move when one is due ([`Migration::check_due`]):
    /// before the finish, while the batch's claims keep the key unchanged on both sides.
    async fn check_one(&self, walker: &Mover, specs: &[MoveSpec], machines: &[KeyMove]) {
        let wrote: Vec<usize> = (0..machines.len())
            .filter(|&i| machines[i].wrote() && matches!(machines[i].phase(), Phase::Finish))
            .collect();
        if let Some(&first) = wrote.first() {
            if self.check_due(wrote.len() as u64) {
                self.check_sealed(walker, &specs[first]).await;
            }
        }
    }

    /// Finishes every machine about to finish in one call of the finish script.
    async fn finish_all(
        &self,
        walker: &Mover,
        specs: &[MoveSpec],
        machines: &mut [KeyMove],
        token: &Bytes,
    ) {
        let ready: Vec<usize> = (0..machines.len())
            .filter(|&i| matches!(machines[i].phase(), Phase::Finish))
            .collect();
        let batch: Vec<MoveSpec> = ready.iter().map(|&i| specs[i].clone()).collect();
        if let Ok(finishes) = walker.finish_many(&batch, token).await {
            for (&i, finish) in ready.iter().zip(finishes) {
                machines[i].on_finish(finish);
            }
        }
    }
}
