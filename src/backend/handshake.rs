//! Opening a connection to a node: TCP connect, the TLS handshake when `ConnOptions::tls`
//! is set, then `AUTH` and `HELLO 3` as configured,
//! then the prelude's requests (see `ConnOptions::prelude`).
//!
//! The handshake commands are written together in one write and their replies are read
//! and checked here, so callers of the connection never see them.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{ConnOptions, NodeStream};
use crate::protocol::encode::encode_request;
use crate::protocol::{Proto, ReplyScanner};

/// A reply the handshake waits for, in write order.
#[derive(Debug, Clone, Copy)]
enum Step {
    Auth,
    Hello,
    /// Any reply will do: a prelude request that fails costs only its own effect.
    Prelude,
}

/// Connects to `addr` and runs the handshake, all within `opts.connect_timeout`.
/// Returns the stream and any bytes read past the handshake replies. The error text is
/// the server's own error (e.g. `WRONGPASS ...`) or the IO error; it never holds the password.
pub async fn connect(addr: &str, opts: &ConnOptions) -> Result<(NodeStream, BytesMut), String> {
    match tokio::time::timeout(opts.connect_timeout, connect_and_greet(addr, opts)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "connect timed out after {} ms",
            opts.connect_timeout.as_millis()
        )),
    }
}

async fn connect_and_greet(
    addr: &str,
    opts: &ConnOptions,
) -> Result<(NodeStream, BytesMut), String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect failed: {e}"))?;
    // Requests are already batched by the writer; Nagle would only add latency.
    tcp.set_nodelay(true)
        .map_err(|e| format!("set TCP_NODELAY failed: {e}"))?;
    let mut stream = match &opts.tls {
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
            NodeStream::Tls(Box::new(tls.connect(host, tcp).await?))
        }
        None => NodeStream::Tcp(tcp),
    };

    let mut out = BytesMut::new();
    let mut steps: Vec<Step> = Vec::new();
    if let Some(password) = opts.password.as_deref().filter(|p| !p.is_empty()) {
        match opts.username.as_deref().filter(|u| !u.is_empty()) {
            Some(user) => out.extend_from_slice(&encode_request(&[
                b"AUTH",
                user.as_bytes(),
                password.as_bytes(),
            ])),
            None => out.extend_from_slice(&encode_request(&[b"AUTH", password.as_bytes()])),
        }
        steps.push(Step::Auth);
    }
    if opts.proto == Proto::Resp3 {
        out.extend_from_slice(&encode_request(&[b"HELLO", b"3"]));
        steps.push(Step::Hello);
    }
    if let Some(prelude) = &opts.prelude {
        for request in prelude() {
            out.extend_from_slice(&request);
            steps.push(Step::Prelude);
        }
    }
    let mut buf = BytesMut::with_capacity(4096);
    if steps.is_empty() {
        return Ok((stream, buf));
    }
    stream
        .write_all(&out)
        .await
        .map_err(|e| format!("handshake write failed: {e}"))?;
    // TLS may hold the tail of a record until flushed.
    stream
        .flush()
        .await
        .map_err(|e| format!("handshake write failed: {e}"))?;

    let mut scanner = ReplyScanner::new(opts.limits);
    for step in steps {
        let reply = loop {
            match scanner.next_frame_len(&buf) {
                Ok(Some(len)) => break buf.split_to(len),
                Ok(None) => {}
                Err(e) => return Err(format!("handshake reply unreadable: {e}")),
            }
            let read = stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| format!("handshake read failed: {e}"))?;
            if read == 0 {
                return Err("connection closed during handshake".to_string());
            }
        };
        check_reply(step, &reply)?;
    }
    Ok((stream, buf))
}

/// Accepts `+OK` to AUTH and a map to `HELLO 3`; an error reply becomes its own text.
fn check_reply(step: Step, reply: &[u8]) -> Result<(), String> {
    let accepted = match step {
        Step::Auth => reply.starts_with(b"+OK\r\n"),
        Step::Hello => reply.first() == Some(&b'%'),
        Step::Prelude => true,
    };
    if accepted {
        return Ok(());
    }
    let text = String::from_utf8_lossy(reply);
    let text = text.trim_end_matches("\r\n");
    let what = match step {
        Step::Auth => "AUTH",
        Step::Hello => "HELLO 3",
        Step::Prelude => "prelude",
    };
    match text.strip_prefix('-') {
        Some(error) => Err(format!("{what} refused: {error}")),
        None => Err(format!("{what}: unexpected reply {:?}", truncate(text, 64))),
    }
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}
