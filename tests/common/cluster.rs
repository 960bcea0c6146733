//! A real Redis Cluster of `redis-server` processes on loopback, and the operations tests need
//! to do to it for real: slot migration (whole or held half-way), a master added, manual
//! failover, kill and restart of a node.
//!
//! Invariants: `Cluster::start` returns only once every node reports `cluster_state:ok`, all
//! nodes agree on slot owners and roles, and every replica's link to its master is up; each
//! operation that changes the topology waits for the same condition before returning (except
//! `kill_node`, whose aftermath is what a test wants to observe; call `wait_stable` after it).
//! Every wait is bounded and its panic message says what was last seen. Dropping the cluster
//! kills every node and removes its directory.

use std::collections::BTreeSet;
use std::fs;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::layout::{layout_of, parse_cluster_nodes, ClusterLayout, Role, SLOT_COUNT};
use super::node::{query, NodeMode, RedisNode, CLUSTER_NODE_TIMEOUT_MS};
use super::process::{new_dir, remove_dir, require_tool, ManagedProcess};

/// Bound on every wait for the cluster to settle; generous because the machine may be busy.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Keys moved per MIGRATE call.
const MIGRATE_BATCH: usize = 100;
/// MIGRATE's own timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 10_000;

/// A running Redis Cluster; see the module docs.
pub struct Cluster {
    nodes: Mutex<Vec<RedisNode>>,
    /// `cluster-node-timeout` of every node, also of nodes added later.
    node_timeout_ms: u64,
}

impl Cluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each, all slots assigned
    /// evenly, and waits until the cluster is stable.
    pub fn start(masters: usize, replicas_per_master: usize) -> Cluster {
        Cluster::start_with_node_timeout(
            masters,
            replicas_per_master,
            Duration::from_millis(CLUSTER_NODE_TIMEOUT_MS),
        )
    }

    /// Like [`Cluster::start`], with `node_timeout` as every node's `cluster-node-timeout`:
    /// shorter for a quicker failover after a kill, longer to stop a node for seconds
    /// without its replica taking over.
    pub fn start_with_node_timeout(
        masters: usize,
        replicas_per_master: usize,
        node_timeout: Duration,
    ) -> Cluster {
        assert!(masters >= 1, "a cluster needs at least one master");
        require_tool("redis-server");
        require_tool("redis-cli");
        let node_timeout_ms = u64::try_from(node_timeout.as_millis()).unwrap_or(u64::MAX);
        let mode = NodeMode::Cluster { node_timeout_ms };
        let total = masters * (1 + replicas_per_master);
        let cluster = Cluster {
            nodes: Mutex::new((0..total).map(|_| RedisNode::start(mode)).collect()),
            node_timeout_ms,
        };
        let addrs = cluster.seeds();
        if masters >= 3 {
            create_with_redis_cli(&addrs, replicas_per_master);
        } else {
            // redis-cli refuses clusters of fewer than three masters.
            create_by_hand(&addrs, masters);
        }
        cluster.wait_for(
            "every master to have its replicas",
            SETTLE_TIMEOUT,
            |layout| {
                let found = layout.masters();
                if found.len() != masters {
                    return Err(format!("{} masters, want {masters}", found.len()));
                }
                for master in &found {
                    let replicas = layout.replicas_of(master).len();
                    if replicas != replicas_per_master {
                        return Err(format!("{master} has {replicas} replicas"));
                    }
                }
                Ok(())
            },
        );
        cluster
    }

    /// Every node's `cluster-node-timeout`.
    pub fn node_timeout(&self) -> Duration {
        Duration::from_millis(self.node_timeout_ms)
    }

    /// Every node's address ("127.0.0.1:port"), live or not, in start order.
    pub fn seeds(&self) -> Vec<String> {
        self.lock().iter().map(|n| n.addr().to_string()).collect()
    }

    /// The seeds joined with commas, as the proxy's `--cluster` flag takes them.
    pub fn seeds_arg(&self) -> String {
        self.seeds().join(",")
    }

    /// Current masters (live nodes only), in address order.
    pub fn masters(&self) -> Vec<String> {
        self.layout().masters()
    }

    /// Connections on every master whose CLIENT LIST line holds each of `fragments`
    /// (` cmd=blmove `, ` flags=b `...): what the proxy runs on them.
    pub fn connections_on_masters(&self, fragments: &[&str]) -> usize {
        self.masters()
            .iter()
            .map(|node| {
                let list: String = query(node, redis::cmd("CLIENT").arg("LIST")).unwrap();
                list.lines()
                    .filter(|line| fragments.iter().all(|f| line.contains(f)))
                    .count()
            })
            .sum()
    }

    /// Current replicas (live nodes only), in address order.
    pub fn replicas(&self) -> Vec<String> {
        self.layout().replicas()
    }

    /// Current replicas of `master`.
    pub fn replicas_of(&self, master: &str) -> Vec<String> {
        self.layout().replicas_of(master)
    }

    /// The master that owns `slot` now.
    pub fn node_for_slot(&self, slot: u16) -> String {
        let layout = self.layout();
        match layout.owner_of(slot) {
            Some(owner) => owner.to_string(),
            None => panic!("slot {slot} has no owner in {layout:?}"),
        }
    }

    /// The hash slot of `key`, as the server computes it (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let addr = self.any_live_node();
        let slot: i64 = query(&addr, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key}: {e}"));
        u16::try_from(slot).unwrap_or_else(|_| panic!("CLUSTER KEYSLOT returned {slot}"))
    }

    /// Three keys named `{prefix}:n`, each served by a different master.
    pub fn keys_on_three_masters(&self, prefix: &str) -> [String; 3] {
        let mut keys: Vec<String> = Vec::new();
        let mut owners: Vec<String> = Vec::new();
        for i in 0..500 {
            let key = format!("{prefix}:{i}");
            let owner = self.node_for_slot(self.keyslot(&key));
            if !owners.contains(&owner) {
                owners.push(owner);
                keys.push(key);
            }
            if let [a, b, c] = keys.as_slice() {
                return [a.clone(), b.clone(), c.clone()];
            }
        }
        panic!("no three keys named {prefix}:n on three masters");
    }

    /// The cluster node id of the node at `addr`.
    pub fn node_id(&self, addr: &str) -> String {
        query(addr, redis::cmd("CLUSTER").arg("MYID"))
            .unwrap_or_else(|e| panic!("CLUSTER MYID: {e}"))
    }

    /// The layout as one live node sees it now (no waiting; see [`Cluster::wait_stable`]).
    pub fn layout(&self) -> ClusterLayout {
        let live = self.live_addrs();
        let addr = live
            .iter()
            .next()
            .unwrap_or_else(|| panic!("no live cluster node"))
            .clone();
        let text: String = query(&addr, redis::cmd("CLUSTER").arg("NODES"))
            .unwrap_or_else(|e| panic!("CLUSTER NODES: {e}"));
        parse_cluster_nodes(&text)
            .and_then(|lines| layout_of(&lines, &live))
            .unwrap_or_else(|e| panic!("{addr}: {e}"))
    }

    /// Waits until the cluster is stable (see the module docs) and returns the agreed layout.
    pub fn wait_stable(&self) -> ClusterLayout {
        self.wait_for("the cluster to be stable", SETTLE_TIMEOUT, |_| Ok(()))
    }

    /// Starts a new node and joins it to the cluster as a master without slots (`CLUSTER
    /// MEET`, as `redis-cli --cluster add-node` does); waits until every node agrees on it.
    /// Returns its address.
    pub fn add_master(&self) -> String {
        let node = RedisNode::start(self.node_mode());
        let addr = node.addr().to_string();
        let seed = self.any_live_node();
        let (host, port) = seed
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{seed} is not host:port"));
        run_ok(&addr, redis::cmd("CLUSTER").arg("MEET").arg(host).arg(port));
        self.lock().push(node);
        self.wait_for(
            &format!("{addr} to join as a master"),
            SETTLE_TIMEOUT,
            |layout| match layout.roles.get(&addr) {
                Some(Role::Master) => Ok(()),
                other => Err(format!("role is {other:?}")),
            },
        );
        addr
    }

    /// Starts a cluster-mode node that is not part of the cluster yet (for `redis-cli
    /// --cluster add-node`); it is the cluster's to stop. Returns its address. Until it has
    /// joined, [`Cluster::wait_stable`] waits for it.
    pub fn start_spare_node(&self) -> String {
        let node = RedisNode::start(self.node_mode());
        let addr = node.addr().to_string();
        self.lock().push(node);
        addr
    }

    fn node_mode(&self) -> NodeMode {
        NodeMode::Cluster {
            node_timeout_ms: self.node_timeout_ms,
        }
    }

    /// Moves `slot` with its keys to the master at `to_addr`, the way an operator does by hand.
    pub fn migrate_slot(&self, slot: u16, to_addr: &str) {
        self.begin_migration(slot, to_addr);
        self.migrate_keys(slot, to_addr, usize::MAX);
        self.finish_migration(slot, to_addr);
    }

    /// First step of a move: the target imports `slot`, the owner marks it migrating. From now
    /// on the owner answers `-ASK` for keys of the slot it no longer has.
    pub fn begin_migration(&self, slot: u16, to_addr: &str) {
        let from = self.node_for_slot(slot);
        assert_ne!(from, to_addr, "slot {slot} is already owned by {to_addr}");
        let from_id = self.node_id(&from);
        let to_id = self.node_id(to_addr);
        // Importing first: the target must accept ASKING before the source starts redirecting.
        run_ok(
            to_addr,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&from_id),
        );
        run_ok(
            &from,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&to_id),
        );
    }

    /// Second step: moves up to `max_keys` keys of `slot` from its owner to `to_addr` with
    /// MIGRATE, in batches. Returns how many keys were moved (0 once the owner has none left).
    pub fn migrate_keys(&self, slot: u16, to_addr: &str, max_keys: usize) -> usize {
        let from = self.node_for_slot(slot);
        let (host, port) = to_addr
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("address without port: {to_addr}"));
        let mut moved = 0;
        while moved < max_keys {
            let batch = MIGRATE_BATCH.min(max_keys - moved);
            let keys: Vec<Vec<u8>> = query(
                &from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            )
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot}: {e}"));
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg(host)
                .arg(port)
                .arg("")
                .arg(0)
                .arg(MIGRATE_TIMEOUT_MS)
                .arg("KEYS")
                .arg(&keys);
            run_ok(&from, &migrate);
            moved += keys.len();
        }
        moved
    }

    /// Last step: assigns `slot` to `to_addr` on the target, the source, then every other
    /// master, and waits until every node agrees. The source must hold no key of the slot.
    pub fn finish_migration(&self, slot: u16, to_addr: &str) {
        let from = self.node_for_slot(slot);
        let left: i64 = query(
            &from,
            redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
        )
        .unwrap_or_else(|e| panic!("CLUSTER COUNTKEYSINSLOT: {e}"));
        assert_eq!(
            left, 0,
            "{from} still holds {left} keys of slot {slot}; migrate them first"
        );
        let to_id = self.node_id(to_addr);
        let mut order = vec![to_addr.to_string(), from.clone()];
        order.extend(
            self.masters()
                .into_iter()
                .filter(|m| *m != from && m != to_addr),
        );
        for addr in &order {
            run_ok(
                addr,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id),
            );
        }
        self.wait_for(
            &format!("slot {slot} to be owned by {to_addr}"),
            SETTLE_TIMEOUT,
            |layout| match layout.owner_of(slot) {
                Some(owner) if owner == to_addr => Ok(()),
                other => Err(format!("owner is {other:?}")),
            },
        );
    }

    /// Promotes the replica at `replica_addr` with `CLUSTER FAILOVER` (its master agrees, no
    /// write is lost) and waits until it is master and the cluster is stable.
    pub fn failover(&self, replica_addr: &str) {
        let layout = self.wait_stable();
        match layout.roles.get(replica_addr) {
            Some(Role::ReplicaOf(_)) => {}
            other => panic!("{replica_addr} is not a live replica (role {other:?})"),
        }
        run_ok(replica_addr, redis::cmd("CLUSTER").arg("FAILOVER"));
        self.wait_for(
            &format!("{replica_addr} to become master"),
            SETTLE_TIMEOUT,
            |layout| match layout.roles.get(replica_addr) {
                Some(Role::Master) => Ok(()),
                other => Err(format!("role is {other:?}")),
            },
        );
    }

    /// Kills the node at `addr` with SIGKILL. Does not wait: call [`Cluster::wait_stable`] to
    /// wait for its replica to take over.
    pub fn kill_node(&self, addr: &str) {
        self.with_node(addr, RedisNode::kill);
    }

    /// Stops or continues the node at `addr` (see [`RedisNode::set_paused`]). Keep pauses
    /// well under the cluster's node timeout, or the others mark it failing.
    pub fn set_node_paused(&self, addr: &str, paused: bool) {
        self.with_node(addr, |node| node.set_paused(paused));
    }

    /// Restarts a killed node on its old port and config, and waits until the cluster is
    /// stable again (an old master comes back as a replica of the node that replaced it).
    pub fn restart_node(&self, addr: &str) {
        self.with_node(addr, RedisNode::restart);
        self.wait_stable();
    }

    fn with_node(&self, addr: &str, action: impl FnOnce(&mut RedisNode)) {
        let mut nodes = self.lock();
        match nodes.iter_mut().find(|n| n.addr() == addr) {
            Some(node) => action(node),
            None => panic!("{addr} is not a node of this cluster"),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<RedisNode>> {
        // A panic elsewhere while holding the lock leaves the node list itself intact.
        self.nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn live_addrs(&self) -> BTreeSet<String> {
        self.lock()
            .iter_mut()
            .filter_map(|n| n.is_running().then(|| n.addr().to_string()))
            .collect()
    }

    fn any_live_node(&self) -> String {
        self.live_addrs()
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no live cluster node"))
    }

    /// Waits until the cluster is stable and `condition` holds on the agreed layout.
    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        condition: impl Fn(&ClusterLayout) -> Result<(), String>,
    ) -> ClusterLayout {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.check_stable() {
                Ok(layout) => match condition(&layout) {
                    Ok(()) => return layout,
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn check_stable(&self) -> Result<ClusterLayout, String> {
        let live = self.live_addrs();
        let mut agreed: Option<(String, ClusterLayout)> = None;
        for addr in &live {
            let info: String = query(addr, redis::cmd("CLUSTER").arg("INFO"))?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Err(format!("{addr} does not report cluster_state:ok"));
            }
            let text: String = query(addr, redis::cmd("CLUSTER").arg("NODES"))?;
            let layout = parse_cluster_nodes(&text)
                .and_then(|lines| layout_of(&lines, &live))
                .map_err(|e| format!("{addr} {e}"))?;
            layout
                .check_full_coverage()
                .map_err(|e| format!("{addr} sees {e}"))?;
            match &agreed {
                None => agreed = Some((addr.clone(), layout)),
                Some((first, seen)) if *seen != layout => {
                    return Err(format!(
                        "{first} and {addr} disagree: {seen:?} vs {layout:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        let (_, layout) = agreed.ok_or_else(|| "no live cluster node".to_string())?;
        for replica in layout.replicas() {
            let info: String = query(&replica, redis::cmd("INFO").arg("replication"))?;
            if !info.lines().any(|l| l.trim() == "master_link_status:up") {
                return Err(format!("{replica}'s link to its master is not up"));
            }
        }
        Ok(layout)
    }
}

/// Runs `cmd` on `addr`, panicking with the command's error.
fn run_ok(addr: &str, cmd: &redis::Cmd) {
    if let Err(e) = query::<redis::Value>(addr, cmd) {
        panic!("`{}` failed: {e}", describe(cmd));
    }
}

/// The command as text, for panic messages.
fn describe(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            redis::Arg::Cursor => "<cursor>".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn create_with_redis_cli(addrs: &[String], replicas_per_master: usize) {
    let mut args = vec!["--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    let replicas = replicas_per_master.to_string();
    args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    if let Err(e) = run_redis_cli(&args, SETTLE_TIMEOUT) {
        panic!("{e}");
    }
}

/// Runs `redis-cli args...` and returns what it printed (stdout and stderr), or an error
/// saying how it failed (exit status, or still running after `timeout`) with that output.
pub fn run_redis_cli(args: &[&str], timeout: Duration) -> Result<String, String> {
    let dir = new_dir("redis-cli");
    let output_path = dir.join("output.log");
    let output = fs::File::create(&output_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", output_path.display()));
    let stderr = output
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot clone file handle: {e}"));
    let mut command = Command::new("redis-cli");
    command
        .args(args)
        .stdout(Stdio::from(output))
        .stderr(Stdio::from(stderr));
    let mut process = ManagedProcess::spawn(&mut command, &dir)
        .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
    let status = process.wait_exit(timeout);
    process.kill();
    let log = fs::read_to_string(&output_path).unwrap_or_default();
    remove_dir(&dir);
    let shown = args.join(" ");
    match status {
        Some(status) if status.success() => Ok(log),
        Some(status) => Err(format!("redis-cli {shown} failed ({status}):\n{log}")),
        None => Err(format!(
            "redis-cli {shown} did not finish in {timeout:?}:\n{log}"
        )),
    }
}

/// Builds the cluster with plain CLUSTER commands: the first `masters` nodes share the slots,
/// the rest replicate them in turn.
fn create_by_hand(addrs: &[String], masters: usize) {
    let cluster_cmd = |addr: &str, args: &[String]| {
        let mut cmd = redis::cmd("CLUSTER");
        for arg in args {
            cmd.arg(arg);
        }
        run_ok(addr, &cmd);
    };
    let slots = SLOT_COUNT as usize;
    for (i, addr) in addrs.iter().enumerate() {
        // Distinct epochs up front, so no epoch collision has to be resolved after MEET.
        cluster_cmd(addr, &["SET-CONFIG-EPOCH".into(), (i + 1).to_string()]);
        if i < masters {
            let start = i * slots / masters;
            let end = (i + 1) * slots / masters - 1;
            cluster_cmd(
                addr,
                &["ADDSLOTSRANGE".into(), start.to_string(), end.to_string()],
            );
        }
    }
    for addr in &addrs[1..] {
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
        cluster_cmd(&addrs[0], &["MEET".into(), host.into(), port.into()]);
    }
    let ids: Vec<String> = addrs
        .iter()
        .map(|a| query(a, redis::cmd("CLUSTER").arg("MYID")).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    for addr in addrs {
        loop {
            let known = query::<String>(addr, redis::cmd("CLUSTER").arg("NODES"))
                .and_then(|text| parse_cluster_nodes(&text))
                .map(|lines| {
                    ids.iter().all(|id| {
                        lines
                            .iter()
                            .any(|l| &l.id == id && !l.flags.iter().any(|f| f == "handshake"))
                    })
                })
                .unwrap_or(false);
            if known {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{addr} did not learn every node in {SETTLE_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for (i, addr) in addrs.iter().enumerate().skip(masters) {
        let master_id = &ids[(i - masters) % masters];
        cluster_cmd(addr, &["REPLICATE".into(), master_id.clone()]);
    }
}
