//! How the proxy reaches its upstream: the node connections' credentials, timeouts and
//! TLS, the redirect and retry policy, and when the slot map is re-read.

use std::time::Duration;

use serde::Deserialize;

use super::BackendTlsConfig;

/// How the proxy talks to the upstream nodes. Its `Debug` never shows the password.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// ACL user; empty means legacy `AUTH password`. Env: `REDIS_USERNAME`.
    pub username: Option<String>,
    /// Password; never logged. Env: `REDIS_PASSWORD`.
    pub password: Option<String>,
    /// TCP connect timeout, milliseconds.
    pub connect_timeout_ms: u64,
    /// How long a shared node connection with replies due may read nothing before it is
    /// closed (its requests fail with an "outcome unknown" error), milliseconds; 0: never.
    /// Connections of blocking commands, transactions and subscriptions are exempt.
    pub read_timeout_ms: u64,
    /// TLS to the nodes (see [`BackendTlsConfig`]).
    pub tls: BackendTlsConfig,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            username: None,
            password: None,
            connect_timeout_ms: 1000,
            read_timeout_ms: 0,
            tls: BackendTlsConfig::default(),
        }
    }
}

impl std::fmt::Debug for BackendConfig {
    // By hand, so the password never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendConfig")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("read_timeout_ms", &self.read_timeout_ms)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Redirects and retries (see DESIGN.md, "Redirects and retries").
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts for TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY and unreachable nodes.
    pub attempts: u32,
    /// First backoff, milliseconds; doubles up to `max_backoff_ms`.
    pub base_backoff_ms: u64,
    /// Backoff cap, milliseconds. Defaults give 10 attempts in about 2.5 s.
    pub max_backoff_ms: u64,
    /// MOVED/ASK hops one command may follow.
    pub max_redirects: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 10,
            base_backoff_ms: 10,
            max_backoff_ms: 500,
            max_redirects: 5,
        }
    }
}

impl RetryConfig {
    /// The pause before retry number `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ms = self.base_backoff_ms.saturating_mul(1u64 << attempt.min(20));
        Duration::from_millis(ms.min(self.max_backoff_ms))
    }
}

/// When the slot map is re-read.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TopologyConfig {
    /// Periodic refresh, milliseconds.
    pub refresh_interval_ms: u64,
    /// Least time between two refreshes, so a reshard's MOVED burst can't cause a storm.
    pub min_refresh_interval_ms: u64,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            refresh_interval_ms: 10_000,
            min_refresh_interval_ms: 200,
        }
    }
}
