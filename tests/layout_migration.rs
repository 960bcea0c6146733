//! A layout listing stays exact, and batched index writes land, while a slot holding bucket
//! indices (and their records) moves between masters: index reads and writes follow ASK,
//! TRYAGAIN and MOVED like any command.

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

/// Pipelined writes to index-backed records (each inside the upkeep script, sent in the
/// client's batch) while their bucket's slot moves key by key: every write is answered OK
/// (through ASK, TRYAGAIN and MOVED), and afterwards each record's index entry carries its
/// expiry.
#[test]
fn batched_index_writes_land_while_their_bucket_slot_migrates() {
    let cluster = Cluster::start(3, 0);
    let p = "lymigw";
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), "config/botmesh-cluster-v1.yaml", p);
    let ids: Vec<String> = (0..2000)
        .map(|i| format!("w-{i}"))
        .filter(|id| slotbridge::rewrite::encoding::bucket(id.as_bytes()) == 25)
        .take(40)
        .collect();
    assert!(ids.len() >= 20, "{ids:?}");
    let mut con = proxy.client().get_connection().unwrap();
    for id in &ids {
        let _: () = redis::cmd("SET")
            .arg(format!("{p}:chat:{id}"))
            .arg(0)
            .query(&mut con)
            .unwrap();
    }
    let index = format!("{p}:{{ch:25}}:idx");
    let slot = cluster.keyslot(&index);
    let owner = cluster.node_for_slot(slot);
    let target = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut con = proxy.client().get_connection().unwrap();
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || round < 3 {
                let mut pipe = redis::pipe();
                for (i, id) in ids.iter().enumerate() {
                    pipe.cmd("SET")
                        .arg(format!("{p}:chat:{id}"))
                        .arg(round)
                        .arg("PX")
                        .arg(600_000 + i);
                }
                let replies: Vec<String> = pipe
                    .query(&mut con)
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
                assert!(
                    replies.iter().all(|r| r == "OK"),
                    "round {round}: {replies:?}"
                );
                round += 1;
            }
            round
        });
        cluster.begin_migration(slot, &target);
        while cluster.migrate_keys(slot, &target, 2) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        cluster.finish_migration(slot, &target);
        std::thread::sleep(std::time::Duration::from_millis(200));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rounds = writer.join().unwrap();
        assert!(rounds >= 3, "{rounds} rounds");
    });
    for id in &ids {
        let record = format!("{p}:{{ch:25}}:r:{id}");
        let at: i64 = common::query(&target, redis::cmd("PEXPIRETIME").arg(&record)).unwrap();
        let score: f64 = common::query(&target, redis::cmd("ZSCORE").arg(&index).arg(id)).unwrap();
        assert!(at > 0, "{record}");
        assert_eq!(
            score, at as f64,
            "{index} scores {id} with its record's expiry"
        );
    }
}
