//! Whether the proxy wants new traffic, as `/readyz` reports it: the drain flag, and the
//! upstream of the configuration in force once the live proxy exists.
//!
//! The live proxy is reached through [`LiveUpstream`], so the snapshot that holds this
//! flag and the admin endpoint that reads it need not know each other's types.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use super::Topology;

/// What `/readyz` and `/metrics` read from the configuration in force.
pub trait LiveUpstream: Send + Sync {
    /// The upstream of the current snapshot.
    fn topology(&self) -> Arc<Topology>;
    /// Appends the current snapshot's per-command latency histograms (Prometheus text).
    fn render_command_metrics(&self, body: &mut String);
}

/// Whether the proxy wants new traffic. Starts ready; a drain flips it for good so load
/// balancers stop sending clients before the listener closes. Once the live proxy exists
/// it is attached here, so `/readyz` checks the upstream in force after a reload.
#[derive(Default)]
pub struct Readiness {
    draining: AtomicBool,
    /// Weak: the live proxy's snapshots hold this readiness, which must not keep it alive.
    live: OnceLock<Weak<dyn LiveUpstream>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("draining", &self.is_draining())
            .field("attached", &self.live.get().is_some())
            .finish()
    }
}

impl Readiness {
    /// A readiness flag that is not draining.
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// Marks the proxy as draining: `/readyz` answers 503 from now on.
    pub fn start_drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether a drain has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Makes `/readyz` follow `live`'s current upstream (the first call wins).
    pub fn attach<L: LiveUpstream + 'static>(&self, live: &Arc<L>) {
        let live: Arc<dyn LiveUpstream> = live.clone();
        let weak = Arc::downgrade(&live);
        let _ = self.live.set(weak);
    }

    /// The configuration in force, once attached and while it lives.
    pub fn live(&self) -> Option<Arc<dyn LiveUpstream>> {
        self.live.get()?.upgrade()
    }
}
