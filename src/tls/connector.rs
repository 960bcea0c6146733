//! TLS to the nodes (`backend.tls`, and `rediss://` for migrate and inspect).

use std::sync::Arc;

use arc_swap::ArcSwap;

use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider,
};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;

use super::{files, TlsError};
use crate::config::BackendTlsConfig;

/// How node connections start TLS, shared by every connection of one upstream. Built whole
/// from the files; [`NodeTls::rotate`] swaps in certificates read again on reload, which
/// the next connection (or reconnection) uses.
pub struct NodeTls {
    current: ArcSwap<Connector>,
}

struct Connector {
    connector: TlsConnector,
    /// `backend.tls.server_name`: SNI and the name checked, instead of each node's host.
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("server_name", &self.current.load().server_name)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// Reads the files of `tls`; `None` when backend TLS is off. Warns when certificates
    /// go unchecked (`insecure_skip_verify`), each time it is built (start-up, reload).
    pub fn from_config(tls: &BackendTlsConfig) -> Result<Option<Arc<NodeTls>>, TlsError> {
        if !tls.enabled {
            return Ok(None);
        }
        let provider = Arc::new(super::provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new("backend.tls", e))?;
        let builder = if tls.insecure_skip_verify {
            tracing::warn!(
                "backend.tls.insecure_skip_verify is set: node certificates are NOT checked; \
                 anyone on the network path can read and change the traffic"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        } else {
            let Some(ca) = &tls.ca_cert_file else {
                return Err(TlsError::new("backend.tls.ca_cert_file", "needed"));
            };
            builder.with_root_certificates(files::roots("backend.tls.ca_cert_file", ca)?)
        };
        let config = match (&tls.cert_file, &tls.key_file) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(
                    files::certificates("backend.tls.cert_file", cert)?,
                    files::private_key("backend.tls.key_file", key)?,
                )
                .map_err(|e| TlsError::new("backend.tls.cert_file/key_file", e))?,
            _ => builder.with_no_client_auth(),
        };
        let server_name = tls
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|e| TlsError::new("backend.tls.server_name", e))
            })
            .transpose()?;
        let connector = Connector {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        };
        Ok(Some(Arc::new(NodeTls {
            current: ArcSwap::from_pointee(connector),
        })))
    }

    /// Takes `newer`'s certificates for the connections made from now on.
    pub fn rotate(&self, newer: &NodeTls) {
        self.current.store(newer.current.load_full());
    }

    /// Runs the client side of the handshake on `tcp` to the node at `host`.
    pub async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> Result<TlsStream<TcpStream>, String> {
        let current = self.current.load_full();
        let name = match &current.server_name {
            Some(name) => name.clone(),
            None => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("TLS: {host} is not a server name: {e}"))?
            }
        };
        current
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))
    }
}

/// Accepts every certificate (`insecure_skip_verify`), still checking the handshake's
/// signatures so the session keys belong to the certificate shown.
#[derive(Debug)]
struct AnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
