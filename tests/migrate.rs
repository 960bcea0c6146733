//! `slotbridge migrate` against real servers: a legacy keyspace of every family, built with
//! plain commands on a single node, copied to a 3-master cluster and back.
//!
//! Expected cluster:v1 names come from LAYOUT.md's table (buckets from an FNV-1a written
//! here), never from the code under test. Each test uses its own prefix on the shared
//! cluster, and its own standalone server.

mod common;

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use common::{
    bucket, keys_on, migrate, migrate_ok, migrate_to_cluster, query, shared_cluster, slotbridge,
    to_cluster_args, url, write_plain, Standalone,
};

// ---- helpers ---------------------------------------------------------------------------

/// A number in the JSON report: `"family":{..."field":N` (the report is one line).
fn json_count(json: &str, family: &str, field: &str) -> u64 {
    let start = json
        .find(&format!("\"{family}\":{{"))
        .unwrap_or_else(|| panic!("no family {family} in {json}"));
    let object = &json[start..start + json[start..].find('}').expect("object end")];
    let at = object
        .find(&format!("\"{field}\":"))
        .unwrap_or_else(|| panic!("no {field} in {object}"));
    object[at + field.len() + 3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

fn total(json: &str, field: &str) -> u64 {
    let families = &json[json.find("\"families\":{").expect("families")..];
    families
        .match_indices(&format!("\"{field}\":"))
        .map(|(at, m)| {
            families[at + m.len()..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

fn masters() -> Vec<String> {
    shared_cluster().masters()
}

/// Runs `command` on the master serving `key`.
fn on_cluster<T: redis::FromRedisValue>(key: &str, command: &redis::Cmd) -> T {
    let cluster = shared_cluster();
    let node = cluster.node_for_slot(cluster.keyslot(key));
    query(&node, command).unwrap_or_else(|e| panic!("{e}"))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

// ---- the fixture -----------------------------------------------------------------------

/// Builds a legacy keyspace of every family under `p` on `node` with plain commands.
fn legacy_fixture(node: &str, p: &str) {
    write_plain(
        node,
        p,
        &[
            &["HSET", "{p}:chat:chat-1", "title", "one"],
            &["SET", "{p}:chat:a:b{c}", "odd id"],
            &["SET", "{p}:contact:u1", "contact"],
            &["SET", "{p}:checkpoint:c2", "cp", "PX", "600000"],
            &["SET", "{p}:schedule:s1", "sched"],
            &["SET", "{p}:user:u1:prefs:lang", "es", "PX", "300000"],
            &["SET", "{p}:lock:team:ops", "holder", "PX", "200000"],
            &["SET", "{p}:fence:team:ops", "7"],
            &["SET", "{p}:co:leader:sched", "node-a", "PX", "100000"],
            &["SET", "{p}:co:leader:sched:term", "3"],
            &["SET", "{p}:co:turn:chat-1:seq", "5"],
            &["SET", "{p}:co:turn:chat-1:tix", "5"],
            &["SET", "{p}:co:turn:chat-1:serving", "5"],
            &["ZADD", "{p}:msgs:chat-1", "1", "m1", "2", "m2", "3", "x:m3"],
            &["SET", "{p}:msg:chat-1:m1", "hello"],
            &["SET", "{p}:msg:chat-1:m2", "world", "PX", "400000"],
            // Listed by chat-1's log, but its name is an item of chat `chat-1:x`: skipped.
            &["SET", "{p}:msg:chat-1:x:m3", "elsewhere"],
            // Listed by no log: an orphan.
            &["SET", "{p}:msg:chat-1:m9", "orphan"],
            &["RPUSH", "{p}:conv:42", "a", "b"],
            &["SET", "{p}:{durable:outbox}:1", "job"],
            &["SET", "{p}:weird", "no rule"],
        ],
    );
}

/// (legacy key, cluster:v1 key) pairs the fixture's copyable keys map to, from LAYOUT.md.
fn expected_pairs(p: &str) -> Vec<(String, String)> {
    let ct = bucket("u1");
    let sc = bucket("s1");
    assert_eq!(bucket("chat-1"), 25, "LAYOUT.md's test vector");
    vec![
        (
            format!("{p}:chat:chat-1"),
            format!("{p}:{{ch:25}}:r:chat-1"),
        ),
        (
            format!("{p}:chat:a:b{{c}}"),
            format!("{p}:{{ch:{}}}:r:a%3Ab%7Bc%7D", bucket("a:b{c}")),
        ),
        (format!("{p}:contact:u1"), format!("{p}:{{ct:{ct}}}:r:u1")),
        (format!("{p}:checkpoint:c2"), format!("{p}:{{cp:0}}:r:c2")),
        (format!("{p}:schedule:s1"), format!("{p}:{{sc:{sc}}}:r:s1")),
        (
            format!("{p}:user:u1:prefs:lang"),
            format!("{p}:{{ud:u1}}:e:prefs:lang"),
        ),
        (
            format!("{p}:lock:team:ops"),
            format!("{p}:{{lk:team%3Aops}}:l"),
        ),
        (
            format!("{p}:fence:team:ops"),
            format!("{p}:{{lk:team%3Aops}}:f"),
        ),
        (
            format!("{p}:co:leader:sched"),
            format!("{p}:co:{{ld:sched}}"),
        ),
        (
            format!("{p}:co:leader:sched:term"),
            format!("{p}:co:{{ld:sched}}:term"),
        ),
        (format!("{p}:msgs:chat-1"), format!("{p}:{{m:chat-1}}:z")),
        (
            format!("{p}:msg:chat-1:m1"),
            format!("{p}:{{m:chat-1}}:i:m1"),
        ),
        (
            format!("{p}:msg:chat-1:m2"),
            format!("{p}:{{m:chat-1}}:i:m2"),
        ),
        (format!("{p}:conv:42"), format!("{p}:conv:42")),
        (
            format!("{p}:{{durable:outbox}}:1"),
            format!("{p}:{{durable:outbox}}:1"),
        ),
    ]
}

/// (index key, member, record key) the migration must leave on the cluster.
fn expected_index_entries(p: &str) -> Vec<(String, String, String)> {
    let odd = bucket("a:b{c}");
    let ct = bucket("u1");
    let sc = bucket("s1");
    vec![
        (
            format!("{p}:{{ch:25}}:idx"),
            "chat-1".into(),
            format!("{p}:{{ch:25}}:r:chat-1"),
        ),
        (
            format!("{p}:{{ch:{odd}}}:idx"),
            "a%3Ab%7Bc%7D".into(),
            format!("{p}:{{ch:{odd}}}:r:a%3Ab%7Bc%7D"),
        ),
        (
            format!("{p}:{{ct:{ct}}}:idx"),
            "u1".into(),
            format!("{p}:{{ct:{ct}}}:r:u1"),
        ),
        (
            format!("{p}:{{cp:0}}:idx"),
            "c2".into(),
            format!("{p}:{{cp:0}}:r:c2"),
        ),
        (
            format!("{p}:{{sc:{sc}}}:idx"),
            "s1".into(),
            format!("{p}:{{sc:{sc}}}:r:s1"),
        ),
        (
            format!("{p}:{{ud:u1}}:idx"),
            "prefs:lang".into(),
            format!("{p}:{{ud:u1}}:e:prefs:lang"),
        ),
    ]
}

/// The complete key set the cluster must hold for prefix `p` after a full pass.
fn expected_cluster_keys(p: &str) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = expected_pairs(p).into_iter().map(|(_, c)| c).collect();
    keys.extend(expected_index_entries(p).into_iter().map(|(idx, _, _)| idx));
    keys.insert(format!("{p}:{{meta}}:layout"));
    keys
}

/// Checks the cluster against the source node: key set, values, TTLs, indices, marker.
fn assert_cluster_matches_source(source: &str, p: &str) {
    let found = keys_on(&masters(), p);
    assert_eq!(found, expected_cluster_keys(p), "cluster key set of {p}");
    for (legacy, cluster_key) in expected_pairs(p) {
        let source_dump: Vec<u8> = query(source, cmd("DUMP").arg(&legacy)).expect("DUMP");
        let target_dump: Vec<u8> = on_cluster(&cluster_key, cmd("DUMP").arg(&cluster_key));
        assert_eq!(source_dump, target_dump, "value of {cluster_key}");
        let source_ttl: i64 = query(source, cmd("PTTL").arg(&legacy)).expect("PTTL");
        let target_ttl: i64 = on_cluster(&cluster_key, cmd("PTTL").arg(&cluster_key));
        if source_ttl < 0 {
            assert_eq!(target_ttl, -1, "{cluster_key} persistent");
        } else {
            assert!(
                (source_ttl - target_ttl).abs() <= 1000,
                "{cluster_key}: ttl {source_ttl} vs {target_ttl}"
            );
        }
    }
    for (index, member, record) in expected_index_entries(p) {
        let members: Vec<String> = on_cluster(&index, cmd("ZRANGE").arg(&index).arg(0).arg(-1));
        assert_eq!(members, vec![member.clone()], "members of {index}");
        let score: String = on_cluster(&index, cmd("ZSCORE").arg(&index).arg(&member));
        let expiry: i64 = on_cluster(&record, cmd("PEXPIRETIME").arg(&record));
        if expiry < 0 {
            assert_eq!(score, "inf", "{index} {member}");
        } else {
            let score: f64 = score.parse().expect("score");
            assert_eq!(score as i64, expiry, "{index} {member} scores the expiry");
            assert!(expiry > now_ms(), "expiry in the future");
        }
    }
    let marker_key = format!("{p}:{{meta}}:layout");
    let marker: Option<String> = on_cluster(&marker_key, cmd("GET").arg(&marker_key));
    assert_eq!(marker.as_deref(), Some("cluster:v1"));
}

/// The JSON report of a first complete pass over [`legacy_fixture`] to the cluster.
fn assert_fixture_report(json: &str) {
    assert_eq!(json_count(json, "msg", "orphans"), 2, "m9 and x:m3: {json}");
    assert_eq!(json_count(json, "msg", "copied"), 2, "{json}");
    assert_eq!(json_count(json, "turn", "skipped"), 3, "{json}");
    assert_eq!(json_count(json, "chat", "copied"), 2, "{json}");
    assert!(json.contains("\"unmatched\":1"), "{json}");
    assert!(json.contains("\"marker\":\"written\""), "{json}");
    assert_eq!(total(json, "errors"), 0, "{json}");
}

// ---- tests -----------------------------------------------------------------------------

#[test]
fn legacy_node_to_cluster_then_a_second_run_copies_nothing() {
    let node = Standalone::start();
    let p = "mfull";
    legacy_fixture(node.addr(), p);
    let seeds = shared_cluster().seeds_arg();
    let json = migrate_to_cluster(node.addr(), &seeds, p, &["--json"]);
    assert_cluster_matches_source(node.addr(), p);
    assert_fixture_report(&json);
    // The source is untouched without --delete-source.
    let source_keys = keys_on(&[node.addr().to_owned()], p);
    assert_eq!(source_keys.len(), 21, "{source_keys:?}");

    let again = migrate_to_cluster(node.addr(), &seeds, p, &["--json"]);
    assert_eq!(total(&again, "copied"), 0, "second run: {again}");
    assert_eq!(total(&again, "overwritten"), 0, "second run: {again}");
    assert_cluster_matches_source(node.addr(), p);
}

#[test]
fn dry_run_writes_nothing() {
    let node = Standalone::start();
    let p = "mdry";
    legacy_fixture(node.addr(), p);
    let json = migrate_to_cluster(
        node.addr(),
        &shared_cluster().seeds_arg(),
        p,
        &["--dry-run", "--json"],
    );
    assert!(
        keys_on(&masters(), p).is_empty(),
        "dry run wrote to the cluster"
    );
    assert_eq!(json_count(&json, "chat", "copied"), 2, "would copy: {json}");
    assert!(json.contains("\"dry_run\":true"));
    // In place too.
    let before = keys_on(&[node.addr().to_owned()], p);
    migrate_ok(&["--source", &url(node.addr()), "--prefix", p, "--dry-run"]);
    assert_eq!(keys_on(&[node.addr().to_owned()], p), before);
}

#[test]
fn a_run_stopped_half_way_finishes_on_the_next_run() {
    let node = Standalone::start();
    let p = "mhalf";
    legacy_fixture(node.addr(), p);
    let seeds = shared_cluster().seeds_arg();
    let owned = to_cluster_args(node.addr(), &seeds, p);
    let mut base: Vec<&str> = owned.iter().map(String::as_str).collect();
    base.push("--json");
    let mut first = base.clone();
    first.extend(["--stop-after", "6"]);
    let (code, json) = migrate(&first);
    assert_eq!(code, 3, "stopped early: {json}");
    assert!(json.contains("\"interrupted\":true"), "{json}");
    let partial = keys_on(&masters(), p);
    assert!(
        !partial.is_empty() && !partial.contains(&format!("{p}:{{meta}}:layout")),
        "{partial:?}"
    );
    let rest = migrate_ok(&base);
    assert!(total(&rest, "copied") > 0);
    assert_cluster_matches_source(node.addr(), p);
}

#[test]
fn fences_and_terms_only_rise() {
    let node = Standalone::start();
    let p = "mfence";
    legacy_fixture(node.addr(), p);
    let fence = format!("{p}:{{lk:team%3Aops}}:f");
    let term = format!("{p}:co:{{ld:sched}}:term");
    let _: () = on_cluster(&fence, cmd("SET").arg(&fence).arg(100));
    let _: () = on_cluster(&term, cmd("SET").arg(&term).arg(1));
    let json = migrate_to_cluster(node.addr(), &shared_cluster().seeds_arg(), p, &["--json"]);
    let fence_now: i64 = on_cluster(&fence, cmd("GET").arg(&fence));
    let term_now: i64 = on_cluster(&term, cmd("GET").arg(&term));
    assert_eq!(fence_now, 100, "a higher fence on the target stays");
    assert_eq!(term_now, 3, "a lower term is raised to the source's");
    assert_eq!(json_count(&json, "leader_term", "overwritten"), 1, "{json}");
    assert_eq!(json_count(&json, "fence", "skipped"), 1, "{json}");
    // --overwrite does not lower a fence either.
    migrate_to_cluster(
        node.addr(),
        &shared_cluster().seeds_arg(),
        p,
        &["--overwrite"],
    );
    let fence_now: i64 = on_cluster(&fence, cmd("GET").arg(&fence));
    assert_eq!(fence_now, 100);
}

#[test]
fn existing_target_keys_win_unless_overwrite() {
    let node = Standalone::start();
    let p = "mwin";
    legacy_fixture(node.addr(), p);
    let record = format!("{p}:{{ct:{}}}:r:u1", bucket("u1"));
    let _: () = on_cluster(&record, cmd("SET").arg(&record).arg("newer"));
    let seeds = shared_cluster().seeds_arg();
    migrate_to_cluster(node.addr(), &seeds, p, &[]);
    let value: String = on_cluster(&record, cmd("GET").arg(&record));
    assert_eq!(value, "newer");
    migrate_to_cluster(node.addr(), &seeds, p, &["--overwrite"]);
    let value: String = on_cluster(&record, cmd("GET").arg(&record));
    assert_eq!(value, "contact");
}

#[test]
fn include_copies_one_family_and_leaves_the_marker_unset() {
    let node = Standalone::start();
    let p = "minc";
    legacy_fixture(node.addr(), p);
    let json = migrate_to_cluster(
        node.addr(),
        &shared_cluster().seeds_arg(),
        p,
        &["--include", "chat", "--json"],
    );
    let odd = bucket("a:b{c}");
    let expected: BTreeSet<String> = [
        format!("{p}:{{ch:25}}:r:chat-1"),
        format!("{p}:{{ch:25}}:idx"),
        format!("{p}:{{ch:{odd}}}:r:a%3Ab%7Bc%7D"),
        format!("{p}:{{ch:{odd}}}:idx"),
    ]
    .into();
    assert_eq!(keys_on(&masters(), p), expected);
    assert!(json.contains("not written"), "{json}");
}

#[test]
fn in_place_migration_on_a_single_node() {
    let node = Standalone::start();
    let p = "mplace";
    legacy_fixture(node.addr(), p);
    let before = keys_on(&[node.addr().to_owned()], p);
    let json = migrate_ok(&["--source", &url(node.addr()), "--prefix", p, "--json"]);
    let after = keys_on(&[node.addr().to_owned()], p);
    // Unchanged names are not copied onto themselves; every other expected key appears.
    let mut expected = before.clone();
    expected.extend(expected_cluster_keys(p));
    assert_eq!(after, expected);
    assert_eq!(json_count(&json, "conv", "skipped"), 1, "{json}");
    // And --delete-source then removes the legacy names (not the shared unchanged ones).
    migrate_ok(&[
        "--source",
        &url(node.addr()),
        "--prefix",
        p,
        "--delete-source",
    ]);
    let left = keys_on(&[node.addr().to_owned()], p);
    for (legacy, cluster_key) in expected_pairs(p) {
        assert!(left.contains(&cluster_key), "{cluster_key} kept");
        if legacy != cluster_key {
            assert!(!left.contains(&legacy), "{legacy} deleted");
        }
    }
}

#[test]
fn refuses_while_coordinators_are_live_unless_allowed() {
    let node = Standalone::start();
    let p = "mlive";
    legacy_fixture(node.addr(), p);
    let seeds = shared_cluster().seeds_arg();
    let owned = to_cluster_args(node.addr(), &seeds, p);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    // A heartbeat: a turn owner key.
    let _: () = query(
        node.addr(),
        cmd("SET")
            .arg(format!("{p}:co:turn:chat-9:owner"))
            .arg("replica-1")
            .arg("EX")
            .arg(60),
    )
    .unwrap();
    let out = slotbridge(&[&["migrate"][..], &args[..]].concat());
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("chat-9:owner"));
    assert!(
        keys_on(&masters(), p).is_empty(),
        "refused run wrote nothing"
    );
    // A pending ticket: tix above serving.
    let _: () = query(
        node.addr(),
        cmd("DEL").arg(format!("{p}:co:turn:chat-9:owner")),
    )
    .unwrap();
    let _: () = query(
        node.addr(),
        cmd("SET").arg(format!("{p}:co:turn:chat-1:tix")).arg(6),
    )
    .unwrap();
    let (code, _) = migrate(&args);
    assert_eq!(code, 4, "pending ticket refuses");
    let mut allowed = args.to_vec();
    allowed.push("--allow-live");
    migrate_ok(&allowed);
    assert!(keys_on(&masters(), p).contains(&format!("{p}:{{meta}}:layout")));
}

#[test]
fn the_way_back_mirrors_the_cluster_onto_the_legacy_node() {
    let node = Standalone::start();
    let p = "mback";
    legacy_fixture(node.addr(), p);
    let seeds = shared_cluster().seeds_arg();
    migrate_to_cluster(node.addr(), &seeds, p, &[]);

    // New writes and deletions on the cluster, as the proxy's index upkeep would do them.
    let nb = bucket("new-chat");
    let new_record = format!("{p}:{{ch:{nb}}}:r:new-chat");
    let _: () = on_cluster(&new_record, cmd("SET").arg(&new_record).arg("fresh"));
    let new_index = format!("{p}:{{ch:{nb}}}:idx");
    let _: () = on_cluster(
        &new_index,
        cmd("ZADD").arg(&new_index).arg("+inf").arg("new-chat"),
    );
    let gone = format!("{p}:{{ch:25}}:r:chat-1");
    let _: () = on_cluster(&gone, cmd("DEL").arg(&gone));
    let _: () = on_cluster(
        &gone,
        cmd("ZREM").arg(format!("{p}:{{ch:25}}:idx")).arg("chat-1"),
    );
    let user = format!("{p}:{{ud:u1}}:e:prefs:lang");
    let _: () = on_cluster(&user, cmd("SET").arg(&user).arg("en").arg("KEEPTTL"));
    let fence = format!("{p}:{{lk:team%3Aops}}:f");
    let _: () = on_cluster(&fence, cmd("SET").arg(&fence).arg(50));
    let item = format!("{p}:{{m:chat-1}}:i:m1");
    let _: () = on_cluster(&item, cmd("DEL").arg(&item));

    let first_master = masters()[0].clone();
    let json = migrate_ok(&[
        "--source",
        &url(&first_master),
        "--target",
        &url(node.addr()),
        "--prefix",
        p,
        "--direction",
        "cluster-to-legacy",
        "--json",
    ]);
    let get = |key: String| -> Option<String> { query(node.addr(), cmd("GET").arg(key)).unwrap() };
    assert_eq!(get(format!("{p}:chat:new-chat")).as_deref(), Some("fresh"));
    let exists: i64 = query(node.addr(), cmd("EXISTS").arg(format!("{p}:chat:chat-1"))).unwrap();
    assert_eq!(
        exists, 0,
        "deleted on the cluster, pruned on the legacy node"
    );
    let exists: i64 = query(node.addr(), cmd("EXISTS").arg(format!("{p}:msg:chat-1:m1"))).unwrap();
    assert_eq!(exists, 0, "deleted item pruned");
    assert_eq!(
        get(format!("{p}:user:u1:prefs:lang")).as_deref(),
        Some("en")
    );
    let ttl: i64 = query(
        node.addr(),
        cmd("PTTL").arg(format!("{p}:user:u1:prefs:lang")),
    )
    .unwrap();
    assert!(ttl > 0 && ttl <= 300_000, "TTL kept: {ttl}");
    assert_eq!(get(format!("{p}:fence:team:ops")).as_deref(), Some("50"));
    assert_eq!(get(format!("{p}:chat:a:b{{c}}")).as_deref(), Some("odd id"));
    assert!(json_count(&json, "chat", "pruned") == 1, "{json}");
    assert!(json.contains("\"marker\":\"removed\""), "{json}");
    let marker_key = format!("{p}:{{meta}}:layout");
    let marker: Option<String> = on_cluster(&marker_key, cmd("GET").arg(&marker_key));
    assert_eq!(marker, None, "marker removed");
    // No cluster:v1 name leaked onto the legacy node, and turn counters were left alone.
    for key in keys_on(&[node.addr().to_owned()], p) {
        assert!(
            !key.contains("{ch:") && !key.contains("{m:") && !key.contains("{meta}"),
            "{key}"
        );
    }
    let seq: Option<String> = get(format!("{p}:co:turn:chat-1:seq"));
    assert_eq!(seq.as_deref(), Some("5"));
}

#[test]
fn throughput_on_100000_mixed_keys() {
    let node = Standalone::start();
    let p = "mbench";
    let mut con = common::connect(node.addr());
    let started = Instant::now();
    for chunk in 0..20 {
        let mut pipe = redis::pipe();
        for i in chunk * 5000..(chunk + 1) * 5000 {
            match i % 5 {
                0 => pipe.cmd("SET").arg(format!("{p}:chat:c{i}")).arg("x"),
                1 => pipe
                    .cmd("SET")
                    .arg(format!("{p}:checkpoint:k{i}"))
                    .arg("x")
                    .arg("PX")
                    .arg(600_000),
                2 => pipe
                    .cmd("SET")
                    .arg(format!("{p}:user:u{}:ns:k{i}", i % 100))
                    .arg("x"),
                3 => pipe.cmd("SET").arg(format!("{p}:lock:l{i}")).arg("x"),
                _ => pipe.cmd("SET").arg(format!("{p}:conv:{i}")).arg("x"),
            }
            .ignore();
        }
        pipe.query::<()>(&mut con).expect("bench fixture");
    }
    eprintln!("fixture: {:?}", started.elapsed());
    let json = migrate_to_cluster(node.addr(), &shared_cluster().seeds_arg(), p, &["--json"]);
    assert_eq!(total(&json, "copied"), 100_000, "{json}");
    let rate: f64 = json
        .split("\"keys_per_second\":")
        .nth(1)
        .and_then(|s| s.trim_end_matches(['}', '\n']).parse().ok())
        .expect("keys_per_second");
    eprintln!("migrate: 100000 mixed keys at {rate:.0} keys/s");
    assert!(rate > 0.0);
}

#[test]
fn one_key_per_page_gives_the_same_pass_both_ways() {
    // Names are held one SCAN page at a time: logs and the items they list, orphans and
    // the pruning of the way back all span pages here.
    let node = Standalone::start();
    let p = "mpage";
    legacy_fixture(node.addr(), p);
    let seeds = shared_cluster().seeds_arg();
    let json = migrate_to_cluster(node.addr(), &seeds, p, &["--json", "--batch-size", "1"]);
    assert_cluster_matches_source(node.addr(), p);
    assert_fixture_report(&json);

    // The way back onto a legacy node holding a record the cluster does not have.
    let back = Standalone::start();
    let stale = format!("{p}:chat:stale");
    let _: () = query(back.addr(), cmd("SET").arg(&stale).arg("old")).unwrap();
    let json = migrate_ok(&[
        "--source",
        &url(&masters()[0]),
        "--target",
        &url(back.addr()),
        "--prefix",
        p,
        "--direction",
        "cluster-to-legacy",
        "--batch-size",
        "1",
        "--json",
    ]);
    assert_eq!(total(&json, "errors"), 0, "{json}");
    assert_eq!(json_count(&json, "chat", "pruned"), 1, "{json}");
    let exists: i64 = query(back.addr(), cmd("EXISTS").arg(&stale)).unwrap();
    assert_eq!(exists, 0, "pruned");
    for (legacy, _) in expected_pairs(p) {
        let original: Vec<u8> = query(node.addr(), cmd("DUMP").arg(&legacy)).expect("DUMP");
        let returned: Vec<u8> = query(back.addr(), cmd("DUMP").arg(&legacy)).expect("DUMP");
        assert_eq!(original, returned, "{legacy} came back");
    }
    assert!(json.contains("\"marker\":\"removed\""), "{json}");
}
