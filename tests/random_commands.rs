//! Random commands through the proxy against a real 3-master cluster: every command and
//! subcommand the masters document (`COMMAND DOCS`), with arguments built from its
//! argument spec (keys, numbers, doubles, tokens, choices, repeated blocks), sent one at a
//! time with RESP2/RESP3 switches and in pipelines (some wrapped in MULTI/EXEC), plain and
//! under a layout. Each request must get exactly one reply, no connection may close, and
//! afterwards every master still answers through the proxy, so no request left a shared
//! backend connection unusable. Seeded, so a failure names what reproduces it.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::{read_replies, resp_command, shared_cluster, Proxy};

/// Commands left out: they end or take over the connection by design (QUIT, SUBSCRIBE,
/// MONITOR, HELLO and RESET change the protocol the checker reads), answer once per
/// channel or as push messages (the UNSUBSCRIBEs), wait on purpose (WAIT),
/// or act on the whole cluster in ways the other requests would trip over (FLUSHALL,
/// SHUTDOWN, CLUSTER, CONFIG, replication, ACL). The policy refuses most of them anyway.
const LEFT_OUT: &[&str] = &[
    "quit",
    "reset",
    "hello",
    "auth",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "monitor",
    "sync",
    "psync",
    "wait",
    "waitaof",
    "shutdown",
    "debug",
    "failover",
    "replicaof",
    "slaveof",
    "flushall",
    "flushdb",
    "swapdb",
    "cluster",
    "config",
    "acl",
    "module",
    "client",
    "save",
    "bgsave",
    "bgrewriteaof",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "select",
];

const INTEGERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "10",
    "100",
    "abc",
    "1.5",
    "-5",
    "99999999999999999999",
];
const DOUBLES: &[&str] = &["0", "1.5", "-1", "+inf", "-inf", "nan", "x", "3"];
const WORDS: &[&str] = &[
    "v", "", "x y", "*", "a*", "0", "1", "$", ">", "-", "+", "field", "100",
];
const PLAIN_KEYS: &[&str] = &[
    "rnd:a", "rnd:b", "{rnd}a", "{rnd}b", "rnd:list", "rnd:z", "rnd:h", "rnd:s",
];
const LAYOUT_KEYS: &[&str] = &[
    "rndbot:msgs:c1",
    "rndbot:msg:c1:m1",
    "rndbot:chat:42",
    "rndbot:user:u1:ns:k",
    "rndbot:lock:x",
    "rndbot:co:turn:c1:seq",
    "rndbot:conv:abc",
    "rndbot:{durable:t}:r",
    "rndbot:contact:7",
    "rndbot:nomatch",
    "rnd:a",
    "{rnd}a",
];

/// One argument of a command's documented syntax.
#[derive(Debug, Clone, Default)]
struct Arg {
    kind: String,
    token: Option<String>,
    optional: bool,
    multiple: bool,
    children: Vec<Arg>,
}

/// A command (its name words) and its arguments.
type Syntax = (Vec<String>, Vec<Arg>);

/// A small xorshift generator: the test needs repeatable choices, not statistics.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The pairs of a RESP2 flat map (`[k1, v1, k2, v2...]`) or a RESP3 map.
fn pairs(value: &redis::Value) -> Vec<(String, redis::Value)> {
    match value {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| Some((text(&pair[0])?, pair.get(1)?.clone())))
            .collect(),
        redis::Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v.clone())))
            .collect(),
        _ => Vec::new(),
    }
}

fn parse_arg(value: &redis::Value) -> Arg {
    let mut arg = Arg::default();
    for (field, value) in pairs(value) {
        match field.as_str() {
            "type" => arg.kind = text(&value).unwrap_or_default(),
            "token" => arg.token = text(&value),
            "flags" => {
                if let redis::Value::Array(flags) = &value {
                    for flag in flags.iter().filter_map(text) {
                        arg.optional |= flag == "optional";
                        arg.multiple |= flag == "multiple";
                    }
                }
            }
            "arguments" => arg.children = parse_args(&value),
            _ => {}
        }
    }
    arg
}

fn parse_args(value: &redis::Value) -> Vec<Arg> {
    match value {
        redis::Value::Array(items) => items.iter().map(parse_arg).collect(),
        _ => Vec::new(),
    }
}

/// Every command and subcommand the node documents, but those in [`LEFT_OUT`].
fn syntaxes(node: &str) -> Vec<Syntax> {
    let docs: redis::Value = common::query(node, redis::cmd("COMMAND").arg("DOCS")).unwrap();
    let mut out = Vec::new();
    for (name, doc) in pairs(&docs) {
        if LEFT_OUT.contains(&name.as_str()) {
            continue;
        }
        let fields = pairs(&doc);
        let subcommands = fields.iter().find(|(f, _)| f == "subcommands");
        match subcommands {
            Some((_, subs)) => {
                for (sub, sub_doc) in pairs(subs) {
                    let args = pairs(&sub_doc)
                        .iter()
                        .find(|(f, _)| f == "arguments")
                        .map(|(_, v)| parse_args(v))
                        .unwrap_or_default();
                    out.push((sub.split('|').map(str::to_string).collect(), args));
                }
            }
            None => {
                let args = fields
                    .iter()
                    .find(|(f, _)| f == "arguments")
                    .map(|(_, v)| parse_args(v))
                    .unwrap_or_default();
                out.push((vec![name], args));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn push_arg(arg: &Arg, keys: &[&str], rng: &mut Rng, out: &mut Vec<String>) {
    if arg.optional && rng.chance(50) {
        return;
    }
    let repeats = if arg.multiple { 1 + rng.below(3) } else { 1 };
    for _ in 0..repeats {
        if let Some(token) = arg.token.as_ref().filter(|_| arg.kind != "pure-token") {
            out.push(token.clone());
        }
        match arg.kind.as_str() {
            "pure-token" => out.push(arg.token.clone().unwrap_or_default()),
            "key" => out.push(rng.pick(keys).to_string()),
            "integer" => out.push(rng.pick(INTEGERS).to_string()),
            "double" => out.push(rng.pick(DOUBLES).to_string()),
            "unix-time" => out.push(rng.pick(&["0", "1", "99999999999", "-1"]).to_string()),
            "oneof" if !arg.children.is_empty() => {
                let choice = Arg {
                    optional: false,
                    multiple: false,
                    ..rng.pick(&arg.children).clone()
                };
                push_arg(&choice, keys, rng, out);
            }
            "block" => {
                for child in &arg.children {
                    push_arg(child, keys, rng, out);
                }
            }
            _ if rng.chance(30) => out.push(rng.pick(keys).to_string()),
            _ => out.push(rng.pick(WORDS).to_string()),
        }
    }
}

/// A random invocation of `syntax`; blocking commands wait 10 ms at most.
fn invocation(syntax: &Syntax, keys: &[&str], rng: &mut Rng) -> Vec<String> {
    let mut args = syntax.0.clone();
    for arg in &syntax.1 {
        push_arg(arg, keys, rng, &mut args);
    }
    let name = args[0].to_ascii_lowercase();
    if let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case("block")) {
        if at + 1 < args.len() {
            args[at + 1] = "10".into();
        }
    }
    match name.as_str() {
        "blmpop" | "bzmpop" => args[1] = "0.01".into(),
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" | "brpoplpush" | "blmove" => {
            let last = args.len() - 1;
            args[last] = "0.01".into();
        }
        _ => {}
    }
    args
}

/// Sends `batch` in one write and reads one reply per request.
fn exchange(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    batch: &[Vec<String>],
) -> Result<(), String> {
    let wire: Vec<u8> = batch.iter().flat_map(|args| resp_command(args)).collect();
    stream.write_all(&wire).map_err(|e| e.to_string())?;
    read_replies(stream, pending, batch.len()).map(|_| ())
}

/// Runs `rounds` random requests one at a time, then as many in pipelines, on one
/// connection to `addr`; panics with the seed and the requests at the first one left
/// without a reply.
fn run(addr: &str, syntaxes: &[Syntax], keys: &[&str], seed: u64, rounds: usize) {
    let mut rng = Rng(seed);
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut pending = Vec::new();
    let mut resp3 = false;
    for round in 0..rounds {
        let request = invocation(rng.pick(syntaxes), keys, &mut rng);
        let mut batch = Vec::new();
        if rng.chance(20) {
            resp3 = !resp3;
            batch.push(vec!["HELLO".into(), if resp3 { "3" } else { "2" }.into()]);
        }
        batch.push(request);
        if let Err(error) = exchange(&mut stream, &mut pending, &batch) {
            panic!("seed {seed}, single round {round}: {batch:?}: {error}");
        }
    }
    let mut sent = 0;
    while sent < rounds {
        let size = 1 + rng.below(40);
        let mut batch: Vec<Vec<String>> = (0..size)
            .map(|_| invocation(rng.pick(syntaxes), keys, &mut rng))
            .collect();
        if rng.chance(20) {
            batch.insert(0, vec!["MULTI".into()]);
            batch.push(vec!["EXEC".into()]);
        }
        sent += batch.len();
        if let Err(error) = exchange(&mut stream, &mut pending, &batch) {
            panic!("seed {seed}, pipeline after {sent} requests: {batch:?}: {error}");
        }
    }
}

/// After the random requests: every master still answers through the proxy, on fresh
/// connections of both protocols, scripts included.
fn every_master_answers(proxy: &Proxy) {
    for protocol in ["2", "3"] {
        let mut stream = TcpStream::connect(proxy.addr()).unwrap();
        let mut pending = Vec::new();
        let mut batch = vec![vec!["HELLO".to_string(), protocol.to_string()]];
        // Keys in every master's slots: the tags hash to slots 0-16383 spread wide.
        for i in 0..30 {
            batch.push(vec!["SET".into(), format!("{{after{i}}}k"), "v".into()]);
            batch.push(vec![
                "EVAL".into(),
                "return redis.call('GET', KEYS[1])".into(),
                "1".into(),
                format!("{{after{i}}}k"),
            ]);
        }
        let wire: Vec<u8> = batch.iter().flat_map(|args| resp_command(args)).collect();
        stream.write_all(&wire).unwrap();
        let replies = read_replies(&mut stream, &mut pending, batch.len())
            .unwrap_or_else(|e| panic!("RESP{protocol}: {e}"));
        for pair in replies[1..].chunks(2) {
            assert_eq!(pair[0], b"+OK\r\n", "RESP{protocol}");
            assert_eq!(pair[1], b"$1\r\nv\r\n", "RESP{protocol}");
        }
    }
}

#[test]
fn random_commands_each_get_one_reply_and_leave_every_master_usable() {
    let cluster = shared_cluster();
    let syntaxes = syntaxes(&cluster.masters()[0]);
    assert!(
        syntaxes.len() > 200,
        "{} commands documented",
        syntaxes.len()
    );
    let plain = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let layout = Proxy::start_with_layout(
        &cluster.seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "rndbot",
    );
    std::thread::scope(|scope| {
        for seed in [1, 2] {
            let syntaxes = &syntaxes;
            let (plain, layout) = (&plain, &layout);
            scope.spawn(move || run(plain.addr(), syntaxes, PLAIN_KEYS, seed, 1500));
            scope.spawn(move || run(layout.addr(), syntaxes, LAYOUT_KEYS, seed + 100, 1500));
        }
    });
    every_master_answers(&plain);
    every_master_answers(&layout);
    for proxy in [&plain, &layout] {
        let log = proxy.stderr();
        assert!(!log.contains("panicked"), "{log}");
    }
}
