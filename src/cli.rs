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
    /// Show how a legacy key translates under a layout rule file (prefix, rule, cluster
    /// key, hash slot, index entry), then exit.
    ExplainKey {
        /// The legacy key (or a cluster key, to see what it maps back to).
        key: String,
        /// The layout rule file.
        #[arg(long, value_name = "FILE")]
        layout: PathBuf,
        /// A prefix the rules apply to (repeatable; default: the file's `prefixes:`).
        #[arg(long = "prefix", value_name = "NAME")]
        prefixes: Vec<String>,
    },
    /// Copy a keyspace between the legacy layout and cluster:v1 (bots stopped).
    Migrate(MigrateArgs),
    /// Count a keyspace's keys per layout and family, show the marker and live coordinators.
    Inspect(InspectArgs),
    /// Exit 0 when a running proxy's admin `/healthz` answers 200 (for container health
    /// checks, without curl).
    Healthcheck {
        /// The proxy's admin address.
        #[arg(
            long,
            env = "SLOTBRIDGE_ADMIN_LISTEN",
            default_value = "127.0.0.1:9121",
            value_name = "HOST:PORT"
        )]
        admin_listen: String,
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
    /// Log filter, e.g. `info` or `slotbridge=debug` (falls back to `RUST_LOG`).
    #[arg(long, env = "SLOTBRIDGE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Layout rule file: translate legacy key names (see `layout.file`).
    #[arg(long, env = "SLOTBRIDGE_LAYOUT", value_name = "FILE")]
    pub layout: Option<PathBuf>,
    /// A key prefix the layout applies to; repeatable (see `layout.prefixes`).
    #[arg(long = "prefix", value_name = "NAME")]
    pub prefixes: Vec<String>,
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

/// `slotbridge healthcheck`: GET /healthz on the admin address.
pub fn healthcheck(admin_listen: &str) -> ExitCode {
    let timeout = std::time::Duration::from_secs(2);
    match slotbridge::admin::probe(admin_listen, "/healthz", timeout) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("slotbridge: /healthz answered {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::FAILURE
        }
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
            match config.layout.load() {
                Ok(Some(layout)) => print_layout_report(&layout),
                Ok(None) => {}
                Err(e) => {
                    eprintln!("slotbridge: {e}");
                    return ExitCode::from(2);
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::from(2)
        }
    }
}

/// The layout part of `check-config`: prefixes, rules, and rule conflicts.
fn print_layout_report(layout: &slotbridge::rewrite::Layout) {
    println!(
        "layout {} ({}), prefixes: {}, {} rules",
        layout.source_name(),
        layout.layout_name().unwrap_or("no marker"),
        layout.prefixes().join(", "),
        layout.rules().len()
    );
    let conflicts = layout.conflicts();
    if conflicts.is_empty() {
        println!("rule conflicts: none");
    }
    for conflict in conflicts {
        let example = conflict
            .example
            .map(|key| format!(" (e.g. {})", key.escape_ascii()))
            .unwrap_or_default();
        println!(
            "rule conflict: rules {} and {} match the same keys with equal specificity; rule {} wins by file order{example}",
            conflict.first, conflict.second, conflict.first
        );
    }
}

/// `slotbridge explain-key KEY --layout FILE [--prefix NAME]...`.
pub fn explain_key(key: &str, layout: &Path, prefixes: &[String]) -> ExitCode {
    match slotbridge::rewrite::Layout::load(layout, prefixes) {
        Ok(layout) => {
            print!("{}", layout.explain(key.as_bytes()));
            if let slotbridge::rewrite::Reverse::Legacy(legacy) = layout.reverse(key.as_bytes()) {
                println!(
                    "as a cluster key, shown to clients as: {}",
                    legacy.escape_ascii()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::from(2)
        }
    }
}

/// The rule file `migrate` and `inspect` use when `--layout` is not given.
const DEFAULT_LAYOUT: &str = "config/botmesh-cluster-v1.yaml";

/// Which way `migrate` copies.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DirectionArg {
    /// Legacy names to cluster:v1 names.
    LegacyToCluster,
    /// cluster:v1 names back to legacy names.
    ClusterToLegacy,
}

/// Flags of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Where keys are read: redis://[user:pass@]host:port (a node or any cluster node).
    #[arg(long)]
    pub source: String,
    /// Another server to write to: redis://[user:pass@]host:port. Default: in place.
    #[arg(long, conflicts_with = "cluster")]
    pub target: Option<String>,
    /// A cluster to write to, by seed nodes (host:port,...).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,...")]
    pub cluster: Vec<String>,
    /// The bot prefix.
    #[arg(long)]
    pub prefix: String,
    /// The rule file.
    #[arg(long, default_value = DEFAULT_LAYOUT)]
    pub layout: PathBuf,
    /// Read and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replace target keys that already exist.
    #[arg(long)]
    pub overwrite: bool,
    /// Delete source keys once copied.
    #[arg(long)]
    pub delete_source: bool,
    /// Only this family (repeatable); the layout marker is then not written.
    #[arg(long, value_name = "FAMILY")]
    pub include: Vec<String>,
    /// Proceed even while coordinator heartbeats or pending tickets exist.
    #[arg(long)]
    pub allow_live: bool,
    /// Which way to copy.
    #[arg(long, value_enum, default_value = "legacy-to-cluster")]
    pub direction: DirectionArg,
    /// The way back mirrors the source: overwrite records, prune what it no longer has
    /// (the default).
    #[arg(long, overrides_with = "no_mirror")]
    pub mirror: bool,
    /// The way back only copies (existing legacy keys win).
    #[arg(long, overrides_with = "mirror")]
    pub no_mirror: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Stop after copying this many keys (tests of resumption).
    #[arg(long, hide = true)]
    pub stop_after: Option<u64>,
}

/// Flags of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The deployment: redis://[user:pass@]host:port (a node or any cluster node).
    #[arg(long)]
    pub source: String,
    /// The bot prefix.
    #[arg(long)]
    pub prefix: String,
    /// The rule file.
    #[arg(long, default_value = DEFAULT_LAYOUT)]
    pub layout: PathBuf,
}

fn redis_url(text: &str) -> Result<slotbridge::migrate::RedisUrl, String> {
    slotbridge::migrate::RedisUrl::parse(
        text,
        std::env::var("REDIS_USERNAME").ok(),
        std::env::var("REDIS_PASSWORD").ok(),
    )
    .map_err(|e| e.to_string())
}

fn tool_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `slotbridge migrate ...`: exit 0 when done, 1 on failure, 2 on bad flags, 3 when it
/// stopped early (run again), 4 when refused because coordinators are live.
pub fn migrate(args: MigrateArgs) -> ExitCode {
    use slotbridge::migrate::{Direction, MigrateError, MigrateOptions, Progress};
    use std::io::IsTerminal;
    let source = match redis_url(&args.source) {
        Ok(url) => url,
        Err(e) => return usage_error(&e),
    };
    let target = match (&args.target, args.cluster.first()) {
        (Some(url), _) | (None, Some(url)) => match redis_url(url) {
            Ok(url) => Some(url),
            Err(e) => return usage_error(&e),
        },
        (None, None) => None,
    };
    let options = MigrateOptions {
        source,
        target,
        prefix: args.prefix,
        layout: args.layout,
        dry_run: args.dry_run,
        overwrite: args.overwrite,
        delete_source: args.delete_source,
        include: args.include,
        allow_live: args.allow_live,
        direction: match args.direction {
            DirectionArg::LegacyToCluster => Direction::LegacyToCluster,
            DirectionArg::ClusterToLegacy => Direction::ClusterToLegacy,
        },
        mirror: !args.no_mirror,
        stop_after: args.stop_after,
    };
    let runtime = match tool_runtime() {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e),
    };
    let terminal = std::io::stderr().is_terminal();
    let mut last_line = std::time::Instant::now();
    let mut progress = |p: Progress| {
        if terminal {
            eprint!("\rcopied {} / {} keys", p.done, p.total);
            if p.done == p.total {
                eprintln!();
            }
        } else if last_line.elapsed() >= std::time::Duration::from_secs(2) || p.done == p.total {
            last_line = std::time::Instant::now();
            eprintln!("progress: {} / {} keys", p.done, p.total);
        }
    };
    match runtime.block_on(slotbridge::migrate::migrate(&options, &mut progress)) {
        Ok(report) => {
            if args.json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
            if report.interrupted {
                ExitCode::from(3)
            } else if report.totals().errors > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e @ MigrateError::Live(_)) => {
            eprintln!("slotbridge: {e}");
            ExitCode::from(4)
        }
        Err(e @ MigrateError::Usage(_)) => usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `slotbridge inspect ...`.
pub fn inspect(args: InspectArgs) -> ExitCode {
    let source = match redis_url(&args.source) {
        Ok(url) => url,
        Err(e) => return usage_error(&e),
    };
    let runtime = match tool_runtime() {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e),
    };
    let result = runtime.block_on(async {
        let layout = slotbridge::migrate::load_layout(&args.layout, &args.prefix)?;
        let endpoint = slotbridge::migrate::source::Endpoint::connect(&source).await?;
        slotbridge::migrate::inspect(&endpoint, &layout, &args.prefix).await
    });
    match result {
        Ok(inspection) => {
            print!("{}", inspection.to_text());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("slotbridge: {message}");
    ExitCode::from(2)
}
