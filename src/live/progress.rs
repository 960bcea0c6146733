//! What is left of the whole migration, whichever proxies move it: the source's size,
//! looked at once a second, and how fast it falls. A process's own counters only know its
//! own moves; the source knows everyone's, since a key leaves it only when its move finishes
//! (clients' new keys go to the target, so nothing else changes its size).
//!
//! Invariant: the samples are in time order and span at most `WINDOW`, so the rate is the
//! recent one (a pause or a resume shows within it), not the average since the start.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Migration;

/// How often the source's size is looked at: one DBSIZE per source master.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How far back the rate looks.
const WINDOW: Duration = Duration::from_secs(10);

/// The source's size over the last `WINDOW`.
#[derive(Debug, Default)]
pub struct SourceLeft {
    samples: VecDeque<(Instant, u64)>,
}

impl SourceLeft {
    /// The source held `keys` names (claims of moves in flight included) at `at`.
    pub fn note(&mut self, at: Instant, keys: u64) {
        self.samples.push_back((at, keys));
        while let Some(&(first, _)) = self.samples.front() {
            if at.duration_since(first) <= WINDOW {
                break;
            }
            self.samples.pop_front();
        }
    }

    /// The source's size at the last look; `None` before the first.
    pub fn keys(&self) -> Option<u64> {
        self.samples.back().map(|&(_, keys)| keys)
    }

    /// Keys leaving the source per second over the window (0 until two looks apart).
    pub fn rate(&self) -> f64 {
        let (Some(&(first, from)), Some(&(last, to))) = (self.samples.front(), self.samples.back())
        else {
            return 0.0;
        };
        let seconds = last.duration_since(first).as_secs_f64();
        match seconds > 0.0 {
            true => from.saturating_sub(to) as f64 / seconds,
            false => 0.0,
        }
    }
}

/// Looks at the source's size every `LOOK_EVERY` until the migration is done, and at the
/// hold on the end (so the status shows another proxy's hold, or its release); spawned
/// once per process beside the walker. A failed look leaves the last one standing.
pub async fn watch(migration: Arc<Migration>) {
    while migration.is_active() {
        if let Ok(keys) = migration.source_size().await {
            migration.note_source_left(keys);
        }
        let _ = migration.end_hold().await;
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

impl Migration {
    /// Notes the source's size now.
    pub(super) fn note_source_left(&self, keys: u64) {
        // The first look is also the estimate of the work the status measures against.
        let _ = self.counters.source_keys_at_start.compare_exchange(
            0,
            keys,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        self.source_left
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(Instant::now(), keys);
    }

    /// The source's size at the last look, and how fast it falls.
    pub(super) fn source_left(&self) -> (Option<u64>, f64) {
        let left = self.source_left.lock().unwrap_or_else(|e| e.into_inner());
        (left.keys(), left.rate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_how_fast_the_source_fell_over_the_window() {
        let start = Instant::now();
        let mut left = SourceLeft::default();
        assert_eq!((left.keys(), left.rate()), (None, 0.0));
        left.note(start, 10_000);
        assert_eq!((left.keys(), left.rate()), (Some(10_000), 0.0));
        left.note(start + Duration::from_secs(2), 9_000);
        assert_eq!((left.keys(), left.rate()), (Some(9_000), 500.0));
        // Samples older than the window drop out: after a pause only the pause shows.
        for second in 3..=14 {
            left.note(start + Duration::from_secs(second), 9_000);
        }
        assert_eq!((left.keys(), left.rate()), (Some(9_000), 0.0));
        // The source never grows through the proxy; were it to, the rate is 0, not less.
        left.note(start + Duration::from_secs(15), 9_500);
        assert_eq!(left.rate(), 0.0);
    }

    #[test]
    fn the_window_keeps_what_falls_within_it() {
        let start = Instant::now();
        let mut left = SourceLeft::default();
        for second in 0..=30 {
            left.note(start + Duration::from_secs(second), 1_000 - second * 10);
        }
        assert!(left.samples.len() <= 11, "{}", left.samples.len());
        assert_eq!(left.rate(), 10.0);
    }
}
