//! The Sentinel upstream against real servers: a group of one master, one replica and three
//! `redis-server --sentinel` processes. A manual `SENTINEL FAILOVER` under write load through
//! the proxy loses no acknowledged write, stalls writes for less than 5 s and drops no
//! client; INFO and the metrics show the switch. Also: discovery with the first Sentinel
//! down; a named master whose `ROLE` says `slave` is refused (and `/readyz` says so) until
//! it is promoted; the Sentinels' password and the master's are separate settings; reloads
//! move a connected client from a standalone upstream to the Sentinel group, then to a
//! cluster.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    data_connect, http_get, new_dir, shared_cluster, GroupOptions, Proxy, Raw, Sentinel,
    SentinelGroup, Standalone,
};

/// Writers during the failover.
const CLIENTS: usize = 4;
/// Longest stall of acknowledged writes a failover may cause (the target).
const MAX_STALL: Duration = Duration::from_secs(5);

fn sentinel_args(group: &SentinelGroup) -> Vec<String> {
    vec![
        "--sentinel".into(),
        group.sentinel_list(),
        "--master-name".into(),
        SentinelGroup::NAME.into(),
    ]
}

fn start_proxy(args: &[String]) -> Proxy {
    start_proxy_with_env(args, &[])
}

fn start_proxy_with_env(args: &[String], env: &[(&str, &str)]) -> Proxy {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proxy::start_with_env(&args, env)
}

/// Polls `check` every 50 ms until it returns true, for at most `timeout`.
fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn info_proxy(proxy: &Proxy) -> String {
    Raw::connect(proxy.addr()).call(&["INFO", "proxy"])
}

/// What one writer saw.
#[derive(Default)]
struct WriterLog {
    /// Keys whose SET was acknowledged, with when (since the load started).
    acked: Vec<(String, Duration)>,
    /// Error replies, with when.
    errors: Vec<(String, Duration)>,
    /// The connection to the proxy failed (the client would have had to reconnect).
    dropped: Option<String>,
}

fn write_until(addr: &str, client: usize, start: Instant, stop: &AtomicBool) -> WriterLog {
    let mut con = common::connect(addr);
    let mut log = WriterLog::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("failover:{client}:{n}");
        let outcome: redis::RedisResult<String> =
            redis::cmd("SET").arg(&key).arg(n).query(&mut con);
        let at = start.elapsed();
        match outcome {
            Ok(_) => log.acked.push((key, at)),
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                log.dropped = Some(e.to_string());
                break;
            }
            Err(e) => log.errors.push((e.to_string(), at)),
        }
        n += 1;
    }
    log
}

/// How many of `keys` exist on `con`.
fn count_present(con: &mut redis::Connection, keys: &[String]) -> usize {
    keys.chunks(1000)
        .map(|chunk| {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.cmd("EXISTS").arg(key);
            }
            let found: Vec<u32> = pipe.query(con).unwrap();
            found.iter().filter(|&&f| f == 1).count()
        })
        .sum()
}

#[test]
fn a_manual_failover_under_load_loses_no_acknowledged_write_and_drops_no_client() {
    let group = SentinelGroup::start(GroupOptions::default());
    let proxy = start_proxy(&sentinel_args(&group));
    let info = info_proxy(&proxy);
    assert!(info.contains("proxy_upstream:sentinel"), "{info}");
    assert!(
        info.contains(&format!("proxy_upstream_master:{}", group.master_addr())),
        "{info}"
    );
    assert!(info.contains("proxy_upstream_switches:0"), "{info}");

    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let writers: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let addr = proxy.addr().to_string();
            let stop = stop.clone();
            std::thread::spawn(move || write_until(&addr, client, start, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let failover_at = start.elapsed();
    group.failover();
    let new_master = format!("proxy_upstream_master:{}", group.replica_addr());
    wait_until(
        "the proxy to name the new master",
        Duration::from_secs(20),
        || info_proxy(&proxy).contains(&new_master),
    );
    let switched_at = start.elapsed();
    // Writes go on for a while on the new master.
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<WriterLog> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let end = start.elapsed();

    for (client, log) in logs.iter().enumerate() {
        assert_eq!(log.dropped, None, "client {client} lost its connection");
    }
    let mut acked_times: Vec<Duration> = logs
        .iter()
        .flat_map(|l| l.acked.iter().map(|(_, at)| *at))
        .collect();
    acked_times.sort();
    let mut last = failover_at;
    let mut stall = Duration::ZERO;
    for at in acked_times.iter().copied().filter(|at| *at >= failover_at) {
        stall = stall.max(at - last);
        last = at;
    }
    stall = stall.max(end - last);
    let errors: Vec<&(String, Duration)> = logs.iter().flat_map(|l| &l.errors).collect();
    let acked: Vec<String> = logs
        .iter()
        .flat_map(|l| l.acked.iter().map(|(key, _)| key.clone()))
        .collect();
    let after_switch = acked_times.iter().filter(|at| **at > switched_at).count();

    group.wait_role(group.replica_addr(), "master");
    let present = count_present(&mut group.data_connect(group.replica_addr()), &acked);
    eprintln!(
        "failover figures: {} writes acknowledged, {} after the switch; FAILOVER at {:?}, \
         proxy on the new master {:?} later; longest stall of acknowledgements after \
         FAILOVER {:?}; {} acknowledged writes missing on the new master; {} error replies {:?}",
        acked.len(),
        after_switch,
        failover_at,
        switched_at - failover_at,
        stall,
        acked.len() - present,
        errors.len(),
        errors.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(present, acked.len(), "acknowledged writes lost");
    assert!(stall < MAX_STALL, "writes stalled {stall:?}");
    assert!(after_switch > 0, "no write acknowledged after the switch");
    assert!(errors.is_empty(), "error replies: {errors:?}");

    let info = info_proxy(&proxy);
    assert!(info.contains("proxy_upstream_switches:1"), "{info}");
    let (status, metrics) = http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200);
    for line in [
        "slotbridge_upstream_switches_total 1".to_string(),
        "slotbridge_upstream_info{kind=\"sentinel\"} 1".to_string(),
        format!(
            "slotbridge_upstream_master_info{{address=\"{}\"}} 1",
            group.replica_addr()
        ),
        format!(
            "slotbridge_upstream_master_info{{address=\"{}\"}} 0",
            group.master_addr()
        ),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn the_master_is_found_with_the_first_sentinel_down() {
    let mut group = SentinelGroup::start(GroupOptions::default());
    group.kill_sentinel(0);
    let proxy = start_proxy(&sentinel_args(&group));
    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["SET", "found", "yes"]), "+OK\r\n");
    let value: String = redis::cmd("GET")
        .arg("found")
        .query(&mut group.data_connect(group.master_addr()))
        .unwrap();
    assert_eq!(value, "yes", "the write reached the master");
    let info = client.call(&["INFO", "proxy"]);
    assert!(
        info.contains(&format!("proxy_upstream_master:{}", group.master_addr())),
        "{info}"
    );
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    assert_eq!(status, 200, "{body}");
}

/// A Sentinel that names a node which is a replica: the proxy does not send it commands,
/// `/readyz` says no master is known, and once the node is promoted the periodic check
/// finds it.
#[test]
fn a_named_master_that_says_slave_is_refused_until_it_is_a_master() {
    let primary = Standalone::start();
    let replica = Standalone::start();
    let (host, port) = primary.addr().split_once(':').unwrap();
    let mut replica_con = replica.connect();
    let _: () = redis::cmd("REPLICAOF")
        .arg(host)
        .arg(port)
        .query(&mut replica_con)
        .unwrap();
    // Quorum 1 and a minute before "down": this Sentinel names the replica and does nothing.
    let sentinel = Sentinel::start(replica.addr(), 1, 60_000, &GroupOptions::default());
    let proxy = Proxy::start(&[
        "--sentinel",
        sentinel.addr(),
        "--master-name",
        SentinelGroup::NAME,
        "--set",
        "topology.refresh_interval_ms=300",
    ]);
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no master known for 'ragmaster'"), "{body}");
    let mut client = Raw::connect(proxy.addr());
    let refused = client.call(&["SET", "refused", "1"]);
    assert_eq!(refused, "-CLUSTERDOWN Hash slot not served\r\n");
    assert!(
        proxy.stderr().contains("says its role is 'slave'"),
        "{}",
        proxy.output()
    );

    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica_con)
        .unwrap();
    wait_until("/readyz to turn 200", Duration::from_secs(10), || {
        http_get(proxy.admin_addr(), "/readyz").0 == 200
    });
    assert_eq!(client.call(&["SET", "accepted", "1"]), "+OK\r\n");
    let value: String = redis::cmd("GET")
        .arg("accepted")
        .query(&mut replica_con)
        .unwrap();
    assert_eq!(value, "1");
}

#[test]
fn the_sentinel_password_and_the_master_password_are_separate() {
    let options = GroupOptions {
        data_password: Some("data-secret".into()),
        sentinel_password: Some("sentinel-secret".into()),
    };
    let group = SentinelGroup::start(options);
    let mut args = sentinel_args(&group);
    args.extend(["--set".into(), "sentinel.password=sentinel-secret".into()]);
    let proxy = start_proxy_with_env(&args, &[("REDIS_PASSWORD", "data-secret")]);
    assert_eq!(
        Raw::connect(proxy.addr()).call(&["SET", "acl", "ok"]),
        "+OK\r\n"
    );
    let value: String = redis::cmd("GET")
        .arg("acl")
        .query(&mut group.data_connect(group.master_addr()))
        .unwrap();
    assert_eq!(value, "ok");
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    assert_eq!(status, 200, "{body}");

    // The master's password is not the Sentinels': with it alone no master is found.
    let without =
        start_proxy_with_env(&sentinel_args(&group), &[("REDIS_PASSWORD", "data-secret")]);
    let (status, body) = http_get(without.admin_addr(), "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        without.stderr().contains("NOAUTH"),
        "the Sentinels' refusal is logged: {}",
        without.output()
    );
}

fn config_file(text: &str) -> PathBuf {
    let path = new_dir("sentinel-config").join("slotbridge.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_reload_moves_a_connected_client_from_standalone_to_the_sentinel_group_then_a_cluster() {
    let standalone = Standalone::start();
    let group = SentinelGroup::start(GroupOptions::default());
    let path = config_file(&format!("standalone: \"{}\"\n", standalone.addr()));
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["SET", "where", "standalone"]), "+OK\r\n");
    assert!(client
        .call(&["INFO", "proxy"])
        .contains("proxy_upstream:standalone"));

    let sentinels: Vec<String> = group
        .sentinel_addrs()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect();
    std::fs::write(
        &path,
        format!(
            "sentinel:\n  addresses: [{}]\n  master_name: {}\n",
            sentinels.join(", "),
            SentinelGroup::NAME
        ),
    )
    .unwrap();
    proxy.send_signal("HUP");
    wait_until("the reload", Duration::from_secs(10), || {
        proxy.stderr().contains("configuration reloaded")
    });
    assert_eq!(client.call(&["SET", "where", "sentinel"]), "+OK\r\n");
    let on_master: String = redis::cmd("GET")
        .arg("where")
        .query(&mut data_connect(group.master_addr(), None))
        .unwrap();
    assert_eq!(on_master, "sentinel");
    let on_standalone: String = redis::cmd("GET")
        .arg("where")
        .query(&mut standalone.connect())
        .unwrap();
    assert_eq!(
        on_standalone, "standalone",
        "the old upstream is left alone"
    );
    let info = client.call(&["INFO", "proxy"]);
    assert!(info.contains("proxy_upstream:sentinel"), "{info}");
    let (_, metrics) = http_get(proxy.admin_addr(), "/metrics");
    for line in [
        "slotbridge_upstream_info{kind=\"standalone\"} 0".to_string(),
        "slotbridge_upstream_info{kind=\"sentinel\"} 1".to_string(),
        format!(
            "slotbridge_upstream_master_info{{address=\"{}\"}} 0",
            standalone.addr()
        ),
        format!(
            "slotbridge_upstream_master_info{{address=\"{}\"}} 1",
            group.master_addr()
        ),
        "slotbridge_upstream_switches_total 0".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }

    // And on to a cluster, the same client still connected.
    let cluster = shared_cluster();
    let seeds: Vec<String> = cluster.seeds().iter().map(|s| format!("\"{s}\"")).collect();
    std::fs::write(&path, format!("cluster: [{}]\n", seeds.join(", "))).unwrap();
    proxy.send_signal("HUP");
    wait_until("the second reload", Duration::from_secs(10), || {
        proxy.stderr().matches("configuration reloaded").count() == 2
    });
    assert_eq!(client.call(&["SET", "where", "cluster"]), "+OK\r\n");
    let on_cluster: String = redis::cmd("GET")
        .arg("where")
        .query(&mut common::connect(
            &cluster.node_for_slot(cluster.keyslot("where")),
        ))
        .unwrap();
    assert_eq!(on_cluster, "cluster");
    let on_master: String = redis::cmd("GET")
        .arg("where")
        .query(&mut data_connect(group.master_addr(), None))
        .unwrap();
    assert_eq!(on_master, "sentinel", "the Sentinel group is left alone");
    let info = client.call(&["INFO", "proxy"]);
    assert!(info.contains("proxy_upstream:cluster"), "{info}");
}
