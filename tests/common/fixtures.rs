//! Shared fixtures of the migration tests: running the slotbridge binary, the usual
//! `migrate` argument lists, writing a keyspace with plain commands, and reading it back.
//!
//! Invariants: expected names are derived from LAYOUT.md (see [`bucket`]), never from the code
//! under test; the binary runs without Redis credentials from the environment.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use super::node::{connect, query};

/// Runs the slotbridge binary with `args` from the crate root and returns its output.
pub fn slotbridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("REDIS_USERNAME")
        .env_remove("REDIS_PASSWORD")
        .output()
        .expect("run slotbridge")
}

/// The `redis://` URL of a loopback `host:port`.
pub fn url(addr: &str) -> String {
    format!("redis://{addr}")
}

/// Runs `slotbridge migrate ARGS` and returns (exit code, stdout); panics with the output when
/// a signal killed it.
pub fn migrate(args: &[&str]) -> (i32, String) {
    let mut full = vec!["migrate"];
    full.extend_from_slice(args);
    let out = slotbridge(&full);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code().unwrap_or_else(|| {
        panic!(
            "killed by a signal\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, stdout)
}

/// Like [`migrate`], and fails the test unless it exits with 0; returns stdout.
pub fn migrate_ok(args: &[&str]) -> String {
    let (code, stdout) = migrate(args);
    assert_eq!(code, 0, "migrate {args:?} failed:\n{stdout}");
    stdout
}

/// `--source redis://SOURCE --cluster SEEDS --prefix P`: the arguments of a migration from a
/// node into a cluster, to extend with more flags.
pub fn to_cluster_args(source: &str, seeds: &str, prefix: &str) -> Vec<String> {
    [
        "--source",
        &url(source),
        "--cluster",
        seeds,
        "--prefix",
        prefix,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Migrates `source` into the cluster at `seeds` with `extra` flags; fails the test unless it
/// exits with 0; returns stdout.
pub fn migrate_to_cluster(source: &str, seeds: &str, prefix: &str, extra: &[&str]) -> String {
    let base = to_cluster_args(source, seeds, prefix);
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    migrate_ok(&args)
}

/// Sends `commands` to `addr` in one pipeline, each argument with `{p}` replaced by `prefix`,
/// so a fixture reads as the plain Redis commands that build it.
pub fn write_plain(addr: &str, prefix: &str, commands: &[&[&str]]) {
    let mut con = connect(addr);
    let mut pipe = redis::pipe();
    for command in commands {
        let Some((name, args)) = command.split_first() else {
            continue;
        };
        let cmd = pipe.cmd(name);
        for arg in args {
            cmd.arg(arg.replace("{p}", prefix));
        }
        cmd.ignore();
    }
    pipe.query::<()>(&mut con)
        .unwrap_or_else(|e| panic!("fixture on {addr}: {e}"));
}

/// 32-bit FNV-1a of `id` mod 32, as LAYOUT.md defines buckets.
pub fn bucket(id: &str) -> u32 {
    let mut hash: u32 = 2_166_136_261;
    for byte in id.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(16_777_619);
    }
    hash % 32
}

/// Every key under `prefix:` on each of `addrs` (every master of a cluster, or one node).
pub fn keys_on(addrs: &[String], prefix: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for addr in addrs {
        let found: Vec<String> =
            query(addr, redis::cmd("KEYS").arg(format!("{prefix}:*"))).expect("KEYS");
        keys.extend(found);
    }
    keys
}
