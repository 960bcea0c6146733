//! The proxy's own tracking connections: one RESP3 connection per master with
//! `CLIENT TRACKING ON BCAST` and no prefix, over which the master reports every key
//! modified, expired, evicted or flushed, whoever wrote it (this proxy's clients, other
//! proxies, clients connected straight to the master).
//!
//! Why BCAST without a prefix rather than tracking what the proxy read: the proxy's reads
//! travel on shared connections, so the master cannot tell which of them a tracking
//! client owes; and a per-key table on the master would have to be filled by reading on
//! the tracking connection itself. BCAST costs one report per modified key (batched by
//! the master per event-loop turn) and leaves the "who read what" to the proxy.
//!
//! Invariants: a [`Report::Up`] for a master is sent only once its `CLIENT TRACKING`
//! answered `+OK`, so every write the master runs after that is reported; a lost or
//! refused connection sends [`Report::Down`] and is opened again after a pause, as long
//! as the watch lives. Dropping the [`InvalidationWatch`] closes every connection.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::backend::{self, ConnOptions};
use crate::protocol::{Proto, ReplyScanner, ReplyView};
use crate::route::NodeAddr;
use crate::topology::Topology;

/// How long a lost tracking connection waits before it is opened again: short, as every
/// tracking client was told to drop what it caches and caches nothing trustworthy until
/// the connection is back.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// The read buffer grows by this much when it runs low.
const READ_CHUNK: usize = 16 * 1024;
/// What turns a fresh connection into a tracking one.
const TRACKING_ON: &[u8] = b"*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n$5\r\nBCAST\r\n";

/// What the tracking connections report.
#[derive(Debug, PartialEq, Eq)]
pub enum Report {
    /// The master reports every write from now on.
    Up(NodeAddr),
    /// The connection to the master was lost or could not be made tracking: writes there
    /// go unseen until its next `Up`.
    Down(NodeAddr),
    /// These keys (as stored on the master) were modified.
    Keys(Vec<Bytes>),
    /// A database was flushed on a master: every key may have changed.
    Flush,
}

/// The tracking connections to every master of the current slot map, kept in step with
/// it. Closed when dropped.
pub struct InvalidationWatch {
    _stop: watch::Sender<()>,
}

impl InvalidationWatch {
    /// Opens a tracking connection to every master of `topology`, and to each new one as
    /// the master set changes; their reports go to `reports`.
    pub fn start(
        topology: std::sync::Arc<Topology>,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Self {
        let (stop, stopped) = watch::channel(());
        tokio::spawn(follow_masters(topology, reports, stopped));
        InvalidationWatch { _stop: stop }
    }
}

/// Keeps one connection task per master; a master that left the map has its task
/// stopped, a new one gets a task.
async fn follow_masters(
    topology: std::sync::Arc<Topology>,
    reports: mpsc::UnboundedSender<Report>,
    mut stopped: watch::Receiver<()>,
) {
    let mut changes = topology.watch_masters();
    let mut links: HashMap<NodeAddr, watch::Sender<()>> = HashMap::new();
    loop {
        let masters: Vec<NodeAddr> = topology.routing().map.masters().to_vec();
        links.retain(|addr, _| masters.contains(addr));
        for addr in masters {
            links.entry(addr.clone()).or_insert_with(|| {
                let (stop, link_stopped) = watch::channel(());
                let opts = topology.conn_options(Proto::Resp3);
                tokio::spawn(keep_link(addr, opts, reports.clone(), link_stopped));
                stop
            });
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = stopped.changed() => return,
        }
    }
}

/// One master's tracking connection, opened again after each loss until stopped.
async fn keep_link(
    addr: NodeAddr,
    opts: ConnOptions,
    reports: mpsc::UnboundedSender<Report>,
    mut stopped: watch::Receiver<()>,
) {
    // Told once per outage at `warn` (tracking clients cache nothing from this master
    // meanwhile); the attempts that follow, every RECONNECT_PAUSE, at `debug`.
    let mut told = false;
    loop {
        let failure = tokio::select! {
            failure = track(&addr, &opts, &reports) => failure,
            _ = stopped.changed() => {
                // The master left the map: should it come back, it is not taken as
                // reporting before its new connection says so.
                let _ = reports.send(Report::Down(addr));
                return;
            }
        };
        // A connection that had been reporting starts a new outage.
        told &= !failure.ended_while_up;
        if told {
            tracing::debug!(addr = %addr, error = %failure, "tracking connection still down");
        } else {
            tracing::warn!(addr = %addr, error = %failure, "no tracking connection to this master: tracking clients cache nothing read from it until it is back");
            told = true;
        }
        if reports.send(Report::Down(addr.clone())).is_err() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// Why a tracking connection stopped, and whether it had been reporting.
struct Failure {
    reason: String,
    ended_while_up: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Connects, turns tracking on, then reports what the master pushes; returns why it
/// stopped.
async fn track(
    addr: &NodeAddr,
    opts: &ConnOptions,
    reports: &mpsc::UnboundedSender<Report>,
) -> Failure {
    let mut up = false;
    let reason = report_pushes(addr, opts, reports, &mut up).await;
    Failure {
        reason,
        ended_while_up: up,
    }
}

/// [`track`]'s work; sets `up` once the master reports.
async fn report_pushes(
    addr: &NodeAddr,
    opts: &ConnOptions,
    reports: &mpsc::UnboundedSender<Report>,
    up: &mut bool,
) -> String {
    let (stream, mut buf) = match backend::connect(addr, opts).await {
        Ok(connected) => connected,
        Err(reason) => return reason,
    };
    let (mut read, mut write) = stream.into_split();
    if let Err(error) = write.write_all(TRACKING_ON).await {
        return format!("write failed: {error}");
    }
    let mut scanner = ReplyScanner::new(opts.limits);
    let mut answered = false;
    loop {
        loop {
            let len = match scanner.next_frame_len(&buf) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(error) => return format!("unreadable frame: {error}"),
            };
            let frame = buf.split_to(len).freeze();
            if !answered {
                if &frame[..] != b"+OK\r\n" {
                    return format!(
                        "CLIENT TRACKING refused: {}",
                        String::from_utf8_lossy(&frame)
                    );
                }
                answered = true;
                *up = true;
                if reports.send(Report::Up(addr.clone())).is_err() {
                    return "no longer wanted".into();
                }
                continue;
            }
            if let Some(report) = invalidation(&frame) {
                if reports.send(report).is_err() {
                    return "no longer wanted".into();
                }
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match read.read_buf(&mut buf).await {
            Ok(0) => return "connection closed by the node".into(),
            Ok(_) => {}
            Err(error) => return format!("read failed: {error}"),
        }
    }
}

/// The report an `invalidate` push makes: `>2 invalidate [keys]`, or `>2 invalidate _`
/// (a flush). `None` for any other frame. Pure; never panics on any input.
pub fn invalidation(frame: &[u8]) -> Option<Report> {
    if frame.first() != Some(&b'>') {
        return None;
    }
    let [kind, keys] = ReplyView::element_frames(frame)?.exactly::<2>()?;
    if ReplyView::parse(kind).ok()? != ReplyView::Bulk(b"invalidate") {
        return None;
    }
    // `_`, or the RESP2 forms of a null, `*-1` and `$-1`.
    if ReplyView::parse(keys).ok()? == ReplyView::Null {
        return Some(Report::Flush);
    }
    let keys = ReplyView::element_frames(keys).filter(|_| keys.first() == Some(&b'*'))?;
    keys.map(|key| match ReplyView::parse(key) {
        Ok(ReplyView::Bulk(key)) => Some(Bytes::copy_from_slice(key)),
        _ => None,
    })
    .collect::<Option<Vec<_>>>()
    .map(Report::Keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(words: &[&str]) -> Report {
        Report::Keys(
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect(),
        )
    }

    #[test]
    fn an_invalidate_push_names_its_keys_or_a_flush() {
        let two = b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$3\r\nb:c\r\n";
        assert_eq!(invalidation(two), Some(keys(&["a", "b:c"])));
        let flush = b">2\r\n$10\r\ninvalidate\r\n_\r\n";
        assert_eq!(invalidation(flush), Some(Report::Flush));
        let empty = b">2\r\n$10\r\ninvalidate\r\n*0\r\n";
        assert_eq!(invalidation(empty), Some(keys(&[])));
        for resp2_null in [&b"*-1\r\n"[..], b"$-1\r\n"] {
            let flush = [&b">2\r\n$10\r\ninvalidate\r\n"[..], resp2_null].concat();
            assert_eq!(invalidation(&flush), Some(Report::Flush));
        }
    }

    #[test]
    fn other_frames_and_broken_ones_are_not_invalidations() {
        for frame in [
            &b"+OK\r\n"[..],
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\na\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$-3\r\na\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*99999999999\r\n",
            b">2\r\n$10\r\ninvalidate\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*-2\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n+a\r\n",
            b">2\r\n$10\r\ninvalidate\r\n~1\r\n$1\r\na\r\n",
            b">2\r\n+invalidate\r\n*0\r\n",
            b"*2\r\n$10\r\ninvalidate\r\n*0\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*0\r\n:1\r\n",
        ] {
            assert_eq!(
                invalidation(frame),
                None,
                "{:?}",
                String::from_utf8_lossy(frame)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(frame in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let mut framed = b">2\r\n$10\r\ninvalidate\r\n".to_vec();
            framed.extend_from_slice(&frame);
            let _ = invalidation(&framed);
            let _ = invalidation(&frame);
        }
    }
}
