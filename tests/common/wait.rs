//! Waiting for something to happen, bounded: poll a condition until it holds instead of
//! sleeping for a time that is too long on a quiet machine and too short on a loaded one.

use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(10);

/// Polls `done` until it is true; panics naming `what` if it is still false after `within`.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(POLL);
    }
}

/// As [`wait_until`], on the runtime's clock (virtual when the clock is paused).
pub async fn wait_until_async(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
