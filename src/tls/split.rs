//! A TLS stream cut in a read half and a write half that share it, so the owner of each
//! half can use it on its own (a session's reads and writes, a node connection's reader
//! and writer tasks).
//!
//! Invariant: ciphertext that rustls holds because the socket took less than a whole
//! record is never stranded. A write first sends what an earlier write left; `has_unsent`
//! tells a writer that waits for nothing else (a node connection's) to wait for the socket;
//! and where one task owns both halves (a client session, which writes only while it has
//! replies to write), its reads send what is held too, so the tail of its last reply leaves
//! without another write.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TLS stream over TCP, either side.
pub trait TlsIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Whether rustls holds ciphertext the socket has not taken yet.
    fn wants_write(&self) -> bool;
    /// The socket underneath.
    fn tcp(&self) -> &TcpStream;
    /// Sends what rustls holds as far as the socket takes it now, registering no waker;
    /// whether all of it left.
    fn try_send_held(&mut self) -> io::Result<bool>;
    /// Encrypts what rustls's buffer takes of `buf` (no IO).
    fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize>;
}

macro_rules! tls_io {
    ($stream:ty) => {
        impl TlsIo for $stream {
            fn wants_write(&self) -> bool {
                self.get_ref().1.wants_write()
            }
            fn tcp(&self) -> &TcpStream {
                self.get_ref().0
            }
            fn try_send_held(&mut self) -> io::Result<bool> {
                let (tcp, conn) = self.get_mut();
                while conn.wants_write() {
                    match conn.write_tls(&mut TryWriter(tcp)) {
                        Ok(_) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                            return Ok(false)
                        }
                        Err(error) => return Err(error),
                    }
                }
                Ok(true)
            }
            fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.get_mut().1.writer().write(buf)
            }
        }
    };
}

tls_io!(tokio_rustls::server::TlsStream<TcpStream>);
tls_io!(tokio_rustls::client::TlsStream<TcpStream>);

/// The socket as an `io::Write` that never waits nor registers a waker.
struct TryWriter<'a>(&'a TcpStream);

impl Write for TryWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Cuts `stream` in its two halves. `read_sends_held`: whether reads send what rustls
/// holds first, for a stream whose halves one task uses (a client session); a node
/// connection's writer task waits for the socket itself, and a read from another task must
/// not take the socket's one write waker from it.
pub fn split<S: TlsIo>(stream: S, read_sends_held: bool) -> (TlsReadHalf<S>, TlsWriteHalf<S>) {
    let shared = Arc::new(Mutex::new(stream));
    let read = TlsReadHalf {
        shared: shared.clone(),
        sends_held: read_sends_held,
    };
    (read, TlsWriteHalf(shared))
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
pub struct TlsReadHalf<S> {
    shared: Arc<Mutex<S>>,
    sends_held: bool,
}

impl<S: TlsIo> AsyncRead for TlsReadHalf<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.shared);
        // Pending is fine here: the socket wakes this task when it takes more.
        if self.sends_held {
            if let Poll::Ready(Err(error)) = poll_send_held(&mut *stream, cx) {
                return Poll::Ready(Err(error));
            }
        }
        Pin::new(&mut *stream).poll_read(cx, buf)
    }
}

/// The write half of a split TLS stream. Its methods take `&self`, so a node connection
/// can share it between the callers that write and the task that waits for the socket.
pub struct TlsWriteHalf<S>(Arc<Mutex<S>>);

impl<S: TlsIo> TlsWriteHalf<S> {
    /// Writes what the connection takes now; `WouldBlock` when it takes nothing. Like
    /// `TcpStream::try_write`, it registers no waker: polling with a no-op waker would take
    /// the socket's one write waker from a task waiting for it (a node connection's writer).
    /// What the socket does not take of the records made waits in rustls (see
    /// [`TlsWriteHalf::has_unsent`]).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut stream = lock(&self.0);
        if !stream.try_send_held()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let written = stream.write_plain(buf)?;
        if written == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        stream.try_send_held()?;
        Ok(written)
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
