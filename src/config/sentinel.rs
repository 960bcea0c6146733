//! The `sentinel:` section: a Redis Sentinel group that names the upstream master, and the
//! credentials the proxy uses on the Sentinels (separate from `backend`'s, which it uses on
//! the master).

use serde::Deserialize;

use super::{check_host_port, ConfigError, Secret};

/// A Sentinel-managed upstream: the Sentinels to ask and the master name they monitor.
/// Its `Debug` never shows the password.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SentinelConfig {
    /// The Sentinels, `host:port` each; empty: the upstream is not Sentinel-managed.
    pub addresses: Vec<String>,
    /// The name the Sentinels monitor the master under (`sentinel monitor NAME ...`).
    pub master_name: String,
    /// ACL user on the Sentinels (their `sentinel sentinel-user`); empty: legacy `AUTH password`.
    pub username: Option<String>,
    /// Password on the Sentinels (their `requirepass`); never logged.
    pub password: Option<Secret>,
    /// Reach the Sentinels over TLS, with `backend.tls`'s settings.
    pub tls: bool,
}

impl SentinelConfig {
    /// Whether a Sentinel group is configured.
    pub fn is_set(&self) -> bool {
        !self.addresses.is_empty()
    }

    /// Checks the section: a master name with the addresses, each `host:port`, and TLS to
    /// the Sentinels only with backend TLS (`backend_tls`), whose settings it uses.
    pub fn validate(&self, backend_tls: bool) -> Result<(), ConfigError> {
        if self.tls && !backend_tls {
            return Err(ConfigError::Invalid(
                "sentinel.tls reaches the Sentinels with backend.tls's settings: set backend.tls.enabled too"
                    .into(),
            ));
        }
        if !self.is_set() {
            if !self.master_name.is_empty() {
                return Err(ConfigError::Invalid(
                    "sentinel.master_name is set but sentinel.addresses is empty".into(),
                ));
            }
            return Ok(());
        }
        if self.master_name.is_empty() {
            return Err(ConfigError::Invalid(
                "sentinel.addresses is set but sentinel.master_name is not (give --master-name)"
                    .into(),
            ));
        }
        for addr in &self.addresses {
            check_host_port("sentinel.addresses", addr)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Upstream};

    #[test]
    fn a_sentinel_group_is_an_upstream_of_its_own() {
        let config = Config::from_yaml(
            "sentinel:\n  addresses: [127.0.0.1:26379, 127.0.0.1:26380]\n  master_name: ragmaster\n  \
             password: sentinel-pass\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.upstream().unwrap(),
            Upstream::Sentinel {
                addresses: vec!["127.0.0.1:26379".into(), "127.0.0.1:26380".into()],
                master_name: "ragmaster".into(),
            }
        );
        assert!(!format!("{config:?}").contains("sentinel-pass"));
    }

    #[test]
    fn a_sentinel_group_needs_a_name_and_no_other_upstream() {
        for (yaml, wanted) in [
            ("sentinel: {addresses: [127.0.0.1:26379]}", "master_name"),
            ("sentinel: {master_name: m}", "addresses is empty"),
            ("sentinel: {addresses: [nope], master_name: m}", "not host:port"),
            (
                "standalone: 127.0.0.1:6379\nsentinel: {addresses: [127.0.0.1:26379], master_name: m}",
                "not both",
            ),
        ] {
            let error = Config::from_yaml(yaml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(error.contains(wanted), "{yaml}: {error}");
        }
    }
}
