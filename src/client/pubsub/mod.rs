//! Pub/Sub for one client: its subscriptions, the dedicated backend connections that carry
//! them, and the commands allowed while it is subscribed.
//!
//! Channels and patterns share one connection to some master (an ordinary PUBLISH reaches
//! every node of a cluster); shard channels get one connection per master that owns one
//! of their slots. Keyspace notifications are published only on the master of the key, so
//! keyspace and keyevent channels and patterns get one connection per master, whose
//! streams are merged (see [`keyspace`] for the names, under a key layout too). Once the
//! client has a keyspace subscription, subscription confirmations are written here from
//! the client's own sets, since no single backend connection knows them all. The session asks [`PubSub::intercept`] about every request first: a
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

mod frames;
mod keyspace;
mod link;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::mpsc;

use crate::backend::ConnOptions;
use crate::dispatch::Proxy;
use crate::protocol::encode::encode_request;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::{key_slot, NodeAddr, Redirect};

use keyspace::{PatternClass, Upstream};
use link::{Event, Link, Role, Sink, SinkState};

/// What the session does with a request, as far as Pub/Sub is concerned.
pub enum Intercept {
    /// Not a Pub/Sub matter: handle it as usual.
    Pass,
    /// Answered here.
    Reply(Bytes),
    /// Answered by the backend: queue this reply future in request order.
    Pending(BoxFuture<'static, Bytes>),
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

/// One client's Pub/Sub state; see the module docs.
pub struct PubSub {
    inner: Arc<Mutex<Inner>>,
    events: mpsc::UnboundedReceiver<Event>,
    sink_state: Arc<SinkState>,
    /// Re-subscriptions in progress; an `Err` means they gave up.
    background: FuturesUnordered<BoxFuture<'static, Result<(), String>>>,
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

impl PubSub {
    /// The state of client `client_id`, with no subscription.
    pub fn new(proxy: Arc<Proxy>, client_id: u64) -> PubSub {
        let (sink, events) = Sink::new(proxy.config.pubsub.max_buffer_bytes, client_id);
        let sink_state = sink.state().clone();
        PubSub {
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
        }
    }

    /// Whether the client has any subscription (Redis's subscribed mode).
    pub fn is_subscribed(&self) -> bool {
        lock(&self.inner).total() > 0
    }

    /// Looks at `request` before anything else does (see [`Intercept`]). `current` is the
    /// live snapshot: new subscriptions use its upstream, and after a reload that switched
    /// the upstream the client's subscriptions move there too.
    pub fn intercept(
        &mut self,
        request: &Request,
        proto: Proto,
        current: &Arc<Proxy>,
    ) -> Intercept {
        let args = &request.args;
        let mut lower = [0u8; 16];
        let name = match args[0].get(..lower.len().min(args[0].len())) {
            Some(bytes) if bytes.len() == args[0].len() => {
                lower[..bytes.len()].copy_from_slice(bytes);
                lower[..bytes.len()].make_ascii_lowercase();
                &lower[..bytes.len()]
            }
            _ => &b""[..],
        };
        let family = match name {
            b"subscribe" | b"unsubscribe" => Some(Family::Channels),
            b"psubscribe" | b"punsubscribe" => Some(Family::Patterns),
            b"ssubscribe" | b"sunsubscribe" => Some(Family::Shard),
            _ => None,
        };
        let proxy = {
            let mut inner = lock(&self.inner);
            inner.proto = proto;
            if !Arc::ptr_eq(&inner.proxy, current) {
                let switched = !Arc::ptr_eq(&inner.proxy.topology, &current.topology);
                inner.proxy = current.clone();
                if switched {
                    // Old links point at the old upstream: subscribe everything again on
                    // the new one (the restores are idempotent with new subscriptions).
                    inner.regular = None;
                    inner.shard_links.clear();
                    inner.keyspace_links.clear();
                    // Sent before this request's own command on the same new link, so
                    // the backend's subscription counts include what moved.
                    let (channels, patterns) = inner.regular_names();
                    let link = if channels.is_empty() && patterns.is_empty() {
                        None
                    } else {
                        inner.regular_link(proto)
                    };
                    for (command, kind, names) in [
                        ("SUBSCRIBE", &b"subscribe"[..], &channels),
                        ("PSUBSCRIBE", &b"psubscribe"[..], &patterns),
                    ] {
                        if names.is_empty() {
                            continue;
                        }
                        let call = match &link {
                            Some(link) => link
                                .call(command_bytes(command, names), kind, names.len())
                                .boxed(),
                            None => futures_util::future::ready(Err(
                                reply::text::SLOT_UNSERVED.to_string()
                            ))
                            .boxed(),
                        };
                        self.background.push(
                            async move {
                                match call.await {
                                    Ok(answer) if answer.first() != Some(&b'-') => Ok(()),
                                    Ok(answer) => {
                                        Err(String::from_utf8_lossy(&answer).trim_end().to_string())
                                    }
                                    Err(reason) => Err(reason),
                                }
                            }
                            .boxed(),
                        );
                    }
                    if !inner.shard.is_empty() && !inner.restoring_shard {
                        inner.restoring_shard = true;
                        self.background
                            .push(restore_shard(self.inner.clone()).boxed());
                    }
                    if !inner.keyspace.is_empty() && !inner.restoring_keyspace {
                        inner.restoring_keyspace = true;
                        self.background
                            .push(restore_keyspace(self.inner.clone()).boxed());
                    }
                }
            }
            inner.proxy.clone()
        };
        if let Some(family) = family {
            if let Some(spec) = proxy.commands.lookup(args) {
                if !spec.arity_ok(args.len()) {
                    return Intercept::Reply(reply::wrong_arity(&spec.name));
                }
            }
            let subscribe = matches!(name, b"subscribe" | b"psubscribe" | b"ssubscribe");
            return self.subscription(request, proto, family, subscribe);
        }
        match name {
            b"reset" => {
                // RESET leaves subscribed mode; dropping the links closes their connections.
                lock(&self.inner).clear();
                Intercept::Pass
            }
            b"quit" => Intercept::Pass,
            _ if proto == Proto::Resp3 || !self.is_subscribed() => Intercept::Pass,
            b"ping" if args.len() <= 2 => {
                Intercept::Reply(frames::subscribed_pong(args.get(1).map(|a| &a[..])))
            }
            _ => Intercept::Reply(match proxy.commands.lookup(args) {
                None => reply::unknown_command(args),
                Some(spec) if !spec.arity_ok(args.len()) => reply::wrong_arity(&spec.name),
                Some(spec) => frames::refusal(&spec.name),
            }),
        }
    }

    fn subscription(
        &mut self,
        request: &Request,
        proto: Proto,
        family: Family,
        subscribe: bool,
    ) -> Intercept {
        let names: Vec<Bytes> = request.args[1..].to_vec();
        let mut inner = lock(&self.inner);
        if family == Family::Shard {
            return inner.shard_command(&self.inner, request.raw.clone(), names, proto, subscribe);
        }
        let touches_keyspace = !inner.keyspace.is_empty()
            || names
                .iter()
                .any(|name| classify(family, name) != PatternClass::Ordinary);
        if touches_keyspace {
            return inner.keyspace_command(names, proto, family, subscribe);
        }
        let kind: &'static [u8] = match (family, subscribe) {
            (Family::Patterns, true) => b"psubscribe",
            (Family::Patterns, false) => b"punsubscribe",
            (_, true) => b"subscribe",
            (_, false) => b"unsubscribe",
        };
        let link = if subscribe {
            match inner.regular_link(proto) {
                Some(link) => link,
                None => return Intercept::Reply(reply::error(reply::text::SLOT_UNSERVED)),
            }
        } else {
            match inner.regular.clone() {
                Some(link) => link,
                None => {
                    // Nothing subscribed on the regular connection: answer as Redis does.
                    let count = inner.channels.len() + inner.patterns.len();
                    return Intercept::Reply(local_confirmations(proto, kind, &names, count));
                }
            }
        };
        let set = match family {
            Family::Patterns => &mut inner.patterns,
            _ => &mut inner.channels,
        };
        let expected = if names.is_empty() {
            set.len().max(1)
        } else {
            names.len()
        };
        if subscribe {
            set.extend(names.iter().cloned());
        } else if names.is_empty() {
            set.clear();
        } else {
            for name in &names {
                set.remove(name);
            }
        }
        if inner.channels.is_empty() && inner.patterns.is_empty() {
            // The reply future keeps the link until its confirmations are in.
            inner.regular = None;
        }
        let raw = request.raw.clone();
        Intercept::Pending(
            async move {
                match link.call(raw, kind, expected).await {
                    Ok(frames) => frames,
                    Err(reason) => reply::error(&format!("ERR proxy: {reason}")),
                }
            }
            .boxed(),
        )
    }

    /// The next thing for the session: a message, a reason to close, or nothing. Never
    /// returns while there is nothing to do.
    pub async fn next_event(&mut self) -> Relay {
        if self.sink_state.overflowed.load(Ordering::Relaxed) {
            return Relay::Close;
        }
        let overflowed = self.overflowed();
        tokio::select! {
            Some(result) = self.background.next(), if !self.background.is_empty() => {
                match result {
                    Ok(()) => Relay::Idle,
                    Err(reason) => {
                        tracing::warn!(error = %reason, "closing a subscriber whose subscriptions could not be restored");
                        Relay::Close
                    }
                }
            }
            Some(event) = self.events.recv() => match event {
                Event::Push(frame, role) => {
                    self.sink_state.buffered.fetch_sub(frame.len(), Ordering::Relaxed);
                    if role != Role::Keyspace {
                        return Relay::Push(frame);
                    }
                    let inner = lock(&self.inner);
                    let layout = inner.proxy.layout.clone();
                    match inner.keyspace.deliver(layout.as_deref(), frame) {
                        Some(frames) => Relay::Push(frames),
                        None => Relay::Idle,
                    }
                }
                Event::ShardLost { channel } => {
                    let mut inner = lock(&self.inner);
                    if inner.shard.contains_key(&channel) && !inner.restoring_shard {
                        inner.restoring_shard = true;
                        inner.proxy.topology.request_refresh();
                        self.background.push(restore_shard(self.inner.clone()).boxed());
                    }
                    Relay::Idle
                }
                Event::Down { link, reason } => {
                    tracing::debug!(error = %reason, "subscription connection down");
                    self.on_link_down(link);
                    Relay::Idle
                }
            },
            () = overflowed => Relay::Close,
        }
    }

    /// Resolves once the client exceeded its message buffer limit. Borrows nothing, so
    /// it can race a write that the client stopped reading.
    pub fn overflowed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let state = self.sink_state.clone();
        async move {
            loop {
                if state.overflowed.load(Ordering::Relaxed) {
                    return;
                }
                state.wake.notified().await;
            }
        }
    }

    fn on_link_down(&mut self, id: u64) {
        let mut inner = lock(&self.inner);
        inner.proxy.topology.request_refresh();
        if inner.regular.as_ref().is_some_and(|l| l.id == id) {
            inner.regular = None;
            let has_regular = !inner.channels.is_empty() || !inner.patterns.is_empty();
            if has_regular && !inner.restoring_regular {
                inner.restoring_regular = true;
                self.background
                    .push(restore_regular(self.inner.clone()).boxed());
            }
        }
        let before = inner.keyspace_links.len();
        inner.keyspace_links.retain(|_, l| l.id != id);
        if inner.keyspace_links.len() != before
            && !inner.keyspace.is_empty()
            && !inner.restoring_keyspace
        {
            inner.restoring_keyspace = true;
            self.background
                .push(restore_keyspace(self.inner.clone()).boxed());
        }
        let before = inner.shard_links.len();
        inner.shard_links.retain(|_, l| l.id != id);
        if inner.shard_links.len() != before && !inner.shard.is_empty() && !inner.restoring_shard {
            inner.restoring_shard = true;
            self.background
                .push(restore_shard(self.inner.clone()).boxed());
        }
    }
}

impl Inner {
    /// SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE or PUNSUBSCRIBE once keyspace subscriptions are
    /// involved: ordinary names go to the regular link, keyspace ones (as upstream names)
    /// to every master's keyspace link, and the confirmations are written here from the
    /// client's sets, as Redis counts them (channels plus patterns after each name).
    fn keyspace_command(
        &mut self,
        names: Vec<Bytes>,
        proto: Proto,
        family: Family,
        subscribe: bool,
    ) -> Intercept {
        let (command, kind): (&str, &'static [u8]) = match (family, subscribe) {
            (Family::Patterns, true) => ("PSUBSCRIBE", b"psubscribe"),
            (Family::Patterns, false) => ("PUNSUBSCRIBE", b"punsubscribe"),
            (_, true) => ("SUBSCRIBE", b"subscribe"),
            (_, false) => ("UNSUBSCRIBE", b"unsubscribe"),
        };
        let targets: Vec<Bytes> = if names.is_empty() && !subscribe {
            let set = match family {
                Family::Patterns => &self.patterns,
                _ => &self.channels,
            };
            set.iter().cloned().collect()
        } else {
            names
        };
        let classes: Vec<PatternClass> = targets.iter().map(|n| classify(family, n)).collect();
        // Links first: a subscription that cannot be made changes nothing.
        let mut regular = self.regular.clone();
        let mut keyspace_links: Vec<Link> = self.keyspace_links.values().cloned().collect();
        if subscribe {
            if classes.iter().any(|c| *c != PatternClass::Keyspace) {
                regular = self.regular_link(proto);
                if regular.is_none() {
                    return Intercept::Reply(reply::error(reply::text::SLOT_UNSERVED));
                }
            }
            if classes.iter().any(|c| *c != PatternClass::Ordinary) {
                keyspace_links = self.keyspace_links(proto);
                if keyspace_links.is_empty() {
                    return Intercept::Reply(reply::error(reply::text::SLOT_UNSERVED));
                }
            }
        }
        let layout = self.proxy.layout.clone();
        let mut confirmations = BytesMut::new();
        let mut regular_names: Vec<Bytes> = Vec::new();
        let mut upstream_names: Vec<Bytes> = Vec::new();
        for (name, class) in targets.iter().zip(&classes) {
            let set = match family {
                Family::Patterns => &mut self.patterns,
                _ => &mut self.channels,
            };
            let changed = if subscribe {
                set.insert(name.clone())
            } else {
                set.remove(name)
            };
            if changed && *class != PatternClass::Keyspace {
                regular_names.push(name.clone());
            }
            if changed && *class != PatternClass::Ordinary {
                let (upstream, fresh_or_gone) = match (family, subscribe) {
                    (Family::Patterns, _) => {
                        let up = keyspace::upstream_pattern(layout.as_deref(), name);
                        let moved = if subscribe {
                            self.keyspace.add_pattern(up.clone(), name.clone())
                        } else {
                            self.keyspace.remove_pattern(&up, name)
                        };
                        (up, moved)
                    }
                    (_, _) => {
                        let up = keyspace::upstream_channel(layout.as_deref(), name);
                        let moved = if subscribe {
                            self.keyspace.add_channel(up.clone(), name.clone())
                        } else {
                            self.keyspace.remove_channel(&up, name)
                        };
                        (up, moved)
                    }
                };
                if fresh_or_gone && !upstream_names.contains(&upstream) {
                    upstream_names.push(upstream);
                }
            }
            let count = self.channels.len() + self.patterns.len();
            let kind = std::str::from_utf8(kind).unwrap_or_default();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
        }
        if targets.is_empty() {
            let count = self.channels.len() + self.patterns.len();
            let kind = std::str::from_utf8(kind).unwrap_or_default();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, None, count));
        }
        let mut calls = Vec::new();
        if let (false, Some(link)) = (regular_names.is_empty(), &regular) {
            let raw = command_bytes(command, &regular_names);
            calls.push(link.call(raw, kind, regular_names.len()).boxed());
        }
        if !upstream_names.is_empty() {
            let raw = command_bytes(command, &upstream_names);
            for link in &keyspace_links {
                calls.push(link.call(raw.clone(), kind, upstream_names.len()).boxed());
            }
        }
        // The reply futures keep the links they use until their confirmations are in.
        let (channels, patterns) = self.regular_names();
        if channels.is_empty() && patterns.is_empty() {
            self.regular = None;
        }
        if self.keyspace.is_empty() {
            self.keyspace_links.clear();
        }
        let confirmations = confirmations.freeze();
        Intercept::Pending(
            async move {
                for answer in futures_util::future::join_all(calls).await {
                    match answer {
                        Ok(frame) if frame.first() == Some(&b'-') => return frame,
                        Ok(_) => {}
                        Err(reason) => return reply::error(&format!("ERR proxy: {reason}")),
                    }
                }
                confirmations
            }
            .boxed(),
        )
    }

    fn total(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard.len()
    }

    fn clear(&mut self) {
        self.channels.clear();
        self.patterns.clear();
        self.shard.clear();
        self.regular = None;
        self.shard_links.clear();
        self.keyspace = Upstream::default();
        self.keyspace_links.clear();
    }

    /// The channels and patterns the regular link carries (keyspace ones live elsewhere).
    fn regular_names(&self) -> (Vec<Bytes>, Vec<Bytes>) {
        let channels = self
            .channels
            .iter()
            .filter(|name| classify(Family::Channels, name) == PatternClass::Ordinary)
            .cloned()
            .collect();
        let patterns = self
            .patterns
            .iter()
            .filter(|name| classify(Family::Patterns, name) != PatternClass::Keyspace)
            .cloned()
            .collect();
        (channels, patterns)
    }

    fn options(&self, proto: Proto) -> ConnOptions {
        let config = &self.proxy.config;
        ConnOptions {
            proto,
            username: config.backend.username.clone().filter(|u| !u.is_empty()),
            password: config.backend.password.clone(),
            connect_timeout: config.connect_timeout(),
            limits: config.limits.protocol(),
        }
    }

    fn new_link(&mut self, addr: NodeAddr, proto: Proto, role: Role) -> Link {
        self.next_link += 1;
        Link::spawn(
            self.next_link,
            addr,
            self.options(proto),
            self.sink.clone(),
            role,
        )
    }

    /// A keyspace connection to every master of the slot map as it is now (opened where
    /// missing; connections to nodes that are no longer masters are closed).
    fn keyspace_links(&mut self, proto: Proto) -> Vec<Link> {
        let mut masters: Vec<NodeAddr> = self.proxy.topology.routing().map.masters().to_vec();
        if masters.is_empty() {
            // A standalone upstream: its one node has every key.
            if let Some(node) = self.proxy.topology.any_master(proto) {
                masters.push(node.addr().clone());
            }
        }
        self.keyspace_links.retain(|addr, _| masters.contains(addr));
        for addr in masters {
            if !self.keyspace_links.contains_key(&addr) {
                let link = self.new_link(addr.clone(), proto, Role::Keyspace);
                self.keyspace_links.insert(addr, link);
            }
        }
        self.keyspace_links.values().cloned().collect()
    }

    /// The connection for channels and patterns, opened to some master if needed.
    fn regular_link(&mut self, proto: Proto) -> Option<Link> {
        if let Some(link) = &self.regular {
            return Some(link.clone());
        }
        let addr = self.proxy.topology.any_master(proto)?.addr().clone();
        let link = self.new_link(addr, proto, Role::Regular);
        self.regular = Some(link.clone());
        Some(link)
    }

    /// The shard connection to the master of `slot` as the slot map has it now.
    fn shard_link(&mut self, slot: u16, proto: Proto) -> Option<Link> {
        let addr = self
            .proxy
            .topology
            .routing()
            .map
            .master_addr(slot)
            .cloned()?;
        if let Some(link) = self.shard_links.get(&addr) {
            return Some(link.clone());
        }
        let link = self.new_link(addr.clone(), proto, Role::Shard);
        self.shard_links.insert(addr, link.clone());
        Some(link)
    }

    /// Closes shard connections to masters that own none of the subscribed slots.
    fn prune_shard_links(&mut self) {
        let routing = self.proxy.topology.routing();
        let needed: HashSet<&NodeAddr> = self
            .shard
            .values()
            .filter_map(|slot| routing.map.master_addr(*slot))
            .collect();
        self.shard_links.retain(|addr, _| needed.contains(addr));
    }

    fn shard_command(
        &mut self,
        shared: &Arc<Mutex<Inner>>,
        raw: Bytes,
        names: Vec<Bytes>,
        proto: Proto,
        subscribe: bool,
    ) -> Intercept {
        let kind = if subscribe {
            "ssubscribe"
        } else {
            "sunsubscribe"
        };
        if names.is_empty() {
            // Every shard subscription ends: closing the connections ends them upstream.
            let channels: Vec<Bytes> = self.shard.drain().map(|(name, _)| name).collect();
            self.shard_links.clear();
            let mut out = BytesMut::new();
            for (i, name) in channels.iter().enumerate() {
                let left = channels.len() - i - 1;
                out.extend_from_slice(&frames::confirmation(proto, kind, Some(name), left));
            }
            if channels.is_empty() {
                out.extend_from_slice(&frames::confirmation(proto, kind, None, 0));
            }
            return Intercept::Reply(out.freeze());
        }
        let slot = key_slot(&names[0]);
        if names.iter().any(|n| key_slot(n) != slot) {
            return Intercept::Reply(reply::error(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        // Counts as Redis reports them: shard subscriptions after each channel.
        let mut confirmations = BytesMut::new();
        for name in &names {
            if subscribe {
                self.shard.insert(name.clone(), slot);
            } else {
                self.shard.remove(name);
            }
            let count = self.shard.len();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
        }
        let confirmations = confirmations.freeze();
        let kind: &'static [u8] = kind.as_bytes();
        let expected = names.len();
        let shared = shared.clone();
        Intercept::Pending(
            async move {
                let answer = shard_call(&shared, slot, raw, kind, expected, proto).await;
                if !subscribe {
                    lock(&shared).prune_shard_links();
                }
                match answer {
                    Ok(frame) if frame.first() == Some(&b'-') => frame,
                    Ok(_) => confirmations,
                    Err(reason) => reply::error(&format!("ERR proxy: {reason}")),
                }
            }
            .boxed(),
        )
    }
}

/// Sends a shard command to the master of `slot`, following MOVED as the slot map catches up.
async fn shard_call(
    shared: &Arc<Mutex<Inner>>,
    slot: u16,
    raw: Bytes,
    kind: &'static [u8],
    expected: usize,
    proto: Proto,
) -> Result<Bytes, String> {
    let (proxy, mut redirects) = (lock(shared).proxy.clone(), 0);
    loop {
        let Some(link) = lock(shared).shard_link(slot, proto) else {
            return Ok(reply::error(reply::text::SLOT_UNSERVED));
        };
        let answer = link.call(raw.clone(), kind, expected).await?;
        if let Some(Redirect::Moved { slot, addr }) = Redirect::classify(&answer, &link.addr) {
            if redirects < proxy.config.retry.max_redirects {
                redirects += 1;
                proxy.topology.on_moved(slot, &addr);
                continue;
            }
        }
        return Ok(answer);
    }
}

/// Subscribes the regular channels and patterns again on a new connection.
async fn restore_regular(shared: Arc<Mutex<Inner>>) -> Result<(), String> {
    let proxy = lock(&shared).proxy.clone();
    let retry = &proxy.config.retry;
    let mut last = String::new();
    for attempt in 0..retry.attempts {
        tokio::time::sleep(retry.backoff(attempt)).await;
        let (link, channels, patterns) = {
            let mut inner = lock(&shared);
            let (channels, patterns) = inner.regular_names();
            if channels.is_empty() && patterns.is_empty() {
                inner.restoring_regular = false;
                return Ok(());
            }
            let proto = link_proto(&inner);
            let Some(link) = inner.regular_link(proto) else {
                continue;
            };
            (link, channels, patterns)
        };
        let mut ok = true;
        for (command, kind, names) in [
            ("SUBSCRIBE", &b"subscribe"[..], &channels),
            ("PSUBSCRIBE", &b"psubscribe"[..], &patterns),
        ] {
            if names.is_empty() {
                continue;
            }
            match link
                .call(command_bytes(command, names), kind, names.len())
                .await
            {
                Ok(answer) if answer.first() != Some(&b'-') => {}
                Ok(answer) => {
                    last = String::from_utf8_lossy(&answer).trim_end().to_string();
                    ok = false;
                }
                Err(reason) => {
                    last = reason;
                    ok = false;
                }
            }
        }
        if ok {
            lock(&shared).restoring_regular = false;
            return Ok(());
        }
        let mut inner = lock(&shared);
        if inner.regular.as_ref().is_some_and(|l| l.id == link.id) {
            inner.regular = None;
        }
    }
    lock(&shared).restoring_regular = false;
    Err(format!("re-subscribing channels failed: {last}"))
}

/// Subscribes every upstream keyspace channel and pattern again on every master
/// (idempotent where a link still has them).
async fn restore_keyspace(shared: Arc<Mutex<Inner>>) -> Result<(), String> {
    let proxy = lock(&shared).proxy.clone();
    let retry = &proxy.config.retry;
    let mut last = String::new();
    for attempt in 0..retry.attempts {
        tokio::time::sleep(retry.backoff(attempt)).await;
        let (links, channels, patterns) = {
            let mut inner = lock(&shared);
            if inner.keyspace.is_empty() {
                inner.restoring_keyspace = false;
                return Ok(());
            }
            let proto = link_proto(&inner);
            let links = inner.keyspace_links(proto);
            let channels: Vec<Bytes> = inner.keyspace.channels.keys().cloned().collect();
            let patterns: Vec<Bytes> = inner.keyspace.patterns.keys().cloned().collect();
            (links, channels, patterns)
        };
        if links.is_empty() {
            last = reply::text::SLOT_UNSERVED.to_string();
            continue;
        }
        let mut ok = true;
        for link in &links {
            for (command, kind, names) in [
                ("SUBSCRIBE", &b"subscribe"[..], &channels),
                ("PSUBSCRIBE", &b"psubscribe"[..], &patterns),
            ] {
                if names.is_empty() {
                    continue;
                }
                let failure = match link
                    .call(command_bytes(command, names), kind, names.len())
                    .await
                {
                    Ok(answer) if answer.first() != Some(&b'-') => None,
                    Ok(answer) => Some(String::from_utf8_lossy(&answer).trim_end().to_string()),
                    Err(reason) => Some(reason),
                };
                if let Some(reason) = failure {
                    last = reason;
                    ok = false;
                    let mut inner = lock(&shared);
                    inner.keyspace_links.retain(|_, l| l.id != link.id);
                }
            }
        }
        if ok {
            lock(&shared).restoring_keyspace = false;
            return Ok(());
        }
        proxy.topology.request_refresh();
    }
    lock(&shared).restoring_keyspace = false;
    Err(format!(
        "re-subscribing keyspace notifications failed: {last}"
    ))
}

/// Subscribes every shard channel again on its slot's current master (idempotent where
/// it is still subscribed).
async fn restore_shard(shared: Arc<Mutex<Inner>>) -> Result<(), String> {
    let proxy = lock(&shared).proxy.clone();
    let retry = &proxy.config.retry;
    let mut last = String::new();
    for attempt in 0..retry.attempts {
        tokio::time::sleep(retry.backoff(attempt)).await;
        let (by_slot, proto) = {
            let inner = lock(&shared);
            let mut by_slot: HashMap<u16, Vec<Bytes>> = HashMap::new();
            for (name, slot) in &inner.shard {
                by_slot.entry(*slot).or_default().push(name.clone());
            }
            (by_slot, link_proto(&inner))
        };
        let mut ok = true;
        for (slot, names) in by_slot {
            let raw = command_bytes("SSUBSCRIBE", &names);
            match shard_call(&shared, slot, raw, b"ssubscribe", names.len(), proto).await {
                Ok(answer) if answer.first() != Some(&b'-') => {}
                Ok(answer) => {
                    last = String::from_utf8_lossy(&answer).trim_end().to_string();
                    ok = false;
                }
                Err(reason) => {
                    last = reason;
                    ok = false;
                }
            }
        }
        let mut inner = lock(&shared);
        inner.prune_shard_links();
        if ok {
            inner.restoring_shard = false;
            return Ok(());
        }
        proxy.topology.request_refresh();
    }
    lock(&shared).restoring_shard = false;
    Err(format!("re-subscribing shard channels failed: {last}"))
}

/// The protocol new connections of this client speak (messages are relayed as is).
fn link_proto(inner: &Inner) -> Proto {
    inner.proto
}

/// Which connections a channel (`family` Channels) or pattern needs.
fn classify(family: Family, name: &[u8]) -> PatternClass {
    match family {
        Family::Patterns => keyspace::pattern_class(name),
        _ if keyspace::is_keyspace_channel(name) => PatternClass::Keyspace,
        _ => PatternClass::Ordinary,
    }
}

fn command_bytes(command: &str, names: &[Bytes]) -> Bytes {
    let mut args: Vec<&[u8]> = Vec::with_capacity(names.len() + 1);
    args.push(command.as_bytes());
    args.extend(names.iter().map(|n| &n[..]));
    encode_request(&args)
}

/// Confirmations for an unsubscribe from nothing, as Redis answers it: one per name, or
/// one with a null name when none was given.
fn local_confirmations(proto: Proto, kind: &[u8], names: &[Bytes], count: usize) -> Bytes {
    let kind = std::str::from_utf8(kind).unwrap_or_default();
    if names.is_empty() {
        return frames::confirmation(proto, kind, None, count);
    }
    let mut out = BytesMut::new();
    for name in names {
        out.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
    }
    out.freeze()
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|e| e.into_inner())
}
