//! Resident memory per idle client connection: 2,000 clients each send PING and GET, then
//! idle; the proxy's RSS may grow by at most `PER_CLIENT_LIMIT` bytes per client (an idle
//! session holds no input buffer and no pub/sub state).
//!
//! Runs the binary cargo builds for tests (the debug build, whose futures and frames are
//! larger than the release build's, so passing here bounds the release figure too) in
//! front of a 3-master cluster, and reads `VmRSS` from `/proc/<pid>/status`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const CLIENTS: usize = 2000;
/// The target for an idle connection is 8 KiB. This debug build measured 10-11.7 KiB while
/// each session read into a 16 KiB buffer of its own (the allocator kept those pages resident
/// after they were given back); reading through the worker's scratch buffer it measures
/// 7.5-8 KiB, so the bound leaves the debug build 1.5 KiB of room.
const PER_CLIENT_LIMIT: u64 = 9 * 1024 + 512;
/// Longer than the sweep period plus the idle time after which sessions give back their
/// buffers (1 s + 2 s).
const SETTLE: Duration = Duration::from_millis(4500);

/// The process's resident set in bytes, from `/proc/<pid>/status`.
fn vm_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

fn connect(addr: &str) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect client");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    conn
}

/// Sends PING and `GET key`, and checks both replies (the key does not exist).
fn ping_and_get(conn: &mut TcpStream, key: &str) {
    let get = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
    conn.write_all(format!("*1\r\n$4\r\nPING\r\n{get}").as_bytes())
        .expect("write PING and GET");
    let mut reply = [0u8; 12];
    conn.read_exact(&mut reply).expect("read replies");
    assert_eq!(&reply, b"+PONG\r\n$-1\r\n");
}

#[test]
fn an_idle_connection_costs_at_most_9_5_kb_in_the_debug_build() {
    let cluster = common::shared_cluster();
    let seeds = cluster.seeds_arg();
    let proxy = common::Proxy::start(&["--cluster", &seeds]);
    let pid = proxy.pid();

    // Warm-up: backend connections, the command table, allocator arenas on every worker.
    for round in 0..3 {
        let mut warm: Vec<TcpStream> = (0..200).map(|_| connect(proxy.addr())).collect();
        for (i, conn) in warm.iter_mut().enumerate() {
            ping_and_get(conn, &format!("idle:warm:{round}:{i}"));
        }
        drop(warm);
    }
    proxy.wait_no_clients();
    std::thread::sleep(SETTLE);
    let before = vm_rss_bytes(pid);

    let mut clients: Vec<TcpStream> = (0..CLIENTS).map(|_| connect(proxy.addr())).collect();
    for (i, conn) in clients.iter_mut().enumerate() {
        ping_and_get(conn, &format!("idle:{i}"));
    }
    std::thread::sleep(SETTLE);
    let after = vm_rss_bytes(pid);
    let per_client = after.saturating_sub(before) / CLIENTS as u64;
    eprintln!("proxy RSS: {before} B before, {after} B with {CLIENTS} idle clients: {per_client} B per client");
    assert!(
        per_client <= PER_CLIENT_LIMIT,
        "{per_client} B of RSS per idle client > {PER_CLIENT_LIMIT} B"
    );
    // They are still served after giving their buffers back.
    for (i, conn) in clients.iter_mut().enumerate().step_by(97) {
        ping_and_get(conn, &format!("idle:again:{i}"));
    }
}
