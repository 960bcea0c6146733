//! Key positions and the table, checked against a real redis-server.
//!
//! Each test starts its own `redis-server` (the harness's [`common::Standalone`]) and
//! compares `CommandSpec::keys` with the server's `COMMAND GETKEYS` and
//! `COMMAND GETKEYSANDFLAGS` for a corpus of invocations, and the table parsed from the
//! live `COMMAND` reply (RESP2 and RESP3) with the built-in one.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use redis_protocol::resp3::decode::complete::decode;
use redis_protocol::resp3::types::OwnedFrame;
use slotbridge::command::{CommandTable, KeyFlags};
use smallvec::SmallVec;

use common::Standalone;

/// A blocking RESP connection to the server at `addr`.
fn connect(addr: &str) -> Conn {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    Conn {
        stream,
        buf: Vec::new(),
    }
}

/// A blocking RESP connection: one request, one reply frame.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Sends `args` and returns the raw bytes of the reply frame.
    fn call_raw(&mut self, args: &[Bytes]) -> Vec<u8> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&request).expect("write");
        loop {
            if let Some((_, used)) = decode(&self.buf).expect("server sends valid RESP") {
                return self.buf.drain(..used).collect();
            }
            let mut chunk = [0u8; 65536];
            let n = common::read_some(&mut self.stream, &mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends `COMMAND` then `QUIT` and returns the raw `COMMAND` reply, read up to the
    /// server's close. (redis-protocol cannot find the end of Redis 7's RESP3 `COMMAND`
    /// reply: it refuses sets of maps.)
    fn command_then_quit(mut self) -> Vec<u8> {
        self.stream
            .write_all(b"*1\r\n$7\r\nCOMMAND\r\n*1\r\n$4\r\nQUIT\r\n")
            .expect("write");
        self.stream.read_to_end(&mut self.buf).expect("read");
        let reply_len = self.buf.len().checked_sub(5).expect("reply and +OK");
        assert_eq!(&self.buf[reply_len..], b"+OK\r\n");
        self.buf.truncate(reply_len);
        self.buf
    }

    fn call(&mut self, args: &[Bytes]) -> OwnedFrame {
        let raw = self.call_raw(args);
        decode(&raw).expect("decodes").expect("complete").0
    }
}

fn text(frame: &OwnedFrame) -> Vec<u8> {
    match frame {
        OwnedFrame::BlobString { data, .. } | OwnedFrame::SimpleString { data, .. } => data.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn items(frame: &OwnedFrame) -> &[OwnedFrame] {
    match frame {
        OwnedFrame::Array { data, .. } => data,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// Splits an invocation on spaces; `""` stands for an empty argument.
fn argv(invocation: &str) -> Vec<Bytes> {
    invocation
        .split(' ')
        .map(|word| match word {
            "\"\"" => Bytes::new(),
            word => Bytes::copy_from_slice(word.as_bytes()),
        })
        .collect()
}

fn with_prefix(prefix: &[&str], args: &[Bytes]) -> Vec<Bytes> {
    prefix
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .chain(args.iter().cloned())
        .collect()
}

/// Key spec flag names as `COMMAND GETKEYSANDFLAGS` spells them (Redis docs,
/// "Key specifications").
fn flag_bit(name: &[u8]) -> u16 {
    match name {
        b"RO" => KeyFlags::RO,
        b"RW" => KeyFlags::RW,
        b"OW" => KeyFlags::OW,
        b"RM" => KeyFlags::RM,
        b"access" => KeyFlags::ACCESS,
        b"update" => KeyFlags::UPDATE,
        b"insert" => KeyFlags::INSERT,
        b"delete" => KeyFlags::DELETE,
        b"not_key" => KeyFlags::NOT_KEY,
        b"incomplete" => KeyFlags::INCOMPLETE,
        b"variable_flags" => KeyFlags::VARIABLE_FLAGS,
        other => panic!("unknown key flag {}", String::from_utf8_lossy(other)),
    }
}

/// The keys (names and flags) the server finds, or `None` when it finds none (it answers
/// with an error for commands without keys or arguments that don't fit).
fn server_keys(conn: &mut Conn, args: &[Bytes]) -> Vec<(Vec<u8>, KeyFlags)> {
    let with_flags = conn.call(&with_prefix(&["COMMAND", "GETKEYSANDFLAGS"], args));
    let plain = conn.call(&with_prefix(&["COMMAND", "GETKEYS"], args));
    let keys: Vec<(Vec<u8>, KeyFlags)> = match &with_flags {
        OwnedFrame::SimpleError { data, .. } => {
            assert!(
                data.contains("has no key arguments") || data.contains("Invalid arguments"),
                "unexpected server error for {args:?}: {data}"
            );
            Vec::new()
        }
        reply => items(reply)
            .iter()
            .map(|pair| {
                let pair = items(pair);
                let flags = items(&pair[1])
                    .iter()
                    .fold(0, |acc, f| acc | flag_bit(&text(f)));
                (text(&pair[0]), KeyFlags(flags))
            })
            .collect(),
    };
    let plain_names: Vec<Vec<u8>> = match &plain {
        OwnedFrame::SimpleError { .. } => Vec::new(),
        reply => items(reply).iter().map(text).collect(),
    };
    let names: Vec<Vec<u8>> = keys.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        plain_names, names,
        "GETKEYS vs GETKEYSANDFLAGS for {args:?}"
    );
    keys
}

fn our_keys(table: &CommandTable, args: &[Bytes]) -> Vec<(Vec<u8>, KeyFlags)> {
    let spec = table.lookup(args).expect("command in table");
    let mut out = SmallVec::new();
    spec.keys(args, &mut out);
    out.iter()
        .map(|k| (args[k.index].to_vec(), k.flags))
        .collect()
}

/// Invocations with arguments the server accepts for arity. Key names are distinct
/// within each invocation so names identify positions.
const CORPUS: &[&str] = &[
    "GET k1",
    "SET k1 v",
    "SET k1 v GET",
    "SET k1 v EX 10 get",
    "SET k1 v NX PX 100",
    "SET k1 getx",
    "MSET a 1 b 2 c 3",
    "MSETNX a 1 b 2",
    "MGET a b c",
    "DEL a b c",
    "UNLINK a b",
    "EXISTS a b",
    "TOUCH a",
    "EVAL s 0",
    "EVAL s 0 x y",
    "EVAL s 1 a argv1",
    "EVAL s 3 a b c x y",
    "EVALSHA sha 0",
    "EVALSHA sha 1 a",
    "EVALSHA sha 3 a b c",
    "EVAL_RO s 2 a b",
    "EVALSHA_RO sha 1 a",
    "FCALL f 0",
    "FCALL f 1 a x",
    "FCALL f 3 a b c",
    "FCALL_RO f 2 a b",
    "EVAL s notanumber a",
    "EVAL s 2x a b",
    "EVAL s 5 a",
    "EVAL s -1 a",
    "XREAD STREAMS s1 0",
    "XREAD STREAMS s1 s2 s3 0 0 0",
    "XREAD COUNT 10 STREAMS s1 0",
    "XREAD COUNT 10 BLOCK 100 STREAMS s1 s2 s3 1 2 3",
    "XREAD BLOCK 0 COUNT 1 STREAMS s1 $",
    "XREAD STREAMS streams 0",
    "XREAD STREAMS a b c",
    "XREADGROUP GROUP g c STREAMS s1 >",
    "XREADGROUP GROUP g c COUNT 5 BLOCK 10 NOACK STREAMS s1 s2 s3 > > >",
    "XREADGROUP GROUP g c BLOCK 10 STREAMS s1 0",
    "ZUNIONSTORE dst 1 z1",
    "ZUNIONSTORE dst 3 z1 z2 z3 WEIGHTS 1 2 3",
    "ZINTERSTORE dst 2 z1 z2 AGGREGATE MAX",
    "ZDIFFSTORE dst 2 z1 z2",
    "ZUNIONSTORE dst 0 z1",
    "ZUNIONSTORE dst 2x z1 z2",
    "ZUNION 2 z1 z2 WITHSCORES",
    "ZINTER 3 z1 z2 z3",
    "ZDIFF 1 z1",
    "ZINTERCARD 2 z1 z2 LIMIT 5",
    "SINTERCARD 3 s1 s2 s3",
    "SINTERCARD 1 s1 LIMIT 2",
    "LMPOP 1 l1 LEFT",
    "LMPOP 3 l1 l2 l3 RIGHT COUNT 2",
    "BLMPOP 0 2 l1 l2 LEFT",
    "ZMPOP 2 z1 z2 MIN",
    "BZMPOP 1 3 z1 z2 z3 MAX COUNT 10",
    "SORT k",
    "SORT k STORE dst",
    "SORT k BY w_* GET o_* LIMIT 0 10 STORE dst",
    "SORT k STORE d1 STORE d2",
    "SORT k GET store STORE dst",
    "SORT k LIMIT store 1 ALPHA",
    "SORT k STORE",
    "SORT_RO k BY w_*",
    "GEORADIUS g 0 0 10 km",
    "GEORADIUS g 0 0 10 km STORE dst",
    "GEORADIUS g 0 0 10 km STOREDIST dst2",
    "GEORADIUS g 0 0 10 km STORE d1 STOREDIST d2",
    "GEORADIUS g 0 0 10 km STORE",
    "GEORADIUSBYMEMBER g m 10 km STORE dst",
    "GEORADIUS_RO g 0 0 10 km",
    "GEOSEARCHSTORE dst src FROMMEMBER m BYRADIUS 1 km",
    "OBJECT ENCODING k",
    "object freq k",
    "MEMORY USAGE k",
    "MEMORY USAGE k SAMPLES 5",
    "DUMP k",
    "RESTORE k 0 payload",
    "RESTORE k 0 payload REPLACE",
    "RENAME a b",
    "RENAMENX a b",
    "SMOVE s1 s2 m",
    "LMOVE l1 l2 LEFT RIGHT",
    "BLMOVE l1 l2 LEFT RIGHT 0",
    "BRPOPLPUSH l1 l2 0",
    "BLPOP l1 l2 l3 0",
    "BRPOP l1 0",
    "BZPOPMIN z1 z2 0",
    "WATCH a b c",
    "PFCOUNT h1 h2",
    "PFMERGE dst h1 h2",
    "PFADD h1 a b",
    "BITOP AND dst k1 k2 k3",
    "BITCOUNT k",
    "BITFIELD k GET u8 0",
    "BITFIELD k SET u8 0 1",
    "BITFIELD k GET u8 0 SET u8 0 1",
    "BITFIELD k INCRBY u8 0 1 GET u8",
    "BITFIELD_RO k GET u8 0",
    "COPY a b",
    "COPY a b DB 0 REPLACE",
    "SUNIONSTORE dst s1 s2",
    "SDIFFSTORE dst s1",
    "SINTER a b",
    "XINFO STREAM s",
    "XINFO GROUPS s",
    "XGROUP CREATE s g $ MKSTREAM",
    "XGROUP CREATECONSUMER s g c",
    "XADD s * f v",
    "XCLAIM s g c 0 id",
    "GETEX k EX 10",
    "GETDEL k",
    "MIGRATE h 6380 k 0 5000",
    "MIGRATE h 6380 \"\" 0 5000 KEYS a b c",
    "MIGRATE h 6380 \"\" 0 5000 COPY REPLACE KEYS a b",
    "MIGRATE h 6380 k 0 5000 KEYS a b",
    "MIGRATE h 6380 \"\" 0 5000 AUTH pw KEYS a",
    "HSET h f v",
    "LRANGE l 0 -1",
    "ZADD z 1 m",
    "ZRANGESTORE dst src 0 -1",
    "LCS a b",
    "EXPIRE k 10",
    "INCR k",
    "SPUBLISH ch msg",
    "PUBLISH ch msg",
    "PING hello",
    "CLIENT LIST",
];

#[test]
fn keys_match_redis_getkeys() {
    let server = Standalone::start();
    let mut conn = connect(server.addr());
    let table = CommandTable::builtin();
    assert!(CORPUS.len() >= 80);
    let mut with_keys = 0;
    for invocation in CORPUS {
        let args = argv(invocation);
        let spec = table.lookup(&args).expect("known command");
        assert!(spec.arity_ok(args.len()), "arity of {invocation}");
        let expected = server_keys(&mut conn, &args);
        assert_eq!(our_keys(&table, &args), expected, "{invocation}");
        with_keys += usize::from(!expected.is_empty());
    }
    // The corpus must mostly exercise real key positions, not agreeing empties.
    assert!(with_keys >= 100, "only {with_keys} invocations with keys");
}

#[test]
fn arity_matches_redis() {
    let server = Standalone::start();
    let mut conn = connect(server.addr());
    let table = CommandTable::builtin();
    for invocation in [
        "GET",
        "GET a b",
        "SET k",
        "RENAME a",
        "OBJECT ENCODING",
        "OBJECT ENCODING k x",
        "EVAL s",
        "MEMORY USAGE",
        "GET a",
        "XREAD STREAMS s 0",
    ] {
        let args = argv(invocation);
        let reply = conn.call(&with_prefix(&["COMMAND", "GETKEYS"], &args));
        let server_ok = !matches!(
            &reply,
            OwnedFrame::SimpleError { data, .. } if data.contains("number of arguments")
        );
        let spec = table.lookup(&args).expect("known command");
        assert_eq!(spec.arity_ok(args.len()), server_ok, "{invocation}");
    }
}

#[test]
fn live_command_reply_matches_builtin() {
    let server = Standalone::start();
    let builtin = CommandTable::builtin();

    let raw2 = connect(server.addr()).command_then_quit();
    let mut resp3 = connect(server.addr());
    let hello = resp3.call(&argv("HELLO 3"));
    assert!(
        matches!(hello, OwnedFrame::Map { .. }),
        "HELLO 3 answers a map"
    );
    let raw3 = resp3.command_then_quit();
    assert_ne!(raw2, raw3, "RESP3 reply differs in shape");

    for raw in [raw2, raw3] {
        let live = CommandTable::from_command_reply(&raw).expect("live reply parses");
        assert_eq!(live.len(), builtin.len());
        for spec in builtin.iter() {
            let other = live.get(&spec.name).expect("same commands");
            assert_eq!(other.arity, spec.arity, "{}", spec.name);
            assert_eq!(other.flags, spec.flags, "{}", spec.name);
            assert_eq!(other.acl_categories, spec.acl_categories, "{}", spec.name);
            assert_eq!(
                (other.first_key, other.last_key, other.step),
                (spec.first_key, spec.last_key, spec.step)
            );
            assert_eq!(other.key_specs, spec.key_specs, "{}", spec.name);
            assert_eq!(other.has_subcommands, spec.has_subcommands);
        }
        for invocation in CORPUS {
            let args = argv(invocation);
            assert_eq!(
                our_keys(&live, &args),
                our_keys(&builtin, &args),
                "{invocation}"
            );
        }
    }
}
