//! A real legacy client through the layout: `tests/node/legacy_bot.js` (node-redis 4) works on
//! the legacy key names through the proxy (scripts, locks, turns, leadership, records with and
//! without TTL), then reads its own 3-master cluster directly and checks the key set and the
//! indices LAYOUT.md predicts, and the listings through the proxy. This test starts the cluster
//! and the proxy, runs the bot, and fails with the bot's output unless it exits 0.
//!
//! Node.js and the bot's packages are required: a missing `node` or `tests/node/node_modules`
//! fails with the install command, it never skips.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, Proxy};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";
/// The bot has its own 90 s limit; this one only guards against a hung `node`.
const BOT_TIMEOUT: Duration = Duration::from_secs(150);

fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Panics with the install hint unless `node` runs and the bot's packages are installed.
fn require_node() {
    let version = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    let found = version.as_ref().is_ok_and(|out| out.status.success());
    assert!(
        found,
        "`node` was not found on PATH; this test runs a node-redis client. Install Node.js \
         (Debian: sudo apt-get install -y nodejs npm), then: npm ci --prefix tests/node"
    );
    let package = node_dir().join("node_modules/redis/package.json");
    assert!(
        package.is_file(),
        "{} is missing; install the bot's packages with: npm ci --prefix tests/node",
        package.display()
    );
}

/// Runs the bot to completion (or the timeout): exit success and its stdout + stderr.
fn run_bot(proxy: &str, masters: &[String]) -> (bool, String) {
    let mut child = Command::new("node")
        .arg(node_dir().join("legacy_bot.js"))
        .arg(proxy)
        .args(masters)
        .current_dir(node_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    // Drain both pipes on their own threads so a chatty bot never blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + BOT_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let output = format!(
        "--- bot stdout ---\n{}--- bot stderr ---\n{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    match status {
        Some(status) => (
            status.success(),
            format!("bot exited with {status}\n{output}"),
        ),
        None => (
            false,
            format!("bot killed after {BOT_TIMEOUT:?} without exiting\n{output}"),
        ),
    }
}

#[test]
fn node_redis_legacy_bot_sees_its_legacy_keyspace_and_the_cluster_holds_cluster_v1() {
    require_node();
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let (ok, output) = run_bot(proxy.addr(), &cluster.masters());
    assert!(
        ok,
        "the legacy bot failed\n{output}\n--- proxy output ---\n{}",
        proxy.output()
    );
    println!("{output}");
}
