//! A Sentinel-managed upstream: which node is the master, learned from the Sentinels and
//! followed through their failovers.
//!
//! The master is asked of the Sentinels in turn (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and
//! believed only once it says so itself (`ROLE` is `master`); until then no master is
//! known, commands wait like commands for an uncovered slot, and `/readyz` says why. A
//! subscriber per Sentinel (reconnecting with a capped backoff) follows the failover
//! events: when the leader starts promoting a replica (`+failover-state-send-slaveof-noone`)
//! new commands are held back, so nothing is written to the old master in the window where
//! the replica no longer copies it; `+switch-master` (or the end or abort of the failover,
//! or [`FAILOVER_HOLD`] passing) ends the hold and the master the Sentinels name from then
//! on takes new commands. Besides the events, the master is asked for again periodically
//! and whenever a command meets an error that may mean it moved (`READONLY`, a lost
//! connection): the topology's refresher does that, see [`super::Topology::refresh`].
//!
//! Invariants: commands already sent to the old master are never sent again (a reply lost
//! with its connection is reported as lost, as for any node); the Sentinels are reached with
//! their own credentials (`sentinel.username`/`password`), the master with the backend's;
//! one decision about the master is made at a time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::NodeStream;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::error::{SentinelAskError, SentinelError};
use super::Topology;
use crate::backend::ConnOptions;
use crate::config::Config;
use crate::protocol::encode::encode_request;
use crate::protocol::{AggregateKind, Proto, ReplyScanner, ReplyView};
use crate::route::{NodeAddr, SlotMap};

/// Longest time new commands are held back for a promotion under way. Sentinel finishes a
/// promotion within about a second of sending `REPLICAOF NO ONE` (it polls the replica every
/// second during a failover); past this, the Sentinels are asked again and their answer
/// serves, even if the failover is still going on.
pub const FAILOVER_HOLD: Duration = Duration::from_secs(5);
/// How long a question to one Sentinel, or a `ROLE` to the master, may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// Wait before resubscribing to a Sentinel after a failure; doubles up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The events followed. The leader of a failover publishes the promotion's start; every
/// Sentinel publishes `+switch-master` once it knows the new master.
const CHANNELS: [&str; 7] = [
    "+switch-master",
    "+failover-state-send-slaveof-noone",
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
];

/// What the proxy knows of a Sentinel group and the master it names.
pub(super) struct SentinelWatch {
    addresses: Vec<String>,
    master_name: String,
    /// How a connection to a Sentinel opens: its own credentials, the backend's timeout.
    options: ConnOptions,
    /// While a promotion is under way: when the hold of new commands ends at the latest.
    hold_until: Mutex<Option<Instant>>,
    /// The last master believed, to count switches.
    last_master: Mutex<Option<NodeAddr>>,
    /// One decision about the master at a time (a check and an event may race).
    deciding: tokio::sync::Mutex<()>,
}

impl SentinelWatch {
    /// The watch of `master_name` through `addresses`, with `config`'s Sentinel credentials.
    /// `tls`: the backend's TLS settings, used for the Sentinels too when `sentinel.tls` is set.
    pub(super) fn new(
        config: &Config,
        addresses: Vec<String>,
        master_name: String,
        tls: Option<Arc<crate::tls::NodeTls>>,
    ) -> Self {
        let options = ConnOptions {
            proto: Proto::Resp2,
            username: config.sentinel.username.clone().filter(|u| !u.is_empty()),
            password: config.sentinel.password.clone().map(|secret| secret.0),
            connect_timeout: config.connect_timeout(),
            limits: config.limits.protocol(),
            reconnect: false,
            prelude: None,
            read_timeout: None,
            tls: tls.filter(|_| config.sentinel.tls),
        };
        SentinelWatch {
            addresses,
            master_name,
            options,
            hold_until: Mutex::new(None),
            last_master: Mutex::new(None),
            deciding: tokio::sync::Mutex::new(()),
        }
    }

    /// The name the Sentinels monitor the master under.
    pub(super) fn master_name(&self) -> &str {
        &self.master_name
    }

    /// Whether new commands are held back for a promotion under way.
    pub(super) fn holding(&self) -> bool {
        let until = *self.hold_until.lock().unwrap_or_else(|e| e.into_inner());
        until.is_some_and(|until| Instant::now() < until)
    }

    fn set_hold(&self, until: Option<Instant>) {
        *self.hold_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    /// Asks the Sentinels in turn for the master and installs it once it says it is one.
    /// While a promotion is under way nothing changes: its end is an event of its own.
    pub(super) async fn discover(&self, topology: &Topology) -> Result<(), SentinelError> {
        let _one_at_a_time = self.deciding.lock().await;
        if self.holding() {
            return Ok(());
        }
        let mut errors = Vec::new();
        for sentinel in &self.addresses {
            match self.ask_master(sentinel).await {
                Ok(addr) => {
                    let source = format!("Sentinel {sentinel}");
                    return self.check_and_install(topology, &addr, &source).await;
                }
                Err(e) => errors.push((sentinel.clone(), e)),
            }
        }
        Err(SentinelError::Unanswered(errors))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` on one Sentinel.
    async fn ask_master(&self, sentinel: &str) -> Result<String, SentinelAskError> {
        let ask = async {
            let mut link = Link::open(sentinel, &self.options).await?;
            link.send(&[
                b"SENTINEL",
                b"GET-MASTER-ADDR-BY-NAME",
                self.master_name.as_bytes(),
            ])
            .await?;
            master_addr(&link.reply().await?, &self.master_name)
        };
        match tokio::time::timeout(ASK_TIMEOUT, ask).await {
            Ok(answer) => answer,
            Err(_) => Err(SentinelAskError::TimedOut),
        }
    }

    /// Installs `addr`, named by `source`, as the master if its `ROLE` says `master`; one that
    /// says otherwise is not a master to send writes to, and no master is known until one is.
    async fn check_and_install(
        &self,
        topology: &Topology,
        addr: &str,
        source: &str,
    ) -> Result<(), SentinelError> {
        let addr = topology.remapped(addr);
        let conn = topology.node(&addr, Proto::Resp2);
        let call = conn.call(Bytes::from_static(b"*1\r\n$4\r\nROLE\r\n"), false);
        let role = match tokio::time::timeout(ASK_TIMEOUT, call).await {
            Ok(Ok(reply)) => role_of(&reply)?,
            Ok(Err(e)) => {
                return Err(SentinelError::Unreachable {
                    addr,
                    named_by: source.into(),
                    source: e,
                })
            }
            Err(_) => return Err(SentinelError::RoleTimedOut { addr }),
        };
        if role == "master" {
            self.install(topology, Some(addr));
            return Ok(());
        }
        self.install(topology, None);
        Err(SentinelError::NotMaster {
            addr,
            named_by: source.into(),
            master_name: self.master_name.clone(),
            role,
        })
    }

    /// Makes `master` the one node every command goes to (`None`: no master known).
    fn install(&self, topology: &Topology, master: Option<NodeAddr>) {
        let current = topology.routing().map.masters().first().cloned();
        if current == master {
            return;
        }
        let map = match &master {
            Some(addr) => SlotMap::single(addr.clone()),
            None => SlotMap::empty(),
        };
        topology.install(map);
        crate::metrics::upstream_master(master.as_deref());
        let Some(master) = master else {
            return;
        };
        let mut last = self.last_master.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(previous) = last.as_ref().filter(|previous| **previous != master) {
            crate::metrics::upstream_switch();
            tracing::warn!(from = %previous, to = %master, name = %self.master_name, "upstream master switched");
        } else {
            tracing::info!(master = %master, name = %self.master_name, "upstream master found");
        }
        *last = Some(master);
    }

    /// Follows every Sentinel's events, forever.
    pub(super) async fn follow_all(&self, topology: &Topology) {
        let followers = self.addresses.iter().map(|s| self.follow(topology, s));
        futures_util::future::join_all(followers).await;
    }

    /// Follows one Sentinel's events, resubscribing after a failure.
    async fn follow(&self, topology: &Topology, sentinel: &str) {
        let mut backoff = BACKOFF_MIN;
        loop {
            match self.subscribe(sentinel).await {
                Ok(mut link) => {
                    backoff = BACKOFF_MIN;
                    // Events may have been missed while not subscribed.
                    topology.request_refresh();
                    let error = loop {
                        match link.reply().await {
                            Ok(frame) => {
                                if let Some((channel, text)) = message(&frame) {
                                    self.on_event(topology, &channel, &text).await;
                                }
                            }
                            Err(e) => break e,
                        }
                    };
                    tracing::warn!(%sentinel, %error, "Sentinel subscription lost");
                }
                Err(error) => tracing::debug!(%sentinel, %error, "cannot subscribe to Sentinel"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    async fn subscribe(&self, sentinel: &str) -> Result<Link, SentinelAskError> {
        let mut link = Link::open(sentinel, &self.options).await?;
        let mut request: Vec<&[u8]> = vec![b"SUBSCRIBE"];
        request.extend(CHANNELS.iter().map(|c| c.as_bytes()));
        link.send(&request).await?;
        Ok(link)
    }

    /// Acts on one Sentinel event about any master; events about other masters are ignored.
    async fn on_event(&self, topology: &Topology, channel: &str, text: &str) {
        match channel {
            "+switch-master" => {
                let Some(addr) = switched_to(text, &self.master_name) else {
                    return;
                };
                let _one_at_a_time = self.deciding.lock().await;
                self.set_hold(None);
                if let Err(error) = self
                    .check_and_install(topology, &addr, "+switch-master")
                    .await
                {
                    tracing::warn!(%error, "new master from +switch-master not usable yet");
                    topology.request_refresh();
                }
            }
            "+failover-state-send-slaveof-noone" if names_master(text, &self.master_name) => {
                let _one_at_a_time = self.deciding.lock().await;
                tracing::warn!(name = %self.master_name, "failover under way: holding new commands");
                self.set_hold(Some(Instant::now() + FAILOVER_HOLD));
                self.install(topology, None);
            }
            _ if names_master(text, &self.master_name) => {
                // The failover ended or was given up: ask which master serves now.
                self.set_hold(None);
                topology.request_refresh();
            }
            _ => {}
        }
    }
}

/// One connection to a Sentinel, opened like a node connection (same connect function).
struct Link {
    stream: NodeStream,
    buf: BytesMut,
    scanner: ReplyScanner,
}

impl Link {
    async fn open(addr: &str, options: &ConnOptions) -> Result<Link, SentinelAskError> {
        let (stream, buf) = crate::backend::connect(addr, options)
            .await
            .map_err(SentinelAskError::Connect)?;
        Ok(Link {
            stream,
            buf,
            scanner: ReplyScanner::new(options.limits),
        })
    }

    async fn send(&mut self, args: &[&[u8]]) -> Result<(), SentinelAskError> {
        self.stream
            .write_all(&encode_request(args))
            .await
            .map_err(SentinelAskError::Write)
    }

    /// The next frame the Sentinel sends (a reply or a published message), whole.
    async fn reply(&mut self) -> Result<Bytes, SentinelAskError> {
        loop {
            match self.scanner.next_frame_len(&self.buf) {
                Ok(Some(len)) => return Ok(self.buf.split_to(len).freeze()),
                Ok(None) => {}
                Err(e) => return Err(SentinelAskError::Protocol(e.0)),
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Err(SentinelAskError::Closed),
                Ok(_) => {}
                Err(e) => return Err(SentinelAskError::Read(e)),
            }
        }
    }
}

/// A string element's text.
fn text(view: &ReplyView<'_>) -> Option<String> {
    match view {
        ReplyView::Bulk(data) | ReplyView::Simple(data) => {
            Some(String::from_utf8_lossy(data).into_owned())
        }
        _ => None,
    }
}

/// The elements of an array or push frame (a RESP2 message is an array, a RESP3 one a push).
fn elements<'a>(view: &ReplyView<'a>) -> Option<Vec<ReplyView<'a>>> {
    match view {
        ReplyView::Aggregate(AggregateKind::Array | AggregateKind::Push, items) => {
            Some(items.clone().collect())
        }
        _ => None,
    }
}

/// `host:port` from a `GET-MASTER-ADDR-BY-NAME` reply (`[ip, port]`; null: no such master).
fn master_addr(frame: &[u8], name: &str) -> Result<String, SentinelAskError> {
    let view = ReplyView::parse(frame).map_err(|e| SentinelAskError::Protocol(e.0))?;
    match &view {
        ReplyView::Null => Err(SentinelAskError::NoSuchMaster { name: name.into() }),
        ReplyView::Error(data) => Err(SentinelAskError::Refused(
            String::from_utf8_lossy(data).into_owned(),
        )),
        _ => match elements(&view).as_deref() {
            Some([ip, port]) => match (text(ip), text(port)) {
                (Some(ip), Some(port)) => Ok(join_host_port(&ip, &port)),
                _ => Err(SentinelAskError::UnreadableAddress),
            },
            _ => Err(SentinelAskError::UnreadableAddress),
        },
    }
}

/// The role a `ROLE` reply names (`master`, `slave`, `sentinel`), or its error.
fn role_of(reply: &[u8]) -> Result<String, SentinelError> {
    let view = ReplyView::parse(reply).map_err(|e| SentinelError::Role(e.0))?;
    if let ReplyView::Error(data) = &view {
        let data = String::from_utf8_lossy(data);
        return Err(SentinelError::Role(format!("ROLE refused: {data}")));
    }
    elements(&view)
        .and_then(|items| items.first().and_then(text))
        .ok_or_else(|| SentinelError::Role("unreadable ROLE reply".into()))
}

/// `(channel, text)` of a published message (`["message", channel, text]`).
fn message(frame: &[u8]) -> Option<(String, String)> {
    let view = ReplyView::parse(frame).ok()?;
    match elements(&view)?.as_slice() {
        [kind, channel, body] if text(kind).as_deref() == Some("message") => {
            Some((text(channel)?, text(body)?))
        }
        _ => None,
    }
}

/// The new master of a `+switch-master` message (`name old-ip old-port new-ip new-port`)
/// when it is about `name`.
fn switched_to(text: &str, name: &str) -> Option<String> {
    let words: Vec<&str> = text.split(' ').collect();
    match words.as_slice() {
        [master, _, _, ip, port] if *master == name => Some(join_host_port(ip, port)),
        _ => None,
    }
}

/// Whether an event's instance details (`master NAME ip port`, or `<type> <name> ip port @
/// NAME ip port` for a replica or Sentinel) are about the master named `name`.
fn names_master(text: &str, name: &str) -> bool {
    let words: Vec<&str> = text.split(' ').collect();
    match words.iter().position(|w| *w == "@") {
        Some(at) => words.get(at + 1) == Some(&name),
        None => words.first() == Some(&"master") && words.get(1) == Some(&name),
    }
}

/// `ip:port`, with brackets around an IPv6 address.
fn join_host_port(ip: &str, port: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_address_comes_from_the_sentinel_reply() {
        let reply = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n";
        assert_eq!(master_addr(reply, "m").unwrap(), "127.0.0.1:6379");
        let reply = b"*2\r\n$3\r\n::1\r\n$4\r\n6379\r\n";
        assert_eq!(master_addr(reply, "m").unwrap(), "[::1]:6379");
        let none = master_addr(b"*-1\r\n", "ragmaster")
            .unwrap_err()
            .to_string();
        assert_eq!(none, "monitors no master named 'ragmaster'");
        let refused = master_addr(b"-NOAUTH Authentication required.\r\n", "m");
        assert_eq!(
            refused.unwrap_err().to_string(),
            "NOAUTH Authentication required."
        );
    }

    #[test]
    fn role_is_the_first_element_of_the_role_reply() {
        let master = Bytes::from_static(b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
        assert_eq!(role_of(&master).unwrap(), "master");
        let replica = Bytes::from_static(
            b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:14\r\n",
        );
        assert_eq!(role_of(&replica).unwrap(), "slave");
        assert!(role_of(&Bytes::from_static(b"-NOPERM no\r\n")).is_err());
    }

    #[test]
    fn events_are_read_for_the_watched_master_only() {
        let published = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n\
            $31\r\nm 127.0.0.1 6379 127.0.0.1 6380\r\n";
        let (channel, text) = message(published).unwrap();
        assert_eq!(channel, "+switch-master");
        assert_eq!(switched_to(&text, "m").as_deref(), Some("127.0.0.1:6380"));
        assert_eq!(switched_to(&text, "other"), None);
        let confirm = b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
        assert_eq!(message(confirm), None);
        // The same message as a RESP3 push.
        let pushed = b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nt\r\n";
        assert_eq!(message(pushed), Some(("c".to_owned(), "t".to_owned())));

        let promoting = "slave 127.0.0.1:6380 127.0.0.1 6380 @ m 127.0.0.1 6379";
        assert!(names_master(promoting, "m"));
        assert!(!names_master(promoting, "127.0.0.1"));
        assert!(names_master("master m 127.0.0.1 6379", "m"));
        assert!(!names_master("master mm 127.0.0.1 6379", "m"));
    }
}
