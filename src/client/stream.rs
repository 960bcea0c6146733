//! A client's connection: plain TCP, or TLS over TCP. The session reads and writes it
//! through one value; for plain TCP that is the socket itself, so the plain path costs one
//! enum match per call and allocates nothing.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::split::{self, TlsIo, TlsReadHalf, TlsWriteHalf};

type ServerTls = tokio_rustls::server::TlsStream<TcpStream>;

/// A client's connection: plain TCP, or TLS over TCP.
pub enum ClientStream {
    /// A plain TCP connection.
    Tcp(TcpStream),
    /// A TLS connection whose handshake is done.
    Tls(Box<ServerTls>),
}

/// A client connection's two addresses, as its accept found them (asking the socket would
/// be two system calls more for each client of a connect burst).
#[derive(Debug, Clone, Copy)]
pub struct Ends {
    /// The client's address (CLIENT LIST's `addr=`).
    pub peer: SocketAddr,
    /// The proxy's address the client connected to (`laddr=`).
    pub local: SocketAddr,
}

impl ClientStream {
    /// The TCP socket underneath (its send buffer).
    pub fn socket(&self) -> &TcpStream {
        match self {
            ClientStream::Tcp(stream) => stream,
            ClientStream::Tls(stream) => stream.tcp(),
        }
    }

    /// The subject CN of the certificate the client presented (mutual TLS), if any.
    pub fn peer_common_name(&self) -> Option<String> {
        match self {
            ClientStream::Tcp(_) => None,
            ClientStream::Tls(stream) => {
                let certs = stream.get_ref().1.peer_certificates()?;
                crate::tls::common_name(certs.first()?)
            }
        }
    }

    /// The connection as the session reads and writes it.
    pub fn into_io(self) -> ClientIo {
        match self {
            ClientStream::Tcp(stream) => ClientIo(Io::Tcp(stream)),
            ClientStream::Tls(stream) => {
                let (read, write) = split::split(*stream, true);
                ClientIo(Io::Tls(read, write))
            }
        }
    }
}

/// A client's connection as its session reads and writes it, from the one task. Plain TCP
/// stays whole: split, its halves would reach the socket through an `Arc` they share, a
/// cache line more at each read and each write, and at a thousand clients out of the cache
/// by the next. TLS keeps its two halves (see `tls::split`: a read sends what a write left).
pub struct ClientIo(Io);

enum Io {
    Tcp(TcpStream),
    Tls(TlsReadHalf<ServerTls>, TlsWriteHalf<ServerTls>),
}

impl ClientIo {
    /// Ends the proxy's side after the client closed its own and every reply was written:
    /// over TLS its close_notify and the TCP shutdown; over plain TCP nothing, as the
    /// socket's close when the session ends sends the FIN (the client's end of input was
    /// read, so nothing unread turns it into a reset), one system call less a client.
    pub async fn close_after_client(&mut self) {
        if let Io::Tls(..) = self.0 {
            let _ = tokio::io::AsyncWriteExt::shutdown(self).await;
        }
    }

    /// Writes what the connection takes now; `WouldBlock` when it takes nothing.
    pub fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            Io::Tcp(stream) => stream.try_write(buf),
            Io::Tls(_, write) => write.try_write(buf),
        }
    }
}

impl AsyncRead for ClientIo {
    // Inlined into the session's read: a match on the transport, then the transport's read.
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Io::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Io::Tls(read, _) => Pin::new(read).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Io::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Io::Tls(_, write) => Pin::new(write).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Io::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Io::Tls(_, write) => Pin::new(write).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Io::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Io::Tls(_, write) => Pin::new(write).poll_shutdown(cx),
        }
    }
}

/// The user a new client starts as: the one its certificate names (see
/// [`certificate_user`]), else the open `default` user, if any.
pub fn initial_user(stream: &ClientStream, proxy: &crate::dispatch::Proxy) -> Option<String> {
    certificate_user(stream, proxy)
        .or_else(|| super::local::ConnState::initial_user(&proxy.acl.users))
}

/// The user a client's certificate logs it in as, with `tls.auth_clients_user: CN`: its
/// subject CN, when an enabled user has that name (as Redis 7.2; otherwise the client
/// starts as any other and may AUTH).
pub fn certificate_user(stream: &ClientStream, proxy: &crate::dispatch::Proxy) -> Option<String> {
    if proxy.config.tls.auth_clients_user != crate::config::ClientCertUser::Cn {
        return None;
    }
    let name = stream.peer_common_name()?;
    proxy
        .acl
        .users
        .get(&name)
        .filter(|live| live.acl.enabled)
        .map(|live| live.acl.name.clone())
}
