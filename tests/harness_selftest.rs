//! Checks the harness itself against a real cluster: that it starts, covers every slot, routes
//! keys where Redis says they live, and that slot moves and failovers really happen.

mod common;

use common::{connect, query, shared_cluster, Cluster, Role, Standalone, SLOT_COUNT};

fn set(addr: &str, key: &str, value: &str) {
    let mut con = connect(addr);
    let reply: String = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, "OK");
}

fn get(addr: &str, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(&mut connect(addr))
}

/// Slot coverage straight from `CLUSTER SLOTS` of every node, independent of the harness's
/// own parsing: each reply entry is [start, end, [ip, port, id], replicas...].
fn covered_slots(addr: &str) -> Vec<bool> {
    let entries: Vec<Vec<redis::Value>> =
        query(addr, redis::cmd("CLUSTER").arg("SLOTS")).unwrap_or_else(|e| panic!("{e}"));
    let mut covered = vec![false; SLOT_COUNT as usize];
    for entry in entries {
        let start: usize = redis::from_redis_value(&entry[0]).unwrap();
        let end: usize = redis::from_redis_value(&entry[1]).unwrap();
        for (slot, seen) in covered.iter_mut().enumerate().take(end + 1).skip(start) {
            assert!(!*seen, "{addr}: slot {slot} listed twice");
            *seen = true;
        }
    }
    covered
}

#[test]
fn cluster_routes_migrates_and_fails_over() {
    let cluster = Cluster::start(3, 1);
    assert_eq!(cluster.seeds().len(), 6);
    let masters = cluster.masters();
    let replicas = cluster.replicas();
    assert_eq!(masters.len(), 3, "masters: {masters:?}");
    assert_eq!(replicas.len(), 3, "replicas: {replicas:?}");

    for addr in cluster.seeds() {
        let covered = covered_slots(&addr);
        let missing = covered.iter().filter(|seen| !**seen).count();
        assert_eq!(missing, 0, "{addr} reports {missing} uncovered slots");
    }

    // Keys sharing a hash tag share a slot; the owner serves them, other masters redirect.
    let keys = ["{harness}:a", "{harness}:b", "{harness}:c"];
    let slot = cluster.keyslot(keys[0]);
    assert!(keys.iter().all(|k| cluster.keyslot(k) == slot));
    let owner = cluster.node_for_slot(slot);
    for key in keys {
        set(&owner, key, &format!("value of {key}"));
    }
    let other = masters.iter().find(|m| **m != owner).unwrap().clone();
    let redirect = get(&other, keys[0]).unwrap_err();
    assert_eq!(redirect.kind(), redis::ErrorKind::Moved, "{redirect}");

    // Held half-way: one key moved, the source answers ASK for it and still serves the rest.
    cluster.begin_migration(slot, &other);
    assert_eq!(cluster.migrate_keys(slot, &other, 1), 1);
    let on_target: i64 = query(
        &other,
        redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
    )
    .unwrap();
    assert_eq!(on_target, 1);
    let moved_key: Vec<String> = query(
        &other,
        redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10),
    )
    .unwrap();
    let ask = get(&owner, &moved_key[0]).unwrap_err();
    assert_eq!(ask.kind(), redis::ErrorKind::Ask, "{ask}");
    let still_home = keys.iter().find(|k| **k != moved_key[0]).unwrap();
    assert_eq!(
        get(&owner, still_home).unwrap(),
        Some(format!("value of {still_home}"))
    );
    assert_eq!(
        cluster.node_for_slot(slot),
        owner,
        "owner changes only at the end"
    );

    assert_eq!(cluster.migrate_keys(slot, &other, usize::MAX), 2);
    cluster.finish_migration(slot, &other);
    assert_eq!(cluster.node_for_slot(slot), other);
    for key in keys {
        assert_eq!(get(&other, key).unwrap(), Some(format!("value of {key}")));
    }
    let moved = get(&owner, keys[0]).unwrap_err();
    assert_eq!(moved.kind(), redis::ErrorKind::Moved, "{moved}");

    // Whole move back in one call.
    cluster.migrate_slot(slot, &owner);
    assert_eq!(cluster.node_for_slot(slot), owner);
    assert_eq!(
        get(&owner, keys[1]).unwrap(),
        Some(format!("value of {}", keys[1]))
    );

    // Manual failover: the replica of the slot's owner takes over with the data.
    let replica = cluster
        .replicas_of(&owner)
        .pop()
        .expect("owner has a replica");
    cluster.failover(&replica);
    let info: String = query(&replica, redis::cmd("INFO").arg("replication")).unwrap();
    assert!(info.lines().any(|l| l.trim() == "role:master"), "{info}");
    assert_eq!(
        cluster.layout().roles.get(&owner),
        Some(&Role::ReplicaOf(replica.clone()))
    );
    assert_eq!(cluster.node_for_slot(slot), replica);
    assert_eq!(
        get(&replica, keys[2]).unwrap(),
        Some(format!("value of {}", keys[2]))
    );

    // A killed replica rejoins on restart.
    cluster.kill_node(&owner);
    assert!(connect_fails(&owner));
    cluster.restart_node(&owner);
    assert_eq!(cluster.replicas_of(&replica), vec![owner.clone()]);
}

fn connect_fails(addr: &str) -> bool {
    common::try_connect(addr, std::time::Duration::from_millis(500)).is_err()
}

#[test]
fn shared_cluster_is_one_cluster_per_binary() {
    let first = shared_cluster();
    let second = shared_cluster();
    assert!(std::ptr::eq(first, second));
    assert_eq!(first.masters().len(), 3);
    let pong: String = query(&first.seeds()[0], &redis::cmd("PING")).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn standalone_is_not_a_cluster_and_restarts_empty() {
    let mut server = Standalone::start();
    let info: String = query(server.addr(), redis::cmd("INFO").arg("cluster")).unwrap();
    assert!(
        info.lines().any(|l| l.trim() == "cluster_enabled:0"),
        "{info}"
    );
    set(server.addr(), "k", "v");
    assert_eq!(get(server.addr(), "k").unwrap(), Some("v".to_string()));
    server.restart();
    assert_eq!(
        get(server.addr(), "k").unwrap(),
        None,
        "nothing is persisted"
    );
}
