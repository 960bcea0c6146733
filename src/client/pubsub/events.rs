//! What happens to a subscribed client between its requests: messages to relay (keyspace
//! ones translated and filtered), subscription connections lost or moved, masters added or
//! removed (each starting a re-subscription), and the message buffer overflowing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::stream::StreamExt;
use tokio::sync::watch;

use crate::dispatch::PUBSUB_HOME_SLOT;
use crate::upstream::subscription::{Event, Role, SinkState};

use super::restore::Restore;
use super::{lock, Linked, Relay};

impl Linked {
    /// The next thing for the session: a message, a reason to close, or nothing. Never
    /// returns while there is nothing to do.
    pub(super) async fn next_event(&mut self) -> Relay {
        if self.sink_state.overflowed.load(Ordering::Relaxed) {
            return Relay::Close;
        }
        let overflowed = overflowed(self.sink_state.clone());
        tokio::select! {
            Some(result) = self.background.next(), if !self.background.is_empty() => {
                match result {
                    Ok(()) => Relay::Idle,
                    Err(reason) => {
                        tracing::warn!(error = %reason, "closing a subscriber whose subscriptions could not be restored");
                        Relay::Close
                    }
                }
            }
            Some(event) = self.events.recv() => match event {
                Event::Push(frame, role) => {
                    self.sink_state.buffered.fetch_sub(frame.len(), Ordering::Relaxed);
                    if role != Role::Keyspace {
                        return Relay::Push(frame);
                    }
                    let inner = lock(&self.inner);
                    let layout = inner.proxy.layout.clone();
                    let databases = inner.proxy.keyspace_databases();
                    match inner.keyspace.deliver(layout.as_deref(), databases, frame) {
                        Some(frames) => Relay::Push(frames),
                        None => Relay::Idle,
                    }
                }
                Event::ShardLost { channel } => {
                    let mut inner = lock(&self.inner);
                    if inner.shard.contains_key(&channel) && !inner.restoring_shard {
                        inner.proxy.topology.request_refresh();
                        Restore::Shard.start(&mut inner, &self.inner, &mut self.background);
                    }
                    Relay::Idle
                }
                Event::Down { link, reason } => {
                    tracing::debug!(error = %reason, "subscription connection down");
                    self.on_link_down(link);
                    Relay::Idle
                }
            },
            () = masters_changed(&mut self.masters) => {
                let mut inner = lock(&self.inner);
                if !inner.keyspace.is_empty() {
                    Restore::Keyspace.start(&mut inner, &self.inner, &mut self.background);
                }
                // Slot 0 moved: channels and patterns follow it to its new master, where
                // PUBLISH and PUBSUB now go (dropping the old link unsubscribes there).
                let home = inner
                    .proxy
                    .topology
                    .routing()
                    .map
                    .master_addr(PUBSUB_HOME_SLOT)
                    .cloned();
                let moved = inner
                    .regular
                    .as_ref()
                    .is_some_and(|link| home.is_some_and(|home| home != link.addr));
                if moved {
                    inner.regular = None;
                    if !inner.channels.is_empty() || !inner.patterns.is_empty() {
                        Restore::Regular.start(&mut inner, &self.inner, &mut self.background);
                    }
                }
                Relay::Idle
            }
            () = overflowed => Relay::Close,
        }
    }

    fn on_link_down(&mut self, id: u64) {
        let mut inner = lock(&self.inner);
        inner.proxy.topology.request_refresh();
        if inner.regular.as_ref().is_some_and(|l| l.id == id) {
            inner.regular = None;
            if !inner.channels.is_empty() || !inner.patterns.is_empty() {
                Restore::Regular.start(&mut inner, &self.inner, &mut self.background);
            }
        }
        let before = inner.keyspace_links.len();
        inner.keyspace_links.retain(|_, l| l.id != id);
        if inner.keyspace_links.len() != before && !inner.keyspace.is_empty() {
            Restore::Keyspace.start(&mut inner, &self.inner, &mut self.background);
        }
        let before = inner.shard_links.len();
        inner.shard_links.retain(|_, l| l.id != id);
        if inner.shard_links.len() != before && !inner.shard.is_empty() {
            Restore::Shard.start(&mut inner, &self.inner, &mut self.background);
        }
    }
}

/// Resolves once the client exceeded its message buffer limit.
pub(super) async fn overflowed(state: Arc<SinkState>) {
    loop {
        if state.overflowed.load(Ordering::Relaxed) {
            return;
        }
        state.wake.notified().await;
    }
}

/// Resolves when the watched master set changes; never without a watch or a topology.
async fn masters_changed(masters: &mut Option<watch::Receiver<()>>) {
    if let Some(masters) = masters {
        if masters.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}
