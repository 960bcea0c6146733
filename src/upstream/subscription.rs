//! Subscription connections: one connection to one node, private to one client, that
//! carries its subscriptions there.
//!
//! Unlike a pipelined `NodeConn`, a subscribed connection receives frames nobody asked
//! for, so its task reads every frame and sorts it: the confirmations (or the one error)
//! answering the command at the head of its FIFO complete that command; messages go to the
//! client's [`Sink`]; a `sunsubscribe` nobody asked for means the node gave up a slot and is
//! reported so the channel can be subscribed again elsewhere.
//!
//! Invariants: commands are answered in the order they were sent; the sink never holds
//! more than its byte limit (past it, the client is marked overflowed and nothing more is
//! queued); the task ends when every handle is gone and nothing is pending, or when the
//! connection fails, in which case pending commands are dropped (their callers see an
//! error) and a [`Event::Down`] is sent.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify};

use super::pushes::{self, Element};
use crate::backend::{self, ConnOptions};
use crate::protocol::ReplyScanner;
use crate::route::NodeAddr;

/// The read buffer grows by this much when it runs low.
const READ_CHUNK: usize = 16 * 1024;

/// Which messages a link relays, so that each message reaches the client once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The one connection for ordinary channels and patterns: keyspace notifications it
    /// sees (through a pattern such as `*`) are relayed by the keyspace links instead.
    Regular,
    /// A connection to one master for keyspace subscriptions: only keyspace
    /// notifications (an ordinary PUBLISH reaches every node, and the regular link).
    Keyspace,
    /// A shard-channel connection: everything.
    Shard,
}

/// What a link reports to its client's session.
#[derive(Debug)]
pub enum Event {
    /// A message (or other push), from a link of this role.
    Push(Bytes, Role),
    /// The node unsubscribed the client from a shard channel (its slot moved away).
    ShardLost { channel: Bytes },
    /// The link's connection failed or could not be opened.
    Down { link: u64, reason: String },
}

/// The sending side of one client's relay queue, shared by all its links.
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::UnboundedSender<Event>,
    state: Arc<SinkState>,
}

/// The byte count and overflow flag shared by a [`Sink`] and the session draining it.
pub struct SinkState {
    /// Bytes of `Push` events queued and not yet taken by the session.
    pub buffered: AtomicUsize,
    /// Set once the limit was exceeded; the session then closes the client.
    pub overflowed: AtomicBool,
    /// Wakes the session when `overflowed` is set.
    pub wake: Notify,
    limit: usize,
    client: u64,
}

impl Sink {
    /// A queue of at most `limit` bytes for client `client` (named in the log line).
    pub fn new(limit: usize, client: u64) -> (Sink, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(SinkState {
            buffered: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            wake: Notify::new(),
            limit,
            client,
        });
        (Sink { tx, state }, rx)
    }

    /// The state shared with the session.
    pub fn state(&self) -> &Arc<SinkState> {
        &self.state
    }

    /// Queues `event`; false when the session is gone or the client overflowed.
    fn send(&self, event: Event) -> bool {
        if self.state.overflowed.load(Ordering::Relaxed) {
            return false;
        }
        if let Event::Push(frame, _) = &event {
            let before = self
                .state
                .buffered
                .fetch_add(frame.len(), Ordering::Relaxed);
            if before + frame.len() > self.state.limit {
                if !self.state.overflowed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        client = self.state.client,
                        limit = self.state.limit,
                        "closing a subscriber that does not read its messages (pubsub.max_buffer_bytes reached)"
                    );
                }
                self.state.wake.notify_one();
                return false;
            }
        }
        self.tx.send(event).is_ok()
    }
}

/// A command for a link: raw RESP bytes, and how its answer is recognised.
struct Command {
    raw: Bytes,
    /// The confirmation kind (`subscribe`, ...) the answer consists of.
    kind: &'static [u8],
    /// How many confirmation frames answer it (one error frame answers it too).
    expected: usize,
    reply: oneshot::Sender<Bytes>,
}

/// A handle to one subscription connection; cheap to clone. The connection closes once
/// every handle is dropped and its pending commands are answered.
#[derive(Clone)]
pub struct Link {
    /// Unique within the client, to match [`Event`]s to links.
    pub id: u64,
    /// The node it is connected to.
    pub addr: NodeAddr,
    commands: mpsc::UnboundedSender<Command>,
}

impl Link {
    /// Starts the link's task; it connects right away.
    pub fn spawn(id: u64, addr: NodeAddr, opts: ConnOptions, sink: Sink, role: Role) -> Link {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(id, addr.clone(), opts, rx, sink, role));
        Link { id, addr, commands }
    }

    /// Sends `raw` and returns the frames answering it, concatenated: `expected`
    /// confirmations of `kind`, or one error frame. `Err` when the connection failed first.
    pub fn call(
        &self,
        raw: Bytes,
        kind: &'static [u8],
        expected: usize,
    ) -> impl std::future::Future<Output = Result<Bytes, String>> + Send + 'static {
        // Queued now, not at the first poll: commands go out in the order of these calls.
        let (reply, answer) = oneshot::channel();
        let command = Command {
            raw,
            kind,
            expected,
            reply,
        };
        let sent = self.commands.send(command).is_ok();
        let addr = self.addr.clone();
        async move {
            if !sent {
                return Err(format!("{addr}: subscription connection closed"));
            }
            answer
                .await
                .map_err(|_| format!("{addr}: subscription connection lost"))
        }
    }
}

/// A command written and waiting for its answer.
struct Pending {
    kind: &'static [u8],
    left: usize,
    collected: BytesMut,
    reply: oneshot::Sender<Bytes>,
}

/// How a link ended.
enum End {
    /// Every handle is gone, or the session is.
    Released,
    /// The connection failed.
    Failed(String),
}

async fn run(
    id: u64,
    addr: NodeAddr,
    opts: ConnOptions,
    mut commands: mpsc::UnboundedReceiver<Command>,
    sink: Sink,
    role: Role,
) {
    let end = match backend::connect(&addr, &opts).await {
        Ok((stream, leftover)) => serve(stream, leftover, &mut commands, &sink, opts, role).await,
        Err(reason) => End::Failed(reason),
    };
    if let End::Failed(reason) = end {
        tracing::debug!(addr = %addr, error = %reason, "subscription connection failed");
        sink.send(Event::Down { link: id, reason });
    }
}

async fn serve(
    stream: backend::NodeStream,
    mut buf: BytesMut,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    sink: &Sink,
    opts: ConnOptions,
    role: Role,
) -> End {
    let (mut read, mut write) = stream.into_split();
    let mut scanner = ReplyScanner::new(opts.limits);
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut released = false;
    loop {
        loop {
            match scanner.next_frame_len(&buf) {
                Ok(Some(len)) => {
                    let frame = buf.split_to(len).freeze();
                    if !on_frame(frame, &mut pending, sink, role) {
                        return End::Released;
                    }
                }
                Ok(None) => break,
                Err(error) => return End::Failed(format!("unreadable frame: {error}")),
            }
        }
        if released && pending.is_empty() {
            return End::Released;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            command = commands.recv(), if !released => match command {
                Some(command) => {
                    if let Err(error) = write.write_all(&command.raw).await {
                        return End::Failed(format!("write failed: {error}"));
                    }
                    pending.push_back(Pending {
                        kind: command.kind,
                        left: command.expected.max(1),
                        collected: BytesMut::new(),
                        reply: command.reply,
                    });
                }
                None => released = true,
            },
            read = read.read_buf(&mut buf) => match read {
                Ok(0) => return End::Failed("connection closed by the node".into()),
                Ok(_) => {}
                Err(error) => return End::Failed(format!("read failed: {error}")),
            },
        }
    }
}

/// Sorts one frame; false when the session is gone and the link should stop.
fn on_frame(frame: Bytes, pending: &mut VecDeque<Pending>, sink: &Sink, role: Role) -> bool {
    if frame.first() == Some(&b'-') {
        // Redis answers a refused command with one error, whatever its argument count.
        match pending.pop_front() {
            Some(head) => {
                let _ = head.reply.send(frame);
            }
            None => {
                tracing::debug!("error frame on a subscription connection with nothing pending")
            }
        }
        return true;
    }
    let elems = pushes::elements(&frame).unwrap_or_default();
    let word = pushes::kind_word(&elems).unwrap_or_default();
    if !pushes::is_confirmation(word) {
        let channel_at = match word {
            b"message" => Some(1),
            b"pmessage" => Some(2),
            _ => None,
        };
        let keyspace = match channel_at.and_then(|at| elems.get(at)) {
            Some(Element::Bulk(channel)) => Some(pushes::is_keyspace_channel(channel)),
            _ => None,
        };
        // Each message has one link that relays it: see `Role`.
        let elsewhere = matches!(
            (role, keyspace),
            (Role::Regular, Some(true)) | (Role::Keyspace, Some(false))
        );
        return elsewhere || sink.send(Event::Push(frame, role));
    }
    if let Some(head) = pending.front_mut() {
        if head.kind == word {
            head.collected.extend_from_slice(&frame);
            head.left -= 1;
            if head.left == 0 {
                if let Some(done) = pending.pop_front() {
                    let _ = done.reply.send(done.collected.freeze());
                }
            }
            return true;
        }
    }
    if word == b"sunsubscribe" {
        if let Some(Element::Bulk(channel)) = elems.get(1) {
            let channel = frame.slice_ref(channel);
            return sink.send(Event::ShardLost { channel });
        }
    }
    tracing::debug!("unexpected confirmation on a subscription connection");
    true
}
