//! A raw RESP test client: one TCP connection, commands sent as RESP arrays of bulk strings, and
//! each reply returned as its exact wire text, so tests can compare replies byte for byte with
//! what Redis itself sends.
//!
//! Invariants: a read waits at most [`READ_TIMEOUT`] for more bytes (a hung proxy fails the test
//! instead of hanging it); `call` returns exactly one complete reply, never part of one; a
//! read interrupted by a stop of the test process is read again (see [`read_some`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a read may wait for the next bytes of a reply before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A raw RESP connection, so replies are checked byte for byte.
pub struct Raw {
    /// The underlying connection, for tests that write malformed input or read until close.
    pub stream: TcpStream,
}

impl Raw {
    /// Connects to `addr` (`host:port`); panics with the address if nothing answers.
    pub fn connect(addr: &str) -> Raw {
        super::process::note_test();
        let stream =
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("set a read timeout");
        Raw { stream }
    }

    /// Connects as [`Raw::connect`], in RESP3 (`HELLO 3`) when `resp3`.
    pub fn connect_in(addr: &str, resp3: bool) -> Raw {
        let mut raw = Raw::connect(addr);
        if resp3 {
            assert!(
                raw.call(&["HELLO", "3"]).starts_with('%'),
                "HELLO 3 on {addr}"
            );
        }
        raw
    }

    /// [`Raw::call`] of a command line whose arguments are split on single spaces.
    pub fn call_line(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split(' ').collect();
        self.call(&words)
    }

    /// Sends one command and returns its complete reply (read until it parses).
    pub fn call(&mut self, args: &[&str]) -> String {
        self.send(args);
        self.read_reply()
    }

    /// Sends one command without reading its reply (for pipelining or push messages).
    pub fn send(&mut self, args: &[&str]) {
        self.stream
            .write_all(&resp_command(args))
            .expect("send a command");
    }

    /// Reads exactly one complete reply and returns it as (lossy UTF-8) text.
    pub fn read_reply(&mut self) -> String {
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if reply_complete(&reply) {
                return String::from_utf8_lossy(&reply).into_owned();
            }
            let n = read_some(&mut self.stream, &mut buf).expect("read a reply");
            assert!(
                n > 0,
                "connection closed; got {:?}",
                String::from_utf8_lossy(&reply)
            );
            reply.extend_from_slice(&buf[..n]);
        }
    }
}

impl Raw {
    /// Sends a command line whose arguments are split on single spaces, without reading
    /// its reply (a blocking command, say).
    pub fn send_line(&mut self, line: &str) {
        let words: Vec<&str> = line.split(' ').collect();
        self.send(&words);
    }

    /// The next reply if one starts within `within`, else `None` (nothing read): for a
    /// command that should still be waiting, or should be answered by now.
    pub fn reply_within(&mut self, within: Duration) -> Option<String> {
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut first = [0u8; 1];
        let got = match read_some(&mut self.stream, &mut first) {
            Ok(0) => panic!("the connection was closed"),
            Ok(_) => true,
            Err(_) => false,
        };
        self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        if !got {
            return None;
        }
        let mut reply = vec![first[0]];
        let mut buf = [0u8; 4096];
        while !reply_complete(&reply) {
            let n = read_some(&mut self.stream, &mut buf).expect("the rest of the reply");
            assert!(n > 0, "the connection was closed mid-reply");
            reply.extend_from_slice(&buf[..n]);
        }
        Some(String::from_utf8_lossy(&reply).into_owned())
    }

    /// The connection's id, as CLIENT ID gives it.
    pub fn client_id(&mut self) -> String {
        let reply = self.call(&["CLIENT", "ID"]);
        reply.trim_start_matches(':').trim_end().to_string()
    }

    /// Whether this connection's CLIENT LIST shows client `id` blocked (`flags=b`).
    pub fn shows_blocked(&mut self, id: &str) -> bool {
        let list = self.call(&["CLIENT", "LIST"]);
        list.lines()
            .any(|line| line.contains(&format!("id={id} ")) && line.contains(" flags=b "))
    }

    /// Writes `wire` (any number of requests) in one write and returns the next `count`
    /// replies, each as its exact bytes.
    pub fn pipeline(&mut self, wire: &[u8], count: usize) -> Vec<Vec<u8>> {
        self.stream.write_all(wire).expect("send a pipeline");
        let mut data = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        loop {
            let replies = split_replies(&data);
            if replies.len() >= count {
                return replies.into_iter().take(count).collect();
            }
            let n = read_some(&mut self.stream, &mut buf)
                .unwrap_or_else(|e| panic!("reading reply {} of {count}: {e}", replies.len() + 1));
            assert!(
                n > 0,
                "connection closed after {} of {count} replies",
                replies.len()
            );
            data.extend_from_slice(&buf[..n]);
        }
    }
}

/// Runs each sequence (steps separated by `|`, `{a}` `{b}` `{c}` standing for `keys`) on
/// one redis-server and through the proxy, in RESP2 then RESP3, after deleting the keys on
/// both, and asserts every reply through the proxy is the server's. A step `waits` says
/// (given the step and the server's reply) must take at least 190 ms through the proxy (a
/// timeout ran out), and not a second longer than on the server.
pub fn replay_on_both(
    reference: &str,
    proxy: &str,
    sequences: &[&str],
    keys: &[String; 3],
    waits: impl Fn(&str, &str) -> bool,
) {
    let [a, b, c] = keys;
    for resp3 in [false, true] {
        let mut reference = Raw::connect_in(reference, resp3);
        let mut through = Raw::connect_in(proxy, resp3);
        for sequence in sequences {
            let sequence = sequence
                .replace("{a}", a)
                .replace("{b}", b)
                .replace("{c}", c);
            for conn in [&mut reference, &mut through] {
                conn.call_line(&format!("DEL {a} {b} {c}"));
            }
            for step in sequence.split('|') {
                let started = Instant::now();
                let want = reference.call_line(step);
                let took = started.elapsed();
                let started = Instant::now();
                let got = through.call_line(step);
                assert_eq!(got, want, "RESP3 {resp3}: {step}");
                if waits(step, &want) {
                    let waited = started.elapsed();
                    assert!(
                        waited >= Duration::from_millis(190)
                            && waited < took + Duration::from_secs(1),
                        "{step}: {waited:?}"
                    );
                }
            }
        }
    }
}

/// The complete replies at the front of `data`, each as its bytes.
pub fn split_replies(data: &[u8]) -> Vec<Vec<u8>> {
    let mut replies = Vec::new();
    let mut at = 0;
    while let Some(len) = data.get(at..).and_then(frame_len) {
        replies.push(data[at..at + len].to_vec());
        at += len;
    }
    replies
}

/// One `read`, again while it fails with `Interrupted`. A socket with a read timeout fails
/// a waiting read with EINTR when the process is stopped and resumed (signal(7)), which a
/// host pausing the test machine does; that is no answer from the peer.
pub fn read_some(stream: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// Reads from `stream` until `count` replies are complete, skipping RESP3 push messages
/// (`>`); bytes after them stay in `pending` for the next call. `Err` says what went wrong:
/// the peer closed, or no byte came for [`READ_TIMEOUT`].
pub fn read_replies(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    count: usize,
) -> Result<Vec<Vec<u8>>, String> {
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("set a read timeout");
    let mut replies = Vec::with_capacity(count);
    let mut buf = [0u8; 64 * 1024];
    loop {
        while replies.len() < count {
            let Some(len) = frame_len(pending) else {
                break;
            };
            let frame: Vec<u8> = pending.drain(..len).collect();
            if !frame.starts_with(b">") {
                replies.push(frame);
            }
        }
        if replies.len() == count {
            return Ok(replies);
        }
        match read_some(stream, &mut buf) {
            Ok(0) => return Err(format!("closed after {} of {count} replies", replies.len())),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {} of {count} replies", replies.len())),
        }
    }
}

/// Reads until the peer closes (`true`) or `timeout` passes without data (`false`); a read
/// error counts as a close. Everything received until then is returned.
pub fn read_until_close(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, bool) {
    stream
        .set_read_timeout(Some(timeout))
        .expect("set a read timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match read_some(stream, &mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}

/// Connects to `addr`, sends `input` as is (it may be malformed on purpose), and reads with
/// [`read_until_close`]: what came back, and whether the peer closed the connection.
pub fn exchange(addr: &str, input: &[u8], timeout: Duration) -> (Vec<u8>, bool) {
    super::process::note_test();
    let mut stream =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream.write_all(input).expect("send raw bytes");
    read_until_close(&mut stream, timeout)
}

/// Writes `input` on an open `stream`, then reads with [`read_until_close`] and returns what
/// came back.
pub fn exchange_on(stream: &mut TcpStream, input: &[u8], quiet: Duration) -> Vec<u8> {
    stream.write_all(input).expect("send raw bytes");
    read_until_close(stream, quiet).0
}

/// One command as a RESP multibulk request (arguments as `&str`, `String` or bytes), as the
/// `redis` crate packs it.
pub fn resp_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd.get_packed_command()
}

/// Inline-style command lines (arguments split on single spaces) as RESP multibulk requests.
pub fn resp_lines(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        let args: Vec<&str> = line.split(' ').collect();
        out.extend_from_slice(&resp_command(&args));
    }
    out
}

/// Sends `lines` (see [`resp_lines`]) on a new connection to `addr` and returns everything
/// answered until the connection closes or stays quiet for 400 ms, as (lossy UTF-8) text.
pub fn transcript(addr: &str, lines: &[&str]) -> String {
    let (out, _) = exchange(addr, &resp_lines(lines), Duration::from_millis(400));
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `data` holds exactly one whole RESP2/RESP3 reply (aggregates, bulk and simple types;
/// attributes and streamed aggregates are not needed by the tests).
pub fn reply_complete(data: &[u8]) -> bool {
    frame_len(data) == Some(data.len())
}

/// The length of the first complete frame in `data`, or `None` while it is incomplete.
fn frame_len(data: &[u8]) -> Option<usize> {
    let end = data.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&data[1..end]).ok()?;
    let rest = end + 2;
    match data.first()? {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Some(rest),
        b'$' | b'=' | b'!' => {
            let len: i64 = head.parse().ok()?;
            if len < 0 {
                return Some(rest);
            }
            let total = rest + usize::try_from(len).ok()? + 2;
            (data.len() >= total).then_some(total)
        }
        b'*' | b'~' | b'>' | b'%' => {
            let count: i64 = head.parse().ok()?;
            let items = if data[0] == b'%' { count * 2 } else { count };
            let mut at = rest;
            for _ in 0..items.max(0) {
                at += frame_len(data.get(at..)?)?;
            }
            Some(at)
        }
        _ => None,
    }
}
