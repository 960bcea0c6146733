//! The count check at a live migration's end: every key the source held when the
//! migration began is accounted for, either moved (a field of its slot's moved-fence on
//! the target: every move, by any proxy, sets one and nothing removes it before the end)
//! or gone from the source without a move (expired or evicted there, by the source's own
//! `expired_keys` and `evicted_keys`).
//!
//! Invariants: the baseline (the source's keys and those two counters) is written on the
//! target once, by the first proxy, before it moves anything ([`BASELINE_FIELD`] of slot
//! 0's fence, set if absent); every later proxy keeps that one. A baseline taken after some
//! moves is still a lower bound (what moved before it only adds fields), so the check can
//! only fail when a key left the source unaccounted: deleted there behind the proxies, or
//! lost by a defect. A fence already compacted means another proxy's end passed the
//! checks, so this one does not count again.

use super::mover::MoveError;
use super::names::{slot_fence, EVERY_KEY_MOVED};
use super::verify::{record_field, HOLD_FIELD};
use super::Migration;
use crate::migrate::source::Reply;
use crate::route::SLOT_COUNT;

/// The field of slot 0's moved-fence holding the baseline: `<keys> <gone>`.
pub const BASELINE_FIELD: &[u8] = b"slotbridge:live:baseline";
/// The field holding how many keys the last count check found missing, while it holds the
/// end; a resume adds it to [`ACCEPTED_FIELD`].
pub const SHORT_FIELD: &[u8] = b"slotbridge:live:short";
/// The field holding how many missing keys operators accepted by resuming.
pub const ACCEPTED_FIELD: &[u8] = b"slotbridge:live:accepted";

/// The fields of slot 0's fence that are records, not moved keys.
const RECORD_FIELDS: [&[u8]; 4] = [BASELINE_FIELD, HOLD_FIELD, SHORT_FIELD, ACCEPTED_FIELD];

/// Fences asked at once while counting.
const FENCES_PER_CALL: usize = 1024;

/// The source when the migration began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Baseline {
    /// Its keys, records of moves left out.
    pub keys: u64,
    /// Its `expired_keys` plus `evicted_keys`, summed over its masters.
    pub gone: u64,
}

impl Baseline {
    fn encode(self) -> String {
        format!("{} {}", self.keys, self.gone)
    }

    fn decode(text: &[u8]) -> Option<Baseline> {
        let text = std::str::from_utf8(text).ok()?;
        let (keys, gone) = text.split_once(' ')?;
        Some(Baseline {
            keys: keys.parse().ok()?,
            gone: gone.parse().ok()?,
        })
    }
}

/// Judges the end's counts: `moved`, the fields of the target's fences (and the missing
/// keys operators accepted); `gone_now`, the source's expired and evicted keys now. `Ok`
/// with a summary, or `Err` with how many keys are missing and what was found; `Ok` too
/// when the source's counters went back (a restart or `CONFIG RESETSTAT` of the source):
/// then nothing can be told, and the summary says so.
pub fn judge(baseline: Baseline, moved: u64, gone_now: u64) -> Result<String, (u64, String)> {
    let Some(gone) = gone_now.checked_sub(baseline.gone) else {
        return Ok(format!(
            "{moved} keys moved; the source's expired and evicted counters were reset since \
             the start, so its {} keys then are not compared",
            baseline.keys
        ));
    };
    let accounted = moved + gone;
    match accounted >= baseline.keys {
        true => Ok(format!(
            "{} keys at the start: {moved} moved, {gone} expired or evicted on the source",
            baseline.keys
        )),
        false => Err((
            baseline.keys - accounted,
            format!(
                "{} of the source's {} keys at the start are not accounted for: {moved} moved, \
                 {gone} expired or evicted there (deleted on the source behind the proxies?)",
                baseline.keys - accounted,
                baseline.keys
            ),
        )),
    }
}

impl Migration {
    /// The baseline on the target: written now (the source as it is) unless a proxy wrote
    /// it already, then read back. Called before this proxy moves anything.
    pub async fn record_baseline(&self) -> Result<Baseline, MoveError> {
        if let Some(stored) = self.stored_baseline().await? {
            return Ok(stored);
        }
        let now = Baseline {
            keys: self.source_unmoved().await?,
            gone: self.source_gone().await?,
        };
        let fence = slot_fence(0);
        let text = now.encode();
        let set: &[&[u8]] = &[b"HSETNX", &fence, BASELINE_FIELD, text.as_bytes()];
        self.target
            .call_key(&fence, set)
            .await
            .map_err(|e| MoveError::Target(format!("writing the baseline: {e}")))?;
        let stored = self.stored_baseline().await?;
        stored.ok_or_else(|| MoveError::Target("the baseline was not kept".into()))
    }

    async fn stored_baseline(&self) -> Result<Option<Baseline>, MoveError> {
        let stored = record_field(&self.target, BASELINE_FIELD).await;
        match stored.map_err(MoveError::Target)? {
            None => Ok(None),
            Some(text) => Baseline::decode(&text)
                .map(Some)
                .ok_or_else(|| MoveError::Target(format!("a baseline of {text:?}"))),
        }
    }

    /// The source's `expired_keys` plus `evicted_keys`, over its masters.
    async fn source_gone(&self) -> Result<u64, MoveError> {
        let source = &self.sides[0].source;
        let mut total = 0;
        for node in 0..source.masters().len() {
            let reply = source
                .call_node(node, &[b"INFO", b"stats"])
                .await
                .map_err(|e| MoveError::Source(e.to_string()))?;
            let Some(text) = reply.data() else {
                return Err(MoveError::Source(format!("INFO stats answered {reply:?}")));
            };
            let text = String::from_utf8_lossy(text);
            for line in text.lines() {
                let value = line
                    .strip_prefix("expired_keys:")
                    .or_else(|| line.strip_prefix("evicted_keys:"));
                total += value
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Ok(total)
    }

    /// The fields of every slot's fence on the target, records left out; `None` once a
    /// fence is compacted (another proxy's end passed the checks).
    async fn moved_fields(&self) -> Result<Option<u64>, String> {
        let fences: Vec<_> = (0..SLOT_COUNT as u16).map(slot_fence).collect();
        let mut moved: u64 = 0;
        for chunk in fences.chunks(FENCES_PER_CALL) {
            let calls: Vec<[&[u8]; 3]> = chunk
                .iter()
                .map(|fence| [b"HMGET".as_slice(), fence, EVERY_KEY_MOVED])
                .collect();
            let lengths: Vec<[&[u8]; 2]> = chunk.iter().map(|f| [b"HLEN".as_slice(), f]).collect();
            let mut requests: Vec<(&[u8], &[&[u8]])> = Vec::new();
            for ((fence, compacted), length) in chunk.iter().zip(&calls).zip(&lengths) {
                requests.push((fence, compacted));
                requests.push((fence, length));
            }
            let replies = self
                .target
                .call_keys_following_moves(&requests)
                .await
                .map_err(|e| format!("counting the moved-fences: {e}"))?;
            for pair in replies.chunks(2) {
                let [compacted, length] = pair else {
                    return Err("counting the moved-fences: a reply is missing".into());
                };
                let compacted = compacted.as_ref().map_err(|e| e.to_string())?;
                if matches!(compacted, Reply::List(f) if f.iter().any(|f| *f != Reply::Nil)) {
                    return Ok(None);
                }
                let length = length.as_ref().map_err(|e| e.to_string())?;
                moved += length
                    .int()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0);
            }
        }
        let fence = slot_fence(0);
        let mut fields: Vec<&[u8]> = vec![b"HMGET", &fence];
        fields.extend(RECORD_FIELDS);
        let records = self
            .target
            .call_key(&fence, &fields)
            .await
            .map_err(|e| format!("counting the moved-fences: {e}"))?;
        if let Reply::List(fields) = records {
            moved -= fields.iter().filter(|f| **f != Reply::Nil).count() as u64;
        }
        Ok(Some(moved))
    }

    /// Holds the end for a count check that found `missing` keys unaccounted for: a resume
    /// accepts that many.
    async fn hold_for_counts(&self, missing: u64, why: String) {
        let fence = slot_fence(0);
        let missing = missing.to_string();
        let set: &[&[u8]] = &[b"HSET", &fence, SHORT_FIELD, missing.as_bytes()];
        if let Err(e) = self.target.call_key(&fence, set).await {
            tracing::warn!(error = %e, "live migration: the missing keys' count was not written");
        }
        self.hold_end(why).await;
    }

    /// How many missing keys operators accepted.
    async fn accepted_shortfall(&self) -> Result<u64, String> {
        let accepted = record_field(&self.target, ACCEPTED_FIELD).await?;
        let number = accepted.and_then(|n| std::str::from_utf8(&n).ok()?.parse().ok());
        Ok(number.unwrap_or(0))
    }

    /// The count check of the end (see the module doc): `true` when it holds the end (keys
    /// are missing), else what it found is kept for the status.
    pub(super) async fn counts_hold_the_end(&self) -> Result<bool, String> {
        match self.check_counts().await? {
            Ok(summary) => {
                tracing::info!(%summary, "live migration: the counts are verified");
                *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = Some(summary);
                Ok(false)
            }
            Err((missing, why)) => {
                self.hold_for_counts(missing, why).await;
                Ok(true)
            }
        }
    }

    /// What the count check finds: `Ok` with a summary, `Err` with how many keys are
    /// missing and what was found.
    async fn check_counts(&self) -> Result<Result<String, (u64, String)>, String> {
        // Compacted first: the compaction also drops the baseline.
        let Some(moved) = self.moved_fields().await? else {
            return Ok(Ok(
                "another proxy's end compacted the fences: counted there".into(),
            ));
        };
        let Some(baseline) = self.stored_baseline().await.map_err(|e| e.to_string())? else {
            return Ok(Ok("no baseline was recorded: counts not compared".into()));
        };
        let gone = self.source_gone().await.map_err(|e| e.to_string())?;
        let accepted = self.accepted_shortfall().await?;
        Ok(judge(baseline, moved + accepted, gone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_at_the_start_must_be_moved_or_gone() {
        let start = Baseline { keys: 100, gone: 7 };
        assert!(judge(start, 100, 7).is_ok());
        assert!(judge(start, 95, 12).is_ok(), "5 expired meanwhile");
        assert!(
            judge(start, 130, 7).is_ok(),
            "keys written by clients moved too"
        );
        let (missing, short) = judge(start, 95, 9).unwrap_err();
        assert_eq!(missing, 3);
        assert!(short.starts_with("3 of the source's 100 keys"), "{short}");
        // Counters reset on the source: nothing can be told.
        let reset = judge(start, 10, 2).unwrap();
        assert!(reset.contains("reset"), "{reset}");
    }

    #[test]
    fn a_baseline_reads_back() {
        let b = Baseline {
            keys: 30_123,
            gone: 4,
        };
        assert_eq!(Baseline::decode(b.encode().as_bytes()), Some(b));
        assert_eq!(Baseline::decode(b"12"), None);
        assert_eq!(Baseline::decode(b"x 1"), None);
    }
}
