//! The proxy's connected clients, for CLIENT ID/LIST/INFO/KILL and connection counts.
//!
//! A session holds its entry through a [`ClientGuard`] (see `guard`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures_util::task::AtomicWaker;

use crate::dispatch::BlockedOn;

use super::pause::ClientPause;

mod guard;

pub use guard::{ClientGuard, PostsSeen, Signal, Signals};

/// What CLIENT LIST shows of one client.
#[derive(Debug, Clone)]
pub struct ClientEntry {
    /// The client's address (`addr=`).
    pub addr: SocketAddr,
    /// The proxy address it connected to (`laddr=`).
    pub laddr: SocketAddr,
    /// Its CLIENT SETNAME name, empty when none (`name=`).
    pub name: String,
    /// When it connected (`age=`).
    pub created: Instant,
    /// Its protocol version, 2 or 3 (`resp=`).
    pub resp: u8,
    /// The database it selected (`db=`).
    pub db: u32,
    /// Its library's name, as CLIENT SETINFO gave it (`lib-name=`); empty until then.
    pub lib_name: String,
    /// Its library's version, as CLIENT SETINFO gave it (`lib-ver=`); empty until then.
    pub lib_ver: String,
    /// The user it runs as (`user=`); `default` before it authenticates, as in Redis.
    pub user: String,
    /// Its channel, pattern and shard channel subscriptions (`sub=`, `psub=`, `ssub=`).
    pub subscriptions: Subscriptions,
    /// Its client-side caching (`flags=t`, `R`, `B`, `redir=`).
    pub tracking: TrackingShown,
    /// When it last sent or was sent something and what it last ran (`idle=`, `cmd=`), and whether
    /// CLIENT KILL picked it.
    activity: Arc<Activity>,
}

/// What the session records per read, write and command, and the kill signal it waits on:
/// shared with the registry without a lock.
///
/// Laid out in order, on a line of its own: what a session reads or writes (the signals,
/// the mail flag, the last command, the activity) comes first and fits in one cache line,
/// which with a thousand clients is one miss instead of one per field. A session reads it
/// only when something was posted to a client (see [`Registry::posted`]) or what others see
/// of it changes.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Activity {
    /// Set by CLIENT KILL; `signal_waker` wakes the session for it and for nudges.
    killed: AtomicBool,
    /// Invalidation messages wait in `mailbox`: spares the lock while there are none.
    has_mail: AtomicBool,
    /// A request of its own is held by CLIENT PAUSE (`flags=b`, as Redis shows it).
    paused: AtomicBool,
    /// Bumped by [`Registry::wake_all`]: the session looks at its configuration again and
    /// gives back the buffers of an idle connection.
    nudges: AtomicU64,
    /// The command-table index of its last command, plus one (0: none yet).
    last_command: AtomicUsize,
    /// Milliseconds from the client's connect to its last read or write.
    last_active_ms: AtomicU64,
    signal_waker: AtomicWaker,
    /// Where its blocking command waits, if one runs (CLIENT UNBLOCK, `flags=b`).
    blocked: Arc<BlockedOn>,
    /// Invalidation messages for the client (client-side caching), taken by its session
    /// when nudged.
    mailbox: Mutex<Vec<Bytes>>,
}

/// What CLIENT LIST shows of a client's tracking (Redis's `t`, `R` and `B` flags and
/// `redir=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackingShown {
    /// CLIENT TRACKING is on.
    pub on: bool,
    /// In BCAST mode.
    pub bcast: bool,
    /// Its REDIRECT client went away.
    pub broken: bool,
    /// Its REDIRECT client, 0 for none.
    pub redirect: u64,
}

/// How many subscriptions of each kind a client has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Subscriptions {
    pub channels: usize,
    pub patterns: usize,
    pub shard_channels: usize,
}

impl Subscriptions {
    /// Whether there is any (Redis's subscribed mode).
    pub fn any(&self) -> bool {
        self.channels + self.patterns + self.shard_channels > 0
    }
}

/// The client classes of CLIENT LIST TYPE and CLIENT KILL TYPE. Clients of the proxy are
/// never masters or replicas; a client with subscriptions is `pubsub`, as in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientType {
    Normal,
    Master,
    Replica,
    PubSub,
}

impl ClientType {
    /// Redis's names, any case; `slave` is `replica`.
    pub fn parse(name: &[u8]) -> Option<ClientType> {
        match name.to_ascii_lowercase().as_slice() {
            b"normal" => Some(ClientType::Normal),
            b"master" => Some(ClientType::Master),
            b"replica" | b"slave" => Some(ClientType::Replica),
            b"pubsub" => Some(ClientType::PubSub),
            _ => None,
        }
    }

    fn of(entry: &ClientEntry) -> ClientType {
        if entry.subscriptions.any() {
            ClientType::PubSub
        } else {
            ClientType::Normal
        }
    }
}

/// The clients CLIENT KILL picks: every given criterion must match.
#[derive(Debug, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    pub client_type: Option<ClientType>,
    pub user: Option<String>,
    /// Spares the client that sent the command.
    pub skip_me: bool,
}

impl KillFilter {
    fn matches(&self, id: u64, entry: &ClientEntry, caller: u64) -> bool {
        self.id.is_none_or(|wanted| wanted == id)
            && self
                .addr
                .as_ref()
                .is_none_or(|a| *a == entry.addr.to_string())
            && self
                .laddr
                .as_ref()
                .is_none_or(|a| *a == entry.laddr.to_string())
            && self.client_type.is_none_or(|t| t == ClientType::of(entry))
            && self.user.as_ref().is_none_or(|u| *u == entry.user)
            && !(self.skip_me && id == caller)
    }
}

/// Every client connected to this proxy.
#[derive(Debug, Default)]
pub struct Registry {
    next_id: AtomicU64,
    /// Set once, when the proxy starts its graceful drain (see [`Registry::start_drain`]).
    draining: AtomicBool,
    clients: Arc<Clients>,
    pause: ClientPause,
    budget: super::flow::SharedBudget,
    monitors: Arc<super::monitor::Monitors>,
    tracking: Arc<super::tracking::Tracking>,
}

/// The registry's clients, and how many times anything was posted to one of them.
#[derive(Debug, Default)]
struct Clients {
    entries: Mutex<BTreeMap<u64, ClientEntry>>,
    /// Bumped after each kill, nudge, mail or drain is posted, before the session is woken
    /// for it: a session looks at its own record only when this moved since it last
    /// looked, so its turns read a line every session shares instead of one of their own.
    posted: AtomicU64,
}

impl Clients {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientEntry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called after the client's record was changed and before its session is woken.
    fn bump_posted(&self) {
        self.posted.fetch_add(1, Ordering::Release);
    }
}

/// Where invalidation messages are posted: the registry's clients, shared with the task
/// that reads the masters' reports.
#[derive(Clone)]
pub struct Mailboxes {
    clients: Arc<Clients>,
}

impl Mailboxes {
    /// Posts what `frame` makes of client `id`'s entry (its protocol, its subscriptions)
    /// to the client, and nudges its session: `None` when the client is gone, else
    /// whether there was something to post.
    pub fn post(
        &self,
        id: u64,
        frame: impl FnOnce(&mut ClientEntry) -> Option<Bytes>,
    ) -> Option<bool> {
        let mut clients = self.clients.lock();
        let entry = clients.get_mut(&id)?;
        let frame = frame(entry);
        let posted = frame.is_some();
        if let Some(frame) = frame {
            let activity = &entry.activity;
            activity
                .mailbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(frame);
            activity.has_mail.store(true, Ordering::Release);
            activity.nudges.fetch_add(1, Ordering::Release);
            self.clients.bump_posted();
            activity.signal_waker.wake();
        }
        Some(posted)
    }
}

impl Registry {
    /// The clients that track keys (CLIENT TRACKING).
    pub fn tracking(&self) -> &Arc<super::tracking::Tracking> {
        &self.tracking
    }

    /// Where invalidation messages are posted.
    pub fn mailboxes(&self) -> Mailboxes {
        Mailboxes {
            clients: self.clients.clone(),
        }
    }

    /// What CLIENT LIST shows of client `id`'s tracking.
    pub fn tracking_shown(&self, id: u64) -> TrackingShown {
        self.lock()
            .get(&id)
            .map(|entry| entry.tracking)
            .unwrap_or_default()
    }

    /// The clients that monitor (MONITOR).
    pub fn monitors(&self) -> &Arc<super::monitor::Monitors> {
        &self.monitors
    }

    /// Closes client `id` as CLIENT KILL ID would (a monitor dropped for falling behind).
    pub fn kill_one(&self, id: u64) {
        let filter = KillFilter {
            id: Some(id),
            ..KillFilter::default()
        };
        self.kill(&filter, 0);
    }

    /// What all clients owe together (flow control, `max_buffered_bytes`).
    pub fn budget(&self) -> &super::flow::SharedBudget {
        &self.budget
    }

    /// CLIENT PAUSE, which holds every client's commands.
    pub fn pause(&self) -> &ClientPause {
        &self.pause
    }

    /// Registers a client running as `user`; it is removed when the returned guard is
    /// dropped.
    pub fn register(
        self: &Arc<Self>,
        addr: SocketAddr,
        laddr: SocketAddr,
        user: Option<&str>,
        blocked: Arc<BlockedOn>,
    ) -> ClientGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let activity = Arc::new(Activity {
            blocked,
            ..Activity::default()
        });
        let created = Instant::now();
        let entry = ClientEntry {
            addr,
            laddr,
            name: String::new(),
            created,
            resp: 2,
            db: 0,
            lib_name: String::new(),
            lib_ver: String::new(),
            user: user.unwrap_or("default").to_owned(),
            subscriptions: Subscriptions::default(),
            tracking: TrackingShown::default(),
            activity: activity.clone(),
        };
        self.lock().insert(id, entry);
        ClientGuard {
            id,
            activity,
            created,
            registry: self.clone(),
        }
    }

    /// Number of connected clients.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no client is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes what is shown of client `id`.
    pub fn update(&self, id: u64, change: impl FnOnce(&mut ClientEntry)) {
        if let Some(entry) = self.lock().get_mut(&id) {
            change(entry);
        }
    }

    /// Where client `id`'s blocking commands are shown, if it is connected.
    pub fn blocked_on(&self, id: u64) -> Option<Arc<BlockedOn>> {
        Some(self.lock().get(&id)?.activity.blocked.clone())
    }

    /// One CLIENT LIST / CLIENT INFO line for `id`, in Redis's format; `command_name`
    /// names a command-table index (`cmd=`).
    pub fn line(&self, id: u64, command_name: CommandName<'_>) -> Option<String> {
        self.lock()
            .get(&id)
            .map(|entry| format_line(id, entry, command_name))
    }

    /// CLIENT LIST: one line per client, oldest first; only `client_type`'s when given.
    pub fn list(&self, client_type: Option<ClientType>, command_name: CommandName<'_>) -> String {
        self.lock()
            .iter()
            .filter(|(_, entry)| client_type.is_none_or(|t| t == ClientType::of(entry)))
            .map(|(id, entry)| format_line(*id, entry, command_name))
            .collect()
    }

    /// Whether client `id` is connected.
    pub fn contains(&self, id: u64) -> bool {
        self.lock().contains_key(&id)
    }

    /// CLIENT KILL: ends every client `filter` picks except `caller` (whose connection the
    /// caller closes after its reply). Returns how many were picked, and whether `caller`
    /// was one of them.
    pub fn kill(&self, filter: &KillFilter, caller: u64) -> (usize, bool) {
        let clients = self.lock();
        let mut killed = 0;
        let mut caller_killed = false;
        for (id, entry) in clients.iter() {
            if filter.matches(*id, entry, caller) {
                killed += 1;
                if *id == caller {
                    caller_killed = true;
                } else {
                    entry.activity.killed.store(true, Ordering::Release);
                    self.clients.bump_posted();
                    entry.activity.signal_waker.wake();
                }
            }
        }
        (killed, caller_killed)
    }

    /// Starts the graceful drain: every session, and every one registered from now on,
    /// gets [`Signal::Drain`] once.
    pub fn start_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.clients.bump_posted();
        for entry in self.lock().values() {
            entry.activity.signal_waker.wake();
        }
    }

    /// Whether the graceful drain has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Nudges every client's session once, so it looks at the configuration again (after
    /// a reload); nobody is killed.
    pub fn wake_all(&self) {
        for entry in self.lock().values() {
            entry.activity.nudges.fetch_add(1, Ordering::Release);
            self.clients.bump_posted();
            entry.activity.signal_waker.wake();
        }
    }

    /// How many times a kill, a nudge, mail or the drain was posted to any client: when it
    /// has not moved, no client has anything new (see [`ClientGuard::signals`]).
    pub fn posted(&self) -> u64 {
        self.clients.posted.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientEntry>> {
        self.clients.lock()
    }
}

/// A command's name (`get`, `client|list`) by its command-table index.
pub type CommandName<'a> = &'a dyn Fn(usize) -> Option<&'a str>;

fn format_line(id: u64, e: &ClientEntry, command_name: CommandName<'_>) -> String {
    // Redis's letters, in its order; N for none.
    let pubsub = ClientType::of(e) == ClientType::PubSub;
    let blocked =
        e.activity.paused.load(Ordering::Relaxed) || e.activity.blocked.current().is_some();
    let tracking = e.tracking;
    let mut flags = String::new();
    for (set, letter) in [
        (pubsub, 'P'),
        (blocked, 'b'),
        (tracking.on, 't'),
        (tracking.on && tracking.broken, 'R'),
        (tracking.on && tracking.bcast, 'B'),
    ] {
        if set {
            flags.push(letter);
        }
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let redir = match tracking.on {
        true => tracking.redirect as i64,
        false => -1,
    };
    let age = e.created.elapsed();
    let last_active =
        std::time::Duration::from_millis(e.activity.last_active_ms.load(Ordering::Relaxed));
    let idle = age.saturating_sub(last_active).as_secs();
    // As Redis before a client's first command.
    let cmd = match e.activity.last_command.load(Ordering::Relaxed) {
        0 => None,
        index => command_name(index - 1),
    }
    .unwrap_or("NULL");
    format!(
        "id={id} addr={} laddr={} fd=-1 name={} age={} idle={idle} flags={flags} db={} sub={} \
         psub={} ssub={} multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
         oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user={} redir={redir} resp={} lib-name={} \
         lib-ver={}\n",
        e.addr,
        e.laddr,
        e.name,
        age.as_secs(),
        e.db,
        e.subscriptions.channels,
        e.subscriptions.patterns,
        e.subscriptions.shard_channels,
        e.user,
        e.resp,
        e.lib_name,
        e.lib_ver
    )
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    #[test]
    fn what_a_session_touches_every_turn_shares_one_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Activity>(), 64);
        let end = offset_of!(Activity, signal_waker) + size_of::<AtomicWaker>();
        assert!(end <= 64, "the per-turn fields end at byte {end}");
    }

    fn registry_with_two() -> (Arc<Registry>, ClientGuard, ClientGuard) {
        let registry = Arc::new(Registry::default());
        let laddr: SocketAddr = "127.0.0.1:6380".parse().unwrap();
        let a = registry.register(
            "127.0.0.1:5001".parse().unwrap(),
            laddr,
            None,
            Default::default(),
        );
        let b = registry.register(
            "127.0.0.1:5002".parse().unwrap(),
            laddr,
            Some("bot"),
            Default::default(),
        );
        (registry, a, b)
    }

    #[test]
    fn drain_reaches_every_session_once_and_wakes_it() {
        use futures_util::task::ArcWake;
        use std::sync::atomic::AtomicUsize;
        use std::task::{Context, Poll};

        #[derive(Default)]
        struct CountingWaker(AtomicUsize);
        impl ArcWake for CountingWaker {
            fn wake_by_ref(waker: &Arc<Self>) {
                waker.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        let (registry, a, _b) = registry_with_two();
        let woken = Arc::new(CountingWaker::default());
        let waker = futures_util::task::waker(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut signals = std::pin::pin!(a.signals());
        assert!(signals.as_mut().poll(&mut cx).is_pending());
        registry.start_drain();
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the waiting session is woken"
        );
        assert_eq!(signals.as_mut().poll(&mut cx), Poll::Ready(Signal::Drain));
        assert!(signals.as_mut().poll(&mut cx).is_pending(), "only once");
        // A session that starts during the drain knows it from `is_draining`.
        assert!(registry.is_draining());
        assert!(std::pin::pin!(a.signals()).poll(&mut cx).is_pending());
    }

    /// CLIENT KILL ID `id` (the caller spared, as by default).
    fn only(id: u64) -> KillFilter {
        KillFilter {
            id: Some(id),
            skip_me: true,
            ..KillFilter::default()
        }
    }

    #[test]
    fn kill_picks_by_every_criterion_and_spares_the_caller_unless_asked() {
        let (registry, a, b) = registry_with_two();
        let by_user = KillFilter {
            user: Some("bot".into()),
            skip_me: true,
            ..KillFilter::default()
        };
        assert_eq!(registry.kill(&by_user, a.id), (1, false));
        let everyone = KillFilter {
            laddr: Some("127.0.0.1:6380".into()),
            skip_me: true,
            ..KillFilter::default()
        };
        assert_eq!(registry.kill(&everyone, a.id), (1, false));
        let me_too = KillFilter {
            skip_me: false,
            ..everyone
        };
        assert_eq!(registry.kill(&me_too, a.id), (2, true));
        let nobody = KillFilter {
            addr: Some("127.0.0.1:5001".into()),
            id: Some(b.id),
            ..KillFilter::default()
        };
        assert_eq!(registry.kill(&nobody, a.id), (0, false));
    }

    #[tokio::test]
    async fn a_kill_before_the_wait_is_not_lost() {
        let (registry, a, b) = registry_with_two();
        let filter = only(b.id);
        registry.kill(&filter, a.id);
        let signal = tokio::time::timeout(std::time::Duration::from_secs(5), b.signals())
            .await
            .expect("the kill reached the client");
        assert_eq!(signal, Signal::Kill);
    }

    #[tokio::test]
    async fn signals_posted_together_are_each_told_once() {
        let (registry, _a, b) = registry_with_two();
        let signals = b.signals();
        tokio::pin!(signals);
        let brief = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(brief, &mut signals).await.is_err());
        // Both posted before the session looks again: the look that finds the nudge must
        // not count the drain as seen.
        registry.wake_all();
        registry.start_drain();
        let second = std::time::Duration::from_secs(5);
        assert_eq!(
            tokio::time::timeout(second, &mut signals).await,
            Ok(Signal::Nudge)
        );
        assert_eq!(
            tokio::time::timeout(second, &mut signals).await,
            Ok(Signal::Drain)
        );
        assert!(tokio::time::timeout(brief, &mut signals).await.is_err());
    }

    #[tokio::test]
    async fn a_signal_for_another_client_leaves_this_one_waiting_but_listening() {
        let (registry, a, b) = registry_with_two();
        let signals = b.signals();
        tokio::pin!(signals);
        let brief = std::time::Duration::from_millis(50);
        registry.kill(&only(a.id), 0);
        assert_eq!(registry.posted(), 1, "the kill is counted");
        assert!(tokio::time::timeout(brief, &mut signals).await.is_err());
        registry.kill(&only(b.id), 0);
        assert_eq!(
            tokio::time::timeout(std::time::Duration::from_secs(5), &mut signals).await,
            Ok(Signal::Kill)
        );
    }

    #[tokio::test]
    async fn a_nudge_wakes_a_waiting_client_and_a_later_kill_still_does() {
        let (registry, a, b) = registry_with_two();
        let signals = b.signals();
        tokio::pin!(signals);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), &mut signals);
        assert!(waiting.await.is_err(), "nothing to tell yet");
        let nudger = std::thread::spawn({
            let registry = registry.clone();
            move || registry.wake_all()
        });
        let second = std::time::Duration::from_secs(5);
        assert_eq!(
            tokio::time::timeout(second, &mut signals).await,
            Ok(Signal::Nudge)
        );
        nudger.join().unwrap();
        let killer = std::thread::spawn({
            let registry = registry.clone();
            let filter = only(b.id);
            move || registry.kill(&filter, a.id)
        });
        assert_eq!(
            tokio::time::timeout(second, &mut signals).await,
            Ok(Signal::Kill)
        );
        killer.join().unwrap();
    }

    #[test]
    fn idle_and_cmd_come_from_the_last_activity_and_command() {
        let (registry, a, _b) = registry_with_two();
        let names = |index: usize| (index == 7).then_some("client|list");
        let line = registry.line(a.id, &names).unwrap();
        assert!(
            line.contains(" idle=0 ") && line.contains(" cmd=NULL "),
            "{line}"
        );
        a.ran(7);
        a.active_at(Instant::now());
        let line = registry.line(a.id, &names).unwrap();
        assert!(
            line.contains(" idle=0 ") && line.contains(" cmd=client|list "),
            "{line}"
        );
        // Activity recorded long before now (the connect) shows as idle time.
        a.active_at(a.created);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let line = registry.line(a.id, &names).unwrap();
        assert!(line.contains(" idle=1 "), "{line}");
    }

    #[tokio::test]
    async fn a_kill_while_waiting_wakes_the_waiter() {
        let (registry, a, b) = registry_with_two();
        let filter = only(b.id);
        let (registry, caller) = (registry.clone(), a.id);
        // From another thread, once the waiter is asleep: only its waker can wake it.
        let killer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            registry.kill(&filter, caller)
        });
        let started = Instant::now();
        let signal = tokio::time::timeout(std::time::Duration::from_secs(5), b.signals())
            .await
            .expect("the kill reached the waiting client");
        assert_eq!(signal, Signal::Kill);
        // Woken by the kill itself, not found at the timeout's own wake-up.
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(killer.join().unwrap(), (1, false));
    }

    #[test]
    fn clients_with_subscriptions_are_pubsub_clients() {
        let (registry, a, _b) = registry_with_two();
        registry.update(a.id, |e| e.subscriptions.patterns = 1);
        let names = |_: usize| None;
        let listed = registry.list(Some(ClientType::PubSub), &names);
        assert!(listed.starts_with(&format!("id={} ", a.id)), "{listed}");
        assert!(
            listed.contains(" flags=P ") && listed.contains(" psub=1 "),
            "{listed}"
        );
        assert_eq!(listed.lines().count(), 1);
        assert_eq!(
            registry
                .list(Some(ClientType::Normal), &names)
                .lines()
                .count(),
            1
        );
        assert_eq!(registry.list(Some(ClientType::Master), &names), "");
        assert!(registry.list(None, &names).contains(" user=bot "));
    }
}
