//! The running proxy's changeable state: the current [`Proxy`] snapshot (swapped whole on a
//! configuration reload), the graceful drain's start and wait, and the count of connected
//! clients.
//!
//! Invariants:
//! - Sessions load the snapshot once per command; a command runs to its end on the snapshot
//!   it started with, so a reload never changes a command half-way.
//! - A reload either installs a complete new snapshot or changes nothing (invalid file,
//!   unreachable new upstream): the old one keeps serving and the error is logged and counted.
//! - The upstream connections are rebuilt only when the upstream or its connection settings
//!   changed; otherwise the new snapshot shares the running topology.
//! - Settings bound at start-up (listen addresses, threads, logging, pidfile) keep their
//!   running values; a reload that changes them logs that a restart is needed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::{Config, ConfigError};
use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::{Builder, Proxy};
use crate::tls::{ClientTls, TlsError};
use crate::topology::{Topology, TopologyError};

/// Reads the configuration again (file, then flags and environment), validated.
pub type Loader = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// Why a reload changed nothing: the running configuration keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// [`Live::new`] was given no [`Loader`].
    #[error("this proxy was started without a configuration source")]
    NoSource,
    /// The new configuration could not be read or does not hold.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A certificate or key it names could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Its upstream could not be set up.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// Its new upstream gave no complete slot map in time.
    #[error("new upstream not usable: {0}")]
    NewUpstream(#[source] TopologyError),
    /// Its users (`users`, `requirepass`, `aclfile`) could not be loaded.
    #[error("{0}")]
    Users(String),
    /// Its layout's checks refused the keyspace (marker, legacy data).
    #[error("{0}")]
    LayoutRefused(String),
}

/// How long a reload waits for a new upstream's first complete slot map.
const NEW_UPSTREAM_WAIT: Duration = Duration::from_secs(5);

fn requests() -> &'static Notify {
    static REQUESTS: OnceLock<Notify> = OnceLock::new();
    REQUESTS.get_or_init(Notify::new)
}

/// Asks the running proxy to reload its configuration (as SIGHUP does), e.g. from the
/// admin server's `POST /reload`. Returns at once; the outcome is logged and counted.
pub fn request() {
    requests().notify_one();
}

/// The live proxy: what sessions and the accept loop read, what reloads replace.
pub struct Live {
    current: ArcSwap<Proxy>,
    loader: Option<Loader>,
    refresher: Mutex<Option<JoinHandle<()>>>,
    reloading: tokio::sync::Mutex<()>,
    clients: Arc<AtomicUsize>,
    /// Successful reloads so far: sessions read their limits again when it changes.
    reloads: AtomicU64,
    /// The TLS listener's certificates, read again on each reload.
    client_tls: ArcSwapOption<ClientTls>,
}

/// `/readyz` and `/metrics` follow the snapshot in force.
impl crate::topology::LiveUpstream for Live {
    fn topology(&self) -> Arc<Topology> {
        self.proxy().topology.clone()
    }

    fn render_command_metrics(&self, body: &mut String) {
        self.proxy().command_metrics.render_durations(body);
    }
}

/// One connected client's place under `maxclients`; freed on drop.
#[derive(Debug)]
pub struct ClientSlot {
    clients: Arc<AtomicUsize>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Live {
    /// Serves `proxy`; `loader` re-reads the configuration on reload (`None`: reloads fail).
    pub fn new(proxy: Arc<Proxy>, loader: Option<Loader>) -> Arc<Live> {
        let readiness = proxy.readiness.clone();
        // `server::start` has read these files already; a failure here is a file changed since.
        let client_tls = ClientTls::from_config(&proxy.config.tls)
            .map_err(|error| tracing::error!(%error, "TLS listener has no certificate"))
            .ok()
            .flatten();
        let live = Arc::new(Live {
            current: ArcSwap::new(proxy),
            loader,
            refresher: Mutex::new(None),
            reloading: tokio::sync::Mutex::new(()),
            clients: Arc::new(AtomicUsize::new(0)),
            reloads: AtomicU64::new(0),
            client_tls: ArcSwapOption::new(client_tls.map(Arc::new)),
        });
        // Reloads keep the readiness flag, so /readyz follows every later snapshot.
        readiness.attach(&live);
        live
    }

    /// The current snapshot.
    pub fn proxy(&self) -> Arc<Proxy> {
        self.current.load_full()
    }

    /// How many reloads have succeeded: a change means another configuration serves.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Acquire)
    }

    /// The TLS listener's current certificates (`None`: no TLS listener).
    pub fn client_tls(&self) -> Option<Arc<ClientTls>> {
        self.client_tls.load_full()
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    /// A place for one more client, or `None` when `maxclients` are connected.
    pub fn client_slot(&self) -> Option<ClientSlot> {
        let max = self.current.load().config.maxclients;
        self.clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| ClientSlot {
                clients: self.clients.clone(),
            })
    }

    /// Starts the slot-map refresher of the current topology (stopping a previous one).
    pub fn start_refresher(&self) {
        let task = tokio::spawn(self.proxy().topology.clone().run_refresher());
        let old = self
            .refresher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }

    /// Stops the refresher (at shutdown).
    pub fn stop_refresher(&self) {
        if let Some(task) = self
            .refresher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }

    /// Reads the configuration again and installs it; on error nothing changes.
    pub async fn reload(&self) -> Result<(), ReloadError> {
        let _one_at_a_time = self.reloading.lock().await;
        let loader = self.loader.as_ref().ok_or(ReloadError::NoSource)?;
        let mut config = loader()?;
        let running = self.proxy();
        keep_startup_settings(&running.config, &mut config);
        // Read before anything changes: a bad certificate fails the whole reload.
        let client_tls = ClientTls::from_config(&config.tls)?;
        let node_tls = crate::tls::NodeTls::from_config(&config.backend.tls)?;
        let builder = Builder::new(config)?;
        let config = builder.config();
        let new_upstream = upstream_changed(&running.config, config);
        let topology = if new_upstream {
            connect_upstream(config, &running.scripts).await?
        } else {
            running.topology.clone()
        };
        let layout_changed = config.layout != running.config.layout;
        let layout = if layout_changed {
            ActiveLayout::from_config(&config.layout)?
        } else {
            running.layout.clone()
        };
        let mut fixed = running.fixed();
        if let Some(migration) = &fixed.migration {
            migration.configure(&config.migration);
        }
        fixed.acl = fixed
            .acl
            .for_reload(&running.config, config)
            .map_err(ReloadError::Users)?;
        let next = builder.build(topology, layout, fixed);
        // New layout rules are checked (upkeep script loaded, marker read) before they serve.
        if let (true, Some(active)) = (layout_changed, &next.layout) {
            crate::dispatch::layout::start(&next, active)
                .await
                .map_err(ReloadError::LayoutRefused)?;
        }
        next.upstream.warm_up().await;
        self.current.store(Arc::new(next));
        self.client_tls.store(client_tls.map(Arc::new));
        if let (Some(running), Some(newer), false) =
            (self.proxy().topology.node_tls(), &node_tls, new_upstream)
        {
            running.rotate(newer);
        }
        self.reloads.fetch_add(1, Ordering::Release);
        if new_upstream {
            self.start_refresher();
        }
        Ok(())
    }

    /// Reloads on SIGHUP and on [`request`], forever; logs and counts each outcome.
    /// `after_reload` runs after each successful one (it wakes the sessions, which read
    /// their limits again).
    pub async fn run_reloader(self: Arc<Self>, after_reload: impl Fn()) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).ok();
        loop {
            let next_hangup = async {
                match &mut hangup {
                    Some(stream) => {
                        stream.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = next_hangup => {}
                _ = requests().notified() => {}
            }
            match self.reload().await {
                Ok(()) => {
                    tracing::info!("configuration reloaded");
                    crate::metrics::config_reload(true);
                    after_reload();
                }
                Err(error) => {
                    tracing::error!(%error, "configuration reload failed; keeping the running configuration");
                    crate::metrics::config_reload(false);
                }
            }
        }
    }

    /// Drains: `tell_clients` has the sessions refuse new commands and close once answered;
    /// waits up to `timeout` for them to finish. Returns whether every client was done in
    /// time.
    pub async fn drain_clients(&self, timeout: Duration, tell_clients: impl FnOnce()) -> bool {
        // Load balancers see 503 on /readyz from the first moment of the drain.
        self.proxy().readiness.start_drain();
        tell_clients();
        let deadline = Instant::now() + timeout;
        while self.clients() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// Start-up settings a reload cannot change: keep the running values, say so if they differ.
fn keep_startup_settings(running: &Config, next: &mut Config) {
    let mut changed = Vec::new();
    if running.listen != next.listen {
        changed.push("listen");
        next.listen = running.listen.clone();
    }
    if running.admin_listen != next.admin_listen {
        changed.push("admin_listen");
        next.admin_listen = running.admin_listen.clone();
    }
    if running.tls.listen != next.tls.listen {
        changed.push("tls.listen");
        next.tls.listen = running.tls.listen.clone();
    }
    if running.threads != next.threads {
        changed.push("threads");
        next.threads = running.threads;
    }
    if running.log_format != next.log_format || running.log_level != next.log_level {
        changed.push("log_format/log_level");
        next.log_format = running.log_format;
        next.log_level = running.log_level.clone();
    }
    // Only the walker's pace and pause take effect on a reload (see `Migration::configure`).
    let (pace, paused) = next.migration.walker();
    let mut migration = running.migration.clone();
    (migration.max_keys_per_second, migration.paused) = (pace, paused);
    if migration != next.migration {
        changed.push("migration (other than max_keys_per_second and paused)");
        next.migration = migration;
    }
    if running.pidfile != next.pidfile {
        changed.push("pidfile");
        next.pidfile = running.pidfile.clone();
    }
    if !changed.is_empty() {
        tracing::warn!(
            settings = ?changed,
            "these settings changed in the configuration but take effect only after a restart"
        );
    }
}

/// Whether the upstream connections must be rebuilt for `next`.
fn upstream_changed(running: &Config, next: &Config) -> bool {
    running.cluster != next.cluster
        || running.standalone != next.standalone
        || running.sentinel != next.sentinel
        || running.backend != next.backend
        || running.address_map != next.address_map
        || running.topology != next.topology
        || running.limits.protocol() != next.limits.protocol()
}

/// A topology for `config`'s upstream with a complete slot map, or an error.
async fn connect_upstream(
    config: &Config,
    scripts: &Arc<crate::dispatch::ScriptCache>,
) -> Result<Arc<Topology>, ReloadError> {
    let topology = Topology::new(config, Some(scripts.preload()))?;
    let deadline = Instant::now() + NEW_UPSTREAM_WAIT;
    loop {
        let outcome = topology.refresh().await;
        if outcome.is_ok() && topology.routing().map.is_complete() {
            return Ok(topology);
        }
        if Instant::now() >= deadline {
            return Err(ReloadError::NewUpstream(
                outcome.err().unwrap_or(TopologyError::Incomplete),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_upstream_without_a_full_map_says_so() {
        let error = ReloadError::NewUpstream(TopologyError::Incomplete);
        assert_eq!(
            error.to_string(),
            "new upstream not usable: slot map incomplete"
        );
        let error = ReloadError::NewUpstream(TopologyError::NoSeeds);
        assert_eq!(error.to_string(), "new upstream not usable: no seed nodes");
    }
}
