//! The concrete layer: what the proxy does with node connections on behalf of a request
//! once the dispatcher decided where it goes.
//!
//! - [`forward`]: one command to the master of its slot, following MOVED/ASK and retrying
//!   the answers that arrive before anything ran; never resending a command whose reply
//!   was lost.
//! - [`pinned`]: commands on a connection of their own: WATCH and the MULTI/EXEC block
//!   after it, blocking commands ([`blocked`]: where one waits), clients' scripts.
//! - [`block`]: a transaction's queued commands as one block per slot, and EXEC's reply
//!   put back in command order; [`watch_check`]: the check of a WATCH across slots
//!   before such a split block runs.
//! - [`batch`]: a client's direct requests staged per master and sent one batch per
//!   master, their replies delivered by sequence number.
//! - [`subscription`]: a client's subscription connections, which read what nodes push;
//!   [`pushes`] reads those frames.
//! - [`invalidations`]: the proxy's own tracking connections, one per master, which
//!   report every key modified there (client-side caching, see `client::tracking`).
//! - [`warm`]: connections kept ready for blocking commands, so one is written as soon as
//!   it is read, before what other clients send after it.
//!
//! [`Upstream`] is what every request of this layer runs with: the topology and the
//! retry settings, built once per snapshot. The layer knows nothing of the dispatcher
//! above it: what it needs from there (a key layout's reply rewrite, see
//! [`block::BlockLayout`]) comes in as an argument.
//!
//! `backend` stays the endpoint (one node connection, pipelined); `topology` owns the
//! shared connections and the slot map this layer routes with. The client session reaches
//! nodes only through this layer.

pub mod batch;
pub mod block;
pub mod blocked;
pub mod forward;
pub mod invalidations;
pub mod pinned;
pub mod pushes;
pub mod subscription;
pub mod warm;
pub mod watch_check;

use std::sync::Arc;

use crate::config::RetryConfig;
use crate::topology::Topology;
use warm::WarmConns;

pub use blocked::{take_unblock, BlockedOn, BLOCKED_ON};
pub use forward::{is_final, Target, PARTS_INLINE};
pub use pinned::{watch_failed, WatchPin};

/// The concrete layer of one snapshot: the node connections requests go on and the retry
/// and redirect limits they follow.
pub struct Upstream {
    /// The slot map and node connections.
    pub topology: Arc<Topology>,
    /// How many retries and redirects one request may spend, and the backoff between.
    retry: RetryConfig,
    /// Connections ready for blocking commands.
    warm: Arc<WarmConns>,
}

impl Upstream {
    /// The upstream over `topology`, retrying as `retry` says.
    pub fn new(topology: Arc<Topology>, retry: RetryConfig) -> Upstream {
        let warm = WarmConns::new(topology.clone());
        Upstream {
            topology,
            retry,
            warm,
        }
    }

    /// Waits until every master's ready connections for blocking commands are open, for
    /// at most [`warm::WARM_UP_WITHIN`]: a snapshot (at start-up, on reload) that serves
    /// before they are would open one on demand for its first blocking commands, which
    /// other clients' later commands can overtake.
    pub async fn warm_up(&self) {
        self.warm.until_ready(warm::WARM_UP_WITHIN).await;
    }
}
