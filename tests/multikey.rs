//! Multi-key commands split by slot must answer exactly as one redis-server does: the same
//! random sequence of MSET/MGET/DEL/UNLINK/EXISTS/TOUCH (and some wrong-type keys) is run
//! on a standalone server and through the proxy in front of a 3-master cluster, and every
//! reply is compared. Commands that cannot be split get `-CROSSSLOT` naming the keys.

mod common;

use std::sync::OnceLock;

use common::{shared_cluster, Proxy, Standalone};
use redis::Value;

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn reply(con: &mut redis::Connection, cmd: &redis::Cmd) -> Result<Value, String> {
    cmd.query::<Value>(con).map_err(|e| e.to_string())
}

#[test]
fn random_multikey_sequences_match_one_redis_server() {
    let standalone = Standalone::start();
    let mut reference = standalone.connect();
    let mut through_proxy = proxy().connect();
    const KEYS: u64 = 40;
    let key = |i: u64| format!("mk:{i}");
    // Keys in many slots: the test is only meaningful if commands really span masters.
    let slots: std::collections::BTreeSet<u16> = (0..KEYS)
        .map(|i| shared_cluster().keyslot(&key(i)))
        .collect();
    assert!(slots.len() > 30, "only {} slots", slots.len());

    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for step in 0..400 {
        let name = [
            "MGET", "DEL", "UNLINK", "EXISTS", "TOUCH", "MSET", "MSET", "LPUSH",
        ][rng.below(8) as usize];
        let mut cmd = redis::cmd(name);
        if name == "LPUSH" {
            // A key of another type: MGET gives nil for it, DEL/EXISTS count it.
            cmd.arg(key(rng.below(KEYS))).arg("item");
        } else {
            let count = 1 + rng.below(12);
            for _ in 0..count {
                // Repeats are deliberate: EXISTS counts them, DEL does not.
                cmd.arg(key(rng.below(KEYS)));
                if name == "MSET" {
                    // Empty values and lengths on both sides of a digit boundary: the
                    // parts carry each value as the client framed it, or encode it anew.
                    let value = match rng.below(4) {
                        0 => Vec::new(),
                        1 => "\r\n$3\r\n".repeat(1 + rng.below(3) as usize).into_bytes(),
                        2 => vec![b'x'; [9, 10, 99, 100][rng.below(4) as usize]],
                        _ => format!("v{}", rng.below(1000)).into_bytes(),
                    };
                    cmd.arg(value);
                }
            }
        }
        let want = reply(&mut reference, &cmd);
        let got = reply(&mut through_proxy, &cmd);
        assert_eq!(got, want, "step {step}: {:?}", cmd.get_packed_command());
    }
    // The final state agrees too.
    let mut mget = redis::cmd("MGET");
    for i in 0..KEYS {
        mget.arg(key(i));
    }
    assert_eq!(
        reply(&mut through_proxy, &mget),
        reply(&mut reference, &mget)
    );
}

#[test]
fn an_inline_mset_splits_like_a_multibulk_one() {
    use std::io::{BufRead, BufReader, Write};
    assert_ne!(
        shared_cluster().keyslot("mk:inline:a"),
        shared_cluster().keyslot("mk:inline:b")
    );
    let stream = std::net::TcpStream::connect(proxy().addr()).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    (&stream)
        .write_all(b"MSET mk:inline:a first mk:inline:b \"\"\r\n")
        .unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg("mk:inline:a")
        .arg("mk:inline:b")
        .query(&mut proxy().connect())
        .unwrap();
    assert_eq!(values, [Some("first".into()), Some(String::new())]);
}

#[test]
fn mset_with_a_missing_value_runs_nowhere() {
    let standalone = Standalone::start();
    let mut through_proxy = proxy().connect();
    // Keys in different slots, the second without its value.
    assert_ne!(
        shared_cluster().keyslot("mk:odd:a"),
        shared_cluster().keyslot("mk:odd:b")
    );
    let cmd = {
        let mut cmd = redis::cmd("MSET");
        cmd.arg("mk:odd:a").arg("1").arg("mk:odd:b");
        cmd
    };
    let want = reply(&mut standalone.connect(), &cmd);
    let got = reply(&mut through_proxy, &cmd);
    assert!(want.is_err(), "redis accepted {want:?}");
    assert_eq!(got, want);
    let value: Option<String> = redis::cmd("GET")
        .arg("mk:odd:a")
        .query(&mut through_proxy)
        .unwrap();
    assert_eq!(value, None, "part of a refused MSET ran");
}

#[test]
fn unsplittable_commands_across_slots_are_crossslot() {
    let mut con = proxy().connect();
    let (a, b) = ("mk:x:a", "mk:x:b");
    assert_ne!(shared_cluster().keyslot(a), shared_cluster().keyslot(b));
    // The computed reads and stores (ZRANGESTORE, GEOSEARCHSTORE and SORT ... STORE among
    // them), and the moves (RENAME, SMOVE, LMOVE...), are emulated: see tests/cross_slot.rs,
    // tests/cross_slot_source_stores.rs and tests/cross_slot_moves.rs. A script's keys are not.
    let cases: Vec<redis::Cmd> = vec![
        redis::cmd("EVAL")
            .arg("return 1")
            .arg(2)
            .arg(a)
            .arg(b)
            .clone(),
        redis::cmd("EVAL_RO")
            .arg("return 1")
            .arg(2)
            .arg(a)
            .arg(b)
            .clone(),
    ];
    for cmd in &cases {
        let error = reply(&mut con, cmd).expect_err("must be refused");
        assert!(error.to_lowercase().contains("crossslot"), "{error}");
        assert!(error.contains(a) && error.contains(b), "{error}");
    }
    // MSETNX is refused with its reason: it is all or nothing only on one node.
    let msetnx = redis::cmd("MSETNX").arg(a).arg(1).arg(b).arg(2).clone();
    let error = reply(&mut con, &msetnx).expect_err("must be refused");
    assert!(
        error.contains("MSETNX is all or nothing only on one node"),
        "{error}"
    );
    // Nothing was written by any of them.
    let exists: i64 = redis::cmd("EXISTS").arg(a).arg(b).query(&mut con).unwrap();
    assert_eq!(exists, 0);
}
