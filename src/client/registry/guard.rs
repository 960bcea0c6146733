//! A session's handle on its registry entry: it records the client's activity for CLIENT
//! LIST, hands over the messages posted to it, and resolves the signals other clients, the
//! reloader and the shutdown send it. Dropping it unregisters the client.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;

use super::{Activity, Registry};

/// Keeps a client registered while it lives.
#[derive(Debug)]
pub struct ClientGuard {
    /// The client's id (CLIENT ID).
    pub id: u64,
    pub(super) activity: Arc<Activity>,
    pub(super) created: Instant,
    pub(super) registry: Arc<Registry>,
}

impl ClientGuard {
    /// Records a read from or a write to the client at `at` (CLIENT LIST's `idle=`, which
    /// Redis counts from its last interaction either way).
    pub fn active_at(&self, at: Instant) {
        // Whole seconds and milliseconds apart: `as_millis` works in u128, on every request.
        let since = at.saturating_duration_since(self.created);
        let ms = since.as_secs() * 1000 + u64::from(since.subsec_millis());
        self.activity.last_active_ms.store(ms, Ordering::Relaxed);
    }

    /// Shows whether CLIENT PAUSE holds a request of this client (`flags=b`).
    pub fn held_by_pause(&self, held: bool) {
        self.activity.paused.store(held, Ordering::Relaxed);
    }

    /// The invalidation messages posted to the client since last taken (see
    /// [`super::Mailboxes::post`]): an atomic load while there are none.
    pub fn take_mail(&self) -> Vec<Bytes> {
        // A plain load first: asked on every read from the client, almost always empty.
        if !self.activity.has_mail.load(Ordering::Relaxed)
            || !self.activity.has_mail.swap(false, Ordering::AcqRel)
        {
            return Vec::new();
        }
        std::mem::take(
            &mut *self
                .activity
                .mailbox
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Records the command-table index of the client's latest command (`cmd=`).
    pub fn ran(&self, command: usize) {
        self.activity
            .last_command
            .store(command + 1, Ordering::Relaxed);
    }

    /// What other clients, the reloader and the shutdown ask of this one: resolves to
    /// [`Signal::Kill`] once CLIENT KILL has picked it (also when that happened before the
    /// call), to [`Signal::Nudge`] after each [`Registry::wake_all`], and to
    /// [`Signal::Drain`] once after [`Registry::start_drain`] (not when the drain had started
    /// before the call). Polled again after any.
    pub fn signals(&self) -> Signals<'_> {
        Signals {
            activity: &self.activity,
            registry: &self.registry,
            nudges: self.activity.nudges.load(Ordering::Acquire),
            drain_seen: self.registry.is_draining(),
            seen: PostsSeen::none(&self.registry),
            registered: None,
        }
    }
}

/// See [`ClientGuard::signals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// CLIENT KILL: close the connection.
    Kill,
    /// A reload, or the client idles: read the configuration again, give back idle
    /// buffers.
    Nudge,
    /// The graceful drain started: finish what is in flight, then close.
    Drain,
}

/// See [`ClientGuard::signals`]. Polled on every turn of the session's loop, so a poll is
/// one atomic load of a count every session shares (see [`Registry::posted`]) and a waker
/// comparison while nothing was posted; the waker is registered again only when it changes
/// or was used.
pub struct Signals<'a> {
    activity: &'a Activity,
    registry: &'a Registry,
    nudges: u64,
    drain_seen: bool,
    /// When a look at the client's record last found nothing.
    seen: PostsSeen,
    registered: Option<Waker>,
}

impl Signals<'_> {
    fn ready(&mut self) -> Option<Signal> {
        let posted = self.seen.moved(self.registry)?;
        let signal = self.look();
        // Found one: the next poll looks again, for another posted with it.
        if signal.is_none() {
            self.seen.mark(posted);
        }
        signal
    }

    fn look(&mut self) -> Option<Signal> {
        if self.activity.killed.load(Ordering::Acquire) {
            return Some(Signal::Kill);
        }
        let nudges = self.activity.nudges.load(Ordering::Acquire);
        if nudges != self.nudges {
            self.nudges = nudges;
            // The nudge used up the registered waker.
            self.registered = None;
            return Some(Signal::Nudge);
        }
        if !self.drain_seen && self.registry.is_draining() {
            self.drain_seen = true;
            self.registered = None;
            return Some(Signal::Drain);
        }
        None
    }
}

impl Future for Signals<'_> {
    type Output = Signal;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Signal> {
        if let Some(signal) = self.ready() {
            return Poll::Ready(signal);
        }
        if !self
            .registered
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            self.activity.signal_waker.register(cx.waker());
            self.registered = Some(cx.waker().clone());
            // A signal between the first check and the registration woke nobody.
            if let Some(signal) = self.ready() {
                return Poll::Ready(signal);
            }
        }
        Poll::Pending
    }
}

/// The registry's count of posts (see [`Registry::posted`]) as a session last looked at its
/// entry: whether it needs to look again is one load of a count every session shares.
#[derive(Debug, Clone, Copy)]
pub struct PostsSeen(u64);

impl PostsSeen {
    /// Before the first look, which therefore looks.
    pub fn none(registry: &Registry) -> PostsSeen {
        PostsSeen(registry.posted().wrapping_sub(1))
    }

    /// The count now, where something was posted to a client since the look marked.
    pub fn moved(self, registry: &Registry) -> Option<u64> {
        let posted = registry.posted();
        (posted != self.0).then_some(posted)
    }

    /// A look at the entry was made at count `posted`.
    pub fn mark(&mut self, posted: u64) {
        self.0 = posted;
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}
