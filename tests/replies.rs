//! Replies of any shape Redis sends pass through the proxy as Redis sends them, compared
//! byte for byte with a real redis-server: a Lua table that holds itself makes Redis answer
//! thousands of levels deep (arrays in RESP2, arrays, maps and sets in RESP3), on the plain
//! and the key-layout paths and inside a transaction, while other clients' pipelines on
//! the same master go on; and subscription confirmations and messages reach a client under
//! CLIENT REPLY OFF or SKIP exactly as Redis 7.0 delivers them.

mod common;

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{resp_command, resp_lines, shared_cluster, Proxy, Standalone};

/// A Lua table holding itself: Redis converts it until Lua's stack runs out, then ends the
/// innermost level with `-ERR reached lua stack limit`.
const SELF_ARRAY: &str = "local a = {}; local b = {a}; a[1] = b; return a";
/// The same as a RESP3 map (`%1`) in every level.
const SELF_MAP: &str = "redis.setresp(3); local t = {}; t.map = {k = t}; return t";
/// The same as a RESP3 set (`~1`) in every level.
const SELF_SET: &str = "redis.setresp(3); local t = {}; t.set = {}; t.set[t] = true; return t";

/// A key served by the layout path (the botmesh lock family) and its cluster name.
const LAYOUT_KEY: &str = "mybot:lock:deep";
const LAYOUT_CLUSTER_KEY: &str = "mybot:{lk:deep}:l";

/// How long a reply may take to start or go on arriving.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The length of the first whole frame in `data`, counted with one number (elements still
/// to come), not recursion: the replies here nest thousands deep.
fn frame_len(data: &[u8]) -> Option<usize> {
    let mut at = 0;
    let mut to_come: i64 = 1;
    while to_come > 0 {
        let end = at + data.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let head = std::str::from_utf8(&data[at + 1..end]).ok()?;
        let kind = data[at];
        at = end + 2;
        to_come -= 1;
        match kind {
            b'$' | b'=' | b'!' => {
                let len: i64 = head.parse().ok()?;
                if len >= 0 {
                    at += usize::try_from(len).ok()? + 2;
                    if data.len() < at {
                        return None;
                    }
                }
            }
            b'*' | b'~' | b'>' => to_come += head.parse::<i64>().ok()?.max(0),
            b'%' => to_come += 2 * head.parse::<i64>().ok()?,
            // An attribute's pairs, then the frame it annotates in the same place.
            b'|' => to_come += 2 * head.parse::<i64>().ok()? + 1,
            _ => {}
        }
    }
    Some(at)
}

/// How many array, map and set headers the frame holds (its payloads here are short words
/// that start with none of their type bytes).
fn aggregate_headers(frame: &[u8]) -> usize {
    frame
        .split(|&b| b == b'\n')
        .filter(|line| matches!(line.first(), Some(b'*' | b'%' | b'~')))
        .count()
}

/// One raw RESP connection that reads whole frames of any depth.
struct Conn {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Conn {
    fn connect(addr: &str) -> Conn {
        let stream =
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        Conn {
            stream,
            pending: Vec::new(),
        }
    }

    /// A connection that sent `HELLO proto` (its reply, which names the server, is read
    /// and dropped).
    fn with_proto(addr: &str, proto: u8) -> Conn {
        let mut conn = Conn::connect(addr);
        conn.call(&["HELLO", &proto.to_string()]);
        conn
    }

    fn send(&mut self, args: &[&str]) {
        self.stream.write_all(&resp_command(args)).expect("send");
    }

    fn call(&mut self, args: &[&str]) -> Vec<u8> {
        self.send(args);
        self.read_frame()
    }

    fn read_frame(&mut self) -> Vec<u8> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(len) = frame_len(&self.pending) {
                return self.pending.drain(..len).collect();
            }
            match common::read_some(&mut self.stream, &mut buf) {
                Ok(0) => panic!("closed with {} bytes of a reply", self.pending.len()),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) => panic!("no whole reply ({} bytes so far): {e}", self.pending.len()),
            }
        }
    }

    /// Everything that arrives until nothing has come for `quiet`.
    fn read_quiet(&mut self, quiet: Duration) -> Vec<u8> {
        self.stream.set_read_timeout(Some(quiet)).expect("timeout");
        let mut out = std::mem::take(&mut self.pending);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match common::read_some(&mut self.stream, &mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        self.stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("timeout");
        out
    }
}

fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= 300 {
        return format!("{text:?}");
    }
    format!(
        "{:?} ... {:?} ({} bytes)",
        &text[..120],
        &text[text.len() - 120..],
        text.len()
    )
}

/// The master of `key` on the shared cluster.
fn master_of(key: &str) -> String {
    let cluster = shared_cluster();
    cluster.node_for_slot(cluster.keyslot(key))
}

#[test]
fn lua_replies_nested_thousands_deep_pass_byte_exact() {
    let cluster = shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "deep:plain";
    for (proto, script) in [
        (2, SELF_ARRAY),
        (3, SELF_ARRAY),
        (3, SELF_MAP),
        (3, SELF_SET),
    ] {
        let eval = ["EVAL", script, "1", key];
        let expected = Conn::with_proto(&master_of(key), proto).call(&eval);
        assert!(
            aggregate_headers(&expected) > 2000,
            "Redis itself nests {}: {}",
            aggregate_headers(&expected),
            show(&expected)
        );
        let mut conn = Conn::with_proto(proxy.addr(), proto);
        let got = conn.call(&eval);
        assert!(
            got == expected,
            "RESP{proto} {script}: got {}, Redis sends {}",
            show(&got),
            show(&expected)
        );
        assert_eq!(conn.call(&["PING"]), b"+PONG\r\n");
    }
    let log = proxy.stderr();
    assert!(
        !log.contains("backend connection lost"),
        "a connection was dropped: {log}"
    );
}

#[test]
fn a_deep_reply_leaves_other_clients_on_the_same_master_unaffected() {
    let cluster = shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "{deep:shared}:eval";
    let eval = ["EVAL", SELF_ARRAY, "1", key];
    let expected = Conn::connect(&master_of(key)).call(&eval);
    const ROUNDS: usize = 20;
    const DEPTH: usize = 100;
    std::thread::scope(|scope| {
        let pipelines = scope.spawn(|| {
            // Pipelined requests on the same master as the EVAL, in flight alongside it.
            let mut conn = Conn::connect(proxy.addr());
            for round in 0..ROUNDS {
                let mut wire = Vec::new();
                for i in 0..DEPTH {
                    let item = format!("{{deep:shared}}:{i}");
                    let value = format!("{round}-{i}");
                    wire.extend_from_slice(&resp_command(&["SET", &item, &value]));
                    wire.extend_from_slice(&resp_command(&["GET", &item]));
                }
                conn.stream.write_all(&wire).expect("send a pipeline");
                for i in 0..DEPTH {
                    let value = format!("{round}-{i}");
                    assert_eq!(conn.read_frame(), b"+OK\r\n", "SET {i} of round {round}");
                    let get = conn.read_frame();
                    let want = format!("${}\r\n{value}\r\n", value.len());
                    assert_eq!(show(&get), show(want.as_bytes()), "GET {i}");
                }
            }
        });
        let mut conn = Conn::connect(proxy.addr());
        for _ in 0..ROUNDS {
            let got = conn.call(&eval);
            assert!(got == expected, "got {}", show(&got));
        }
        pipelines.join().expect("every pipelined reply");
    });
    let log = proxy.stderr();
    assert!(
        !log.contains("backend connection lost"),
        "a connection was dropped: {log}"
    );
}

#[test]
fn deep_replies_on_the_layout_path_and_in_a_transaction() {
    let cluster = shared_cluster();
    let proxy = Proxy::start_with_layout(
        &cluster.seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "mybot",
    );
    let master = master_of(LAYOUT_CLUSTER_KEY);
    for (proto, script) in [
        (2, SELF_ARRAY),
        (3, SELF_ARRAY),
        (3, SELF_MAP),
        (3, SELF_SET),
    ] {
        let mut direct = Conn::with_proto(&master, proto);
        let mut conn = Conn::with_proto(proxy.addr(), proto);
        let expected = direct.call(&["EVAL", script, "1", LAYOUT_CLUSTER_KEY]);
        let got = conn.call(&["EVAL", script, "1", LAYOUT_KEY]);
        assert!(got == expected, "RESP{proto}: got {}", show(&got));
        // EXEC's reply is split into its elements when one needs its key names shown as
        // legacy names (LMPOP's).
        let block = |conn: &mut Conn, key: &str| {
            assert_eq!(conn.call(&["MULTI"]), b"+OK\r\n");
            assert_eq!(conn.call(&["EVAL", script, "1", key]), b"+QUEUED\r\n");
            assert_eq!(conn.call(&["LMPOP", "1", key, "LEFT"]), b"+QUEUED\r\n");
            conn.call(&["EXEC"])
        };
        let expected = block(&mut direct, LAYOUT_CLUSTER_KEY);
        assert!(aggregate_headers(&expected) > 2000, "{}", show(&expected));
        let got = block(&mut conn, LAYOUT_KEY);
        assert!(got == expected, "RESP{proto} EXEC: got {}", show(&got));
        assert_eq!(conn.call(&["PING"]), b"+PONG\r\n");
    }
}

/// What a subscriber connection of protocol `proto` receives after its HELLO reply while
/// `steps` run, one at a time with a pause after each: `PUBLISH ...` steps go through a
/// second connection (its reply is not part of the transcript), the others through the
/// subscriber.
fn subscriber_transcript(addr: &str, proto: u8, steps: &[&str]) -> Vec<u8> {
    let quiet = Duration::from_millis(250);
    let mut subscriber = Conn::with_proto(addr, proto);
    let mut publisher = Conn::connect(addr);
    let mut transcript = Vec::new();
    for step in steps {
        let args: Vec<&str> = step.split(' ').collect();
        if args[0] == "PUBLISH" {
            publisher.call(&args);
        } else {
            subscriber
                .stream
                .write_all(&resp_lines(&[step]))
                .expect("send");
        }
        transcript.extend_from_slice(&subscriber.read_quiet(quiet));
    }
    transcript
}

#[test]
fn subscriptions_under_client_reply_off_and_skip_arrive_as_redis_sends_them() {
    let redis = Standalone::start();
    let cluster = shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let off: &[&str] = &[
        "CLIENT REPLY OFF",
        "SUBSCRIBE ch",
        "PUBLISH ch hi",
        "PING",
        // An arity error is muted like any reply.
        "SUBSCRIBE",
        "UNSUBSCRIBE ch",
        "UNSUBSCRIBE",
        "CLIENT REPLY ON",
        "PING",
    ];
    let skip: &[&str] = &[
        "CLIENT REPLY SKIP",
        "SUBSCRIBE ch other",
        "PUBLISH ch hi",
        "PING",
        "CLIENT REPLY SKIP",
        "SSUBSCRIBE shard",
        // Named: with no names the order is Redis's dict order, which differs per process.
        "UNSUBSCRIBE ch other",
        "SUNSUBSCRIBE",
    ];
    // RESP3 only: RESP2 refuses CLIENT REPLY while subscribed.
    let off_while_subscribed: &[&str] = &[
        "SUBSCRIBE ch",
        "CLIENT REPLY OFF",
        "PUBLISH ch hi",
        "PSUBSCRIBE p*",
        "PUBLISH ch x",
        "PUNSUBSCRIBE p*",
        "CLIENT REPLY ON",
        "PUBLISH ch y",
        "UNSUBSCRIBE",
    ];
    for (proto, steps) in [
        (3, off),
        (2, off),
        (3, skip),
        (2, skip),
        (3, off_while_subscribed),
    ] {
        let expected = subscriber_transcript(redis.addr(), proto, steps);
        assert!(
            expected.windows(9).any(|w| w == b"subscribe"),
            "Redis sent no confirmation: {}",
            show(&expected)
        );
        let got = subscriber_transcript(proxy.addr(), proto, steps);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "RESP{proto} {steps:?}"
        );
    }
}
