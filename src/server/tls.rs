//! The client listeners' binding and the TLS listener's side of the accept loop: a TLS
//! client's handshake runs in its own task, within `tls.handshake_timeout_ms`, with the
//! certificates current when it connected (a reload replaces them for later clients only).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

use super::{refuse, Listeners, StartError};
use crate::client::{self, ClientStream, Registry};
use crate::dispatch::Proxy;
use crate::reload::Live;
use crate::tls::ClientTls;

/// Binds `listen` (unless empty) and `tls.listen` (when set), after checking the TLS
/// files; records the plain listener's bound address in `proxy.listen_addr`.
pub(super) async fn bind(proxy: &mut Proxy) -> Result<Listeners, StartError> {
    // Read now so a bad certificate stops start-up, not the first TLS client.
    ClientTls::from_config(&proxy.config.tls)?;
    let plain = match proxy.config.listen.as_str() {
        "" => None,
        listen => Some(bind_one(listen).await?),
    };
    if let Some(addr) = plain.as_ref().and_then(|l| l.local_addr().ok()) {
        proxy.listen_addr = addr.to_string();
    }
    let tls = match &proxy.config.tls.listen {
        Some(listen) => Some(bind_one(listen).await?),
        None => None,
    };
    if plain.is_none() {
        if let Some(addr) = tls.as_ref().and_then(|l| l.local_addr().ok()) {
            proxy.listen_addr = addr.to_string();
        }
    }
    Ok(Listeners { plain, tls })
}

async fn bind_one(listen: &str) -> Result<TcpListener, StartError> {
    TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: listen.into(),
            source,
        })
}

/// The next connection of `listener`; never returns without one.
pub(super) async fn accept(
    listener: Option<&TcpListener>,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Serves one client of the TLS listener: handshake, then the session (or, past
/// `maxclients`, Redis's refusal over TLS). A failed handshake closes the connection; the
/// client sees the TLS alert, if any, then the close.
pub(super) async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    live: Arc<Live>,
    registry: Arc<Registry>,
) {
    let slot = live.client_slot();
    let Some(tls) = live.client_tls() else {
        return;
    };
    let stream = match tls.accept(tcp).await {
        Ok(stream) => ClientStream::Tls(Box::new(stream)),
        Err(error) => {
            tracing::debug!(client = %peer, %error, "TLS client refused");
            return;
        }
    };
    match slot {
        Some(slot) => {
            client::serve(stream, live, registry).await;
            drop(slot);
        }
        None => {
            crate::metrics::client_rejected();
            refuse(stream).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_in_use_names_the_address() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let error = bind_one(&addr).await.unwrap_err();
        assert!(matches!(error, StartError::Listen { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot listen on {addr}: ")),
            "{error}"
        );
    }
}
