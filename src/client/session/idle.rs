//! A client's idle timer, where `timeout` is set.
//!
//! The idle deadline moves later with every reply. Moving a tokio `Sleep` with it touched the
//! timer's entry, two cache lines out of the cache at a thousand clients, on every request.
//! Instead the timer stays set where it was, which is never later than the deadline: when it
//! fires early, the session finds the client not idle yet and sets it to the deadline then,
//! once per `timeout` for a client that keeps sending. Redis, too, looks at its clients'
//! idle time now and then (`clientsCron`) rather than timing each request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

pub(super) struct IdleTimer {
    /// Made on first use.
    sleep: Option<Pin<Box<Sleep>>>,
    /// When `sleep` fires, once a poll left it holding the session's waker; `None` before.
    armed: Option<Instant>,
    /// The client's idle deadline, as the last wait or reply set it.
    deadline: Instant,
}

impl IdleTimer {
    /// For a client connected at `now`: no deadline until [`IdleTimer::time`] gives one.
    pub(super) fn new(now: Instant) -> IdleTimer {
        IdleTimer {
            sleep: None,
            armed: None,
            deadline: now,
        }
    }

    /// Times the client's idle deadline, if there is one, and tells whether it does: a
    /// store, the timer itself is touched only by a poll that finds it due.
    // Inlined: every wait asks, and without a timeout the answer is one compare.
    #[inline]
    pub(super) fn time(&mut self, deadline: Option<Instant>) -> bool {
        let Some(deadline) = deadline else {
            return false;
        };
        self.deadline = deadline;
        true
    }

    /// Ready once the deadline has passed. Until then, a clock read while the timer is set
    /// to fire before the deadline and that moment has not come; otherwise the timer is set
    /// to the deadline and polled, so that it wakes the session.
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        let waiting = self
            .armed
            .is_some_and(|armed| armed <= deadline && Instant::now() < armed);
        if waiting {
            return Poll::Pending;
        }
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != deadline {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => {
                self.armed = Some(deadline);
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use super::*;

    /// Polls once: whether the timer said the deadline passed.
    async fn expired(timer: &mut IdleTimer) -> bool {
        poll_fn(|cx| Poll::Ready(timer.poll_expired(cx).is_ready())).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_is_kept_without_moving_the_timer_until_it_fires() {
        let start = Instant::now();
        let mut timer = IdleTimer::new(start);
        assert!(timer.time(Some(start + Duration::from_secs(2))));
        assert!(!expired(&mut timer).await);
        // A reply at 1.5 s moves the deadline to 3.5 s: the timer stays at 2 s.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(timer.time(Some(start + Duration::from_millis(3500))));
        assert!(!expired(&mut timer).await);
        let sleep = timer.sleep.as_ref().expect("made at the first poll");
        assert_eq!(sleep.deadline(), start + Duration::from_secs(2));
        // At 2 s it fires early: set to the deadline, not expired.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!expired(&mut timer).await);
        let sleep = timer.sleep.as_ref().expect("kept");
        assert_eq!(sleep.deadline(), start + Duration::from_millis(3500));
        tokio::time::sleep(Duration::from_millis(1499)).await;
        assert!(!expired(&mut timer).await);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(expired(&mut timer).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_moves_the_timer_at_once() {
        let start = Instant::now();
        let mut timer = IdleTimer::new(start);
        timer.time(Some(start + Duration::from_secs(300)));
        assert!(!expired(&mut timer).await);
        // A reload lowers `timeout`.
        timer.time(Some(start + Duration::from_secs(1)));
        assert!(!expired(&mut timer).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(expired(&mut timer).await);
        assert!(!timer.time(None), "no timeout: nothing timed");
    }

    /// The timer wakes the task at the deadline, also after firing early: a task left
    /// without a waker would never see the deadline pass.
    #[tokio::test(start_paused = true)]
    async fn the_timer_wakes_the_waiting_task_at_the_deadline() {
        let start = Instant::now();
        let mut timer = IdleTimer::new(start);
        timer.time(Some(start + Duration::from_secs(1)));
        assert!(!expired(&mut timer).await);
        timer.time(Some(start + Duration::from_secs(3)));
        let polls = std::cell::Cell::new(0);
        poll_fn(|cx| {
            polls.set(polls.get() + 1);
            timer.poll_expired(cx)
        })
        .await;
        assert_eq!(Instant::now(), start + Duration::from_secs(3));
        // The first poll, the early fire at 1 s, the deadline: no poll without a wake.
        assert_eq!(polls.get(), 3);
    }
}
