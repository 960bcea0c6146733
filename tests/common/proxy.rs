//! The slotbridge binary under test, started on free loopback ports.
//!
//! Invariants: `Proxy::start` returns only once the proxy answers PING on its listen port (or
//! asks for AUTH, which also proves it is serving); otherwise it panics with the proxy's
//! output. The proxy runs from the crate root, so relative paths such as `config/...` resolve.
//! It is killed on drop; if the test is panicking, its output is printed first.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::http::http_get;
use super::node::{connect, redis_client};
use super::ports::free_port;
use super::process::{new_dir, remove_dir, ManagedProcess};
use super::wait::wait_until;

/// How long the proxy may take to start serving (it reads the slot map first).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times to retry on fresh ports when a port was taken between probe and bind.
const START_ATTEMPTS: usize = 3;
/// How much of the proxy's output a panic message shows.
const OUTPUT_TAIL_LINES: usize = 80;

/// A running proxy process.
pub struct Proxy {
    addr: String,
    admin_addr: String,
    dir: PathBuf,
    process: ManagedProcess,
}

impl Proxy {
    /// Starts the proxy in front of cluster `seeds` with the layout rule file `profile`
    /// (e.g. `config/botmesh-cluster-v1.yaml`) applied to `prefix`.
    pub fn start_with_layout(seeds: &str, profile: &str, prefix: &str) -> Proxy {
        Proxy::start(&["--cluster", seeds, "--layout", profile, "--prefix", prefix])
    }

    /// Starts the proxy with `--listen` and `--admin-listen` on free ports, then `args`
    /// (e.g. `["--cluster", "127.0.0.1:7001,127.0.0.1:7002"]`), and waits until it serves.
    pub fn start(args: &[&str]) -> Proxy {
        Proxy::start_with_env(args, &[])
    }

    /// Like [`Proxy::start`], with extra environment variables (e.g. `REDIS_PASSWORD`).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::start_program(env!("CARGO_BIN_EXE_slotbridge"), args, env)
    }

    /// Like [`Proxy::start_with_env`] with another program in the proxy's place: it gets the
    /// same `--listen <addr> --admin-listen <addr>` first arguments. For testing the harness.
    pub fn start_program(program: &str, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::start_listening(program, None, args, env)
    }

    /// Like [`Proxy::start`] with the client listen address `addr` instead of a free port:
    /// a new proxy in the place of one that exited, for clients that reconnect to it.
    pub fn start_on(addr: &str, args: &[&str]) -> Proxy {
        Proxy::start_listening(env!("CARGO_BIN_EXE_slotbridge"), Some(addr), args, &[])
    }

    fn start_listening(
        program: &str,
        listen: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Proxy {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let mut proxy = Proxy::spawn(program, listen, args, env);
            match proxy.wait_ready() {
                Ok(()) => return proxy,
                Err(e) => {
                    let output = proxy.output();
                    // Only a lost port race is worth another try; anything else is the bug.
                    let port_race = output.contains("Address already in use");
                    failures.push(format!("{e}\n--- proxy output ---\n{output}"));
                    if !port_race {
                        break;
                    }
                }
            }
        }
        panic!(
            "{program} did not start (args {args:?}):\n{}",
            failures.join("\n")
        );
    }

    fn spawn(program: &str, listen: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        let addr = match listen {
            Some(addr) => addr.to_string(),
            None => format!("127.0.0.1:{}", free_port()),
        };
        let admin_addr = format!("127.0.0.1:{}", free_port());
        let dir = new_dir("proxy");
        let open = |name: &str| {
            let path = dir.join(name);
            fs::File::create(&path)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
        };
        let mut command = Command::new(program);
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["--listen", &addr, "--admin-listen", &admin_addr])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::from(open("stdout.log")))
            .stderr(Stdio::from(open("stderr.log")));
        let process = ManagedProcess::spawn(&mut command, &dir)
            .unwrap_or_else(|e| panic!("cannot spawn {program}: {e}"));
        Proxy {
            addr,
            admin_addr,
            dir,
            process,
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.process.try_exit_status() {
                return Err(format!("exited before serving ({status})"));
            }
            if let Some(reply) = ping(&self.addr) {
                if reply.starts_with("+PONG") || reply.starts_with("-NOAUTH") {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no answer to PING on {} within {READY_TIMEOUT:?}",
                    self.addr
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the proxy counts no open client connection (its
    /// `slotbridge_client_connections` gauge), such as the start-up probe's, which may hold
    /// a `maxclients` place for a moment after [`Proxy::start`] returned. Needs the metrics on.
    pub fn wait_no_clients(&self) {
        wait_until("no open client connection", Duration::from_secs(5), || {
            let (status, body) = http_get(&self.admin_addr, "/metrics");
            status == 200
                && body.lines().any(|line| {
                    line.strip_prefix("slotbridge_client_connections ")
                        .and_then(|value| value.trim().parse::<f64>().ok())
                        == Some(0.0)
                })
        });
    }

    /// The client listen address, "127.0.0.1:port".
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The admin (metrics, health) listen address, "127.0.0.1:port".
    pub fn admin_addr(&self) -> &str {
        &self.admin_addr
    }

    /// The proxy's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A `redis::Client` connected through the proxy.
    pub fn client(&self) -> redis::Client {
        redis_client(&self.addr)
    }

    /// A blocking connection through the proxy, with read/write timeouts.
    pub fn connect(&self) -> redis::Connection {
        connect(&self.addr)
    }

    /// Sends a signal by name (`"HUP"`, `"TERM"`, `"SIGINT"`...) with `kill -s`.
    pub fn send_signal(&self, signal: &str) {
        self.process.send_signal(signal);
    }

    /// Waits up to `timeout` for the proxy to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.process.wait_exit(timeout)
    }

    /// Path of the file that receives the proxy's stderr.
    pub fn stderr_path(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }

    /// Everything the proxy wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// The tail of stdout and stderr, for failure messages.
    pub fn output(&self) -> String {
        let tail = |name: &str| {
            let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(OUTPUT_TAIL_LINES)..].join("\n")
        };
        format!(
            "[stderr {}]\n{}\n[stdout]\n{}",
            self.stderr_path().display(),
            tail("stderr.log"),
            tail("stdout.log")
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() {
            eprintln!("--- slotbridge on {} ---\n{}", self.addr, self.output());
        }
        remove_dir(&self.dir);
    }
}

/// Sends one PING and returns the first reply line, or `None` if nothing came back in time.
fn ping(addr: &str) -> Option<String> {
    let socket: SocketAddr = addr.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&socket, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 256];
    while !reply.ends_with(b"\r\n") && reply.len() < 4096 {
        let read = stream.read(&mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..read]);
    }
    Some(String::from_utf8_lossy(&reply).into_owned())
}
