//! The one stream type of every node connection (shared, pinned, scripts, pub/sub links,
//! migrate): plain TCP, or TLS over TCP (`backend.tls`, `rediss://`). For plain TCP each
//! half is the socket's own, so the plain path costs one enum match per call.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::tls::split::{self, TlsReadHalf, TlsWriteHalf};

type NodeTlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// A connection to a node, handshake (TCP, TLS) done.
pub enum NodeStream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP.
    Tls(Box<NodeTlsStream>),
}

impl NodeStream {
    /// The read and write halves, each usable on its own task.
    pub fn into_split(self) -> (NodeReader, NodeWriter) {
        match self {
            NodeStream::Tcp(stream) => {
                let local = stream.local_addr();
                let (read, write) = stream.into_split();
                (
                    NodeReader::Tcp(read),
                    NodeWriter::new(Writer::Tcp(write), local),
                )
            }
            NodeStream::Tls(stream) => {
                let local = stream.get_ref().0.local_addr();
                let (read, write) = split::split(*stream, false);
                (
                    NodeReader::Tls(read),
                    NodeWriter::new(Writer::Tls(write), local),
                )
            }
        }
    }

    fn pinned(&mut self) -> Pin<&mut dyn AsyncReadWrite> {
        match self {
            NodeStream::Tcp(stream) => Pin::new(stream),
            NodeStream::Tls(stream) => Pin::new(&mut **stream),
        }
    }
}

trait AsyncReadWrite: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> AsyncReadWrite for T {}

impl AsyncRead for NodeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().pinned().poll_read(cx, buf)
    }
}

impl AsyncWrite for NodeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().pinned().poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().pinned().poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().pinned().poll_shutdown(cx)
    }
}

/// The read half of a [`NodeStream`].
pub enum NodeReader {
    /// Plain TCP.
    Tcp(OwnedReadHalf),
    /// TLS over TCP.
    Tls(TlsReadHalf<NodeTlsStream>),
}

impl AsyncRead for NodeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeReader::Tcp(read) => Pin::new(read).poll_read(cx, buf),
            NodeReader::Tls(read) => Pin::new(read).poll_read(cx, buf),
        }
    }
}

/// The write half of a [`NodeStream`]. Its non-blocking methods take `&self`, so callers
/// that queue requests and the task that waits for the socket can share it.
pub struct NodeWriter {
    writer: Writer,
    local_addr: io::Result<SocketAddr>,
}

enum Writer {
    Tcp(OwnedWriteHalf),
    Tls(TlsWriteHalf<NodeTlsStream>),
}

impl NodeWriter {
    fn new(writer: Writer, local_addr: io::Result<SocketAddr>) -> NodeWriter {
        NodeWriter { writer, local_addr }
    }

    /// Writes what the connection takes now; `WouldBlock` when it takes nothing.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match &self.writer {
            Writer::Tcp(write) => write.try_write(buf),
            Writer::Tls(write) => write.try_write(buf),
        }
    }

    /// Whether written bytes still wait to reach the socket (TLS records the socket did
    /// not take whole): the writer must wait for [`NodeWriter::writable`] before idling.
    pub fn has_unsent(&self) -> bool {
        match &self.writer {
            Writer::Tcp(_) => false,
            Writer::Tls(write) => write.has_unsent(),
        }
    }

    /// Waits until the socket takes more (and, for TLS, what waited is sent).
    pub async fn writable(&self) -> io::Result<()> {
        match &self.writer {
            Writer::Tcp(write) => write.writable().await,
            Writer::Tls(write) => poll_fn(|cx| write.poll_writable(cx)).await,
        }
    }

    /// The connection's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.local_addr {
            Ok(addr) => Ok(*addr),
            Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
        }
    }
}

impl AsyncWrite for NodeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().writer {
            Writer::Tcp(write) => Pin::new(write).poll_write(cx, buf),
            Writer::Tls(write) => Pin::new(write).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().writer {
            Writer::Tcp(write) => Pin::new(write).poll_flush(cx),
            Writer::Tls(write) => Pin::new(write).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().writer {
            Writer::Tcp(write) => Pin::new(write).poll_shutdown(cx),
            Writer::Tls(write) => Pin::new(write).poll_shutdown(cx),
        }
    }
}
