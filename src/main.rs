//! The `slotbridge` command: run the proxy (default), check a configuration file,
//! migrate / inspect a keyspace, explain a key's translation, probe a running proxy's
//! health, or ask it to reload its configuration.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command.unwrap_or(cli::Command::Run(cli.run)) {
        cli::Command::Run(args) => cli::run(args),
        cli::Command::CheckConfig { file } => cli::check_config(&file),
        cli::Command::ExplainKey {
            key,
            layout,
            prefixes,
        } => cli::explain_key(&key, &layout, &prefixes),
        cli::Command::Migrate(args) => cli::migrate(args),
        cli::Command::Inspect(args) => cli::inspect(args),
        cli::Command::Healthcheck { admin_listen } => cli::healthcheck(&admin_listen),
        cli::Command::Reload { pidfile } => cli::reload(&pidfile),
    }
}
