//! Listings as clients see the keyspace, against real servers: during a live migration
//! (a standalone source, a 3-master cluster as the target, the walker paused so only the
//! moves a test makes happen) KEYS, SCAN and DBSIZE through the proxy show the union of
//! both sides, each key once, with no record of the moves; under a layout DBSIZE counts
//! the legacy keys only, not the layout's index keys and marker. RANDOMKEY draws from
//! both sides and never a record, and finds a key even when its master holds hundreds of
//! records beside it. Each test starts its own cluster: DBSIZE and `KEYS *` see every key
//! of it.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::{query, Cluster, Proxy, Standalone};
use slotbridge::live::names::fence_key;
use slotbridge::live::{KeyMove, MoveSpec, Mover, Phase};
use slotbridge::migrate::load_layout;
use slotbridge::migrate::plan::{plan_forward, FamilyFilter, Step};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";
/// Long enough that a claim a test leaves behind stays live while the test reads.
const LEASE: Duration = Duration::from_secs(60);

async fn mover(source: &Standalone, cluster: &Cluster) -> Mover {
    let from = common::endpoint(&[source.addr().to_owned()]).await;
    let to = common::endpoint(&cluster.seeds()).await;
    Mover::new(from, to, LEASE).await.unwrap()
}

/// The proxy in front of `cluster`, migrating from `source` with its walker paused, and
/// with the test layout on prefix `mybot` when `layout` is set.
fn live_proxy(cluster: &Cluster, source: &Standalone, layout: bool) -> Proxy {
    let seeds = cluster.seeds_arg();
    let from = format!("migration.source=redis://{}", source.addr());
    let mut args = vec!["--cluster", &seeds, "--set", &from];
    args.extend(["--set", "migration.paused=true"]);
    if layout {
        args.extend(["--layout", PROFILE, "--prefix", "mybot"]);
    }
    Proxy::start(&args)
}

/// The move of legacy key `key` under the test layout (prefix `mybot`): keys outside the
/// prefix keep their names, as the proxy's mover moves them.
fn layout_spec(key: &str) -> MoveSpec {
    if !key.starts_with("mybot:") {
        return MoveSpec::same_name(Bytes::copy_from_slice(key.as_bytes()));
    }
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/",
        "config/botmesh-cluster-v1.yaml"
    ));
    let layout = load_layout(&path, "mybot").unwrap();
    let key = Bytes::copy_from_slice(key.as_bytes());
    match plan_forward(&layout, &key, true, &FamilyFilter::default()) {
        Step::Copy(step) => MoveSpec::from_copy_step(&step),
        other => panic!("{key:?}: planned as {other:?}"),
    }
}

fn set_on(addr: &str, key: &str, value: &str) {
    let _: () = query(addr, redis::cmd("SET").arg(key).arg(value)).unwrap();
}

/// Every key of the cluster (KEYS * on each master), records and internal keys included.
fn raw_cluster_keys(cluster: &Cluster) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for master in cluster.masters() {
        let keys: Vec<String> = query(&master, redis::cmd("KEYS").arg("*")).unwrap();
        all.extend(keys);
    }
    all
}

fn keys(con: &mut redis::Connection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(con).unwrap()
}

fn dbsize(con: &mut redis::Connection) -> usize {
    redis::cmd("DBSIZE").query(con).unwrap()
}

fn set_of(names: &[String]) -> BTreeSet<String> {
    names.iter().cloned().collect()
}

/// `draws` RANDOMKEY answers through `con`, each one a key (nil panics).
fn random_keys(con: &mut redis::Connection, draws: usize) -> Vec<String> {
    (0..draws)
        .map(|_| {
            let drawn: Option<String> = redis::cmd("RANDOMKEY").query(con).unwrap();
            drawn.expect("RANDOMKEY answered nil while keys exist")
        })
        .collect()
}

/// Ten RANDOMKEY answers through `con`, every one `key`.
fn assert_draws_only(con: &mut redis::Connection, key: &str) {
    assert_eq!(set_of(&random_keys(con, 10)), set_of(&[key.to_owned()]));
}

fn assert_no_record(names: &[String], what: &str) {
    let records: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("slotbridge:live:"))
        .collect();
    assert!(records.is_empty(), "{what} shows records: {records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_migration_keys_scan_and_dbsize_show_the_union_once_without_records() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let strings: Vec<String> = (0..40).map(|i| format!("ll:s:{i}")).collect();
    let hashes: Vec<String> = (0..12).map(|i| format!("ll:h:{i}")).collect();
    for key in &strings {
        set_on(source.addr(), key, "v");
    }
    for key in &hashes {
        let _: () = query(source.addr(), redis::cmd("HSET").arg(key).arg("f").arg("1")).unwrap();
    }
    let all: Vec<String> = strings.iter().chain(&hashes).cloned().collect();

    // Every third key moves to the target; one key is left claimed mid-move (a claim
    // record on the source, the key still there), as a stalled mover leaves it.
    let m = mover(&source, &cluster).await;
    let moved: Vec<&String> = all.iter().step_by(3).collect();
    for key in &moved {
        m.run(&MoveSpec::same_name(Bytes::from((*key).clone())))
            .await
            .unwrap();
    }
    let stalled = MoveSpec::same_name(Bytes::from_static(b"ll:s:1"));
    let token = Mover::token();
    m.drive(&stalled, &token, KeyMove::new(), |p| {
        matches!(p, Phase::Seal(_))
    })
    .await
    .unwrap();
    let on_source: Vec<String> = query(source.addr(), redis::cmd("KEYS").arg("*")).unwrap();
    assert!(
        on_source.iter().any(|k| k.starts_with("slotbridge:live:")),
        "the stalled move must leave its claim on the source: {on_source:?}"
    );
    let on_target = raw_cluster_keys(&cluster);
    let fences = on_target
        .iter()
        .filter(|k| k.starts_with("slotbridge:live:"))
        .count();
    assert!(fences > 0, "the moves must leave fences on the target");
    assert_eq!(on_target.len(), moved.len() + fences);

    let proxy = live_proxy(&cluster, &source, false);
    let mut con = proxy.connect();
    let listed = keys(&mut con, "*");
    assert_eq!(listed.len(), all.len(), "each key once: {listed:?}");
    assert_eq!(set_of(&listed), set_of(&all));
    assert_eq!(dbsize(&mut con), all.len());

    for count in ["3", "1000"] {
        let scanned = common::scan_with(&mut con, &["COUNT", count]);
        assert_no_record(&scanned, "SCAN");
        assert_eq!(set_of(&scanned), set_of(&all), "SCAN COUNT {count}");
    }
    let hash_names = common::scan_with(&mut con, &["MATCH", "ll:h:*", "COUNT", "4"]);
    assert_eq!(set_of(&hash_names), set_of(&hashes), "MATCH on both sides");
    let typed = common::scan_with(&mut con, &["TYPE", "hash"]);
    assert_eq!(set_of(&typed), set_of(&hashes), "TYPE on both sides");
    assert_eq!(set_of(&keys(&mut con, "ll:h:*")), set_of(&hashes));
    let bad: redis::RedisResult<(String, Vec<String>)> = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(0)
        .query(&mut con);
    assert!(bad.is_err(), "COUNT 0 is refused as Redis refuses it");

    // RANDOMKEY draws from both sides, never a record.
    let drawn = set_of(&random_keys(&mut con, 60));
    assert!(drawn.is_subset(&set_of(&all)), "{drawn:?}");
    let moved = set_of(&moved.into_iter().cloned().collect::<Vec<_>>());
    assert!(
        drawn.iter().any(|k| moved.contains(k)),
        "never the target's: {drawn:?}"
    );
    assert!(
        drawn.iter().any(|k| !moved.contains(k)),
        "never the source's: {drawn:?}"
    );
}

#[test]
fn randomkey_never_draws_a_record_and_is_nil_when_only_records_remain() {
    // After a migration: the target holds its moved keys and one compacted fence per slot.
    let cluster = Cluster::start(3, 0);
    for slot_key in ["a", "b", "c", "d"] {
        let fence = String::from_utf8(fence_key(slot_key.as_bytes()).to_vec()).unwrap();
        let node = cluster.node_for_slot(cluster.keyslot(&fence));
        let _: () = query(
            &node,
            redis::cmd("HSET")
                .arg(&fence)
                .arg("slotbridge:live:all")
                .arg("1"),
        )
        .unwrap();
    }
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    for _ in 0..5 {
        let drawn: Option<String> = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
        assert_eq!(drawn, None, "only records: the keyspace looks empty");
    }
    let _: () = redis::cmd("SET")
        .arg("kept")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_draws_only(&mut con, "kept");

    // Under a layout the same, beside the layout's own keys.
    let layout = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let mut con = layout.connect();
    assert_draws_only(&mut con, "kept");
}

#[test]
fn randomkey_finds_the_one_key_a_master_shows_among_hundreds_of_records() {
    // One key beside 300 fences on its master: RANDOMKEY's draws almost always land on
    // fences, and the master's walk must still find the key, every time.
    let cluster = Cluster::start(3, 0);
    let kept_node = cluster.node_for_slot(cluster.keyslot("kept"));
    set_on(&kept_node, "kept", "v");
    let mut fences = 0;
    for i in 0.. {
        let fence = String::from_utf8(fence_key(format!("t{i}").as_bytes()).to_vec()).unwrap();
        if cluster.node_for_slot(cluster.keyslot(&fence)) != kept_node {
            continue;
        }
        let _: () = query(&kept_node, redis::cmd("HSET").arg(&fence).arg("a").arg("1")).unwrap();
        fences += 1;
        if fences == 300 {
            break;
        }
    }
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    assert_draws_only(&mut con, "kept");
    let layout = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let mut con = layout.connect();
    assert_draws_only(&mut con, "kept");

    // A live migration's source the same: one key beside 300 claim records.
    let source = Standalone::start();
    set_on(source.addr(), "src-only", "v");
    for i in 0..300 {
        set_on(
            source.addr(),
            &format!("slotbridge:live:{{t{i}}}:claim:x{i}"),
            "r",
        );
    }
    let empty = Cluster::start(3, 0);
    let proxy = live_proxy(&empty, &source, false);
    let mut con = proxy.connect();
    assert_draws_only(&mut con, "src-only");
}

/// Legacy keys under the test layout: indexed records (chats, checkpoints, user data), and
/// keys outside the prefix.
fn legacy_keys() -> Vec<String> {
    let chats = (0..20).map(|i| format!("mybot:chat:c{i}"));
    let checkpoints = (0..5).map(|i| format!("mybot:checkpoint:cp{i}"));
    let prefs = (0..3).map(|i| format!("mybot:user:u{i}:prefs:lang"));
    let outside = (0..6).map(|i| format!("other:{i}"));
    chats
        .chain(checkpoints)
        .chain(prefs)
        .chain(outside)
        .collect()
}

#[test]
fn under_a_layout_dbsize_counts_the_legacy_keys_not_the_index_keys_and_marker() {
    let cluster = Cluster::start(3, 0);
    let marker = "mybot:{meta}:layout";
    let node = cluster.node_for_slot(cluster.keyslot(marker));
    set_on(&node, marker, "cluster:v1");
    // A moved-fence left by a live migration: a record, never shown.
    let fence = String::from_utf8(fence_key(b"x").to_vec()).unwrap();
    let node = cluster.node_for_slot(cluster.keyslot(&fence));
    let _: () = query(&node, redis::cmd("HSET").arg(&fence).arg("x").arg("1")).unwrap();

    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let mut con = proxy.connect();
    let legacy = legacy_keys();
    for key in &legacy {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut con).unwrap();
    }
    let stored = raw_cluster_keys(&cluster);
    let index_keys = stored.iter().filter(|k| k.ends_with(":idx")).count();
    assert!(
        index_keys >= 3,
        "indexed records must have index keys: {stored:?}"
    );
    assert_eq!(stored.len(), legacy.len() + index_keys + 2, "{stored:?}");

    assert_eq!(dbsize(&mut con), legacy.len(), "client-visible keys only");
    let listed = keys(&mut con, "*");
    assert_eq!(listed.len(), legacy.len());
    assert_eq!(set_of(&listed), set_of(&legacy));
    let scanned = common::scan_with(&mut con, &["COUNT", "5"]);
    assert_no_record(&scanned, "SCAN under a layout");
    assert_eq!(set_of(&scanned), set_of(&legacy));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_migration_lists_both_sides_under_the_clients_names() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let legacy = legacy_keys();
    for key in &legacy {
        set_on(source.addr(), key, "v");
    }
    let m = mover(&source, &cluster).await;
    for key in legacy.iter().step_by(2) {
        m.run(&layout_spec(key)).await.unwrap();
    }
    let stored = raw_cluster_keys(&cluster);
    assert!(
        stored.iter().any(|k| k.ends_with(":idx")) && stored.iter().any(|k| k.contains("{ch:")),
        "moved records must be under cluster names with their indices: {stored:?}"
    );

    let proxy = live_proxy(&cluster, &source, true);
    let mut con = proxy.connect();
    assert_eq!(dbsize(&mut con), legacy.len());
    let listed = keys(&mut con, "*");
    assert_eq!(listed.len(), legacy.len(), "each key once: {listed:?}");
    assert_eq!(set_of(&listed), set_of(&legacy));

    // The chats' listing is served from their indices on the target: the source's chats
    // are added to it.
    let chats: Vec<String> = legacy
        .iter()
        .filter(|k| k.starts_with("mybot:chat:"))
        .cloned()
        .collect();
    assert_eq!(set_of(&keys(&mut con, "mybot:chat:*")), set_of(&chats));
    let scanned_chats = common::scan_with(&mut con, &["MATCH", "mybot:chat:*"]);
    assert_eq!(set_of(&scanned_chats), set_of(&chats));
    let scanned = common::scan_with(&mut con, &["COUNT", "4"]);
    assert_no_record(&scanned, "SCAN during a layout migration");
    assert_eq!(set_of(&scanned), set_of(&legacy));
    let drawn = set_of(&random_keys(&mut con, 30));
    assert!(
        drawn.is_subset(&set_of(&legacy)),
        "legacy names only: {drawn:?}"
    );
}
