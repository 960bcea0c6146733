//! Pipelined connections to Redis nodes: the proxy's hot path to the backend.
//!
//! A [`NodeConn`] is one connection (TCP, or TLS over TCP) to one node, shared by every client that talks to
//! that node. Requests are raw RESP bytes; replies come back as the raw bytes of one frame,
//! split off the read buffer without copying. Invariants: replies are matched to requests
//! strictly in the order the requests were written; a request that was never written fails
//! with [`BackendError::NotSent`] (safe to retry), one that was written and then lost its
//! connection fails with [`BackendError::Lost`] (never retried); handshake replies (`AUTH`,
//! `HELLO`, `ASKING`) and RESP3 pushes never reach callers.

mod conn;
mod fifo;
mod handshake;
mod outbox;
mod reader;
mod seqs;
mod sink;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub use conn::NodeConn;
pub use handshake::connect;
pub use sink::{Batch, BatchBuilder, Batches, Delivery, ReplySink};
pub use stream::{NodeReader, NodeStream, NodeWriter};

use crate::protocol::{Limits, Proto};

/// How a [`NodeConn`] connects and authenticates.
#[derive(Clone)]
pub struct ConnOptions {
    /// RESP version: for RESP3 the connection sends `HELLO 3` right after connecting.
    pub proto: Proto,
    /// ACL user for `AUTH user password`; `None` or empty sends the legacy `AUTH password`.
    pub username: Option<String>,
    /// Password for `AUTH`; `None` skips authentication. Never logged.
    pub password: Option<String>,
    /// Longest wait for TCP connect plus handshake.
    pub connect_timeout: Duration,
    /// Limits applied to reply frames read from the node.
    pub limits: Limits,
    /// Whether a new connection replaces a lost one. Without, requests after the first
    /// connection ended fail as `NotSent`: for a connection whose server-side state (a
    /// WATCH) must not silently start over.
    pub reconnect: bool,
    /// Requests written right after the handshake, before any caller's, on every new
    /// connection; their replies are read and dropped, errors included.
    pub prelude: Option<Prelude>,
    /// With requests outstanding, how long the node may send nothing before the connection
    /// is closed and they fail as `Lost`; `None` waits as long as TCP does. Only for
    /// connections that never carry a blocking command.
    pub read_timeout: Option<Duration>,
    /// TLS to the node (`backend.tls`, `rediss://`); `None`: plain TCP.
    pub tls: Option<Arc<crate::tls::NodeTls>>,
}

/// Makes the requests of [`ConnOptions::prelude`] when a connection opens (e.g. `SCRIPT
/// LOAD` of the scripts clients use, so a restarted node has them before it gets any
/// request).
pub type Prelude = Arc<dyn Fn() -> Vec<Bytes> + Send + Sync>;

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions {
            proto: Proto::Resp2,
            username: None,
            password: None,
            connect_timeout: Duration::from_secs(1),
            limits: Limits::default(),
            reconnect: true,
            prelude: None,
            read_timeout: None,
            tls: None,
        }
    }
}

impl std::fmt::Debug for ConnOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnOptions")
            .field("proto", &self.proto)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("limits", &self.limits)
            .field("reconnect", &self.reconnect)
            .field("prelude", &self.prelude.is_some())
            .field("read_timeout", &self.read_timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Why a call to a node failed, and whether retrying it is safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The request was never written to the node: safe to retry, here or elsewhere.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request was written but the connection failed before its reply arrived: it may
    /// or may not have run, so it must not be retried.
    #[error("reply lost: {0}")]
    Lost(String),
}
