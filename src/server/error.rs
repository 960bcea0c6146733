//! Why the proxy did not start: each variant names what the operator must fix (the
//! configuration, a certificate, the upstream, an address already in use).

use crate::config::ConfigError;
use crate::tls::TlsError;
use crate::topology::TopologyError;

/// Why start-up failed; nothing serves after one.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration (users, command policy, layout rules) does not hold.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A certificate or key of the TLS listener could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The upstream could not be set up.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A client listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address configured.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The admin listener could not be bound.
    #[error("cannot listen on {addr} (admin): {source}")]
    AdminListen {
        /// The address configured.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The live migration's source or target could not be reached, or refused its scripts.
    #[error("live migration: {0}")]
    Migration(#[from] crate::live::MoveError),
    /// [`crate::server::start`] needs the plain listener.
    #[error("no plain listener: listen is empty")]
    NoPlainListener,
    /// The users (`users`, `requirepass`, `aclfile`) could not be loaded.
    #[error("{0}")]
    Users(String),
    /// The layout's start-up checks refused the keyspace (marker, legacy data).
    #[error("{0}")]
    LayoutRefused(String),
}
