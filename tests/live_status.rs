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

#[test]
fn a_paused_migration_resumed_by_the_admin_call_reports_its_progress_until_done() {
    let source = Standalone::start();
    let keys = fill_source(&source);
    let cluster = shared_cluster();
    let source_url = format!("migration.source=redis://{}", source.addr());
    let proxy = Proxy::start(&[
        "--cluster",
        &cluster.seeds_arg(),
        "--set",
        &source_url,
        "--set",
        "migration.paused=true",
    ]);
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
    let source_url = format!("migration.source=redis://{}", source.addr());
    let proxy = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        &source_url,
        "--set",
        "migration.paused=true",
    ]);
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
