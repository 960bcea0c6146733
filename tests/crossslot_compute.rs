//! Differential tests of `slotbridge::crossslot` against a real redis-server: random sets,
//! sorted sets, strings and HyperLogLogs under one hash tag (so Redis can run the command
//! itself), read as the proxy reads them, computed by the crate, and compared byte for byte
//! with Redis's own reply in RESP2 and RESP3. STORE forms apply the crate's writes to a
//! second key and compare what it holds with what Redis's own STORE left in the first.
//!
//! The generator is seeded (the seed is printed with every failure), so a failing case
//! replays exactly.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use slotbridge::crossslot::{compute, parse, Limits, Request, Value};
use slotbridge::protocol::encode::encode_request;
use slotbridge::protocol::{Limits as WireLimits, Proto, ReplyScanner};

/// One RESP connection to the server, replies returned as their exact bytes.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str, proto: Proto) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect to redis-server");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
        };
        if proto == Proto::Resp3 {
            let hello = conn.call(&[b"HELLO".as_slice(), b"3"]);
            assert!(hello.starts_with(b"%"), "HELLO 3: {hello:?}");
        }
        conn
    }

    fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Bytes {
        let refs: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        self.stream
            .write_all(&encode_request(&refs))
            .expect("send a command");
        let mut scanner = ReplyScanner::new(WireLimits::default());
        loop {
            if let Some(len) = scanner.next_frame_len(&self.buf).expect("a valid reply") {
                let frame: Vec<u8> = self.buf.drain(..len).collect();
                return Bytes::from(frame);
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read a reply");
            assert!(n > 0, "redis-server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn ok<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let reply = self.call(args);
        assert!(!reply.starts_with(b"-"), "setup command failed: {reply:?}");
    }
}

/// xorshift64*: a small seeded generator, so every case replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: usize = 4;
const DEST: &str = "{t}dest";
const MINE: &str = "{t}mine";
const MEMBERS: &[&str] = &[
    "a", "b", "c", "d", "e", "1", "2", "10", "-5", "00", "x y", "\0bin", "zz", "7",
];
const SCORES: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "0.5",
    "inf",
    "-inf",
    "1e300",
    "-1e300",
    "12345678901234567890",
    "9007199254740993",
    "3.14159",
    "1e-310",
    "-2.5",
    "0.1",
    "1.7976931348623157e308",
    "2",
];
const WEIGHTS: &[&str] = &[
    "1", "2", "0", "-1", "0.5", "inf", "-inf", "1e308", "0x10", "3",
];

fn key(index: usize) -> String {
    format!("{{t}}k{index}")
}

fn random_key(rng: &mut Rng) -> String {
    key(rng.below(KEYS))
}

/// Fills the input keys for a set or sorted-set case.
fn fill_collections(conn: &mut Conn, rng: &mut Rng, zsets: bool) {
    for index in 0..KEYS {
        let name = key(index);
        let roll = rng.below(100);
        let members: Vec<&str> = (0..1 + rng.below(7)).map(|_| rng.pick(MEMBERS)).collect();
        if roll < 15 {
            continue; // missing
        } else if roll < 22 {
            let kind: &[&str] = if zsets {
                &["RPUSH", "SET"]
            } else {
                &["ZADD", "SET"]
            };
            match rng.pick(kind) {
                "SET" => conn.ok(&["SET", &name, "text"]),
                "RPUSH" => conn.ok(&["RPUSH", &name, "x"]),
                _ => conn.ok(&["ZADD", &name, "1", "x"]),
            }
        } else if zsets && roll < 75 {
            let mut args = vec!["ZADD".to_owned(), name];
            for member in members {
                args.push(rng.pick(SCORES).to_owned());
                args.push(member.to_owned());
            }
            conn.ok(&args);
        } else {
            let mut args = vec!["SADD".to_owned(), name];
            args.extend(members.iter().map(|member| (*member).to_owned()));
            conn.ok(&args);
        }
    }
}

fn random_keys(rng: &mut Rng, count: usize) -> Vec<String> {
    (0..count).map(|_| random_key(rng)).collect()
}

fn set_command(rng: &mut Rng) -> Vec<String> {
    let name = rng.pick(&[
        "SUNION",
        "SINTER",
        "SDIFF",
        "SUNIONSTORE",
        "SINTERSTORE",
        "SDIFFSTORE",
        "SINTERCARD",
    ]);
    let count = 1 + rng.below(4);
    let mut args = vec![name.to_owned()];
    if name.ends_with("STORE") {
        args.push(DEST.to_owned());
    }
    if name == "SINTERCARD" {
        let numkeys = if rng.chance(5) {
            "0".to_owned()
        } else {
            count.to_string()
        };
        args.push(numkeys);
    }
    args.extend(random_keys(rng, count));
    if name == "SINTERCARD" && rng.chance(50) {
        args.push("LIMIT".to_owned());
        args.push(rng.pick(&["0", "1", "2", "-1", "x"]).to_owned());
    }
    args
}

fn zset_command(rng: &mut Rng) -> Vec<String> {
    let name = rng.pick(&[
        "ZUNION",
        "ZINTER",
        "ZDIFF",
        "ZUNIONSTORE",
        "ZINTERSTORE",
        "ZDIFFSTORE",
        "ZINTERCARD",
    ]);
    let count = 1 + rng.below(4);
    let mut args = vec![name.to_owned()];
    let store = name.ends_with("STORE");
    if store {
        args.push(DEST.to_owned());
    }
    let numkeys = match rng.below(40) {
        0 => "0".to_owned(),
        1 => "x".to_owned(),
        2 => (count + 1).to_string(),
        _ => count.to_string(),
    };
    args.push(numkeys);
    args.extend(random_keys(rng, count));
    let algebra = !name.contains("DIFF") && name != "ZINTERCARD";
    if algebra && rng.chance(60) {
        args.push("WEIGHTS".to_owned());
        args.extend((0..count).map(|_| rng.pick(WEIGHTS).to_owned()));
    }
    if algebra && rng.chance(50) {
        args.push("AGGREGATE".to_owned());
        args.push(rng.pick(&["SUM", "MIN", "MAX", "sum", "max"]).to_owned());
    }
    if !store && name != "ZINTERCARD" && rng.chance(70) {
        args.push("WITHSCORES".to_owned());
    }
    if name == "ZINTERCARD" && rng.chance(50) {
        args.push("LIMIT".to_owned());
        args.push(rng.pick(&["0", "1", "2", "-1"]).to_owned());
    }
    if rng.chance(3) {
        args.push(rng.pick(&["WEIGHTS", "BOGUS", "WITHSCORES"]).to_owned());
    }
    args
}

/// Reads every input as the proxy does (on `reader`), then computes in both protocols.
fn run_ours(reader: &mut Conn, request: &Request) -> [slotbridge::crossslot::Outcome; 2] {
    let values: Vec<Value> = request
        .reads
        .iter()
        .map(|read| {
            let replies: Vec<Bytes> = read
                .commands()
                .iter()
                .map(|command| reader.call(command))
                .collect();
            read.value(&replies)
                .unwrap_or_else(|error| panic!("read of {:?} refused: {error:?}", read.key))
        })
        .collect();
    let limits = Limits::default();
    [
        compute(request, &values, Proto::Resp2, &limits),
        compute(request, &values, Proto::Resp3, &limits),
    ]
}

/// A set reply's header and its elements in byte order (Redis's member order follows its
/// hash seed).
fn unordered(reply: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let header_end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(0, |at| at + 2);
    let mut rest = &reply[header_end..];
    let mut elements = Vec::new();
    while !rest.is_empty() {
        let len = ReplyScanner::new(WireLimits::default())
            .next_frame_len(rest)
            .expect("valid")
            .expect("whole");
        elements.push(rest[..len].to_vec());
        rest = &rest[len..];
    }
    elements.sort();
    (reply[..header_end].to_vec(), elements)
}

struct Server {
    resp2: Conn,
    resp3: Conn,
}

impl Server {
    /// Compares a read command's replies; `Ok(true)` when the command was computed.
    fn compare_read(&mut self, rng: &mut Rng, args: &[String], seed: u64) -> bool {
        let bytes: Vec<Bytes> = args.iter().map(|arg| Bytes::from(arg.clone())).collect();
        let expected = [self.resp2.call(args), self.resp3.call(args)];
        let request = match parse(&bytes) {
            Ok(request) => request,
            Err(error) => {
                assert_eq!(error, expected[0], "seed {seed}: {args:?}");
                return false;
            }
        };
        let reader = if rng.chance(50) {
            &mut self.resp2
        } else {
            &mut self.resp3
        };
        let ours = run_ours(reader, &request);
        let is_set_reply = ["SUNION", "SINTER", "SDIFF"].contains(&args[0].as_str());
        for (ours, theirs) in ours.iter().zip(&expected) {
            assert!(
                ours.writes.is_empty(),
                "seed {seed}: a read wrote: {args:?}"
            );
            if is_set_reply && !theirs.starts_with(b"-") {
                assert_eq!(
                    unordered(&ours.reply),
                    unordered(theirs),
                    "seed {seed}: {args:?}"
                );
            } else {
                assert_eq!(ours.reply, *theirs, "seed {seed}: {args:?}");
            }
        }
        true
    }
}

fn main_cases(server: &mut Server, seed: u64, zsets: bool) -> (usize, usize) {
    let mut rng = Rng(seed);
    server.resp2.ok(&["FLUSHALL"]);
    fill_collections(&mut server.resp2, &mut rng, zsets);
    let args = if zsets {
        zset_command(&mut rng)
    } else {
        set_command(&mut rng)
    };
    if args[0].ends_with("STORE") {
        let computed = store_case(server, &mut rng, &args, seed);
        (1, usize::from(computed))
    } else {
        (1, usize::from(server.compare_read(&mut rng, &args, seed)))
    }
}

/// The value a key holds, in a form two keys can be compared by.
fn dump(conn: &mut Conn, key: &str) -> (Bytes, Vec<Vec<u8>>, bool) {
    let kind = conn.call(&["TYPE", key]);
    let content = match &kind[..] {
        b"+set\r\n" => unordered(&conn.call(&["SMEMBERS", key])).1,
        b"+zset\r\n" => vec![conn
            .call(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
            .to_vec()],
        b"+string\r\n" => vec![conn.call(&["GET", key]).to_vec()],
        _ => Vec::new(),
    };
    let ttl = conn.call(&["PTTL", key]);
    (kind, content, !ttl.starts_with(b":-"))
}

/// Gives DEST and MINE the same prior value (they may be inputs too).
fn prior_destination(conn: &mut Conn, rng: &mut Rng) {
    match rng.below(4) {
        0 => {}
        1 => conn.ok(&["SET", DEST, "old"]),
        2 => conn.ok(&["SADD", DEST, "a", "old"]),
        _ => conn.ok(&["ZADD", DEST, "1", "a", "2", "old"]),
    }
    if rng.chance(30) {
        conn.call(&["EXPIRE", DEST, "1000"]);
    }
    conn.call(&["COPY", DEST, MINE, "REPLACE"]);
}

/// Runs the crate's reads and writes on MINE, then Redis's own command on DEST, and
/// compares replies and stored values. `true` when the command was computed.
fn store_case(server: &mut Server, rng: &mut Rng, args: &[String], seed: u64) -> bool {
    if args[0] == "PFMERGE" {
        server.resp2.call(&["COPY", DEST, MINE, "REPLACE"]);
    } else {
        prior_destination(&mut server.resp2, rng);
    }
    let ours_args: Vec<Bytes> = args
        .iter()
        .map(|arg| {
            Bytes::from(if arg == DEST {
                MINE.to_owned()
            } else {
                arg.clone()
            })
        })
        .collect();
    let parsed = parse(&ours_args);
    let ours = match &parsed {
        Ok(request) => {
            let [outcome, resp3] = run_ours(&mut server.resp3, request);
            assert_eq!(
                outcome, resp3,
                "seed {seed}: a store's reply depends on the protocol"
            );
            let mut last = Bytes::new();
            for write in &outcome.writes {
                last = server.resp2.call(write);
            }
            assert!(
                !last.starts_with(b"-") && !last.starts_with(b"*-1"),
                "seed {seed}: {last:?}"
            );
            outcome.reply
        }
        Err(error) => error.clone(),
    };
    let theirs = server.resp2.call(args);
    assert_eq!(ours, theirs, "seed {seed}: {args:?}");
    if args[0] == "PFMERGE"
        && server.resp2.call(&["GETRANGE", DEST, "4", "4"])[..] == b"$1\r\n\x01\r\n"[..]
    {
        // Redis kept a sparse destination; the crate stores dense: same registers.
        server.resp2.ok(&["PFDEBUG", "TODENSE", DEST]);
    }
    let (mine, theirs) = (dump(&mut server.resp2, MINE), dump(&mut server.resp2, DEST));
    assert_eq!(mine, theirs, "seed {seed}: stored values differ: {args:?}");
    parsed.is_ok()
}

#[test]
fn set_and_sorted_set_algebra_equal_redis() {
    let server = common::Standalone::start();
    let mut conns = Server {
        resp2: Conn::open(server.addr(), Proto::Resp2),
        resp3: Conn::open(server.addr(), Proto::Resp3),
    };
    let started = Instant::now();
    let (mut cases, mut computed) = (0, 0);
    for seed in 1..=700u64 {
        let (run, done) = main_cases(&mut conns, seed * 7919, seed % 3 != 0);
        cases += run;
        computed += done;
    }
    eprintln!(
        "sets and sorted sets: {cases} cases ({computed} computed) in {:?}",
        started.elapsed()
    );
    assert!(
        computed > cases / 2,
        "too few cases got past parsing: {computed} of {cases}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "differential cases too slow"
    );
}
