//! Cross-slot moves (RENAME, RENAMENX, SMOVE, LMOVE, RPOPLPUSH, COPY) through the proxy in
//! front of a 3-master cluster, source and destination on different masters: every reply,
//! and what both keys hold afterwards, equals what one redis-server 7.0 gives for the same
//! sequence, in RESP2 and RESP3; a blocking move waits for a push. MSETNX is refused with
//! its reason, and `refuse` settings answer `-CROSSSLOT` naming the setting.
//!
//! The steps of a move are also run one by one against one real redis-server (both keys
//! on it) with another client's write injected between them, to show what the module
//! docs of `crossslot::moves` promise: the data ends up duplicated, never lost.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use common::{shared_cluster, Proxy, Standalone};
use slotbridge::crossslot::moves::{parse_move, Mover, Next};
use slotbridge::protocol::encode::encode_request;
use slotbridge::protocol::{Limits as WireLimits, Proto, ReplyScanner};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// One RESP connection, replies returned as their exact bytes.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str, proto: Proto) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
        };
        if proto == Proto::Resp3 {
            let hello = conn.call(&["HELLO", "3"]);
            assert!(hello.starts_with(b"%"), "HELLO 3: {hello:?}");
        }
        conn
    }

    fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Bytes {
        let refs: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        self.stream
            .write_all(&encode_request(&refs))
            .expect("send a command");
        self.read_reply()
    }

    fn line(&mut self, line: &str) -> Bytes {
        self.call(&words(line))
    }

    /// Sends every line in one write, then reads their replies.
    fn pipeline(&mut self, lines: &[String]) -> Vec<Bytes> {
        let mut wire = Vec::new();
        for line in lines {
            let words = words(line);
            let refs: Vec<&[u8]> = words.iter().map(|word| word.as_bytes()).collect();
            wire.extend_from_slice(&encode_request(&refs));
        }
        self.stream.write_all(&wire).expect("send a pipeline");
        lines.iter().map(|_| self.read_reply()).collect()
    }

    fn read_reply(&mut self) -> Bytes {
        let mut scanner = ReplyScanner::new(WireLimits::default());
        loop {
            if let Some(len) = scanner.next_frame_len(&self.buf).expect("a valid reply") {
                let frame: Vec<u8> = self.buf.drain(..len).collect();
                return Bytes::from(frame);
            }
            let mut chunk = [0u8; 65536];
            let n = common::read_some(&mut self.stream, &mut chunk).expect("read a reply");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn words(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_owned).collect()
}

/// Two untagged key names on different masters.
fn keys_on_two_masters(prefix: &str) -> (String, String) {
    let cluster = shared_cluster();
    let master = |key: &str| cluster.node_for_slot(cluster.keyslot(key));
    let first = format!("{prefix}:src");
    let second = (0..)
        .map(|i| format!("{prefix}:dst{i}"))
        .find(|key| master(key) != master(&first))
        .expect("a key on another master");
    (first, second)
}

/// Each line run on the standalone server and through the proxy: the replies must be the
/// same bytes.
fn same_replies(reference: &mut Conn, through: &mut Conn, lines: &[String], context: &str) {
    for line in lines {
        let want = reference.line(line);
        let got = through.line(line);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{context}: {line}"
        );
    }
}

/// Sequences that exercise each move and read both keys back, `{s}` the source and `{d}`
/// the destination.
const SEQUENCES: &[&str] = &[
    // RENAME: a missing key, a TTL kept, an existing destination of another type replaced,
    // a TTL on the destination dropped when the source has none.
    "DEL {s} {d}|RENAME {s} {d}|SET {s} v1 EX 100|RPUSH {d} old|RENAME {s} {d}|GET {d}|TTL {d}|EXISTS {s}|TYPE {d}",
    "DEL {s} {d}|SET {s} v2|SET {d} old EX 100|RENAME {s} {d}|TTL {d}|GET {d}|EXISTS {s}",
    "DEL {s} {d}|SADD {s} a b c|RENAME {s} {d}|SCARD {d}|SISMEMBER {d} b|EXISTS {s}",
    // RENAMENX: the destination exists (0, both kept), then does not (1), a missing source.
    "DEL {s} {d}|SET {s} v3 PX 90000|SET {d} taken|RENAMENX {s} {d}|GET {s}|GET {d}|DEL {d}|RENAMENX {s} {d}|GET {d}|EXISTS {s}|TTL {d}",
    "DEL {s} {d}|SET {d} x|RENAMENX {s} {d}|GET {d}",
    // The same key for both: one slot, forwarded, Redis's own answers.
    "DEL {s}|RENAME {s} {s}|SET {s} same|RENAME {s} {s}|RENAMENX {s} {s}|SMOVE {s} {s} m|LMOVE {s} {s} LEFT LEFT|GET {s}",
    // SMOVE: a missing member, a member, one already in the destination, missing source.
    "DEL {s} {d}|SADD {s} m n|SMOVE {s} {d} zz|SMOVE {s} {d} m|SISMEMBER {s} m|SISMEMBER {d} m|SADD {d} n|SMOVE {s} {d} n|EXISTS {s}|SCARD {d}|SMOVE {s} {d} n",
    // SMOVE's type checks in Redis's order.
    "DEL {s} {d}|SET {d} str|SMOVE {s} {d} m|SADD {s} m|SMOVE {s} {d} m|SMOVE {s} {d} absent|SISMEMBER {s} m|DEL {s}|SET {s} str|DEL {d}|SMOVE {s} {d} m",
    // LMOVE in every direction, RPOPLPUSH, the last element, a missing source.
    "DEL {s} {d}|RPUSH {s} a b c d e|LMOVE {s} {d} LEFT LEFT|LMOVE {s} {d} LEFT RIGHT|LMOVE {s} {d} RIGHT LEFT|LMOVE {s} {d} RIGHT RIGHT|LRANGE {s} 0 -1|LRANGE {d} 0 -1|RPOPLPUSH {s} {d}|EXISTS {s}|LRANGE {d} 0 -1|RPOPLPUSH {s} {d}|LMOVE {s} {d} LEFT LEFT",
    // LMOVE's errors: a bad direction, a destination of another type, a source of one.
    "DEL {s} {d}|LMOVE {s} {d} UP LEFT|RPUSH {s} a|SET {d} str|LMOVE {s} {d} LEFT LEFT|RPOPLPUSH {s} {d}|LRANGE {s} 0 -1|DEL {d}|SET {d} x|DEL {s}|SET {s} str|DEL {d}|LMOVE {s} {d} LEFT LEFT",
    // COPY: copied with its TTL, then refused without REPLACE, replaced with it.
    "DEL {s} {d}|COPY {s} {d}|HSET {s} f v|PEXPIRE {s} 80000|COPY {s} {d}|HGETALL {d}|TTL {d}|HSET {s} f w|COPY {s} {d}|HGET {d} f|COPY {s} {d} DB 0 REPLACE|HGET {d} f|EXISTS {s}|COPY {s} {d} foo",
    // The blocking forms: an element there, a timeout, their errors in Redis's order.
    "DEL {s} {d}|RPUSH {s} a b c|BLMOVE {s} {d} LEFT RIGHT 0|BRPOPLPUSH {s} {d} 1|BLMOVE {s} {d} RIGHT RIGHT abc|LRANGE {d} 0 -1|BLMOVE {s} {d} LEFT LEFT 0.05|BRPOPLPUSH {s} {d} 0.05|EXISTS {s}|BLMOVE {s} {d} UP LEFT 0|BLMOVE {s} {d} LEFT LEFT -1|SET {s} str|BLMOVE {s} {d} LEFT LEFT 0|BRPOPLPUSH {s} {d} 0",
];

#[test]
fn moves_answer_as_one_redis_server_in_resp2_and_resp3() {
    let standalone = Standalone::start();
    let (source, destination) = keys_on_two_masters("mv");
    for proto in [Proto::Resp2, Proto::Resp3] {
        let mut reference = Conn::open(standalone.addr(), proto);
        let mut through = Conn::open(proxy().addr(), proto);
        for sequence in SEQUENCES {
            let lines: Vec<String> = sequence
                .replace("{s}", &source)
                .replace("{d}", &destination)
                .split('|')
                .map(str::to_owned)
                .collect();
            same_replies(&mut reference, &mut through, &lines, &format!("{proto:?}"));
        }
    }
}

#[test]
fn a_pipeline_sees_each_moves_writes_as_on_one_redis() {
    let standalone = Standalone::start();
    let (s, d) = keys_on_two_masters("mvpipe");
    let mut reference = Conn::open(standalone.addr(), Proto::Resp2);
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    // Each move is followed, in the same write, by reads of both keys: they must see it.
    let pipeline = format!(
        "DEL {s} {d}|SET {s} v|RENAME {s} {d}|GET {d}|EXISTS {s}|SADD {s} m|SMOVE {s} {d} m|\
         EXISTS {s}|TYPE {d}|DEL {d}|RPUSH {s} a b|LMOVE {s} {d} LEFT RIGHT|RPOPLPUSH {s} {d}|\
         LRANGE {d} 0 -1|EXISTS {s}|COPY {d} {s}|LRANGE {s} 0 -1|RENAMENX {s} {d}|SUNIONSTORE {d} {s}|\
         DEL {s}|SADD {s} x|SUNIONSTORE {d} {s}|SMEMBERS {d}"
    );
    let lines: Vec<String> = pipeline.split('|').map(str::to_owned).collect();
    for _ in 0..3 {
        let want = reference.pipeline(&lines);
        let got = through.pipeline(&lines);
        for ((line, got), want) in lines.iter().zip(&got).zip(&want) {
            assert_eq!(got, want, "{line}");
        }
    }
}

#[test]
fn copy_to_another_database_answers_as_a_cluster_node_does() {
    let (source, destination) = keys_on_two_masters("mvdb");
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    through.line(&format!("SET {source} v"));
    // The same request on one slot is forwarded, so the node's own answer is the reference.
    // (A valid `DB n` copies into database n: tests/select_databases.rs.)
    for options in ["DB 16", "DB -1", "DB x", "DB"] {
        let want = through.line(&format!("COPY {source} {{{source}}}x {options}"));
        let got = through.line(&format!("COPY {source} {destination} {options}"));
        assert_eq!(got, want, "COPY ... {options}");
        assert!(got.starts_with(b"-ERR"), "{got:?}");
    }
}

#[test]
fn msetnx_across_slots_is_refused_with_its_reason() {
    let (a, b) = keys_on_two_masters("mvref");
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    through.line(&format!("DEL {a} {b}"));
    assert_eq!(
        through.line(&format!("MSETNX {a} 1 {b} 2")).as_ref(),
        &b"-CROSSSLOT Keys in request don't hash to the same slot (MSETNX is all or nothing \
           only on one node: use keys with a common hash tag)\r\n"[..]
    );
    assert_eq!(through.line(&format!("EXISTS {a} {b}")).as_ref(), b":0\r\n");
    // On one slot it is Redis's own.
    assert_eq!(through.line("MSETNX {mv}a 1 {mv}b 2").as_ref(), b":1\r\n");
    assert_eq!(through.line("MSETNX {mv}a 1 {mv}c 2").as_ref(), b":0\r\n");
    through.line("DEL {mv}a {mv}b {mv}c");
}

/// The number of clients blocked on `addr`'s node.
fn blocked_clients(addr: &str) -> u64 {
    let mut node = Conn::open(addr, Proto::Resp2);
    let info = node.call(&["INFO", "clients"]);
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .map_or(0, |count| count.trim().parse().expect("a count"))
}

#[test]
fn a_blocking_move_waits_for_a_push_then_moves_the_element() {
    let (s, d) = keys_on_two_masters("mvblock");
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    through.line(&format!("DEL {s} {d}"));
    let source_master = shared_cluster().node_for_slot(shared_cluster().keyslot(&s));
    let before = blocked_clients(&source_master);
    let addr = proxy().addr().to_owned();
    let line = format!("BLMOVE {s} {d} RIGHT LEFT 10");
    let waiter = std::thread::spawn(move || Conn::open(&addr, Proto::Resp3).line(&line));
    common::wait_until("the move to block", Duration::from_secs(5), || {
        blocked_clients(&source_master) > before
    });
    assert_eq!(through.line(&format!("RPUSH {s} a b")).as_ref(), b":2\r\n");
    let moved = waiter.join().expect("the blocked client");
    assert_eq!(moved.as_ref(), b"$1\r\nb\r\n");
    assert_eq!(
        through.line(&format!("LRANGE {s} 0 -1")).as_ref(),
        b"*1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        through.line(&format!("LRANGE {d} 0 -1")).as_ref(),
        b"*1\r\n$1\r\nb\r\n"
    );
    through.line(&format!("DEL {s} {d}"));
}

#[test]
fn refused_moves_name_their_setting() {
    let refusing = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.moves=refuse",
        "--set",
        "cross_slot.stores=refuse",
    ]);
    let (a, b) = keys_on_two_masters("mvoff");
    let mut conn = Conn::open(refusing.addr(), Proto::Resp2);
    conn.line(&format!("SET {a} v"));
    for command in [
        "RENAME",
        "RENAMENX",
        "SMOVE",
        "LMOVE",
        "RPOPLPUSH",
        "BLMOVE",
        "BRPOPLPUSH",
    ] {
        let line = match command {
            "SMOVE" => format!("SMOVE {a} {b} m"),
            "LMOVE" => format!("LMOVE {a} {b} LEFT LEFT"),
            "BLMOVE" => format!("BLMOVE {a} {b} LEFT LEFT 0"),
            "BRPOPLPUSH" => format!("BRPOPLPUSH {a} {b} 0"),
            _ => format!("{command} {a} {b}"),
        };
        assert_eq!(
            conn.line(&line).as_ref(),
            b"-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.moves)\r\n",
            "{line}"
        );
    }
    assert_eq!(
        conn.line(&format!("COPY {a} {b}")).as_ref(),
        b"-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.stores)\r\n"
    );
    assert_eq!(conn.line(&format!("GET {a}")).as_ref(), b"$1\r\nv\r\n");
    // One slot is forwarded whatever the settings.
    assert_eq!(conn.line("SET {mvoff}x 1").as_ref(), b"+OK\r\n");
    assert_eq!(conn.line("RENAME {mvoff}x {mvoff}y").as_ref(), b"+OK\r\n");
    conn.line(&format!("DEL {a} {{mvoff}}y"));
}

/// Runs a move's steps on one server (both keys on it) as the proxy runs them across two
/// masters, calling `between(step)` before each step after the first, and returns the
/// client's reply. Returns `None` when `stop_after` steps have run (a crash there).
fn run_steps(
    server: &str,
    line: &str,
    stop_after: usize,
    mut between: impl FnMut(usize),
) -> Option<Bytes> {
    let args: Vec<Bytes> = words(line).into_iter().map(Bytes::from).collect();
    let request = parse_move(&args).expect("a move").expect("valid arguments");
    let mut mover = Mover::new(request.clone(), Proto::Resp2, 1 << 20);
    let mut shared = Conn::open(server, Proto::Resp2);
    let mut watching = Conn::open(server, Proto::Resp2);
    let mut next = mover.start();
    for step in 0.. {
        if step == stop_after {
            return None;
        }
        if step > 0 {
            between(step);
        }
        let answer = match next {
            Next::Reply(reply) => return Some(reply),
            Next::Send(_, command) => shared.call(&command),
            Next::WatchSource => watching.call(&[&b"WATCH"[..], &request.source]),
            Next::Block(command) => shared.call(&command),
            Next::ExecWatched(commands) => {
                watching.call(&["MULTI"]);
                for command in commands {
                    watching.call(&command);
                }
                watching.call(&["EXEC"])
            }
        };
        next = mover.step(&answer);
    }
    None
}

#[test]
fn a_writer_or_a_crash_between_the_steps_duplicates_and_never_loses() {
    let server = Standalone::start();
    let mut other = Conn::open(server.addr(), Proto::Resp2);

    // RENAME: a member added to the source after the copy keeps the source (the watch
    // saw the write); the destination has the value as it was.
    other.line("SADD s a b");
    let reply = run_steps(server.addr(), "RENAME s d", 99, |step| {
        if step == 3 {
            other.line("SADD s c");
        }
    });
    assert_eq!(reply.as_deref(), Some(&b"+OK\r\n"[..]));
    assert_eq!(other.line("SCARD s").as_ref(), b":3\r\n", "source kept");
    assert_eq!(other.line("SCARD d").as_ref(), b":2\r\n");
    // Undisturbed, the source goes.
    other.line("DEL d");
    let reply = run_steps(server.addr(), "RENAME s d", 99, |_| {});
    assert_eq!(reply.as_deref(), Some(&b"+OK\r\n"[..]));
    assert_eq!(other.line("EXISTS s").as_ref(), b":0\r\n");
    assert_eq!(other.line("SCARD d").as_ref(), b":3\r\n");

    // LMOVE: another client pops the same element between the push and the pop: the
    // source is not popped again, the destination has it, the reply is it.
    other.line("DEL s d");
    other.line("RPUSH s x y");
    let reply = run_steps(server.addr(), "LMOVE s d LEFT RIGHT", 99, |step| {
        if step == 2 {
            assert_eq!(other.line("LPOP s").as_ref(), b"$1\r\nx\r\n");
        }
    });
    assert_eq!(reply.as_deref(), Some(&b"$1\r\nx\r\n"[..]));
    assert_eq!(
        other.line("LRANGE s 0 -1").as_ref(),
        b"*1\r\n$1\r\ny\r\n",
        "y kept"
    );
    assert_eq!(other.line("LRANGE d 0 -1").as_ref(), b"*1\r\n$1\r\nx\r\n");

    // SMOVE: another client removes the member between the add and the removal: 0, as
    // Redis answers after that removal, and the destination keeps the member.
    other.line("DEL s d");
    other.line("SADD s m");
    let reply = run_steps(server.addr(), "SMOVE s d m", 99, |step| {
        if step == 2 {
            other.line("SREM s m");
        }
    });
    assert_eq!(reply.as_deref(), Some(&b":0\r\n"[..]));
    assert_eq!(other.line("SISMEMBER d m").as_ref(), b":1\r\n");

    // A crash after the copy, before the removal: in both places.
    for (setup, line, steps, check_source, check_destination) in [
        ("SET s v", "RENAME s d", 3, "GET s", "GET d"),
        (
            "SADD s m",
            "SMOVE s d m",
            2,
            "SISMEMBER s m",
            "SISMEMBER d m",
        ),
        ("RPUSH s e", "RPOPLPUSH s d", 2, "LLEN s", "LLEN d"),
    ] {
        other.line("DEL s d");
        other.line(setup);
        assert_eq!(run_steps(server.addr(), line, steps, |_| {}), None);
        let source = other.line(check_source);
        let destination = other.line(check_destination);
        assert!(
            source != b":0\r\n"[..] && source != b"$-1\r\n"[..],
            "{line}: source {source:?}"
        );
        assert_eq!(source, destination, "{line}: the copy is whole");
    }
}

#[test]
fn a_value_above_max_bytes_is_not_moved() {
    let limited = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.max_bytes=64",
    ]);
    let (a, b) = keys_on_two_masters("mvbig");
    let mut conn = Conn::open(limited.addr(), Proto::Resp2);
    conn.line(&format!("DEL {a} {b}"));
    // Not compressible, so its DUMP payload is larger than the limit too.
    let mut state = 0x2545_f491_u32;
    let value: String = (0..200)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            char::from(b'!' + (state % 90) as u8)
        })
        .collect();
    conn.call(&["SET".to_owned(), a.clone(), value]);
    let refusal = conn.line(&format!("RENAME {a} {b}"));
    assert!(
        refusal.starts_with(b"-ERR proxy: cross-slot RENAME reads ")
            && refusal.ends_with(b"more than the limit of 64; use keys with a common hash tag to run it on one node\r\n"),
        "{refusal:?}"
    );
    let refusal = conn.line(&format!("COPY {a} {b}"));
    assert!(
        refusal.starts_with(b"-ERR proxy: cross-slot COPY reads "),
        "{refusal:?}"
    );
    assert_eq!(
        conn.line(&format!("EXISTS {a} {b}")).as_ref(),
        b":1\r\n",
        "nothing moved"
    );
    // A small value still moves.
    conn.line(&format!("SET {a} small"));
    assert_eq!(conn.line(&format!("RENAME {a} {b}")).as_ref(), b"+OK\r\n");
    assert_eq!(conn.line(&format!("GET {b}")).as_ref(), b"$5\r\nsmall\r\n");
    conn.line(&format!("DEL {b}"));
}

#[test]
fn under_a_layout_a_move_between_slots_runs_on_the_cluster_names() {
    let proxy = Proxy::start_with_layout(
        &shared_cluster().seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "lymv",
    );
    let cluster = shared_cluster();
    // `conv:*` keys keep their names; `lock:<key>` becomes `lymv:{lk:<key>}:l`.
    let source = "lymv:conv:a";
    let destination = (0..)
        .map(|i| format!("lock{i}"))
        .find(|lock| cluster.keyslot(&format!("lymv:{{lk:{lock}}}:l")) != cluster.keyslot(source))
        .expect("a lock in another slot");
    let mut conn = Conn::open(proxy.addr(), Proto::Resp2);
    let lines: Vec<String> = [
        format!("DEL {source} lymv:lock:{destination}"),
        format!("SET {source} v"),
        format!("RENAME {source} lymv:lock:{destination}"),
        format!("GET lymv:lock:{destination}"),
        format!("EXISTS {source}"),
    ]
    .into_iter()
    .collect();
    let replies = conn.pipeline(&lines);
    let replies: Vec<&[u8]> = replies.iter().map(|reply| reply.as_ref()).collect();
    assert_eq!(
        replies[1..],
        [&b"+OK\r\n"[..], b"+OK\r\n", b"$1\r\nv\r\n", b":0\r\n"],
        "{lines:?}"
    );
    // Written under its cluster name, on that name's master.
    let cluster_name = format!("lymv:{{lk:{destination}}}:l");
    let mut master = Conn::open(
        &cluster.node_for_slot(cluster.keyslot(&cluster_name)),
        Proto::Resp2,
    );
    assert_eq!(
        master.line(&format!("GET {cluster_name}")).as_ref(),
        b"$1\r\nv\r\n"
    );
    conn.line(&format!("DEL lymv:lock:{destination}"));
}
