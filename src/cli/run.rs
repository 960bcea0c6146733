//! `slotbridge [run]`: merges the flags over the YAML file (one place, also used by every
//! reload), starts the proxy, and serves until SIGINT or SIGTERM.
//!
//! Invariant: a reload re-reads the file and re-applies the same flags, so flags always win
//! over the file, before and after a reload.

use std::process::ExitCode;
use std::sync::Arc;

use slotbridge::config::{Config, ConfigError, LogFormat, Secret};

use super::RunArgs;

impl RunArgs {
    /// The file's configuration with these flags and the backend credential variables
    /// applied over it.
    fn config(&self) -> Result<Config, ConfigError> {
        let overrides = super::option_overrides(&self.set)?;
        let mut config = match &self.config {
            Some(path) => Config::from_file_with(path, &overrides)?,
            None => Config::from_yaml_with("", &overrides)?,
        };
        if let Some(listen) = &self.listen {
            config.listen = listen.clone();
        }
        self.apply_tls(&mut config);
        // A flag that names an upstream replaces the file's, whichever kind that was.
        if !self.cluster.is_empty() {
            config.cluster = self.cluster.clone();
            config.standalone = None;
            config.sentinel.addresses.clear();
        }
        if let Some(standalone) = &self.standalone {
            config.standalone = Some(standalone.clone());
            config.cluster.clear();
            config.sentinel.addresses.clear();
        }
        if !self.sentinel.is_empty() {
            config.sentinel.addresses = self.sentinel.clone();
            config.cluster.clear();
            config.standalone = None;
        }
        if let Some(name) = &self.master_name {
            config.sentinel.master_name = name.clone();
        }
        if let Some(admin) = &self.admin_listen {
            config.admin_listen = admin.clone();
        }
        if let Some(threads) = self.threads {
            config.threads = threads;
        }
        if let Some(format) = self.log_format {
            config.log_format = format;
        }
        if let Some(level) = &self.log_level {
            config.log_level = level.clone();
        } else if let Ok(level) = std::env::var("RUST_LOG") {
            config.log_level = level;
        }
        if let Some(layout) = &self.layout {
            config.layout.file = Some(layout.clone());
        }
        if !self.prefixes.is_empty() {
            config.layout.prefixes = self.prefixes.clone();
        }
        if let Some(password) = &self.requirepass {
            config.requirepass = Some(Secret(password.clone()));
        }
        if let Some(pidfile) = &self.pidfile {
            config.pidfile = Some(pidfile.clone());
        }
        if let Ok(username) = std::env::var("REDIS_USERNAME") {
            config.backend.username = Some(username);
        }
        if let Ok(password) = std::env::var("REDIS_PASSWORD") {
            config.backend.password = Some(password);
        }
        config.validate()?;
        Ok(config)
    }

    fn apply_tls(&self, config: &mut Config) {
        if let Some(listen) = &self.tls_listen {
            config.tls.listen = Some(listen.clone());
        }
        let files = [
            (&self.tls_cert_file, &mut config.tls.cert_file),
            (&self.tls_key_file, &mut config.tls.key_file),
            (&self.tls_ca_cert_file, &mut config.tls.ca_cert_file),
        ];
        for (flag, option) in files {
            if let Some(path) = flag {
                *option = Some(path.clone());
            }
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Tasks the one-thread runtime runs before it looks for I/O events again while tasks are
/// ready (Tokio's default is 61): the most events one look takes (Tokio's 1,024). At 61, a
/// busy proxy took up to 1,024 events every 61 tasks, so a burst of clients (5,000 sending
/// their first request at once) grew the queue to thousands of tasks, and a node's reader
/// and writer, woken among them, waited behind every client woken before them: a p99 of
/// 100-200 ms for the burst, against predixy's 40-65. At 1,024 the tasks one look woke run
/// before the next look, as an event loop runs one pass of events at a time.
const EVENT_INTERVAL: u32 = 1024;

/// `slotbridge [run]`: serve until SIGINT or SIGTERM (then drain), reload on SIGHUP.
pub fn run(args: RunArgs) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("slotbridge: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    // One thread: a current-thread runtime, so the accept loop, sessions and node
    // connections wake each other without cross-thread hand-offs.
    let mut runtime = match config.threads {
        1 => {
            let mut builder = tokio::runtime::Builder::new_current_thread();
            builder.event_interval(EVENT_INTERVAL);
            builder
        }
        // 0: one worker per core, Tokio's default.
        0 => tokio::runtime::Builder::new_multi_thread(),
        threads => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
    };
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("slotbridge: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pidfile = config.pidfile.clone();
    let args = Arc::new(args);
    let loader: slotbridge::reload::Loader = Box::new(move || args.config());
    runtime.block_on(async move {
        let (proxy, listeners) = match slotbridge::server::start_listeners(config).await {
            Ok(started) => started,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(path) = &pidfile {
            if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
                tracing::error!("cannot write pidfile {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        let live = slotbridge::server::live(proxy, Some(loader));
        slotbridge::server::serve_listeners(live, listeners, shutdown_signal()).await;
        if let Some(path) = &pidfile {
            let _ = std::fs::remove_file(path);
        }
        ExitCode::SUCCESS
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
