//! ZRANGESTORE, GEOSEARCHSTORE, GEORADIUS/GEORADIUSBYMEMBER ... STORE|STOREDIST and SORT ...
//! STORE (with and without BY and GET patterns) through the proxy over a 3-master cluster, the source and the destination on different masters:
//! the reply (RESP2 and RESP3, byte for byte) and what the destination then holds (members,
//! scores or elements, type, TTL) equal what one redis-server gives for the same data; errors leave the
//! destination as it was; no scratch key is left behind; a result over
//! `cross_slot.max_members` is refused with nothing written; `cross_slot.stores: refuse`
//! names its setting.

mod common;

use common::{shared_cluster, Proxy, Raw, Standalone};

/// Two untagged key prefixes starting with `prefix` whose keys `<p>:z` and `<p>:d` live on
/// different masters.
fn source_and_destination(prefix: &str) -> (String, String) {
    let cluster = shared_cluster();
    let master = |key: &str| cluster.node_for_slot(cluster.keyslot(key));
    let mut candidates = (0..).map(|n| format!("{prefix}{n}"));
    let source = candidates.next().unwrap();
    let destination = candidates
        .find(|d| master(&format!("{d}:d")) != master(&format!("{source}:z")))
        .unwrap();
    (source, destination)
}

fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// The source data: a sorted set, a geo set (a sorted set of geohashes), a string, a list
/// and a set to sort, and SORT's weight and GET keys (on every master).
fn setup(s: &str) -> Vec<String> {
    vec![
        format!("DEL {s}:z {s}:g {s}:t {s}:l {s}:set"),
        format!("RPUSH {s}:l 3 1 2 10"),
        format!("SADD {s}:set b a c"),
        format!("MSET {s}w_1 5 {s}w_2 4 {s}w_3 3 {s}w_10 1 {s}o_1 one {s}o_2 two {s}o_10 ten"),
        format!("ZADD {s}:z 1 a 2 b 2.5 c 3 d 0.1 e"),
        format!(
            "GEOADD {s}:g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania \
             12.758489 38.788135 edge1 17.241510 38.788135 edge2"
        ),
        format!("SET {s}:t text"),
    ]
}

/// Each store; `{d}` is the destination key.
fn stores(s: &str, d: &str) -> Vec<String> {
    [
        "ZRANGESTORE {d} {s}:z 0 -1",
        "ZRANGESTORE {d} {s}:z 1 3 REV",
        "ZRANGESTORE {d} {s}:z (1 +inf BYSCORE LIMIT 1 2",
        "ZRANGESTORE {d} {s}:z [b [d BYLEX",
        "ZRANGESTORE {d} {s}:z 10 20",
        "ZRANGESTORE {d} {s}:missing 0 -1",
        "ZRANGESTORE {d} {s}:t 0 -1",
        "ZRANGESTORE {d} {s}:z 0 -1 WITHSCORES",
        "ZRANGESTORE {d} {s}:z 0 -1 LIMIT 1 1",
        "GEOSEARCHSTORE {d} {s}:g FROMLONLAT 15 37 BYRADIUS 200 km ASC",
        "GEOSEARCHSTORE {d} {s}:g FROMMEMBER Palermo BYBOX 400 400 km ASC COUNT 2 STOREDIST",
        "GEOSEARCHSTORE {d} {s}:g FROMMEMBER nosuch BYRADIUS 10 km",
        "GEORADIUS {s}:g 15 37 200 km STORE {d}",
        "GEORADIUS {s}:g 15 37 200 km ASC COUNT 1 STOREDIST {d}",
        "GEORADIUSBYMEMBER {s}:g Palermo 300 km STOREDIST {d}",
        "GEORADIUS {s}:g 15 37 1 km STORE {d}",
        "SORT {s}:l STORE {d}",
        "SORT {s}:l DESC LIMIT 1 2 STORE {d}",
        "SORT {s}:set ALPHA STORE {d}",
        "SORT {s}:set BY nosort STORE {d}",
        "SORT {s}:l BY {s}w_* STORE {d}",
        "SORT {s}:l BY {s}w_* GET # GET {s}o_* STORE {d}",
        "SORT {s}:l GET {s}o_* LIMIT 0 2 STORE {d}",
        "SORT {s}:missing STORE {d}",
        "SORT {s}:t STORE {d}",
        "SORT {s}:set STORE {d}",
    ]
    .iter()
    .map(|line| line.replace("{s}", s).replace("{d}", d))
    .collect()
}

/// What the destination holds, read on `conn`.
fn held(conn: &mut Raw, d: &str) -> String {
    [
        conn.call(&["TYPE", d]),
        conn.call(&["ZRANGE", d, "0", "-1", "WITHSCORES"]),
        conn.call(&["LRANGE", d, "0", "-1"]),
        conn.call(&["TTL", d]),
    ]
    .concat()
}

#[test]
fn source_stores_across_slots_answer_and_store_as_one_redis_server() {
    let standalone = Standalone::start();
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let (s, d) = source_and_destination("ssa");
    let d = format!("{d}:d");
    for hello in [None, Some("3")] {
        let mut reference = Raw::connect(standalone.addr());
        let mut through = Raw::connect(proxy.addr());
        if let Some(version) = hello {
            reference.call(&["HELLO", version]);
            through.call(&["HELLO", version]);
        }
        for line in setup(&s) {
            assert_eq!(through.call(&words(&line)), reference.call(&words(&line)));
        }
        // The destination beforehand: absent, a sorted set, a string with a TTL.
        let fills = ["", "ZADD {d} 5 old", "SET {d} old EX 100"];
        for store in stores(&s, &d) {
            for fill in fills {
                let mut prepare = vec![format!("DEL {d}")];
                if !fill.is_empty() {
                    prepare.push(fill.replace("{d}", &d));
                }
                for line in &prepare {
                    assert_eq!(through.call(&words(line)), reference.call(&words(line)));
                }
                let want = reference.call(&words(&store));
                let got = through.call(&words(&store));
                assert_eq!(got, want, "{store} (HELLO {hello:?}, before: {fill:?})");
                let want = held(&mut reference, &d);
                assert_eq!(held(&mut through, &d), want, "{store}, before: {fill:?}");
            }
        }
    }
    let mut conn = Raw::connect(proxy.addr());
    assert_eq!(conn.call(&["KEYS", "*:cross-slot-store-scratch"]), "*0\r\n");
}

#[test]
fn source_stores_over_the_member_limit_or_refused_write_nothing() {
    let seeds = shared_cluster().seeds_arg();
    let limited = Proxy::start(&["--cluster", &seeds, "--set", "cross_slot.max_members=2"]);
    let (s, d) = source_and_destination("ssl");
    let d = format!("{d}:d");
    let mut conn = Raw::connect(limited.addr());
    for line in setup(&s) {
        conn.call(&words(&line));
    }
    conn.call(&["SET", &d, "old"]);
    let store = format!("ZRANGESTORE {d} {s}:z 0 -1");
    assert_eq!(
        conn.call(&words(&store)),
        "-ERR proxy: cross-slot ZRANGESTORE reads 5 members, more than the limit of 2; \
         use keys with a common hash tag to run it on one node\r\n"
    );
    assert_eq!(conn.call(&["GET", &d]), "$3\r\nold\r\n");
    assert_eq!(conn.call(&["KEYS", "*:cross-slot-store-scratch"]), "*0\r\n");

    let refusing = Proxy::start(&["--cluster", &seeds, "--set", "cross_slot.stores=refuse"]);
    let mut conn = Raw::connect(refusing.addr());
    assert_eq!(
        conn.call(&words(&format!("GEORADIUS {s}:g 15 37 200 km STORE {d}"))),
        "-CROSSSLOT Keys in request don't hash to the same slot (emulation off: \
         cross_slot.stores)\r\n"
    );
    assert_eq!(conn.call(&["GET", &d]), "$3\r\nold\r\n");
    assert_eq!(
        conn.call(&words(&format!("SORT {s}:l STORE {d}"))),
        "-CROSSSLOT Keys in request don't hash to the same slot (emulation off: \
         cross_slot.stores)\r\n"
    );
    assert_eq!(conn.call(&["GET", &d]), "$3\r\nold\r\n");
}
