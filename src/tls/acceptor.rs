//! The client listener's TLS: certificate, key, client certificates (mutual TLS),
//! protocols and cipher suites from the `tls` section.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{files, TlsError};
use crate::config::{AuthClients, TlsConfig};

/// What the TLS listener needs to take a client: built whole from the files, replaced whole
/// on reload.
pub struct ClientTls {
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
}

impl ClientTls {
    /// Reads the files of `tls`; `None` when the TLS listener is off.
    pub fn from_config(tls: &TlsConfig) -> Result<Option<ClientTls>, TlsError> {
        if !tls.is_enabled() {
            return Ok(None);
        }
        let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) else {
            return Err(TlsError::new("tls", "cert_file and key_file are needed"));
        };
        let provider = super::provider_with(&tls.ciphersuites, "tls.ciphersuites")?;
        let versions = super::protocol_versions(&tls.protocols, "tls.protocols")?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| TlsError::new("tls.protocols/tls.ciphersuites", e))?;
        let builder = match (&tls.ca_cert_file, tls.auth_clients) {
            (Some(ca), AuthClients::Optional | AuthClients::Yes) => {
                let roots = Arc::new(files::roots("tls.ca_cert_file", ca)?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
                let verifier = if tls.auth_clients == AuthClients::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsError::new("tls.ca_cert_file", e))?;
                builder.with_client_cert_verifier(verifier)
            }
            (None, AuthClients::Optional | AuthClients::Yes) => {
                return Err(TlsError::new("tls.auth_clients", "needs tls.ca_cert_file"))
            }
            (_, AuthClients::No) => builder.with_no_client_auth(),
        };
        let certs = files::certificates("tls.cert_file", cert_file)?;
        let key = files::private_key("tls.key_file", key_file)?;
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::new("tls.cert_file/tls.key_file", e))?;
        // Redis clients speak RESP over plain TLS: no ALPN is offered or required.
        config.alpn_protocols.clear();
        Ok(Some(ClientTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            handshake_timeout: Duration::from_millis(tls.handshake_timeout_ms),
        }))
    }

    /// Runs the server side of the handshake on `tcp`, within the handshake timeout.
    pub async fn accept(&self, tcp: TcpStream) -> Result<TlsStream<TcpStream>, String> {
        match tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(format!("TLS handshake failed: {error}")),
            Err(_) => Err(format!(
                "TLS handshake timed out after {} ms",
                self.handshake_timeout.as_millis()
            )),
        }
    }
}
