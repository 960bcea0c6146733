//! Checks the harness itself against a real cluster: that it starts, covers every slot, routes
//! keys where Redis says they live, and that slot moves and failovers really happen. The proxy
//! handle is checked with stand-in programs, since it must work before the proxy does.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{
    connect, new_dir, query, running_tests, shared_cluster, Cluster, Proxy, Raw, Role, Standalone,
    SLOT_COUNT,
};

fn set(addr: &str, key: &str, value: &str) {
    let mut con = connect(addr);
    let reply: String = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, "OK");
}

fn get(addr: &str, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(&mut connect(addr))
}

/// Slot coverage straight from `CLUSTER SLOTS` of every node, independent of the harness's
/// own parsing: each reply entry is [start, end, [ip, port, id], replicas...].
fn covered_slots(addr: &str) -> Vec<bool> {
    let entries: Vec<Vec<redis::Value>> =
        query(addr, redis::cmd("CLUSTER").arg("SLOTS")).unwrap_or_else(|e| panic!("{e}"));
    let mut covered = vec![false; SLOT_COUNT as usize];
    for entry in entries {
        let start: usize = redis::from_redis_value(&entry[0]).unwrap();
        let end: usize = redis::from_redis_value(&entry[1]).unwrap();
        for (slot, seen) in covered.iter_mut().enumerate().take(end + 1).skip(start) {
            assert!(!*seen, "{addr}: slot {slot} listed twice");
            *seen = true;
        }
    }
    covered
}

#[test]
fn cluster_routes_migrates_and_fails_over() {
    let cluster = Cluster::start(3, 1);
    assert_eq!(cluster.seeds().len(), 6);
    let masters = cluster.masters();
    let replicas = cluster.replicas();
    assert_eq!(masters.len(), 3, "masters: {masters:?}");
    assert_eq!(replicas.len(), 3, "replicas: {replicas:?}");

    for addr in cluster.seeds() {
        let covered = covered_slots(&addr);
        let missing = covered.iter().filter(|seen| !**seen).count();
        assert_eq!(missing, 0, "{addr} reports {missing} uncovered slots");
    }

    // Keys sharing a hash tag share a slot; the owner serves them, other masters redirect.
    let keys = ["{harness}:a", "{harness}:b", "{harness}:c"];
    let slot = cluster.keyslot(keys[0]);
    assert!(keys.iter().all(|k| cluster.keyslot(k) == slot));
    let owner = cluster.node_for_slot(slot);
    for key in keys {
        set(&owner, key, &format!("value of {key}"));
    }
    let other = masters.iter().find(|m| **m != owner).unwrap().clone();
    let redirect = get(&other, keys[0]).unwrap_err();
    assert_eq!(redirect.kind(), redis::ErrorKind::Moved, "{redirect}");

    // Held half-way: one key moved, the source answers ASK for it and still serves the rest.
    cluster.begin_migration(slot, &other);
    assert_eq!(cluster.migrate_keys(slot, &other, 1), 1);
    let on_target: i64 = query(
        &other,
        redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
    )
    .unwrap();
    assert_eq!(on_target, 1);
    let moved_key: Vec<String> = query(
        &other,
        redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10),
    )
    .unwrap();
    let ask = get(&owner, &moved_key[0]).unwrap_err();
    assert_eq!(ask.kind(), redis::ErrorKind::Ask, "{ask}");
    let still_home = keys.iter().find(|k| **k != moved_key[0]).unwrap();
    assert_eq!(
        get(&owner, still_home).unwrap(),
        Some(format!("value of {still_home}"))
    );
    assert_eq!(
        cluster.node_for_slot(slot),
        owner,
        "owner changes only at the end"
    );

    assert_eq!(cluster.migrate_keys(slot, &other, usize::MAX), 2);
    cluster.finish_migration(slot, &other);
    assert_eq!(cluster.node_for_slot(slot), other);
    for key in keys {
        assert_eq!(get(&other, key).unwrap(), Some(format!("value of {key}")));
    }
    let moved = get(&owner, keys[0]).unwrap_err();
    assert_eq!(moved.kind(), redis::ErrorKind::Moved, "{moved}");

    // Whole move back in one call.
    cluster.migrate_slot(slot, &owner);
    assert_eq!(cluster.node_for_slot(slot), owner);
    assert_eq!(
        get(&owner, keys[1]).unwrap(),
        Some(format!("value of {}", keys[1]))
    );

    // Manual failover: the replica of the slot's owner takes over with the data.
    let replica = cluster
        .replicas_of(&owner)
        .pop()
        .expect("owner has a replica");
    cluster.failover(&replica);
    let info: String = query(&replica, redis::cmd("INFO").arg("replication")).unwrap();
    assert!(info.lines().any(|l| l.trim() == "role:master"), "{info}");
    assert_eq!(
        cluster.layout().roles.get(&owner),
        Some(&Role::ReplicaOf(replica.clone()))
    );
    assert_eq!(cluster.node_for_slot(slot), replica);
    assert_eq!(
        get(&replica, keys[2]).unwrap(),
        Some(format!("value of {}", keys[2]))
    );

    // A killed replica rejoins on restart.
    cluster.kill_node(&owner);
    assert!(connect_fails(&owner));
    cluster.restart_node(&owner);
    assert_eq!(cluster.replicas_of(&replica), vec![owner.clone()]);
}

fn connect_fails(addr: &str) -> bool {
    common::try_connect(addr, std::time::Duration::from_millis(500)).is_err()
}

#[test]
fn shared_cluster_is_one_cluster_per_binary() {
    let first = shared_cluster();
    let second = shared_cluster();
    assert!(std::ptr::eq(first, second));
    assert_eq!(first.masters().len(), 3);
    let pong: String = query(&first.seeds()[0], &redis::cmd("PING")).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn standalone_is_not_a_cluster_and_restarts_empty() {
    let mut server = Standalone::start();
    let info: String = query(server.addr(), redis::cmd("INFO").arg("cluster")).unwrap();
    assert!(
        info.lines().any(|l| l.trim() == "cluster_enabled:0"),
        "{info}"
    );
    set(server.addr(), "k", "v");
    assert_eq!(get(server.addr(), "k").unwrap(), Some("v".to_string()));
    server.restart();
    assert_eq!(
        get(server.addr(), "k").unwrap(),
        None,
        "nothing is persisted"
    );
}

/// Stops this whole test process `after` from now, for `pause`, from a shell of its own.
fn stop_this_process(after: Duration, pause: Duration) -> Child {
    let script = format!(
        "sleep {}; kill -STOP {pid}; sleep {}; kill -CONT {pid}",
        after.as_secs_f64(),
        pause.as_secs_f64(),
        pid = std::process::id()
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .spawn()
        .expect("start `sh`")
}

/// A host that pauses the machine stops and resumes the test process; a read waiting on a
/// socket with a timeout then fails with EINTR. Neither a harness connection nor a raw one
/// may take that for an answer: each waits for a BLPOP that times out after 800 ms while
/// the process is stopped for 100 ms in the middle.
#[test]
fn a_stop_of_the_test_process_fails_no_waiting_read() {
    let server = Standalone::start();
    let mut con = server.connect();
    let mut raw = Raw::connect(server.addr());
    let pause = Duration::from_millis(100);

    let mut stopper = stop_this_process(Duration::from_millis(300), pause);
    let started = Instant::now();
    let popped: redis::Value = redis::cmd("BLPOP")
        .arg("stop:empty")
        .arg(0.8)
        .query(&mut con)
        .expect("a harness connection waits through the stop");
    assert_eq!(popped, redis::Value::Nil);
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert!(stopper.wait().unwrap().success());

    let mut stopper = stop_this_process(Duration::from_millis(300), pause);
    assert_eq!(raw.call(&["BLPOP", "stop:empty", "0.8"]), "*-1\r\n");
    assert!(stopper.wait().unwrap().success());
    // Both connections are still in step.
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
}

#[test]
fn fewer_than_three_masters_are_built_by_hand() {
    // redis-cli refuses this size, so the harness assigns slots and replicas itself.
    let cluster = Cluster::start(1, 1);
    let master = cluster.masters();
    assert_eq!(master.len(), 1);
    assert_eq!(cluster.replicas_of(&master[0]).len(), 1);
    let covered = covered_slots(&master[0]);
    assert!(covered.iter().all(|seen| *seen));
}

#[test]
fn ports_are_distinct_and_free_with_their_bus_port() {
    let ports: Vec<u16> = (0..50).map(|_| common::free_cluster_port()).collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ports.len(), "{ports:?}");
    for port in ports {
        for p in [port, port + 10000] {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", p)).is_ok(),
                "{p} in use"
            );
        }
    }
}

/// The `CLUSTER NODES` example of the Redis documentation (cluster-nodes command page).
const DOCS_CLUSTER_NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,hostname4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,hostname2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003,hostname3 master - 0 1426238318243 3 connected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005,hostname5 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@31006,hostname6 slave 292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 0 1426238317741 6 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001,hostname1 myself,master - 0 0 1 connected 0-5460
";

#[test]
fn cluster_nodes_docs_example_parses_to_its_layout() {
    let lines = common::parse_cluster_nodes(DOCS_CLUSTER_NODES).unwrap();
    let live = (30001..=30006).map(|p| format!("127.0.0.1:{p}")).collect();
    let layout = common::layout_of(&lines, &live).unwrap();
    layout.check_full_coverage().unwrap();
    assert_eq!(layout.owner_of(0), Some("127.0.0.1:30001"));
    assert_eq!(layout.owner_of(5461), Some("127.0.0.1:30002"));
    assert_eq!(layout.owner_of(16383), Some("127.0.0.1:30003"));
    assert_eq!(
        layout.replicas_of("127.0.0.1:30001"),
        vec!["127.0.0.1:30004"]
    );
    assert_eq!(
        layout.replicas_of("127.0.0.1:30003"),
        vec!["127.0.0.1:30006"]
    );

    // A live node seen as failing makes the view unusable, and a dead owner leaves a hole.
    let failing = DOCS_CLUSTER_NODES.replace("myself,master", "myself,master,fail?");
    let lines = common::parse_cluster_nodes(&failing).unwrap();
    assert!(common::layout_of(&lines, &live).is_err());
    let mut without_owner = live.clone();
    without_owner.remove("127.0.0.1:30002");
    let lines = common::parse_cluster_nodes(DOCS_CLUSTER_NODES).unwrap();
    assert!(common::layout_of(&lines, &without_owner).is_err());
}

#[test]
fn killing_a_master_promotes_its_replica_and_it_returns_as_replica() {
    let cluster = Cluster::start(3, 1);
    let victim = cluster.masters().remove(0);
    let heir = cluster
        .replicas_of(&victim)
        .pop()
        .expect("victim has a replica");
    cluster.kill_node(&victim);
    let layout = cluster.wait_stable();
    assert_eq!(layout.roles.get(&heir), Some(&Role::Master));
    assert!(
        !layout.roles.contains_key(&victim),
        "a dead node has no role"
    );
    cluster.restart_node(&victim);
    let layout = cluster.layout();
    assert_eq!(
        layout.roles.get(&victim),
        Some(&Role::ReplicaOf(heir.clone()))
    );
}

/// Writes an executable shell script that stands in for the proxy binary.
fn stand_in(body: &str) -> String {
    let path = common::new_dir("stand-in").join("stand-in.sh");
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn proxy_handle_waits_for_ping_signals_and_reaps() {
    // A redis-server on the proxy's listen port behaves like a proxy that is up.
    let script = stand_in(
        "#!/bin/sh\n\
         # $1 is --listen, $2 is 127.0.0.1:<port>.\n\
         exec redis-server --port \"${2##*:}\" --bind 127.0.0.1 --save '' --appendonly no\n",
    );
    let mut proxy = Proxy::start_program(&script, &[], &[]);
    assert_ne!(proxy.addr(), proxy.admin_addr());
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut proxy.connect())
        .unwrap();
    let own_pid = format!("process_id:{}", proxy.pid());
    assert!(info.lines().any(|l| l.trim() == own_pid), "{info}");
    assert!(proxy.wait_exit(Duration::from_millis(200)).is_none());
    // redis-server shuts down cleanly, exit code 0, on SIGTERM.
    proxy.send_signal("TERM");
    let status = proxy
        .wait_exit(Duration::from_secs(10))
        .expect("exit after SIGTERM");
    assert!(status.success(), "{status}");
}

#[test]
fn proxy_start_failure_reports_the_programs_stderr() {
    let script = stand_in("#!/bin/sh\necho \"refusing: $*\" >&2\nexit 3\n");
    let panic =
        std::panic::catch_unwind(|| Proxy::start_program(&script, &["--cluster", "x"], &[]))
            .err()
            .expect("start must fail");
    let message = panic.downcast_ref::<String>().expect("formatted panic");
    assert!(
        message.contains("refusing: --listen 127.0.0.1:"),
        "{message}"
    );
    assert!(message.contains("--cluster x"), "{message}");
    assert!(message.contains("exit status: 3"), "{message}");
}

/// A test binary past its hang limit names the tests still running: a test counts once it
/// starts a process or opens a connection through the harness, until its thread ends.
#[test]
fn the_hang_limit_names_the_tests_still_running() {
    let name = "a_test_that_hangs_here".to_string();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (noted, is_noted) = std::sync::mpsc::channel::<()>();
    let test = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            new_dir("hang-limit");
            noted.send(()).unwrap();
            released.recv().unwrap();
        })
        .unwrap();
    is_noted.recv().unwrap();
    assert!(
        running_tests().contains(&name),
        "a test that started a process is not listed: {:?}",
        running_tests()
    );
    release.send(()).unwrap();
    test.join().unwrap();
    let after = running_tests();
    assert!(
        !after.contains(&name),
        "a finished test is still listed: {after:?}"
    );
}
