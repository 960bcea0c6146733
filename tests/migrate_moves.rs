//! `slotbridge migrate` when the target cluster is not where the first seed says: seeds that
//! do not answer are skipped, and a slot moved in the middle of a run is followed (slot map
//! re-read, batch retried) instead of failing the run; on a cluster source such a run is
//! reported unfinished, and the next completes it. The `--json` report is checked with a
//! real JSON parser.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{
    bucket, free_port, keys_on, migrate_to_cluster, shared_cluster, write_plain, Cluster,
    Standalone,
};
use slotbridge::migrate::{self, Direction, MigrateOptions, RedisUrl};

/// Whether `text` parses as one JSON document (Python's parser, not the code under test).
fn is_valid_json(text: &str) -> bool {
    let mut child = Command::new("python3")
        .args(["-c", "import json,sys; json.load(sys.stdin)"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("python3 is needed to check the JSON report");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write JSON");
    child.wait().expect("python3").success()
}

#[test]
fn a_dead_first_seed_is_skipped_and_the_json_report_parses() {
    let node = Standalone::start();
    let p = "mseed";
    write_plain(
        node.addr(),
        p,
        &[
            &["SET", "{p}:contact:u1", "contact"],
            &["ZADD", "{p}:msgs:chat-1", "1", "m1"],
            &["SET", "{p}:msg:chat-1:m1", "hello"],
            // No log lists it: an orphan, whose name (quote, backslash) lands in the report.
            &["SET", "{p}:msg:chat-1:q\"\\x", "orphan"],
        ],
    );
    let seeds = format!("127.0.0.1:{},{}", free_port(), shared_cluster().seeds_arg());
    let json = migrate_to_cluster(node.addr(), &seeds, p, &["--json"]);
    assert!(is_valid_json(&json), "not JSON: {json}");
    assert!(json.contains("\"marker\":\"written\""), "{json}");
    let found = keys_on(&shared_cluster().masters(), p);
    assert!(
        found.contains(&format!("{p}:{{m:chat-1}}:i:m1")),
        "{found:?}"
    );
    assert!(found.contains(&format!("{p}:{{meta}}:layout")), "{found:?}");
}

/// A master other than the one that owns `slot` now.
fn another_master(cluster: &Cluster, slot: u16) -> String {
    let owner = cluster.node_for_slot(slot);
    cluster
        .masters()
        .into_iter()
        .find(|m| *m != owner)
        .expect("another master")
}

/// The slot of the copy's records moves after the first batch, and the marker's slot after
/// the last one (before the marker is written): both are followed.
#[test]
fn slots_moved_during_the_copy_and_before_the_marker_are_followed() {
    let cluster = Cluster::start(3, 0);
    let node = Standalone::start();
    let p = "mmove";
    // Checkpoints whose id falls in bucket 0 (LAYOUT.md's FNV-1a) all live, with their
    // index, in the slot of `{cp:0}`, so moving that one slot after the first batch
    // redirects the rest of the copy.
    let ids: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|id| bucket(id) == 0)
        .take(2500)
        .collect();
    let commands: Vec<Vec<String>> = ids
        .iter()
        .map(|id| vec!["SET".into(), format!("{{p}}:checkpoint:{id}"), "v".into()])
        .collect();
    let borrowed: Vec<Vec<&str>> = commands
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    let table: Vec<&[&str]> = borrowed.iter().map(Vec::as_slice).collect();
    write_plain(node.addr(), p, &table);

    let slot = cluster.keyslot(&format!("{p}:{{cp:0}}:idx"));
    let other = another_master(&cluster, slot);
    let url = |addr: &str| RedisUrl::parse(&format!("redis://{addr}"), None, None).unwrap();
    let options = MigrateOptions {
        source: url(node.addr()),
        target: Some(url(&cluster.seeds()[0])),
        target_seeds: Vec::new(),
        prefix: p.to_owned(),
        layout: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/botmesh-cluster-v1.yaml"
        )
        .into(),
        dry_run: false,
        overwrite: false,
        delete_source: false,
        include: Vec::new(),
        allow_live: false,
        direction: Direction::LegacyToCluster,
        mirror: true,
        stop_after: None,
        batch_size: migrate::BATCH,
    };
    let marker_slot = cluster.keyslot(&format!("{p}:{{meta}}:layout"));
    let marker_other = another_master(&cluster, marker_slot);
    let mut batches = 0;
    let mut progress = |at: migrate::Progress| {
        batches += 1;
        if batches == 1 {
            cluster.migrate_slot(slot, &other);
        }
        if at.done == at.total {
            cluster.migrate_slot(marker_slot, &marker_other);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let report = runtime
        .block_on(migrate::migrate(&options, &mut progress))
        .expect("the run finishes");
    assert!(batches >= 3, "2500 keys take several batches");
    assert_eq!(cluster.node_for_slot(slot), other, "the slot did move");
    assert_eq!(
        cluster.node_for_slot(marker_slot),
        marker_other,
        "the marker's slot did move"
    );
    assert_eq!(report.totals().errors, 0, "{}", report.to_json());
    assert_eq!(report.totals().copied, 2500, "{}", report.to_json());
    assert!(report.to_json().contains("\"marker\":\"written\""));
    let found = keys_on(&cluster.masters(), p);
    for id in [&ids[0], &ids[999], &ids[1000], &ids[2499]] {
        assert!(found.contains(&format!("{p}:{{cp:0}}:r:{id}")), "{id}");
    }
    assert_eq!(found.len(), 2500 + 2, "records, their index and the marker");

    // The way back reads the cluster. A slot that changes masters during its walk may take
    // keys to a master the walk has passed, so that pass is reported unfinished (exit 3 from
    // the command line) and the next run completes it.
    let legacy = Standalone::start();
    let back = MigrateOptions {
        source: url(&cluster.masters()[0]),
        target: Some(url(legacy.addr())),
        direction: Direction::ClusterToLegacy,
        ..options.clone()
    };
    let back_to = another_master(&cluster, slot);
    let mut moved = false;
    let mut move_once = |_: migrate::Progress| {
        if !moved {
            cluster.migrate_slot(slot, &back_to);
            moved = true;
        }
    };
    let first = runtime
        .block_on(migrate::migrate(&back, &mut move_once))
        .expect("the run finishes");
    assert_eq!(cluster.node_for_slot(slot), back_to, "the slot did move");
    assert!(first.interrupted, "{}", first.to_json());
    assert!(
        first.to_json().contains("slots of the source moved"),
        "{}",
        first.to_json()
    );
    let second = runtime
        .block_on(migrate::migrate(&back, &mut |_| {}))
        .expect("the second run finishes");
    assert!(!second.interrupted, "{}", second.to_json());
    assert!(second.to_json().contains("\"marker\":\"removed\""));
    let legacy_keys = keys_on(&[legacy.addr().to_owned()], p);
    assert_eq!(legacy_keys.len(), 2500, "every checkpoint came back");
}
