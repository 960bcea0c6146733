//! MONITOR of the proxy's own traffic: every command a client sends through this proxy,
//! shown to the clients that sent MONITOR, one line each in Redis's format
//! (`+1339518083.107412 [0 127.0.0.1:60866] "keys" "*"`).
//!
//! What is shown follows Redis 7.0's `call()`: a command that ran (its own error
//! included), not one refused before it ran (unknown, wrong arity, NOAUTH, the ACL or the
//! policy), nor one flagged `admin` or `skip_monitor` (CONFIG, CLIENT LIST, MONITOR).
//! AUTH, HELLO AUTH and MIGRATE AUTH/AUTH2 passwords read `(redacted)`, as Redis writes
//! them. A monitoring client may go on sending commands, but, as on Redis (where it is a
//! replica), none that reads or writes the keyspace.
//!
//! Invariants: while nobody monitors, the request path pays one relaxed atomic load
//! ([`Monitors::watched`]). A line is formatted once and shared by every monitor. Each
//! monitor's unsent lines never exceed [`FEED_LIMIT`] bytes: past it the monitor is
//! dropped (disconnected, counted in `slotbridge_monitor_drops_total`), so a monitor that
//! does not read never slows the proxy nor the clients it watches.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::command::{CommandFlags, CommandSpec};
use crate::protocol::{FoldedName, Request};
use crate::reply;

use super::local::ConnState;
use super::step::Step;
use super::transaction::Transaction;

/// Unsent lines a monitor may hold before it is dropped: a few seconds of a busy proxy's
/// traffic for a monitor that reads, not an unbounded queue for one that does not.
pub const FEED_LIMIT: usize = 8 * 1024 * 1024;
/// Lines a monitor's session takes from its feed in one turn, so a busy feed cannot
/// starve the monitor's own requests.
const TAKE_PER_TURN: usize = 64 * 1024;
/// What Redis writes in place of a password.
const REDACTED: &[u8] = b"(redacted)";

/// The clients that monitor, process-wide (kept in the [`super::Registry`], so a reload
/// keeps them).
#[derive(Debug, Default)]
pub struct Monitors {
    /// How many feeds are open: the one thing the request path reads.
    watchers: AtomicUsize,
    feeds: Mutex<Vec<Sender>>,
}

#[derive(Debug)]
struct Sender {
    client: u64,
    lines: mpsc::UnboundedSender<Bytes>,
    buffered: Arc<AtomicUsize>,
}

/// A monitoring client's end: the lines meant for it, in order.
#[derive(Debug)]
pub struct Feed {
    monitors: Arc<Monitors>,
    client: u64,
    lines: mpsc::UnboundedReceiver<Bytes>,
    buffered: Arc<AtomicUsize>,
}

impl Monitors {
    /// Whether anybody monitors: one relaxed load, the request path's whole cost while
    /// nobody does.
    #[inline]
    pub fn watched(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) != 0
    }

    /// Opens a feed for client `client` (MONITOR); a client that monitors already keeps
    /// its feed (Redis ignores a second MONITOR).
    fn open(&self, client: u64) -> (mpsc::UnboundedReceiver<Bytes>, Arc<AtomicUsize>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let buffered = Arc::new(AtomicUsize::new(0));
        let mut feeds = self.lock();
        feeds.push(Sender {
            client,
            lines: sender,
            buffered: buffered.clone(),
        });
        self.watchers.store(feeds.len(), Ordering::Relaxed);
        (receiver, buffered)
    }

    fn close(&self, client: u64) {
        let mut feeds = self.lock();
        feeds.retain(|feed| feed.client != client);
        self.watchers.store(feeds.len(), Ordering::Relaxed);
    }

    /// Sends `line` to every monitor; returns the clients dropped for holding more than
    /// [`FEED_LIMIT`] unsent bytes (the caller disconnects them).
    fn send(&self, line: &Bytes) -> Vec<u64> {
        let mut dropped = Vec::new();
        let mut feeds = self.lock();
        feeds.retain(|feed| {
            let held = feed.buffered.fetch_add(line.len(), Ordering::Relaxed) + line.len();
            if held > FEED_LIMIT {
                dropped.push(feed.client);
                return false;
            }
            // A closed receiver: its session is ending and drops the rest.
            feed.lines.send(line.clone()).is_ok()
        });
        self.watchers.store(feeds.len(), Ordering::Relaxed);
        dropped
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Sender>> {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Feed {
    /// Starts monitoring for client `client`.
    pub fn open(monitors: &Arc<Monitors>, client: u64) -> Feed {
        let (lines, buffered) = monitors.open(client);
        Feed {
            monitors: monitors.clone(),
            client,
            lines,
            buffered,
        }
    }

    /// The lines waiting, up to [`TAKE_PER_TURN`] bytes in one frame; `None` once the
    /// feed was dropped (the client is being disconnected).
    pub fn poll_lines(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let first = match self.lines.poll_recv(cx) {
            Poll::Ready(Some(line)) => line,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        let mut taken = first.len();
        let mut more = BytesMut::new();
        while taken < TAKE_PER_TURN {
            match self.lines.try_recv() {
                Ok(line) => {
                    if more.is_empty() {
                        more.extend_from_slice(&first);
                    }
                    taken += line.len();
                    more.extend_from_slice(&line);
                }
                Err(_) => break,
            }
        }
        self.buffered.fetch_sub(taken, Ordering::Relaxed);
        Poll::Ready(Some(if more.is_empty() {
            first
        } else {
            more.freeze()
        }))
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.monitors.close(self.client);
    }
}

/// Who sent a request, as its monitor line names it, and where its transaction stands.
pub struct Origin<'a> {
    /// The client's address.
    pub peer: &'a SocketAddr,
    /// The client's database.
    pub db: u32,
    /// The client's connection state: whether it monitors, what it queued in MULTI.
    pub state: &'a mut ConnState,
    pub transaction: &'a Transaction,
}

/// The request path's hook, called only while [`Monitors::watched`]: `access` is what the
/// session's access check decided. Shows the request to the monitors if Redis would, and
/// refuses a monitoring client's keyspace commands. As Redis, the commands queued in
/// MULTI are shown at EXEC, just before it (not at all when EXEC aborts).
#[cold]
pub fn observe(
    registry: &super::Registry,
    origin: Origin<'_>,
    access: Step,
    request: &Request,
    name: &FoldedName,
    spec: Option<&CommandSpec>,
) -> Step {
    let Step::Next = access else {
        return access;
    };
    let Some(spec) = spec.filter(|spec| spec.arity_ok(request.args.len())) else {
        return access;
    };
    let state = origin.state;
    let keyspace = spec.flags.has(CommandFlags::READONLY) || spec.is_write_or_may_replicate();
    if state.monitor.is_some() && keyspace {
        return Step::Reply(reply::error(reply::connection::MONITOR_KEYSPACE));
    }
    let transaction = origin.transaction;
    if transaction.queues(name, request.args.len()) {
        state.shown_at_exec.push(request.args.clone());
        return access;
    }
    let queued = match name.as_bytes() {
        b"exec" | b"discard" | b"reset" => std::mem::take(&mut state.shown_at_exec),
        _ => Vec::new(),
    };
    if spec.flags.0 & (CommandFlags::ADMIN | CommandFlags::SKIP_MONITOR) != 0 {
        return access;
    }
    let time = now();
    let mut lines = BytesMut::new();
    if name.as_bytes() == b"exec" && !transaction.aborted() {
        for args in &queued {
            lines.extend_from_slice(&line(time, origin.db, origin.peer, args));
        }
    }
    lines.extend_from_slice(&line(time, origin.db, origin.peer, &request.args));
    let dropped = registry.monitors().send(&lines.freeze());
    for client in dropped {
        crate::metrics::monitor_drop();
        tracing::info!(client, "dropping a monitor over its buffer");
        registry.kill_one(client);
    }
    access
}

/// Seconds and microseconds since the epoch.
fn now() -> (u64, u32) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (since.as_secs(), since.subsec_micros())
}

/// One MONITOR line, as a simple string frame: `+<secs>.<micros> [<db> <addr>] "arg"...`.
fn line((secs, micros): (u64, u32), db: u32, peer: &SocketAddr, args: &[Bytes]) -> Bytes {
    let size: usize = args.iter().map(|arg| arg.len() + 3).sum();
    let mut out = BytesMut::with_capacity(48 + size);
    out.put_slice(format!("+{secs}.{micros:06} [{db} {peer}]").as_bytes());
    let redacted = redacted_args(args);
    for (index, arg) in args.iter().enumerate() {
        out.put_u8(b' ');
        let shown = match redacted.contains(&index) {
            true => REDACTED,
            false => arg,
        };
        quote(&mut out, shown);
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// The positions Redis 7.0 redacts: AUTH's arguments, HELLO's AUTH user and password,
/// MIGRATE's AUTH password and AUTH2 user and password.
fn redacted_args(args: &[Bytes]) -> Vec<usize> {
    let name = &args[0];
    let is = |index: usize, word: &[u8]| args[index].eq_ignore_ascii_case(word);
    if name.eq_ignore_ascii_case(b"auth") {
        return (1..args.len()).collect();
    }
    let mut redacted = Vec::new();
    if name.eq_ignore_ascii_case(b"hello") {
        let mut index = 2;
        while index < args.len() {
            let more = args.len() - index - 1;
            if is(index, b"auth") && more >= 2 {
                redacted.extend([index + 1, index + 2]);
                index += 3;
            } else if is(index, b"setname") && more >= 1 {
                index += 2;
            } else {
                break;
            }
        }
    } else if name.eq_ignore_ascii_case(b"migrate") {
        // MIGRATE host port key db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw] [KEYS ...]
        let mut index = 6;
        while index < args.len() {
            let more = args.len() - index - 1;
            if is(index, b"auth") && more >= 1 {
                redacted.push(index + 1);
                index += 2;
            } else if is(index, b"auth2") && more >= 2 {
                redacted.extend([index + 1, index + 2]);
                index += 3;
            } else if is(index, b"keys") {
                break;
            } else {
                index += 1;
            }
        }
    }
    redacted
}

/// Appends `arg` quoted as Redis's `sdscatrepr` quotes it.
fn quote(out: &mut BytesMut, arg: &[u8]) {
    out.put_u8(b'"');
    for &byte in arg {
        match byte {
            b'\\' | b'"' => out.put_slice(&[b'\\', byte]),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            0x07 => out.put_slice(b"\\a"),
            0x08 => out.put_slice(b"\\b"),
            b' '..=b'~' => out.put_u8(byte),
            _ => out.put_slice(format!("\\x{byte:02x}").as_bytes()),
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&[u8]]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
    }

    fn shown(words: &[&[u8]]) -> String {
        let peer: SocketAddr = "127.0.0.1:60866".parse().unwrap();
        let line = line((1339518083, 107412), 0, &peer, &args(words));
        String::from_utf8(line.to_vec()).unwrap()
    }

    #[test]
    fn a_line_is_redis_format() {
        assert_eq!(
            shown(&[b"keys", b"*"]),
            "+1339518083.107412 [0 127.0.0.1:60866] \"keys\" \"*\"\r\n"
        );
        let peer: SocketAddr = "[::1]:7".parse().unwrap();
        let line = line((5, 42), 3, &peer, &args(&[b"ping"]));
        assert_eq!(&line[..], b"+5.000042 [3 [::1]:7] \"ping\"\r\n");
    }

    #[test]
    fn arguments_are_quoted_as_sdscatrepr() {
        assert_eq!(
            shown(&[b"set", b"a\"b\\c\n\r\t\x07\x08\x01\xff ~", b""]),
            "+1339518083.107412 [0 127.0.0.1:60866] \"set\" \"a\\\"b\\\\c\\n\\r\\t\\a\\b\\x01\\xff ~\" \"\"\r\n"
        );
    }

    #[test]
    fn passwords_are_redacted_as_redis_7() {
        let tail = |words: &[&[u8]]| shown(words).split_once("] ").unwrap().1.to_owned();
        assert_eq!(tail(&[b"AUTH", b"pw"]), "\"AUTH\" \"(redacted)\"\r\n");
        assert_eq!(
            tail(&[b"auth", b"user", b"pw"]),
            "\"auth\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            tail(&[b"hello", b"3", b"auth", b"u", b"p", b"setname", b"x"]),
            "\"hello\" \"3\" \"auth\" \"(redacted)\" \"(redacted)\" \"setname\" \"x\"\r\n"
        );
        assert_eq!(
            tail(&[b"hello", b"2", b"setname", b"x", b"AUTH", b"u", b"p"]),
            "\"hello\" \"2\" \"setname\" \"x\" \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            tail(&[b"migrate", b"h", b"1", b"k", b"0", b"10", b"copy", b"auth", b"pw"]),
            "\"migrate\" \"h\" \"1\" \"k\" \"0\" \"10\" \"copy\" \"auth\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            tail(&[b"migrate", b"h", b"1", b"", b"0", b"10", b"auth2", b"u", b"p", b"keys", b"auth"]),
            "\"migrate\" \"h\" \"1\" \"\" \"0\" \"10\" \"auth2\" \"(redacted)\" \"(redacted)\" \"keys\" \"auth\"\r\n"
        );
    }

    #[tokio::test]
    async fn a_monitor_over_its_limit_is_dropped_and_the_others_keep_their_lines() {
        let monitors = Arc::new(Monitors::default());
        let mut reader = Feed::open(&monitors, 1);
        let mut stalled = Feed::open(&monitors, 2);
        assert!(monitors.watched());
        let big = Bytes::from(vec![b'x'; FEED_LIMIT / 4 + 1]);
        let mut dropped = Vec::new();
        for _ in 0..4 {
            dropped.extend(monitors.send(&big));
            // The reader takes what it was sent.
            let taken = std::future::poll_fn(|cx| reader.poll_lines(cx)).await;
            assert_eq!(taken.map(|line| line.len()), Some(big.len()));
        }
        assert_eq!(dropped, vec![2]);
        assert_eq!(monitors.watchers.load(Ordering::Relaxed), 1);
        // The dropped feed ends after the lines it was sent.
        let mut left = 0;
        while let Some(lines) = std::future::poll_fn(|cx| stalled.poll_lines(cx)).await {
            left += lines.len();
        }
        assert_eq!(left, 3 * big.len());
        drop(reader);
        assert!(!monitors.watched());
    }
}
