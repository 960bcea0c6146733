//! CLIENT PAUSE for the proxy's own clients: while a pause lasts, their commands (all of
//! them, or only those that write) wait before they run, as on one Redis.
//!
//! Invariants: a pause ends at the later of its end and the end of a pause already in
//! force, and takes the newest mode (Redis's rule); CLIENT UNPAUSE ends it at once. The
//! check on every command is one relaxed load while no pause is in force. Waiting
//! commands are woken on UNPAUSE and on every new pause (to see the new end or mode).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a pause holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseMode {
    /// Commands that write, or may replicate (EVAL, PUBLISH, PFCOUNT...).
    Write,
    /// Every command.
    All,
}

/// The pause of all clients of one proxy process.
#[derive(Debug, Default)]
pub struct ClientPause {
    /// Whether a pause may be in force (changed under the lock): spares commands the
    /// lock and the clock read the rest of the time.
    active: AtomicBool,
    current: Mutex<Option<(Instant, PauseMode)>>,
    changed: Notify,
}

impl ClientPause {
    /// CLIENT PAUSE: clients wait until `until` at least, for `mode`.
    pub fn pause(&self, until: Instant, mode: PauseMode) {
        let mut current = self.lock();
        let end = match *current {
            Some((end, _)) if end > until => end,
            _ => until,
        };
        *current = Some((end, mode));
        self.active.store(true, Ordering::Relaxed);
        drop(current);
        self.changed.notify_waiters();
    }

    /// CLIENT UNPAUSE.
    pub fn unpause(&self) {
        let mut current = self.lock();
        *current = None;
        self.active.store(false, Ordering::Relaxed);
        drop(current);
        self.changed.notify_waiters();
    }

    /// The pause's end, if it holds a command now; `writes` tells (asked only under a
    /// WRITE pause) whether the command writes or may replicate.
    // Inlined: every request asks, and without a pause the answer is one load, which as a
    // call (when the code is split differently between codegen units) cost 20 instructions
    // of a pipelined SET's 3,000.
    #[inline]
    pub fn holds(&self, writes: impl FnOnce() -> bool) -> Option<Instant> {
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        self.holds_now(writes)
    }

    /// [`ClientPause::holds`] while a pause is active.
    fn holds_now(&self, writes: impl FnOnce() -> bool) -> Option<Instant> {
        let mut current = self.lock();
        let (end, mode) = (*current)?;
        if Instant::now() >= end {
            *current = None;
            self.active.store(false, Ordering::Relaxed);
            return None;
        }
        drop(current);
        (mode == PauseMode::All || writes()).then_some(end)
    }

    /// Returns at `end`, or sooner when the pause changes (the caller looks again).
    pub async fn wait(&self, end: Instant) {
        let changed = self.changed.notified();
        // A change between `holds` and here would be missed: look once more.
        if self.holds(|| true) != Some(end) {
            return;
        }
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep_until(end) => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, PauseMode)>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_pause_holds_by_mode_keeps_the_later_end_and_ends_on_unpause() {
        let pause = ClientPause::default();
        assert_eq!(pause.holds(|| true), None);
        let end = Instant::now() + Duration::from_secs(10);
        pause.pause(end, PauseMode::Write);
        assert_eq!(pause.holds(|| false), None, "reads pass a WRITE pause");
        assert_eq!(pause.holds(|| true), Some(end));
        // A shorter pause keeps the end but takes the new mode.
        pause.pause(Instant::now() + Duration::from_millis(1), PauseMode::All);
        assert_eq!(pause.holds(|| false), Some(end));
        pause.unpause();
        assert_eq!(pause.holds(|| true), None);
        pause.pause(Instant::now() + Duration::from_millis(30), PauseMode::All);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(pause.holds(|| true), None, "over at its end");
    }

    #[tokio::test]
    async fn a_waiting_command_wakes_on_unpause() {
        let pause = std::sync::Arc::new(ClientPause::default());
        let end = Instant::now() + Duration::from_secs(60);
        pause.pause(end, PauseMode::All);
        let waiter = tokio::spawn({
            let pause = pause.clone();
            async move { pause.wait(end).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        pause.unpause();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woke on UNPAUSE, long before the pause's end")
            .unwrap();
    }
}
