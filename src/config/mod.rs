//! Configuration: a YAML file, overridden by command-line flags and `SLOTBRIDGE_*`
//! environment variables, merged and validated in one place. Any option can be set
//! without the file: `--set backend.read_timeout_ms=300`, or the variable
//! `SLOTBRIDGE_BACKEND__READ_TIMEOUT_MS=300` (`__` between levels), see [`Override`].
//!
//! Every struct is `#[serde(default, deny_unknown_fields)]`, so a file only names what it
//! changes and a misspelt field is an error that names the file, line and field.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod backend;
mod cross_slot;
mod error;
mod limits;
mod migration;
mod overrides;
mod redis_url;
mod sentinel;
mod tls;

pub use crate::auth::{ScriptTrust, Secret, UserConfig};
pub use crate::policy::CommandsConfig;
pub use backend::{BackendConfig, RetryConfig, TopologyConfig};
pub use cross_slot::{CrossSlotConfig, Emulation};
pub use error::{ConfigError, OverrideError};
pub use limits::{LimitsConfig, SoftOutputLimit};
pub use migration::MigrationConfig;
pub use overrides::{Override, TOP_LEVEL_FIELDS};
pub use redis_url::{BadRedisUrl, RedisUrl};
pub use sentinel::SentinelConfig;
pub use tls::{AuthClients, BackendTlsConfig, ClientCertUser, TlsConfig};

/// The whole proxy configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Client-facing address, `host:port`; empty: no plain listener (`tls.listen` only).
    pub listen: String,
    /// The TLS listener for clients (see [`TlsConfig`]).
    pub tls: TlsConfig,
    /// Admin HTTP address (metrics, health), `host:port`.
    pub admin_listen: String,
    /// Admin endpoint options.
    pub admin: AdminConfig,
    /// Cluster seed nodes, `host:port` each. Exactly one of `cluster` and `standalone`.
    pub cluster: Vec<String>,
    /// A single non-cluster upstream (one node or an HA virtual IP), `host:port`.
    pub standalone: Option<String>,
    /// A master found through Redis Sentinel (see [`SentinelConfig`]).
    pub sentinel: SentinelConfig,
    /// Credentials and timeouts for connections to the upstream.
    pub backend: BackendConfig,
    /// Announced node address -> reachable address, for clusters behind NAT or Docker.
    pub address_map: HashMap<String, String>,
    /// Redirect and retry policy.
    pub retry: RetryConfig,
    /// Slot-map refresh policy.
    pub topology: TopologyConfig,
    /// Client protocol limits.
    pub limits: LimitsConfig,
    /// Pub/Sub relay settings.
    pub pubsub: PubSubConfig,
    /// Worker threads of the runtime (0: one per core; 1: a current-thread runtime). Default 1: on a 2-core machine
    /// shared with the nodes and the clients, a second worker served no more requests and
    /// spent more CPU per request (bench/RESULTS.md).
    pub threads: usize,
    /// Log output: `text` or `json`.
    pub log_format: LogFormat,
    /// Log filter, as `RUST_LOG` (e.g. `info`, `slotbridge=debug`).
    pub log_level: String,
    /// What MULTI/EXEC does when its keys span hash slots.
    pub cross_slot_transactions: CrossSlotTransactions,
    /// Whether cross-slot reads and stores are computed in the proxy, and their limits.
    pub cross_slot: CrossSlotConfig,
    /// Legacy key layout translation (off unless `layout.file` is set).
    pub layout: LayoutConfig,
    /// A live migration from another deployment (see `live`).
    pub migration: MigrationConfig,
    /// Password of the proxy's `default` user (clients send `AUTH password`); never logged.
    pub requirepass: Option<Secret>,
    /// Refuse a non-loopback `listen` while no authentication is configured (as Redis).
    pub protected_mode: bool,
    /// Proxy-side ACL users (see [`UserConfig`]).
    pub users: Vec<UserConfig>,
    /// The users file (Redis's `aclfile`): read at start-up and reload after `users`,
    /// its users replacing those of the same name; written by ACL SAVE, read by ACL LOAD.
    pub aclfile: Option<std::path::PathBuf>,
    /// Commands the proxy refuses or allows on top of its default policy.
    pub commands: CommandsConfig,
    /// Most clients connected at once; the next one gets an error and is closed.
    pub maxclients: usize,
    /// How many databases `SELECT` offers (Redis's `databases`, default 16): database
    /// `n > 0` is the key prefix `__db<n>:` (see `rewrite::database`); 1 turns `SELECT n`
    /// for `n > 0` off and leaves database 0's listings exactly as the cluster's.
    pub databases: u32,
    /// Close a client idle this many seconds (0: never, as Redis's default).
    pub timeout: u64,
    /// Disconnect a client whose unsent replies exceed this many bytes (0: no limit), as
    /// the hard limit of Redis's `client-output-buffer-limit normal`.
    pub client_output_buffer_limit_bytes: usize,
    /// The soft limit of Redis's `client-output-buffer-limit normal`: a client whose unsent
    /// replies stay over `bytes` for `seconds` is disconnected (0 bytes: off, Redis's default).
    pub client_output_buffer_soft_limit: SoftOutputLimit,
    /// What all clients together may owe (replies held for them plus the estimate of those in
    /// flight) before the proxy stops reading from those that owe more than a little
    /// (0: no limit). Keeps a crowd of clients that do not read from filling the proxy, or
    /// the masters' output buffers, with replies.
    pub max_buffered_bytes: usize,
    /// TCP keepalive time on client sockets, seconds (0: off; Redis's default 300).
    pub tcp_keepalive: u64,
    /// The listen backlog of the client listeners (Redis's `tcp-backlog`; the kernel caps it
    /// at `net.core.somaxconn`). Higher than Redis's 511 by default: a proxy fronts a fleet,
    /// and connections past the backlog wait for a SYN-ACK retransmission (1 s, then 3 s).
    pub tcp_backlog: u32,
    /// How long a graceful shutdown waits for in-flight commands, milliseconds.
    pub shutdown_timeout_ms: u64,
    /// Written with the proxy's pid at start-up, for `slotbridge reload`.
    pub pidfile: Option<PathBuf>,
    /// CLIENT TRACKING ON emulated (`emulate`, the default: see `client::tracking`) or
    /// refused with a reason (`refuse`).
    pub client_tracking: Emulation,
    /// Most keys the table of tracking clients' reads holds, past which keys are dropped
    /// with an invalidation (Redis's `tracking-table-max-keys`; 0: no bound).
    pub tracking_table_max_keys: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:6380".into(),
            tls: TlsConfig::default(),
            admin_listen: "127.0.0.1:9121".into(),
            admin: AdminConfig::default(),
            cluster: Vec::new(),
            standalone: None,
            sentinel: SentinelConfig::default(),
            backend: BackendConfig::default(),
            address_map: HashMap::new(),
            retry: RetryConfig::default(),
            topology: TopologyConfig::default(),
            limits: LimitsConfig::default(),
            pubsub: PubSubConfig::default(),
            threads: 1,
            log_format: LogFormat::Text,
            log_level: "info".into(),
            cross_slot_transactions: CrossSlotTransactions::default(),
            cross_slot: CrossSlotConfig::default(),
            layout: LayoutConfig::default(),
            migration: MigrationConfig::default(),
            requirepass: None,
            protected_mode: true,
            users: Vec::new(),
            aclfile: None,
            commands: CommandsConfig::default(),
            maxclients: 10_000,
            databases: crate::rewrite::database::DEFAULT_DATABASES,
            timeout: 0,
            client_output_buffer_limit_bytes: 64 * 1024 * 1024,
            client_output_buffer_soft_limit: SoftOutputLimit::default(),
            max_buffered_bytes: 64 * 1024 * 1024,
            tcp_keepalive: 300,
            tcp_backlog: 4096,
            shutdown_timeout_ms: 10_000,
            pidfile: None,
            client_tracking: Emulation::Emulate,
            // A tenth of Redis's default: the proxy's table sits beside no dataset, and
            // 100,000 keys cost about 10 MB.
            tracking_table_max_keys: 100_000,
        }
    }
}

/// The legacy -> cluster key layout translation (see `rewrite` and `dispatch::layout`).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LayoutConfig {
    /// The rule file; no file, no translation.
    pub file: Option<PathBuf>,
    /// The key prefixes the rules apply to; empty: the rule file's own `prefixes:`.
    pub prefixes: Vec<String>,
    /// Refuse commands on a key under a prefix that matches no rule (else pass it through).
    pub strict: bool,
    /// Start even when the keyspace holds legacy keys under a prefix and no layout marker.
    pub allow_legacy_data: bool,
}

impl LayoutConfig {
    /// Loads the rule file for the configured prefixes; `None` when no file is set.
    pub fn load(&self) -> Result<Option<crate::rewrite::Layout>, ConfigError> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let layout = crate::rewrite::Layout::load(file, &self.prefixes)
            .map_err(|e| ConfigError::Invalid(format!("layout: {e}")))?;
        if layout.prefixes().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "layout: {} names no prefix; give layout.prefixes or --prefix",
                file.display()
            )));
        }
        Ok(Some(layout))
    }
}

/// Admin endpoint options.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Record and export Prometheus metrics. Off only to measure what recording costs.
    pub metrics: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { metrics: true }
    }
}

/// Pub/Sub relay settings.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PubSubConfig {
    /// Most bytes of messages waiting to be written to one subscribed client; a client
    /// that falls further behind is disconnected, as Redis's
    /// `client-output-buffer-limit pubsub 32mb` does.
    pub max_buffer_bytes: usize,
}

impl Default for PubSubConfig {
    fn default() -> Self {
        PubSubConfig {
            max_buffer_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// What a transaction whose keys span hash slots does.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CrossSlotTransactions {
    /// As Redis Cluster: the command that leaves the slot gets `-CROSSSLOT` at queue time
    /// and EXEC answers `-EXECABORT`.
    #[default]
    Refuse,
    /// Each slot's commands run as a MULTI/EXEC of their own (atomic per slot, not
    /// across slots) and the replies are put back in command order. Not with WATCH.
    Split,
}

/// Where the proxy sends commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A Redis Cluster, reached through these seed nodes.
    Cluster(Vec<String>),
    /// One standalone Redis server at this address.
    Standalone(String),
    /// The master a Sentinel group names, followed through its failovers.
    Sentinel {
        /// The Sentinels, `host:port` each.
        addresses: Vec<String>,
        /// The name they monitor the master under.
        master_name: String,
    },
}

impl Config {
    /// Reads a YAML file; errors name the file, and serde's message names line and field.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        Config::from_file_with(path, &[])
    }

    /// Reads a YAML file and sets `overrides` over it (later ones win).
    pub fn from_file_with(path: &Path, overrides: &[Override]) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        // The file alone first: typed parsing names the file's line, which the merged
        // tree (parsed again below) no longer can.
        Config::from_yaml(&text).map_err(|error| match error {
            ConfigError::Yaml(source) => ConfigError::Parse {
                path: path.into(),
                source,
            },
            other => other,
        })?;
        Config::from_yaml_with(&text, overrides)
    }

    /// Parses YAML text (an empty document is the default config).
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        Ok(serde_yaml_ng::from_str(text)?)
    }

    /// Parses YAML text and sets `overrides` over it; an error names the override.
    pub fn from_yaml_with(text: &str, overrides: &[Override]) -> Result<Config, ConfigError> {
        let mut tree: serde_yaml_ng::Value = if text.trim().is_empty() {
            serde_yaml_ng::Value::Mapping(Default::default())
        } else {
            serde_yaml_ng::from_str(text)?
        };
        for over in overrides {
            over.apply(&mut tree)
                .and_then(|()| Ok(serde_yaml_ng::from_value::<Config>(tree.clone()).map(drop)?))
                .map_err(|reason| ConfigError::Override {
                    origin: over.source.clone(),
                    reason,
                })?;
        }
        Ok(serde_yaml_ng::from_value(tree)?)
    }

    /// The upstream, once validated.
    pub fn upstream(&self) -> Result<Upstream, ConfigError> {
        let sentinel = &self.sentinel;
        let given = usize::from(!self.cluster.is_empty())
            + usize::from(self.standalone.is_some())
            + usize::from(sentinel.is_set());
        if given > 1 {
            return Err(ConfigError::Invalid(
                "set one upstream: cluster seeds, a standalone upstream or a Sentinel group, \
                 not both"
                    .into(),
            ));
        }
        if let Some(addr) = &self.standalone {
            return Ok(Upstream::Standalone(addr.clone()));
        }
        if sentinel.is_set() {
            return Ok(Upstream::Sentinel {
                addresses: sentinel.addresses.clone(),
                master_name: sentinel.master_name.clone(),
            });
        }
        if self.cluster.is_empty() {
            return Err(ConfigError::Invalid(
                "no upstream: give --cluster HOST:PORT[,...], --standalone HOST:PORT or \
                 --sentinel HOST:PORT[,...] --master-name NAME"
                    .into(),
            ));
        }
        Ok(Upstream::Cluster(self.cluster.clone()))
    }

    /// Checks everything that can be checked without network access.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.sentinel.validate(self.backend.tls.enabled)?;
        self.upstream()?;
        // An empty `listen` turns the plain listener off when the TLS one serves instead.
        if !(self.listen.is_empty() && self.tls.is_enabled()) {
            check_host_port("listen", &self.listen)?;
        }
        check_host_port("admin_listen", &self.admin_listen)?;
        self.tls.validate()?;
        self.backend.tls.validate()?;
        for seed in self.cluster.iter().chain(self.standalone.iter()) {
            check_host_port("upstream", seed)?;
        }
        if self.retry.attempts == 0 {
            return Err(ConfigError::Invalid(
                "retry.attempts must be at least 1".into(),
            ));
        }
        if self.limits.max_pipeline == 0 {
            return Err(ConfigError::Invalid(
                "limits.max_pipeline must be at least 1".into(),
            ));
        }
        if self.layout.file.is_none() && !self.layout.prefixes.is_empty() {
            return Err(ConfigError::Invalid(
                "layout.prefixes is set but layout.file is not".into(),
            ));
        }
        self.layout.load()?;
        self.migration.validate()?;
        if self.pubsub.max_buffer_bytes == 0 {
            return Err(ConfigError::Invalid(
                "pubsub.max_buffer_bytes must be at least 1".into(),
            ));
        }
        self.validate_access()
    }

    /// Users, command policy, client limits and protected mode.
    fn validate_access(&self) -> Result<(), ConfigError> {
        crate::auth::Auth::new(&self.users, self.requirepass.as_ref())
            .map_err(ConfigError::Invalid)?;
        crate::policy::Policy::from_config(&self.commands).map_err(ConfigError::Invalid)?;
        if self.databases == 0 {
            return Err(ConfigError::Invalid("databases must be at least 1".into()));
        }
        if self.maxclients == 0 {
            return Err(ConfigError::Invalid("maxclients must be at least 1".into()));
        }
        let open = self.requirepass.is_none() && self.users.is_empty();
        let listens = std::iter::once(&self.listen).chain(self.tls.listen.as_ref());
        if let Some(exposed) = listens
            .filter(|listen| !listen.is_empty() && !is_loopback(listen))
            .find(|_| open && self.protected_mode)
        {
            return Err(ConfigError::Invalid(format!(
                "protected_mode: refusing to listen on {exposed} without authentication; set \
                 requirepass (or users), listen on a loopback address, or set \
                 protected_mode: false"
            )));
        }
        Ok(())
    }

    /// Connect timeout for backend connections.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.backend.connect_timeout_ms)
    }

    /// Read timeout for shared backend connections, if any.
    pub fn read_timeout(&self) -> Option<Duration> {
        (self.backend.read_timeout_ms > 0)
            .then(|| Duration::from_millis(self.backend.read_timeout_ms))
    }
}

/// Whether a `host:port` address only accepts local connections.
fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(crate) fn check_host_port(field: &str, addr: &str) -> Result<(), ConfigError> {
    let valid = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if valid {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "{field}: '{addr}' is not host:port"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_reach_debug_output() {
        let config = Config {
            requirepass: Some(Secret("hunter2".into())),
            ..Config::default()
        };
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn debug_never_shows_the_backend_password() {
        let config = Config::from_yaml(
            "backend:\n  username: app\n  password: s3cr3t-Pa55\nadmin:\n  metrics: false\n",
        )
        .unwrap();
        assert!(!config.admin.metrics);
        for text in [format!("{config:?}"), format!("{config:#?}")] {
            assert!(!text.contains("s3cr3t-Pa55"), "{text}");
            assert!(
                text.contains("<redacted>") && text.contains("app"),
                "{text}"
            );
        }
    }

    #[test]
    fn empty_file_is_default() {
        assert_eq!(Config::from_yaml("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_field_names_field_and_line() {
        let err = Config::from_yaml("listen: 127.0.0.1:1\nlisen: x\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lisen") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn upstream_must_be_exactly_one() {
        let mut config = Config::default();
        assert!(config.validate().is_err());
        config.cluster = vec!["127.0.0.1:7001".into()];
        assert!(config.validate().is_ok());
        config.standalone = Some("127.0.0.1:6379".into());
        assert!(config.validate().is_err());
    }

    #[test]
    fn cross_slot_transactions_defaults_to_refuse_and_reads_split() {
        assert_eq!(
            Config::default().cross_slot_transactions,
            CrossSlotTransactions::Refuse
        );
        let config = Config::from_yaml("cross_slot_transactions: split\n").unwrap();
        assert_eq!(config.cross_slot_transactions, CrossSlotTransactions::Split);
        assert!(Config::from_yaml("cross_slot_transactions: maybe\n").is_err());
    }

    #[test]
    fn default_backoff_spends_about_two_and_a_half_seconds() {
        let retry = RetryConfig::default();
        let total: Duration = (0..retry.attempts).map(|a| retry.backoff(a)).sum();
        assert!(total >= Duration::from_millis(2000) && total <= Duration::from_millis(3000));
    }

    #[test]
    fn every_shipped_proxy_config_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("slotbridge") && name.ends_with(".yaml") {
                let config = Config::from_file(&path).unwrap();
                config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}
