//! A real Prometheus server (the `prometheus` binary) on a free loopback port, with its own
//! data directory, and a client for its HTTP API.
//!
//! Invariants: `Prometheus::start` returns only once `/-/ready` answers 200, or panics with
//! the server's log; the process is killed and its directory (config, TSDB, log) removed on
//! drop, also on panic. Every API call waits at most [`HTTP_TIMEOUT`]. A missing `prometheus`
//! or `promtool` fails the test with the install command.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ports::free_port;
use super::process::{new_dir, remove_dir, ManagedProcess};

/// How long Prometheus may take to open its TSDB and answer `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one API request may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times to retry on a fresh port when the port was taken between probe and bind.
const START_ATTEMPTS: usize = 3;

/// Panics unless `tool` (`prometheus` or `promtool`) runs, naming the package to install.
pub fn require_prometheus_tool(tool: &str) {
    super::process::require_tool_for(
        tool,
        "the observability tests run a real Prometheus",
        "sudo apt-get install -y --no-install-recommends prometheus",
    );
}

/// A running Prometheus.
pub struct Prometheus {
    addr: String,
    dir: PathBuf,
    process: ManagedProcess,
}

impl Prometheus {
    /// Starts Prometheus with `config` (a prometheus.yml text) on a free loopback port and
    /// waits until it is ready.
    pub fn start(config: &str) -> Prometheus {
        require_prometheus_tool("prometheus");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let mut prometheus = Prometheus::spawn(config);
            match prometheus.wait_ready() {
                Ok(()) => return prometheus,
                Err(e) => {
                    let log = prometheus.log();
                    let port_race = log.contains("address already in use");
                    failures.push(format!("{e}\n--- prometheus log ---\n{log}"));
                    if !port_race {
                        break;
                    }
                }
            }
        }
        panic!("prometheus did not start:\n{}", failures.join("\n"));
    }

    fn spawn(config: &str) -> Prometheus {
        let addr = format!("127.0.0.1:{}", free_port());
        let dir = new_dir("prometheus");
        let config_path = dir.join("prometheus.yml");
        fs::write(&config_path, config).unwrap_or_else(|e| panic!("write config: {e}"));
        let log = fs::File::create(dir.join("prometheus.log"))
            .unwrap_or_else(|e| panic!("create the prometheus log: {e}"));
        let log_err = log.try_clone().unwrap_or_else(|e| panic!("clone log: {e}"));
        let mut command = Command::new("prometheus");
        command
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let process = ManagedProcess::spawn(&mut command, &dir)
            .unwrap_or_else(|e| panic!("cannot spawn prometheus: {e}"));
        Prometheus { addr, dir, process }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.try_exit_status() {
                return Err(format!("exited before it was ready ({status})"));
            }
            if let Ok((200, _)) = get(&self.addr, "/-/ready") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "not ready on {} within {READY_TIMEOUT:?}",
                    self.addr
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The listen address, "127.0.0.1:port".
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on the HTTP API, its JSON body parsed; panics on a transport error or a
    /// body that is not JSON (an API error such as a bad query is JSON with `status: error`).
    pub fn api(&self, path: &str) -> serde_json::Value {
        let (status, body) =
            get(&self.addr, path).unwrap_or_else(|e| panic!("GET {path} on prometheus: {e}"));
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {path}: status {status}, not JSON ({e}): {body}"))
    }

    /// An instant query (`/api/v1/query`) of `expr`, evaluated now.
    pub fn query(&self, expr: &str) -> serde_json::Value {
        self.api(&format!("/api/v1/query?query={}", url_encode(expr)))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() {
            eprintln!("--- prometheus on {} ---\n{}", self.addr, self.log());
        }
        remove_dir(&self.dir);
    }
}

/// One HTTP/1.0 GET (so the answer is never chunked and ends when the server closes):
/// (status, body).
fn get(addr: &str, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(HTTP_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(response).map_err(|e| e.to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `text` percent-encoded for a URL query value.
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The absolute path of a file of this repository, for configs that name it.
pub fn repo_path(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}
