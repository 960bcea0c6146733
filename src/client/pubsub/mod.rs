//! Pub/Sub for one client: its subscriptions, the dedicated backend connections that carry
//! them (`upstream::subscription`), and the commands allowed while it is subscribed.
//!
//! Channels and patterns share one connection to the master of `PUBSUB_HOME_SLOT`, the
//! same for every client (an ordinary PUBLISH reaches every node of a cluster, and PUBLISH
//! and PUBSUB run on that master so their counts see every client); shard channels get
//! one connection per master that owns one of their slots. Keyspace notifications are
//! published only on the master of the key, so
//! keyspace and keyevent channels and patterns get one connection per master, whose
//! streams are merged (see [`keyspace`] for the names, under a key layout too). Once the
//! client has a keyspace subscription, subscription confirmations are written here from
//! the client's own sets, since no single backend connection knows them all (see
//! [`subscriptions`]); [`restore`] opens the connections and subscribes them again after
//! failures, and on a master the cluster gained (the topology's master watch), which
//! [`events`] notices. The session asks [`PubSub::intercept`] about every request first: a
//! subscription command's reply is a future that resolves to the backend's confirmations,
//! queued with the other replies so everything leaves in request order; messages come from
//! [`PubSub::next_event`] and are queued behind the replies already waiting, so a message
//! never overtakes the confirmation of its own subscription.
//!
//! Invariants: the subscription sets here are what the client believes it is subscribed
//! to; the backend connections are made to agree with them (a shard channel whose slot
//! moved, or a connection that failed, is subscribed again silently). A client with no
//! subscription holds no connection. Messages waiting for the client never exceed
//! `pubsub.max_buffer_bytes`: past it the client is disconnected.

mod events;
mod frames;
mod keyspace;
mod restore;
mod subscriptions;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};

use crate::dispatch::Proxy;
use crate::protocol::{FoldedName, Proto, Request};
use crate::reply;
use crate::route::NodeAddr;

use super::step::Step;

use crate::upstream::subscription::{Event, Link, Sink, SinkState};
use events::overflowed;
use keyspace::{PatternClass, Upstream};
use restore::{resubscribe, subscribe_commands, Restore};

/// The same answer with an error left out (an empty reply writes nothing), for a
/// subscription command under CLIENT REPLY OFF or SKIP: Redis mutes its errors as any
/// other reply, but not its confirmations (see [`confirms_unmuted`]).
fn errors_muted(step: Step) -> Step {
    fn mute_error(reply: Bytes) -> Bytes {
        if reply.first() == Some(&b'-') {
            Bytes::new()
        } else {
            reply
        }
    }
    match step {
        Step::Reply(reply) => Step::Reply(mute_error(reply)),
        Step::Pending(reply) => Step::Pending(reply.map(mute_error).boxed()),
        other => other,
    }
}

/// Whether `request` is a subscription command ((P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE), whose
/// confirmations Redis 7.0 sends whatever CLIENT REPLY says (it writes them as pushes, in
/// RESP2 too, and OFF and SKIP do not silence pushes): the session leaves their reply
/// unmuted, and [`PubSub::intercept`] leaves out what Redis does mute, an error. Messages
/// are never muted either: they are no command's reply.
pub fn confirms_unmuted(request: &Request) -> bool {
    let name = request.name();
    [
        &b"subscribe"[..],
        b"unsubscribe",
        b"psubscribe",
        b"punsubscribe",
        b"ssubscribe",
        b"sunsubscribe",
    ]
    .iter()
    .any(|command| name.eq_ignore_ascii_case(command))
}

/// What [`PubSub::next_event`] has for the session.
pub enum Relay {
    /// A message to queue behind the replies already waiting.
    Push(Bytes),
    /// The client must be disconnected (it fell too far behind, or its subscriptions
    /// could not be restored).
    Close,
    /// Nothing for the client (internal bookkeeping happened).
    Idle,
}

/// Which subscription command family a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Channels,
    Patterns,
    Shard,
}

impl Family {
    /// The family of a subscription command, by its lower-case name.
    fn of(name: &[u8]) -> Option<Family> {
        match name {
            b"subscribe" | b"unsubscribe" => Some(Family::Channels),
            b"psubscribe" | b"punsubscribe" => Some(Family::Patterns),
            b"ssubscribe" | b"sunsubscribe" => Some(Family::Shard),
            _ => None,
        }
    }
}

/// One client's Pub/Sub state; see the module docs. Nothing is allocated for it (no
/// channel, no shared state) until the client first subscribes: most clients never do.
pub struct PubSub {
    client_id: u64,
    linked: Option<Box<Linked>>,
}

impl PubSub {
    /// The state of client `client_id`, with no subscription.
    pub fn new(client_id: u64) -> PubSub {
        PubSub {
            client_id,
            linked: None,
        }
    }

    /// Whether the client subscribed since it connected or last sent RESET: until then it
    /// has no subscription, no message can arrive for it, and its session need not look.
    pub fn is_used(&self) -> bool {
        self.linked.as_ref().is_some_and(|linked| linked.used)
    }

    /// Whether the client has any subscription (Redis's subscribed mode).
    pub fn is_subscribed(&self) -> bool {
        self.linked
            .as_ref()
            .is_some_and(|linked| linked.is_subscribed())
    }

    /// How many channels, patterns and shard channels the client is subscribed to.
    pub fn counts(&self) -> super::registry::Subscriptions {
        self.linked
            .as_ref()
            .map(|linked| linked.counts())
            .unwrap_or_default()
    }

    /// See [`Linked::follow`].
    pub fn follow(&mut self, current: &Arc<Proxy>) {
        if let Some(linked) = &mut self.linked {
            linked.follow(current);
        }
    }

    /// See [`Linked::intercept`]; the state is made by the client's first subscription
    /// command.
    pub fn intercept(
        &mut self,
        request: &Request,
        name: &FoldedName,
        proto: Proto,
        muted: bool,
        current: &Arc<Proxy>,
    ) -> Step {
        if self.linked.is_none() && Family::of(name.as_bytes()).is_none() {
            return Step::Next;
        }
        let client_id = self.client_id;
        let linked = self
            .linked
            .get_or_insert_with(|| Box::new(Linked::new(current.clone(), client_id)));
        linked.intercept(request, name, proto, muted, current)
    }

    /// See [`Linked::next_event`]; never returns before the client subscribed.
    pub async fn next_event(&mut self) -> Relay {
        match &mut self.linked {
            Some(linked) => linked.next_event().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves once the client exceeded its message buffer limit; never before it
    /// subscribed. Borrows nothing, so it can race a write that the client stopped reading.
    pub fn overflowed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let state = self.linked.as_ref().map(|linked| linked.sink_state.clone());
        async move {
            match state {
                Some(state) => overflowed(state).await,
                None => std::future::pending().await,
            }
        }
    }
}

/// The state of a client that subscribed.
struct Linked {
    inner: Arc<Mutex<Inner>>,
    events: mpsc::UnboundedReceiver<Event>,
    sink_state: Arc<SinkState>,
    /// Re-subscriptions in progress; an `Err` means they gave up.
    background: Background,
    /// The topology's master set, watched once the client subscribed: keyspace
    /// notifications need a connection to every master, new ones too.
    masters: Option<watch::Receiver<()>>,
    /// Whether the client sent a (P|S)SUBSCRIBE since it connected or last sent RESET.
    /// Until it does it can hold no subscription, and every other command passes without
    /// taking the lock: the common case costs one name comparison.
    used: bool,
}

/// The part shared with reply futures and re-subscriptions.
struct Inner {
    proxy: Arc<Proxy>,
    sink: Sink,
    /// The client's protocol, which new connections speak.
    proto: Proto,
    next_link: u64,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    /// Shard channel -> its slot.
    shard: HashMap<Bytes, u16>,
    /// The connection for channels and patterns, while there are any.
    regular: Option<Link>,
    /// Shard connections, by master address.
    shard_links: HashMap<NodeAddr, Link>,
    /// Keyspace subscriptions, by the upstream names subscribed on every keyspace link.
    keyspace: Upstream,
    /// Keyspace connections, one per master, while there are keyspace subscriptions.
    keyspace_links: HashMap<NodeAddr, Link>,
    restoring_keyspace: bool,
    /// A re-subscription of this kind is running: further failures join it.
    restoring_regular: bool,
    restoring_shard: bool,
}

impl Linked {
    fn new(proxy: Arc<Proxy>, client_id: u64) -> Linked {
        let (sink, events) = Sink::new(proxy.config.pubsub.max_buffer_bytes, client_id);
        let sink_state = sink.state().clone();
        Linked {
            inner: Arc::new(Mutex::new(Inner {
                proxy,
                sink,
                proto: Proto::Resp2,
                next_link: 0,
                channels: HashSet::new(),
                patterns: HashSet::new(),
                shard: HashMap::new(),
                regular: None,
                shard_links: HashMap::new(),
                keyspace: Upstream::default(),
                keyspace_links: HashMap::new(),
                restoring_keyspace: false,
                restoring_regular: false,
                restoring_shard: false,
            })),
            events,
            sink_state,
            background: FuturesUnordered::new(),
            masters: None,
            used: false,
        }
    }

    /// Whether the client has any subscription (Redis's subscribed mode).
    fn is_subscribed(&self) -> bool {
        lock(&self.inner).total() > 0
    }

    /// How many channels, patterns and shard channels the client is subscribed to.
    fn counts(&self) -> super::registry::Subscriptions {
        let inner = lock(&self.inner);
        super::registry::Subscriptions {
            channels: inner.channels.len(),
            patterns: inner.patterns.len(),
            shard_channels: inner.shard.len(),
        }
    }

    /// Moves the client to the live snapshot `current`: after a reload that switched the
    /// upstream, its subscriptions are subscribed again there. The session calls it when a
    /// reload wakes it, so a subscriber that only listens moves too, and [`PubSub::intercept`]
    /// before each request.
    fn follow(&mut self, current: &Arc<Proxy>) {
        if !self.used {
            return;
        }
        let mut inner = lock(&self.inner);
        if Arc::ptr_eq(&inner.proxy, current) {
            return;
        }
        let switched = !Arc::ptr_eq(&inner.proxy.topology, &current.topology);
        inner.proxy = current.clone();
        if !switched {
            return;
        }
        self.masters = Some(current.topology.watch_masters());
        // Old links point at the old upstream: subscribe everything again on the new one
        // (the restores are idempotent with new subscriptions).
        inner.regular = None;
        inner.shard_links.clear();
        inner.keyspace_links.clear();
        // Sent before any later request's command on the same new link, so the backend's
        // subscription counts include what moved.
        let (channels, patterns) = inner.regular_names();
        let link = if channels.is_empty() && patterns.is_empty() {
            None
        } else {
            let proto = inner.proto;
            inner.regular_link(proto)
        };
        for (command, kind, names) in subscribe_commands(&channels, &patterns) {
            let call = match &link {
                Some(link) => resubscribe(link, command, kind, names).boxed(),
                None => {
                    futures_util::future::ready(Err(reply::text::SLOT_UNSERVED.to_string())).boxed()
                }
            };
            self.background.push(call);
        }
        if !inner.shard.is_empty() {
            Restore::Shard.start(&mut inner, &self.inner, &mut self.background);
        }
        if !inner.keyspace.is_empty() {
            Restore::Keyspace.start(&mut inner, &self.inner, &mut self.background);
        }
    }

    /// Looks at `request` before anything else does (see [`Step`]). `current` is the
    /// live snapshot: new subscriptions use its upstream, and after a reload that switched
    /// the upstream the client's subscriptions move there too. `muted`: CLIENT REPLY mutes
    /// this request's reply, which for a subscription command leaves out only an error.
    fn intercept(
        &mut self,
        request: &Request,
        name: &FoldedName,
        proto: Proto,
        muted: bool,
        current: &Arc<Proxy>,
    ) -> Step {
        let args = &request.args;
        let name = name.as_bytes();
        let family = Family::of(name);
        if family.is_none() && !self.used {
            return Step::Next;
        }
        self.used = true;
        let proxy = {
            lock(&self.inner).proto = proto;
            self.follow(current);
            lock(&self.inner).proxy.clone()
        };
        if let Some(family) = family {
            if self.masters.is_none() {
                self.masters = Some(proxy.topology.watch_masters());
            }
            let arity_error = proxy
                .commands
                .lookup(args)
                .filter(|spec| !spec.arity_ok(args.len()))
                .map(|spec| reply::wrong_arity(&spec.name));
            let answer = match arity_error {
                Some(error) => Step::Reply(error),
                None => {
                    let subscribe = matches!(name, b"subscribe" | b"psubscribe" | b"ssubscribe");
                    self.subscription(request, proto, family, subscribe)
                }
            };
            return if muted { errors_muted(answer) } else { answer };
        }
        match name {
            b"reset" => {
                // RESET leaves subscribed mode; dropping the links closes their connections.
                lock(&self.inner).clear();
                self.used = false;
                self.masters = None;
                Step::Next
            }
            b"quit" => Step::Next,
            _ if proto == Proto::Resp3 || !self.is_subscribed() => Step::Next,
            b"ping" if args.len() <= 2 => {
                Step::Reply(frames::subscribed_pong(args.get(1).map(|a| &a[..])))
            }
            _ => Step::Reply(match proxy.commands.lookup(args) {
                None => reply::unknown_command(args),
                Some(spec) if !spec.arity_ok(args.len()) => reply::wrong_arity(&spec.name),
                Some(spec) => frames::refusal(&spec.name),
            }),
        }
    }
}

/// Which connections a channel (`family` Channels) or pattern needs.
fn classify(family: Family, name: &[u8]) -> PatternClass {
    match family {
        Family::Patterns => keyspace::pattern_class(name),
        _ if keyspace::is_keyspace_channel(name) => PatternClass::Keyspace,
        _ => PatternClass::Ordinary,
    }
}

/// The re-subscriptions in progress for one client; an `Err` means one gave up.
type Background = FuturesUnordered<BoxFuture<'static, Result<(), String>>>;

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> Request {
        Request {
            raw: Bytes::new(),
            args: args
                .iter()
                .map(|arg| Bytes::copy_from_slice(arg.as_bytes()))
                .collect(),
        }
    }

    fn answered(intercept: Step) -> Option<Bytes> {
        match intercept {
            Step::Reply(reply) => Some(reply),
            Step::Pending(reply) => reply.now_or_never(),
            _ => None,
        }
    }

    #[test]
    fn only_the_subscription_commands_escape_client_reply() {
        for name in [
            "subscribe",
            "UNSUBSCRIBE",
            "PSubscribe",
            "punsubscribe",
            "ssubscribe",
            "sunsubscribe",
        ] {
            assert!(confirms_unmuted(&request(&[name, "ch"])), "{name}");
        }
        for name in ["publish", "ping", "pubsub", "client", "reset", "subscriber"] {
            assert!(!confirms_unmuted(&request(&[name, "ch"])), "{name}");
        }
    }

    #[test]
    fn a_muted_subscription_answer_loses_its_error_only() {
        let confirmations = frames::confirmation(Proto::Resp3, "subscribe", Some(b"ch"), 1);
        let error = reply::error(reply::text::SLOT_UNSERVED);
        for (answer, kept) in [
            (Step::Reply(confirmations.clone()), confirmations.clone()),
            (Step::Reply(error.clone()), Bytes::new()),
            (
                Step::Pending(futures_util::future::ready(confirmations.clone()).boxed()),
                confirmations.clone(),
            ),
            (
                Step::Pending(futures_util::future::ready(error).boxed()),
                Bytes::new(),
            ),
        ] {
            assert_eq!(answered(errors_muted(answer)), Some(kept));
        }
        assert!(matches!(errors_muted(Step::Next), Step::Next));
    }
}
