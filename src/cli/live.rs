//! `slotbridge migrate status|pause|resume`: a running proxy's live migration, through its
//! admin endpoint (`GET /migration`, `POST /migration/pause`, `POST /migration/resume`).
//!
//! Exit codes: 0 answered, 1 the proxy could not be asked or has no live migration. A pause
//! or resume lasts until the proxy's next reload, which sets `migration.paused` again.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use slotbridge::live::Status;
use slotbridge::migrate::Progress;

use super::migrate::ProgressDisplay;

/// How long one admin call may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `--watch` asks the proxy again.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The live-migration subcommands of `migrate`.
#[derive(Debug, Subcommand)]
pub enum LiveCommand {
    /// Show a running proxy's live migration: state, keys moved on touch and by the walker,
    /// rate, estimated time left, errors.
    Status {
        #[command(flatten)]
        admin: AdminArgs,
        /// Print the status as JSON (the admin endpoint's answer).
        #[arg(long)]
        json: bool,
        /// Draw the progress (a bar on a terminal) until the migration is done, then print
        /// the status.
        #[arg(long)]
        watch: bool,
    },
    /// Pause the proxy's walker (commands still move the keys they touch) until `resume`
    /// or the next reload.
    Pause {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume the proxy's walker.
    Resume {
        #[command(flatten)]
        admin: AdminArgs,
    },
}

/// Where the proxy's admin endpoint listens.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The proxy's admin address (its `--admin-listen`).
    #[arg(
        long,
        env = "SLOTBRIDGE_ADMIN_LISTEN",
        default_value = "127.0.0.1:9121",
        value_name = "HOST:PORT"
    )]
    pub admin: String,
}

/// Runs one live-migration subcommand.
pub fn run(command: LiveCommand) -> ExitCode {
    let result = match command {
        LiveCommand::Status {
            admin,
            json,
            watch: false,
        } => call(&admin.admin, "GET", "/migration").map(|status| print(&status, json)),
        LiveCommand::Status {
            admin,
            json,
            watch: true,
        } => watch(&admin.admin).map(|status| print(&status, json)),
        LiveCommand::Pause { admin } => {
            call(&admin.admin, "POST", "/migration/pause").map(|s| print(&s, false))
        }
        LiveCommand::Resume { admin } => {
            call(&admin.admin, "POST", "/migration/resume").map(|s| print(&s, false))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotbridge: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print(status: &Status, json: bool) {
    match json {
        true => println!("{}", status.to_json()),
        false => print!("{}", status.to_text()),
    }
}

/// One admin call that answers a migration status.
fn call(admin: &str, method: &str, path: &str) -> Result<Status, String> {
    let (code, body) = slotbridge::admin::request(admin, method, path, ADMIN_TIMEOUT)?;
    match code {
        200 => Status::from_json(&body),
        _ => Err(format!("{admin} answered {code}: {}", body.trim_end())),
    }
}

/// Draws the progress on stderr until the migration is done; returns the last status.
fn watch(admin: &str) -> Result<Status, String> {
    use std::io::IsTerminal;
    let mut display = ProgressDisplay::new(std::io::stderr().is_terminal());
    let status = loop {
        let status = match call(admin, "GET", "/migration") {
            Ok(status) => status,
            Err(e) => {
                display.finish();
                return Err(e);
            }
        };
        let (done, total) = status.progress();
        display.update(Progress { done, total });
        if status.is_done() {
            break status;
        }
        std::thread::sleep(WATCH_EVERY);
    };
    display.finish();
    Ok(status)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::LiveCommand;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        let cli = Cli::try_parse_from([&["slotbridge"][..], args].concat())?;
        Ok(cli.command.expect("a subcommand"))
    }

    #[test]
    fn a_copy_keeps_its_flags_and_needs_source_and_prefix() {
        let Command::Migrate(args) = parse(&[
            "migrate",
            "--source",
            "redis://a:1",
            "--prefix",
            "p",
            "--json",
        ])
        .unwrap() else {
            panic!("not migrate");
        };
        assert!(args.live.is_none() && args.json);
        assert_eq!(args.source.as_deref(), Some("redis://a:1"));
        assert_eq!(args.prefix.as_deref(), Some("p"));
        for missing in [
            &["migrate"][..],
            &["migrate", "--prefix", "p"],
            &["migrate", "--json"],
        ] {
            let error = parse(missing).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{missing:?}"
            );
        }
    }

    #[test]
    fn live_subcommands_need_no_copy_flags_and_take_none() {
        let Command::Migrate(args) =
            parse(&["migrate", "status", "--admin", "h:1", "--json", "--watch"]).unwrap()
        else {
            panic!("not migrate");
        };
        let Some(LiveCommand::Status { admin, json, watch }) = args.live else {
            panic!("not status: {:?}", args.live);
        };
        assert_eq!((admin.admin.as_str(), json, watch), ("h:1", true, true));
        let Command::Migrate(args) = parse(&["migrate", "resume"]).unwrap() else {
            panic!("not migrate");
        };
        assert!(
            matches!(args.live, Some(LiveCommand::Resume { .. })),
            "{:?}",
            args.live
        );
        assert!(parse(&[
            "migrate",
            "--source",
            "redis://a:1",
            "--prefix",
            "p",
            "pause"
        ])
        .is_err());
        assert!(parse(&["migrate", "pause", "--json"]).is_err());
    }
}
