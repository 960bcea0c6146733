//! The `tls` section (the TLS listener for clients) and `backend.tls` (TLS to the nodes).
//! Option names follow Redis's own (`tls-port`, `tls-cert-file`, `tls-auth-clients`, ...)
//! where one exists. Only what needs no file is checked here; the files are read (and so
//! checked) by `crate::tls` at start-up and on every reload.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// The client-facing TLS listener. Off unless `listen` is set.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Address of the TLS listener, `host:port` (as Redis's `tls-port`), beside the plain
    /// `listen` or instead of it (set `listen: ""`).
    pub listen: Option<String>,
    /// The proxy's certificate chain, PEM.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file`, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificates, PEM, that client certificates must chain to (mutual TLS).
    pub ca_cert_file: Option<PathBuf>,
    /// Whether clients must present a certificate (as Redis's `tls-auth-clients`).
    pub auth_clients: AuthClients,
    /// With a client certificate, log the client in as the user its certificate names (as
    /// Redis 7.2's `tls-auth-clients-user`); off by default.
    pub auth_clients_user: ClientCertUser,
    /// Protocol versions, space-separated (`"TLSv1.2 TLSv1.3"`); empty: both.
    pub protocols: String,
    /// Cipher suites, colon-separated IANA names (`TLS_AES_256_GCM_SHA384:TLS_ECDHE_...`);
    /// empty: rustls's defaults. TLS 1.2 and 1.3 suites are named in the same list.
    pub ciphersuites: String,
    /// Longest time a client may take over the TLS handshake, milliseconds.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            listen: None,
            cert_file: None,
            key_file: None,
            ca_cert_file: None,
            auth_clients: AuthClients::No,
            auth_clients_user: ClientCertUser::Off,
            protocols: String::new(),
            ciphersuites: String::new(),
            handshake_timeout_ms: 10_000,
        }
    }
}

/// Mutual TLS: whether a client certificate is asked for and whether it is required.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthClients {
    /// No client certificate is asked for.
    #[default]
    No,
    /// A client certificate is asked for; one that is sent must be valid.
    Optional,
    /// Every client must present a valid certificate.
    Yes,
}

/// Which field of a client certificate names the ACL user.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
pub enum ClientCertUser {
    /// None: clients log in with AUTH as usual.
    #[default]
    #[serde(rename = "off")]
    Off,
    /// The subject's common name, when a user of that name exists (Redis 7.2's `CN`).
    #[serde(rename = "CN")]
    Cn,
}

impl TlsConfig {
    /// Whether the TLS listener is on.
    pub fn is_enabled(&self) -> bool {
        self.listen.is_some()
    }

    /// Checks what needs no file: a listener has a certificate and key, mutual TLS a CA.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(listen) = &self.listen else {
            return Ok(());
        };
        super::check_host_port("tls.listen", listen)?;
        if self.cert_file.is_none() || self.key_file.is_none() {
            return Err(invalid(
                "tls.listen is set: tls.cert_file and tls.key_file are needed",
            ));
        }
        if self.auth_clients != AuthClients::No && self.ca_cert_file.is_none() {
            return Err(invalid(
                "tls.auth_clients is optional or yes: tls.ca_cert_file is needed",
            ));
        }
        if self.auth_clients_user == ClientCertUser::Cn && self.auth_clients == AuthClients::No {
            return Err(invalid(
                "tls.auth_clients_user: CN needs tls.auth_clients optional or yes",
            ));
        }
        if self.handshake_timeout_ms == 0 {
            return Err(invalid("tls.handshake_timeout_ms must be at least 1"));
        }
        Ok(())
    }
}

/// TLS on the connections to the nodes (every kind: shared, pinned, scripts, pub/sub,
/// migrate).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct BackendTlsConfig {
    /// Connect to the nodes over TLS.
    pub enabled: bool,
    /// CA certificates, PEM, the nodes' certificates must chain to.
    pub ca_cert_file: Option<PathBuf>,
    /// A client certificate for nodes that require one (`tls-auth-clients yes`), PEM.
    pub cert_file: Option<PathBuf>,
    /// The key of `cert_file`, PEM.
    pub key_file: Option<PathBuf>,
    /// The name sent as SNI and checked against the nodes' certificates; without it, the
    /// host of each node's address (an IP address is then checked as one).
    pub server_name: Option<String>,
    /// Accept any node certificate. Only for tests: anyone on the path can read and
    /// change the traffic. Logged as a warning at start-up and on every reload.
    pub insecure_skip_verify: bool,
}

impl BackendTlsConfig {
    /// TLS on, every other setting at its default (a `rediss://` URL before its flags).
    pub fn enabled() -> Self {
        BackendTlsConfig {
            enabled: true,
            ..BackendTlsConfig::default()
        }
    }

    /// Checks what needs no file.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.ca_cert_file.is_none() && !self.insecure_skip_verify {
            return Err(invalid(
                "backend.tls.enabled: backend.tls.ca_cert_file is needed (or \
                 insecure_skip_verify, which verifies nothing)",
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "backend.tls.cert_file and backend.tls.key_file go together",
            ));
        }
        Ok(())
    }
}

fn invalid(text: &str) -> ConfigError {
    ConfigError::Invalid(text.to_owned())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    use super::*;

    #[test]
    fn tls_options_parse_with_redis_style_values() {
        let config = Config::from_yaml(
            "tls:\n  listen: 127.0.0.1:6390\n  cert_file: s.crt\n  key_file: s.key\n  \
             ca_cert_file: ca.crt\n  auth_clients: optional\n  auth_clients_user: CN\n  \
             protocols: TLSv1.3\nbackend:\n  tls:\n    enabled: true\n    \
             ca_cert_file: ca.crt\n    server_name: redis.internal\n",
        )
        .unwrap();
        assert_eq!(config.tls.auth_clients, AuthClients::Optional);
        assert_eq!(config.tls.auth_clients_user, ClientCertUser::Cn);
        assert!(config.tls.validate().is_ok());
        assert!(config.backend.tls.validate().is_ok());
        let config = Config::from_yaml("tls:\n  auth_clients: no\n").unwrap();
        assert_eq!(config.tls.auth_clients, AuthClients::No);
        assert!(Config::from_yaml("tls:\n  auth_clients: maybe\n").is_err());
    }

    #[test]
    fn incomplete_tls_settings_are_refused() {
        let mut tls = TlsConfig {
            listen: Some("127.0.0.1:6390".into()),
            ..TlsConfig::default()
        };
        assert!(tls.validate().is_err(), "no certificate");
        tls.cert_file = Some("s.crt".into());
        tls.key_file = Some("s.key".into());
        assert!(tls.validate().is_ok());
        tls.auth_clients = AuthClients::Yes;
        assert!(tls.validate().is_err(), "mutual TLS without a CA");
        tls.auth_clients = AuthClients::No;
        tls.auth_clients_user = ClientCertUser::Cn;
        assert!(
            tls.validate().is_err(),
            "CN users without client certificates"
        );
        let backend = BackendTlsConfig {
            enabled: true,
            ..BackendTlsConfig::default()
        };
        assert!(backend.validate().is_err(), "no CA and verification on");
    }

    #[test]
    fn an_empty_listen_leaves_only_the_tls_listener() {
        let yaml = "listen: \"\"\ncluster: [127.0.0.1:7001]\n";
        let config = Config::from_yaml(yaml).unwrap();
        assert!(config.validate().is_err(), "no listener at all");
        let with_tls =
            format!("{yaml}tls:\n  listen: 127.0.0.1:6390\n  cert_file: a\n  key_file: b\n");
        Config::from_yaml(&with_tls).unwrap().validate().unwrap();
        // Protected mode looks at the TLS listener too.
        let exposed = with_tls.replace("127.0.0.1:6390", "0.0.0.0:6390");
        let error = Config::from_yaml(&exposed).unwrap().validate().unwrap_err();
        assert!(error.to_string().contains("0.0.0.0:6390"), "{error}");
    }
}
