//! Operating a live migration against real servers: a standalone `redis-server` as the
//! source, a 3-master cluster as the target, the proxy binary migrating between them. Its
//! status is read where an operator reads it: `GET /migration`, `/metrics` and
//! `slotbridge migrate status`; it is paused and resumed through the admin endpoint.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{
    connect, http_get, http_raw, scan_all, shared_cluster, slotbridge, Cluster, Proxy, Standalone,
};
use serde_json::Value;
use slotbridge::live::names::claim_key;

/// Keys on the source: some hundreds, several `SCAN` pages of the walker.
const KEYS: u64 = 400;
/// How long the walker may take over them (it moves thousands a second on loopback).
const DONE_WITHIN: Duration = Duration::from_secs(60);

fn post(addr: &str, path: &str) -> (u16, String) {
    let request = format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n");
    http_raw(addr, request.as_bytes())
}

/// `GET /migration` as JSON; fails the test on any other answer.
fn migration(admin: &str) -> Value {
    let (status, body) = http_get(admin, "/migration");
    assert_eq!(status, 200, "GET /migration: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The value of the sample `series` (name and labels, exactly) in a metrics text.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

fn fill_source(source: &Standalone) -> BTreeSet<String> {
    fill_source_with(source, "status", KEYS)
}

/// `count` keys named `prefix:<i>` on the source.
fn fill_source_with(source: &Standalone, prefix: &str, count: u64) -> BTreeSet<String> {
    let mut conn = source.connect();
    let mut pipe = redis::pipe();
    let keys: BTreeSet<String> = (0..count).map(|i| format!("{prefix}:{i}")).collect();
    for key in &keys {
        pipe.cmd("SET")
            .arg(key)
            .arg(format!("value of {key}"))
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    keys
}

/// A proxy migrating from `source` to `cluster` with its walker paused by the config, and
/// `extra` settings.
fn paused_proxy(cluster: &Cluster, source: &Standalone, extra: &[&str]) -> Proxy {
    let source_url = format!("migration.source=redis://{}", source.addr());
    let seeds = cluster.seeds_arg();
    let mut args = vec![
        "--cluster",
        &seeds,
        "--set",
        &source_url,
        "--set",
        "migration.paused=true",
    ];
    for setting in extra {
        args.extend(["--set", *setting]);
    }
    Proxy::start(&args)
}

#[test]
fn a_paused_migration_resumed_by_the_admin_call_reports_its_progress_until_done() {
    let source = Standalone::start();
    let keys = fill_source(&source);
    let cluster = shared_cluster();
    let proxy = paused_proxy(cluster, &source, &[]);
    let admin = proxy.admin_addr();

    // Paused by the config: the walker has measured the source and waits.
    common::wait_until("the walker measured the source", DONE_WITHIN, || {
        migration(admin)["source_keys_at_start"] == KEYS
    });
    let paused = migration(admin);
    assert_eq!(paused["state"], "paused", "{paused}");
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["moved_by_walker"], 0, "{paused}");
    assert_eq!(
        paused["eta_seconds"],
        Value::Null,
        "nothing moved yet: {paused}"
    );
    // An admin pause of a paused walker keeps it paused.
    let (code, body) = post(admin, "/migration/pause");
    assert_eq!(code, 200, "{body}");
    let still: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&still["state"], &still["paused"]),
        (&"paused".into(), &true.into())
    );

    let (code, body) = post(admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    let resumed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(resumed["paused"], false, "{resumed}");
    assert_ne!(resumed["state"], "paused", "{resumed}");

    common::wait_until("the migration is done", DONE_WITHIN, || {
        migration(admin)["state"] == "done"
    });
    let done = migration(admin);
    let walker = done["moved_by_walker"].as_u64().unwrap();
    let already = done["already_moved"].as_u64().unwrap();
    assert_eq!(walker + already, KEYS, "{done}");
    assert_eq!(done["moved_on_touch"], 0, "no client touched a key: {done}");
    assert_eq!(done["errors"], 0, "{done}");
    assert_eq!(done["eta_seconds"], 0.0, "{done}");
    assert!(done["rate"].as_f64().unwrap() > 0.0, "{done}");
    // One walker move in 64 had its value compared on both sides before its finish.
    let checked = done["values_checked"].as_u64().unwrap();
    assert!(checked >= walker / 64 && checked >= 1, "{done}");
    assert_eq!(done["values_differ"], 0, "{done}");
    assert_eq!(done["end_held"], Value::Null, "{done}");
    let counts =
        format!("{KEYS} keys at the start: {KEYS} moved, 0 expired or evicted on the source");
    assert_eq!(done["counts"], counts.as_str(), "{done}");

    // The keys really moved: all on the target, none left on the source.
    let on_target: BTreeSet<String> = cluster
        .masters()
        .iter()
        .flat_map(|node| scan_all(&mut connect(node), "status:*"))
        .collect();
    assert_eq!(on_target, keys);
    let left = scan_all(&mut source.connect(), "*");
    assert!(left.is_empty(), "the source still holds {left:?}");

    let (code, metrics) = http_get(admin, "/metrics");
    assert_eq!(code, 200);
    let series = [
        (
            "slotbridge_migration_keys_moved_total{by=\"walker\"}",
            walker,
        ),
        ("slotbridge_migration_keys_moved_total{by=\"touch\"}", 0),
        ("slotbridge_migration_keys_already_moved_total", already),
        ("slotbridge_migration_source_keys", KEYS),
        ("slotbridge_migration_errors_total", 0),
        ("slotbridge_migration_state{state=\"done\"}", 1),
        ("slotbridge_migration_state{state=\"walking\"}", 0),
        ("slotbridge_migration_paused", 0),
    ];
    for (name, value) in series {
        assert_eq!(
            sample(&metrics, name),
            Some(value as f64),
            "{name} in\n{metrics}"
        );
    }
    assert!(sample(&metrics, "slotbridge_migration_passes_total").unwrap() >= 1.0);

    let out = slotbridge(&["migrate", "status", "--admin", admin, "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(status["state"], "done", "{stdout}");
    assert_eq!(status["moved_by_walker"], walker, "{stdout}");

    let out = slotbridge(&["migrate", "status", "--admin", admin]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("state: done\n"),
        "{text}"
    );
    assert!(text.contains(&format!("{walker} by the walker")), "{text}");
}

#[test]
fn a_proxy_that_does_not_walk_reports_what_every_proxys_moves_left() {
    // Proxy A walks at a pace that leaves time to look; proxy B's walker is paused, so all
    // B could count of its own is nothing.
    const FLEET_KEYS: u64 = 2_000;
    let source = Standalone::start();
    fill_source_with(&source, "fleet", FLEET_KEYS);
    let cluster = Cluster::start(3, 0);
    let source_url = format!("migration.source=redis://{}", source.addr());
    let seeds = cluster.seeds_arg();
    let walking = Proxy::start(&[
        "--cluster",
        &seeds,
        "--set",
        &source_url,
        "--set",
        "migration.max_keys_per_second=200",
    ]);
    let watching = Proxy::start(&[
        "--cluster",
        &seeds,
        "--set",
        &source_url,
        "--set",
        "migration.paused=true",
    ]);
    let (walking, watching) = (walking.admin_addr(), watching.admin_addr());

    common::wait_until("proxy A moved a quarter of the keys", DONE_WITHIN, || {
        migration(walking)["moved_by_walker"].as_u64() >= Some(FLEET_KEYS / 4)
    });
    // One snapshot of B's taken while the walk goes on (some keys still on the source).
    let mut seen = Value::Null;
    common::wait_until("proxy B sees the source fall", DONE_WITHIN, || {
        seen = migration(watching);
        let left = seen["source_keys_left"].as_u64();
        left.is_some_and(|left| left > 0 && left <= FLEET_KEYS * 3 / 4)
            && seen["source_rate"].as_f64() > Some(0.0)
    });
    assert_eq!(seen["state"], "paused", "{seen}");
    assert_eq!(seen["moved_by_walker"], 0, "{seen}");
    assert_eq!(seen["moved_on_touch"], 0, "{seen}");
    // The time left rests on the source's fall, not on B's own rate of nothing.
    assert!(seen["eta_seconds"].as_f64() > Some(0.0), "{seen}");
    let (code, metrics) = http_get(watching, "/metrics");
    assert_eq!(code, 200);
    let left = sample(&metrics, "slotbridge_migration_keys_left").expect("keys_left");
    assert!(left <= (FLEET_KEYS * 3 / 4) as f64, "{left} in\n{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "slotbridge_migration_keys_moved_total{by=\"walker\"}"
        ),
        Some(0.0),
        "B's own counters still count only B's moves"
    );
    let out = slotbridge(&["migrate", "status", "--admin", watching]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("left on the source, every proxy's moves counted"),
        "{text}"
    );

    // A finishes; B, looking at the source while paused, ends too, with nothing left.
    common::wait_until("proxy A is done", DONE_WITHIN, || {
        migration(walking)["state"] == "done"
    });
    common::wait_until("proxy B is done", DONE_WITHIN, || {
        migration(watching)["state"] == "done"
    });
    let done = migration(watching);
    assert_eq!(done["eta_seconds"], 0.0, "{done}");
    let (_, metrics) = http_get(watching, "/metrics");
    assert_eq!(
        sample(&metrics, "slotbridge_migration_keys_left"),
        Some(0.0)
    );
}

/// A key whose slot the target's master of slot 0 does not serve: pausing its master's
/// writes leaves the end's hold (a field of slot 0's fence) writable.
fn key_away_from_slot_0(cluster: &Cluster) -> String {
    let master_of_0 = cluster.node_for_slot(0);
    (0..)
        .map(|i| format!("behind:{i}"))
        .find(|key| cluster.node_for_slot(cluster.keyslot(key)) != master_of_0)
        .unwrap()
}

#[test]
fn a_value_written_behind_the_proxies_holds_every_proxys_end_until_resumed() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let key = key_away_from_slot_0(&cluster);
    common::query::<()>(source.addr(), redis::cmd("SET").arg(&key).arg("v1")).unwrap();
    let source_url = format!("migration.source=redis://{}", source.addr());
    let seeds = cluster.seeds_arg();
    let args = ["--cluster", &seeds, "--set", &source_url];
    let a = Proxy::start(&[&args[..], &["--set", "migration.paused=true"]].concat());
    let a_admin = a.admin_addr();
    common::wait_until("the walker measured the source", DONE_WITHIN, || {
        migration(a_admin)["source_keys_at_start"] == 1
    });

    // The target's master holds its writes, so the walker's seal waits there: the test
    // writes the source, as a bot still connected to it would, between the claim (which
    // read v1) and the check after the seal.
    let key_master = cluster.node_for_slot(cluster.keyslot(&key));
    common::query::<()>(
        &key_master,
        redis::cmd("CLIENT").arg(&["PAUSE", "1500", "WRITE"]),
    )
    .unwrap();
    let (code, body) = post(a_admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    let claim = claim_key(key.as_bytes());
    common::wait_until("the walker claimed the key", DONE_WITHIN, || {
        common::query::<i64>(source.addr(), redis::cmd("EXISTS").arg(&claim[..])).unwrap() == 1
    });
    common::query::<()>(source.addr(), redis::cmd("SET").arg(&key).arg("v2")).unwrap();

    common::wait_until("the check found the difference", DONE_WITHIN, || {
        migration(a_admin)["values_differ"] == 1
    });
    wait_source_empty(&source);
    // A second proxy joins; neither ends while the hold stands.
    let b = Proxy::start(&args);
    let b_admin = b.admin_addr();
    common::wait_until("proxy B met the hold", DONE_WITHIN, || {
        migration(b_admin)["end_held"].is_string()
    });
    std::thread::sleep(Duration::from_secs(3));
    for admin in [a_admin, b_admin] {
        let held = migration(admin);
        assert_ne!(held["state"], "done", "{held}");
        let why = held["end_held"].as_str().unwrap_or_default();
        assert!(why.contains(&key) && why.contains("differs"), "{held}");
    }
    let held = migration(a_admin);
    assert_eq!(held["values_checked"], 1, "{held}");
    let (_, metrics) = http_get(a_admin, "/metrics");
    for (series, value) in [
        ("slotbridge_migration_values_checked_total", 1.0),
        ("slotbridge_migration_values_differ_total", 1.0),
        ("slotbridge_migration_end_held", 1.0),
        ("slotbridge_migration_state{state=\"done\"}", 0.0),
    ] {
        assert_eq!(
            sample(&metrics, series),
            Some(value),
            "{series} in\n{metrics}"
        );
    }
    let text = slotbridge(&["migrate", "status", "--admin", a_admin]).stdout;
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("values checked: 1, 1 differed"), "{text}");
    assert!(text.contains("end held: "), "{text}");
    // Nothing of the hold shows through the proxy.
    let mut client = connect(a.addr());
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut client).unwrap();
    assert_eq!(names, std::slice::from_ref(&key));

    // An operator's resume on B releases the hold for both: both end.
    let (code, body) = post(b_admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    for admin in [a_admin, b_admin] {
        common::wait_until("the migration is done", DONE_WITHIN, || {
            migration(admin)["state"] == "done"
        });
        assert_eq!(migration(admin)["end_held"], Value::Null);
    }
    let value: String = redis::cmd("GET").arg(&key).query(&mut client).unwrap();
    assert_eq!(value, "v1", "the move carried what its claim read");
}

#[test]
fn keys_deleted_on_the_source_behind_the_proxies_hold_the_end_until_accepted() {
    let cluster = Cluster::start(3, 0);
    let source = Standalone::start();
    fill_source_with(&source, "counted", 200);
    let mut conn = source.connect();
    let mut pipe = redis::pipe();
    for i in 0..50 {
        pipe.cmd("SET")
            .arg(format!("expiring:{i}"))
            .arg("v")
            .arg("PX")
            .arg(3000)
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    let proxy = paused_proxy(&cluster, &source, &[]);
    let admin = proxy.admin_addr();
    common::wait_until("the walker measured the source", DONE_WITHIN, || {
        migration(admin)["source_keys_at_start"] == 250
    });
    // The baseline (250 keys) is taken; the 50 expire on the source without a move, and
    // 3 are deleted there behind the proxies.
    common::wait_until("the expiring keys expired", DONE_WITHIN, || {
        scan_all(&mut conn, "expiring:*").is_empty()
    });
    let _: i64 = redis::cmd("DEL")
        .arg(&["counted:1", "counted:2", "counted:3"])
        .query(&mut conn)
        .unwrap();
    let (code, body) = post(admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    common::wait_until("the count check held the end", DONE_WITHIN, || {
        migration(admin)["end_held"].is_string()
    });
    wait_source_empty(&source);
    let held = migration(admin);
    let why = held["end_held"].as_str().unwrap();
    assert!(
        why.starts_with("3 of the source's 250 keys at the start are not accounted for")
            && why.contains("197 moved, 50 expired or evicted"),
        "{held}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_ne!(migration(admin)["state"], "done");

    // An operator accepts the 3: the end comes, and the fences are compacted.
    let (code, body) = post(admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    common::wait_until("the migration is done", DONE_WITHIN, || {
        migration(admin)["state"] == "done"
    });
    let done = migration(admin);
    assert_eq!(done["end_held"], Value::Null);
    let counts = done["counts"].as_str().unwrap_or_default();
    assert!(
        counts.starts_with("250 keys at the start: 200 moved"),
        "{done}"
    );
}

#[test]
fn message_items_no_chat_log_lists_are_reported_and_still_served() {
    let source = Standalone::start();
    let mut conn = source.connect();
    let writes: &[&[&str]] = &[
        &["ZADD", "mybot:msgs:c1", "1", "m1"],
        &["SET", "mybot:msg:c1:m1", "listed"],
        &["SET", "mybot:msg:c1:m2", "orphan"],
        // A chat id with the separator in it: its item reads as chat `a:b`.
        &["ZADD", "mybot:msgs:a:b", "1", "m3"],
        &["SET", "mybot:msg:a:b:m3", "listed too"],
        // A log that moves (on touch) before the walker meets its item.
        &["ZADD", "mybot:msgs:c2", "1", "m4"],
        &["SET", "mybot:msg:c2:m4", "listed on the target"],
    ];
    for args in writes {
        let _: redis::Value = redis::cmd(args[0])
            .arg(&args[1..])
            .query(&mut conn)
            .unwrap();
    }
    let cluster = Cluster::start(3, 0);
    let layout = [
        "layout.file=config/botmesh-cluster-v1.yaml",
        "layout.prefixes=[mybot]",
    ];
    let proxy = paused_proxy(&cluster, &source, &layout);
    let admin = proxy.admin_addr();
    let mut client = connect(proxy.addr());
    let listed: Vec<String> = redis::cmd("ZRANGE")
        .arg(&["mybot:msgs:c2", "0", "-1"])
        .query(&mut client)
        .unwrap();
    assert_eq!(listed, ["m4"]);
    let (code, body) = post(admin, "/migration/resume");
    assert_eq!(code, 200, "{body}");
    common::wait_until("the migration is done", DONE_WITHIN, || {
        migration(admin)["state"] == "done"
    });
    let done = migration(admin);
    assert_eq!(done["orphan_items"], 1, "{done}");
    assert_eq!(
        done["orphan_item_names"],
        serde_json::json!(["mybot:msg:c1:m2"])
    );
    let (_, metrics) = http_get(admin, "/metrics");
    assert_eq!(
        sample(&metrics, "slotbridge_migration_orphan_items_total"),
        Some(1.0)
    );
    let text = slotbridge(&["migrate", "status", "--admin", admin]).stdout;
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("orphan message items: 1") && text.contains("mybot:msg:c1:m2"),
        "{text}"
    );
    // Every item, the orphan too, is served under its name.
    for (key, value) in [
        ("mybot:msg:c1:m1", "listed"),
        ("mybot:msg:c1:m2", "orphan"),
        ("mybot:msg:a:b:m3", "listed too"),
        ("mybot:msg:c2:m4", "listed on the target"),
    ] {
        let got: String = redis::cmd("GET").arg(key).query(&mut client).unwrap();
        assert_eq!(got, value, "{key}");
    }
}

fn wait_source_empty(source: &Standalone) {
    common::wait_until("the source is empty", DONE_WITHIN, || {
        scan_all(&mut source.connect(), "*").is_empty()
    });
}

#[test]
fn without_a_migration_the_endpoint_and_the_cli_say_so() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let admin = proxy.admin_addr();
    assert_eq!(
        http_get(admin, "/migration"),
        (404, "no live migration is configured\n".to_owned())
    );
    assert_eq!(post(admin, "/migration/resume").0, 404);
    let (code, metrics) = http_get(admin, "/metrics");
    assert_eq!(code, 200);
    assert!(!metrics.contains("slotbridge_migration_"), "{metrics}");
    let out = slotbridge(&["migrate", "pause", "--admin", admin]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("404: no live migration is configured"),
        "{stderr}"
    );
}

/// The dashboard's `(panel title, expr)` pairs that read the live migration's series.
fn migration_panel_queries() -> Vec<(String, String)> {
    let path = common::repo_path("deploy/grafana/slotbridge.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            if expr.contains("slotbridge_migration_") {
                out.push((panel["title"].to_string(), expr.to_owned()));
            }
        }
    }
    out
}

#[test]
fn the_dashboards_migration_panels_show_a_running_migration() {
    common::require_prometheus_tool("prometheus");
    let queries = migration_panel_queries();
    assert!(queries.len() >= 8, "{queries:?}");
    let source = Standalone::start();
    fill_source(&source);
    // A cluster of its own: the migration's records (its baseline) stay out of the shared
    // cluster, where another test's migration of the same binary runs to its end.
    let cluster = Cluster::start(3, 0);
    let proxy = paused_proxy(&cluster, &source, &[]);
    let prometheus = common::Prometheus::start(&format!(
        "global:\n  scrape_interval: 1s\n\
         scrape_configs:\n  - job_name: slotbridge\n    \
         static_configs:\n      - targets: [\"{}\"]\n",
        proxy.admin_addr()
    ));
    // A rate needs two scrapes of a series; the walker's counters exist from the start.
    common::wait_until("every migration panel has a series", DONE_WITHIN, || {
        queries.iter().all(|(title, expr)| {
            let expr = expr
                .replace("$__rate_interval", "15s")
                .replace("$job", "slotbridge")
                .replace("$instance", proxy.admin_addr());
            let answer = prometheus.query(&expr);
            assert_eq!(answer["status"], "success", "{title}: {expr}: {answer}");
            answer["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        })
    });
    let paused = prometheus.query("slotbridge_migration_state{state=\"paused\"} == 1");
    assert_eq!(
        paused["data"]["result"].as_array().map(Vec::len),
        Some(1),
        "{paused}"
    );
}
