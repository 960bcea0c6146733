//! TLS on both sides, with rustls and its `ring` provider: the acceptor of the client
//! listener ([`ClientTls`]), the connector of node connections ([`NodeTls`]), and a TLS
//! stream cut in halves ([`split`]).
//!
//! Invariants: certificates and keys are read only here, whole, when a configuration is
//! built (start-up and each reload), so a bad file fails that build and changes nothing;
//! a built value never reads a file again, and the connections it made keep their session
//! when a reload replaces it.

mod acceptor;
mod connector;
mod files;
pub mod split;
mod subject;

pub use acceptor::ClientTls;
pub use connector::NodeTls;
pub use subject::common_name;

use std::sync::Arc;

use tokio_rustls::rustls::crypto::CryptoProvider;

/// Why TLS settings could not be used: the setting or file, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct TlsError {
    /// The option (`tls.cert_file`) and, where one was read, the file.
    pub what: String,
    /// What was wrong.
    pub reason: String,
}

impl TlsError {
    fn new(what: impl Into<String>, reason: impl std::fmt::Display) -> TlsError {
        TlsError {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

/// The crypto provider: `ring`, with every suite rustls offers.
fn provider() -> CryptoProvider {
    tokio_rustls::rustls::crypto::ring::default_provider()
}

/// The provider for `tls.protocols`/`tls.ciphersuites`-style lists, shared by both sides.
fn provider_with(ciphersuites: &str, what: &str) -> Result<Arc<CryptoProvider>, TlsError> {
    let mut provider = provider();
    let wanted: Vec<String> = ciphersuites
        .split([':', ' ', ','])
        .filter(|name| !name.is_empty())
        .map(rustls_suite_name)
        .collect();
    if !wanted.is_empty() {
        for name in &wanted {
            let known = provider
                .cipher_suites
                .iter()
                .any(|suite| format!("{:?}", suite.suite()) == *name);
            if !known {
                return Err(TlsError::new(
                    what,
                    format!("{name} is not a cipher suite rustls offers"),
                ));
            }
        }
        provider
            .cipher_suites
            .retain(|suite| wanted.contains(&format!("{:?}", suite.suite())));
    }
    Ok(Arc::new(provider))
}

/// rustls names TLS 1.3 suites `TLS13_*`; the IANA (and OpenSSL) names are `TLS_AES_*` and
/// `TLS_CHACHA20_*`.
fn rustls_suite_name(name: &str) -> String {
    let name = name.to_ascii_uppercase();
    match name.strip_prefix("TLS_") {
        Some(rest) if rest.starts_with("AES_") || rest.starts_with("CHACHA20_") => {
            format!("TLS13_{rest}")
        }
        _ => name,
    }
}

/// The protocol versions of a `tls.protocols` list (Redis's `"TLSv1.2 TLSv1.3"`).
fn protocol_versions(
    protocols: &str,
    what: &str,
) -> Result<Vec<&'static tokio_rustls::rustls::SupportedProtocolVersion>, TlsError> {
    use tokio_rustls::rustls::version::{TLS12, TLS13};
    let mut versions = Vec::new();
    for name in protocols.split([' ', ',']).filter(|name| !name.is_empty()) {
        let version = match name.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &TLS12,
            "tlsv1.3" => &TLS13,
            _ => {
                return Err(TlsError::new(
                    what,
                    format!("{name}: rustls speaks only TLSv1.2 and TLSv1.3"),
                ))
            }
        };
        versions.push(version);
    }
    if versions.is_empty() {
        versions = vec![&TLS12, &TLS13];
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suites_are_named_as_iana_or_rustls_does() {
        assert_eq!(
            rustls_suite_name("TLS_AES_256_GCM_SHA384"),
            "TLS13_AES_256_GCM_SHA384"
        );
        let provider = provider_with(
            "TLS_AES_256_GCM_SHA384:TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "x",
        )
        .unwrap();
        assert_eq!(provider.cipher_suites.len(), 2);
        let error = provider_with("TLS_RSA_WITH_AES_128_CBC_SHA", "tls.ciphersuites").unwrap_err();
        assert!(
            error.to_string().starts_with("tls.ciphersuites: "),
            "{error}"
        );
        assert_eq!(provider_with("", "x").unwrap().cipher_suites.len(), 9);
    }

    #[test]
    fn protocols_are_redis_style_names() {
        assert_eq!(protocol_versions("TLSv1.3", "p").unwrap().len(), 1);
        assert_eq!(protocol_versions("", "p").unwrap().len(), 2);
        assert!(protocol_versions("TLSv1.1", "p").is_err());
    }
}
