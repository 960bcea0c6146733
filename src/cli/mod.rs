//! Command-line interface: the clap types of every subcommand and the dispatch to their
//! handlers. Flags (also settable as `SLOTBRIDGE_*` environment variables) are a contract:
//! their names and meanings do not change.
//!
//! `run` merges flags over the YAML file in one place ([`run`]); the one-shot tools live in
//! [`tools`], `migrate` / `inspect` in [`migrate`], and `migrate status|pause|resume`
//! (a running proxy's live migration) in [`live`].

mod explain;
mod live;
mod migrate;
mod run;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use slotbridge::config::{ConfigError, LogFormat, Override};

use explain::ExplainArgs;
use migrate::{InspectArgs, MigrateArgs};

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
    /// Parse and validate a configuration file, then exit. The `SLOTBRIDGE_<PATH>`
    /// variables and `--set` apply over it, as they would for `run`.
    CheckConfig {
        /// The YAML file to check.
        file: PathBuf,
        /// Set an option over the file, as `run --set` does; repeatable.
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
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
    /// Ask a running proxy how it would carry out a command (`SLOTBRIDGE EXPLAIN`),
    /// without running it, and print the answer.
    Explain(ExplainArgs),
    /// Copy a keyspace between the legacy layout and cluster:v1 (bots stopped); or, with
    /// `status`, `pause` or `resume`, watch and steer a running proxy's live migration.
    // The copy's flags stay as they were; a live-migration subcommand replaces them.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
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
    /// TLS listener address, beside `--listen` (see `tls.listen`).
    #[arg(long, env = "SLOTBRIDGE_TLS_LISTEN", value_name = "HOST:PORT")]
    pub tls_listen: Option<String>,
    /// The TLS listener's certificate chain, PEM.
    #[arg(long, env = "SLOTBRIDGE_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The TLS listener's private key, PEM.
    #[arg(long, env = "SLOTBRIDGE_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificates client certificates must chain to, PEM (see `tls.auth_clients`).
    #[arg(long, env = "SLOTBRIDGE_TLS_CA_CERT_FILE", value_name = "FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
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
    /// Redis Sentinels that name the upstream master, comma-separated (with --master-name).
    #[arg(
        long,
        env = "SLOTBRIDGE_SENTINEL",
        value_delimiter = ',',
        conflicts_with_all = ["cluster", "standalone"],
        value_name = "HOST:PORT,..."
    )]
    pub sentinel: Vec<String>,
    /// The master name the Sentinels monitor (`sentinel.master_name`).
    #[arg(long, env = "SLOTBRIDGE_MASTER_NAME", value_name = "NAME")]
    pub master_name: Option<String>,
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
    /// Set any option of the configuration file, e.g. `--set backend.read_timeout_ms=300`
    /// or `--set commands.allow=[flushdb]`; repeatable. Over the file and the
    /// `SLOTBRIDGE_<PATH>` variables (`SLOTBRIDGE_BACKEND__READ_TIMEOUT_MS=300`), under the
    /// flags above.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}

/// The variables read by the flags above: they are not taken as `SLOTBRIDGE_<PATH>`
/// option settings too.
const FLAG_VARIABLES: &[&str] = &[
    "SLOTBRIDGE_CONFIG",
    "SLOTBRIDGE_LISTEN",
    "SLOTBRIDGE_TLS_LISTEN",
    "SLOTBRIDGE_TLS_CERT_FILE",
    "SLOTBRIDGE_TLS_KEY_FILE",
    "SLOTBRIDGE_TLS_CA_CERT_FILE",
    "SLOTBRIDGE_CLUSTER",
    "SLOTBRIDGE_STANDALONE",
    // Also the name of the `sentinel` section's variable: the flag's reading wins.
    "SLOTBRIDGE_SENTINEL",
    "SLOTBRIDGE_MASTER_NAME",
    "SLOTBRIDGE_ADMIN_LISTEN",
    "SLOTBRIDGE_THREADS",
    "SLOTBRIDGE_LOG_FORMAT",
    "SLOTBRIDGE_LOG_LEVEL",
    "SLOTBRIDGE_LAYOUT",
    "SLOTBRIDGE_REQUIREPASS",
    "SLOTBRIDGE_PIDFILE",
];

/// Runs the subcommand `cli` names (`run` when none) and returns the process exit code.
pub fn dispatch(cli: Cli) -> ExitCode {
    match cli.command.unwrap_or(Command::Run(cli.run)) {
        Command::Run(args) => run::run(args),
        Command::CheckConfig { file, set } => match option_overrides(&set) {
            Ok(overrides) => tools::check_config(&file, &overrides),
            Err(e) => usage_error(&e.to_string()),
        },
        Command::ExplainKey {
            key,
            layout,
            prefixes,
        } => tools::explain_key(&key, &layout, &prefixes),
        Command::Explain(args) => explain::explain(args),
        Command::Migrate(MigrateArgs {
            live: Some(command),
            ..
        }) => live::run(command),
        Command::Migrate(args) => migrate::migrate(args),
        Command::Inspect(args) => migrate::inspect(args),
        Command::Healthcheck { admin_listen } => tools::healthcheck(&admin_listen),
        Command::Reload { pidfile } => tools::reload(&pidfile),
    }
}

/// The options set by `SLOTBRIDGE_<PATH>` variables (in name order), then by `--set`.
fn option_overrides(set: &[String]) -> Result<Vec<Override>, ConfigError> {
    // Names or values that are not UTF-8 cannot be options: skipped, not a panic.
    let mut variables: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| !FLAG_VARIABLES.contains(&name.as_str()))
        .collect();
    variables.sort();
    let mut overrides: Vec<Override> = variables
        .iter()
        .filter_map(|(name, value)| Override::from_env(name, value))
        .collect();
    for arg in set {
        overrides.push(Override::from_flag(arg)?);
    }
    Ok(overrides)
}

/// Prints a usage problem and returns exit code 2 (bad flags or arguments).
fn usage_error(message: &str) -> ExitCode {
    eprintln!("slotbridge: {message}");
    ExitCode::from(2)
}
