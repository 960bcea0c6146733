//! The live view of the upstream: the current slot map snapshot and the node connections.
//!
//! Readers load an immutable [`Routing`] snapshot (arc-swap: no lock on the command path).
//! A refresher task re-reads `CLUSTER SHARDS` (or `CLUSTER SLOTS`) from any known node
//! periodically and on request (MOVED, connection failure), never more often than
//! `min_refresh_interval`, so a reshard's burst of MOVED replies can't cause a storm.
//! Whoever holds per-master state (keyspace subscriptions) or state on the pub/sub home
//! (channels and patterns) watches for changes through [`Topology::watch_masters`].
//! A single-node upstream has a map of one master for every slot: a fixed address
//! (`standalone`), or the master a Sentinel group names (see `sentinel`), whose refresh
//! asks the Sentinels rather than reading a slot map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{watch, Notify};

use crate::backend::{ConnOptions, NodeConn, Prelude};
use crate::config::{Config, Upstream};
use crate::protocol::Proto;
use crate::route::{NodeAddr, SlotMap};

mod error;
mod readiness;
mod routing;
mod script_conns;
mod sentinel;
mod slot_map_reader;

pub use error::{SentinelAskError, SentinelError, SlotMapError, TopologyError};
pub use readiness::{LiveUpstream, Readiness};
pub use routing::{NodeConns, Routing};
pub use script_conns::{ScriptConns, ScriptLease, IDLE_PER_NODE};
pub use sentinel::FAILOVER_HOLD;
pub use slot_map_reader::{read_slot_map, Coverage};

/// What kind of upstream the proxy sends commands to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    /// A Redis Cluster.
    Cluster,
    /// One node at a fixed address.
    Standalone,
    /// The master a Sentinel group names.
    Sentinel,
}

impl UpstreamKind {
    /// The name INFO and the metrics use: `cluster`, `standalone`, `sentinel`.
    pub fn label(self) -> &'static str {
        match self {
            UpstreamKind::Cluster => "cluster",
            UpstreamKind::Standalone => "standalone",
            UpstreamKind::Sentinel => "sentinel",
        }
    }
}

/// Every client's channels and patterns are subscribed on the master of this slot (see
/// `client::pubsub`), and PUBLISH and PUBSUB CHANNELS/NUMSUB/NUMPAT run there: a cluster
/// node counts only its own subscribers, and on one node those are all of the proxy's, as
/// on a single Redis. When the slot moves, the subscriptions follow it.
pub const PUBSUB_HOME_SLOT: u16 = 0;

/// Connection settings shared by every node connection.
struct ConnSettings {
    username: Option<String>,
    password: Option<String>,
    connect_timeout: Duration,
    limits: crate::protocol::Limits,
    /// For the shared connections only: see [`Topology::new`].
    prelude: Option<Prelude>,
    /// For the shared connections only: the dedicated ones carry blocking commands.
    read_timeout: Option<Duration>,
    /// `backend.tls`; `None`: plain TCP.
    tls: Option<Arc<crate::tls::NodeTls>>,
}

/// The upstream: slot map, node connections, refresh policy.
pub struct Topology {
    routing: ArcSwap<Routing>,
    pool: Mutex<HashMap<NodeAddr, NodeConns>>,
    seeds: Vec<String>,
    /// A single-node upstream (standalone or Sentinel): no slot map to read.
    standalone: bool,
    /// For a Sentinel-managed upstream, what finds and follows its master.
    sentinel: Option<sentinel::SentinelWatch>,
    remap: HashMap<String, String>,
    settings: ConnSettings,
    refresh_wanted: Notify,
    /// Marked changed whenever a new snapshot has another set of masters.
    masters_changed: watch::Sender<()>,
    refresh_interval: Duration,
    min_refresh_interval: Duration,
    last_refresh: Mutex<Option<Instant>>,
    round_robin: AtomicUsize,
    /// How many snapshots moved a slot to another master (see [`Topology::moves`]).
    moves: AtomicU64,
    /// Connections for clients' scripts (see [`Topology::script_conn`]).
    scripts: Arc<ScriptConns>,
}

impl Topology {
    /// A topology for `config`'s upstream. Nothing is connected until first use; call
    /// [`Topology::refresh`] to load the slot map. Every shared node connection runs
    /// `prelude` when it opens (a node's script cache serves all its connections, so the
    /// dedicated ones need not).
    pub fn new(config: &Config, prelude: Option<Prelude>) -> Result<Arc<Topology>, TopologyError> {
        let upstream = config.upstream()?;
        let tls = crate::tls::NodeTls::from_config(&config.backend.tls)?;
        let (seeds, standalone, sentinel) = match upstream {
            Upstream::Cluster(seeds) => (seeds, false, None),
            Upstream::Standalone(addr) => (vec![addr], true, None),
            Upstream::Sentinel {
                addresses,
                master_name,
            } => (
                Vec::new(),
                true,
                Some(sentinel::SentinelWatch::new(
                    config,
                    addresses,
                    master_name,
                    tls.clone(),
                )),
            ),
        };
        let settings = ConnSettings {
            username: config.backend.username.clone().filter(|u| !u.is_empty()),
            password: config.backend.password.clone(),
            connect_timeout: config.connect_timeout(),
            limits: config.limits.protocol(),
            prelude,
            read_timeout: config.read_timeout(),
            tls,
        };
        let empty = SlotMap::empty();
        let topology = Topology {
            routing: ArcSwap::from_pointee(Routing {
                map: empty,
                masters: Vec::new(),
            }),
            pool: Mutex::new(HashMap::new()),
            seeds,
            standalone,
            sentinel,
            remap: config.address_map.clone(),
            settings,
            refresh_wanted: Notify::new(),
            masters_changed: watch::Sender::new(()),
            refresh_interval: Duration::from_millis(config.topology.refresh_interval_ms),
            min_refresh_interval: Duration::from_millis(config.topology.min_refresh_interval_ms),
            last_refresh: Mutex::new(None),
            round_robin: AtomicUsize::new(0),
            moves: AtomicU64::new(0),
            scripts: Arc::default(),
        };
        if let Some(seed) = topology.seeds.first().filter(|_| topology.standalone) {
            let addr: NodeAddr = topology.remapped(seed);
            topology.install(SlotMap::single(addr));
        }
        Ok(Arc::new(topology))
    }

    /// The current routing snapshot.
    pub fn routing(&self) -> arc_swap::Guard<Arc<Routing>> {
        self.routing.load()
    }

    /// The current routing snapshot, with the [`Topology::moves`] count it is at least as
    /// new as: one to reuse while that count stays, within one pass over a client's
    /// requests (a guard is for short use, never held while waiting).
    pub fn routing_since_moves(&self) -> (u64, arc_swap::Guard<Arc<Routing>>) {
        // Read in this order: `install` swaps the snapshot before it counts the move.
        let moves = self.moves();
        (moves, self.routing.load())
    }

    /// Resolves `changed()` each time a new snapshot brings another set of masters (one
    /// added, removed, or replaced by its replica), whatever the order, or another master
    /// of [`PUBSUB_HOME_SLOT`].
    pub fn watch_masters(&self) -> watch::Receiver<()> {
        self.masters_changed.subscribe()
    }

    /// Whether the upstream is a single non-cluster node (at a fixed address, or the
    /// master a Sentinel group names).
    pub fn is_standalone(&self) -> bool {
        self.standalone
    }

    /// The kind of upstream.
    pub fn upstream_kind(&self) -> UpstreamKind {
        match (&self.sentinel, self.standalone) {
            (Some(_), _) => UpstreamKind::Sentinel,
            (None, true) => UpstreamKind::Standalone,
            (None, false) => UpstreamKind::Cluster,
        }
    }

    /// A single-node upstream's master now, if one is known.
    pub fn upstream_master(&self) -> Option<NodeAddr> {
        let routing = self.routing.load();
        self.standalone
            .then(|| routing.map.masters().first().cloned())
            .flatten()
    }

    /// Why a Sentinel-managed upstream has no master to serve now, if it has none.
    pub fn master_unknown(&self) -> Option<String> {
        let sentinel = self.sentinel.as_ref()?;
        let name = sentinel.master_name();
        if sentinel.holding() {
            return Some(format!(
                "sentinel: failover of '{name}' under way, new commands wait"
            ));
        }
        self.upstream_master().is_none().then(|| {
            format!("sentinel: no master known for '{name}' (none named, or it is not a master)")
        })
    }

    /// The connection to the master of `slot`, if covered.
    pub fn master_for_slot(&self, slot: u16, proto: Proto) -> Option<NodeConn> {
        self.routing
            .load()
            .master_for_slot(slot)
            .map(|n| n.get(proto).clone())
    }

    /// Some master, in turn, for keyless commands.
    pub fn any_master(&self, proto: Proto) -> Option<NodeConn> {
        let routing = self.routing.load();
        let masters = routing.masters();
        if masters.is_empty() {
            return None;
        }
        let i = self.round_robin.fetch_add(1, Ordering::Relaxed) % masters.len();
        Some(masters[i].get(proto).clone())
    }

    /// The shared connection to `addr` (creating it when the node is new).
    pub fn node(&self, addr: &str, proto: Proto) -> NodeConn {
        self.node_conns(addr).get(proto).clone()
    }

    /// A new connection to `addr` for one client's exclusive use (blocking commands,
    /// transactions, subscriptions). Closed when the last handle is dropped.
    pub fn dedicated(&self, addr: &NodeAddr, proto: Proto) -> NodeConn {
        NodeConn::spawn(addr.clone(), self.conn_options(proto))
    }

    /// A dedicated connection to `addr` that is never reopened: what a WATCH watched ends
    /// with its connection, so a silent new one would let EXEC run unchecked.
    pub fn dedicated_once(&self, addr: &NodeAddr, proto: Proto) -> NodeConn {
        let opts = ConnOptions {
            reconnect: false,
            ..self.conn_options(proto)
        };
        NodeConn::spawn(addr.clone(), opts)
    }

    /// A connection to `addr` for one client's script call, from a pool of such
    /// connections (see [`ScriptConns`]): a script never holds a shared connection.
    pub fn script_conn(&self, addr: &NodeAddr, proto: Proto) -> ScriptLease {
        self.scripts
            .lease(addr, proto, || self.dedicated(addr, proto))
    }

    /// How many clients' scripts run on `addr` now, through this proxy: while none does,
    /// the node is not busy with one of them.
    pub fn scripts_running_on(&self, addr: &NodeAddr) -> usize {
        self.scripts.running_on(addr)
    }

    /// `addr` answered a command a busy node refuses: no client's script runs there now
    /// (see [`ScriptConns::settled`]).
    pub fn scripts_settled(&self, addr: &NodeAddr) {
        self.scripts.settled(addr);
    }

    /// How a connection for one client's exclusive use connects: the backend credentials
    /// and limits, no prelude, no read timeout (it may carry a blocking command).
    pub fn conn_options(&self, proto: Proto) -> ConnOptions {
        ConnOptions {
            proto,
            username: self.settings.username.clone(),
            password: self.settings.password.clone(),
            connect_timeout: self.settings.connect_timeout,
            limits: self.settings.limits,
            reconnect: true,
            prelude: None,
            read_timeout: None,
            tls: self.settings.tls.clone(),
        }
    }

    /// The port of the nodes' `CLUSTER SHARDS` entries connections use.
    fn node_port(&self) -> crate::route::NodePort {
        match self.settings.tls {
            Some(_) => crate::route::NodePort::Tls,
            None => crate::route::NodePort::Plain,
        }
    }

    /// The TLS of node connections (`backend.tls`), which a reload may give new
    /// certificates.
    pub fn node_tls(&self) -> Option<&Arc<crate::tls::NodeTls>> {
        self.settings.tls.as_ref()
    }

    fn shared_conn_options(&self, proto: Proto) -> ConnOptions {
        ConnOptions {
            prelude: self.settings.prelude.clone(),
            read_timeout: self.settings.read_timeout,
            ..self.conn_options(proto)
        }
    }

    fn node_conns(&self, addr: &str) -> NodeConns {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(conns) = pool.get(addr) {
            return conns.clone();
        }
        let key: NodeAddr = addr.into();
        let conns = NodeConns {
            resp2: NodeConn::spawn(key.clone(), self.shared_conn_options(Proto::Resp2)),
            resp3: NodeConn::spawn(key.clone(), self.shared_conn_options(Proto::Resp3)),
        };
        pool.insert(key, conns.clone());
        conns
    }

    /// Counts the snapshots that gave some slot another master. A client whose requests
    /// in flight were routed before the count changed waits for them before routing more,
    /// so a request routed to a slot's new master cannot overtake an earlier one still on
    /// its way to the old master (and back, redirected).
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// `addr` as the proxy dials it: through the configured address map, when it has one.
    pub fn remapped(&self, addr: &str) -> NodeAddr {
        self.remap
            .get(addr)
            .map(String::as_str)
            .unwrap_or(addr)
            .into()
    }

    /// Makes `map` the current snapshot, and tells the master set's watchers when it differs.
    fn install(&self, map: SlotMap) {
        let masters = map
            .masters()
            .iter()
            .map(|addr| self.node_conns(addr))
            .collect();
        crate::metrics::slot_map(map.slots_covered(), map.masters().len());
        let previous = self.routing.swap(Arc::new(Routing { map, masters }));
        let current = self.routing.load();
        if !previous.map.same_owners(&current.map) {
            self.moves.fetch_add(1, Ordering::Release);
        }
        let home_moved =
            previous.map.master_addr(PUBSUB_HOME_SLOT) != current.map.master_addr(PUBSUB_HOME_SLOT);
        if home_moved || !same_members(previous.map.masters(), current.map.masters()) {
            self.masters_changed.send_replace(());
        }
    }

    /// A MOVED reply said `slot` now lives at `addr`: patch the snapshot at once (so the
    /// retry goes to the right node) and ask for a full refresh.
    pub fn on_moved(&self, slot: u16, addr: &str) {
        let addr = self.remapped(addr);
        let current = self.routing.load();
        if current.map.master_addr(slot).map(|a| &**a) != Some(&*addr) {
            self.install(current.map.with_slot_moved(slot, addr));
        }
        self.request_refresh();
    }

    /// Asks the refresher for a new slot map soon (rate-limited by the refresher).
    pub fn request_refresh(&self) {
        if !self.standalone || self.sentinel.is_some() {
            self.refresh_wanted.notify_one();
        }
    }

    /// Reads the slot map from the first known node that answers and installs it.
    /// For a Sentinel-managed upstream: asks the Sentinels which node is the master.
    pub async fn refresh(&self) -> Result<(), TopologyError> {
        if self.standalone && self.sentinel.is_none() {
            return Ok(());
        }
        *self.last_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if let Some(sentinel) = &self.sentinel {
            let outcome = sentinel.discover(self).await;
            crate::metrics::topology_refresh(outcome.is_ok());
            return Ok(outcome?);
        }
        let mut candidates: Vec<NodeAddr> = self.routing.load().map.nodes().to_vec();
        for seed in &self.seeds {
            let seed = self.remapped(seed);
            if !candidates.contains(&seed) {
                candidates.push(seed);
            }
        }
        let mut last_error = TopologyError::NoSeeds;
        for addr in candidates {
            match self.read_slot_map(&addr).await {
                Ok(map) => {
                    self.install(map);
                    crate::metrics::topology_refresh(true);
                    return Ok(());
                }
                Err(source) => last_error = TopologyError::SlotMap { addr, source },
            }
        }
        crate::metrics::topology_refresh(false);
        Err(last_error)
    }

    async fn read_slot_map(&self, addr: &str) -> Result<SlotMap, SlotMapError> {
        let conn = self.node(addr, Proto::Resp2);
        read_slot_map(
            &conn,
            addr,
            &self.remap,
            self.node_port(),
            Coverage::AsServed,
        )
        .await
    }

    /// Runs forever: refreshes periodically and whenever asked, rate-limited; for a
    /// Sentinel-managed upstream, also follows the Sentinels' events. Started when this
    /// topology starts to serve, so it also sets the upstream metrics.
    pub async fn run_refresher(self: Arc<Self>) {
        crate::metrics::upstream_kind(self.upstream_kind().label());
        crate::metrics::upstream_master(self.upstream_master().as_deref());
        match &self.sentinel {
            Some(sentinel) => {
                tokio::join!(self.refresh_periodically(), sentinel.follow_all(&self));
            }
            None if self.standalone => {}
            None => self.refresh_periodically().await,
        }
    }

    async fn refresh_periodically(&self) {
        loop {
            let _ =
                tokio::time::timeout(self.refresh_interval, self.refresh_wanted.notified()).await;
            let since = self
                .last_refresh
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .map(|t| t.elapsed());
            if let Some(since) = since {
                if since < self.min_refresh_interval {
                    tokio::time::sleep(self.min_refresh_interval - since).await;
                }
            }
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "slot map refresh failed");
            }
        }
    }
}

/// Whether two lists of distinct addresses name the same nodes, in any order.
fn same_members(a: &[NodeAddr], b: &[NodeAddr]) -> bool {
    a.len() == b.len() && a.iter().all(|addr| b.contains(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_master_watch_fires_only_when_the_set_of_masters_changes() {
        let config = Config {
            cluster: vec!["127.0.0.1:1".to_string()],
            ..Config::default()
        };
        let topology = Topology::new(&config, None).unwrap();
        let mut masters = topology.watch_masters();
        topology.on_moved(0, "127.0.0.1:7001");
        assert!(masters.has_changed().unwrap(), "a first master");
        masters.mark_unchanged();
        topology.on_moved(1, "127.0.0.1:7001");
        assert!(
            !masters.has_changed().unwrap(),
            "a slot moved between known masters"
        );
        topology.on_moved(2, "127.0.0.1:7002");
        assert!(masters.has_changed().unwrap(), "a second master");
    }
}
