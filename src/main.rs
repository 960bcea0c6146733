//! The `slotbridge` command: run the proxy (default), check a configuration file,
//! migrate / inspect a keyspace, explain a key's translation, probe a running proxy's
//! health, or ask it to reload its configuration.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cli::dispatch(cli::Cli::parse())
}
