//! A Redis Sentinel group on loopback: one master, one replica and three Sentinels
//! (`redis-server sentinel.conf --sentinel`) that monitor it with quorum 2 and short
//! timeouts, so a failover takes seconds.
//!
//! Invariants: same hygiene as the other servers (free ports, own directories, killed on
//! drop); every wait is bounded and panics with what it waited for; the data nodes and the
//! Sentinels can have passwords of their own, so the proxy's two sets of credentials are
//! tested apart.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::node::{connect_through_stops, NodeMode, RedisNode};
use super::ports::free_port;
use super::process::{new_dir, remove_dir, require_tool, ManagedProcess};

/// How long the group may take to settle (replica in sync, Sentinels aware of each other).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Read/write timeout of the harness's connections to the group.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start a group.
#[derive(Debug, Clone, Default)]
pub struct GroupOptions {
    /// `requirepass` of the master and replica (the Sentinels get it as `auth-pass`).
    pub data_password: Option<String>,
    /// `requirepass` of the Sentinels (and `sentinel-pass` between them).
    pub sentinel_password: Option<String>,
}

/// One master, one replica, three Sentinels monitoring them as [`SentinelGroup::NAME`].
pub struct SentinelGroup {
    master: RedisNode,
    replica: RedisNode,
    sentinels: Vec<Sentinel>,
    options: GroupOptions,
}

impl SentinelGroup {
    /// The master name the Sentinels monitor.
    pub const NAME: &'static str = "ragmaster";

    /// Starts the group and waits until the replica is in sync and every Sentinel knows
    /// the replica and the two other Sentinels (so a failover can be asked for at once).
    pub fn start(options: GroupOptions) -> SentinelGroup {
        require_tool("redis-server");
        let master = RedisNode::start(NodeMode::Standalone);
        let replica = RedisNode::start(NodeMode::Standalone);
        if let Some(password) = &options.data_password {
            for node in [&master, &replica] {
                let mut con = data_connect(node.addr(), None);
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("masterauth")
                    .arg(password)
                    .query(&mut con)
                    .unwrap();
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("requirepass")
                    .arg(password)
                    .query(&mut con)
                    .unwrap();
            }
        }
        let (host, port) = master.addr().split_once(':').expect("host:port");
        let _: () = redis::cmd("REPLICAOF")
            .arg(host)
            .arg(port)
            .query(&mut data_connect(
                replica.addr(),
                options.data_password.as_deref(),
            ))
            .unwrap();
        let sentinels = (0..3)
            .map(|_| Sentinel::start(master.addr(), 2, 1000, &options))
            .collect();
        let group = SentinelGroup {
            master,
            replica,
            sentinels,
            options,
        };
        group.wait_settled();
        group
    }

    /// The master's address at start.
    pub fn master_addr(&self) -> &str {
        self.master.addr()
    }

    /// The replica's address at start (the master after a failover).
    pub fn replica_addr(&self) -> &str {
        self.replica.addr()
    }

    /// Every Sentinel's address, in start order.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.addr.clone()).collect()
    }

    /// The Sentinels as `--sentinel` takes them: `host:port,host:port,...`.
    pub fn sentinel_list(&self) -> String {
        self.sentinel_addrs().join(",")
    }

    /// Kills Sentinel `index` (SIGKILL).
    pub fn kill_sentinel(&mut self, index: usize) {
        self.sentinels[index].process.kill();
    }

    /// A connection to a data node, with the data password.
    pub fn data_connect(&self, addr: &str) -> redis::Connection {
        data_connect(addr, self.options.data_password.as_deref())
    }

    /// A connection to Sentinel `index`, with the Sentinel password.
    pub fn sentinel_connect(&self, index: usize) -> redis::Connection {
        data_connect(
            &self.sentinels[index].addr,
            self.options.sentinel_password.as_deref(),
        )
    }

    /// `SENTINEL FAILOVER` on the first Sentinel (a manual failover: no agreement needed).
    pub fn failover(&self) {
        let reply: String = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(Self::NAME)
            .query(&mut self.sentinel_connect(0))
            .unwrap_or_else(|e| panic!("SENTINEL FAILOVER refused: {e}"));
        assert_eq!(reply, "OK");
    }

    /// The master Sentinel `index` names now.
    pub fn named_master(&self, index: usize) -> String {
        let (ip, port): (String, String) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Self::NAME)
            .query(&mut self.sentinel_connect(index))
            .unwrap();
        format!("{ip}:{port}")
    }

    /// Waits until the data node at `addr` reports `role` (`master`, `slave`).
    pub fn wait_role(&self, addr: &str, role: &str) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.data_connect(addr))
                .unwrap();
            if info.lines().any(|l| l.trim() == format!("role:{role}")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{addr} never became {role}: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_settled(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.data_connect(self.replica.addr()))
                .unwrap();
            let synced = info.contains("master_link_status:up");
            let aware = (0..self.sentinels.len()).all(|i| self.sentinel_knows_all(i));
            if synced && aware {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel group did not settle in {SETTLE_TIMEOUT:?} (replica synced: \
                 {synced}); Sentinel log:\n{}",
                self.sentinels[0].log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether Sentinel `index` knows the replica (healthy) and the two other Sentinels.
    fn sentinel_knows_all(&self, index: usize) -> bool {
        let mut con = self.sentinel_connect(index);
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(Self::NAME)
            .query(&mut con)
            .unwrap_or_default();
        let replica_ok = replicas.iter().any(|fields| {
            let flags = fields
                .iter()
                .position(|f| f == "flags")
                .and_then(|i| fields.get(i + 1));
            flags.is_some_and(|f| f == "slave")
        });
        let others: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("SENTINELS")
            .arg(Self::NAME)
            .query(&mut con)
            .unwrap_or_default();
        replica_ok && others.len() == self.sentinels.len() - 1
    }
}

/// One `redis-server --sentinel` process.
pub struct Sentinel {
    addr: String,
    dir: PathBuf,
    process: ManagedProcess,
}

impl Sentinel {
    /// Starts a Sentinel that monitors `master` as [`SentinelGroup::NAME`] with `quorum`
    /// and `down_after_ms`, and waits until it answers PING.
    pub fn start(master: &str, quorum: u32, down_after_ms: u64, options: &GroupOptions) -> Self {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = new_dir(&format!("sentinel-{port}"));
            match spawn_sentinel(port, &dir, master, quorum, down_after_ms, options) {
                Ok(process) => {
                    return Sentinel {
                        addr: format!("127.0.0.1:{port}"),
                        dir,
                        process,
                    }
                }
                Err(e) => {
                    failures.push(format!("port {port}: {e}"));
                    remove_dir(&dir);
                }
            }
        }
        panic!(
            "redis-server --sentinel did not start:\n{}",
            failures.join("\n")
        );
    }

    /// "127.0.0.1:port".
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.process.kill();
        remove_dir(&self.dir);
    }
}

fn spawn_sentinel(
    port: u16,
    dir: &std::path::Path,
    master: &str,
    quorum: u32,
    down_after_ms: u64,
    options: &GroupOptions,
) -> Result<ManagedProcess, String> {
    let name = SentinelGroup::NAME;
    let (host, master_port) = master.split_once(':').expect("host:port");
    let mut conf = format!(
        "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {dir}/sentinel.log\n\
         sentinel monitor {name} {host} {master_port} {quorum}\n\
         sentinel down-after-milliseconds {name} {down_after_ms}\n\
         sentinel failover-timeout {name} 10000\n\
         sentinel parallel-syncs {name} 1\n",
        dir = dir.display()
    );
    if let Some(password) = &options.data_password {
        conf.push_str(&format!("sentinel auth-pass {name} {password}\n"));
    }
    if let Some(password) = &options.sentinel_password {
        conf.push_str(&format!(
            "requirepass {password}\nsentinel sentinel-pass {password}\n"
        ));
    }
    let path = dir.join("sentinel.conf");
    fs::write(&path, conf).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let mut command = Command::new("redis-server");
    command
        .current_dir(dir)
        .arg(&path)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut process = ManagedProcess::spawn(&mut command, dir)
        .map_err(|e| format!("cannot spawn redis-server --sentinel: {e}"))?;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = process.try_exit_status() {
            let log = fs::read_to_string(dir.join("sentinel.log")).unwrap_or_default();
            return Err(format!("sentinel exited ({status}); log:\n{log}"));
        }
        let client = client(&addr, options.sentinel_password.as_deref());
        if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            let own = format!("process_id:{}", process.pid());
            if let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut con) {
                if info.lines().any(|line| line.trim() == own) {
                    return Ok(process);
                }
                return Err(format!("port {port} is served by another process"));
            }
        }
        if Instant::now() >= deadline {
            return Err("sentinel did not answer in 15 s".into());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn client(addr: &str, password: Option<&str>) -> redis::Client {
    let url = match password {
        Some(password) => format!("redis://:{password}@{addr}/"),
        None => format!("redis://{addr}/"),
    };
    redis::Client::open(url).unwrap_or_else(|e| panic!("bad address {addr}: {e}"))
}

/// A blocking connection to `addr` that authenticates with `password`; its connect and
/// writes time out, its reads do not (see `node::try_connect`).
pub fn data_connect(addr: &str, password: Option<&str>) -> redis::Connection {
    let con = connect_through_stops(&client(addr, password), IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    con.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    con
}
