//! Reading PEM certificates and keys, each error naming the option and the file.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::RootCertStore;

use super::TlsError;

/// Every certificate in a PEM file, in order (a chain: leaf first).
pub(super) fn certificates(
    option: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let what = || format!("{option} {}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::new(what(), e))?;
    if certs.is_empty() {
        return Err(TlsError::new(what(), "no certificate in the file"));
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub(super) fn private_key(option: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| TlsError::new(format!("{option} {}", path.display()), e))
}

/// The CA certificates of a PEM file, as trust anchors.
pub(super) fn roots(option: &str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(option, path)? {
        store
            .add(cert)
            .map_err(|e| TlsError::new(format!("{option} {}", path.display()), e))?;
    }
    Ok(store)
}
