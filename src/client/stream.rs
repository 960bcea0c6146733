//! A client's connection as the session sees it: one type for every kind of listener,
//! split into a reading and a writing half that the session polls in place.
//!
//! Invariant: [`ClientWriter::try_write`] never waits, so the session can write replies
//! the moment they are ready without a turn of its loop (the hot path of a pipeline).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A client's connection: plain TCP, or TLS over TCP.
pub enum ClientStream {
    /// Plain TCP.
    Tcp(TcpStream),
}

impl ClientStream {
    /// The client's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket().peer_addr()
    }

    /// The proxy's address the client connected to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket().local_addr()
    }

    /// The TCP socket underneath (nodelay, keepalive).
    pub fn socket(&self) -> &TcpStream {
        match self {
            ClientStream::Tcp(stream) => stream,
        }
    }

    /// The two halves, used by one task each side at a time.
    pub fn into_split(self) -> (ClientReader, ClientWriter) {
        match self {
            ClientStream::Tcp(stream) => {
                let (reader, writer) = stream.into_split();
                (
                    ClientReader(ReaderKind::Tcp(reader)),
                    ClientWriter(WriterKind::Tcp(writer)),
                )
            }
        }
    }
}

/// The reading half of a [`ClientStream`].
pub struct ClientReader(ReaderKind);

enum ReaderKind {
    Tcp(OwnedReadHalf),
}

/// The writing half of a [`ClientStream`].
pub struct ClientWriter(WriterKind);

enum WriterKind {
    Tcp(OwnedWriteHalf),
}

impl ClientWriter {
    /// Writes what the connection takes now; `WouldBlock` when it takes nothing.
    pub fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            WriterKind::Tcp(writer) => writer.try_write(buf),
        }
    }
}

impl AsyncRead for ClientReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            ReaderKind::Tcp(reader) => Pin::new(reader).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            WriterKind::Tcp(writer) => Pin::new(writer).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            WriterKind::Tcp(writer) => Pin::new(writer).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            WriterKind::Tcp(writer) => Pin::new(writer).poll_shutdown(cx),
        }
    }
}
