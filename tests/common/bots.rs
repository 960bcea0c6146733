//! The Node.js bots of `tests/node`, run as the fleets run them: the ioredis bot
//! (`ioredis_bot.js`, a [`Bot`] and its JSON [`Summary`]) and the node-redis legacy bot
//! (`legacy_bot.js`, a [`LegacyBot`]).
//!
//! Invariants: a missing `node` or package fails with the install command, it never skips; a
//! bot's stdout and stderr are drained on their own threads, so a chatty bot never blocks on a
//! full pipe; a bot still running at its timeout is killed and reported as such.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::proxy::Proxy;

/// Only guards against a hung ioredis bot: it stops itself after its `--seconds`.
const IOREDIS_GRACE: Duration = Duration::from_secs(60);
/// The legacy bot has its own 90 s limit; this one only guards against a hung `node`.
const LEGACY_TIMEOUT: Duration = Duration::from_secs(150);
/// The proxy's default retry budget is about 2.5 s; a pause in acknowledgements past it means
/// the bot stalled.
pub const MAX_STALL_MS: u64 = 3000;

/// The directory of the bots and their packages.
pub fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node")
}

/// Panics with the install hint unless `node` runs and the npm `package` is installed.
pub fn require_node(package: &str) {
    let version = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    assert!(
        version.as_ref().is_ok_and(|out| out.status.success()),
        "`node` was not found on PATH; this test runs a {package} client. Install Node.js \
         (Debian: sudo apt-get install -y nodejs npm), then: npm ci --prefix tests/node"
    );
    let manifest = node_dir().join(format!("node_modules/{package}/package.json"));
    assert!(
        manifest.is_file(),
        "{} is missing; install the bot's packages with: npm ci --prefix tests/node",
        manifest.display()
    );
}

/// A `node` process running one of the bots.
struct NodeProcess {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

/// How a bot process ended: its status (`None`: killed at the timeout) and its output.
struct Ended {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl NodeProcess {
    fn spawn(command: &mut Command) -> NodeProcess {
        let mut child = command
            .current_dir(node_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node: {e}"));
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
        NodeProcess {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for the exit, at most `timeout`, then kills it.
    fn wait(mut self, timeout: Duration) -> Ended {
        let deadline = Instant::now() + timeout;
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
        Ended {
            status,
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
        }
    }
}

/// How the ioredis bot logs in.
#[derive(Clone, Copy)]
pub enum Login<'a> {
    /// No AUTH at all.
    None,
    /// Legacy `AUTH password`.
    Password(&'a str),
    /// `AUTH user password` (an ACL user).
    User(&'a str, &'a str),
}

/// The ioredis bot as a running process.
pub struct Bot {
    process: NodeProcess,
    seconds: u32,
}

impl Bot {
    /// Starts the bot against `proxy` for `seconds` on keys under `prefix`; `cluster` makes
    /// every connection a `Redis.Cluster` seeded with the proxy.
    pub fn start(proxy: &str, prefix: &str, seconds: u32, login: Login, cluster: bool) -> Bot {
        require_node("ioredis");
        let (host, port) = proxy.rsplit_once(':').expect("host:port");
        let mut command = Command::new("node");
        command
            .arg(node_dir().join("ioredis_bot.js"))
            .args(["--host", host, "--port", port, "--prefix", prefix])
            .args(["--seconds", &seconds.to_string()]);
        match login {
            Login::None => &mut command,
            Login::Password(password) => command.args(["--password", password]),
            Login::User(user, password) => {
                command.args(["--username", user, "--password", password])
            }
        };
        if cluster {
            command.arg("--cluster");
        }
        Bot {
            process: NodeProcess::spawn(&mut command),
            seconds,
        }
    }

    /// Sends SIGUSR2: the first marks the start of a cutover, the second its end.
    pub fn signal_cutover(&self) {
        let status = Command::new("kill")
            .args(["-s", "USR2", &self.process.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s USR2 the bot");
    }

    /// Waits for the bot and returns its summary; panics with its output (and `proxies`'
    /// output) if it failed.
    pub fn finish(self, proxies: &[&Proxy]) -> Summary {
        let timeout = Duration::from_secs(u64::from(self.seconds)) + IOREDIS_GRACE;
        let ended = self.process.wait(timeout);
        let mut output = format!(
            "bot status {:?}\n--- bot stdout ---\n{}--- bot stderr ---\n{}",
            ended.status, ended.stdout, ended.stderr
        );
        for proxy in proxies {
            output.push_str(&format!("--- proxy output ---\n{}\n", proxy.output()));
        }
        let json = ended.stdout.lines().last().unwrap_or_default();
        match (ended.status, serde_json::from_str::<Value>(json)) {
            (Some(status), Ok(value)) if status.success() => Summary { value, output },
            _ => panic!("the ioredis bot did not finish with a summary\n{output}"),
        }
    }
}

/// The ioredis bot's JSON summary, with its whole output for failure messages.
pub struct Summary {
    /// The summary line, parsed.
    pub value: Value,
    /// The bot's and the proxies' output.
    pub output: String,
}

impl Summary {
    /// A numeric field; panics if it is not one.
    pub fn number(&self, field: &str) -> u64 {
        self.value[field]
            .as_u64()
            .unwrap_or_else(|| panic!("summary field {field} is not a number\n{}", self.output))
    }

    /// A list field; panics if it is not one.
    pub fn list(&self, field: &str) -> Vec<Value> {
        self.value[field]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("summary field {field} is not a list\n{}", self.output))
    }

    /// How many operations of `kind` were acknowledged.
    pub fn count(&self, kind: &str) -> u64 {
        self.value["counts"][kind].as_u64().unwrap_or(0)
    }

    /// Acknowledged operations in the 500 ms buckets that start at or after `since_ms`.
    pub fn ops_since(&self, since_ms: u64) -> u64 {
        self.ops_between(since_ms, u64::MAX)
    }

    /// Acknowledged operations in the 500 ms buckets that overlap `from_ms..=to_ms`.
    pub fn ops_between(&self, from_ms: u64, to_ms: u64) -> u64 {
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

    /// What every scenario without a killed proxy requires (see
    /// [`Summary::assert_clean_but_pubsub`]), and the subscriber got every message published
    /// outside a cutover's move.
    pub fn assert_clean(&self) {
        self.assert_clean_but_pubsub();
        self.assert_pubsub_complete();
    }

    /// Every published message was received once, but those published during a cutover.
    pub fn assert_pubsub_complete(&self) {
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

    /// Nothing surfaced or lost (see [`Summary::assert_nothing_surfaced_or_lost`]), no
    /// connection trouble at all, no stall past [`MAX_STALL_MS`].
    pub fn assert_clean_but_pubsub(&self) {
        self.assert_nothing_surfaced_or_lost(MAX_STALL_MS);
        let out = &self.output;
        assert!(self.list("errorEvents").is_empty(), "errorEvents\n{out}");
        for field in ["reconnectAttempts", "reconnectOnError"] {
            assert_eq!(self.number(field), 0, "{field}\n{out}");
        }
    }

    /// No surfaced error, and what [`Summary::assert_nothing_lost`] checks.
    pub fn assert_nothing_surfaced_or_lost(&self, max_stall_ms: u64) {
        let out = &self.output;
        assert_eq!(self.number("surfacedCount"), 0, "surfacedCount\n{out}");
        self.assert_nothing_lost(max_stall_ms);
    }

    /// No acknowledged write lost, something verified, no pause in acknowledgements of
    /// `max_stall_ms` or more, every kind of work acknowledged.
    pub fn assert_nothing_lost(&self, max_stall_ms: u64) {
        let out = &self.output;
        assert_eq!(self.number("lostCount"), 0, "lostCount\n{out}");
        assert!(self.number("verified") > 0, "nothing was verified\n{out}");
        assert!(
            self.number("maxGapMs") < max_stall_ms,
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

/// The node-redis legacy bot as a running process (its own connections have no reconnect:
/// a lost connection fails it).
pub struct LegacyBot {
    process: NodeProcess,
}

impl LegacyBot {
    /// Starts the bot on prefix `mybot` through `proxy` (a proxy with the cluster:v1 layout
    /// for `mybot`), checking the cluster's `masters` directly at the end.
    pub fn start(proxy: &str, masters: &[String]) -> LegacyBot {
        require_node("redis");
        let mut command = Command::new("node");
        command
            .arg(node_dir().join("legacy_bot.js"))
            .arg(proxy)
            .args(masters);
        LegacyBot {
            process: NodeProcess::spawn(&mut command),
        }
    }

    /// Waits for the bot: whether it exited 0, and its output.
    pub fn finish(self) -> (bool, String) {
        let ended = self.process.wait(LEGACY_TIMEOUT);
        let output = format!(
            "--- bot stdout ---\n{}--- bot stderr ---\n{}",
            ended.stdout, ended.stderr
        );
        match ended.status {
            Some(status) => (
                status.success(),
                format!("bot exited with {status}\n{output}"),
            ),
            None => (
                false,
                format!("bot killed after {LEGACY_TIMEOUT:?} without exiting\n{output}"),
            ),
        }
    }
}
