//! A layout listing stays exact while a slot holding bucket indices (and their records)
//! moves between masters: index reads follow ASK and MOVED like any command.

mod common;

use common::{scan_all, Cluster, Proxy};

/// Every key `SCAN` lists for `pattern`, sorted.
fn scan_sorted(con: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut all = scan_all(con, pattern);
    all.sort();
    all
}

#[test]
fn listing_is_exact_while_a_bucket_slot_migrates() {
    let cluster = Cluster::start(3, 0);
    let p = "lymig";
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), "config/botmesh-cluster-v1.yaml", p);
    let mut con = proxy.client().get_connection().unwrap();
    let mut expected: Vec<String> = (0..300).map(|i| format!("{p}:chat:c-{i}")).collect();
    for name in &expected {
        let _: () = redis::cmd("SET").arg(name).arg(1).query(&mut con).unwrap();
    }
    expected.sort();
    // Bucket 25's index and records share the hash tag `ch:25`.
    let slot = cluster.keyslot(&format!("{p}:{{ch:25}}:idx"));
    let owner = cluster.node_for_slot(slot);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| *m != owner)
        .expect("another master");
    cluster.begin_migration(slot, &target);
    let mut rounds = 0;
    loop {
        assert_eq!(
            scan_sorted(&mut con, &format!("{p}:chat:*")),
            expected,
            "round {rounds}"
        );
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{p}:chat:*"))
            .query(&mut con)
            .unwrap();
        let mut keys = keys;
        keys.sort();
        assert_eq!(keys, expected, "KEYS, round {rounds}");
        rounds += 1;
        if cluster.migrate_keys(slot, &target, 3) == 0 || rounds > 40 {
            break;
        }
    }
    assert!(
        rounds >= 2,
        "the slot held records and the index: several rounds expected"
    );
    cluster.finish_migration(slot, &target);
    assert_eq!(
        scan_sorted(&mut con, &format!("{p}:chat:*")),
        expected,
        "after the move"
    );
    // Writes after the move still keep the index.
    let _: () = redis::cmd("SET")
        .arg(format!("{p}:chat:chat-1"))
        .arg(1)
        .query(&mut con)
        .unwrap();
    let listed = scan_sorted(&mut con, &format!("{p}:chat:chat-*"));
    assert_eq!(listed, vec![format!("{p}:chat:chat-1")]);
}
