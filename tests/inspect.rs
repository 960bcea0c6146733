//! `slotbridge inspect` on a single node and on a 3-master cluster: counts per layout and
//! family, the marker, live coordinators. Expected counts come from the fixture written here.

mod common;

use std::process::Command;

use common::{query, shared_cluster, Standalone};

fn slotbridge(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run slotbridge");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn inspect(addr: &str, prefix: &str) -> String {
    let (code, text) = slotbridge(&[
        "inspect",
        "--source",
        &format!("redis://{addr}"),
        "--prefix",
        prefix,
    ]);
    assert_eq!(code, 0, "{text}");
    text
}

/// The number after `label` on the line that starts with it (after indentation), within
/// the section that starts with `section`.
fn count(text: &str, section: &str, label: &str) -> u64 {
    let body = &text[text
        .find(section)
        .unwrap_or_else(|| panic!("no {section} in {text}"))..];
    body.lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            (parts.next() == Some(label)).then(|| parts.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

fn fixture(addr: &str, p: &str) {
    let mut con = common::connect(addr);
    let mut pipe = redis::pipe();
    for key in [
        format!("{p}:chat:c1"),
        format!("{p}:chat:c2"),
        format!("{p}:checkpoint:k"),
        format!("{p}:msg:c1:m1"),
        format!("{p}:conv:1"),
        format!("{p}:nothing"),
        format!("{p}:co:turn:c1:seq"),
        "other:chat:1".to_owned(),
    ] {
        pipe.cmd("SET").arg(key).arg("v").ignore();
    }
    pipe.cmd("ZADD")
        .arg(format!("{p}:msgs:c1"))
        .arg(1)
        .arg("m1")
        .ignore();
    pipe.query::<()>(&mut con).expect("fixture");
}

#[test]
fn a_legacy_single_node_then_the_cluster_it_was_migrated_to() {
    let node = Standalone::start();
    let p = "insp";
    fixture(node.addr(), p);
    let text = inspect(node.addr(), p);
    assert!(text.contains("single node"), "{text}");
    assert!(text.contains("legacy: 6 keys"), "{text}");
    assert_eq!(count(&text, "legacy:", "chat"), 2, "{text}");
    assert_eq!(count(&text, "legacy:", "turn"), 1, "{text}");
    assert_eq!(count(&text, "legacy:", "msgs"), 1, "{text}");
    assert!(text.contains("unchanged: 1 keys"), "{text}");
    assert!(text.contains("unmatched: 1 keys"), "{text}");
    assert!(text.contains("cluster:v1: 0 keys"), "{text}");
    assert!(text.contains("marker: (not set)"), "{text}");
    assert!(text.contains("live coordination: none"), "{text}");

    // A heartbeat and a pending ticket show up as live coordination.
    let _: () = query(
        node.addr(),
        redis::cmd("SET")
            .arg(format!("{p}:co:turn:c1:owner"))
            .arg("r1"),
    )
    .unwrap();
    let _: () = query(
        node.addr(),
        redis::cmd("SET").arg(format!("{p}:co:turn:c2:tix")).arg(4),
    )
    .unwrap();
    let _: () = query(
        node.addr(),
        redis::cmd("SET")
            .arg(format!("{p}:co:turn:c2:serving"))
            .arg(3),
    )
    .unwrap();
    let text = inspect(node.addr(), p);
    assert!(text.contains("live coordination: 2"), "{text}");
    assert!(
        text.contains("heartbeat insp:co:turn:c1:owner (owner r1)"),
        "{text}"
    );
    assert!(
        text.contains("pending tickets insp:co:turn:c2:tix (tix 4 > serving 3)"),
        "{text}"
    );

    let cluster = shared_cluster();
    let (code, out) = slotbridge(&[
        "migrate",
        "--source",
        &format!("redis://{}", node.addr()),
        "--cluster",
        &cluster.seeds_arg(),
        "--prefix",
        p,
        "--allow-live",
    ]);
    assert_eq!(code, 0, "{out}");
    // Any master will do: inspect walks them all.
    let text = inspect(&cluster.masters()[2], p);
    assert!(text.contains("cluster ("), "{text}");
    assert_eq!(count(&text, "cluster:v1:", "chat"), 2, "{text}");
    assert_eq!(count(&text, "cluster:v1:", "checkpoint"), 1, "{text}");
    assert_eq!(count(&text, "cluster:v1:", "msg"), 1, "{text}");
    assert_eq!(count(&text, "cluster:v1:", "msgs"), 1, "{text}");
    // Indices: c1 and c2 fall in chat buckets 25 and 0 (FNV-1a mod 32), k in checkpoint bucket 10.
    assert_eq!(count(&text, "cluster:v1:", "index"), 3, "{text}");
    assert_eq!(count(&text, "cluster:v1:", "marker"), 1, "{text}");
    assert!(
        text.contains("unchanged: 1 keys"),
        "conv copied to another server: {text}"
    );
    assert!(text.contains("legacy: 0 keys"), "{text}");
    assert!(text.contains("marker: cluster:v1"), "{text}");
}
