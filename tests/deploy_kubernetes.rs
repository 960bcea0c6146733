//! The Kubernetes manifests of `deploy/kubernetes/`: each validates against the Kubernetes
//! 1.30 schemas (strict: no unknown field) with the `kubernetes-validate` package, and the
//! manifests agree with each other and with the proxy: the ConfigMap's file passes
//! `slotbridge check-config`, a proxy started on it serves the probe and scrape paths on the
//! admin port the probes name, the Deployment reads exactly the Secret's keys, and the Service,
//! PodDisruptionBudget and HorizontalPodAutoscaler select or target the Deployment's pods.
//!
//! The validator is the PyPI package `kubernetes-validate` (it ships the schemas of every
//! supported Kubernetes version, so it validates offline), installed into `.venv-tests` by
//! `scripts/test.sh`; a missing validator fails the test with the install command.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{http_get, new_dir, shared_cluster, slotbridge, Proxy};
use serde_yaml_ng::Value;

/// The Kubernetes version whose schemas the manifests must satisfy.
const KUBERNETES_VERSION: &str = "1.30.0";
/// The manifests, one resource each.
const MANIFESTS: &[&str] = &[
    "configmap.yaml",
    "deployment.yaml",
    "hpa.yaml",
    "pdb.yaml",
    "secret.yaml",
    "service.yaml",
];
/// The ConfigMap key that holds the proxy's configuration file.
const CONFIG_KEY: &str = "slotbridge.yaml";

fn manifest_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubernetes")
        .join(name)
}

fn load(name: &str) -> Value {
    let path = manifest_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

/// `value` at the path of mapping keys and sequence indices `path` (e.g. "spec.ports.0.name").
fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    let mut here = value;
    for step in path.split('.') {
        let next = match step.parse::<usize>() {
            Ok(index) => here.get(index),
            Err(_) => here.get(step),
        };
        here = next.unwrap_or_else(|| panic!("no {path} (missing at {step:?})"));
    }
    here
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    at(value, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

fn number(value: &Value, path: &str) -> u64 {
    at(value, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{path} is not a whole number"))
}

fn string_map(value: &Value, path: &str) -> BTreeMap<String, String> {
    serde_yaml_ng::from_value(at(value, path).clone())
        .unwrap_or_else(|e| panic!("{path} is not a map of strings: {e}"))
}

/// The Python interpreter that has `kubernetes-validate`: `SLOTBRIDGE_PYTHON` (set by
/// `scripts/test.sh`), else `.venv-tests/bin/python`. Panics saying how to install it.
fn validator_python() -> String {
    let python = std::env::var("SLOTBRIDGE_PYTHON")
        .unwrap_or_else(|_| format!("{}/.venv-tests/bin/python", env!("CARGO_MANIFEST_DIR")));
    let found = Command::new(&python)
        .args(["-c", "import kubernetes_validate"])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        found,
        "the Kubernetes schema validator is missing: no `kubernetes_validate` module in {python}. \
         Install it with scripts/test.sh, or: python3 -m venv .venv-tests && \
         .venv-tests/bin/pip install -r tests/python/requirements.txt"
    );
    python
}

/// Runs `kubernetes-validate --strict` on `files`; returns (success, its output).
fn validate(python: &str, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(python)
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            KUBERNETES_VERSION,
        ])
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} -m kubernetes_validate: {e}"));
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), output)
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let python = validator_python();
    let files: Vec<PathBuf> = MANIFESTS.iter().map(|m| manifest_path(m)).collect();
    let (ok, output) = validate(&python, &files);
    assert!(ok, "kubernetes-validate rejected the manifests:\n{output}");
    for manifest in MANIFESTS {
        assert!(
            output.contains(&format!("{manifest} passed")),
            "{manifest} was not validated:\n{output}"
        );
    }
    // The validator does reject what a cluster would: a misspelt probe field.
    let dir = new_dir("k8s-bad");
    let bad = dir.join("deployment.yaml");
    let broken = std::fs::read_to_string(manifest_path("deployment.yaml"))
        .unwrap()
        .replacen("periodSeconds:", "periodSecondz:", 1);
    std::fs::write(&bad, broken).unwrap();
    let (ok, output) = validate(&python, &[bad]);
    assert!(!ok && output.contains("periodSecondz"), "{output}");
}

/// The Deployment's only container.
fn container(deployment: &Value) -> &Value {
    let containers = at(deployment, "spec.template.spec.containers")
        .as_sequence()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The container port named `name`.
fn container_port(deployment: &Value, name: &str) -> u64 {
    let ports = at(container(deployment), "ports")
        .as_sequence()
        .expect("ports");
    let port = ports
        .iter()
        .find(|p| text(p, "name") == name)
        .unwrap_or_else(|| panic!("no container port named {name}"));
    number(port, "containerPort")
}

/// The proxy configuration the ConfigMap holds, and the port of its `addr_key` address.
fn config_port(config: &Value, addr_key: &str) -> u64 {
    let addr = text(config, addr_key);
    let (_, port) = addr.rsplit_once(':').expect("host:port");
    port.parse().expect("a port")
}

fn configmap_config() -> (String, Value) {
    let configmap = load("configmap.yaml");
    // The key holds a dot, so it is looked up whole.
    let file = at(&configmap, "data")
        .get(CONFIG_KEY)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no data.{CONFIG_KEY} in the ConfigMap"))
        .to_string();
    let config = serde_yaml_ng::from_str(&file).expect("the ConfigMap's file is YAML");
    (file, config)
}

#[test]
fn the_configmap_holds_a_valid_config_mounted_where_the_deployment_reads_it() {
    let (file, config) = configmap_config();
    let deployment = load("deployment.yaml");
    let secret = load("secret.yaml");
    let dir = new_dir("k8s-config");
    let path = dir.join(CONFIG_KEY);
    std::fs::write(&path, &file).unwrap();
    // The pod gets requirepass from the Secret (SLOTBRIDGE_REQUIREPASS); check-config reads
    // options from --set, so it is given the same way.
    let requirepass = format!("requirepass={}", text(&secret, "stringData.requirepass"));
    let out = slotbridge(&[
        "check-config",
        path.to_str().unwrap(),
        "--set",
        &requirepass,
    ]);
    assert!(
        out.status.success(),
        "check-config rejected the ConfigMap's file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (listen 0.0.0.0:6380"));

    // The volume names the ConfigMap; --config names the mounted key.
    let configmap = load("configmap.yaml");
    let volumes = at(&deployment, "spec.template.spec.volumes")
        .as_sequence()
        .unwrap();
    let mount = &at(container(&deployment), "volumeMounts")
        .as_sequence()
        .unwrap()[0];
    let volume = volumes
        .iter()
        .find(|v| text(v, "name") == text(mount, "name"))
        .expect("the mounted volume");
    assert_eq!(
        text(volume, "configMap.name"),
        text(&configmap, "metadata.name")
    );
    let args: Vec<String> =
        serde_yaml_ng::from_value(at(container(&deployment), "args").clone()).expect("args");
    let expected = format!("{}/{CONFIG_KEY}", text(mount, "mountPath"));
    assert_eq!(args, vec!["--config".to_string(), expected]);

    // Ports: the container's named ports are the config's, and the image's defaults agree.
    assert_eq!(
        container_port(&deployment, "redis"),
        config_port(&config, "listen")
    );
    assert_eq!(
        container_port(&deployment, "admin"),
        config_port(&config, "admin_listen")
    );
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("SLOTBRIDGE_LISTEN={}", text(&config, "listen"))));
    assert!(dockerfile.contains(&format!(
        "SLOTBRIDGE_ADMIN_LISTEN={}",
        text(&config, "admin_listen")
    )));
}

#[test]
fn probes_and_scrape_hit_what_the_proxy_serves() {
    let deployment = load("deployment.yaml");
    let (file, config) = configmap_config();
    let c = container(&deployment);
    assert_eq!(text(c, "readinessProbe.httpGet.path"), "/readyz");
    assert_eq!(text(c, "livenessProbe.httpGet.path"), "/healthz");
    let admin_port = container_port(&deployment, "admin");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(text(c, &format!("{probe}.httpGet.port")), "admin");
    }
    let annotations = string_map(&deployment, "spec.template.metadata.annotations");
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], admin_port.to_string());

    // The proxy on the ConfigMap's file (seeds and addresses replaced by the test's): every
    // probed and scraped path answers 200 on its admin port.
    let dir = new_dir("k8s-run");
    let path = dir.join(CONFIG_KEY);
    std::fs::write(&path, &file).unwrap();
    let seeds = shared_cluster().seeds_arg();
    let proxy = Proxy::start_with_env(
        &["--config", path.to_str().unwrap(), "--cluster", &seeds],
        &[("SLOTBRIDGE_REQUIREPASS", "k8s-test-pass")],
    );
    common::wait_until("/readyz 200", std::time::Duration::from_secs(10), || {
        http_get(proxy.admin_addr(), "/readyz").0 == 200
    });
    for path in [
        text(c, "readinessProbe.httpGet.path"),
        text(c, "livenessProbe.httpGet.path"),
        annotations["prometheus.io/path"].as_str(),
    ] {
        let (status, body) = http_get(proxy.admin_addr(), path);
        assert_eq!(status, 200, "GET {path}: {body}");
    }
    assert!(config_port(&config, "admin_listen") == admin_port);

    // The drain fits the grace period: preStop's sleep plus shutdown_timeout_ms, with margin.
    let pre_stop: Vec<String> =
        serde_yaml_ng::from_value(at(c, "lifecycle.preStop.exec.command").clone()).unwrap();
    assert_eq!(pre_stop[0], "sleep");
    let sleep_s: u64 = pre_stop[1].parse().expect("seconds");
    let drain_s = number(&config, "shutdown_timeout_ms").div_ceil(1000);
    let grace = number(
        &deployment,
        "spec.template.spec.terminationGracePeriodSeconds",
    );
    assert!(
        grace >= sleep_s + drain_s + 5,
        "terminationGracePeriodSeconds {grace} < preStop {sleep_s} s + drain {drain_s} s + 5 s"
    );
}

#[test]
fn the_deployment_reads_exactly_the_secrets_keys() {
    let deployment = load("deployment.yaml");
    let secret = load("secret.yaml");
    let env = at(container(&deployment), "env")
        .as_sequence()
        .expect("env");
    let mut read = BTreeMap::new();
    // Variables with a plain value (none today) are not the Secret's business.
    let from_secrets = env.iter().filter(|var| {
        var.get("valueFrom")
            .and_then(|v| v.get("secretKeyRef"))
            .is_some()
    });
    for var in from_secrets {
        let name = text(var, "name").to_string();
        assert_eq!(
            text(var, "valueFrom.secretKeyRef.name"),
            text(&secret, "metadata.name"),
            "{name} comes from the Secret"
        );
        read.insert(text(var, "valueFrom.secretKeyRef.key").to_string(), name);
    }
    let keys: Vec<String> = string_map(&secret, "stringData").into_keys().collect();
    assert_eq!(read.keys().cloned().collect::<Vec<_>>(), keys);
    let mut names: Vec<&str> = read.values().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["REDIS_PASSWORD", "REDIS_USERNAME", "SLOTBRIDGE_REQUIREPASS"]
    );
    for value in string_map(&secret, "stringData").values() {
        assert!(
            value.starts_with("PLACEHOLDER"),
            "placeholder marked: {value}"
        );
    }
}

/// True when every label `selector` asks for is on `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn service_pdb_and_hpa_target_the_deployment() {
    let deployment = load("deployment.yaml");
    let pod_labels = string_map(&deployment, "spec.template.metadata.labels");
    let own = string_map(&deployment, "spec.selector.matchLabels");
    assert!(
        selects(&own, &pod_labels),
        "the Deployment selects its own pods"
    );

    let service = load("service.yaml");
    assert!(selects(&string_map(&service, "spec.selector"), &pod_labels));
    let ports = at(&service, "spec.ports").as_sequence().unwrap();
    let targets: Vec<&str> = ports.iter().map(|p| text(p, "targetPort")).collect();
    assert_eq!(targets, ["redis", "admin"]);
    for target in targets {
        container_port(&deployment, target);
    }

    let pdb = load("pdb.yaml");
    assert!(selects(
        &string_map(&pdb, "spec.selector.matchLabels"),
        &pod_labels
    ));

    let hpa = load("hpa.yaml");
    assert_eq!(
        text(&hpa, "spec.scaleTargetRef.apiVersion"),
        text(&deployment, "apiVersion")
    );
    assert_eq!(text(&hpa, "spec.scaleTargetRef.kind"), "Deployment");
    assert_eq!(
        text(&hpa, "spec.scaleTargetRef.name"),
        text(&deployment, "metadata.name")
    );
    assert_eq!(text(&hpa, "spec.metrics.0.resource.name"), "cpu");
    // Utilization is measured against the request: the container must have one.
    assert!(at(container(&deployment), "resources.requests.cpu")
        .as_str()
        .is_some());
    assert!(
        number(&hpa, "spec.minReplicas") >= 2,
        "one pod may be drained"
    );
}
