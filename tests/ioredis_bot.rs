//! The client the cutovers move, through the proxy: `tests/node/ioredis_bot.js` (ioredis 5,
//! connected by `tests/node/ioredis_conn.js` as such fleets connect: ACL user or legacy AUTH,
//! `retryStrategy`, `reconnectOnError` on READONLY/MASTERDOWN, auto-pipelining) runs cache-aside,
//! sessions, rate limits, a Lua lock, a stream with a consumer group, pub/sub and scanStream
//! for a few seconds, then reads back every write it got acknowledged and prints a JSON summary.
//!
//! What the bot counts as a surfaced error is documented at the top of the bot: a rejected
//! command, a scanStream error, a session or lock that is not what the bot just wrote. The tests
//! also require no `error` event and no reconnect at all: the proxy is meant to keep a client's
//! connection through a failover and an upstream switch, so any reconnect would be a regression
//! even though ioredis would hide it from the app.
//!
//! Node.js and the packages of `tests/node` are required: a missing `node` or `ioredis` fails
//! with the install command, it never skips.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{http_raw, new_dir, query, shared_cluster, Cluster, Proxy, Standalone};
use serde_json::Value;

/// Only guards against a hung `node`: the bot stops itself after its `--seconds`.
const BOT_TIMEOUT: Duration = Duration::from_secs(60);
/// The proxy's default retry budget is about 2.5 s; a pause in acknowledgements past it means
/// the bot stalled.
const MAX_STALL_MS: u64 = 3000;
const FLEET_USER: &str = "fleet";
const FLEET_PASSWORD: &str = "fleet-pw";
const LEGACY_PASSWORD: &str = "legacy-pw";

fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Panics with the install hint unless `node` runs and ioredis is installed.
fn require_node() {
    let version = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    assert!(
        version.as_ref().is_ok_and(|out| out.status.success()),
        "`node` was not found on PATH; this test runs an ioredis client. Install Node.js \
         (Debian: sudo apt-get install -y nodejs npm), then: npm ci --prefix tests/node"
    );
    let package = node_dir().join("node_modules/ioredis/package.json");
    assert!(
        package.is_file(),
        "{} is missing; install the bot's packages with: npm ci --prefix tests/node",
        package.display()
    );
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// A proxy config file: `upstream` (a `cluster:` or `standalone:` line), the fleet's ACL user
/// (keys and channels under `prefix` only; its own Lua scripts trusted, as an operator must
/// say for a user whose rules are restricted) and a `default` password for legacy `AUTH
/// password`.
fn write_config(path: &Path, upstream: &str, prefix: &str) {
    let text = format!(
        "{upstream}\nrequirepass: {LEGACY_PASSWORD}\nusers:\n  - name: {FLEET_USER}\n    \
         password: {FLEET_PASSWORD}\n    commands: [\"+@all\"]\n    keys: [\"~{prefix}:*\"]\n    \
         channels: [\"&{prefix}:*\"]\n    scripts: trusted\n"
    );
    std::fs::write(path, text).expect("write the proxy config");
}

fn cluster_line(seeds: &[String]) -> String {
    let quoted: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!("cluster: [{}]", quoted.join(", "))
}

/// A proxy started from a config file in a directory of its own: (proxy, config path).
fn start_proxy(upstream: &str, prefix: &str) -> (Proxy, PathBuf) {
    let path = new_dir("ioredis-config").join("slotbridge.yaml");
    write_config(&path, upstream, prefix);
    let proxy = Proxy::start(&["--config", path.to_str().expect("UTF-8 path")]);
    (proxy, path)
}

/// The bot as a running process.
struct Bot {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

impl Bot {
    /// Starts the bot against `proxy` for `seconds`; `login` is the ACL user or None for
    /// legacy AUTH; `cluster` makes every connection a `Redis.Cluster` seeded with the proxy.
    fn start(proxy: &str, prefix: &str, seconds: u32, login: Option<&str>, cluster: bool) -> Bot {
        let (host, port) = proxy.rsplit_once(':').expect("host:port");
        let mut command = Command::new("node");
        command
            .arg(node_dir().join("ioredis_bot.js"))
            .args(["--host", host, "--port", port, "--prefix", prefix])
            .args(["--seconds", &seconds.to_string()]);
        match login {
            Some(user) => command.args(["--username", user, "--password", FLEET_PASSWORD]),
            None => command.args(["--password", LEGACY_PASSWORD]),
        };
        if cluster {
            command.arg("--cluster");
        }
        let mut child = command
            .current_dir(node_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node: {e}"));
        // Drained on their own threads so a chatty bot never blocks on a full pipe.
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
        Bot {
            child,
            stdout,
            stderr,
        }
    }

    /// Sends SIGUSR2: the first marks the start of a cutover, the second its end.
    fn signal_cutover(&self) {
        let status = Command::new("kill")
            .args(["-s", "USR2", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s USR2 the bot");
    }

    /// Waits for the bot and returns its summary; panics with its output if it failed.
    fn finish(mut self, proxy: &Proxy) -> Summary {
        let deadline = Instant::now() + BOT_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(None) | Err(_) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        let stdout = self.stdout.join().unwrap_or_default();
        let stderr = self.stderr.join().unwrap_or_default();
        let output = format!(
            "bot status {status:?}\n--- bot stdout ---\n{stdout}--- bot stderr ---\n{stderr}\
             --- proxy output ---\n{}",
            proxy.output()
        );
        let json = stdout.lines().last().unwrap_or_default();
        match (status, serde_json::from_str::<Value>(json)) {
            (Some(status), Ok(value)) if status.success() => Summary { value, output },
            _ => panic!("the ioredis bot did not finish with a summary\n{output}"),
        }
    }
}

/// The bot's JSON summary, with its whole output for failure messages.
struct Summary {
    value: Value,
    output: String,
}

impl Summary {
    fn number(&self, field: &str) -> u64 {
        self.value[field]
            .as_u64()
            .unwrap_or_else(|| panic!("summary field {field} is not a number\n{}", self.output))
    }

    fn list(&self, field: &str) -> Vec<Value> {
        self.value[field]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("summary field {field} is not a list\n{}", self.output))
    }

    fn count(&self, kind: &str) -> u64 {
        self.value["counts"][kind].as_u64().unwrap_or(0)
    }

    /// Acknowledged operations in the 500 ms buckets that start at or after `since_ms`.
    fn ops_since(&self, since_ms: u64) -> u64 {
        self.ops_between(since_ms, u64::MAX)
    }

    /// Acknowledged operations in the 500 ms buckets that overlap `from_ms..=to_ms`.
    fn ops_between(&self, from_ms: u64, to_ms: u64) -> u64 {
        self.list("progress")
            .iter()
            .filter(|bucket| {
                bucket[0]
                    .as_u64()
                    .is_some_and(|start| start + 500 > from_ms && start <= to_ms)
            })
            .filter_map(|bucket| bucket[1].as_u64())
            .sum()
    }

    /// What every scenario requires (see [`Summary::assert_clean_but_pubsub`]), and the
    /// subscriber got every message published outside a cutover's move.
    fn assert_clean(&self) {
        self.assert_clean_but_pubsub();
        self.assert_pubsub_complete();
    }

    fn assert_pubsub_complete(&self) {
        let out = &self.output;
        assert!(self.number("published") > 0, "nothing published\n{out}");
        assert_eq!(
            self.number("missedMessages"),
            0,
            "the subscriber missed messages\n{out}"
        );
        assert_eq!(
            self.number("received") + self.number("missedDuringCutover"),
            self.number("published"),
            "messages received twice or not published\n{out}"
        );
    }

    /// Nothing surfaced, nothing lost, no connection trouble, something verified, no stall,
    /// every kind of work acknowledged.
    fn assert_clean_but_pubsub(&self) {
        let out = &self.output;
        assert!(self.list("errorEvents").is_empty(), "errorEvents\n{out}");
        for field in [
            "surfacedCount",
            "lostCount",
            "reconnectAttempts",
            "reconnectOnError",
        ] {
            assert_eq!(self.number(field), 0, "{field}\n{out}");
        }
        assert!(self.number("verified") > 0, "nothing was verified\n{out}");
        assert!(
            self.number("maxGapMs") < MAX_STALL_MS,
            "the bot stalled\n{out}"
        );
        for kind in [
            "cache-set",
            "session-hset",
            "rate-lua",
            "lock-release",
            "stream-xack",
            "scan",
        ] {
            assert!(self.count(kind) > 0, "no {kind} acknowledged\n{out}");
        }
    }
}

/// The slot owner of `key` on `cluster`.
fn owner_of(cluster: &Cluster, key: &str) -> String {
    cluster.node_for_slot(cluster.keyslot(key))
}

/// a. A master fails over (`CLUSTER FAILOVER` on its replica) under the bot: nothing surfaces,
/// no acknowledged write is lost, and the bot keeps going during and after.
#[test]
fn ioredis_bot_through_a_master_failover_loses_nothing() {
    require_node();
    let prefix = "iofail";
    let cluster = Cluster::start(3, 1);
    let (proxy, _config) = start_proxy(&cluster_line(&cluster.seeds()), prefix);
    let bot = Bot::start(proxy.addr(), prefix, 9, Some(FLEET_USER), false);

    std::thread::sleep(Duration::from_millis(3000));
    // The master of the stream: every worker loop of the bot reaches it.
    let master = owner_of(&cluster, &format!("{prefix}:stream"));
    let replica = cluster.replicas_of(&master)[0].clone();
    let failover_started = now_ms();
    cluster.failover(&replica);
    let failover_done = now_ms();

    let summary = bot.finish(&proxy);
    let out = &summary.output;
    summary.assert_clean();
    assert_eq!(summary.number("groupRecreated"), 0, "{out}");
    assert_eq!(owner_of(&cluster, &format!("{prefix}:stream")), replica);
    // With no pause in acknowledgements over MAX_STALL_MS (assert_clean), this shows work
    // went on while the master changed and went on at pace after.
    assert!(
        summary.ops_between(failover_started, failover_done) > 0
            && summary.ops_since(failover_done + 1000) > 100,
        "the bot made no progress around the failover ({failover_started}..{failover_done})\n{out}"
    );
}

/// What a cutover run leaves: the bot's summary, when the move was done (ms since the epoch),
/// and the bot's stream length on the old node and on the cluster.
struct Cutover {
    summary: Summary,
    done_ms: u64,
    stream_on_old: u64,
    stream_on_new: u64,
}

/// Runs the bot (legacy `AUTH password`) through a proxy whose upstream is a standalone node,
/// and moves the upstream to the cluster by hot reload (`POST /reload` after rewriting the
/// config file) while it runs, signalling the bot before and after the move.
fn run_cutover(prefix: &str) -> Cutover {
    require_node();
    let standalone = Standalone::start();
    let cluster = shared_cluster();
    let upstream = format!("standalone: \"{}\"", standalone.addr());
    let (proxy, config) = start_proxy(&upstream, prefix);
    let bot = Bot::start(proxy.addr(), prefix, 8, None, false);

    std::thread::sleep(Duration::from_millis(3000));
    bot.signal_cutover();
    // Node handles a signal between two turns of its event loop: let the mark precede the move.
    std::thread::sleep(Duration::from_millis(200));
    write_config(&config, &cluster_line(&cluster.seeds()), prefix);
    let (status, body) = http_raw(
        proxy.admin_addr(),
        b"POST /reload HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proxy.stderr().contains("configuration reloaded") {
        assert!(Instant::now() < deadline, "no reload\n{}", proxy.output());
        std::thread::sleep(Duration::from_millis(20));
    }
    bot.signal_cutover();
    let done_ms = now_ms();

    let summary = bot.finish(&proxy);
    let stream = format!("{prefix}:stream");
    let xlen = redis::cmd("XLEN").arg(&stream).clone();
    Cutover {
        stream_on_old: query(standalone.addr(), &xlen).expect("XLEN on the old node"),
        stream_on_new: query(&owner_of(cluster, &stream), &xlen).expect("XLEN on the cluster"),
        summary,
        done_ms,
    }
}

/// b. The upstream moves from a standalone node to the cluster by hot reload while the bot
/// runs.
///
/// Scenario: a cutover with no data copy. The fleet's Redis state is rebuilt by the app
/// (cache refills, sessions and rate windows restart, locks are short; the work stream's
/// consumer group is created again on NOGROUP, as such workers do). A live copy would race
/// the bot's writes, and `slotbridge migrate` wants the bots stopped. So writes acknowledged
/// before the move stay on the old node (the test checks it kept its stream), and the bot
/// verifies, through a fresh connection, every key whose last acknowledged write was sent
/// after the move was done, which must read back from the cluster. A session read or lock
/// release whose two halves straddle the move is counted apart (see the bot), not as an
/// error; every rejected command still is. The subscriber, which only listens, must get
/// every message published before and after the move; one published while it moves (from
/// the reload to its new SUBSCRIBE, milliseconds) can be missed, and is counted apart.
#[test]
fn ioredis_bot_across_a_reload_from_standalone_to_cluster() {
    let run = run_cutover("iomove");
    let summary = &run.summary;
    let out = &summary.output;
    summary.assert_clean();
    assert!(summary.number("skippedBeforeCutover") > 0, "{out}");
    assert!(summary.ops_since(run.done_ms + 1000) > 100, "{out}");
    assert!(
        run.stream_on_old > 0 && run.stream_on_new > 0,
        "stream entries: {} on the old node, {} on the cluster\n{out}",
        run.stream_on_old,
        run.stream_on_new
    );
}

/// c. `new Redis.Cluster([{host, port: proxyPort}])`: the proxy describes a one-node cluster
/// whose node is itself, so the client stays on it, and multi-key commands across slots,
/// pipelines and pub/sub work. No cluster node ever sees a connection of the bot (its
/// connection name would show in their `CLIENT LIST`; the proxy keeps names to itself).
#[test]
fn ioredis_cluster_client_stays_on_the_proxy() {
    require_node();
    let prefix = "iocluster";
    let cluster = shared_cluster();
    let (proxy, _config) = start_proxy(&cluster_line(&cluster.seeds()), prefix);
    let bot = Bot::start(proxy.addr(), prefix, 5, Some(FLEET_USER), true);

    let started = Instant::now();
    let mut polls = 0;
    while started.elapsed() < Duration::from_secs(4) {
        for node in cluster.seeds() {
            let list: String = query(&node, redis::cmd("CLIENT").arg("LIST")).expect("CLIENT LIST");
            assert!(
                !list.contains("name=ioredis-bot"),
                "the bot connected to {node} directly:\n{list}"
            );
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(200));
    }

    let summary = bot.finish(&proxy);
    let out = &summary.output;
    summary.assert_clean();
    assert!(polls > 5, "CLIENT LIST was polled {polls} times");
    let seen: Vec<String> = summary
        .list("nodesSeen")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    assert_eq!(seen, [proxy.addr()], "nodes the cluster client used\n{out}");
    for kind in ["mset", "mget", "pipeline", "publish"] {
        assert!(summary.count(kind) > 0, "no {kind}\n{out}");
    }
}
