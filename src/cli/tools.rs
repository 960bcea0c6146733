//! The one-shot tools: `check-config`, `explain-key`, `healthcheck` and `reload`. Each prints
//! its result and returns an exit code (2 for a bad file or argument).

use std::path::Path;
use std::process::ExitCode;

use slotbridge::config::{Config, Override};

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

/// `slotbridge check-config FILE [--set PATH=VALUE]...`, with `overrides` (the
/// variables' and `--set`'s) applied over the file.
pub fn check_config(file: &Path, overrides: &[Override]) -> ExitCode {
    match Config::from_file_with(file, overrides).and_then(|c| c.validate().map(|()| c)) {
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
            // The certificates and keys, read as start-up and reloads read them.
            let tls = slotbridge::tls::ClientTls::from_config(&config.tls)
                .map(drop)
                .and_then(|()| {
                    slotbridge::tls::NodeTls::from_config(&config.backend.tls).map(drop)
                });
            if let Err(e) = tls {
                eprintln!("slotbridge: {e}");
                return ExitCode::from(2);
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
