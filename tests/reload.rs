//! Hot reload through the real binary: SIGHUP (and `slotbridge reload`) re-read the file
//! while redis-benchmark runs without an error; a broken file changes nothing; new
//! passwords apply to new logins; a newly denied command, and a user's narrowed ACL, are
//! refused on open connections; an upstream switch from a standalone server to the cluster
//! is seen by the next command of an already connected client, and by a subscriber that only
//! listens; after such a switch, readiness looks at the cluster and a subscriber's old and
//! new channels are subscribed there.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    http_get, new_dir, query, resp_lines, shared_cluster, wait_until, Proxy, Raw, Standalone,
};

fn config_file(text: &str) -> PathBuf {
    let path = new_dir("reload-config").join("slotbridge.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn cluster_yaml() -> String {
    let seeds: Vec<String> = shared_cluster()
        .seeds()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect();
    format!("cluster: [{}]\n", seeds.join(", "))
}

/// Waits until the proxy has logged `needle` `count` times.
fn wait_log(proxy: &Proxy, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.stderr().matches(needle).count() < count {
        assert!(
            Instant::now() < deadline,
            "expected {count} x {needle:?} in the log:\n{}",
            proxy.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_ten_times_under_redis_benchmark() {
    common::require_tool("redis-benchmark");
    let path = config_file(&cluster_yaml());
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let port = proxy.addr().rsplit_once(':').unwrap().1.to_string();
    let benchmark = std::thread::spawn(move || {
        Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port, "-t", "set,get,incr"])
            .args(["-n", "60000", "-c", "20", "-q"])
            .output()
            .expect("redis-benchmark runs")
    });
    for i in 0..10 {
        // Each reload changes something the proxy uses per command.
        let text = format!("{}retry:\n  attempts: {}\n", cluster_yaml(), 10 + i);
        std::fs::write(&path, text).unwrap();
        std::thread::sleep(Duration::from_millis(150));
        proxy.send_signal("HUP");
        wait_log(&proxy, "configuration reloaded", i + 1);
    }
    let output = benchmark.join().unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!text.to_ascii_lowercase().contains("error"), "{text}");
    assert!(text.contains("SET") && text.contains("INCR"), "{text}");
    assert!(
        !proxy.stderr().contains("reload failed"),
        "{}",
        proxy.output()
    );
}

#[test]
fn a_broken_file_changes_nothing_and_a_good_one_applies_to_new_logins() {
    let path = config_file(&format!("{}requirepass: first\n", cluster_yaml()));
    let pidfile = new_dir("reload-pid").join("slotbridge.pid");
    let proxy = Proxy::start(&[
        "--config",
        path.to_str().unwrap(),
        "--pidfile",
        pidfile.to_str().unwrap(),
    ]);
    let mut kept = Raw::connect(proxy.addr());
    assert_eq!(kept.call(&["AUTH", "first"]), "+OK\r\n");

    std::fs::write(
        &path,
        format!("{}requirepass: second\nbogus_field: 1\n", cluster_yaml()),
    )
    .unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "reload failed", 1);
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(
        con.call(&["AUTH", "first"]),
        "+OK\r\n",
        "the old config must keep serving"
    );

    std::fs::write(&path, format!("{}requirepass: second\n", cluster_yaml())).unwrap();
    reload_with_pidfile(&pidfile);
    wait_log(&proxy, "configuration reloaded", 1);
    let mut con = Raw::connect(proxy.addr());
    assert!(con.call(&["AUTH", "first"]).starts_with("-WRONGPASS"));
    assert_eq!(con.call(&["AUTH", "second"]), "+OK\r\n");
    // A connection authenticated before the reload stays authenticated.
    assert_eq!(kept.call(&["SET", "reload:kept", "1"]), "+OK\r\n");
}

#[test]
fn a_command_denied_by_a_reload_is_refused_on_open_connections() {
    let path = config_file(&cluster_yaml());
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["SET", "reload:denied", "a"]), "+OK\r\n");
    assert_eq!(con.call(&["APPEND", "reload:denied", "b"]), ":2\r\n");

    std::fs::write(
        &path,
        format!("{}commands:\n  deny: [append]\n", cluster_yaml()),
    )
    .unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    assert_eq!(
        con.call(&["APPEND", "reload:denied", "c"]),
        "-ERR proxy: 'append' is disabled by the proxy's command policy (allow it with commands.allow: [append])\r\n"
    );
    assert_eq!(con.call(&["GET", "reload:denied"]), "$2\r\nab\r\n");
}

/// A reload that narrows a user's ACL applies to connections already logged in as that
/// user, as Redis's ACL SETUSER does: the next command is checked against the new rules.
#[test]
fn a_user_narrowed_by_a_reload_is_checked_on_open_connections() {
    let users = |commands: &str| {
        format!(
            "{}users:\n  - name: bot\n    password: botpw\n    commands: [{commands}]\n    keys: [\"~reload:*\"]\n",
            cluster_yaml()
        )
    };
    let path = config_file(&users(r#""+get", "+set""#));
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["AUTH", "bot", "botpw"]), "+OK\r\n");
    assert_eq!(con.call(&["SET", "reload:acl", "1"]), "+OK\r\n");

    std::fs::write(&path, users(r#""+get""#)).unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    assert_eq!(
        con.call(&["SET", "reload:acl", "2"]),
        "-NOPERM this user has no permissions to run the 'set' command\r\n"
    );
    assert_eq!(con.call(&["GET", "reload:acl"]), "$1\r\n1\r\n");
}

/// A reload's `timeout` applies to clients already connected, as CONFIG SET timeout does
/// on Redis: a client idle since before the reload is closed once it has idled that long,
/// also when nothing else happens on its connection; a busy one is not.
#[test]
fn a_timeout_set_by_a_reload_closes_clients_already_idle() {
    let path = config_file(&cluster_yaml());
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut idle = Raw::connect(proxy.addr());
    let mut busy = Raw::connect(proxy.addr());
    assert_eq!(idle.call(&["PING"]), "+PONG\r\n");
    std::fs::write(&path, format!("{}timeout: 1\n", cluster_yaml())).unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.call(&["PING"]), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (data, closed) = common::read_until_close(&mut idle.stream, Duration::from_secs(2));
    assert!(data.is_empty() && closed, "the idle client is still open");
}

/// A reload's protocol limits apply to clients already connected, as CONFIG SET
/// proto-max-bulk-len does on Redis: a bulk over the new bound gets Redis's protocol error
/// and the connection closes.
#[test]
fn protocol_limits_set_by_a_reload_apply_to_open_connections() {
    let path = config_file(&cluster_yaml());
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut con = Raw::connect(proxy.addr());
    let value = "v".repeat(2048);
    assert_eq!(con.call(&["SET", "reload:bulk", &value]), "+OK\r\n");
    std::fs::write(
        &path,
        format!("{}limits:\n  proto_max_bulk_len: 1024\n", cluster_yaml()),
    )
    .unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    assert_eq!(con.call(&["SET", "reload:bulk", "short"]), "+OK\r\n");
    con.send(&["SET", "reload:bulk", &value]);
    let (data, closed) = common::read_until_close(&mut con.stream, Duration::from_secs(2));
    assert_eq!(
        String::from_utf8_lossy(&data),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert!(closed, "the connection stays open after a protocol error");
    let mut fresh = Raw::connect(proxy.addr());
    assert_eq!(fresh.call(&["GET", "reload:bulk"]), "$5\r\nshort\r\n");
}

fn reload_with_pidfile(pidfile: &Path) {
    let status = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["reload", "--pidfile", pidfile.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn switching_from_standalone_to_cluster_keeps_clients_connected() {
    let standalone = Standalone::start();
    let key = "reload:switch";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("standalone")
        .query(&mut standalone.connect())
        .unwrap();
    let mut cluster_con =
        common::connect(&shared_cluster().node_for_slot(shared_cluster().keyslot(key)));
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("cluster")
        .query(&mut cluster_con)
        .unwrap();

    let path = config_file(&format!("standalone: \"{}\"\n", standalone.addr()));
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["GET", key]), "$10\r\nstandalone\r\n");

    std::fs::write(&path, cluster_yaml()).unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    assert_eq!(client.call(&["GET", key]), "$7\r\ncluster\r\n");
    let info = client.call(&["INFO", "proxy"]);
    assert!(info.contains("proxy_upstream:cluster"), "{info}");
}

/// A subscriber that sends nothing after SUBSCRIBE moves with the upstream: the reload wakes
/// its session, which subscribes it again on the cluster, where messages are now published.
#[test]
fn a_listening_subscriber_follows_a_switch_from_standalone_to_cluster() {
    let standalone = Standalone::start();
    let path = config_file(&format!("standalone: \"{}\"\n", standalone.addr()));
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut subscriber = Raw::connect(proxy.addr());
    let confirmed = subscriber.call(&["SUBSCRIBE", "reload:news"]);
    assert!(confirmed.contains("reload:news"), "{confirmed}");
    let mut publisher = Raw::connect(proxy.addr());
    assert_eq!(
        publisher.call(&["PUBLISH", "reload:news", "before"]),
        ":1\r\n"
    );
    assert!(subscriber.read_reply().contains("before"));

    std::fs::write(&path, cluster_yaml()).unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    // The move is asynchronous: publish until the subscriber is counted on the cluster.
    wait_until(
        "a subscriber on the cluster",
        Duration::from_secs(5),
        || publisher.call(&["PUBLISH", "reload:news", "after"]) == ":1\r\n",
    );
    let message = subscriber.read_reply();
    assert!(message.contains("after"), "{message}");
    let info = publisher.call(&["INFO", "proxy"]);
    assert!(info.contains("proxy_upstream:cluster"), "{info}");
}

/// Reads from `stream` until `needle` shows up (or panics after a few seconds).
fn read_until_seen(stream: &mut TcpStream, needle: &str) -> String {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&out).contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} in {:?}",
            String::from_utf8_lossy(&out)
        );
        if let Ok(n) = common::read_some(stream, &mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Subscribers of `channel` over every cluster master (each node counts its own clients).
fn cluster_subscribers(channel: &str) -> i64 {
    shared_cluster()
        .masters()
        .iter()
        .map(|master| {
            let (_, count): (String, i64) =
                query(master, redis::cmd("PUBSUB").arg("NUMSUB").arg(channel)).unwrap();
            count
        })
        .sum()
}

#[test]
fn a_reload_to_the_cluster_moves_readiness_and_subscriptions_there() {
    let mut standalone = Standalone::start();
    let path = new_dir("gaps-reload").join("slotbridge.yaml");
    std::fs::write(&path, format!("standalone: \"{}\"\n", standalone.addr())).unwrap();
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    assert_eq!(http_get(proxy.admin_addr(), "/readyz").0, 200);

    // A subscriber from before the reload.
    let mut subscriber = TcpStream::connect(proxy.addr()).unwrap();
    subscriber
        .write_all(&resp_lines(&["SUBSCRIBE gaps:before"]))
        .unwrap();
    read_until_seen(&mut subscriber, "gaps:before\r\n:1\r\n");

    let seeds: Vec<String> = shared_cluster()
        .seeds()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect();
    std::fs::write(&path, format!("cluster: [{}]\n", seeds.join(", "))).unwrap();
    proxy.send_signal("HUP");
    wait_log(&proxy, "configuration reloaded", 1);
    // The old upstream goes away: readiness must look at the cluster now.
    standalone.kill();
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    assert_eq!(
        status, 200,
        "/readyz checks the cluster after the switch: {body}"
    );

    // A new subscription of the same client reaches the cluster, and so does the old one.
    subscriber
        .write_all(&resp_lines(&["SUBSCRIBE gaps:after"]))
        .unwrap();
    read_until_seen(&mut subscriber, "gaps:after\r\n:2\r\n");
    wait_until("cluster subscribers", Duration::from_secs(10), || {
        cluster_subscribers("gaps:after") > 0 && cluster_subscribers("gaps:before") > 0
    });
    let master = shared_cluster().masters()[0].clone();
    let _: i64 = query(&master, redis::cmd("PUBLISH").arg("gaps:after").arg("new")).unwrap();
    let _: i64 = query(&master, redis::cmd("PUBLISH").arg("gaps:before").arg("old")).unwrap();
    let seen = read_until_seen(&mut subscriber, "$3\r\nold\r\n");
    assert!(
        seen.contains("$10\r\ngaps:after\r\n$3\r\nnew\r\n"),
        "{seen:?}"
    );
}

/// The kernel's keepalive timer of the proxy's side of `client`'s connection, in whole
/// seconds to its first probe (`/proc/net/tcp`), or `None` when keepalive is off.
fn proxy_side_keepalive(proxy: &Proxy, client: &TcpStream) -> Option<u64> {
    fn hex(addr: std::net::SocketAddr) -> String {
        let std::net::SocketAddr::V4(addr) = addr else {
            panic!("an IPv4 loopback address: {addr}")
        };
        let ip = u32::from_le_bytes(addr.ip().octets());
        format!("{ip:08X}:{:04X}", addr.port())
    }
    let local = hex(proxy.addr().parse().unwrap());
    let remote = hex(client.local_addr().unwrap());
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let line = table
        .lines()
        .find(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str())
        })
        .unwrap_or_else(|| panic!("no {local} -> {remote} in /proc/net/tcp:\n{table}"));
    // `tr:tm->when`: timer 2 is the keepalive timer, its expiry in clock ticks (100 a second).
    let timer = line.split_whitespace().nth(5).unwrap();
    let (kind, when) = timer.split_once(':').unwrap();
    (kind == "02").then(|| u64::from_str_radix(when, 16).unwrap() / 100)
}

/// `tcp_keepalive` applies to new connections, as Redis's `tcp-keepalive` does, and a
/// reload changes it for those that connect after it (the proxy sets it on its listener,
/// whose clients inherit it).
#[test]
fn tcp_keepalive_set_by_a_reload_applies_to_new_connections() {
    let path = config_file(&format!("{}tcp_keepalive: 300\n", cluster_yaml()));
    let proxy = Proxy::start(&["--config", path.to_str().unwrap()]);
    let mut first = Raw::connect(proxy.addr());
    assert_eq!(first.call(&["PING"]), "+PONG\r\n");
    let near = |secs: Option<u64>, want: u64| secs.is_some_and(|s| s + 10 >= want && s <= want);
    let timer = proxy_side_keepalive(&proxy, &first.stream);
    assert!(near(timer, 300), "keepalive timer {timer:?}, not 300 s");
    for (reloads, (keepalive, want)) in [(100, Some(100)), (0, None)].into_iter().enumerate() {
        let text = format!("{}tcp_keepalive: {keepalive}\n", cluster_yaml());
        std::fs::write(&path, text).unwrap();
        proxy.send_signal("HUP");
        wait_log(&proxy, "configuration reloaded", reloads + 1);
        let mut next = Raw::connect(proxy.addr());
        assert_eq!(next.call(&["PING"]), "+PONG\r\n");
        let timer = proxy_side_keepalive(&proxy, &next.stream);
        match want {
            Some(want) => assert!(near(timer, want), "keepalive timer {timer:?}, not {want} s"),
            None => assert_eq!(timer, None, "keepalive on after tcp_keepalive: 0"),
        }
    }
    let timer = proxy_side_keepalive(&proxy, &first.stream);
    assert!(
        near(timer, 300),
        "the first client's keepalive moved: {timer:?}"
    );
}
