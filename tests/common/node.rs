//! One `redis-server` process on 127.0.0.1, in cluster mode or standalone, plus the blocking
//! connection helpers the harness drives nodes with.
//!
//! Invariants: a node has a fixed port and directory for its whole life, so a restarted cluster
//! node comes back with its `nodes.conf` and rejoins. Nothing is persisted (`--save ''`,
//! `--appendonly no`), so a restart of a standalone node starts empty. Every blocking call to a
//! node has a timeout, so a hung server fails a test instead of hanging it.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ports::{free_cluster_port, free_port};
use super::process::{new_dir, remove_dir, require_tool, ManagedProcess};

/// How long a freshly spawned server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How many fresh ports to try when another process grabbed the probed one first.
const START_ATTEMPTS: usize = 5;
/// Cluster node timeout unless a test asks for another: small, so failure detection and
/// failover take seconds.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 2000;
/// Connect and write timeout of the harness's own connections.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis::Client` for `addr` ("127.0.0.1:port").
pub fn redis_client(addr: &str) -> redis::Client {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap_or_else(|e| panic!("bad redis address {addr}: {e}"))
}

/// A blocking connection to `addr` whose connect and writes time out instead of hanging.
/// Its reads have no timeout: a read with a socket timeout fails with EINTR when the test
/// process is stopped and resumed (signal(7)), as a host pausing the machine does, where
/// one without is resumed by the kernel. A hung read ends the test binary at its hang
/// limit (see `process`).
pub fn try_connect(addr: &str, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    super::process::note_test();
    let con = connect_through_stops(&redis_client(addr), timeout)?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(con)
}

/// `client`'s connection within `timeout`, connected again when a stop of the test process
/// interrupted it: the handshake's reads have the connect timeout (see [`try_connect`]).
pub fn connect_through_stops(
    client: &redis::Client,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    loop {
        match client.get_connection_with_timeout(timeout) {
            Err(e) if interrupted(&e) => continue,
            connected => return connected,
        }
    }
}

/// Whether `error` is a read or write of this process interrupted by a stop and resume of
/// the process (EINTR on a socket with a timeout, see [`try_connect`]): nothing the peer did.
pub fn interrupted(error: &redis::RedisError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

/// Like [`try_connect`], panicking with the address on failure.
pub fn connect(addr: &str) -> redis::Connection {
    try_connect(addr, IO_TIMEOUT).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"))
}

/// Runs `cmd` on `addr` over a fresh blocking connection.
pub fn query<T: redis::FromRedisValue>(addr: &str, cmd: &redis::Cmd) -> Result<T, String> {
    let mut con = try_connect(addr, IO_TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
    cmd.query(&mut con).map_err(|e| format!("{addr}: {e}"))
}

/// Every key `SCAN ... MATCH pattern` lists on `con`, in the order returned (panics if the
/// cursor never comes back to 0 within 10,000 rounds).
pub fn scan_all(con: &mut redis::Connection, pattern: &str) -> Vec<String> {
    scan_with(con, &["MATCH", pattern])
}

/// Every name a full `SCAN` with the options `extra` lists on `con`, in the order returned,
/// repeats kept (panics if the cursor never comes back to 0 within 10,000 rounds).
pub fn scan_with(con: &mut redis::Connection, extra: &[&str]) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let (next, keys): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg(extra)
            .query(con)
            .unwrap();
        all.extend(keys);
        if next == "0" {
            return all;
        }
        cursor = next;
    }
    panic!("SCAN did not finish");
}

/// Which kind of server a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeMode {
    /// `--cluster-enabled yes`, with a cluster bus on port + 10000 and this
    /// `cluster-node-timeout`.
    Cluster { node_timeout_ms: u64 },
    /// A plain server.
    Standalone,
}

/// One redis-server process with its own port and directory.
pub struct RedisNode {
    port: u16,
    addr: String,
    dir: PathBuf,
    mode: NodeMode,
    process: Option<ManagedProcess>,
}

impl RedisNode {
    /// Starts a node on a free port and waits until it answers PING.
    pub fn start(mode: NodeMode) -> RedisNode {
        require_tool("redis-server");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = match mode {
                NodeMode::Cluster { .. } => free_cluster_port(),
                NodeMode::Standalone => free_port(),
            };
            let dir = new_dir(&format!("redis-{port}"));
            match spawn_server(port, &dir, mode) {
                Ok(process) => {
                    return RedisNode {
                        port,
                        addr: format!("127.0.0.1:{port}"),
                        dir,
                        mode,
                        process: Some(process),
                    };
                }
                Err(e) => {
                    failures.push(format!("port {port}: {e}"));
                    remove_dir(&dir);
                }
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    /// "127.0.0.1:port".
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the process is running (it may have been killed by the test).
    pub fn is_running(&mut self) -> bool {
        match self.process.as_mut() {
            Some(process) => process.try_exit_status().is_none(),
            None => false,
        }
    }

    /// Kills the server with SIGKILL; its directory stays for a restart.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the server: a stopped node keeps its
    /// connections open (the kernel still accepts and acknowledges) but answers nothing,
    /// like a hung process or a node behind a silent network.
    pub fn set_paused(&self, paused: bool) {
        let process = self.process.as_ref().expect("the node is running");
        process.send_signal(if paused { "STOP" } else { "CONT" });
    }

    /// Starts the server again on the same port and directory and waits for PING.
    pub fn restart(&mut self) {
        self.kill();
        match spawn_server(self.port, &self.dir, self.mode) {
            Ok(process) => self.process = Some(process),
            Err(e) => panic!("cannot restart redis-server on {}: {e}", self.addr),
        }
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
        remove_dir(&self.dir);
    }
}

fn spawn_server(
    port: u16,
    dir: &std::path::Path,
    mode: NodeMode,
) -> Result<ManagedProcess, String> {
    let log_path = dir.join("redis.log");
    let mut command = Command::new("redis-server");
    command
        .current_dir(dir)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--dir", &dir.display().to_string()])
        .args(["--logfile", &log_path.display().to_string()])
        .args(["--daemonize", "no"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--enable-debug-command", "yes"])
        // Replicas start syncing at once instead of waiting 5 s for more replicas to batch.
        .args(["--repl-diskless-sync-delay", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let NodeMode::Cluster { node_timeout_ms } = mode {
        command
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
            // A replica may always take over: tests kill masters right after writes.
            .args(["--cluster-replica-validity-factor", "0"]);
    }
    let mut process = ManagedProcess::spawn(&mut command, dir)
        .map_err(|e| format!("cannot spawn redis-server: {e}"))?;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = process.try_exit_status() {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("redis-server exited ({status}); log:\n{log}"));
        }
        if let Ok(mut con) = try_connect(&addr, Duration::from_millis(200)) {
            // The pid check rules out another test's server that took the port after the probe.
            if let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                let own = format!("process_id:{}", process.pid());
                if info.lines().any(|line| line.trim() == own) {
                    return Ok(process);
                }
                return Err(format!("port {port} is served by another process"));
            }
        }
        if Instant::now() >= deadline {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!(
                "redis-server did not answer PING within {START_TIMEOUT:?}; log:\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
