//! Client limits through the proxy: `maxclients` refuses the next client with Redis's error,
//! `timeout` closes idle clients only (not subscribers, not blocked ones), a client that never
//! reads a reply larger than `client_output_buffer_limit_bytes` is disconnected (and one held
//! over the soft limit for its seconds) while others keep being served, and
//! clients that hang up with thousands of requests in flight disturb no one, and connections
//! the proxy cannot accept yet wait in a listen queue of `tcp_backlog`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{exchange_on, new_dir, read_until_close, shared_cluster, Proxy, Raw};

fn proxy_with(config: &str) -> Proxy {
    let dir = new_dir("limits-config");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, config).unwrap();
    Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        path.to_str().unwrap(),
    ])
}

#[test]
fn maxclients_refuses_the_next_client() {
    let proxy = proxy_with("maxclients: 2\n");
    // The harness's readiness probe may still hold a place for a moment.
    proxy.wait_no_clients();
    let mut first = Raw::connect(proxy.addr());
    let mut second = Raw::connect(proxy.addr());
    assert_eq!(first.call(&["PING"]), "+PONG\r\n");
    assert_eq!(second.call(&["PING"]), "+PONG\r\n");
    let mut third = TcpStream::connect(proxy.addr()).unwrap();
    let (reply, closed) = read_until_close(&mut third, Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR max number of clients reached\r\n"
    );
    assert!(closed);
    // A freed place is given to the next client.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut next = Raw::connect(proxy.addr());
        next.stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let (reply, _) = read_until_close(&mut next.stream, Duration::from_millis(300));
        if reply.starts_with(b"+PONG") {
            break;
        }
        assert!(Instant::now() < deadline, "no place freed: {reply:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(second.call(&["PING"]), "+PONG\r\n");
}

#[test]
fn idle_clients_are_closed_after_timeout() {
    let proxy = proxy_with("timeout: 1\n");
    idle_one_is_closed_and_busy_one_served(&proxy, &["PING"], "+PONG\r\n");
}

/// With `timeout: 1`: one client sends `command` once, then idles; the other sends it every
/// 300 ms for 2.5 s. The idle one is closed, with nothing sent before the close; the busy
/// one gets `reply` every time, and after.
fn idle_one_is_closed_and_busy_one_served(proxy: &Proxy, command: &[&str], reply: &str) {
    let mut idle = Raw::connect(proxy.addr());
    let mut busy = Raw::connect(proxy.addr());
    assert_eq!(idle.call(command), reply);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.call(command), reply);
        std::thread::sleep(Duration::from_millis(300));
    }
    let (data, closed) = read_until_close(&mut idle.stream, Duration::from_secs(2));
    assert!(
        data.is_empty() && closed,
        "idle client still open ({data:?})"
    );
    assert_eq!(busy.call(command), reply);
}

/// The same with commands the masters answer: a client idle since its last GET's reply is
/// closed after `timeout`, and one whose GETs keep coming is served throughout (an
/// unpipelined client's reply leaves from within its session's wait, which then times the
/// idle client itself).
#[test]
fn idle_clients_are_closed_after_timeout_counted_from_a_forwarded_reply() {
    let proxy = proxy_with("timeout: 1\n");
    let mut setup = Raw::connect(proxy.addr());
    assert_eq!(setup.call(&["SET", "limits:idle:key", "v"]), "+OK\r\n");
    drop(setup);
    let get = ["GET", "limits:idle:key"];
    idle_one_is_closed_and_busy_one_served(&proxy, &get, "$1\r\nv\r\n");
}

/// As in Redis, `timeout` spares a client that waits for a reply or is subscribed, and
/// idle time counts from the last read or write: a subscriber that only receives messages
/// stays (CLIENT LIST shows it idle=0), a silent one stays too, and a client whose BLPOP
/// answered after longer than the timeout goes on at once.
#[test]
fn timeout_spares_subscribers_and_counts_from_the_last_reply() {
    let proxy = proxy_with("timeout: 2\n");
    let mut fed = Raw::connect(proxy.addr());
    let mut silent = Raw::connect(proxy.addr());
    let mut blocked = Raw::connect(proxy.addr());
    let mut publisher = Raw::connect(proxy.addr());
    assert_eq!(fed.call(&["CLIENT", "SETNAME", "fed"]), "+OK\r\n");
    assert!(fed
        .call(&["SUBSCRIBE", "limits:news"])
        .contains("subscribe"));
    assert!(silent
        .call(&["SUBSCRIBE", "limits:quiet"])
        .contains("subscribe"));
    blocked.send(&["BLPOP", "limits:empty", "3"]);
    let start = Instant::now();
    let mut published = 0;
    while start.elapsed() < Duration::from_secs(4) {
        assert_eq!(publisher.call(&["PUBLISH", "limits:news", "m"]), ":1\r\n");
        published += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(blocked.read_reply(), "*-1\r\n");
    assert_eq!(blocked.call(&["PING"]), "+PONG\r\n");
    let list = publisher.call(&["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|line| line.contains(" name=fed "))
        .unwrap_or_else(|| panic!("no subscriber in {list}"));
    assert!(line.contains(" idle=0 "), "{line}");
    let messages = exchange_on(&mut fed.stream, &[], Duration::from_millis(300));
    let text = String::from_utf8_lossy(&messages);
    assert_eq!(
        text.matches("$11\r\nlimits:news\r\n").count(),
        published,
        "{text}"
    );
    assert_eq!(
        silent.call(&["PING"]),
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n",
        "the silent subscriber was closed"
    );
}

/// A reply too large for the hard limit closes a client that does not read it; one that
/// reads is served. (Clients that pipeline many smaller replies and do not read are paused
/// by flow control instead: `tests/isolation.rs`.)
#[test]
fn a_client_that_does_not_read_is_disconnected_at_the_hard_output_limit() {
    const LIMIT: usize = 1024 * 1024;
    const VALUE: usize = 16 * 1024 * 1024;
    let proxy = proxy_with(&format!("client_output_buffer_limit_bytes: {LIMIT}\n"));
    let mut setup = Raw::connect(proxy.addr());
    let value = "x".repeat(VALUE);
    assert_eq!(setup.call(&["SET", "limits:huge", &value]), "+OK\r\n");
    let before = disconnects(&proxy);

    let mut greedy = TcpStream::connect(proxy.addr()).unwrap();
    greedy
        .write_all(b"*2\r\n$3\r\nGET\r\n$11\r\nlimits:huge\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let (received, closed) = read_until_close(&mut greedy, Duration::from_secs(5));
    assert!(closed, "the non-reading client was not disconnected");
    assert!(
        received.len() < VALUE,
        "the whole reply arrived ({} bytes); no limit applied",
        received.len()
    );
    assert_eq!(disconnects(&proxy), before + 1.0, "counted once");

    // Others are served. (A reply larger than the hard limit closes a client that reads too,
    // as in Redis, where it is in the output buffer whole before it is written.)
    let small = "y".repeat(64 * 1024);
    assert_eq!(setup.call(&["SET", "limits:small", &small]), "+OK\r\n");
    let mut polite = Raw::connect(proxy.addr());
    for _ in 0..10 {
        let reply = polite.call(&["GET", "limits:small"]);
        assert_eq!(
            reply.len(),
            small.len() + format!("${}\r\n\r\n", small.len()).len()
        );
    }
}

/// The one reply of a read is written as it came from the master; a client whose socket
/// takes it in parts (a small receive window, reading slowly) still gets it whole and in
/// order with the replies after it, and stays connected under the limit.
#[test]
fn a_reply_the_socket_takes_in_parts_arrives_whole_and_in_order() {
    const VALUE: usize = 2 * 1024 * 1024;
    let proxy = proxy_with(&format!(
        "client_output_buffer_limit_bytes: {}\n",
        2 * VALUE
    ));
    let mut setup = Raw::connect(proxy.addr());
    let value: String = (0..VALUE)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(setup.call(&["SET", "limits:parts", &value]), "+OK\r\n");
    let mut slow = connect_with_small_receive_buffer(proxy.addr());
    let mut expected = Vec::new();
    for round in 0..3 {
        slow.write_all(b"*2\r\n$3\r\nGET\r\n$12\r\nlimits:parts\r\n")
            .unwrap();
        expected.extend_from_slice(format!("${VALUE}\r\n{value}\r\n").as_bytes());
        // Alone in its read, so its reply is the only one due when it comes.
        std::thread::sleep(Duration::from_millis(100));
        let echo = format!("after-{round}");
        let request = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{echo}\r\n", echo.len());
        slow.write_all(request.as_bytes()).unwrap();
        expected.extend_from_slice(format!("${}\r\n{echo}\r\n", echo.len()).as_bytes());
    }
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut received = vec![0u8; expected.len()];
    let mut at = 0;
    while at < received.len() {
        // Slowly, so the proxy's writes meet a full socket.
        let end = (at + 16 * 1024).min(received.len());
        slow.read_exact(&mut received[at..end])
            .expect("every reply arrives, the client connected");
        at = end;
        if at % (256 * 1024) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(
        received == expected,
        "the replies differ in content or order"
    );
    assert_eq!(disconnects(&proxy), 0.0);
}

/// Redis's soft limit: replies unread over `bytes` for `seconds` close the client, not before.
#[test]
fn a_client_over_the_soft_output_limit_for_its_seconds_is_disconnected() {
    const VALUE: usize = 4 * 1024 * 1024;
    let proxy = proxy_with("client_output_buffer_soft_limit: {bytes: 262144, seconds: 2}\n");
    let mut setup = Raw::connect(proxy.addr());
    assert_eq!(
        setup.call(&["SET", "limits:soft", &"s".repeat(VALUE)]),
        "+OK\r\n"
    );
    let before = disconnects(&proxy);
    // A small receive buffer, so the reply waits in the proxy, not in this socket: with the
    // kernel's buffers grown to their largest, a 4 MB reply can fit in them whole, and flow
    // control holds back the GETs after it (its budget is 1 MiB).
    let mut slow = connect_with_small_receive_buffer(proxy.addr());
    slow.write_all(&b"*2\r\n$3\r\nGET\r\n$11\r\nlimits:soft\r\n".repeat(4))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        disconnects(&proxy),
        before,
        "closed before its seconds passed"
    );
    // Not read meanwhile (reading would drain it under the limit).
    let deadline = Instant::now() + Duration::from_secs(5);
    while disconnects(&proxy) == before {
        assert!(
            Instant::now() < deadline,
            "the client over its soft limit was not disconnected"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(disconnects(&proxy), before + 1.0);
    let (_, closed) = read_until_close(&mut slow, Duration::from_secs(5));
    assert!(closed, "counted but not closed");
    // Under the soft limit a client that reads slowly stays.
    let mut reader = Raw::connect(proxy.addr());
    reader
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(reader.call(&["GET", "limits:soft"]).len(), VALUE + 12);
}

/// A connection to `addr` whose receive buffer is as small as the kernel allows, set
/// before connecting so the window never grows.
fn connect_with_small_receive_buffer(addr: &str) -> TcpStream {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    socket.into()
}

fn disconnects(proxy: &Proxy) -> f64 {
    let (status, body) = common::http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| line.strip_prefix("slotbridge_client_output_limit_disconnects_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn clients_that_hang_up_mid_pipeline_do_not_disturb_others() {
    let proxy = proxy_with("");
    // A reader that checks its own writes the whole time.
    let addr = proxy.addr().to_string();
    let steady = std::thread::spawn(move || {
        let mut con = Raw::connect(&addr);
        for i in 0..300 {
            let key = format!("limits:steady:{}", i % 17);
            assert_eq!(con.call(&["SET", &key, &i.to_string()]), "+OK\r\n");
            let expected = format!("${}\r\n{i}\r\n", i.to_string().len());
            assert_eq!(con.call(&["GET", &key]), expected, "{key}");
        }
    });
    // Clients that send thousands of batched requests and go away without reading, some
    // closing at once and some after part of the replies came back.
    let mut request = Vec::new();
    for i in 0..4000 {
        let key = format!("limits:gone:{}", i % 97);
        request.extend_from_slice(
            format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nx\r\n", key.len()).as_bytes(),
        );
        request.extend_from_slice(
            format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
        );
    }
    for round in 0..20 {
        let mut gone = TcpStream::connect(proxy.addr()).unwrap();
        let _ = gone.write_all(&request);
        if round % 2 == 1 {
            let mut some = [0u8; 4096];
            let _ = std::io::Read::read(&mut gone, &mut some);
        }
        drop(gone);
    }
    steady
        .join()
        .expect("the steady client saw only its own replies");
    let mut after = Raw::connect(proxy.addr());
    assert_eq!(after.call(&["SET", "limits:after", "1"]), "+OK\r\n");
    assert_eq!(after.call(&["GET", "limits:after"]), "$1\r\n1\r\n");
    assert!(
        !proxy.stderr().contains("panicked"),
        "the proxy panicked: {}",
        proxy.output()
    );
}

/// Options set without a file, as every option can be: a `SLOTBRIDGE_<PATH>` variable
/// (`maxclients`) and `--set` (`timeout`); a bad one stops the proxy with an error naming it.
#[test]
fn options_set_by_variable_and_by_flag_apply() {
    let seeds = shared_cluster().seeds_arg();
    let proxy = Proxy::start_with_env(
        &["--cluster", &seeds, "--set", "timeout=1"],
        &[("SLOTBRIDGE_MAXCLIENTS", "2")],
    );
    // The harness's readiness probe may still hold a place for a moment.
    proxy.wait_no_clients();
    let mut idle = Raw::connect(proxy.addr());
    let mut busy = Raw::connect(proxy.addr());
    assert_eq!(idle.call(&["PING"]), "+PONG\r\n");
    let mut third = TcpStream::connect(proxy.addr()).unwrap();
    let (reply, _) = read_until_close(&mut third, Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR max number of clients reached\r\n"
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.call(&["PING"]), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (data, closed) = read_until_close(&mut idle.stream, Duration::from_secs(2));
    assert!(data.is_empty() && closed, "the idle client is still open");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["--cluster", &seeds, "--set", "maxclients=many"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains("--set maxclients=many"), "{error}");

    // check-config validates what `run` would run with: the file, the variables, --set.
    let dir = new_dir("check-config-overrides");
    let file = dir.join("slotbridge.yaml");
    std::fs::write(
        &file,
        format!("cluster: [{}]\n", shared_cluster().seeds()[0]),
    )
    .unwrap();
    let check = |set: &[&str], env: &[(&str, &str)]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
            .arg("check-config")
            .arg(&file)
            .args(set)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let (ok, text) = check(&["--set", "listen=127.0.0.1:6999"], &[]);
    assert!(ok && text.contains("listen 127.0.0.1:6999"), "{text}");
    let (ok, text) = check(&["--set", "maxclients=many"], &[]);
    assert!(!ok && text.contains("--set maxclients=many"), "{text}");
    let (ok, text) = check(
        &[],
        &[
            ("SLOTBRIDGE_COMMANDS__ALLOW", "[keys]"),
            ("SLOTBRIDGE_COMMANDS__DENY", "[keys]"),
        ],
    );
    assert!(
        !ok && text.contains("'keys' is both allowed and denied"),
        "{text}"
    );
}

/// How many of `count` connections opened at once complete their handshake within 800 ms
/// (before the first SYN retransmission) while the proxy at `addr` accepts none; the
/// connections are returned open, so the listen queue keeps them.
fn handshakes_while_stopped(addr: &str, count: usize) -> Vec<tokio::net::TcpStream> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connects = (0..count).map(|_| {
            tokio::time::timeout(
                Duration::from_millis(800),
                tokio::net::TcpStream::connect(addr),
            )
        });
        futures_util::future::join_all(connects)
            .await
            .into_iter()
            .filter_map(|connect| connect.ok()?.ok())
            .collect()
    })
}

/// The kernel's cap on a listen queue.
fn somaxconn() -> usize {
    let text = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .expect("this test reads the listen queue cap from /proc/sys/net/core/somaxconn (Linux)");
    text.trim().parse().unwrap()
}

/// A storm of connections the proxy cannot accept yet (it is stopped here, busy in a real
/// storm) waits in the listen queue of `tcp_backlog` places, as on Redis: with the default
/// (4096, capped by somaxconn) 2,000 connections all complete their handshake, where the
/// runtime's default of 1,024 dropped the rest until SYN retransmissions 1 s and 3 s later;
/// a small `tcp_backlog` holds only that many. Once the proxy runs again it serves them.
#[test]
fn connections_beyond_the_accept_rate_wait_in_a_listen_queue_of_tcp_backlog() {
    let storm = 2_000.min(somaxconn());
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let open_files: usize = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3)?.parse().ok())
        .expect("the open-file limit in /proc/self/limits");
    assert!(
        open_files > storm + 500,
        "this test opens {storm} connections: raise the open-file limit (ulimit -n) above {}",
        storm + 500
    );
    for (config, queued) in [("", storm..=storm), ("tcp_backlog: 64\n", 1..=80)] {
        let proxy = proxy_with(&format!("maxclients: 5000\n{config}"));
        proxy.send_signal("SIGSTOP");
        let waiting = handshakes_while_stopped(proxy.addr(), storm);
        proxy.send_signal("SIGCONT");
        assert!(
            queued.contains(&waiting.len()),
            "{config:?}: {} of {storm} connections completed their handshake, expected {queued:?}",
            waiting.len()
        );
        // A connection that waited in the queue is served.
        let mut first = waiting.into_iter().next().unwrap().into_std().unwrap();
        first.set_nonblocking(false).unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        first.write_all(b"PING\r\n").unwrap();
        let mut reply = [0u8; 7];
        first.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
    }
}
