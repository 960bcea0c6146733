//! One client connection: read, decode, admit, and write replies in request order.
//!
//! A [`Session`] is the connection's state, grouped by job: the connection and its buffers
//! ([`Conn`]), what the client may send ([`Flow`]), the order replies keep ([`Order`]),
//! who the client is ([`Identity`]), its subscriptions ([`Subscribers`]) and its
//! transaction ([`Tx`]). [`Session::run`] is a short loop: admit what was read (`admit`,
//! after the checks in `access`), flush and decide whether to go on (`wait`), wait for the
//! next event, handle it (`woken`).
//!
//! Requests are admitted as soon as they are decoded, so a pipeline runs in parallel
//! across masters; the [`Pipeline`] sends plain forwards in one batch per master and
//! hands replies back in request order. As Redis answers the commands of one read with
//! one write, the replies of a read leave together: those in first wait for the plain
//! forwards of the same read (a round trip to their masters), never for a future, a retry
//! after a redirect or a later read, nor past 64 KiB. At most `max_pipeline` commands of
//! one client are in flight; past that the session stops reading (TCP back-pressure) until
//! replies drain.
//!
//! Sequence points run alone: EXEC, WATCH and WAIT (see `Transaction::is_sequence_point`),
//! commands that may block (BLPOP, XREAD BLOCK...) and clients' scripts (EVAL, FCALL...),
//! which run on connections of their own, SORT with patterns and cross-slot stores and
//! moves (several steps over several masters), and HELLO and RESET (after a protocol
//! switch requests go to the other protocol's connections). Each waits for every earlier
//! reply, and nothing after it starts until it is answered, so a pipeline takes effect in
//! order, as on one Redis, where a blocked client's next command waits for it.

mod access;
mod admit;
mod database;
mod idle;
mod wait;
mod woken;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::time::Instant;

use crate::acl::{Freshness, LiveUser};
use crate::buffer::Resizer;
use crate::dispatch::{BlockedOn, Proxy};
use crate::protocol::{Proto, Request, RequestDecoder};
use crate::reload::Live;
use crate::topology::Routing;

use self::idle::IdleTimer;
use super::flow::{ClientFlow, Gate};
use super::limits::{ClientLimits, SoftWatch};
use super::local::{ConnState, ReplyMode};
use super::pipeline::{Micros, Pipeline};
use super::pubsub::PubSub;
use super::registry::{ClientGuard, PostsSeen, Registry, Subscriptions};
use super::stream::{ClientIo, ClientStream, Ends};
use super::transaction::{LocalCommands, Transaction};

/// How much one read takes from a client's socket (into the worker's scratch buffer).
const READ_BUFFER: usize = 16 * 1024;
/// What a client's input buffer usually holds at most: requests are copied into it from the
/// scratch buffer, so past a few KiB it holds a large request, and it is replaced once that
/// has been decoded.
const USUAL_INPUT: usize = 1024;
/// Unsent replies past which the session stops reading new requests, so a client that
/// reads slowly is slowed down by TCP instead of growing the proxy's memory.
const OUTPUT_BACKPRESSURE: usize = 256 * 1024;
/// How long a closing connection keeps reading (and discarding) so the close is a FIN
/// after the last reply, not a reset that could destroy replies still in flight.
const CLOSE_LINGER: Duration = Duration::from_millis(500);
/// Undecoded input past which the session stops reading while a sequence point is in
/// flight (a BLPOP may wait forever; the requests behind it wait in TCP instead). Below
/// it, reading goes on, so a client that disconnects meanwhile is noticed.
const HELD_INPUT: usize = 1024 * 1024;
/// Replies waiting for the rest of their read leave anyway past this size: large replies
/// gain little from sharing a write, and the session need not hold them.
const HELD_OUTPUT: usize = 64 * 1024;
/// How long the activity others see (CLIENT LIST's `idle=`, in whole seconds) may lag
/// behind the client's: a read or write shows it only once this much has passed since it
/// was last shown, sparing most of them the computation (Redis's own `idle=` counts from a
/// clock it reads ten times a second).
const ACTIVITY_GRAIN: Duration = Duration::from_millis(100);
/// How long a draining session goes on answering requests (with an error) before it
/// closes, so a request sent just as the drain began gets a reply, not a silent close.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// Serves one client until it disconnects, sends QUIT, breaks the protocol, idles past
/// `timeout`, exceeds its output buffer limit, or the proxy drains.
pub async fn serve(stream: ClientStream, ends: Ends, live: Arc<Live>, registry: Arc<Registry>) {
    // Read before the snapshot: a reload in between is followed at once.
    let reloads = live.reloads();
    let snapshot = live.proxy();
    // The send buffer is set at connect, as TCP_NODELAY and the keepalive are by the
    // listener (see `server::accepting`); the other limits follow reloads (see
    // `ClientLimits`).
    if snapshot.config.limits.client_send_buffer_bytes > 0 {
        let socket = socket2::SockRef::from(stream.socket());
        let _ = socket.set_send_buffer_size(snapshot.config.limits.client_send_buffer_bytes);
    }
    let user = super::stream::initial_user(&stream, &snapshot);
    // Where a blocking command of the client waits (CLIENT UNBLOCK).
    let blocked = Arc::new(BlockedOn::default());
    let guard = registry.register(ends.peer, ends.local, user.as_deref(), blocked.clone());
    let signals = guard.signals();
    tokio::pin!(signals);
    let client = Client {
        live: &live,
        registry: &registry,
        guard: &guard,
        blocked,
        shown_command: 0,
        mail_seen: PostsSeen::none(&registry),
    };
    let mut session = Session::new(stream, ends.peer, client, reloads, snapshot, user);
    session.run(signals).await;
}

/// One client's connection and everything the proxy keeps about it.
///
/// Laid out as declared (`repr(C)`, here and in its parts), in the order a turn reads it:
/// the pipeline and the flags every turn looks at first, then the connection, and what only
/// a read's requests need (the transaction, the identity) last; in each part, what is
/// rarely read (the peer's address) at its end. At a thousand clients each turn finds the
/// session out of the cache, and every line it touches is a miss: this order measured
/// 4 % fewer last-level and 7 % fewer first-level misses per request than the compiler's.
#[repr(C)]
struct Session<'a> {
    order: Order,
    client: Client<'a>,
    end: Ending,
    flow: Flow<'a>,
    conn: Conn,
    subs: Subscribers<'a>,
    tx: Tx,
    ident: Identity,
}

/// The client among the others: the live configuration, the registry of clients and its
/// entry there.
#[repr(C)]
struct Client<'a> {
    live: &'a Live,
    registry: &'a Registry,
    guard: &'a ClientGuard,
    /// Where a blocking command of the client waits (CLIENT UNBLOCK).
    blocked: Arc<BlockedOn>,
    /// The command others were last shown as the client's latest (CLIENT LIST's `cmd=`),
    /// plus one: the entry, a line out of the cache at a thousand clients, is written only
    /// when the command changes.
    shown_command: usize,
    /// When the session last looked for mail after a read.
    mail_seen: PostsSeen,
}

impl Client<'_> {
    /// Shows `command` (a command-table index) as the client's latest.
    fn ran(&mut self, command: usize) {
        if self.shown_command != command + 1 {
            self.shown_command = command + 1;
            self.guard.ran(command);
        }
    }
}

/// The connection: the socket (see `ClientIo`), the buffers either side of the decoder,
/// and when the client was last active.
#[repr(C)]
struct Conn {
    io: ClientIo,
    output: BytesMut,
    input: BytesMut,
    /// The start time the direct requests of the current pass share (one clock read, and
    /// one conversion, for all): the read's, after a read; taken when first needed
    /// otherwise.
    pass_started: Option<Micros>,
    /// The last read from or write to the client: idle time counts from it, as in Redis.
    last_active: Instant,
    /// When others are next shown the client's activity (see `ACTIVITY_GRAIN`).
    show_activity_at: Instant,
    counted: crate::metrics::ClientConnection,
    // Give back what a burst of large requests or replies grew the two buffers to.
    input_resizer: Resizer<USUAL_INPUT>,
    output_resizer: Resizer<READ_BUFFER>,
    decoder: RequestDecoder,
    /// Where `timeout` is set, the timer of the client's idle deadline: after what every
    /// request reads, as a client without a timeout never reads it.
    idle_timer: IdleTimer,
    peer: SocketAddr,
}

/// What the client owes, against its budget and the process's (see `flow`), whether it
/// may send its next request, and the limits a reload changes.
#[repr(C)]
struct Flow<'a> {
    budget: ClientFlow<'a>,
    limits: ClientLimits,
    /// The reload count `limits` (and the identity's snapshot) were read at.
    reloads: u64,
    soft_watch: SoftWatch,
    gate: Gate,
}

/// The requests in flight and what keeps them in order.
#[repr(C)]
struct Order {
    in_flight: Pipeline,
    /// A decoded request waiting for the replies before it (a sequence point, a slot
    /// move) or for a CLIENT PAUSE to end. Boxed: it is rare, and inline its 168 bytes
    /// would sit between the fields every turn reads.
    held: Option<Box<Request>>,
    /// The routing snapshot of the current pass while no slot changes master: the
    /// requests of a pipeline need not each load the shared one. Not held while waiting
    /// (see `Topology::routing_since_moves`).
    pass_routing: Option<(u64, arc_swap::Guard<Arc<Routing>>)>,
    /// The end of the CLIENT PAUSE that holds the request in `held`.
    paused_until: Option<Instant>,
    /// The topology's slot-move count when the oldest request in flight was routed.
    routed_moves: u64,
    /// Whether a sequence point is in flight, so nothing after it may start yet.
    sequence_point: bool,
}

/// Who the client is, under which configuration.
#[repr(C)]
struct Identity {
    /// The configuration requests start on, replaced when a reload has served another.
    snapshot: Arc<Proxy>,
    /// The client's user under `snapshot`; looked up again after a reload and when a
    /// local command (AUTH, HELLO, RESET) logged the client in as someone else.
    user: Option<Option<Arc<LiveUser>>>,
    state: ConnState,
}

/// The client's subscriptions, and what others see of them. What others see comes first,
/// beside the connection's peer address: both are rarely read, and the subscriptions, which
/// every request looks at, then begin the run of lines a request reads of the session's last
/// parts (the transaction, the identity).
#[repr(C)]
struct Subscribers<'a> {
    shown: ShownSubscriptions<'a>,
    pubsub: PubSub,
}

/// The client's transaction, and an EXEC in flight whose queued connection commands the
/// session answers once the block's reply is in: the EXEC's sequence number, and those
/// commands.
#[repr(C)]
struct Tx {
    transaction: Transaction,
    exec_locals: Option<(u64, LocalCommands)>,
}

/// How the session is ending, if it is.
#[repr(C)]
struct Ending {
    /// The connection must end after the replies already queued (QUIT, bad input).
    closing: bool,
    /// The client closed its side: what it sent before is answered, then it closes.
    peer_closed: bool,
    draining: bool,
    /// When a draining session closes (see `DRAIN_GRACE`).
    drain_until: Option<Instant>,
}

impl<'a> Session<'a> {
    fn new(
        stream: ClientStream,
        peer: SocketAddr,
        client: Client<'a>,
        reloads: u64,
        snapshot: Arc<Proxy>,
        user: Option<String>,
    ) -> Self {
        let Client {
            registry, guard, ..
        } = client;
        let config = &snapshot.config;
        let io = stream.into_io();
        let draining = registry.is_draining();
        let now = Instant::now();
        Session {
            client,
            conn: Conn {
                peer,
                io,
                decoder: RequestDecoder::new(config.limits.protocol()),
                // Taken when the client first sends (see `Session::wait`).
                input: BytesMut::new(),
                output: BytesMut::new(),
                input_resizer: Resizer::new(),
                output_resizer: Resizer::new(),
                counted: crate::metrics::ClientConnection::opened(),
                last_active: now,
                show_activity_at: now,
                idle_timer: IdleTimer::new(now),
                pass_started: None,
            },
            flow: Flow {
                budget: ClientFlow::new(registry.budget()),
                gate: Gate::Open,
                limits: ClientLimits::of(config),
                reloads,
                soft_watch: SoftWatch::default(),
            },
            order: Order {
                in_flight: Pipeline::default(),
                held: None,
                sequence_point: false,
                routed_moves: 0,
                paused_until: None,
                pass_routing: None,
            },
            subs: Subscribers {
                pubsub: PubSub::new(guard.id),
                shown: ShownSubscriptions::new(registry, guard.id),
            },
            ident: Identity {
                snapshot,
                user: None,
                state: ConnState {
                    id: guard.id,
                    proto: Proto::Resp2,
                    name: None,
                    user,
                    replies: ReplyMode::On,
                    monitor: None,
                    shown_at_exec: Vec::new(),
                    db: 0,
                    tracking: None,
                },
            },
            tx: Tx {
                transaction: Transaction::default(),
                exec_locals: None,
            },
            end: Ending {
                closing: false,
                peer_closed: false,
                draining,
                drain_until: draining.then(|| now + DRAIN_GRACE),
            },
        }
    }

    /// The connection loop: admit what was read, flush, wait, handle what woke it.
    async fn run(&mut self, mut signals: std::pin::Pin<&mut super::registry::Signals<'_>>) {
        loop {
            self.follow_reload();
            while let Some(run) = self.admit_buffered() {
                self.order.in_flight.push_future(run).await;
            }
            let turn = match self.settle() {
                Ok(turn) => turn,
                Err(close) => return self.close(close).await,
            };
            let woken = self.wait(turn, signals.as_mut()).await;
            if self.on_woken(woken).is_break() {
                return;
            }
        }
    }

    /// As in Redis, where CONFIG SET timeout (or proto-max-bulk-len) applies to every
    /// client at once (a reload wakes every session, see `Registry::wake_all`).
    fn follow_reload(&mut self) {
        if self.client.live.reloads() == self.flow.reloads {
            return;
        }
        self.flow.reloads = self.client.live.reloads();
        let snapshot = self.client.live.proxy();
        // A subscriber that only listens still moves to a new upstream.
        self.subs.pubsub.follow(&snapshot);
        self.ident.user = None;
        self.flow.limits = ClientLimits::of(&snapshot.config);
        self.conn
            .decoder
            .set_limits(snapshot.config.limits.protocol());
        self.ident.snapshot = snapshot;
    }
}

impl Identity {
    /// Drops the looked-up user when the client is now logged in as another (or as
    /// nobody).
    fn forget_if_switched(&mut self) {
        let now = self.state.user.as_deref();
        let switched = self
            .user
            .as_ref()
            .is_some_and(|user| user.as_ref().map(|user| user.acl.name.as_str()) != now);
        if switched {
            self.user = None;
        }
    }

    /// Follows ACL SETUSER, DELUSER and LOAD since the last command (one atomic load when
    /// nothing changed): `false` when the connection must close, as Redis closes it: the
    /// user was deleted, or a `subscribed` session's user lost channel rules.
    fn refresh_user(&mut self, subscribed: bool) -> bool {
        let Some(Some(held)) = &self.user else {
            return true;
        };
        match self.snapshot.acl.users.refresh(held) {
            Freshness::Current => true,
            Freshness::Changed(new) => {
                let keep = !(subscribed && new.narrows_channels_of(held));
                self.user = Some(Some(new));
                keep
            }
            Freshness::Deleted => false,
        }
    }
}

/// Keeps what others see of the client's subscriptions (the subscribers gauge, CLIENT
/// LIST's counts and type) in step with them; the registry is locked only on a change.
struct ShownSubscriptions<'a> {
    registry: &'a Registry,
    id: u64,
    shown: Subscriptions,
    // Counts this client in slotbridge_pubsub_subscribers while it is in subscribe mode.
    gauge: crate::metrics::Subscriber,
}

impl<'a> ShownSubscriptions<'a> {
    fn new(registry: &'a Registry, id: u64) -> Self {
        ShownSubscriptions {
            registry,
            id,
            shown: Subscriptions::default(),
            gauge: crate::metrics::Subscriber::default(),
        }
    }

    /// After a command or event that may have changed the subscriptions.
    fn update(&mut self, pubsub: &PubSub) {
        let now = pubsub.counts();
        if now != self.shown {
            self.shown = now;
            self.registry.update(self.id, |e| e.subscriptions = now);
            self.gauge.update(now.any());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::{Conn, Session};

    #[test]
    fn a_turn_reads_the_session_from_its_start() {
        assert_eq!(offset_of!(Session<'_>, order), 0);
        assert!(offset_of!(Session<'_>, conn) < offset_of!(Session<'_>, tx));
        assert!(offset_of!(Session<'_>, tx) < offset_of!(Session<'_>, ident));
        assert_eq!(
            offset_of!(Conn, peer) + std::mem::size_of::<std::net::SocketAddr>(),
            std::mem::size_of::<Conn>()
        );
    }

    #[test]
    fn an_idle_session_task_stays_small() {
        let size = crate::test_support::future_size4(super::serve);
        eprintln!("session future: {size} bytes");
        // 1,400: the client's two addresses (64 bytes, handed over by the accept rather than
        // asked of the socket) are the future's arguments, read once at its start. 1,425:
        // the latest command shown and the posts looked at (24 bytes), which spare each
        // request the registry entry's line.
        assert!(
            size <= 1425,
            "the session future is {size} bytes: every connected client's task holds it, \
             idle or not, and each request reads its lines from memory at 1,000 clients; \
             box what only some sessions use, and keep the wait a closure (see \
             `Session::wait`)"
        );
    }
}
