//! `slotbridge migrate` and `slotbridge inspect`: their flags, turned into
//! [`slotbridge::migrate::MigrateOptions`], and the progress display and report printing.
//!
//! Exit codes are a contract for scripts: 0 done, 1 failure, 2 bad flags, 3 stopped early
//! (run again), 4 refused because coordinators are live.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use slotbridge::migrate::Progress;

use super::usage_error;

/// Progress on stderr: a bar on a terminal, otherwise a plain line every few seconds (logs
/// and CI output get no control characters).
pub(super) enum ProgressDisplay {
    Bar(Option<indicatif::ProgressBar>),
    Lines(std::time::Instant),
}

impl ProgressDisplay {
    /// Every how often a plain progress line is printed.
    const LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

    pub(super) fn new(terminal: bool) -> ProgressDisplay {
        if terminal {
            ProgressDisplay::Bar(None)
        } else {
            ProgressDisplay::Lines(std::time::Instant::now())
        }
    }

    pub(super) fn update(&mut self, p: Progress) {
        match self {
            ProgressDisplay::Bar(bar) => {
                // The total is known only once the keyspace is planned: the bar starts then.
                let bar = bar.get_or_insert_with(|| {
                    let bar = indicatif::ProgressBar::new(p.total);
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "{bar:40} {pos}/{len} keys  {per_sec}  eta {eta}",
                    ) {
                        bar.set_style(style);
                    }
                    bar
                });
                bar.set_length(p.total);
                bar.set_position(p.done);
            }
            ProgressDisplay::Lines(last) => {
                if last.elapsed() >= Self::LINE_EVERY || p.done == p.total {
                    *last = std::time::Instant::now();
                    eprintln!("progress: {} / {} keys", p.done, p.total);
                }
            }
        }
    }

    /// Leaves the bar drawn at its last position, so the report starts on a clean line.
    pub(super) fn finish(&mut self) {
        if let ProgressDisplay::Bar(Some(bar)) = self {
            bar.abandon();
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
    /// A running proxy's live migration instead of a copy.
    #[command(subcommand)]
    pub live: Option<super::live::LiveCommand>,
    /// Where keys are read: redis://[user:pass@]host:port (a node or any cluster node);
    /// rediss:// for TLS (see the --tls-* flags).
    // `Option` only so a live subcommand can go without it: a copy requires it.
    #[arg(long, required = true)]
    pub source: Option<String>,
    /// Another server to write to: redis://[user:pass@]host:port. Default: in place.
    #[arg(long, conflicts_with = "cluster")]
    pub target: Option<String>,
    /// A cluster to write to, by seed nodes (host:port,...).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,...")]
    pub cluster: Vec<String>,
    /// The bot prefix.
    #[arg(long, required = true)]
    pub prefix: Option<String>,
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
    /// Keys read per SCAN page and copied per pipelined batch; memory follows it, not the
    /// size of the keyspace.
    #[arg(long, default_value_t = slotbridge::migrate::BATCH as u64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch_size: u64,
    /// TLS options of rediss:// URLs.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Flags of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The deployment: redis://[user:pass@]host:port (a node or any cluster node);
    /// rediss:// for TLS (see the --tls-* flags).
    #[arg(long)]
    pub source: String,
    /// The bot prefix.
    #[arg(long)]
    pub prefix: String,
    /// The rule file.
    #[arg(long, default_value = DEFAULT_LAYOUT)]
    pub layout: PathBuf,
    /// TLS options of rediss:// URLs.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS options of `rediss://` URLs, as `backend.tls` of the proxy.
#[derive(Debug, Args, Default)]
pub struct TlsArgs {
    /// CA certificates (PEM) the servers' certificates must chain to.
    #[arg(long, value_name = "FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// A client certificate (PEM), for servers with `tls-auth-clients yes`.
    #[arg(long, value_name = "FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `--tls-cert-file` (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// SNI and the name the servers' certificates must carry, instead of each host.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Accept any server certificate (tests only: verifies nothing).
    #[arg(long)]
    pub tls_insecure_skip_verify: bool,
}

fn redis_url(
    text: &str,
    tls: &TlsArgs,
) -> Result<slotbridge::migrate::RedisUrl, slotbridge::migrate::MigrateError> {
    let mut url = slotbridge::migrate::RedisUrl::parse(
        text,
        std::env::var("REDIS_USERNAME").ok(),
        std::env::var("REDIS_PASSWORD").ok(),
    )?;
    if let Some(settings) = &mut url.tls {
        settings.ca_cert_file.clone_from(&tls.tls_ca_cert_file);
        settings.cert_file.clone_from(&tls.tls_cert_file);
        settings.key_file.clone_from(&tls.tls_key_file);
        settings.server_name.clone_from(&tls.tls_server_name);
        settings.insecure_skip_verify = tls.tls_insecure_skip_verify;
    }
    Ok(url)
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
    use slotbridge::migrate::{Direction, MigrateError, MigrateOptions};
    use std::io::IsTerminal;
    // clap requires both for a copy; only a live subcommand goes without them.
    let (Some(source), Some(prefix)) = (&args.source, args.prefix) else {
        return usage_error("migrate needs --source and --prefix");
    };
    let source = match redis_url(source, &args.tls) {
        Ok(url) => url,
        Err(e) => return usage_error(&e.to_string()),
    };
    // `--target URL` or every `--cluster` seed, in order: the first that answers is used.
    let mut seeds = Vec::new();
    for text in args.target.iter().chain(&args.cluster) {
        match redis_url(text, &args.tls) {
            Ok(url) => seeds.push(url),
            Err(e) => return usage_error(&e.to_string()),
        }
    }
    let mut seeds = seeds.into_iter();
    let target = seeds.next();
    let target_seeds: Vec<_> = seeds.collect();
    let options = MigrateOptions {
        source,
        target,
        target_seeds,
        prefix,
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
        batch_size: args.batch_size as usize,
    };
    let runtime = match tool_runtime() {
        Ok(runtime) => runtime,
        Err(e) => return usage_error(&e),
    };
    let mut display = ProgressDisplay::new(std::io::stderr().is_terminal());
    let mut progress = |p: Progress| display.update(p);
    let result = runtime.block_on(slotbridge::migrate::migrate(&options, &mut progress));
    display.finish();
    match result {
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
    let source = match redis_url(&args.source, &args.tls) {
        Ok(url) => url,
        Err(e) => return usage_error(&e.to_string()),
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
