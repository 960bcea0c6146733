//! A real, unmodified redis-py application through the proxy: runs the pytest suite in
//! `tests/python` (the cache, session, rate-limit, lock, pub/sub, stream, leaderboard and
//! HyperLogLog patterns an application writes for one Redis node, and client-side caching
//! with REDIRECT to a subscribed connection) against three proxies in
//! front of one real cluster: the default configuration, `cross_slot_transactions: split`,
//! and the hash-tag layout of `config/examples/hash-tag-generic.yaml`.
//!
//! The interpreter is `$SLOTBRIDGE_PYTHON` if set, else `.venv-tests/bin/python` if present
//! (where `.ci/run` installs the requirements), else `python3`. A missing interpreter or
//! missing `redis`/`pytest` modules fail the test with the install command; nothing is skipped.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{new_dir, shared_cluster, Proxy};

/// The prefix the layout proxy serves; the Python tests build limiter keys under it.
const LAYOUT_PREFIX: &str = "myapp";
/// Upper bound for the whole pytest run (it takes a few seconds).
const PYTEST_TIMEOUT: Duration = Duration::from_secs(300);

const INSTALL_HINT: &str = "install them with: python3 -m venv .venv-tests && \
.venv-tests/bin/pip install -r tests/python/requirements.txt \
(or pip install -r tests/python/requirements.txt, and set SLOTBRIDGE_PYTHON to that interpreter)";

fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python interpreter to run pytest with (see the module doc).
fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("SLOTBRIDGE_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(python);
    }
    let venv = crate_root().join(".venv-tests/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// Fails the test unless `python` runs and imports redis-py and pytest.
fn require_python_modules(python: &Path) {
    let probe = Command::new(python)
        .args([
            "-c",
            "import redis, pytest; print('redis-py', redis.__version__, 'pytest', pytest.__version__)",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): install python3 (e.g. apt-get install python3 python3-pip \
                 python3-venv), then the test packages; {INSTALL_HINT}",
                python.display()
            )
        });
    assert!(
        probe.status.success(),
        "{} cannot import the redis and pytest modules; {INSTALL_HINT}\n{}",
        python.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&probe.stdout).trim());
}

#[test]
fn redis_py_seed_patterns_pass_through_the_proxy() {
    let python = python();
    require_python_modules(&python);

    let cluster = shared_cluster();
    let seeds = cluster.seeds_arg();
    let plain = Proxy::start(&["--cluster", &seeds]);

    let dir = new_dir("python-clients");
    let split_config = dir.join("split.yaml");
    fs::write(&split_config, "cross_slot_transactions: split\n").unwrap();
    let split = Proxy::start(&[
        "--cluster",
        &seeds,
        "--config",
        split_config.to_str().unwrap(),
    ]);
    let tagged = Proxy::start_with_layout(
        &seeds,
        "config/examples/hash-tag-generic.yaml",
        LAYOUT_PREFIX,
    );

    let log_path = dir.join("pytest.log");
    let log = fs::File::create(&log_path).unwrap();
    let mut child = Command::new(&python)
        .current_dir(crate_root())
        // No .pytest_cache or __pycache__ in the source tree.
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/python",
        ])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("SLOTBRIDGE_TEST_ADDR", plain.addr())
        .env("SLOTBRIDGE_TEST_SPLIT_ADDR", split.addr())
        .env("SLOTBRIDGE_TEST_LAYOUT_ADDR", tagged.addr())
        .env("SLOTBRIDGE_TEST_LAYOUT_PREFIX", LAYOUT_PREFIX)
        .env("SLOTBRIDGE_TEST_CLUSTER_NODE", &cluster.masters()[0])
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} -m pytest: {e}", python.display()));

    let deadline = Instant::now() + PYTEST_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = fs::read_to_string(&log_path).unwrap_or_default();
    let _ = fs::remove_dir_all(&dir);
    match status {
        Some(status) => assert!(status.success(), "pytest failed ({status}):\n{output}"),
        None => panic!("pytest did not finish within {PYTEST_TIMEOUT:?}:\n{output}"),
    }
    eprintln!("{output}");
}
