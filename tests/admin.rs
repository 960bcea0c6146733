//! The admin endpoint seen from outside: Prometheus metrics that move with real traffic
//! (MOVED after a slot migration, TRYAGAIN during one, CROSSSLOT), a well-formed exposition,
//! /healthz, /readyz against a cluster that loses a slot or a master, INFO's sections, and the
//! deployment files (compose, Prometheus with its alerting rules, Grafana provisioning).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{http_get, http_raw, new_dir, query, wait_until, Cluster, Proxy};

/// A Prometheus text exposition: every sample by its full series name (`name{labels}`).
struct Exposition {
    samples: BTreeMap<String, f64>,
}

impl Exposition {
    /// Parses and checks the format: each line a comment or `name{labels} value`; HELP and
    /// TYPE for every family; every name `slotbridge_[a-z0-9_]+`.
    fn parse(text: &str) -> Exposition {
        let mut helped = BTreeSet::new();
        let mut typed = BTreeMap::new();
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                helped.insert(name.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split(' ');
                let name = words.next().unwrap().to_string();
                let kind = words.next().unwrap_or_default().to_string();
                assert!(
                    ["counter", "gauge", "histogram", "summary"].contains(&kind.as_str()),
                    "{line}"
                );
                assert!(
                    typed.insert(name, kind).is_none(),
                    "a second TYPE line: {line}"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "unknown comment: {line}");
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value: {line}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad value: {line}"));
            let name = series.split('{').next().unwrap();
            assert!(is_metric_name(name), "bad name: {line}");
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(
                        labels.starts_with('{') && labels.ends_with('}'),
                        "bad labels: {line}"
                    );
                    for pair in labels[1..labels.len() - 1].split("\",") {
                        let (key, value) = pair
                            .split_once("=\"")
                            .unwrap_or_else(|| panic!("bad label: {line}"));
                        assert!(
                            key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                            "{line}"
                        );
                        assert!(!value.contains('\n'), "{line}");
                    }
                }
            }
            let family = family_of(name, &typed);
            assert!(typed.contains_key(family), "no TYPE for {family}: {line}");
            assert!(helped.contains(family), "no HELP for {family}: {line}");
            samples.insert(series.to_string(), value);
        }
        Exposition { samples }
    }

    /// A sample's value; 0 when the series does not exist (yet).
    fn value(&self, series: &str) -> f64 {
        self.samples.get(series).copied().unwrap_or(0.0)
    }

    fn has(&self, series: &str) -> bool {
        self.samples.contains_key(series)
    }
}

fn is_metric_name(name: &str) -> bool {
    name.strip_prefix("slotbridge_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// A histogram's samples belong to the family without `_bucket`, `_sum`, `_count`.
fn family_of<'a>(name: &'a str, typed: &BTreeMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if typed.get(base).is_some_and(|kind| kind == "histogram") {
                return base;
            }
        }
    }
    name
}

fn scrape(proxy: &Proxy) -> Exposition {
    let (status, body) = http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200, "{body}");
    if which("promtool") {
        check_with_promtool(&body);
    }
    Exposition::parse(&body)
}

fn which(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

fn check_with_promtool(body: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A proxy config file with the given YAML, for settings that have no flag.
fn config_file(yaml: &str) -> String {
    let path = new_dir("admin-config").join("slotbridge.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

fn commands(command: &str, outcome: &str) -> String {
    format!("slotbridge_commands_total{{command=\"{command}\",outcome=\"{outcome}\"}}")
}

/// Two keys of one slot (a hash tag), whose slot is not the given one.
fn tagged_pair(cluster: &Cluster, tag: &str) -> (u16, String, String) {
    let a = format!("{{{tag}}}:a");
    let b = format!("{{{tag}}}:b");
    (cluster.keyslot(&a), a, b)
}

#[test]
fn metrics_move_with_traffic_redirects_retries_and_crossslot() {
    let cluster = Cluster::start(3, 0);
    // No periodic refresh during the test, so the proxy meets MOVED; few retries, so a
    // TRYAGAIN costs a known number of them.
    let config = config_file(
        "topology:\n  refresh_interval_ms: 600000\nretry:\n  attempts: 3\n  base_backoff_ms: 5\n",
    );
    let proxy = Proxy::start(&["--config", &config, "--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    let before = scrape(&proxy);
    assert_eq!(before.value("slotbridge_slots_covered"), 16384.0);
    assert_eq!(before.value("slotbridge_masters"), 3.0);
    assert!(before.value("slotbridge_topology_refreshes_total{result=\"ok\"}") >= 1.0);

    // Plain traffic.
    for i in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("plain:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let wrong: redis::RedisResult<()> = redis::cmd("NOSUCHCOMMAND").arg("x").query(&mut con);
    assert!(wrong.is_err());
    // A pipeline in one write: its replies are counted together, each still counted once
    // and under its own outcome.
    let mut pipe = redis::pipe();
    for i in 0..10 {
        pipe.cmd("SET").arg(format!("piped:{i}")).arg(i).ignore();
    }
    for i in 0..5 {
        pipe.cmd("GET").arg(format!("piped:{i}")).ignore();
    }
    pipe.cmd("SET").arg("piped:text").arg("a").ignore();
    pipe.cmd("INCR").arg("piped:text").ignore();
    let piped: redis::RedisResult<()> = pipe.query(&mut con);
    assert!(piped.is_err(), "INCR of a non-number");
    // MSETNX is neither split nor emulated: keys in two slots are refused, as by Redis
    // Cluster.
    let (slot_a, key_a, _) = tagged_pair(&cluster, "left");
    let (slot_b, key_b, _) = tagged_pair(&cluster, "right");
    assert_ne!(slot_a, slot_b);
    let refused: redis::RedisResult<i64> = redis::cmd("MSETNX")
        .arg(&key_a)
        .arg("1")
        .arg(&key_b)
        .arg("2")
        .query(&mut con);
    let refused = refused.unwrap_err();
    assert_eq!(refused.code(), Some("CROSSSLOT"), "{refused}");

    // MOVED: move a key's slot behind the proxy's back, then read the key through it.
    let (moved_slot, moved_key, _) = tagged_pair(&cluster, "moving");
    let _: () = redis::cmd("SET")
        .arg(&moved_key)
        .arg("v")
        .query(&mut con)
        .unwrap();
    let owner = cluster.node_for_slot(moved_slot);
    let target = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    cluster.migrate_slot(moved_slot, &target);
    let got: String = redis::cmd("GET").arg(&moved_key).query(&mut con).unwrap();
    assert_eq!(got, "v");

    // TRYAGAIN: a multi-key command on a slot half-way through a migration, one key on
    // each side. Redis answers TRYAGAIN until the move ends; the proxy retries `attempts`
    // times and then passes the error on.
    let (half_slot, half_a, half_b) = tagged_pair(&cluster, "halfway");
    let _: () = redis::cmd("MSET")
        .arg(&half_a)
        .arg("1")
        .arg(&half_b)
        .arg("2")
        .query(&mut con)
        .unwrap();
    let half_owner = cluster.node_for_slot(half_slot);
    let half_target = cluster
        .masters()
        .into_iter()
        .find(|m| *m != half_owner)
        .unwrap();
    cluster.begin_migration(half_slot, &half_target);
    assert_eq!(cluster.migrate_keys(half_slot, &half_target, 1), 1);
    let tryagain: redis::RedisResult<Vec<String>> =
        redis::cmd("MGET").arg(&half_a).arg(&half_b).query(&mut con);
    let tryagain = tryagain.unwrap_err();
    assert_eq!(tryagain.code(), Some("TRYAGAIN"), "{tryagain}");
    cluster.migrate_keys(half_slot, &half_target, usize::MAX);
    cluster.finish_migration(half_slot, &half_target);

    let after = scrape(&proxy);
    let delta = |series: &str| after.value(series) - before.value(series);
    assert_eq!(delta(&commands("set", "ok")), 32.0);
    assert_eq!(delta(&commands("get", "ok")), 6.0);
    assert_eq!(delta(&commands("incr", "error")), 1.0);
    assert_eq!(delta(&commands("mset", "ok")), 1.0);
    assert_eq!(delta(&commands("unknown", "error")), 1.0);
    assert_eq!(delta(&commands("msetnx", "crossslot")), 1.0);
    assert_eq!(delta(&commands("mget", "error")), 1.0);
    assert_eq!(delta("slotbridge_crossslot_refusals_total"), 1.0);
    assert_eq!(delta("slotbridge_redirects_total{kind=\"moved\"}"), 1.0);
    assert_eq!(delta("slotbridge_retries_total{reason=\"tryagain\"}"), 3.0);
    assert_eq!(
        delta("slotbridge_command_duration_seconds_count{command=\"set\"}"),
        32.0
    );
    let le_1s = "slotbridge_command_duration_seconds_bucket{command=\"set\",le=\"1\"}";
    let le_100us = "slotbridge_command_duration_seconds_bucket{command=\"set\",le=\"0.0001\"}";
    assert!(
        after.has(le_1s) && after.has(le_100us),
        "buckets 100 µs .. 1 s"
    );
    let le_inf = "slotbridge_command_duration_seconds_bucket{command=\"set\",le=\"+Inf\"}";
    assert_eq!(
        after.value(le_inf),
        after.value("slotbridge_command_duration_seconds_count{command=\"set\"}")
    );
    assert!(after.value(le_100us) <= after.value(le_1s));
    assert!(after.value("slotbridge_command_duration_seconds_sum{command=\"set\"}") > 0.0);
    // A MOVED asks for a refresh, which runs in the background (rate-limited): wait for it.
    let refreshes = "slotbridge_topology_refreshes_total{result=\"ok\"}";
    wait_until(
        "a topology refresh after a MOVED",
        Duration::from_secs(5),
        || scrape(&proxy).value(refreshes) > before.value(refreshes),
    );
    assert!(after.value("slotbridge_client_connections") >= 1.0);
    assert!(delta("slotbridge_client_bytes_received_total") > 0.0);
    assert!(delta("slotbridge_client_bytes_sent_total") > 0.0);
    for master in cluster.masters() {
        let series = format!("slotbridge_backend_connections{{node=\"{master}\"}}");
        assert!(after.value(&series) >= 1.0, "{series}");
    }
    // Only table names and "unknown" become labels, never what the client sent.
    assert!(!after
        .samples
        .keys()
        .any(|series| series.to_ascii_lowercase().contains("nosuchcommand")));
}

/// The open-connections gauge and the connections counter follow clients that come and go
/// (the process totals, published at each scrape).
#[test]
fn client_connection_metrics_follow_clients_that_come_and_go() {
    let proxy = Proxy::start(&["--cluster", &common::shared_cluster().seeds_arg()]);
    proxy.wait_no_clients();
    let total = "slotbridge_client_connections_total";
    let before = scrape(&proxy);
    assert!(before.has("slotbridge_client_connections") && before.has(total));
    let mut clients: Vec<common::Raw> =
        (0..5).map(|_| common::Raw::connect(proxy.addr())).collect();
    for client in &mut clients {
        assert_eq!(client.call(&["PING"]), "+PONG\r\n");
    }
    let open = scrape(&proxy);
    assert_eq!(open.value("slotbridge_client_connections"), 5.0);
    assert_eq!(open.value(total) - before.value(total), 5.0);
    drop(clients);
    proxy.wait_no_clients();
    assert_eq!(scrape(&proxy).value(total) - before.value(total), 5.0);
}

#[test]
fn health_readiness_and_http_edges() {
    let cluster = Cluster::start(3, 0);
    let config = config_file("topology:\n  refresh_interval_ms: 300\n");
    let proxy = Proxy::start(&["--config", &config, "--cluster", &cluster.seeds_arg()]);
    let admin = proxy.admin_addr();

    assert_eq!(http_get(admin, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(http_get(admin, "/nope").0, 404);
    assert_eq!(
        http_raw(
            admin,
            b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        )
        .0,
        405
    );
    assert_eq!(http_raw(admin, b"\x16\x03\x01garbage\r\n\r\n").0, 400);
    // A 405 names the method its path takes, as RFC 9110 asks.
    for (request, allow) in [
        (&b"POST /metrics HTTP/1.1\r\n\r\n"[..], "Allow: GET\r\n"),
        (&b"GET /reload HTTP/1.1\r\n\r\n"[..], "Allow: POST\r\n"),
    ] {
        let mut stream = TcpStream::connect(admin).unwrap();
        stream.write_all(request).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(
            response.starts_with("HTTP/1.1 405 ") && response.contains(allow),
            "{response}"
        );
    }
    // A request head split over several writes is still one request.
    {
        let mut stream = TcpStream::connect(admin).unwrap();
        stream.write_all(b"GET /hea").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        stream.write_all(b"lthz HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        stream.write_all(b"\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    }
    // An endless header is cut off, and the server keeps serving.
    let huge = format!("GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(http_raw(admin, huge.as_bytes()).0, 431);
    assert_eq!(http_get(admin, "/healthz").0, 200);

    wait_for_readyz(admin, 200, "");

    // One slot unassigned everywhere: the slot map no longer covers the cluster.
    let slot = cluster.keyslot("readiness");
    let owner = cluster.node_for_slot(slot);
    let owner_id = cluster.node_id(&owner);
    for master in cluster.masters() {
        let _: () = query(&master, redis::cmd("CLUSTER").arg("DELSLOTS").arg(slot)).unwrap();
    }
    wait_for_readyz(admin, 503, "16383 of 16384");
    let _: () = query(&owner, redis::cmd("CLUSTER").arg("ADDSLOTS").arg(slot)).unwrap();
    for master in cluster.masters() {
        // Bump the owner's claim so every node takes it (the others forgot the slot).
        let _: () = query(
            &master,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&owner_id),
        )
        .unwrap();
    }
    wait_for_readyz(admin, 200, "");

    // A master that is gone makes the proxy unready while the slot map still names it.
    let victim = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    cluster.kill_node(&victim);
    let body = wait_for_readyz(admin, 503, &victim);
    assert!(
        body.contains("unreachable") || body.contains("PING"),
        "{body}"
    );
    // Liveness is not readiness.
    assert_eq!(http_get(admin, "/healthz").0, 200);
}

/// Polls `/readyz` until it answers `status` with a body containing `needle`; returns the body.
fn wait_for_readyz(admin: &str, status: u16, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = http_get(admin, "/readyz");
        if got == status && body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {got} {body:?}, wanted {status} with {needle:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// INFO text through the proxy, as a map of section name -> lines.
fn info_sections(con: &mut redis::Connection, args: &[&str]) -> BTreeMap<String, Vec<String>> {
    let text: String = redis::cmd("INFO").arg(args).query(con).unwrap();
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in text.split("\r\n") {
        if let Some(name) = line.strip_prefix("# ") {
            current = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
        } else if !line.is_empty() {
            let name = current.clone().expect("line before any section");
            sections.entry(name).or_default().push(line.to_string());
        }
    }
    sections
}

fn field<'a>(lines: &'a [String], name: &str) -> Option<&'a str> {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
}

#[test]
fn info_sums_the_keyspace_of_every_master() {
    let cluster = common::shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    for i in 0..30 {
        let mut set = redis::cmd("SET");
        set.arg(format!("info:{i}")).arg(i);
        if i % 3 == 0 {
            set.arg("EX").arg(1000);
        }
        let _: () = set.query(&mut con).unwrap();
    }
    // The expected totals come from the masters themselves; other tests write to them
    // too, so the proxy's sums lie between the masters' read before and after.
    let masters_keyspace = || {
        let (mut keys, mut expires) = (0i64, 0i64);
        for master in cluster.masters() {
            keys += query::<i64>(&master, &redis::cmd("DBSIZE")).unwrap();
            let text: String = query(&master, redis::cmd("INFO").arg("keyspace")).unwrap();
            expires += text
                .split(',')
                .find_map(|f| f.strip_prefix("expires="))
                .map(|n| n.trim().parse::<i64>().unwrap())
                .unwrap_or(0);
        }
        (keys, expires)
    };
    let before = masters_keyspace();
    assert!(before.0 >= 30 && before.1 >= 10, "{before:?}");

    let all = info_sections(&mut con, &[]);
    let after = masters_keyspace();
    for section in ["Server", "Clients", "Keyspace", "Cluster", "Proxy"] {
        assert!(all.contains_key(section), "INFO lacks # {section}: {all:?}");
    }
    assert_eq!(field(&all["Cluster"], "cluster_enabled"), Some("0"));
    // What a client of one Redis reads about the server it talks to.
    assert_eq!(field(&all["Server"], "redis_mode"), Some("standalone"));
    let port = proxy.addr().rsplit_once(':').unwrap().1;
    assert_eq!(field(&all["Server"], "tcp_port"), Some(port));
    let db0 = field(&all["Keyspace"], "db0").expect("db0 line");
    let counts: Vec<i64> = db0
        .split(',')
        .take(2)
        .map(|f| f.split_once('=').unwrap().1.parse().unwrap())
        .collect();
    let (lowest, highest) = (before.0.min(after.0), before.0.max(after.0));
    assert!(
        (lowest..=highest).contains(&counts[0])
            && (before.1.min(after.1)..=before.1.max(after.1)).contains(&counts[1]),
        "{db0}: the masters had (keys, expires) {before:?} before and {after:?} after"
    );
    let proxy_section = &all["Proxy"];
    assert_eq!(field(proxy_section, "proxy_masters"), Some("3"));
    assert_eq!(field(proxy_section, "proxy_slots_covered"), Some("16384"));
    assert_eq!(
        field(proxy_section, "proxy_version"),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let clients: i64 = field(proxy_section, "proxy_connected_clients")
        .unwrap()
        .parse()
        .unwrap();
    assert!(clients >= 1);
    for name in [
        "proxy_uptime_in_seconds",
        "proxy_redirects_moved",
        "proxy_redirects_ask",
        "proxy_retries",
        "proxy_topology_refreshes_ok",
    ] {
        assert!(field(proxy_section, name).is_some(), "{name}");
    }

    let only_keyspace = info_sections(&mut con, &["keyspace"]);
    assert_eq!(
        only_keyspace.keys().collect::<Vec<_>>(),
        ["Keyspace"],
        "{only_keyspace:?}"
    );
    let only_proxy = info_sections(&mut con, &["PROXY"]);
    assert_eq!(only_proxy.keys().collect::<Vec<_>>(), ["Proxy"]);
    let server = info_sections(&mut con, &["server"]);
    assert_eq!(server.keys().collect::<Vec<_>>(), ["Server"]);
    let everything = info_sections(&mut con, &["everything"]);
    assert!(everything.contains_key("Proxy") && everything.contains_key("Keyspace"));
    assert!(everything.contains_key("Commandstats"), "{everything:?}");
}

/// `section` of each master's `INFO section`, one map per master.
fn masters_section(cluster: &Cluster, section: &str) -> Vec<BTreeMap<String, String>> {
    cluster
        .masters()
        .iter()
        .map(|master| {
            let text: String = query(master, redis::cmd("INFO").arg(section)).unwrap();
            text.lines()
                .filter_map(|line| line.trim_end().split_once(':'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// A `k=v` count inside a commandstats or errorstats value.
fn count_in(value: &str, key: &str) -> u64 {
    value
        .split(',')
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn info_memory_is_the_clusters_and_info_clients_the_proxys() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&[
        "--cluster",
        &cluster.seeds_arg(),
        "--config",
        &config_file("maxclients: 77\n"),
    ]);
    let mut con = proxy.connect();
    for (master, megabytes) in cluster.masters().iter().zip([100, 200, 300]) {
        let _: () = query(
            master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory")
                .arg(format!("{megabytes}mb")),
        )
        .unwrap();
    }
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut con)
        .unwrap();
    let memory = info_sections(&mut con, &["memory"]);
    let memory = &memory["Memory"];
    let masters = masters_section(&cluster, "memory");
    assert_eq!(field(memory, "maxmemory"), Some("629145600"), "{memory:?}");
    assert_eq!(field(memory, "maxmemory_human"), Some("600.00M"));
    // The proxy loaded the script on every master; the dataset holds it once.
    assert!(masters.iter().all(|m| m["number_of_cached_scripts"] == "1"));
    assert_eq!(field(memory, "number_of_cached_scripts"), Some("1"));
    let used: f64 = field(memory, "used_memory").unwrap().parse().unwrap();
    let summed: f64 = masters
        .iter()
        .map(|m| m["used_memory"].parse::<f64>().unwrap())
        .sum();
    assert!(
        (used - summed).abs() < summed * 0.05,
        "used_memory {used} through the proxy, {summed} summed over the masters"
    );
    assert_eq!(
        field(memory, "maxmemory_policy"),
        Some(masters[0]["maxmemory_policy"].as_str())
    );

    let clients = |con: &mut redis::Connection| info_sections(con, &["clients"])["Clients"].clone();
    let before = clients(&mut con);
    assert_eq!(field(&before, "maxclients"), Some("77"), "{before:?}");
    assert_eq!(field(&before, "cluster_connections"), Some("0"));
    assert_eq!(field(&before, "blocked_clients"), Some("0"));
    let blocked = blpop_in_background(&proxy, "info:blocked", 5);
    wait_until(
        "the BLPOP counted as blocked",
        Duration::from_secs(4),
        || field(&clients(&mut con), "blocked_clients") == Some("1"),
    );
    assert_eq!(field(&clients(&mut con), "connected_clients"), Some("2"));
    let _: i64 = redis::cmd("RPUSH")
        .arg("info:blocked")
        .arg("x")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        blocked.join().unwrap(),
        Some(("info:blocked".to_owned(), "x".to_owned()))
    );
    assert_eq!(field(&clients(&mut con), "blocked_clients"), Some("0"));
}

#[test]
fn info_stats_commandstats_and_errorstats_are_the_clusters() {
    let cluster = common::shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    for i in 0..60 {
        let key = format!("stats:{i}");
        let _: () = redis::cmd("SET").arg(&key).arg(i).query(&mut con).unwrap();
        let _: i64 = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        let wrong: redis::RedisResult<i64> = redis::cmd("LPUSH").arg(&key).arg(1).query(&mut con);
        assert!(wrong.is_err());
    }
    let sum = |maps: &[BTreeMap<String, String>],
               read: &dyn Fn(&BTreeMap<String, String>) -> u64| {
        maps.iter().map(read).sum::<u64>()
    };
    let hits = |m: &BTreeMap<String, String>| m["keyspace_hits"].parse::<u64>().unwrap();
    let gets = |m: &BTreeMap<String, String>| count_in(&m["cmdstat_get"], "calls");
    let wrongtype = |m: &BTreeMap<String, String>| count_in(&m["errorstat_WRONGTYPE"], "count");

    // Other tests share these masters, so the proxy's sums are bracketed by the masters'
    // sums read just before and just after.
    let (stats_before, commands_before, errors_before) = (
        masters_section(cluster, "stats"),
        masters_section(cluster, "commandstats"),
        masters_section(cluster, "errorstats"),
    );
    for (what, maps, read) in [
        ("keyspace_hits", &stats_before, &hits as &dyn Fn(&_) -> u64),
        ("GET calls", &commands_before, &gets),
        ("WRONGTYPE errors", &errors_before, &wrongtype),
    ] {
        assert!(
            maps.iter().all(|m| read(m) > 0),
            "every master served some of the {what}: {maps:?}"
        );
    }
    let all = info_sections(&mut con, &["all"]);
    let (stats_after, commands_after, errors_after) = (
        masters_section(cluster, "stats"),
        masters_section(cluster, "commandstats"),
        masters_section(cluster, "errorstats"),
    );
    let through_proxy = |section: &str, name: &str, key: Option<&str>| -> u64 {
        let value = field(&all[section], name).unwrap_or_else(|| panic!("{name} in {all:?}"));
        match key {
            Some(key) => count_in(value, key),
            None => value.parse().unwrap(),
        }
    };
    for (got, before, after, what) in [
        (
            through_proxy("Stats", "keyspace_hits", None),
            sum(&stats_before, &hits),
            sum(&stats_after, &hits),
            "keyspace_hits",
        ),
        (
            through_proxy("Commandstats", "cmdstat_get", Some("calls")),
            sum(&commands_before, &gets),
            sum(&commands_after, &gets),
            "cmdstat_get calls",
        ),
        (
            through_proxy("Errorstats", "errorstat_WRONGTYPE", Some("count")),
            sum(&errors_before, &wrongtype),
            sum(&errors_after, &wrongtype),
            "errorstat_WRONGTYPE count",
        ),
    ] {
        assert!(
            before <= got && got <= after,
            "{what}: the proxy says {got}, the masters summed {before} before and {after} after"
        );
    }
    let per_call = field(&all["Commandstats"], "cmdstat_get")
        .unwrap()
        .split(',')
        .find_map(|f| f.strip_prefix("usec_per_call="))
        .unwrap()
        .parse::<f64>()
        .unwrap();
    let (calls, usec) = (
        through_proxy("Commandstats", "cmdstat_get", Some("calls")),
        through_proxy("Commandstats", "cmdstat_get", Some("usec")),
    );
    assert!(
        (per_call - usec as f64 / calls as f64).abs() < 0.01,
        "usec_per_call {per_call} is not usec {usec} / calls {calls}"
    );

    // Connections are the proxy's own, as connected_clients is.
    let received = |con: &mut redis::Connection| -> u64 {
        field(
            &info_sections(con, &["stats"])["Stats"],
            "total_connections_received",
        )
        .unwrap()
        .parse()
        .unwrap()
    };
    let first = received(&mut con);
    let more: Vec<redis::Connection> = (0..3).map(|_| proxy.connect()).collect();
    assert_eq!(received(&mut con), first + 3);
    drop(more);
}

#[test]
fn metrics_can_be_switched_off() {
    let cluster = common::shared_cluster();
    let config = config_file("admin:\n  metrics: false\n");
    let proxy = Proxy::start(&["--config", &config, "--cluster", &cluster.seeds_arg()]);
    let _: () = redis::cmd("SET")
        .arg("off")
        .arg(1)
        .query(&mut proxy.connect())
        .unwrap();
    assert_eq!(http_get(proxy.admin_addr(), "/metrics").0, 404);
    assert_eq!(http_get(proxy.admin_addr(), "/healthz").0, 200);
}

#[test]
fn healthcheck_subcommand_probes_healthz() {
    let cluster = common::shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let run = |addr: &str| {
        Command::new(env!("CARGO_BIN_EXE_slotbridge"))
            .args(["healthcheck", "--admin-listen", addr])
            .output()
            .unwrap()
            .status
    };
    assert!(run(proxy.admin_addr()).success());
    let closed = format!("127.0.0.1:{}", common::free_port());
    assert!(!run(&closed).success());
}

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn deployment_files_are_consistent() {
    use serde_yaml_ng::Value;
    let compose: Value = serde_yaml_ng::from_str(&repo_file("deploy/docker-compose.yml")).unwrap();
    let services = compose["services"].as_mapping().expect("services");
    let names: Vec<&str> = services.keys().filter_map(Value::as_str).collect();
    let redis_nodes = names.iter().filter(|n| n.starts_with("redis-")).count();
    assert!(redis_nodes >= 3, "{names:?}");
    for needed in ["cluster-create", "slotbridge", "prometheus", "grafana"] {
        assert!(names.contains(&needed), "{needed} missing from {names:?}");
    }
    let proxy = &compose["services"]["slotbridge"];
    let command: Vec<&str> = proxy["command"]
        .as_sequence()
        .expect("slotbridge command list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(command.contains(&"--admin-listen"), "{command:?}");
    assert!(proxy["healthcheck"]["test"].is_sequence());
    let prometheus_config: Value =
        serde_yaml_ng::from_str(&repo_file("deploy/prometheus.yml")).unwrap();
    let targets = &prometheus_config["scrape_configs"][0]["static_configs"][0]["targets"][0];
    assert_eq!(targets.as_str(), Some("slotbridge:9121"));
    check_observability_mounts(&compose, &prometheus_config);

    let dockerfile = repo_file("Dockerfile");
    for needed in [
        "FROM rust:",
        "cargo build --release",
        "FROM debian:bookworm-slim",
        "USER ",
        "EXPOSE 6380 9121",
        "HEALTHCHECK",
        "healthcheck",
    ] {
        assert!(dockerfile.contains(needed), "Dockerfile lacks {needed:?}");
    }
}

/// `(host path, container path)` of each `./host:/container[:ro]` volume of `service`,
/// after checking that the host path exists (relative to `deploy/`).
fn compose_mounts(compose: &serde_yaml_ng::Value, service: &str) -> Vec<(String, String)> {
    let volumes = compose["services"][service]["volumes"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{service} has no volumes"));
    volumes
        .iter()
        .map(|volume| {
            let volume = volume.as_str().expect("short volume syntax");
            let mut parts = volume.split(':');
            let (host, container) = (parts.next().unwrap(), parts.next().unwrap_or_default());
            let local = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("deploy")
                .join(host);
            assert!(
                local.exists(),
                "{service} mounts {host}, which does not exist"
            );
            (host.to_string(), container.to_string())
        })
        .collect()
}

/// Prometheus loads the alerting rules it mounts; Grafana mounts its provisioning, whose
/// data source is the Prometheus service and whose dashboard provider reads the directory
/// the dashboard is mounted in.
fn check_observability_mounts(compose: &serde_yaml_ng::Value, prometheus: &serde_yaml_ng::Value) {
    use serde_yaml_ng::Value;
    let mounted_at = |service: &str, host: &str| {
        compose_mounts(compose, service)
            .into_iter()
            .find(|(from, _)| from == host)
            .unwrap_or_else(|| panic!("{service} does not mount {host}"))
            .1
    };
    let alerts = mounted_at("prometheus", "./prometheus/alerts.yml");
    let rule_files: Vec<&str> = prometheus["rule_files"]
        .as_sequence()
        .expect("rule_files")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(rule_files, [alerts.as_str()]);
    assert_eq!(
        mounted_at("prometheus", "./prometheus.yml"),
        "/etc/prometheus/prometheus.yml"
    );

    assert_eq!(
        mounted_at("grafana", "./grafana/provisioning"),
        "/etc/grafana/provisioning"
    );
    let dashboard = mounted_at("grafana", "./grafana/slotbridge.json");
    let provider: Value = serde_yaml_ng::from_str(&repo_file(
        "deploy/grafana/provisioning/dashboards/slotbridge.yml",
    ))
    .unwrap();
    let directory = provider["providers"][0]["options"]["path"]
        .as_str()
        .expect("path");
    assert_eq!(
        Path::new(&dashboard).parent(),
        Some(Path::new(directory)),
        "the provider reads {directory}, the dashboard is mounted at {dashboard}"
    );
    let datasources: Value = serde_yaml_ng::from_str(&repo_file(
        "deploy/grafana/provisioning/datasources/prometheus.yml",
    ))
    .unwrap();
    let source = &datasources["datasources"][0];
    assert_eq!(source["type"].as_str(), Some("prometheus"));
    assert_eq!(source["url"].as_str(), Some("http://prometheus:9090"));
    let ports = compose["services"]["prometheus"]["ports"][0].as_str();
    assert_eq!(ports, Some("9090:9090"));
}

/// A BLPOP of `key` through `proxy` on a connection of its own, waiting `seconds`.
fn blpop_in_background(
    proxy: &Proxy,
    key: &'static str,
    seconds: u64,
) -> std::thread::JoinHandle<Option<(String, String)>> {
    let client = proxy.client();
    std::thread::spawn(move || {
        let mut con = client.get_connection().unwrap();
        redis::cmd("BLPOP")
            .arg(key)
            .arg(seconds)
            .query(&mut con)
            .unwrap()
    })
}

/// Polls /metrics until `series` has `want`, or fails after a few seconds.
fn wait_for_value(proxy: &Proxy, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = scrape(proxy).value(series);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} stayed {now}, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A proxy in front of `cluster` with the shipped cluster:v1 profile for `prefix` and the
/// `yaml` configuration.
fn layout_proxy(cluster: &Cluster, prefix: &str, yaml: &str) -> Proxy {
    Proxy::start(&[
        "--cluster",
        &cluster.seeds_arg(),
        "--layout",
        "config/botmesh-cluster-v1.yaml",
        "--prefix",
        prefix,
        "--config",
        &config_file(yaml),
    ])
}

#[test]
fn a_renamed_key_whose_slot_has_no_master_is_counted_once() {
    let cluster = Cluster::start(3, 0);
    let proxy = layout_proxy(
        &cluster,
        "mun",
        "topology:\n  refresh_interval_ms: 300\nlayout:\n  allow_legacy_data: true\n",
    );
    let slot = cluster.keyslot("mun:{lk:l1}:l");
    for master in cluster.masters() {
        let _: () = query(&master, redis::cmd("CLUSTER").arg("DELSLOTS").arg(slot)).unwrap();
    }
    wait_for_readyz(proxy.admin_addr(), 503, "16383 of 16384");
    let before = scrape(&proxy);
    let mut con = proxy.connect();
    let refused = redis::cmd("SET")
        .arg("mun:lock:l1")
        .arg("t")
        .query::<()>(&mut con);
    assert!(refused.is_err(), "no master serves the slot: {refused:?}");
    let after = scrape(&proxy);
    // The batched path declines it (no master) and the planned path counts it.
    assert_eq!(
        after.value("slotbridge_layout_rewrites_total{family=\"lock\"}")
            - before.value("slotbridge_layout_rewrites_total{family=\"lock\"}"),
        1.0
    );
}

#[test]
fn layout_blocking_and_pubsub_series_move() {
    let proxy = layout_proxy(
        common::shared_cluster(),
        "mbm",
        "layout:\n  allow_legacy_data: true\n",
    );
    let before = scrape(&proxy);
    let mut con = proxy.client().get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("mbm:chat:c1")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("mbm:lock:l1")
        .arg("t")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("mbm:nosuchfamily")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("outside:key")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let after = scrape(&proxy);
    let delta = |series: &str| after.value(series) - before.value(series);
    assert_eq!(
        delta("slotbridge_layout_rewrites_total{family=\"chat\"}"),
        1.0
    );
    assert_eq!(
        delta("slotbridge_layout_rewrites_total{family=\"lock\"}"),
        1.0
    );
    assert_eq!(
        delta("slotbridge_layout_unmatched_keys_total{prefix=\"mbm\"}"),
        1.0
    );
    // Only the chat record is index-backed.
    assert_eq!(delta("slotbridge_layout_index_upkeep_total"), 1.0);

    // A client blocked in BLPOP is counted while it waits.
    let blocked = blpop_in_background(&proxy, "outside:list", 2);
    wait_for_value(&proxy, "slotbridge_blocked_clients", 1.0);
    assert_eq!(blocked.join().unwrap(), None, "BLPOP times out");
    wait_for_value(&proxy, "slotbridge_blocked_clients", 0.0);

    // A subscriber is counted while it is in subscribe mode.
    let mut sub_con = proxy.client().get_connection().unwrap();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("metrics:channel").unwrap();
    wait_for_value(&proxy, "slotbridge_pubsub_subscribers", 1.0);
    pubsub.unsubscribe("metrics:channel").unwrap();
    drop(pubsub);
    drop(sub_con);
    wait_for_value(&proxy, "slotbridge_pubsub_subscribers", 0.0);

    // RESET leaves subscribe mode: the client stops counting while still connected.
    let mut raw = common::Raw::connect(proxy.addr());
    raw.call(&["SUBSCRIBE", "metrics:channel"]);
    wait_for_value(&proxy, "slotbridge_pubsub_subscribers", 1.0);
    assert_eq!(raw.call(&["RESET"]), "+RESET\r\n");
    wait_for_value(&proxy, "slotbridge_pubsub_subscribers", 0.0);
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");
}
