//! The fault suite: one fault at a time, done for real to a cluster of 3 masters with one
//! replica each, while 20 clients run through the proxy (see `faults/workload.rs`: each
//! client owns its keys, writes increasing tokens with SET, INCR and RPUSH, reads them back,
//! and keeps every acknowledged write and every error with its time). Each test owns its
//! cluster and proxy; the tests run one at a time so that their timings hold on a busy
//! machine.
//!
//! The faults: a coordinated `CLUSTER FAILOVER`; `kill -9` of a master; `redis-cli --cluster
//! reshard` of 1,000 slots; `redis-cli --cluster add-node` of a fourth master then
//! `rebalance --cluster-use-empty-masters`; `SIGSTOP` of a master for 5 s under
//! `backend.read_timeout_ms=1000`; a proxy restart (SIGTERM drain, a new proxy on the same
//! port).
//!
//! Every scenario asserts that no client saw a value its own writes do not explain and, at
//! the end, reads every key from its master to find acknowledged writes that are gone. None
//! may be lost, except after `kill -9`, where asynchronous replication loses what the
//! replica had not received yet: those are counted, printed, and must have been acked less
//! than a second before the kill, on the killed master. Errors: none during failover,
//! reshard and scale-out; only around the fault otherwise, each of the kind the fault
//! explains (see each test). Every wait is bounded and fails saying what did not happen.
//!
//! The short versions always run (about 70 s for the six, most of it cluster start-up and
//! redis-cli's rebalance). `SLOTBRIDGE_LONG_FAULTS=1 cargo test --test faults` runs the
//! longer ones: 50 clients without pauses, 5 s of load before and after, each fault three
//! times (a killed master is restarted, as a replica, before the next kill).

mod common;
#[path = "faults/workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{run_redis_cli, Cluster, ClusterLayout, Proxy};
use slotbridge::route::key_slot;
use workload::{ClientLog, ErrorEvent, Load, LoadShape, Loss, SLOW_OP};

/// The variable that selects the long versions.
const LONG_FAULTS_VAR: &str = "SLOTBRIDGE_LONG_FAULTS";
/// Node timeout of the kill scenario's cluster: short, so the replica takes over soon.
const KILL_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long a loss after `kill -9` may have been acked before the kill: the replica's lag.
const LOSS_WINDOW: Duration = Duration::from_secs(1);
/// Longest any redis-cli --cluster operation may take.
const REDIS_CLI_TIMEOUT: Duration = Duration::from_secs(120);
/// The read timeout the SIGSTOP scenario gives the proxy.
const READ_TIMEOUT_MS: u64 = 1000;
/// How long the SIGSTOP scenario keeps the master stopped.
const PAUSE: Duration = Duration::from_secs(5);
/// Node timeout of the SIGSTOP scenario's cluster: longer than the pause, so the replica
/// does not take over and what is tested is the proxy's read timeout.
const PAUSE_NODE_TIMEOUT: Duration = Duration::from_secs(15);
/// How long after the fault ends writes on every master must work again (except after a
/// kill, whose bound is the node timeout plus 2 s).
const RECOVERY: Duration = Duration::from_secs(3);
/// Longest wait for anything that is expected to happen; past it, the test fails.
const GIVE_UP: Duration = Duration::from_secs(30);

/// The size of a run: short by default, long with `SLOTBRIDGE_LONG_FAULTS=1`.
struct Profile {
    load: LoadShape,
    before: Duration,
    after: Duration,
    rounds: usize,
}

fn profile() -> Profile {
    if std::env::var(LONG_FAULTS_VAR).is_ok_and(|v| v == "1") {
        Profile {
            load: LoadShape {
                clients: 50,
                op_pause: Duration::ZERO,
            },
            before: Duration::from_secs(5),
            after: Duration::from_secs(5),
            rounds: 3,
        }
    } else {
        Profile {
            load: LoadShape {
                clients: 20,
                op_pause: Duration::from_millis(2),
            },
            before: Duration::from_millis(1500),
            after: Duration::from_millis(1500),
            rounds: 1,
        }
    }
}

/// Holds the other scenarios off: their timing assertions need the machine's cores.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A span of time during a run, since the load started.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: Duration,
    end: Duration,
}

impl Window {
    /// Whether a request that ran from `started` to `ended` overlaps the window.
    fn overlaps(&self, started: Duration, ended: Duration) -> bool {
        ended >= self.start && started <= self.end
    }

    fn contains(&self, at: Duration) -> bool {
        self.start <= at && at <= self.end
    }
}

/// What a finished run found, all clients together.
struct Report {
    name: &'static str,
    logs: Vec<ClientLog>,
    losses: Vec<Loss>,
    wrong: Vec<String>,
    errors: Vec<ErrorEvent>,
}

/// Stops the load, reads every key from the master that owns it now, and gathers the
/// clients' findings.
fn finish(name: &'static str, load: Load, cluster: &Cluster) -> Report {
    let now = load.now();
    let mut logs = load.stop();
    let layout = cluster.wait_stable();
    let mut by_owner: BTreeMap<String, Vec<(usize, String, workload::Kind)>> = BTreeMap::new();
    for (i, log) in logs.iter().enumerate() {
        for model in &log.keys {
            let owner = owner_of(&layout, &model.key);
            by_owner
                .entry(owner)
                .or_default()
                .push((i, model.key.clone(), model.kind));
        }
    }
    for (owner, keys) in by_owner {
        let mut pipe = redis::pipe();
        for (_, key, kind) in &keys {
            match kind {
                workload::Kind::List => pipe.cmd("LRANGE").arg(key).arg(0).arg(-1),
                _ => pipe.cmd("GET").arg(key),
            };
        }
        let mut con = common::connect(&owner);
        let states: Vec<redis::Value> = pipe
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{name}: reading the final state from {owner}: {e}"));
        for ((i, key, _), state) in keys.iter().zip(&states) {
            logs[*i].check_final(key, state, now);
        }
    }
    let mut losses: Vec<Loss> = logs.iter().flat_map(|l| l.losses.clone()).collect();
    losses.sort();
    losses.dedup();
    let wrong = logs.iter().flat_map(|l| l.wrong.clone()).collect();
    let mut errors: Vec<ErrorEvent> = logs.iter().flat_map(|l| l.errors.clone()).collect();
    errors.sort_by_key(|e| e.started);
    let report = Report {
        name,
        logs,
        losses,
        wrong,
        errors,
    };
    report.print();
    report
}

impl Report {
    fn print(&self) {
        let acked: usize = self.logs.iter().map(|l| l.ack_times.len()).sum();
        println!(
            "{}: {} clients, {acked} acked writes, {} errors, {} lost, {} wrong",
            self.name,
            self.logs.len(),
            self.errors.len(),
            self.losses.len(),
            self.wrong.len()
        );
        let mut by_op: BTreeMap<&str, usize> = BTreeMap::new();
        for error in &self.errors {
            *by_op.entry(error.op).or_default() += 1;
        }
        println!("  errors by command: {by_op:?}");
        for error in self.errors.iter().take(10) {
            println!("  error: {error:?}");
        }
        for loss in self.losses.iter().take(10) {
            println!("  lost: {loss:?}");
        }
    }

    fn assert_no_wrong_value(&self) {
        assert!(
            self.wrong.is_empty(),
            "{}: {} replies no write of their client explains, e.g. {:?}",
            self.name,
            self.wrong.len(),
            &self.wrong[..self.wrong.len().min(5)]
        );
    }

    fn assert_nothing_lost(&self) {
        assert!(
            self.losses.is_empty(),
            "{}: {} acknowledged writes are gone, e.g. {:?}",
            self.name,
            self.losses.len(),
            &self.losses[..self.losses.len().min(5)]
        );
    }

    fn assert_no_error(&self) {
        assert!(
            self.errors.is_empty(),
            "{}: clients saw {} errors, e.g. {:?}",
            self.name,
            self.errors.len(),
            &self.errors[..self.errors.len().min(5)]
        );
    }

    /// Every error overlaps one of `windows` and passes `explained` (which says why not).
    fn assert_errors_only(
        &self,
        windows: &[Window],
        explained: impl Fn(&ErrorEvent) -> Result<(), String>,
    ) {
        for error in &self.errors {
            assert!(
                windows
                    .iter()
                    .any(|w| w.overlaps(error.started, error.ended)),
                "{}: an error outside the fault windows {windows:?}: {error:?}",
                self.name
            );
            if let Err(why) = explained(error) {
                panic!("{}: {why}: {error:?}", self.name);
            }
        }
    }

    /// Every client had a write acked after `at`: it carried on after the fault.
    fn assert_every_client_carried_on(&self, at: Duration) {
        for log in &self.logs {
            assert!(
                log.ack_times.iter().any(|t| *t > at),
                "{}: client {} had no write acked after {at:?} (its last errors: {:?})",
                self.name,
                log.client,
                &log.errors[log.errors.len().saturating_sub(3)..]
            );
        }
    }
}

fn owner_of(layout: &ClusterLayout, key: &str) -> String {
    let slot = key_slot(key.as_bytes());
    layout
        .owner_of(slot)
        .unwrap_or_else(|| panic!("slot {slot} has no owner in {layout:?}"))
        .to_string()
}

/// One key per master of `layout`, to check that writes work everywhere.
fn probe_keys(layout: &ClusterLayout) -> Vec<String> {
    layout
        .masters()
        .iter()
        .filter(|master| layout.slots.iter().any(|r| &r.owner == *master))
        .map(|master| {
            (0..)
                .map(|i| format!("probe:{i}"))
                .find(|key| owner_of(layout, key) == *master)
                .expect("a key on every master")
        })
        .collect()
}

/// Writes each of `keys` through the proxy at `addr` until one round of them all succeeds;
/// returns when that was (`load`'s clock), or `None` after [`GIVE_UP`].
fn writes_work_everywhere(addr: &str, keys: &[String], load: &Load) -> Option<Duration> {
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        let round_ok = common::try_connect(addr, Duration::from_secs(1)).is_ok_and(|mut con| {
            keys.iter().all(|key| {
                redis::cmd("SET")
                    .arg(key)
                    .arg("probe")
                    .query::<()>(&mut con)
                    .is_ok()
            })
        });
        if round_ok {
            return Some(load.now());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// When the replica at `addr` reports itself master (`load`'s clock), or `None` after
/// [`GIVE_UP`].
fn promoted_at(addr: &str, load: &Load) -> Option<Duration> {
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        let role = common::query::<Vec<redis::Value>>(addr, &redis::cmd("ROLE"));
        if let Ok(role) = role {
            if role.first() == Some(&redis::Value::BulkString(b"master".to_vec())) {
                return Some(load.now());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn slots_of(layout: &ClusterLayout, master: &str) -> u32 {
    layout
        .slots
        .iter()
        .filter(|r| r.owner == master)
        .map(|r| u32::from(r.end) - u32::from(r.start) + 1)
        .sum()
}

#[test]
fn coordinated_failover_shows_clients_nothing() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start(3, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let load = Load::start(proxy.addr(), profile.load);
    load.run_for(profile.before);
    let mut last_end = Duration::ZERO;
    for round in 0..profile.rounds {
        let masters = cluster.masters();
        let master = &masters[round % masters.len()];
        let replica = cluster.replicas_of(master).into_iter().next();
        let replica = replica.unwrap_or_else(|| panic!("{master} has no replica"));
        cluster.failover(&replica);
        last_end = load.now();
        load.run_for(profile.after);
    }
    let report = finish("failover", load, &cluster);
    report.assert_no_wrong_value();
    report.assert_nothing_lost();
    report.assert_no_error();
    report.assert_every_client_carried_on(last_end);
}

#[test]
fn kill_9_of_a_master_loses_only_the_replication_lag() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start_with_node_timeout(3, 1, KILL_NODE_TIMEOUT);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let layout = cluster.wait_stable();
    let probes = probe_keys(&layout);
    let recovery_bound = cluster.node_timeout() + Duration::from_secs(2);
    let load = Load::start(proxy.addr(), profile.load);
    load.run_for(profile.before);
    // Per kill: the killed master, the window in which errors may occur, and the kill time.
    let mut kills: Vec<(String, ClusterLayout, Window)> = Vec::new();
    for round in 0..profile.rounds {
        if let Some((killed, _, _)) = kills.last() {
            // It comes back as a replica of the node that replaced it.
            cluster.restart_node(killed);
        }
        let before = cluster.wait_stable();
        let victim = owner_of(&before, &probes[round % probes.len()]);
        let replica = before.replicas_of(&victim).remove(0);
        let killed_at = load.now();
        cluster.kill_node(&victim);
        let (recovered, promoted) = std::thread::scope(|scope| {
            let promoted = scope.spawn(|| promoted_at(&replica, &load));
            let recovered = writes_work_everywhere(proxy.addr(), &probes, &load);
            (
                recovered,
                promoted.join().expect("the promotion watch panicked"),
            )
        });
        let recovered = recovered.unwrap_or_else(|| {
            panic!("writes did not work on every master within {GIVE_UP:?} of killing {victim}")
        });
        let took = recovered - killed_at;
        println!(
            "kill -9 {victim}: {replica} promoted after {:?}, writes work on every master \
             again after {took:?}",
            promoted.map(|at| at - killed_at)
        );
        assert!(
            took <= recovery_bound,
            "writes on every master took {took:?} to work again after kill -9 of {victim}, \
             more than the node timeout + 2 s ({recovery_bound:?})"
        );
        kills.push((
            victim,
            before,
            Window {
                start: killed_at,
                end: recovered,
            },
        ));
        load.run_for(profile.after);
    }
    let report = finish("kill -9", load, &cluster);
    report.assert_no_wrong_value();
    for loss in &report.losses {
        let explained = kills.iter().any(|(victim, before, window)| {
            owner_of(before, &loss.key) == *victim
                && loss.acked_at + LOSS_WINDOW >= window.start
                && loss.acked_at <= window.start + Duration::from_millis(100)
        });
        assert!(
            explained,
            "kill -9: a lost write that is not in the last {LOSS_WINDOW:?} before a kill of \
             its master {:?}: {loss:?}",
            kills
                .iter()
                .map(|(v, _, w)| (v, w.start))
                .collect::<Vec<_>>()
        );
    }
    println!(
        "kill -9: {} acknowledged writes lost to asynchronous replication",
        report.losses.len()
    );
    let windows: Vec<Window> = kills.iter().map(|(_, _, w)| *w).collect();
    report.assert_errors_only(&windows, |_| Ok(()));
    report.assert_every_client_carried_on(windows[windows.len() - 1].end);
}

#[test]
fn resharding_1000_slots_with_redis_cli_shows_clients_nothing() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start(3, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let load = Load::start(proxy.addr(), profile.load);
    load.run_for(profile.before);
    let mut last_end = Duration::ZERO;
    for round in 0..profile.rounds {
        let before = cluster.wait_stable();
        let masters = before.masters();
        let from = &masters[round % masters.len()];
        let to = &masters[(round + 1) % masters.len()];
        let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
        let seed = cluster.masters().remove(0);
        let args = [
            "--cluster",
            "reshard",
            &seed,
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            "1000",
            "--cluster-yes",
        ];
        let started = Instant::now();
        run_redis_cli(&args, REDIS_CLI_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        println!("reshard {from} -> {to}: {:?}", started.elapsed());
        last_end = load.now();
        let after = cluster.wait_stable();
        assert_eq!(
            slots_of(&after, to),
            slots_of(&before, to) + 1000,
            "{to} did not gain 1000 slots"
        );
        load.run_for(profile.after);
    }
    let report = finish("reshard", load, &cluster);
    report.assert_no_wrong_value();
    report.assert_nothing_lost();
    report.assert_no_error();
    report.assert_every_client_carried_on(last_end);
}

#[test]
fn adding_a_master_and_rebalancing_with_redis_cli_shows_clients_nothing() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start(3, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let load = Load::start(proxy.addr(), profile.load);
    load.run_for(profile.before);
    let mut last_end = Duration::ZERO;
    for _ in 0..profile.rounds {
        let seed = cluster.masters().remove(0);
        let added = cluster.start_spare_node();
        let started = Instant::now();
        run_redis_cli(&["--cluster", "add-node", &added, &seed], REDIS_CLI_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        // rebalance refuses a cluster whose nodes do not agree yet.
        let joined = cluster.wait_stable();
        assert!(
            joined.masters().contains(&added),
            "{added} did not join as a master: {joined:?}"
        );
        let args = [
            "--cluster",
            "rebalance",
            &seed,
            "--cluster-use-empty-masters",
        ];
        run_redis_cli(&args, REDIS_CLI_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        println!("add-node and rebalance to {added}: {:?}", started.elapsed());
        last_end = load.now();
        let after = cluster.wait_stable();
        let fair_share = common::SLOT_COUNT / after.masters().len() as u32;
        let got = slots_of(&after, &added);
        assert!(
            got + 2 * fair_share / 100 >= fair_share,
            "{added} got {got} slots, its fair share is {fair_share}"
        );
        load.run_for(profile.after);
    }
    let report = finish("scale-out", load, &cluster);
    report.assert_no_wrong_value();
    report.assert_nothing_lost();
    report.assert_no_error();
    report.assert_every_client_carried_on(last_end);
}

#[test]
fn a_stopped_master_fails_only_its_own_requests_after_the_read_timeout() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start_with_node_timeout(3, 1, PAUSE_NODE_TIMEOUT);
    let read_timeout = format!("backend.read_timeout_ms={READ_TIMEOUT_MS}");
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg(), "--set", &read_timeout]);
    let layout = cluster.wait_stable();
    let probes = probe_keys(&layout);
    let load = Load::start(proxy.addr(), profile.load);
    load.run_for(profile.before);
    let mut pauses: Vec<(String, Window)> = Vec::new();
    for round in 0..profile.rounds {
        let stopped = owner_of(&layout, &probes[round % probes.len()]);
        let start = load.now();
        cluster.set_node_paused(&stopped, true);
        load.run_for(PAUSE);
        cluster.set_node_paused(&stopped, false);
        let end = load.now();
        let recovered = writes_work_everywhere(proxy.addr(), &probes, &load);
        let recovered = recovered.unwrap_or_else(|| {
            panic!("writes did not work on every master within {GIVE_UP:?} of SIGCONT")
        });
        assert!(
            recovered - end <= RECOVERY,
            "writes on every master took {:?} to work again after SIGCONT of {stopped}",
            recovered - end
        );
        pauses.push((stopped, Window { start, end }));
        load.run_for(profile.after);
    }
    let report = finish("SIGSTOP", load, &cluster);
    assert_eq!(
        cluster.wait_stable().slots,
        layout.slots,
        "a replica took over: the pause was not shorter than the node timeout"
    );
    report.assert_no_wrong_value();
    report.assert_nothing_lost();
    let windows: Vec<Window> = pauses.iter().map(|(_, w)| *w).collect();
    let hang_bound = Duration::from_millis(READ_TIMEOUT_MS) + Duration::from_secs(2);
    report.assert_errors_only(&windows, |error| {
        let on_stopped = pauses.iter().any(|(stopped, w)| {
            owner_of(&layout, &error.key) == *stopped && w.overlaps(error.started, error.ended)
        });
        if !on_stopped {
            return Err("an error for a master that was not stopped".into());
        }
        let timeout_text = format!("no reply within {READ_TIMEOUT_MS} ms");
        if !(error.text.contains("outcome is unknown") && error.text.contains(&timeout_text)) {
            return Err("not the proxy's read-timeout error".into());
        }
        if error.ended - error.started > hang_bound {
            return Err(format!(
                "failed only after {:?}",
                error.ended - error.started
            ));
        }
        Ok(())
    });
    for (stopped, window) in &pauses {
        let failed = report
            .errors
            .iter()
            .filter(|e| window.contains(e.ended) && owner_of(&layout, &e.key) == *stopped)
            .count();
        assert!(
            failed > 0,
            "no request to the stopped {stopped} failed while it was stopped"
        );
    }
    // The other masters answered as usual meanwhile.
    for log in &report.logs {
        for slow in &log.slow {
            let elsewhere = pauses.iter().any(|(stopped, w)| {
                owner_of(&layout, &slow.key) != *stopped && w.overlaps(slow.started, slow.ended)
            });
            assert!(
                !elsewhere,
                "a request to a master that was not stopped took more than {SLOW_OP:?}: {slow:?}"
            );
        }
    }
    report.assert_every_client_carried_on(windows[windows.len() - 1].end);
}

#[test]
fn a_proxy_restart_only_resets_connections() {
    let _serial = one_at_a_time();
    let profile = profile();
    let cluster = Cluster::start(3, 1);
    let args = ["--cluster", &cluster.seeds_arg()];
    let mut proxy = Proxy::start(&args);
    let addr = proxy.addr().to_string();
    let load = Load::start(&addr, profile.load);
    load.run_for(profile.before);
    let mut windows = Vec::new();
    for _ in 0..profile.rounds {
        let start = load.now();
        proxy.send_signal("TERM");
        let status = proxy.wait_exit(GIVE_UP);
        let status = status
            .unwrap_or_else(|| panic!("the proxy did not exit within {GIVE_UP:?} of SIGTERM"));
        assert!(
            status.success(),
            "the draining proxy exited with {status}:\n{}",
            proxy.output()
        );
        proxy = Proxy::start_on(&addr, &args);
        windows.push(Window {
            start,
            end: load.now(),
        });
        load.run_for(profile.after);
    }
    let report = finish("proxy restart", load, &cluster);
    report.assert_no_wrong_value();
    report.assert_nothing_lost();
    report.assert_errors_only(&windows, |error| {
        if error.connection || error.text.contains("shutting down") {
            Ok(())
        } else {
            Err("not a connection reset nor the drain's refusal".into())
        }
    });
    report.assert_every_client_carried_on(windows[windows.len() - 1].end);
}
