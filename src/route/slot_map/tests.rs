//! Slot map parsing, against replies captured from a real Redis 7.0 cluster.
//!
//! The captured cluster (per its `CLUSTER NODES`): 127.0.0.1:23701 serves 0-5460 with
//! replica 127.0.0.1:23704, :23702 serves 5461-10922, :23703 serves 10923-16383. The
//! `split_failed` capture was taken after `CLUSTER SETSLOT 100 NODE <23702>` and after the
//! replica had been killed and marked `fail`. The replica had replicated nothing yet, so
//! `CLUSTER SLOTS` (which omits replicas with a zero replication offset) does not list it
//! while `CLUSTER SHARDS` does.

use super::*;

const SHARDS_RESP2: &[u8] = include_bytes!("../testdata/cluster_shards_resp2.bin");
const SHARDS_RESP3: &[u8] = include_bytes!("../testdata/cluster_shards_resp3.bin");
const SLOTS_RESP2: &[u8] = include_bytes!("../testdata/cluster_slots_resp2.bin");
const SLOTS_RESP3: &[u8] = include_bytes!("../testdata/cluster_slots_resp3.bin");
const SHARDS_SPLIT_FAILED: &[u8] =
    include_bytes!("../testdata/cluster_shards_split_failed_resp2.bin");
const SLOTS_SPLIT: &[u8] = include_bytes!("../testdata/cluster_slots_split_resp2.bin");

const FROM: &str = "127.0.0.1:23701";

fn no_remap() -> HashMap<String, String> {
    HashMap::new()
}

fn owner(map: &SlotMap, slot: u16) -> Option<&str> {
    map.master_addr(slot).map(|addr| &**addr)
}

fn assert_three_masters(map: &SlotMap) {
    for (slot, expected) in [
        (0, "127.0.0.1:23701"),
        (5460, "127.0.0.1:23701"),
        (5461, "127.0.0.1:23702"),
        (10922, "127.0.0.1:23702"),
        (10923, "127.0.0.1:23703"),
        (16383, "127.0.0.1:23703"),
    ] {
        assert_eq!(owner(map, slot), Some(expected), "slot {slot}");
    }
    assert!(map.is_complete());
    assert_eq!(map.slots_covered(), SLOT_COUNT);
    let mut masters: Vec<&str> = map.masters().iter().map(|m| &**m).collect();
    masters.sort();
    assert_eq!(
        masters,
        ["127.0.0.1:23701", "127.0.0.1:23702", "127.0.0.1:23703"]
    );
}

fn sorted_nodes(map: &SlotMap) -> Vec<&str> {
    let mut nodes: Vec<&str> = map.nodes().iter().map(|n| &**n).collect();
    nodes.sort();
    nodes
}

#[test]
fn cluster_shards_in_both_protocols() {
    for reply in [SHARDS_RESP2, SHARDS_RESP3] {
        let map = SlotMap::from_cluster_shards(reply, &no_remap()).unwrap();
        assert_three_masters(&map);
        assert_eq!(
            sorted_nodes(&map),
            [
                "127.0.0.1:23701",
                "127.0.0.1:23702",
                "127.0.0.1:23703",
                "127.0.0.1:23704"
            ]
        );
    }
}

#[test]
fn cluster_slots_in_both_protocols() {
    for reply in [SLOTS_RESP2, SLOTS_RESP3] {
        let map = SlotMap::from_cluster_slots(reply, FROM, &no_remap()).unwrap();
        assert_three_masters(&map);
        assert_eq!(map.nodes().len(), 3);
    }
}

#[test]
fn split_ranges_and_failed_nodes() {
    let shards = SlotMap::from_cluster_shards(SHARDS_SPLIT_FAILED, &no_remap()).unwrap();
    let slots = SlotMap::from_cluster_slots(SLOTS_SPLIT, FROM, &no_remap()).unwrap();
    for map in [&shards, &slots] {
        assert_eq!(owner(map, 99), Some("127.0.0.1:23701"));
        assert_eq!(owner(map, 100), Some("127.0.0.1:23702"));
        assert_eq!(owner(map, 101), Some("127.0.0.1:23701"));
        assert!(map.is_complete());
        assert_eq!(map.masters().len(), 3);
    }
    // The failed replica is no seed.
    assert_eq!(
        sorted_nodes(&shards),
        ["127.0.0.1:23701", "127.0.0.1:23702", "127.0.0.1:23703"]
    );
}

#[test]
fn remap_applies_to_masters_and_seeds() {
    let remap = HashMap::from([
        (
            "127.0.0.1:23702".to_string(),
            "db-b.internal:7002".to_string(),
        ),
        (
            "127.0.0.1:23704".to_string(),
            "db-r.internal:7004".to_string(),
        ),
    ]);
    let shards = SlotMap::from_cluster_shards(SHARDS_RESP2, &remap).unwrap();
    let slots = SlotMap::from_cluster_slots(SLOTS_RESP2, FROM, &remap).unwrap();
    for map in [&shards, &slots] {
        assert_eq!(owner(map, 6000), Some("db-b.internal:7002"));
        assert_eq!(owner(map, 0), Some("127.0.0.1:23701"));
        assert!(!map.nodes().iter().any(|n| &**n == "127.0.0.1:23702"));
    }
    assert!(shards.nodes().iter().any(|n| &**n == "db-r.internal:7004"));
}

#[test]
fn error_and_malformed_replies_are_errors() {
    let err = SlotMap::from_cluster_shards(
        b"-ERR This instance has cluster support disabled\r\n",
        &no_remap(),
    )
    .unwrap_err();
    assert!(err.contains("cluster support disabled"), "{err}");
    assert!(SlotMap::from_cluster_slots(b"+OK\r\n", FROM, &no_remap()).is_err());
    assert!(SlotMap::from_cluster_shards(b"*1\r\n:5\r\n", &no_remap()).is_err());
    // Every truncation of a real reply is refused, never a panic or a partial map.
    for cut in 0..SHARDS_RESP2.len() {
        assert!(SlotMap::from_cluster_shards(&SHARDS_RESP2[..cut], &no_remap()).is_err());
    }
    for cut in 0..SLOTS_RESP3.len() {
        assert!(SlotMap::from_cluster_slots(&SLOTS_RESP3[..cut], FROM, &no_remap()).is_err());
    }
    // Out-of-range slots.
    let bad_range = b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n";
    assert!(SlotMap::from_cluster_slots(bad_range, FROM, &no_remap()).is_err());
}

/// One shard in the RESP2 `CLUSTER SHARDS` shape Redis 7 documents.
fn shard(slots: &[(u16, u16)], nodes: &[&[(&str, &str)]]) -> String {
    let mut out = format!("*4\r\n$5\r\nslots\r\n*{}\r\n", slots.len() * 2);
    for (start, end) in slots {
        out += &format!(":{start}\r\n:{end}\r\n");
    }
    out += &format!("$5\r\nnodes\r\n*{}\r\n", nodes.len());
    for node in nodes {
        out += &format!("*{}\r\n", node.len() * 2);
        for (name, value) in *node {
            out += &format!("${}\r\n{name}\r\n", name.len());
            if *name == "port" {
                out += &format!(":{value}\r\n");
            } else {
                out += &format!("${}\r\n{value}\r\n", value.len());
            }
        }
    }
    out
}

#[test]
fn shard_node_fields_follow_redis_docs() {
    let reply = format!(
        "*4\r\n{}{}{}{}",
        // No ip: the endpoint (a hostname) is used.
        shard(
            &[(0, 99)],
            &[&[
                ("port", "7000"),
                ("endpoint", "node-a.example"),
                ("role", "master"),
                ("health", "online")
            ]]
        ),
        // `?` endpoint and no ip: unusable, its slots stay uncovered.
        shard(
            &[(100, 199)],
            &[&[
                ("port", "7001"),
                ("endpoint", "?"),
                ("role", "master"),
                ("health", "online")
            ]]
        ),
        // Failed master: its slots stay uncovered, the healthy replica is still a seed.
        shard(
            &[(200, 299)],
            &[
                &[
                    ("port", "7002"),
                    ("ip", "10.0.0.2"),
                    ("role", "master"),
                    ("health", "fail")
                ],
                &[
                    ("port", "7003"),
                    ("ip", "10.0.0.3"),
                    ("role", "replica"),
                    ("health", "online")
                ],
            ]
        ),
        // IPv6, ip preferred over endpoint.
        shard(
            &[(300, 16383)],
            &[&[
                ("port", "7004"),
                ("ip", "::1"),
                ("endpoint", "node-e.example"),
                ("role", "master"),
                ("health", "online")
            ]]
        ),
    );
    let map = SlotMap::from_cluster_shards(reply.as_bytes(), &no_remap()).unwrap();
    assert_eq!(owner(&map, 0), Some("node-a.example:7000"));
    assert_eq!(owner(&map, 150), None);
    assert_eq!(owner(&map, 250), None);
    assert_eq!(owner(&map, 300), Some("[::1]:7004"));
    assert_eq!(map.slots_covered(), SLOT_COUNT - 200);
    assert!(!map.is_complete());
    assert_eq!(
        sorted_nodes(&map),
        ["10.0.0.3:7003", "[::1]:7004", "node-a.example:7000"]
    );
}

#[test]
fn cluster_slots_null_or_empty_endpoint_means_the_asked_host() {
    let reply = b"*2\r\n\
        *3\r\n:0\r\n:8191\r\n*3\r\n$-1\r\n:7000\r\n$2\r\nid\r\n\
        *5\r\n:8192\r\n:16383\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n\
        *3\r\n$1\r\n?\r\n:7002\r\n$2\r\nid\r\n\
        *3\r\n$8\r\n10.9.9.9\r\n:7003\r\n$2\r\nid\r\n";
    let map = SlotMap::from_cluster_slots(reply, "10.1.2.3:7000", &no_remap()).unwrap();
    assert_eq!(owner(&map, 0), Some("10.1.2.3:7000"));
    assert_eq!(owner(&map, 16383), Some("10.1.2.3:7001"));
    // The `?` replica is skipped, the last one is a seed.
    assert_eq!(
        sorted_nodes(&map),
        ["10.1.2.3:7000", "10.1.2.3:7001", "10.9.9.9:7003"]
    );
    assert!(map.is_complete());
}

#[test]
fn single_node_serves_everything() {
    let map = SlotMap::single(Arc::from("127.0.0.1:7000"));
    assert!(map.is_complete());
    assert_eq!(map.master_index(0), Some(0));
    assert_eq!(owner(&map, 16383), Some("127.0.0.1:7000"));
    assert_eq!(map.master_index(16384), None);
    assert_eq!(map.nodes().len(), 1);
}

#[test]
fn moved_slot_patches_a_copy() {
    let map = SlotMap::from_cluster_shards(SHARDS_RESP2, &no_remap()).unwrap();
    let moved = map.with_slot_moved(0, Arc::from("127.0.0.1:23705"));
    assert_eq!(owner(&map, 0), Some("127.0.0.1:23701"));
    assert_eq!(owner(&moved, 0), Some("127.0.0.1:23705"));
    assert_eq!(owner(&moved, 1), Some("127.0.0.1:23701"));
    assert_eq!(moved.masters().len(), 4);
    assert!(moved.nodes().iter().any(|n| &**n == "127.0.0.1:23705"));
    assert!(moved.is_complete());
    // Moving to a known master reuses its index.
    let again = moved.with_slot_moved(1, Arc::from("127.0.0.1:23703"));
    assert_eq!(again.masters().len(), 4);
    assert_eq!(again.master_index(1), again.master_index(16383));
    // Moving an uncovered slot covers it.
    let empty = SlotMap::from_cluster_shards(b"*0\r\n", &no_remap()).unwrap();
    assert_eq!(empty.slots_covered(), 0);
    assert_eq!(
        empty.with_slot_moved(5, Arc::from("h:1")).slots_covered(),
        1
    );
}

#[test]
fn remap_addr_canonicalises() {
    let remap = HashMap::from([("[::1]:7000".to_string(), "127.0.0.1:7000".to_string())]);
    assert_eq!(&*SlotMap::remap_addr("::1:7000", &remap), "127.0.0.1:7000");
    assert_eq!(
        &*SlotMap::remap_addr("[::1]:7000", &remap),
        "127.0.0.1:7000"
    );
    assert_eq!(&*SlotMap::remap_addr("::2:7000", &remap), "[::2]:7000");
    assert_eq!(&*SlotMap::remap_addr("h:7001", &remap), "h:7001");
}

#[test]
fn a_reply_nesting_deeper_than_any_slot_map_is_refused_unread() {
    // The decoders recurse: this would overflow the stack if they were handed it.
    let deep = "*1\r\n".repeat(100_000) + ":1\r\n";
    let refused = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let slots = SlotMap::from_cluster_slots(deep.as_bytes(), FROM, &no_remap());
            let shards = SlotMap::from_cluster_shards(deep.as_bytes(), &no_remap());
            [slots.err(), shards.err()]
        })
        .expect("spawn")
        .join()
        .expect("no overflow");
    let expected = Some("reply nests 100000 levels deep".to_owned());
    assert_eq!(refused, [expected.clone(), expected]);
}

#[test]
fn over_tls_nodes_are_reached_on_their_tls_port() {
    // As `tls-cluster yes` nodes announce: a TLS port, and a plain one unless it is off.
    let tls_node = |port: &'static str, tls: &'static str| -> Vec<(&'static str, &'static str)> {
        let mut fields = vec![("ip", "10.0.0.1"), ("role", "master")];
        if !port.is_empty() {
            fields.push(("port", port));
        }
        fields.push(("tls-port", tls));
        fields
    };
    let (both, tls_only) = (tls_node("7000", "17000"), tls_node("", "17001"));
    let reply = format!(
        "*2\r\n{}{}",
        shard(&[(0, 8191)], &[&both]),
        shard(&[(8192, 16383)], &[&tls_only]),
    )
    // The helper writes `port` alone as an integer; Redis writes `tls-port` as one too.
    .replace("$8\r\ntls-port\r\n$5\r\n", "$8\r\ntls-port\r\n:");
    let over_tls =
        SlotMap::from_cluster_shards_on(reply.as_bytes(), &no_remap(), NodePort::Tls).unwrap();
    assert_eq!(&**over_tls.master_addr(0).unwrap(), "10.0.0.1:17000");
    assert_eq!(&**over_tls.master_addr(9000).unwrap(), "10.0.0.1:17001");
    let plain = SlotMap::from_cluster_shards(reply.as_bytes(), &no_remap()).unwrap();
    assert_eq!(&**plain.master_addr(0).unwrap(), "10.0.0.1:7000");
    assert_eq!(
        plain.master_addr(9000),
        None,
        "a TLS-only node has no plain address"
    );
}
