//! Command-line interface: flags (also settable as `SLOTBRIDGE_*` environment variables)
//! merged over the YAML file in one place, then the chosen subcommand.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use slotbridge::config::{Config, LogFormat, Secret};

/// A Redis-protocol proxy for Redis Cluster that rewrites legacy key layouts on the fly.
#[derive(Debug, Parser)]
#[command(
    name = "slotbridge",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands; `run` is the default.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (the default when no subcommand is given).
    Run(RunArgs),
    /// Parse and validate a configuration file, then exit.
    CheckConfig {
        /// The YAML file to check.
        file: PathBuf,
    },
    /// Make a running proxy re-read its configuration file (sends it SIGHUP).
    Reload {
        /// The pidfile the running proxy wrote (its `--pidfile` / `pidfile`).
        #[arg(long, env = "SLOTBRIDGE_PIDFILE")]
        pidfile: PathBuf,
    },
}

/// Flags of `run`. Each overrides the same field of the config file.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// YAML configuration file.
    #[arg(long, env = "SLOTBRIDGE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Client-facing address.
    #[arg(long, env = "SLOTBRIDGE_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Cluster seed nodes, comma-separated.
    #[arg(
        long,
        env = "SLOTBRIDGE_CLUSTER",
        value_delimiter = ',',
        value_name = "HOST:PORT,..."
    )]
    pub cluster: Vec<String>,
    /// A single non-cluster upstream node.
    #[arg(
        long,
        env = "SLOTBRIDGE_STANDALONE",
        conflicts_with = "cluster",
        value_name = "HOST:PORT"
    )]
    pub standalone: Option<String>,
    /// Admin HTTP address (metrics and health).
    #[arg(long, env = "SLOTBRIDGE_ADMIN_LISTEN", value_name = "HOST:PORT")]
    pub admin_listen: Option<String>,
    /// Runtime worker threads (0: one per core).
    #[arg(long, env = "SLOTBRIDGE_THREADS")]
    pub threads: Option<usize>,
    /// Log format.
    #[arg(long, env = "SLOTBRIDGE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `slotbridge=debug`.
    #[arg(long, env = "SLOTBRIDGE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Password clients must send with AUTH (the `default` user's).
    #[arg(long, env = "SLOTBRIDGE_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,
    /// Write the proxy's pid to this file (for `slotbridge reload`).
    #[arg(long, env = "SLOTBRIDGE_PIDFILE")]
    pub pidfile: Option<PathBuf>,
}

impl RunArgs {
    /// The file's configuration with these flags and the backend credential variables
    /// applied over it.
    fn config(&self) -> Result<Config, String> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        if let Some(listen) = &self.listen {
            config.listen = listen.clone();
        }
        if !self.cluster.is_empty() {
            config.cluster = self.cluster.clone();
            config.standalone = None;
        }
        if let Some(standalone) = &self.standalone {
            config.standalone = Some(standalone.clone());
            config.cluster.clear();
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
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
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
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        runtime.worker_threads(config.threads);
    }
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
        let (proxy, listener) = match slotbridge::server::start(config).await {
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
        slotbridge::server::serve_live(live, listener, shutdown_signal()).await;
        if let Some(path) = &pidfile {
            let _ = std::fs::remove_file(path);
        }
        ExitCode::SUCCESS
    })
}

/// `slotbridge reload --pidfile FILE`: sends SIGHUP to the proxy whose pid is in FILE.
pub fn reload(pidfile: &Path) -> ExitCode {
    let pid = match std::fs::read_to_string(pidfile) {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(pid) if pid > 1 => pid,
            _ => {
                eprintln!("slotbridge: {}: not a pid", pidfile.display());
                return ExitCode::from(2);
            }
        },
        Err(e) => {
            eprintln!("slotbridge: {}: {e}", pidfile.display());
            return ExitCode::from(2);
        }
    };
    // kill(1) instead of a raw syscall: no unsafe code and no extra crate.
    match std::process::Command::new("kill")
        .args(["-s", "HUP", &pid.to_string()])
        .status()
    {
        Ok(status) if status.success() => {
            println!("slotbridge: reload requested (pid {pid}); the outcome is in its log");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            eprintln!("slotbridge: kill -s HUP {pid} failed ({status})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("slotbridge: cannot run kill: {e}");
            ExitCode::FAILURE
        }
    }
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

/// `slotbridge check-config FILE`.
pub fn check_config(file: &Path) -> ExitCode {
    match Config::from_file(file).and_then(|c| c.validate().map(|()| c)) {
        Ok(config) => {
            let upstream = config
                .upstream()
                .map(|u| format!("{u:?}"))
                .unwrap_or_default();
            println!(
                "{}: ok (listen {}, upstream {upstream})",
                file.display(),
                config.listen
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::from(2)
        }
    }
}
