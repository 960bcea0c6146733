//! The shipped Grafana dashboard (`deploy/grafana/slotbridge.json`) and Prometheus alerting
//! rules (`deploy/prometheus/alerts.yml`) checked against a real Prometheus: `promtool check
//! rules` passes; a Prometheus scraping a proxy in front of a real cluster, while the proxy
//! serves load that moves every series the panels use (errors, a MOVED, TRYAGAIN retries,
//! reloads, an output-limit disconnect, a refused client, a read timeout, a connect error,
//! layout rewrites...), answers every dashboard query with at least one series and every
//! alert expression without error; every rule is loaded and healthy, and the alerts this
//! load causes leave `inactive` while `SlotbridgeDown` does not.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    http_get, http_raw, new_dir, read_until_close, repo_path, require_prometheus_tool, url_encode,
    Cluster, Prometheus, Proxy, Raw,
};
use serde_json::Value;

/// The scrape job's name: the alert rules select `job="slotbridge"`, as deploy/prometheus.yml names it.
const JOB: &str = "slotbridge";
/// What `$__rate_interval` becomes: Grafana makes it at least four scrape intervals (1 s here).
const RATE_INTERVAL: &str = "15s";
/// How long the load's last series may take to show in every query (a rate needs 2 scrapes).
const SERIES_WAIT: Duration = Duration::from_secs(30);
/// The layout prefix the proxy translates.
const PREFIX: &str = "obs";
/// The proxy's output limit, and a value and a GET count whose replies far exceed it.
const OUTPUT_LIMIT: usize = 256 * 1024;
const BIG_VALUE: usize = 64 * 1024;
const GREEDY_GETS: usize = 400;
const MAXCLIENTS: usize = 12;

fn dashboard() -> Value {
    let path = repo_path("deploy/grafana/slotbridge.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `(panel title, expr)` of the dashboard, rows' nested panels included.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or_default();
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().expect("every target has an expr");
                out.push((title.to_string(), expr.to_string()));
            }
            walk(panel["panels"].as_array().map_or(&[], Vec::as_slice), out);
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().expect("panels"), &mut out);
    out
}

/// `(name, expr)` of every rule in the alerts file.
fn alert_rules() -> Vec<(String, String)> {
    let path = repo_path("deploy/prometheus/alerts.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("alerting rules only");
            let expr = rule["expr"].as_str().expect("expr");
            for annotation in ["summary", "description", "runbook"] {
                let text = rule["annotations"][annotation].as_str().unwrap_or_default();
                assert!(!text.trim().is_empty(), "{name} has no {annotation}");
            }
            out.push((name.to_string(), expr.to_string()));
        }
    }
    out
}

/// A dashboard expression with Grafana's variables replaced as Grafana would for one job
/// and one instance.
fn expand(expr: &str, instance: &str) -> String {
    let expanded = expr
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("${job}", JOB)
        .replace("$job", JOB)
        .replace("${instance}", instance)
        .replace("$instance", instance);
    assert!(!expanded.contains('$'), "a variable is left in {expanded}");
    expanded
}

#[test]
fn alert_rules_pass_promtool() {
    require_prometheus_tool("promtool");
    let path = repo_path("deploy/prometheus/alerts.yml");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool check rules: {text}");
    let rules = alert_rules().len();
    assert!(
        text.contains(&format!("SUCCESS: {rules} rules found")),
        "{text}"
    );
    for needed in [
        "SlotbridgeDown",
        "SlotbridgeNotReady",
        "SlotbridgeSlotsNotCovered",
        "SlotbridgeBackendConnectErrors",
        "SlotbridgeBackendReadTimeouts",
        "SlotbridgeRedirectStorm",
        "SlotbridgeOutputLimitDisconnects",
        "SlotbridgeReloadFailed",
        "SlotbridgeLayoutUnmatchedKeys",
        "SlotbridgeBufferedBytesNearBudget",
        "SlotbridgeMigrationEndHeld",
    ] {
        assert!(
            alert_rules().iter().any(|(name, _)| name == needed),
            "{needed} missing"
        );
    }
}

#[test]
fn dashboard_is_importable_with_a_datasource_variable() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "slotbridge");
    assert!(dashboard["title"].is_string() && dashboard["schemaVersion"].is_u64());
    assert!(
        dashboard["id"].is_null(),
        "an exported id would clash on import"
    );
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name} variable"))
    };
    let source = variable("DS_PROMETHEUS");
    assert_eq!(source["type"], "datasource");
    assert_eq!(source["query"], "prometheus");
    for name in ["job", "instance"] {
        assert_eq!(variable(name)["type"], "query");
        assert_eq!(variable(name)["datasource"]["uid"], "${DS_PROMETHEUS}");
    }
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "{panel}"
        );
        assert!(panel["gridPos"]["w"].is_u64(), "{panel}");
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${DS_PROMETHEUS}",
                "{}",
                panel["title"]
            );
            let targets = panel["targets"].as_array().expect("targets");
            let refs: BTreeSet<&str> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
            assert_eq!(refs.len(), targets.len(), "refIds of {}", panel["title"]);
            for target in targets {
                assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}");
                let expr = target["expr"].as_str().unwrap();
                assert!(
                    expr.contains("job=~\"$job\", instance=~\"$instance\""),
                    "{expr}"
                );
            }
        }
    }
    assert!(dashboard_queries(&dashboard).len() >= 30);
}

#[test]
fn dashboard_and_alerts_evaluate_against_a_real_prometheus() {
    require_prometheus_tool("prometheus");
    let cluster = Cluster::start(3, 0);
    let config = proxy_config();
    let proxy = Proxy::start(&[
        "--config",
        config.to_str().unwrap(),
        "--cluster",
        &cluster.seeds_arg(),
        "--layout",
        "config/botmesh-cluster-v1.yaml",
        "--prefix",
        PREFIX,
    ]);
    let prometheus = Prometheus::start(&prometheus_config(proxy.admin_addr()));
    wait_for_scrape(&prometheus);

    serve_load(&cluster, &proxy, &config);

    check_variables(&prometheus, proxy.admin_addr());
    check_dashboard_queries(&prometheus, proxy.admin_addr());
    check_alert_expressions(&prometheus);
    check_rules_loaded_and_alerts(&prometheus);
}

/// The proxy's configuration: settings that let the load reach every series cheaply.
fn proxy_config() -> std::path::PathBuf {
    let path = new_dir("observability-config").join("slotbridge.yaml");
    std::fs::write(&path, proxy_yaml(3)).unwrap();
    path
}

fn proxy_yaml(retry_attempts: u32) -> String {
    // No periodic refresh, so the proxy meets a MOVED; few retries, so a TRYAGAIN is quick.
    format!(
        "topology:\n  refresh_interval_ms: 600000\n\
         retry:\n  attempts: {retry_attempts}\n  base_backoff_ms: 5\n\
         backend:\n  read_timeout_ms: 300\n\
         maxclients: {MAXCLIENTS}\n\
         client_output_buffer_limit_bytes: {OUTPUT_LIMIT}\n\
         cross_slot_transactions: split\n\
         layout:\n  allow_legacy_data: true\n"
    )
}

fn prometheus_config(admin_addr: &str) -> String {
    let rules = repo_path("deploy/prometheus/alerts.yml");
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - \"{}\"\n\
         scrape_configs:\n  - job_name: {JOB}\n    metrics_path: /metrics\n    \
         static_configs:\n      - targets: [\"{admin_addr}\"]\n",
        rules.display()
    )
}

/// Waits until Prometheus has scraped the proxy (its `up` is 1).
fn wait_for_scrape(prometheus: &Prometheus) {
    let deadline = Instant::now() + SERIES_WAIT;
    loop {
        let answer = prometheus.query(&format!("up{{job=\"{JOB}\"}} == 1"));
        if answer["data"]["result"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the proxy: {answer}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A sample of `series` (`name{labels}` as the exposition writes it) from /metrics, 0 if absent.
fn metric(proxy: &Proxy, series: &str) -> f64 {
    let (status, body) = http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// Polls /metrics until `series` is at least `want`, doing `nudge` between polls.
fn wait_for_metric(proxy: &Proxy, series: &str, want: f64, mut nudge: impl FnMut()) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = metric(proxy, series);
        if now >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} stayed {now}, expected {want}"
        );
        nudge();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Traffic that makes every series of the dashboard exist (and move).
fn serve_load(cluster: &Cluster, proxy: &Proxy, config: &std::path::Path) {
    plain_traffic(proxy);
    cluster_events(cluster, proxy);
    reloads(proxy, config);
    client_limits(proxy);
    backend_failures(cluster, proxy);
}

/// Commands of several kinds and outcomes, a CROSSSLOT, a split transaction, a failed AUTH,
/// layout keys, a blocked client and a subscriber.
fn plain_traffic(proxy: &Proxy) {
    let mut raw = Raw::connect(proxy.addr());
    for i in 0..20 {
        assert_eq!(raw.call(&["SET", &format!("plain:{i}"), "1"]), "+OK\r\n");
        assert_eq!(raw.call(&["GET", &format!("plain:{i}")]), "$1\r\n1\r\n");
    }
    assert_eq!(raw.call(&["SET", "plain:text", "a"]), "+OK\r\n");
    assert!(raw.call(&["INCR", "plain:text"]).starts_with("-ERR"));
    assert!(raw
        .call(&["NOSUCHCOMMAND"])
        .starts_with("-ERR unknown command"));
    assert!(raw
        .call(&["MSETNX", "{left}:a", "1", "{right}:b", "2"])
        .starts_with("-CROSSSLOT"));
    // cross_slot_transactions: split runs one MULTI/EXEC per slot.
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(raw.call(&["SET", "{left}:t", "1"]), "+QUEUED\r\n");
    assert_eq!(raw.call(&["SET", "{right}:t", "2"]), "+QUEUED\r\n");
    assert_eq!(raw.call(&["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    assert!(raw
        .call(&["AUTH", "nobody", "wrong"])
        .starts_with("-WRONGPASS"));
    // Layout: a rewritten index-backed family, a plain family, a key no rule matches.
    for key in ["chat:c1", "lock:l1", "nosuchfamily"] {
        assert_eq!(
            raw.call(&["SET", &format!("{PREFIX}:{key}"), "v"]),
            "+OK\r\n"
        );
    }
    assert_eq!(raw.call(&["BLPOP", "plain:list", "0.1"]), "*-1\r\n");
    let mut subscriber = Raw::connect(proxy.addr());
    assert!(subscriber
        .call(&["SUBSCRIBE", "plain:channel"])
        .starts_with("*3\r\n"));
    assert!(subscriber
        .call(&["UNSUBSCRIBE", "plain:channel"])
        .starts_with("*3\r\n"));
    wait_for_metric(proxy, "slotbridge_split_transactions_total", 1.0, || {});
    wait_for_metric(proxy, "slotbridge_layout_index_upkeep_total", 1.0, || {});
}

/// A MOVED after a slot moves behind the proxy's back, and TRYAGAIN retries during a
/// migration.
fn cluster_events(cluster: &Cluster, proxy: &Proxy) {
    let mut raw = Raw::connect(proxy.addr());
    let moved_key = "{moving}:a";
    assert_eq!(raw.call(&["SET", moved_key, "v"]), "+OK\r\n");
    let slot = cluster.keyslot(moved_key);
    let owner = cluster.node_for_slot(slot);
    let target = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    cluster.migrate_slot(slot, &target);
    assert_eq!(raw.call(&["GET", moved_key]), "$1\r\nv\r\n");
    wait_for_metric(
        proxy,
        "slotbridge_redirects_total{kind=\"moved\"}",
        1.0,
        || {},
    );

    let (half_a, half_b) = ("{halfway}:a", "{halfway}:b");
    assert_eq!(raw.call(&["MSET", half_a, "1", half_b, "2"]), "+OK\r\n");
    let half_slot = cluster.keyslot(half_a);
    let half_owner = cluster.node_for_slot(half_slot);
    let half_target = cluster
        .masters()
        .into_iter()
        .find(|m| *m != half_owner)
        .unwrap();
    cluster.begin_migration(half_slot, &half_target);
    assert_eq!(cluster.migrate_keys(half_slot, &half_target, 1), 1);
    assert!(raw.call(&["MGET", half_a, half_b]).starts_with("-TRYAGAIN"));
    cluster.migrate_keys(half_slot, &half_target, usize::MAX);
    cluster.finish_migration(half_slot, &half_target);
    wait_for_metric(
        proxy,
        "slotbridge_retries_total{reason=\"tryagain\"}",
        1.0,
        || {},
    );
}

/// A reload that succeeds, one that fails (an unknown field), and one that succeeds again.
fn reloads(proxy: &Proxy, config: &std::path::Path) {
    let reload = || {
        let request = b"POST /reload HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(http_raw(proxy.admin_addr(), request).0, 202);
    };
    let ok = "slotbridge_config_reloads_total{result=\"ok\"}";
    let error = "slotbridge_config_reloads_total{result=\"error\"}";
    std::fs::write(config, proxy_yaml(4)).unwrap();
    reload();
    wait_for_metric(proxy, ok, 1.0, || {});
    std::fs::write(config, format!("{}bogus_field: 1\n", proxy_yaml(4))).unwrap();
    reload();
    wait_for_metric(proxy, error, 1.0, || {});
    std::fs::write(config, proxy_yaml(3)).unwrap();
    reload();
    wait_for_metric(proxy, ok, 2.0, || {});
}

/// A client over its output limit, and one over `maxclients`.
fn client_limits(proxy: &Proxy) {
    let mut setup = Raw::connect(proxy.addr());
    let value = "x".repeat(BIG_VALUE);
    assert_eq!(setup.call(&["SET", "plain:big", &value]), "+OK\r\n");
    // Far more replies than socket buffers and the limit hold, never read.
    let mut greedy = TcpStream::connect(proxy.addr()).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let get = b"*2\r\n$3\r\nGET\r\n$9\r\nplain:big\r\n";
    // The proxy stops reading and then closes; a write error is expected then.
    let _ = greedy.write_all(&get.repeat(GREEDY_GETS));
    let (_, closed) = read_until_close(&mut greedy, Duration::from_secs(10));
    assert!(
        closed,
        "the client over its output limit was not disconnected"
    );
    wait_for_metric(
        proxy,
        "slotbridge_client_output_limit_disconnects_total",
        1.0,
        || {},
    );

    let mut open = vec![setup];
    let refused = (0..MAXCLIENTS + 4).any(|_| {
        let mut client = Raw::connect(proxy.addr());
        let reply = client.call(&["PING"]);
        open.push(client);
        reply.starts_with("-ERR max number of clients reached")
    });
    assert!(refused, "no client was refused at maxclients {MAXCLIENTS}");
    drop(open);
    wait_for_metric(
        proxy,
        "slotbridge_client_connections_rejected_total",
        1.0,
        || {},
    );
}

/// A master that stops answering (a read timeout), then one that is gone (connect errors).
fn backend_failures(cluster: &Cluster, proxy: &Proxy) {
    let mut raw = Raw::connect(proxy.addr());
    let stalled_key = "{stall}:a";
    assert_eq!(raw.call(&["SET", stalled_key, "1"]), "+OK\r\n");
    let stalled = cluster.node_for_slot(cluster.keyslot(stalled_key));
    // Paused well under the cluster's node timeout, so nobody marks the master failing.
    cluster.set_node_paused(&stalled, true);
    let reply = raw.call(&["GET", stalled_key]);
    cluster.set_node_paused(&stalled, false);
    assert!(reply.contains("no reply within 300 ms"), "{reply}");
    let series = format!("slotbridge_backend_read_timeouts_total{{node=\"{stalled}\"}}");
    wait_for_metric(proxy, &series, 1.0, || {});

    let dead_key = "{dead}:a";
    assert_eq!(raw.call(&["SET", dead_key, "1"]), "+OK\r\n");
    let dead = cluster.node_for_slot(cluster.keyslot(dead_key));
    cluster.kill_node(&dead);
    let series = format!("slotbridge_backend_connect_errors_total{{node=\"{dead}\"}}");
    // Each GET finds the node gone and makes the proxy connect again.
    wait_for_metric(proxy, &series, 1.0, || {
        assert!(raw.call(&["GET", dead_key]).starts_with('-'));
    });
}

/// The `job` and `instance` variables' queries (`label_values(selector, label)`) find the
/// scraped proxy.
fn check_variables(prometheus: &Prometheus, instance: &str) {
    let dashboard = dashboard();
    for (name, want) in [("job", JOB), ("instance", instance)] {
        let variable = dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap();
        let definition = variable["definition"].as_str().unwrap();
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{definition}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        assert_eq!(label.trim(), name, "{definition}");
        let selector = selector.replace("$job", JOB);
        let path = format!(
            "/api/v1/label/{name}/values?match[]={}",
            url_encode(&selector)
        );
        let answer = prometheus.api(&path);
        assert_eq!(answer["status"], "success", "{definition}: {answer}");
        let values = answer["data"].as_array().unwrap();
        assert!(
            values.iter().any(|v| v == want),
            "{definition}: {values:?}, expected {want}"
        );
    }
}

/// Every dashboard query parses and, once the load's series have two scrapes, returns at
/// least one series (the live migration's panels: they parse).
fn check_dashboard_queries(prometheus: &Prometheus, instance: &str) {
    let queries = dashboard_queries(&dashboard());
    let deadline = Instant::now() + SERIES_WAIT;
    loop {
        let mut empty = Vec::new();
        for (title, expr) in &queries {
            let expr = expand(expr, instance);
            let answer = prometheus.query(&expr);
            assert_eq!(
                answer["status"], "success",
                "panel {title:?}: {expr}: {answer}"
            );
            // This proxy runs no live migration: those panels are checked for series
            // against one that does, in tests/live_status.rs.
            let migration = expr.contains("slotbridge_migration_");
            if !migration
                && answer["data"]["result"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            {
                empty.push(format!("{title:?}: {expr}"));
            }
        }
        if empty.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "dashboard queries with no series after {SERIES_WAIT:?}:\n{}",
            empty.join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every alert expression parses and evaluates.
fn check_alert_expressions(prometheus: &Prometheus) {
    for (name, expr) in alert_rules() {
        let answer = prometheus.query(&expr);
        assert_eq!(answer["status"], "success", "{name}: {expr}: {answer}");
    }
}

/// `/api/v1/rules` lists every rule of the file with health ok; the alerts this load
/// causes are pending or firing, and `SlotbridgeDown` is not.
fn check_rules_loaded_and_alerts(prometheus: &Prometheus) {
    let wanted: BTreeSet<String> = alert_rules().into_iter().map(|(name, _)| name).collect();
    let caused = [
        "SlotbridgeOutputLimitDisconnects",
        "SlotbridgeReloadFailed",
        "SlotbridgeLayoutUnmatchedKeys",
        "SlotbridgeBackendReadTimeouts",
    ];
    let deadline = Instant::now() + SERIES_WAIT;
    loop {
        let answer = prometheus.api("/api/v1/rules");
        assert_eq!(answer["status"], "success", "{answer}");
        let rules: Vec<&Value> = answer["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|group| group["rules"].as_array().unwrap())
            .collect();
        let state = |name: &str| {
            rules
                .iter()
                .find(|rule| rule["name"] == name)
                .map(|rule| rule["state"].as_str().unwrap_or_default().to_string())
        };
        let loaded: BTreeSet<String> = rules
            .iter()
            .filter_map(|rule| rule["name"].as_str().map(str::to_string))
            .collect();
        assert_eq!(loaded, wanted, "the rules Prometheus loaded");
        assert_eq!(state("SlotbridgeDown").as_deref(), Some("inactive"));
        let unhealthy: Vec<String> = rules
            .iter()
            .filter(|rule| rule["health"] != "ok")
            .map(|rule| format!("{} {} {}", rule["name"], rule["health"], rule["lastError"]))
            .collect();
        let quiet: Vec<&str> = caused
            .iter()
            .copied()
            .filter(|name| state(name).as_deref() == Some("inactive"))
            .collect();
        if unhealthy.is_empty() && quiet.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {SERIES_WAIT:?}: unhealthy rules {unhealthy:?}; alerts the load should \
             have caused but are inactive {quiet:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
