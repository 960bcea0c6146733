//! Client-side caching (CLIENT TRACKING) through the proxy: which keys each tracking
//! client is owed an invalidation for, and the messages that tell it, as one Redis keeps
//! them (Redis's tracking.c is the model).
//!
//! # How the invalidations reach the proxy
//!
//! While at least one client tracks, the proxy holds one RESP3 connection per master with
//! `CLIENT TRACKING ON BCAST` (see `upstream::invalidations`): every master reports every
//! key modified, expired, evicted or flushed there, by whoever wrote it. The proxy matches
//! those reports against what each of its tracking clients is owed:
//!
//! - default mode: the keys of the read-only commands the client sent while tracking
//!   (OPTIN/OPTOUT with CLIENT CACHING as Redis), each invalidated once and then
//!   forgotten; the table holds at most `tracking_table_max_keys` keys, past which keys
//!   are dropped with an invalidation, as Redis's `tracking-table-max-keys`;
//! - BCAST: every reported key under one of the client's prefixes.
//!
//! Keys are shown under the client's names (see [`Naming`]): a database other than 0
//! stores `k` as `__db<n>:k`, and the report is named back to `k` (as Redis, whose
//! tracking ignores the database, a client is told of `k` in any database); under a key
//! layout, a cluster name is named back to its legacy name, and the layout's internal keys
//! (indices) are nobody's.
//!
//! # Why no stale value is served silently
//!
//! - A key is recorded when the read is admitted, before it is sent: a write the master
//!   runs after the read is reported after the record exists, so it is never missed.
//! - A message goes behind every reply already due to the client (its session queues it
//!   after the requests in flight), so an invalidation never overtakes the reply it
//!   invalidates. (With REDIRECT it goes to another connection, as on Redis, where the
//!   same race exists between two connections.)
//! - While the tracking connection of some master is not up (lost, not yet open, or a
//!   new master after a failover), nothing read is recorded: each read key is invalidated
//!   at once, behind its reply. When a connection goes down or comes up, every client
//!   that sent a command since its last flush is told to flush everything (a null
//!   invalidation): what it read meanwhile may have changed unseen.
//! - A slot moving between masters the proxy tracks needs nothing more: MIGRATE deletes
//!   the key on the source (reported there), and writes on the target are reported there.
//!
//! # What is weaker than one Redis
//!
//! - A write is acknowledged to its writer before the invalidation crosses the proxy (on
//!   Redis it is queued for the tracking clients before the writer's reply).
//! - NOLOOP is accepted, but a client is also told of its own writes: a master's report
//!   does not say who wrote, and suppressing a key the client wrote could hide another
//!   client's write of it.
//! - A FLUSHALL reaches every master, each reporting a flush: a client that sends
//!   commands between them is told more than once.

mod enabled;
mod messages;
mod naming;
mod options;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::sync::{mpsc, watch};

use crate::route::NodeAddr;
use crate::topology::Topology;
use crate::upstream::invalidations::{InvalidationWatch, Report};

use super::registry::Mailboxes;

pub use enabled::Enabled;
use messages::{post_all, Message, Posts};
pub use naming::Naming;
pub use options::{info, parse, Switch, TrackingOptions};

/// How long CLIENT TRACKING ON waits for the tracking connections to every master before
/// it answers anyway (reads are then invalidated at once until they are up).
pub const READY_WAIT: Duration = Duration::from_secs(5);

/// Every tracking client of the proxy and the keys they are owed (process-wide, in the
/// [`super::Registry`]).
#[derive(Default)]
pub struct Tracking {
    hub: Mutex<Hub>,
    /// INFO's `tracking_clients`.
    clients: AtomicUsize,
}

#[derive(Default)]
struct Hub {
    clients: HashMap<u64, Tracker>,
    /// Default mode: a key (as the client named it) to the clients that read it.
    keys: HashMap<Bytes, SmallVec<[u64; 2]>>,
    /// The client ids over all of `keys` (INFO's `tracking_total_items`).
    items: usize,
    /// The distinct prefixes of BCAST clients (INFO's `tracking_total_prefixes`).
    prefixes: usize,
    watch: Option<Watch>,
    /// Counts the watches started, so a report of a closed one is told apart.
    generation: u64,
    /// How stored keys are named to the clients.
    naming: Naming,
}

struct Tracker {
    options: TrackingOptions,
    /// The client sent a command since it was last told to flush.
    dirty: bool,
}

/// The tracking connections in use and which of them report now.
struct Watch {
    _connections: InvalidationWatch,
    topology: Arc<Topology>,
    generation: u64,
    up: HashSet<NodeAddr>,
    /// Whether every master of the current map reports (CLIENT TRACKING ON waits for it).
    ready: watch::Sender<bool>,
}

impl std::fmt::Debug for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracking")
            .field("clients", &self.clients())
            .finish_non_exhaustive()
    }
}

impl Tracking {
    /// How many clients track (INFO's `tracking_clients`).
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Client `id` tracks under `options` from now on (also when it tracked already).
    /// Returns what to wait for before answering: the tracking connections of every
    /// master, when they are not all up yet.
    pub fn enable(
        self: &Arc<Self>,
        id: u64,
        options: TrackingOptions,
        topology: &Arc<Topology>,
        mailboxes: &Mailboxes,
        naming: Naming,
    ) -> Option<watch::Receiver<bool>> {
        let mut hub = self.lock();
        hub.naming = naming;
        // A second ON keeps what the client may hold from before.
        let dirty = hub.clients.get(&id).is_some_and(|t| t.dirty);
        let tracker = Tracker { options, dirty };
        if hub.clients.insert(id, tracker).is_none() {
            self.clients.fetch_add(1, Ordering::Relaxed);
            crate::metrics::tracking_clients(1);
        }
        let posts = self.follow(&mut hub, topology, mailboxes);
        hub.count_prefixes();
        hub.show();
        let ready = hub.watch.as_ref().map(|w| w.ready.subscribe());
        drop(hub);
        post_all(self, mailboxes, posts);
        ready.filter(|ready| !*ready.borrow())
    }

    /// Client `id` stops tracking (CLIENT TRACKING OFF, RESET, disconnect). Its keys stay
    /// in the table until invalidated or evicted, as Redis leaves them; the tracking
    /// connections close with the last tracking client.
    pub fn disable(&self, id: u64) {
        let mut hub = self.lock();
        if hub.clients.remove(&id).is_some() {
            self.clients.fetch_sub(1, Ordering::Relaxed);
            crate::metrics::tracking_clients(-1);
        }
        if hub.clients.is_empty() {
            hub.watch = None;
            hub.keys = HashMap::new();
            hub.items = 0;
        }
        hub.count_prefixes();
        hub.show();
    }

    /// Client `id` sent a command: `read` are the keys it reads that it may cache (empty
    /// for a command that reads none). Recorded for a default-mode client while every
    /// master reports; invalidated at once (behind the reply) while one does not.
    pub fn note(
        self: &Arc<Self>,
        id: u64,
        read: Vec<Bytes>,
        topology: &Arc<Topology>,
        mailboxes: &Mailboxes,
        max_keys: usize,
    ) {
        let mut hub = self.lock();
        if !hub.clients.contains_key(&id) {
            return;
        }
        let mut posts = self.follow(&mut hub, topology, mailboxes);
        let Some(tracker) = hub.clients.get_mut(&id) else {
            return;
        };
        tracker.dirty = true;
        let (bcast, redirect) = (tracker.options.bcast, tracker.options.redirect);
        if read.is_empty() {
            // Nothing to record.
        } else if !hub.all_up() {
            posts.push((id, redirect, Message::Keys(read)));
        } else if !bcast {
            for key in read {
                let readers = hub.keys.entry(key).or_default();
                if !readers.contains(&id) {
                    readers.push(id);
                    hub.items += 1;
                }
            }
            posts.extend(hub.evict_over(max_keys));
        }
        hub.show();
        drop(hub);
        post_all(self, mailboxes, posts);
    }

    /// Starts the tracking connections if none run for `topology` (the first tracking
    /// client, or a reload that changed the upstream: then everyone flushes).
    fn follow(
        self: &Arc<Self>,
        hub: &mut Hub,
        topology: &Arc<Topology>,
        mailboxes: &Mailboxes,
    ) -> Posts {
        if hub
            .watch
            .as_ref()
            .is_some_and(|w| Arc::ptr_eq(&w.topology, topology))
        {
            return Vec::new();
        }
        let posts = match hub.watch {
            Some(_) => hub.flush_dirty(),
            None => Vec::new(),
        };
        hub.generation += 1;
        let (reports, received) = mpsc::unbounded_channel();
        let (ready, _) = watch::channel(false);
        hub.watch = Some(Watch {
            _connections: InvalidationWatch::start(topology.clone(), reports),
            topology: topology.clone(),
            generation: hub.generation,
            up: HashSet::new(),
            ready,
        });
        tokio::spawn(read_reports(
            self.clone(),
            mailboxes.clone(),
            received,
            hub.generation,
        ));
        posts
    }

    /// What a report of the watch `generation` changes, and the messages it makes.
    fn on_report(&self, generation: u64, report: Report) -> Posts {
        let mut hub = self.lock();
        if hub.watch.as_ref().map(|w| w.generation) != Some(generation) {
            return Vec::new();
        }
        let posts = match report {
            Report::Keys(keys) => hub.invalidate(&keys),
            Report::Flush => hub.flush_dirty(),
            Report::Up(addr) => {
                if let Some(watch) = hub.watch.as_mut() {
                    watch.up.insert(addr);
                }
                hub.flush_dirty()
            }
            // A failed attempt to reopen changes nothing: the reads since the loss were
            // invalidated one by one.
            Report::Down(addr) => match hub.watch.as_mut().is_some_and(|w| w.up.remove(&addr)) {
                true => hub.flush_dirty(),
                false => Vec::new(),
            },
        };
        let all_up = hub.all_up();
        if let Some(watch) = &hub.watch {
            watch
                .ready
                .send_if_modified(|ready| std::mem::replace(ready, all_up) != all_up);
        }
        hub.show();
        posts
    }

    /// Whether client `id` tracks.
    fn tracks(&self, id: u64) -> bool {
        self.lock().clients.contains_key(&id)
    }

    fn lock(&self) -> MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Hub {
    /// Shows the table's size (metrics, INFO's `tracking_total_*`): the keys, the client
    /// ids over them, and the distinct prefixes of BCAST clients.
    fn show(&self) {
        crate::metrics::tracking_table(self.keys.len(), self.items, self.prefixes);
    }

    /// Counts the distinct prefixes of BCAST clients again (their clients changed).
    fn count_prefixes(&mut self) {
        let mut prefixes: Vec<&Bytes> = self
            .clients
            .values()
            .filter(|t| t.options.bcast)
            .flat_map(|t| &t.options.prefixes)
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        self.prefixes = prefixes.len();
    }

    /// Whether every master of the current slot map reports its writes.
    fn all_up(&self) -> bool {
        self.watch.as_ref().is_some_and(|watch| {
            let routing = watch.topology.routing();
            let masters = routing.map.masters();
            !masters.is_empty() && masters.iter().all(|m| watch.up.contains(m))
        })
    }

    /// The messages for `stored` keys (as stored on a master) that were modified.
    fn invalidate(&mut self, stored: &[Bytes]) -> Posts {
        let mut posts = Posts::new();
        let mut bcast: HashMap<(u64, usize), Vec<Bytes>> = HashMap::new();
        let has_bcast = self.clients.values().any(|t| t.options.bcast);
        for name in stored.iter().flat_map(|key| self.naming.client_names(key)) {
            if let Some(readers) = self.keys.remove(&name) {
                self.items = self.items.saturating_sub(readers.len());
                for id in readers {
                    // As Redis: a client that stopped tracking, or went BCAST, is skipped.
                    if let Some(t) = self.clients.get(&id).filter(|t| !t.options.bcast) {
                        let keys = vec![name.clone()];
                        posts.push((id, t.options.redirect, Message::Keys(keys)));
                    }
                }
            }
            if !has_bcast {
                continue;
            }
            for (id, tracker) in self.clients.iter().filter(|(_, t)| t.options.bcast) {
                for (at, prefix) in tracker.options.prefixes.iter().enumerate() {
                    if name.starts_with(prefix) {
                        bcast.entry((*id, at)).or_default().push(name.clone());
                    }
                }
            }
        }
        for ((id, _), keys) in bcast {
            let redirect = self.clients.get(&id).map_or(0, |t| t.options.redirect);
            posts.push((id, redirect, Message::Keys(keys)));
        }
        posts
    }

    /// A flush for every client that sent a command since its last one (the others hold
    /// nothing it could concern); the table is emptied, as Redis empties it on FLUSHALL.
    fn flush_dirty(&mut self) -> Posts {
        self.keys = HashMap::new();
        self.items = 0;
        let mut posts = Posts::new();
        for (id, tracker) in self.clients.iter_mut() {
            if std::mem::take(&mut tracker.dirty) {
                posts.push((*id, tracker.options.redirect, Message::Flush));
            }
        }
        posts
    }

    /// Drops keys past `max_keys` (0: no bound) with an invalidation to their readers.
    fn evict_over(&mut self, max_keys: usize) -> Posts {
        let mut posts = Posts::new();
        while max_keys > 0 && self.keys.len() > max_keys {
            let Some(key) = self.keys.keys().next().cloned() else {
                break;
            };
            let readers = self.keys.remove(&key).unwrap_or_default();
            self.items = self.items.saturating_sub(readers.len());
            for id in readers {
                if let Some(t) = self.clients.get(&id).filter(|t| !t.options.bcast) {
                    posts.push((id, t.options.redirect, Message::Keys(vec![key.clone()])));
                }
            }
        }
        posts
    }
}

/// Reads the reports of the watch `generation` until it closes.
async fn read_reports(
    tracking: Arc<Tracking>,
    mailboxes: Mailboxes,
    mut reports: mpsc::UnboundedReceiver<Report>,
    generation: u64,
) {
    while let Some(report) = reports.recv().await {
        let posts = tracking.on_report(generation, report);
        post_all(&tracking, &mailboxes, posts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub_with(clients: &[(u64, TrackingOptions)]) -> Hub {
        let mut hub = Hub {
            naming: Naming {
                databases: 16,
                layout: None,
            },
            ..Hub::default()
        };
        for (id, options) in clients {
            let tracker = Tracker {
                options: options.clone(),
                dirty: true,
            };
            hub.clients.insert(*id, tracker);
        }
        hub
    }

    fn names(posts: &Posts) -> Vec<(u64, Vec<String>)> {
        let mut out: Vec<(u64, Vec<String>)> = posts
            .iter()
            .map(|(id, _, message)| match message {
                Message::Keys(keys) => (
                    *id,
                    keys.iter()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .collect(),
                ),
                Message::Flush => (*id, vec!["<flush>".into()]),
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_key_read_is_invalidated_once_under_the_clients_name() {
        let mut hub = hub_with(&[
            (1, TrackingOptions::default()),
            (2, TrackingOptions::default()),
        ]);
        hub.keys
            .insert(Bytes::from_static(b"k"), SmallVec::from_slice(&[1, 2]));
        let posts = hub.invalidate(&[Bytes::from_static(b"__db3:k")]);
        assert_eq!(
            names(&posts),
            vec![(1, vec!["k".into()]), (2, vec!["k".into()])]
        );
        assert!(hub.invalidate(&[Bytes::from_static(b"k")]).is_empty());
    }

    #[test]
    fn bcast_clients_get_the_keys_under_each_prefix() {
        let bcast = |prefixes: &[&'static [u8]]| TrackingOptions {
            bcast: true,
            prefixes: prefixes.iter().map(|p| Bytes::from_static(p)).collect(),
            ..TrackingOptions::default()
        };
        let mut hub = hub_with(&[(1, bcast(&[b"a:", b"b:"])), (2, bcast(&[b""]))]);
        let stored = [&b"a:1"[..], b"b:1", b"c:1", b"a:2"].map(Bytes::from_static);
        let posts = hub.invalidate(&stored);
        assert_eq!(
            names(&posts),
            vec![
                (1, vec!["a:1".into(), "a:2".into()]),
                (1, vec!["b:1".into()]),
                (
                    2,
                    vec!["a:1".into(), "b:1".into(), "c:1".into(), "a:2".into()]
                ),
            ]
        );
    }

    #[test]
    fn the_table_is_bounded_with_an_invalidation_per_dropped_key() {
        let mut hub = hub_with(&[(1, TrackingOptions::default())]);
        for n in 0..10 {
            hub.keys
                .insert(Bytes::from(format!("k{n}")), SmallVec::from_slice(&[1]));
        }
        let posts = hub.evict_over(4);
        assert_eq!(hub.keys.len(), 4);
        assert_eq!(posts.len(), 6);
        assert!(hub.evict_over(0).is_empty());
    }

    #[test]
    fn a_flush_reaches_only_clients_that_sent_something_since_theirs() {
        let mut hub = hub_with(&[
            (1, TrackingOptions::default()),
            (2, TrackingOptions::default()),
        ]);
        hub.keys
            .insert(Bytes::from_static(b"k"), SmallVec::from_slice(&[1]));
        assert_eq!(names(&hub.flush_dirty()).len(), 2);
        assert!(hub.keys.is_empty());
        assert!(hub.flush_dirty().is_empty());
        hub.clients.get_mut(&2).unwrap().dirty = true;
        assert_eq!(names(&hub.flush_dirty()), vec![(2, vec!["<flush>".into()])]);
    }
}
