//! Start-up and the accept loop: load the slot map and command table, bind, serve clients
//! until a shutdown signal, then drain: stop accepting, let connected clients finish their
//! in-flight commands (bounded by `shutdown_timeout_ms`), and return.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use self::accepting::{Accepted, Accepting};
use crate::admin;
use crate::client::{self, ClientStream, Registry};
use crate::command::CommandTable;
use crate::config::Config;
use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::{Builder, Fixed, Proxy};
use crate::protocol::Proto;
use crate::reload::{Live, Loader};
use crate::topology::Topology;

mod accepting;
mod error;
mod tls;

pub use error::StartError;

/// How long start-up waits for a first complete slot map before serving anyway.
const STARTUP_MAP_WAIT: Duration = Duration::from_secs(10);

/// The client listeners: plain, TLS (`tls.listen`), or both.
pub struct Listeners {
    /// The plain listener (`listen`); `None` when `listen` is empty.
    pub plain: Option<TcpListener>,
    /// The TLS listener (`tls.listen`).
    pub tls: Option<TcpListener>,
}

/// Builds the proxy for `config` (see [`start_listeners`]) with its plain listener only,
/// which `config` must have.
pub async fn start(config: Config) -> Result<(Arc<Proxy>, TcpListener), StartError> {
    let (proxy, listeners) = start_listeners(config).await?;
    let plain = listeners.plain.ok_or(StartError::NoPlainListener)?;
    Ok((proxy, plain))
}

/// Builds the proxy for `config`: connects to the upstream, reads its slot map and command
/// table (falling back to the built-in table), and binds the client listeners.
pub async fn start_listeners(config: Config) -> Result<(Arc<Proxy>, Listeners), StartError> {
    let metrics = if config.admin.metrics {
        crate::metrics::install()
            .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
            .ok()
    } else {
        None
    };
    let metrics_enabled = metrics.is_some();
    let builder = Builder::new(config)?;
    let config = builder.config();
    let scripts: Arc<crate::dispatch::ScriptCache> = Default::default();
    let topology = Topology::new(config, Some(scripts.preload()))?;
    // The admin endpoint answers from the start, so /readyz reports the wait below.
    let readiness = Arc::new(crate::topology::Readiness::new());
    let admin_state = start_admin(config, &topology, &readiness, metrics).await?;
    let deadline = Instant::now() + STARTUP_MAP_WAIT;
    loop {
        match topology.refresh().await {
            Ok(()) if topology.routing().map.is_complete() => break,
            Ok(()) => tracing::warn!(
                slots = topology.routing().map.slots_covered(),
                "slot map incomplete, waiting"
            ),
            Err(e) => tracing::warn!(error = %e, "no seed node answered yet"),
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                "starting without a complete slot map; commands on uncovered slots fail"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let commands = load_command_table(&topology).await;
    let server_version = load_server_version(&topology).await;
    let layout = ActiveLayout::from_config(&config.layout)?;
    let migration = start_migration(config, &topology).await?;
    if let Some(migration) = &migration {
        // Set once per process: `GET /migration` answers 404 until then.
        let _ = admin_state.migration.set(migration.clone());
    }
    let fixed = Fixed {
        listen_addr: config.listen.clone(),
        command_metrics: Arc::new(crate::metrics::CommandMetrics::new(
            &commands,
            metrics_enabled,
        )),
        plain_commands: Arc::new(client::plain::plain_commands(&commands)),
        commands,
        server_version,
        started: Instant::now(),
        scripts,
        readiness,
        acl: crate::acl::Shared::from_config(builder.config()).map_err(StartError::Users)?,
        migration: migration.clone(),
    };
    let mut proxy = builder.build(topology, layout, fixed);
    // Before binding: a refused layout must not look like a proxy that is up.
    if let Some(active) = &proxy.layout {
        crate::dispatch::layout::start(&proxy, active)
            .await
            .map_err(StartError::LayoutRefused)?;
    }
    proxy.upstream.warm_up().await;
    if let Some(migration) = migration {
        tokio::spawn(crate::live::progress::watch(migration.clone()));
        tokio::spawn(crate::live::walker::run(migration));
    }
    let listeners = crate::server::tls::bind(&mut proxy).await?;
    Ok((Arc::new(proxy), listeners))
}

/// Binds the admin endpoint and serves it; the state it returns gets the migration later.
async fn start_admin(
    config: &Config,
    topology: &Arc<Topology>,
    readiness: &Arc<crate::topology::Readiness>,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> Result<Arc<admin::AdminState>, StartError> {
    let listener =
        admin::bind(&config.admin_listen)
            .await
            .map_err(|source| StartError::AdminListen {
                addr: config.admin_listen.clone(),
                source,
            })?;
    let state = Arc::new(admin::AdminState {
        topology: topology.clone(),
        readiness: readiness.clone(),
        metrics,
        migration: Default::default(),
    });
    tokio::spawn(admin::serve(listener, state.clone()));
    Ok(state)
}

/// The live migration `config` names, connected to its source and to the upstream's
/// masters (with the backend's credentials and TLS); `None` when none is configured.
async fn start_migration(
    config: &Config,
    topology: &Topology,
) -> Result<Option<Arc<crate::live::Migration>>, StartError> {
    if !config.migration.is_set() {
        return Ok(None);
    }
    let backend = &config.backend;
    let target: Vec<crate::migrate::RedisUrl> = topology
        .routing()
        .map
        .masters()
        .iter()
        .map(|addr| crate::migrate::RedisUrl {
            addr: addr.to_string(),
            username: backend.username.clone(),
            password: backend.password.clone(),
            tls: backend.tls.enabled.then(|| backend.tls.clone()),
        })
        .collect();
    // The rules again, compiled for the mover (the active layout's are the stage's own).
    let rules = config.layout.load()?.map(Arc::new);
    let migration = crate::live::Migration::connect(
        &config.migration,
        &target,
        rules,
        config.databases,
        config.read_timeout(),
    )
    .await?;
    migration.check_target().await?;
    let baseline = migration.record_baseline().await?;
    tracing::info!(
        keys = baseline.keys,
        "live migration: the source's keys at the start, for the count check at the end"
    );
    tracing::info!(
        source = ?migration,
        "live migration: commands move the keys they touch first; the walker moves the rest"
    );
    Ok(Some(Arc::new(migration)))
}

/// The backend's own command table, so every command of its version routes right.
async fn load_command_table(topology: &Topology) -> CommandTable {
    if let Some(conn) = topology.any_master(Proto::Resp2) {
        let call = conn.call(Bytes::from_static(b"*1\r\n$7\r\nCOMMAND\r\n"), false);
        if let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(5), call).await {
            match CommandTable::from_command_reply(&reply) {
                Ok(table) => return table,
                Err(e) => {
                    tracing::warn!(error = %e, "backend COMMAND reply unusable; using built-in table")
                }
            }
        }
    }
    tracing::warn!("backend command table unavailable; using the built-in Redis 7 table");
    CommandTable::builtin()
}

/// The backend's `redis_version`, which HELLO reports (INFO passes the master's own);
/// the built-in command table's version when no master answers.
async fn load_server_version(topology: &Topology) -> Arc<str> {
    const BUILTIN_TABLE_VERSION: &str = "7.0.0";
    if let Some(conn) = topology.any_master(Proto::Resp2) {
        let call = conn.call(
            Bytes::from_static(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"),
            false,
        );
        if let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(5), call).await {
            let version = String::from_utf8_lossy(&reply)
                .lines()
                .find_map(|line| line.strip_prefix("redis_version:").map(str::to_owned));
            if let Some(version) = version.filter(|v| !v.is_empty()) {
                return version.into();
            }
        }
    }
    tracing::warn!("backend version unavailable; HELLO reports {BUILTIN_TABLE_VERSION}");
    BUILTIN_TABLE_VERSION.into()
}

/// Serves clients until `shutdown` completes, then drains. The configuration cannot be
/// reloaded (see [`serve_live`]).
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_live(Live::new(proxy, None), listener, shutdown).await;
}

/// A live proxy for `proxy`, reloadable with `loader` (SIGHUP, [`crate::reload::request`]).
pub fn live(proxy: Arc<Proxy>, loader: Option<Loader>) -> Arc<Live> {
    Live::new(proxy, loader)
}

/// Serves clients until `shutdown` completes, reloading on SIGHUP; then drains.
pub async fn serve_live(
    live: Arc<Live>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let listeners = Listeners {
        plain: Some(listener),
        tls: None,
    };
    serve_listeners(live, listeners, shutdown).await;
}

/// Serves clients on `listeners` until `shutdown` completes, reloading on SIGHUP; then
/// drains.
pub async fn serve_listeners(
    live: Arc<Live>,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let registry = Arc::new(Registry::default());
    registry
        .budget()
        .set_limit(live.proxy().config.max_buffered_bytes);
    live.start_refresher();
    let reloader = tokio::spawn(live.clone().run_reloader({
        let registry = registry.clone();
        let live = live.clone();
        move || {
            registry
                .budget()
                .set_limit(live.proxy().config.max_buffered_bytes);
            registry.wake_all()
        }
    }));
    announce(&live, &listeners);
    // Read before the configuration: a reload in between is followed at once.
    let mut reloads = live.reloads();
    let config = &live.proxy().config;
    let mut plain = listeners.plain.map(|l| Accepting::new(l, config));
    let mut tls = listeners.tls.map(|l| Accepting::new(l, config));
    tokio::pin!(shutdown);
    let mut accepted = 0u32;
    loop {
        // Accepts do not yield on their own (see `Accepting::accept`): as Redis, which
        // accepts at most 1,000 per event, the connected clients get a turn after that many.
        accepted += 1;
        if accepted % ACCEPTS_PER_TURN == 0 {
            tokio::task::yield_now().await;
        }
        let (on_tls, next) = tokio::select! {
            _ = &mut shutdown => break,
            next = accepting::next(plain.as_mut()) => (false, next),
            next = accepting::next(tls.as_mut()) => (true, next),
        };
        let client = match next {
            Ok(client) => client,
            Err(e) => {
                // Out of file descriptors and the like: pause instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // After the accept, which may have waited through a reload: the client connected
        // under the options the listener had (see `Accepting::follow`).
        if live.reloads() != reloads {
            reloads = live.reloads();
            let config = &live.proxy().config;
            let listeners = plain.iter_mut().chain(tls.iter_mut());
            if listeners.fold(false, |changed, l| l.follow(config) | changed) {
                accepting::give_options(&client.stream, config.tcp_keepalive);
            }
        }
        if on_tls {
            // The handshake runs in the client's task, never here.
            tokio::spawn(tls::serve(client, live.clone(), registry.clone()));
        } else {
            serve_plain(client, &live, &registry);
        }
    }
    drop((plain, tls));
    reloader.abort();
    drain(&live, &registry).await;
}

/// Connections accepted before the accept loop lets the clients' tasks run.
const ACCEPTS_PER_TURN: u32 = 1000;

/// Logs that the proxy serves, and on what.
fn announce(live: &Live, listeners: &Listeners) {
    let proxy = live.proxy();
    let routing = proxy.topology.routing();
    tracing::info!(
        listen = %proxy.listen_addr,
        tls_listen = ?listeners.tls.as_ref().and_then(|l| l.local_addr().ok()),
        slots_covered = routing.map.slots_covered(),
        masters = routing.map.masters().len(),
        upstream = proxy.topology.upstream_kind().label(),
        "slotbridge ready"
    );
}

/// Starts the session of a client of the plain listener, or refuses it past `maxclients`.
fn serve_plain(accepted: Accepted, live: &Arc<Live>, registry: &Arc<Registry>) {
    match live.client_slot() {
        Some(slot) => {
            tokio::spawn(plain_session(
                accepted,
                live.clone(),
                registry.clone(),
                slot,
            ));
        }
        None => {
            crate::metrics::client_rejected();
            tokio::spawn(refuse(ClientStream::Tcp(accepted.stream)));
        }
    }
}

/// The task of one plain client: its session, then its place among `maxclients` given back.
/// A combinator, not an `async` block that awaits the session: such a block keeps the
/// session's future twice (once as captured, once as awaited), which doubled what every
/// connected client's task holds.
fn plain_session(
    accepted: Accepted,
    live: Arc<Live>,
    registry: Arc<Registry>,
    slot: crate::reload::ClientSlot,
) -> impl Future<Output = ()> {
    let Accepted { stream, ends } = accepted;
    client::serve(ClientStream::Tcp(stream), ends, live, registry).map(move |()| drop(slot))
}

/// After the listeners closed: lets the connected clients finish, up to
/// `shutdown_timeout_ms`, then stops the refresher.
async fn drain(live: &Live, registry: &Registry) {
    let timeout = Duration::from_millis(live.proxy().config.shutdown_timeout_ms);
    tracing::info!(clients = live.clients(), ?timeout, "draining");
    if !live.drain_clients(timeout, || registry.start_drain()).await {
        tracing::warn!(
            clients = live.clients(),
            "shutdown timeout reached; closing the remaining connections"
        );
    }
    live.stop_refresher();
    tracing::info!("slotbridge stopped");
}

/// Tells a client over `maxclients` why, then closes, as Redis does.
async fn refuse(stream: ClientStream) {
    let mut io = stream.into_io();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = io.write_all(crate::reply::text::MAX_CLIENTS).await;
        let _ = io.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use crate::test_support::future_size4;

    #[test]
    fn a_plain_client_task_holds_its_session_once() {
        let session = future_size4(crate::client::serve);
        let task = future_size4(super::plain_session);
        eprintln!("session future: {session} bytes, plain client task: {task} bytes");
        assert!(
            task < session + 64,
            "a plain client's task is {task} bytes for a {session}-byte session"
        );
    }
}
