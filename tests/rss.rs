//! Resident memory of the proxy process: idle, and with 1,000 idle clients connected.
//!
//! Runs the binary cargo builds for tests (the debug build, which is larger than the
//! release one, so passing here is an upper bound for release) in front of a 3-master
//! cluster, and reads `VmRSS` from `/proc/<pid>/status`. Bounds from the product's targets:
//! at most 20 MB idle and 100 MB with 1,000 idle clients.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const IDLE_LIMIT_KB: u64 = 20 * 1024;
const CLIENTS_LIMIT_KB: u64 = 100 * 1024;
const CLIENTS: usize = 1000;

/// The process's resident set in kB, from `/proc/<pid>/status`.
fn vm_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// Sends PING and checks the reply, so the connection is served, not just accepted.
fn ping(conn: &mut TcpStream) {
    conn.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write PING");
    let mut reply = [0u8; 7];
    conn.read_exact(&mut reply).expect("read PONG");
    assert_eq!(&reply, b"+PONG\r\n");
}

#[test]
fn rss_idle_and_with_a_thousand_idle_clients() {
    let cluster = common::shared_cluster();
    let seeds = cluster.seeds_arg();
    let proxy = common::Proxy::start(&["--cluster", &seeds]);
    let pid = proxy.pid();

    // One served command first: the backend connections and command table are in place.
    let mut first = TcpStream::connect(proxy.addr()).expect("connect");
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    ping(&mut first);
    let idle = vm_rss_kb(pid);
    assert!(
        idle <= IDLE_LIMIT_KB,
        "idle RSS {idle} kB > {IDLE_LIMIT_KB} kB"
    );

    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let conn = TcpStream::connect(proxy.addr()).expect("connect client");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        clients.push(conn);
    }
    // Every client has been served once, so each session holds its working buffers.
    for conn in &mut clients {
        ping(conn);
    }
    std::thread::sleep(Duration::from_millis(300));
    let loaded = vm_rss_kb(pid);
    eprintln!("proxy RSS: idle {idle} kB, with {CLIENTS} idle clients {loaded} kB");
    assert!(
        loaded <= CLIENTS_LIMIT_KB,
        "RSS with {CLIENTS} idle clients {loaded} kB > {CLIENTS_LIMIT_KB} kB"
    );
    // Still serving after all that.
    ping(&mut first);
}
