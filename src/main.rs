//! The `slotbridge` command: run the proxy (default), check a configuration file, or ask a
//! running proxy to reload its configuration.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command.unwrap_or(cli::Command::Run(cli.run)) {
        cli::Command::Run(args) => cli::run(args),
        cli::Command::CheckConfig { file } => cli::check_config(&file),
        cli::Command::Reload { pidfile } => cli::reload(&pidfile),
    }
}
