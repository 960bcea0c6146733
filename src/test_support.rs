//! Test-only helpers for unit tests inside the crate: a real `redis-server` (the integration
//! tests have their own harness, which unit tests cannot reach), and the size of the future
//! an async function returns.
//!
//! Invariants: a server listens on 127.0.0.1 only, on a free port, persists nothing, and is
//! killed when its handle drops, also when the test panics.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How many times to try a fresh port when another process took the probed one first.
const START_ATTEMPTS: usize = 5;
/// How many connection attempts (100 ms apart) a fresh server gets to answer.
const CONNECT_ATTEMPTS: usize = 50;

/// A throwaway standalone redis-server on loopback, killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers as our own child;
    /// panics (it is a test) if `redis-server` is missing or never comes up.
    pub fn start() -> RedisServer {
        for _ in 0..START_ATTEMPTS {
            let port = free_loopback_port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed for this test");
            let mut server = RedisServer { child, port };
            if server.wait_until_ours() {
                return server;
            }
        }
        panic!("redis-server did not come up after {START_ATTEMPTS} attempts");
    }

    /// A blocking connection to this server.
    pub fn connect(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to the test redis-server")
    }

    fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    /// Waits until the port answers with our child's pid; false when the child exited (the
    /// port was taken) or another process answers.
    fn wait_until_ours(&mut self) -> bool {
        let own_pid = format!("process_id:{}", self.child.id());
        for _ in 0..CONNECT_ATTEMPTS {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return false;
            }
            if let Ok(mut conn) = self.client().get_connection() {
                let info: String = redis::cmd("INFO")
                    .arg("server")
                    .query(&mut conn)
                    .unwrap_or_default();
                return info.lines().any(|line| line.trim() == own_pid);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_loopback_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// The size of the future `f` (of four arguments) returns, without making one.
pub fn future_size4<A, B, C, D, F>(_: impl Fn(A, B, C, D) -> F) -> usize {
    std::mem::size_of::<F>()
}
