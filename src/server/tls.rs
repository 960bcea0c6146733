//! The client listeners' binding and the TLS listener's side of the accept loop: a TLS
//! client's handshake runs in its own task, within `tls.handshake_timeout_ms`, with the
//! certificates current when it connected (a reload replaces them for later clients only).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::accepting::Accepted;
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
        listen => Some(bind_one(listen, proxy.config.tcp_backlog).await?),
    };
    if let Some(addr) = plain.as_ref().and_then(|l| l.local_addr().ok()) {
        proxy.listen_addr = addr.to_string();
    }
    let tls = match &proxy.config.tls.listen {
        Some(listen) => Some(bind_one(listen, proxy.config.tcp_backlog).await?),
        None => None,
    };
    if plain.is_none() {
        if let Some(addr) = tls.as_ref().and_then(|l| l.local_addr().ok()) {
            proxy.listen_addr = addr.to_string();
        }
    }
    Ok(Listeners { plain, tls })
}

/// Binds `listen` (an address, or a name resolved first: the first of its addresses that
/// binds) with a listen backlog of `backlog`, and `SO_REUSEADDR` as `TcpListener::bind` sets it.
async fn bind_one(listen: &str, backlog: u32) -> Result<TcpListener, StartError> {
    let failed = |source| StartError::Listen {
        addr: listen.into(),
        source,
    };
    let mut last = None;
    for addr in tokio::net::lookup_host(listen).await.map_err(failed)? {
        match listen_on(addr, backlog) {
            Ok(listener) => return Ok(listener),
            Err(error) => last = Some(error),
        }
    }
    Err(failed(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to bind")
    })))
}

fn listen_on(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Serves one client of the TLS listener: handshake, then the session (or, past
/// `maxclients`, Redis's refusal over TLS). A failed handshake closes the connection; the
/// client sees the TLS alert, if any, then the close.
pub(super) async fn serve(accepted: Accepted, live: Arc<Live>, registry: Arc<Registry>) {
    let Accepted { stream: tcp, ends } = accepted;
    let slot = live.client_slot();
    let Some(tls) = live.client_tls() else {
        return;
    };
    let stream = match tls.accept(tcp).await {
        Ok(stream) => ClientStream::Tls(Box::new(stream)),
        Err(error) => {
            tracing::debug!(client = %ends.peer, %error, "TLS client refused");
            return;
        }
    };
    match slot {
        Some(slot) => {
            client::serve(stream, ends, live, registry).await;
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
        let error = bind_one(&addr, 16).await.unwrap_err();
        assert!(matches!(error, StartError::Listen { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("cannot listen on {addr}: ")),
            "{error}"
        );
    }
}
