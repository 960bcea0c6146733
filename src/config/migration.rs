//! The `migration:` section: a source deployment the proxy moves its keyspace from while
//! clients keep running (live migration, see `live`). Without `source` the section does
//! nothing.

use serde::Deserialize;

use super::{BackendTlsConfig, ConfigError, Secret};

/// A live migration from `source` to the proxy's own upstream. Its `Debug` never shows
/// the password.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MigrationConfig {
    /// Where the keyspace is now: `redis://[user:pass@]host:port` (`rediss://` for TLS),
    /// one node or any node of a cluster. `None`: no migration.
    pub source: Option<String>,
    /// ACL user on the source, when the URL names none.
    pub username: Option<String>,
    /// Password on the source, when the URL names none; never logged.
    pub password: Option<Secret>,
    /// TLS settings for the source (CA, client certificate); used when `source` is
    /// `rediss://` or `tls.enabled` is set.
    pub tls: BackendTlsConfig,
    /// Most keys the background walker moves per second (0: no limit). Moves a client's
    /// command needs are never throttled.
    pub max_keys_per_second: u64,
    /// Keys the walker reads per `SCAN` page and moves at once.
    pub batch: usize,
    /// Stop the background walker (clients' commands still move what they touch). A
    /// reload changes it: pause and resume.
    pub paused: bool,
    /// How long a claim on a source key lasts, in milliseconds: what a command waits at
    /// most behind a proxy that died in the middle of that key's move.
    pub lease_ms: u64,
}

impl std::fmt::Debug for MigrationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: only what follows its `@` is shown.
        let source = self
            .source
            .as_deref()
            .map(|url| url.rsplit_once('@').map_or(url, |(_, addr)| addr));
        f.debug_struct("MigrationConfig")
            .field("source", &source)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .field("max_keys_per_second", &self.max_keys_per_second)
            .field("batch", &self.batch)
            .field("paused", &self.paused)
            .field("lease_ms", &self.lease_ms)
            .finish_non_exhaustive()
    }
}

impl Default for MigrationConfig {
    fn default() -> Self {
        MigrationConfig {
            source: None,
            username: None,
            password: None,
            tls: BackendTlsConfig::default(),
            max_keys_per_second: 50_000,
            batch: 256,
            paused: false,
            lease_ms: 2_000,
        }
    }
}

impl MigrationConfig {
    /// Whether a live migration is configured.
    pub fn is_set(&self) -> bool {
        self.source.is_some()
    }

    /// The walker's settings a reload may change (the rest needs a restart).
    pub fn walker(&self) -> (u64, bool) {
        (self.max_keys_per_second, self.paused)
    }

    /// Checks the section: a parsable source and sane numbers.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(_) = &self.source else {
            return Ok(());
        };
        self.source_url()?;
        if self.batch == 0 {
            return Err(ConfigError::Invalid(
                "migration.batch must be at least 1".into(),
            ));
        }
        if self.lease_ms < 100 {
            return Err(ConfigError::Invalid(
                "migration.lease_ms must be at least 100".into(),
            ));
        }
        self.tls.validate()
    }

    /// The source as the migration tools take it, with the section's credentials and TLS
    /// settings filled in where the URL names none. `None` when no source is set.
    pub fn source_url(&self) -> Result<Option<super::RedisUrl>, ConfigError> {
        let Some(text) = &self.source else {
            return Ok(None);
        };
        let password = self.password.as_ref().map(|p| p.0.clone());
        let mut url = super::RedisUrl::parse(text, self.username.clone(), password)
            .map_err(|e| ConfigError::Invalid(format!("migration.source: {e}")))?;
        if url.tls.is_some() || self.tls.enabled {
            let mut tls = self.tls.clone();
            tls.enabled = true;
            url.tls = Some(tls);
        }
        Ok(Some(url))
    }
}
