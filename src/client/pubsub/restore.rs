//! Opening the backend connections a client's subscriptions need, and subscribing them
//! again after a connection failed, a shard slot moved or a reload switched the upstream.
//!
//! Invariants: at most one re-subscription of each kind runs at a time (its flag in
//! [`Inner`] says so, and is cleared when it ends, whether it succeeded or gave up); every
//! re-subscription is idempotent with the subscriptions a link still holds, so it can
//! simply send everything the client's sets name.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::FutureExt;

use super::{lock, Background, Inner};
use crate::dispatch::{Proxy, PUBSUB_HOME_SLOT};
use crate::protocol::encode::encode_request;
use crate::protocol::Proto;
use crate::reply;
use crate::route::{NodeAddr, Redirect};
use crate::upstream::subscription::{Link, Role};

impl Inner {
    fn new_link(&mut self, addr: NodeAddr, proto: Proto, role: Role) -> Link {
        self.next_link += 1;
        Link::spawn(
            self.next_link,
            addr,
            // A subscription connection is quiet until something is published: the
            // dedicated connections' options, without a read timeout.
            self.proxy.topology.conn_options(proto),
            self.sink.clone(),
            role,
        )
    }

    /// The masters keyspace subscriptions need a connection to.
    fn keyspace_masters(&self, proto: Proto) -> Vec<NodeAddr> {
        let mut masters: Vec<NodeAddr> = self.proxy.topology.routing().map.masters().to_vec();
        if masters.is_empty() {
            // A standalone upstream: its one node has every key.
            if let Some(node) = self.proxy.topology.any_master(proto) {
                masters.push(node.addr().clone());
            }
        }
        masters
    }

    /// A keyspace connection to every master of the slot map as it is now (opened where
    /// missing; connections to nodes that are no longer masters are closed).
    pub(super) fn keyspace_links(&mut self, proto: Proto) -> Vec<Link> {
        let masters = self.keyspace_masters(proto);
        self.keyspace_links.retain(|addr, _| masters.contains(addr));
        for addr in masters {
            if !self.keyspace_links.contains_key(&addr) {
                let link = self.new_link(addr.clone(), proto, Role::Keyspace);
                self.keyspace_links.insert(addr, link);
            }
        }
        self.keyspace_links.values().cloned().collect()
    }

    /// The connection for channels and patterns, opened to the master of
    /// [`PUBSUB_HOME_SLOT`] if needed.
    pub(super) fn regular_link(&mut self, proto: Proto) -> Option<Link> {
        if let Some(link) = &self.regular {
            return Some(link.clone());
        }
        let addr = self
            .proxy
            .topology
            .master_for_slot(PUBSUB_HOME_SLOT, proto)?
            .addr()
            .clone();
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
    pub(super) fn prune_shard_links(&mut self) {
        let routing = self.proxy.topology.routing();
        let needed: HashSet<&NodeAddr> = self
            .shard
            .values()
            .filter_map(|slot| routing.map.master_addr(*slot))
            .collect();
        self.shard_links.retain(|addr, _| needed.contains(addr));
    }
}

/// Sends a shard command to the master of `slot`, following MOVED as the slot map catches up.
pub(super) async fn shard_call(
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

/// A kind of re-subscription: which links it restores and which flag marks it running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restore {
    /// The regular link's channels and patterns.
    Regular,
    /// The upstream keyspace channels and patterns, on every master.
    Keyspace,
    /// The shard channels, each on its slot's current master.
    Shard,
}

impl Restore {
    /// Starts this re-subscription in `background` unless one is already running (it
    /// reads the client's sets at each attempt, so it covers the new failure too).
    pub(super) fn start(
        self,
        inner: &mut Inner,
        shared: &Arc<Mutex<Inner>>,
        background: &mut Background,
    ) {
        let running = self.running(inner);
        if *running {
            return;
        }
        *running = true;
        let shared = shared.clone();
        background.push(async move { retrying(&shared, self).await }.boxed());
    }

    fn running(self, inner: &mut Inner) -> &mut bool {
        match self {
            Restore::Regular => &mut inner.restoring_regular,
            Restore::Keyspace => &mut inner.restoring_keyspace,
            Restore::Shard => &mut inner.restoring_shard,
        }
    }

    /// What it restores, for the reason a client is closed when it gives up.
    fn what(self) -> &'static str {
        match self {
            Restore::Regular => "channels",
            Restore::Keyspace => "keyspace notifications",
            Restore::Shard => "shard channels",
        }
    }
}

/// Runs the attempts of `restore` after each backoff of the retry policy until one
/// succeeds; `Err` with the last failure once the attempts are used up.
async fn retrying(shared: &Arc<Mutex<Inner>>, restore: Restore) -> Result<(), String> {
    // The policy and the topology of the snapshot the restore started under.
    let proxy = lock(shared).proxy.clone();
    let retry = &proxy.config.retry;
    let mut last = String::new();
    for attempt in 0..retry.attempts {
        tokio::time::sleep(retry.backoff(attempt)).await;
        let outcome = match restore {
            Restore::Regular => restore_regular(shared).await,
            Restore::Keyspace => restore_keyspace(shared, &proxy).await,
            Restore::Shard => restore_shard(shared, &proxy).await,
        };
        match outcome {
            Ok(()) => {
                *restore.running(&mut lock(shared)) = false;
                return Ok(());
            }
            Err(Some(reason)) => last = reason,
            Err(None) => {}
        }
    }
    *restore.running(&mut lock(shared)) = false;
    Err(format!("re-subscribing {} failed: {last}", restore.what()))
}

/// One attempt at subscribing the regular channels and patterns again on a new
/// connection. `Err(None)`: no connection could be had, for no new reason.
async fn restore_regular(shared: &Arc<Mutex<Inner>>) -> Result<(), Option<String>> {
    let (link, channels, patterns) = {
        let mut inner = lock(shared);
        let (channels, patterns) = inner.regular_names();
        if channels.is_empty() && patterns.is_empty() {
            return Ok(());
        }
        let proto = link_proto(&inner);
        let Some(link) = inner.regular_link(proto) else {
            return Err(None);
        };
        (link, channels, patterns)
    };
    let mut failure = None;
    for (command, kind, names) in subscribe_commands(&channels, &patterns) {
        if let Err(reason) = resubscribe(&link, command, kind, names).await {
            failure = Some(reason);
        }
    }
    let Some(reason) = failure else {
        return Ok(());
    };
    let mut inner = lock(shared);
    if inner.regular.as_ref().is_some_and(|l| l.id == link.id) {
        inner.regular = None;
    }
    Err(Some(reason))
}

/// One attempt at subscribing every upstream keyspace channel and pattern again on every
/// master (idempotent where a link still has them).
async fn restore_keyspace(shared: &Arc<Mutex<Inner>>, proxy: &Proxy) -> Result<(), Option<String>> {
    let (links, channels, patterns) = {
        let mut inner = lock(shared);
        if inner.keyspace.is_empty() {
            return Ok(());
        }
        let proto = link_proto(&inner);
        let links = inner.keyspace_links(proto);
        let channels: Vec<Bytes> = inner.keyspace.channels.keys().cloned().collect();
        let patterns: Vec<Bytes> = inner.keyspace.patterns.keys().cloned().collect();
        (links, channels, patterns)
    };
    if links.is_empty() {
        return Err(Some(reply::text::SLOT_UNSERVED.to_string()));
    }
    let mut failure = None;
    for link in &links {
        for (command, kind, names) in subscribe_commands(&channels, &patterns) {
            if let Err(reason) = resubscribe(link, command, kind, names).await {
                failure = Some(reason);
                lock(shared).keyspace_links.retain(|_, l| l.id != link.id);
            }
        }
    }
    let Some(reason) = failure else {
        // The master set may have changed while this attempt subscribed: then it missed
        // the new one, and the next attempt adds it.
        let inner = lock(shared);
        let masters = inner.keyspace_masters(link_proto(&inner));
        let current =
            masters.len() == links.len() && links.iter().all(|link| masters.contains(&link.addr));
        return if current {
            Ok(())
        } else {
            Err(Some("the cluster's masters changed meanwhile".to_string()))
        };
    };
    proxy.topology.request_refresh();
    Err(Some(reason))
}

/// One attempt at subscribing every shard channel again on its slot's current master
/// (idempotent where it is still subscribed).
async fn restore_shard(shared: &Arc<Mutex<Inner>>, proxy: &Proxy) -> Result<(), Option<String>> {
    let (by_slot, proto) = {
        let inner = lock(shared);
        let mut by_slot: HashMap<u16, Vec<Bytes>> = HashMap::new();
        for (name, slot) in &inner.shard {
            by_slot.entry(*slot).or_default().push(name.clone());
        }
        (by_slot, link_proto(&inner))
    };
    let mut failure = None;
    for (slot, names) in by_slot {
        let raw = command_bytes("SSUBSCRIBE", &names);
        let answer = shard_call(shared, slot, raw, b"ssubscribe", names.len(), proto).await;
        if let Err(reason) = accepted(answer) {
            failure = Some(reason);
        }
    }
    lock(shared).prune_shard_links();
    let Some(reason) = failure else {
        return Ok(());
    };
    proxy.topology.request_refresh();
    Err(Some(reason))
}

/// The commands that subscribe `channels` and `patterns` on a regular or keyspace link,
/// leaving out an empty set.
pub(super) fn subscribe_commands<'a>(
    channels: &'a [Bytes],
    patterns: &'a [Bytes],
) -> impl Iterator<Item = (&'static str, &'static [u8], &'a [Bytes])> {
    [
        ("SUBSCRIBE", &b"subscribe"[..], channels),
        ("PSUBSCRIBE", &b"psubscribe"[..], patterns),
    ]
    .into_iter()
    .filter(|(_, _, names)| !names.is_empty())
}

/// Sends `command` for `names` on `link` now; resolves to the failure, if any.
pub(super) fn resubscribe(
    link: &Link,
    command: &str,
    kind: &'static [u8],
    names: &[Bytes],
) -> impl Future<Output = Result<(), String>> + Send + 'static {
    let call = link.call(command_bytes(command, names), kind, names.len());
    async move { accepted(call.await) }
}

/// A backend answer as success or the reason it failed (an error reply counts as one).
fn accepted(answer: Result<Bytes, String>) -> Result<(), String> {
    match answer {
        Ok(answer) if answer.first() != Some(&b'-') => Ok(()),
        Ok(answer) => Err(String::from_utf8_lossy(&answer).trim_end().to_string()),
        Err(reason) => Err(reason),
    }
}

/// The protocol new connections of this client speak (messages are relayed as is).
fn link_proto(inner: &Inner) -> Proto {
    inner.proto
}

/// `command` with `names` as its arguments, encoded for a backend.
pub(super) fn command_bytes(command: &str, names: &[Bytes]) -> Bytes {
    let mut args: Vec<&[u8]> = Vec::with_capacity(names.len() + 1);
    args.push(command.as_bytes());
    args.extend(names.iter().map(|n| &n[..]));
    encode_request(&args)
}
