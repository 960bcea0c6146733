//! A TLS stream cut in a read half and a write half that share it, so the owner of each
//! half can use it on its own (a session's reads and writes, a node connection's reader
//! and writer tasks).
//!
//! Invariant: ciphertext that rustls holds because the socket took less than a whole
//! record is never stranded. A write first sends what an earlier write left; a read does
//! so too, so a reply whose tail waited for the socket leaves on the next poll of either
//! half even when nothing more is written; and `has_unsent` tells a writer that waits for
//! nothing else that it must wait until the socket takes more.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TLS stream over TCP, either side.
pub trait TlsIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether rustls holds ciphertext the socket has not taken yet.
    fn wants_write(&self) -> bool;
    /// The socket underneath.
    fn tcp(&self) -> &TcpStream;
}

impl TlsIo for tokio_rustls::server::TlsStream<TcpStream> {
    fn wants_write(&self) -> bool {
        self.get_ref().1.wants_write()
    }
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

impl TlsIo for tokio_rustls::client::TlsStream<TcpStream> {
    fn wants_write(&self) -> bool {
        self.get_ref().1.wants_write()
    }
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// Cuts `stream` in its two halves.
pub fn split<S: TlsIo>(stream: S) -> (TlsReadHalf<S>, TlsWriteHalf<S>) {
    let shared = Arc::new(Mutex::new(stream));
    (TlsReadHalf(shared.clone()), TlsWriteHalf(shared))
}

fn lock<S>(shared: &Mutex<S>) -> MutexGuard<'_, S> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends what rustls holds; `Ready` once it holds nothing.
fn poll_send_held<S: TlsIo>(stream: &mut S, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    if stream.wants_write() {
        Pin::new(stream).poll_flush(cx)
    } else {
        Poll::Ready(Ok(()))
    }
}

/// The read half of a split TLS stream.
pub struct TlsReadHalf<S>(Arc<Mutex<S>>);

impl<S: TlsIo> AsyncRead for TlsReadHalf<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.0);
        // Pending is fine here: the socket wakes this task when it takes more.
        if let Poll::Ready(Err(error)) = poll_send_held(&mut *stream, cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut *stream).poll_read(cx, buf)
    }
}

/// The write half of a split TLS stream. Its methods take `&self`, so a node connection
/// can share it between the callers that write and the task that waits for the socket.
pub struct TlsWriteHalf<S>(Arc<Mutex<S>>);

impl<S: TlsIo> TlsWriteHalf<S> {
    /// Writes what the connection takes now; `WouldBlock` when it takes nothing.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.poll_write_shared(&mut cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Whether ciphertext waits for the socket (see the module's invariant).
    pub fn has_unsent(&self) -> bool {
        lock(&self.0).wants_write()
    }

    /// `Ready` once what waited for the socket is sent, or, with nothing waiting, once the
    /// socket takes more.
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.0);
        if stream.wants_write() {
            return Pin::new(&mut *stream).poll_flush(cx);
        }
        stream.tcp().poll_write_ready(cx)
    }

    /// Runs `f` with the socket underneath.
    pub fn with_tcp<T>(&self, f: impl FnOnce(&TcpStream) -> T) -> T {
        f(lock(&self.0).tcp())
    }

    fn poll_write_shared(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut stream = lock(&self.0);
        // What an earlier write left goes first: bytes must leave in order, and rustls's
        // buffer must not grow past one write.
        if poll_send_held(&mut *stream, cx)?.is_pending() {
            return Poll::Pending;
        }
        let written = Pin::new(&mut *stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(_)) = written {
            // Pushes out the record just made; what the socket does not take waits (see
            // the module's invariant).
            let _ = poll_send_held(&mut *stream, cx);
        }
        written
    }
}

impl<S: TlsIo> AsyncWrite for TlsWriteHalf<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_shared(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *lock(&self.0)).poll_shutdown(cx)
    }
}
