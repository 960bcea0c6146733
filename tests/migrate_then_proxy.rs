//! After `slotbridge migrate`, the proxy with the layout enabled serves a legacy client the
//! same data under the legacy names.
//!
//! Needs the proxy's layout path (rewriting legacy names to cluster:v1). The flags used
//! here, `--layout FILE --prefix P`, are the expected ones; adjust them to the proxy's real
//! flags when that work is merged.

mod common;

use common::{migrate_to_cluster, query, shared_cluster, write_plain, Proxy, Standalone};

#[test]
fn a_legacy_client_reads_the_migrated_keyspace_through_the_proxy() {
    let node = Standalone::start();
    let p = "mtp";
    write_plain(
        node.addr(),
        p,
        &[
            &["SET", "{p}:chat:chat-1", "record"],
            &["SET", "{p}:checkpoint:c2", "cp", "PX", "600000"],
            &["ZADD", "{p}:msgs:chat-1", "1", "m1"],
            &["SET", "{p}:msg:chat-1:m1", "hello"],
            &["SET", "{p}:fence:team:ops", "7"],
            &["SET", "{p}:conv:42", "conv"],
        ],
    );

    let cluster = shared_cluster();
    migrate_to_cluster(node.addr(), &cluster.seeds_arg(), p, &[]);

    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), "config/botmesh-cluster-v1.yaml", p);
    let get = |key: String| -> Option<String> {
        query(proxy.addr(), redis::cmd("GET").arg(key)).unwrap()
    };
    assert_eq!(get(format!("{p}:chat:chat-1")).as_deref(), Some("record"));
    assert_eq!(get(format!("{p}:checkpoint:c2")).as_deref(), Some("cp"));
    assert_eq!(get(format!("{p}:msg:chat-1:m1")).as_deref(), Some("hello"));
    assert_eq!(get(format!("{p}:fence:team:ops")).as_deref(), Some("7"));
    assert_eq!(get(format!("{p}:conv:42")).as_deref(), Some("conv"));
    let ttl: i64 = query(
        proxy.addr(),
        redis::cmd("PTTL").arg(format!("{p}:checkpoint:c2")),
    )
    .unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "TTL kept: {ttl}");
    let members: Vec<String> = query(
        proxy.addr(),
        redis::cmd("ZRANGE")
            .arg(format!("{p}:msgs:chat-1"))
            .arg(0)
            .arg(-1),
    )
    .unwrap();
    assert_eq!(members, vec!["m1".to_owned()]);
    let mut chats: Vec<String> =
        query(proxy.addr(), redis::cmd("KEYS").arg(format!("{p}:chat:*"))).unwrap();
    chats.sort();
    assert_eq!(
        chats,
        vec![format!("{p}:chat:chat-1")],
        "listing through the bucket indices"
    );
}
