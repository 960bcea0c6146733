//! Cross-slot reads and stores through the proxy in front of a 3-master cluster, keys on
//! different masters: every reply equals what one redis-server gives for the same data
//! (byte for byte in RESP2 and RESP3, except the member order of SUNION/SINTER/SDIFF,
//! which follows Redis's per-process hash seed and is compared as a set); STORE forms
//! write the destination on its master and replace it whole; `refuse` settings answer
//! `-CROSSSLOT` naming the setting; single-slot use is still forwarded as is.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use common::{shared_cluster, Proxy, Standalone};
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

/// `count` untagged key names, each on a different master than the previous ones (as far
/// as three masters allow: names cycle over the masters).
fn keys_on_masters(prefix: &str, count: usize) -> Vec<String> {
    let cluster = shared_cluster();
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "the shared cluster has 3 masters");
    let mut keys = Vec::new();
    let mut candidate = 0;
    while keys.len() < count {
        let key = format!("{prefix}:{candidate}");
        candidate += 1;
        let want = &masters[keys.len() % masters.len()];
        if &cluster.node_for_slot(cluster.keyslot(&key)) == want {
            keys.push(key);
        }
    }
    keys
}

fn master_of(key: &str) -> String {
    let cluster = shared_cluster();
    cluster.node_for_slot(cluster.keyslot(key))
}

/// Runs `setup` on both the standalone server and through the proxy.
fn both(reference: &mut Conn, through: &mut Conn, setup: &[Vec<String>]) {
    for command in setup {
        let want = reference.call(command);
        let got = through.call(command);
        assert_eq!(got, want, "setup {command:?}");
    }
}

fn cmd(words: &str) -> Vec<String> {
    words.split(' ').map(str::to_owned).collect()
}

/// The data every test reads: sets, sorted sets, strings and HyperLogLogs, one key of
/// each kind per master, plus a key of the wrong type.
fn data(k: &[String]) -> Vec<Vec<String>> {
    let (a, b, c) = (&k[0], &k[1], &k[2]);
    [
        format!("DEL {a}:s {b}:s {c}:s {a}:z {b}:z {c}:z {a}:t {b}:t {a}:h {b}:h {c}:list"),
        format!("SADD {a}:s x y z 1 2 3"),
        format!("SADD {b}:s y z w 2 9"),
        format!("SADD {c}:s z 2 q"),
        format!("ZADD {a}:z 1 x 2 y 3.5 z"),
        format!("ZADD {b}:z 10 y 20 z -1 w"),
        format!("ZADD {c}:z 0.25 z 7 q"),
        format!("SET {a}:t ohmytext"),
        format!("SET {b}:t mynewtext"),
        format!("PFADD {a}:h a b c d e f"),
        format!("PFADD {b}:h d e f g h"),
        format!("RPUSH {c}:list one"),
    ]
    .iter()
    .map(|line| cmd(line))
    .collect()
}

/// Commands whose reply order is Redis's own (deterministic), compared byte for byte.
fn exact_reads(k: &[String]) -> Vec<String> {
    let (a, b, c) = (&k[0], &k[1], &k[2]);
    vec![
        format!("SINTERCARD 3 {a}:s {b}:s {c}:s"),
        format!("SINTERCARD 2 {a}:s {b}:s LIMIT 1"),
        format!("ZUNION 3 {a}:z {b}:z {c}:z"),
        format!("ZUNION 3 {a}:z {b}:z {c}:z WITHSCORES"),
        format!("ZUNION 2 {a}:z {b}:z WEIGHTS 2 0.5 AGGREGATE MAX WITHSCORES"),
        format!("ZINTER 2 {a}:z {b}:z WITHSCORES"),
        format!("ZINTER 2 {a}:z {b}:s AGGREGATE MIN WITHSCORES"),
        format!("ZDIFF 2 {a}:z {b}:z WITHSCORES"),
        format!("ZINTERCARD 2 {a}:z {b}:z"),
        format!("ZUNION 2 {a}:z {c}:list"),
        format!("LCS {a}:t {b}:t"),
        format!("LCS {a}:t {b}:t LEN"),
        format!("LCS {a}:t {b}:t IDX MINMATCHLEN 2 WITHMATCHLEN"),
        format!("PFCOUNT {a}:h {b}:h"),
        format!("PFCOUNT {a}:h {b}:h {c}:missing"),
        format!("SUNION {a}:s {c}:list"),
    ]
}

/// SUNION/SINTER/SDIFF: the members compared as a set (see the module docs).
fn set_reads(k: &[String]) -> Vec<String> {
    let (a, b, c) = (&k[0], &k[1], &k[2]);
    vec![
        format!("SUNION {a}:s {b}:s {c}:s"),
        format!("SINTER {a}:s {b}:s"),
        format!("SINTER {a}:s {b}:s {c}:s"),
        format!("SDIFF {a}:s {b}:s"),
        format!("SDIFF {a}:s {b}:s {c}:s {c}:missing"),
    ]
}

/// The members of an array or set reply, sorted; the frame's type byte first.
fn members_sorted(reply: &Bytes) -> (u8, Vec<Vec<u8>>) {
    let text = reply.as_ref();
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').skip(1).collect();
    lines.retain(|line| !line.is_empty() && !line.starts_with(b"$"));
    let mut members: Vec<Vec<u8>> = lines.iter().map(|line| line.to_vec()).collect();
    members.sort();
    (text[0], members)
}

#[test]
fn cross_slot_reads_answer_as_one_redis_server_in_resp2_and_resp3() {
    let standalone = Standalone::start();
    let keys = keys_on_masters("csr", 3);
    for proto in [Proto::Resp2, Proto::Resp3] {
        let mut reference = Conn::open(standalone.addr(), proto);
        let mut through = Conn::open(proxy().addr(), proto);
        both(&mut reference, &mut through, &data(&keys));
        for line in exact_reads(&keys) {
            let command = cmd(&line);
            let want = reference.call(&command);
            let got = through.call(&command);
            assert_eq!(got, want, "{proto:?} {line}");
        }
        for line in set_reads(&keys) {
            let command = cmd(&line);
            let want = reference.call(&command);
            let got = through.call(&command);
            assert_eq!(
                members_sorted(&got),
                members_sorted(&want),
                "{proto:?} {line}"
            );
        }
    }
}

#[test]
fn cross_slot_stores_replace_the_destination_on_its_master() {
    let standalone = Standalone::start();
    let keys = keys_on_masters("css", 3);
    let (a, b, c) = (&keys[0], &keys[1], &keys[2]);
    let mut reference = Conn::open(standalone.addr(), Proto::Resp2);
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    both(&mut reference, &mut through, &data(&keys));
    // Each store, then how its destination is read back, then a destination filled
    // beforehand with something else (it must be replaced whole).
    let cases = [
        (
            format!("SUNIONSTORE {c}:d {a}:s {b}:s"),
            "SMEMBERS",
            "SADD",
            "old",
        ),
        (
            format!("SINTERSTORE {c}:d {a}:s {b}:s"),
            "SMEMBERS",
            "SADD",
            "old",
        ),
        (
            format!("SDIFFSTORE {c}:d {a}:s {b}:s"),
            "SMEMBERS",
            "SADD",
            "old",
        ),
        (
            format!("ZUNIONSTORE {c}:d 2 {a}:z {b}:z WEIGHTS 1 3"),
            "ZRANGE",
            "ZADD",
            "5 old",
        ),
        (
            format!("ZINTERSTORE {c}:d 2 {a}:z {b}:z"),
            "ZRANGE",
            "ZADD",
            "5 old",
        ),
        (
            format!("ZDIFFSTORE {c}:d 2 {a}:z {b}:z"),
            "ZRANGE",
            "ZADD",
            "5 old",
        ),
        (format!("BITOP XOR {c}:d {a}:t {b}:t"), "GET", "SET", "old"),
        (
            format!("PFMERGE {c}:d {a}:h {b}:h"),
            "PFCOUNT",
            "PFADD",
            "old",
        ),
        (
            format!("SINTERSTORE {c}:d {a}:s {c}:missing"),
            "EXISTS",
            "SADD",
            "old",
        ),
    ];
    let mut master = Conn::open(&master_of(&format!("{c}:d")), Proto::Resp2);
    for (store, read, fill, old) in cases {
        for filled in [false, true] {
            let mut prepare = vec![cmd(&format!("DEL {c}:d"))];
            if filled {
                prepare.push(cmd(&format!("{fill} {c}:d {old}")));
            }
            both(&mut reference, &mut through, &prepare);
            let command = cmd(&store);
            let want = reference.call(&command);
            let got = through.call(&command);
            assert_eq!(got, want, "{store} (filled: {filled})");
            let read_back = match read {
                "ZRANGE" => cmd(&format!("ZRANGE {c}:d 0 -1 WITHSCORES")),
                other => cmd(&format!("{other} {c}:d")),
            };
            let want = reference.call(&read_back);
            let got = master.call(&read_back);
            if read == "SMEMBERS" {
                assert_eq!(members_sorted(&got), members_sorted(&want), "{store}");
            } else {
                assert_eq!(got, want, "{store} read back with {read_back:?}");
            }
        }
    }
}

#[test]
fn refused_classes_name_their_setting() {
    let refusing = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.reads=refuse",
        "--set",
        "cross_slot.stores=refuse",
    ]);
    let keys = keys_on_masters("csf", 3);
    let (a, b) = (&keys[0], &keys[1]);
    let mut conn = Conn::open(refusing.addr(), Proto::Resp2);
    let read = conn.call(&cmd(&format!("SUNION {a} {b}")));
    assert_eq!(
        read.as_ref(),
        b"-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.reads)\r\n"
    );
    let store = conn.call(&cmd(&format!("ZUNIONSTORE {a} 1 {b}")));
    assert_eq!(
        store.as_ref(),
        b"-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.stores)\r\n"
    );
    // A command the proxy does not emulate keeps the wording that names the keys.
    let script = conn.call(&["EVAL", "return 1", "2", a, b]);
    assert!(
        script.starts_with(b"-CROSSSLOT Keys in request don't hash to the same slot ('"),
        "{script:?}"
    );
}

/// The `calls=` count of `command` in a node's `INFO commandstats`.
fn calls(node: &mut Conn, command: &str) -> u64 {
    let info = node.call(&["INFO", "commandstats"]);
    let text = String::from_utf8_lossy(&info);
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |count| count.parse().expect("a call count"))
}

#[test]
fn single_slot_sunion_is_still_forwarded_as_is() {
    let mut through = Conn::open(proxy().addr(), Proto::Resp2);
    let mut master = Conn::open(&master_of("{cs1}a"), Proto::Resp2);
    through.call(&cmd("SADD {cs1}a x y"));
    through.call(&cmd("SADD {cs1}b y z"));
    let (sunion, smembers) = (calls(&mut master, "sunion"), calls(&mut master, "smembers"));
    let reply = through.call(&cmd("SUNION {cs1}a {cs1}b"));
    assert_eq!(members_sorted(&reply).1.len(), 3, "{reply:?}");
    assert_eq!(calls(&mut master, "sunion"), sunion + 1);
    assert_eq!(calls(&mut master, "smembers"), smembers);
}
