//! MONITOR through the proxy: the lines a monitoring client reads for other clients'
//! commands are the ones one redis-server 7.0 writes for the same commands (what is shown,
//! how arguments are quoted, which passwords are redacted, MULTI shown at EXEC), a
//! monitoring client is refused keyspace commands as on Redis and RESET ends its
//! monitoring, and a monitor that stops reading is dropped without slowing the others.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{shared_cluster, Proxy, Raw, Standalone};

/// The commands the other client sends, in order, as exact argument bytes.
fn session() -> Vec<Vec<&'static [u8]>> {
    vec![
        vec![
            b"SET",
            b"mon:quote\"back\\slash",
            b"line\nret\rtab\tbell\x07bs\x08bin\x01\xff ~",
        ],
        vec![b"GET", b"mon:quote\"back\\slash"],
        vec![b"AUTH", b"secret"],
        vec![b"auth", b"someone", b"secret"],
        vec![
            b"HELLO",
            b"2",
            b"AUTH",
            b"default",
            b"pw",
            b"SETNAME",
            b"monitored",
        ],
        vec![b"CONFIG", b"GET", b"maxmemory"],
        vec![b"NOSUCHCOMMAND", b"x"],
        vec![b"GET"],
        vec![b"MULTI"],
        vec![b"SET", b"{mon}a", b"1"],
        vec![b"INCR", b"{mon}a"],
        vec![b"EXEC"],
        vec![b"MULTI"],
        vec![b"SET", b"{mon}a", b"2"],
        vec![b"DISCARD"],
        vec![b"MULTI"],
        vec![b"SET", b"{mon}a", b"3"],
        vec![b"NOSUCHCOMMAND"],
        vec![b"EXEC"],
        vec![b"CLIENT", b"LIST"],
        vec![b"CLIENT", b"SETNAME", b"renamed"],
        vec![b"SLOWLOG", b"GET"],
        vec![b"ECHO", b"two words"],
        vec![b"PING"],
    ]
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads a monitor's lines one at a time (several may come in one read, which
/// `Raw::read_reply` does not split).
struct Lines {
    stream: TcpStream,
    buffered: Vec<u8>,
}

impl Lines {
    fn new(raw: Raw) -> Lines {
        Lines {
            stream: raw.stream,
            buffered: Vec::new(),
        }
    }

    /// The next line, `\r\n` included.
    fn next(&mut self) -> String {
        loop {
            if let Some(end) = self.buffered.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buffered.drain(..end + 2).collect();
                return String::from_utf8(line).expect("a monitor line is ASCII");
            }
            let mut chunk = [0u8; 4096];
            let n = common::read_some(&mut self.stream, &mut chunk).expect("read a monitor line");
            assert!(n > 0, "monitor closed; got {:?}", self.buffered);
            self.buffered.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        self.stream.write_all(&encode(&args)).unwrap();
        self.next()
    }
}

/// Runs [`session`] against `addr` while a MONITOR there watches; returns the monitor's
/// lines, each with its time checked and cut off and the sender's address replaced by
/// `ADDR`.
fn monitored_lines(addr: &str) -> Vec<String> {
    let mut monitor = Lines::new(Raw::connect(addr));
    assert_eq!(monitor.call(&["MONITOR"]), "+OK\r\n");
    let mut client = Raw::connect(addr);
    let sender = client.stream.local_addr().unwrap().to_string();
    for args in session() {
        client.stream.write_all(&encode(&args)).unwrap();
        client.read_reply();
    }
    // The last command is PING: its line ends the session's lines.
    let mut lines = Vec::new();
    while lines
        .last()
        .is_none_or(|line: &String| !line.ends_with("\"PING\""))
    {
        let line = monitor.next();
        let line = line.strip_suffix("\r\n").expect("a simple string line");
        let (time, rest) = line[1..].split_once(' ').expect("time, then the rest");
        let (secs, micros) = time.split_once('.').expect("seconds.microseconds");
        assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{line}");
        assert!(micros.parse::<u32>().is_ok(), "{line}");
        let prefix = format!("[0 {sender}] ");
        let args = rest
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{line:?} names {prefix:?}"));
        lines.push(format!("[0 ADDR] {args}"));
    }
    lines
}

#[test]
fn monitor_shows_what_one_redis_shows_of_the_same_commands() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let through_proxy = monitored_lines(proxy.addr());
    let server = Standalone::start();
    let from_redis = monitored_lines(server.addr());
    assert_eq!(through_proxy, from_redis);
    // What the comparison rests on: quoting, redaction, MULTI shown at EXEC, nothing
    // admin-flagged or refused.
    let expected_subset = [
        r#"[0 ADDR] "SET" "mon:quote\"back\\slash" "line\nret\rtab\tbell\abs\bbin\x01\xff ~""#,
        r#"[0 ADDR] "AUTH" "(redacted)""#,
        r#"[0 ADDR] "auth" "(redacted)" "(redacted)""#,
        r#"[0 ADDR] "HELLO" "2" "AUTH" "(redacted)" "(redacted)" "SETNAME" "monitored""#,
    ];
    for line in expected_subset {
        assert!(
            through_proxy.iter().any(|l| l == line),
            "{line} in {through_proxy:#?}"
        );
    }
    let shown = |word: &str| through_proxy.iter().any(|l| l.contains(word));
    assert!(!shown("maxmemory") && !shown("NOSUCHCOMMAND") && !shown("SLOWLOG"));
    let exec = through_proxy
        .iter()
        .position(|l| l.ends_with("\"EXEC\""))
        .unwrap();
    assert_eq!(
        &through_proxy[exec - 3..=exec],
        [
            r#"[0 ADDR] "MULTI""#,
            r#"[0 ADDR] "SET" "{mon}a" "1""#,
            r#"[0 ADDR] "INCR" "{mon}a""#,
            r#"[0 ADDR] "EXEC""#,
        ]
    );
}

/// The monitoring client's own commands, through the proxy and on Redis: keyspace
/// commands refused, others answered and shown, a second MONITOR not answered, RESET
/// ends the monitoring.
fn monitoring_client_transcript(addr: &str) -> Vec<String> {
    let mut monitor = Lines::new(Raw::connect(addr));
    let mut out = vec![monitor.call(&["MONITOR"])];
    out.push(monitor.call(&["GET", "mon:key"]));
    out.push(monitor.call(&["SET", "mon:key", "1"]));
    out.push(monitor.call(&["PUBLISH", "mon:channel", "1"]));
    // A second MONITOR gets no reply: the PING's comes next.
    monitor.stream.write_all(&encode(&[b"MONITOR"])).unwrap();
    out.push(monitor.call(&["PING"]));
    let own = monitor.next();
    assert!(own.ends_with("] \"PING\"\r\n"), "{own}");
    out.push(monitor.call(&["RESET"]));
    let mut other = Raw::connect(addr);
    assert_eq!(other.call(&["SET", "mon:after-reset", "1"]), "+OK\r\n");
    // Nothing more for the client that reset: its next line is its own reply.
    out.push(monitor.call(&["PING"]));
    out
}

#[test]
fn a_monitoring_client_is_refused_the_keyspace_and_reset_ends_it_as_on_redis() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let through_proxy = monitoring_client_transcript(proxy.addr());
    let server = Standalone::start();
    assert_eq!(through_proxy, monitoring_client_transcript(server.addr()));
    assert_eq!(
        through_proxy,
        [
            "+OK\r\n",
            "-ERR Replica can't interact with the keyspace\r\n",
            "-ERR Replica can't interact with the keyspace\r\n",
            "-ERR Replica can't interact with the keyspace\r\n",
            "+PONG\r\n",
            "+RESET\r\n",
            "+PONG\r\n",
        ]
    );
}

#[test]
fn monitor_can_be_denied_by_the_policy() {
    let dir = common::new_dir("monitor-policy");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, "commands:\n  deny: [monitor]\n").unwrap();
    let proxy = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        path.to_str().unwrap(),
    ]);
    let mut con = Raw::connect(proxy.addr());
    let reply = con.call(&["MONITOR"]);
    assert!(
        reply.starts_with("-ERR proxy: 'monitor' is disabled by the proxy's command policy"),
        "{reply}"
    );
    assert_eq!(con.call(&["SET", "mon:denied", "1"]), "+OK\r\n");
}

fn monitor_drops(proxy: &Proxy) -> f64 {
    let (status, body) = common::http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| line.strip_prefix("slotbridge_monitor_drops_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A monitor that never reads holds at most its bounded buffer: once the other client's
/// traffic passes it, the monitor is disconnected and counted, and the other client's
/// commands are answered all along.
#[test]
fn a_monitor_that_does_not_read_is_dropped_and_never_slows_the_others() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    assert_eq!(monitor_drops(&proxy), 0.0);
    let addr: std::net::SocketAddr = proxy.addr().parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stalled: TcpStream = socket.into();
    stalled.write_all(&encode(&[b"MONITOR"])).unwrap();
    let mut ok = [0u8; 5];
    stalled.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let mut client = Raw::connect(proxy.addr());
    let value = "v".repeat(1024 * 1024);
    let started = Instant::now();
    // 24 MiB of lines: past the monitor's 8 MiB, its session's output and both kernel
    // buffers.
    for round in 0..24 {
        assert_eq!(
            client.call(&["SET", "mon:big", &value]),
            "+OK\r\n",
            "{round}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    common::wait_until("the monitor dropped", Duration::from_secs(5), || {
        monitor_drops(&proxy) == 1.0
    });
    // The dropped monitor reads what was sent to it, then the end of the connection.
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let closed = loop {
        match common::read_some(&mut stalled, &mut sink) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(e) => panic!("the dropped monitor was not closed: {e}"),
        }
    };
    assert!(closed);
    assert_eq!(client.call(&["PING"]), "+PONG\r\n");
}
