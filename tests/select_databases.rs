//! `SELECT n` through the proxy against a real 3-master cluster, with real clients: a
//! database other than 0 is the key prefix `__db<n>:` in the cluster, and a client sees the
//! keys of its database only: reads and writes, hash tags (still one slot), KEYS, SCAN,
//! DBSIZE, RANDOMKEY and FLUSHDB scoped to the database (database 0's too), MOVE and
//! COPY ... DB across databases, SWAPDB refused, MULTI/EXEC and scripts in the selected
//! database, key names in blocking pops and XREAD replies, and redis-py's `db=5`.
//!
//! Each test uses databases no other test of this binary uses; the test of database 0's
//! listings runs on a cluster of its own, whose keyspace only it writes.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{new_dir, query, shared_cluster, Cluster, Proxy, Raw, Standalone};

/// FLUSHDB and MOVE are refused by the default command policy.
const CONFIG: &str = "tests/config/databases.yaml";

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        Proxy::start(&[
            "--config",
            CONFIG,
            "--cluster",
            &shared_cluster().seeds_arg(),
        ])
    })
}

/// A configuration file holding `text`, as a path.
fn new_config(text: &str) -> String {
    let path = new_dir("databases-config").join("slotbridge.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// A connection to `proxy` in database `db` (the redis crate sends SELECT on connect).
fn connect_db(proxy: &Proxy, db: u32) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{}/{db}", proxy.addr())).unwrap();
    client.get_connection().expect("connect in a database")
}

/// The value of `key` read from its master directly (`None` when absent).
fn on_cluster(cluster: &Cluster, key: &str) -> Option<String> {
    let master = cluster.node_for_slot(cluster.keyslot(key));
    query(&master, redis::cmd("GET").arg(key)).expect("GET on the master")
}

fn sorted(keys: Vec<String>) -> BTreeSet<String> {
    keys.into_iter().collect()
}

fn scan_all(con: &mut redis::Connection, pattern: Option<&str>) -> BTreeSet<String> {
    let mut cursor = "0".to_string();
    let mut keys = BTreeSet::new();
    for _ in 0..10_000 {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor);
        if let Some(pattern) = pattern {
            cmd.arg("MATCH").arg(pattern);
        }
        let (next, page): (String, Vec<String>) = cmd.query(con).expect("SCAN");
        keys.extend(page);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
    panic!("SCAN did not end");
}

#[test]
fn select_out_of_range_answers_as_redis() {
    let mut con = proxy().connect();
    for index in ["16", "-1", "99999999999"] {
        let error = redis::cmd("SELECT")
            .arg(index)
            .query::<()>(&mut con)
            .unwrap_err();
        assert!(
            error.to_string().ends_with(": DB index is out of range"),
            "SELECT {index}: {error}"
        );
    }
    let error = redis::cmd("SELECT")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("not an integer"), "{error}");
    let _: () = redis::cmd("SELECT").arg(15).query(&mut con).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();
}

#[test]
fn a_database_sees_only_its_own_keys_and_stores_them_under_its_prefix() {
    let cluster = shared_cluster();
    let mut db0 = connect_db(proxy(), 0);
    let mut db3 = connect_db(proxy(), 3);
    let _: () = redis::cmd("SET")
        .arg("iso:k")
        .arg("three")
        .query(&mut db3)
        .unwrap();
    let seen: Option<String> = redis::cmd("GET").arg("iso:k").query(&mut db0).unwrap();
    assert_eq!(seen, None, "database 0 does not see database 3's key");
    let _: () = redis::cmd("SET")
        .arg("iso:k")
        .arg("zero")
        .query(&mut db0)
        .unwrap();
    let seen: String = redis::cmd("GET").arg("iso:k").query(&mut db3).unwrap();
    assert_eq!(seen, "three", "database 3 does not see database 0's key");
    assert_eq!(on_cluster(cluster, "__db3:iso:k").as_deref(), Some("three"));
    assert_eq!(
        on_cluster(cluster, "iso:k").as_deref(),
        Some("zero"),
        "database 0's names are the cluster's"
    );
    // SELECT on an open connection switches its keys, and CLIENT LIST shows it.
    let _: () = redis::cmd("SELECT").arg(3).query(&mut db0).unwrap();
    let seen: String = redis::cmd("GET").arg("iso:k").query(&mut db0).unwrap();
    assert_eq!(seen, "three");
    let me: String = redis::cmd("CLIENT").arg("INFO").query(&mut db0).unwrap();
    assert!(me.contains(" db=3 "), "{me}");
    // SORT's BY and GET patterns read the database's keys.
    for (key, value) in [
        ("{s}w_1", "2"),
        ("{s}w_2", "1"),
        ("{s}o_1", "one"),
        ("{s}o_2", "two"),
    ] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut db3)
            .unwrap();
    }
    let _: () = redis::cmd("RPUSH")
        .arg("{s}l")
        .arg(1)
        .arg(2)
        .query(&mut db3)
        .unwrap();
    let sorted: Vec<String> = redis::cmd("SORT")
        .arg("{s}l")
        .arg("BY")
        .arg("{s}w_*")
        .arg("GET")
        .arg("{s}o_*")
        .arg("GET")
        .arg("#")
        .query(&mut db3)
        .unwrap();
    assert_eq!(sorted, ["two", "2", "one", "1"]);
}

#[test]
fn hash_tags_keep_keys_of_a_database_in_one_slot() {
    let cluster = shared_cluster();
    let mut con = connect_db(proxy(), 4);
    let _: () = redis::cmd("MSET")
        .arg("{t}a")
        .arg("1")
        .arg("{t}b")
        .arg("2")
        .query(&mut con)
        .unwrap();
    let values: Vec<String> = redis::cmd("MGET")
        .arg("{t}a")
        .arg("{t}b")
        .query(&mut con)
        .unwrap();
    assert_eq!(values, ["1", "2"]);
    let slot = cluster.keyslot("{t}");
    assert_eq!(cluster.keyslot("__db4:{t}a"), slot);
    let master = cluster.node_for_slot(slot);
    let both: Vec<Option<String>> = query(
        &master,
        redis::cmd("MGET").arg("__db4:{t}a").arg("__db4:{t}b"),
    )
    .unwrap();
    assert_eq!(
        both,
        [Some("1".to_string()), Some("2".to_string())],
        "both on the tag's master"
    );
    // A same-slot multi-key write is native, so it is atomic: RENAME within the tag.
    let _: () = redis::cmd("RENAME")
        .arg("{t}a")
        .arg("{t}c")
        .query(&mut con)
        .unwrap();
    let moved: String = redis::cmd("GET").arg("{t}c").query(&mut con).unwrap();
    assert_eq!(moved, "1");
}

#[test]
fn keys_scan_dbsize_randomkey_and_flushdb_are_scoped_to_the_database() {
    let proxy = proxy();
    let mut db5 = connect_db(proxy, 5);
    let mut db6 = connect_db(proxy, 6);
    let mut db9 = connect_db(proxy, 9);
    let five: BTreeSet<String> = (0..40).map(|i| format!("s:{i}")).collect();
    for key in &five {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut db5).unwrap();
    }
    for key in ["s:1", "other"] {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut db6).unwrap();
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut db5).unwrap();
    assert_eq!(sorted(keys), five);
    let keys: Vec<String> = redis::cmd("KEYS").arg("s:1*").query(&mut db5).unwrap();
    let expected: BTreeSet<String> = five
        .iter()
        .filter(|k| k.starts_with("s:1"))
        .cloned()
        .collect();
    assert_eq!(sorted(keys), expected);
    assert_eq!(scan_all(&mut db5, None), five);
    assert_eq!(
        scan_all(&mut db5, Some("s:2?")),
        five.iter()
            .filter(|k| k.len() == 4 && k.starts_with("s:2"))
            .cloned()
            .collect()
    );
    let size: i64 = redis::cmd("DBSIZE").query(&mut db5).unwrap();
    assert_eq!(size, 40);
    let size: i64 = redis::cmd("DBSIZE").query(&mut db6).unwrap();
    assert_eq!(size, 2);
    let random: String = redis::cmd("RANDOMKEY").query(&mut db6).unwrap();
    assert!(random == "s:1" || random == "other", "{random}");
    let nothing: Option<String> = redis::cmd("RANDOMKEY").query(&mut db9).unwrap();
    assert_eq!(nothing, None, "an empty database has no random key");
    let size: i64 = redis::cmd("DBSIZE").query(&mut db9).unwrap();
    assert_eq!(size, 0);
    let _: () = redis::cmd("FLUSHDB").query(&mut db5).unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(&mut db5).unwrap();
    assert_eq!(size, 0, "FLUSHDB emptied database 5");
    let size: i64 = redis::cmd("DBSIZE").query(&mut db6).unwrap();
    assert_eq!(size, 2, "FLUSHDB left database 6 alone");
}

/// Database 0's listings leave the other databases' keys out; on a cluster of its own so
/// that the counts are exact.
#[test]
fn randomkey_in_database_zero_finds_its_one_key_among_many_of_another() {
    // Nearly every node draw names database 3's keys: the answer comes from the walk, which
    // must look at database 0's keys, not only at the other databases'.
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--config", CONFIG, "--cluster", &cluster.seeds_arg()]);
    let mut db0 = connect_db(&proxy, 0);
    let mut db3 = connect_db(&proxy, 3);
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("many:{i}"))
            .arg("v")
            .query(&mut db3)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("only")
        .arg("v")
        .query(&mut db0)
        .unwrap();
    for _ in 0..5 {
        let random: Option<String> = redis::cmd("RANDOMKEY").query(&mut db0).unwrap();
        assert_eq!(random.as_deref(), Some("only"));
    }
}

#[test]
fn database_zero_lists_counts_and_flushes_its_own_keys_only() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--config", CONFIG, "--cluster", &cluster.seeds_arg()]);
    let mut db0 = connect_db(&proxy, 0);
    let mut db2 = connect_db(&proxy, 2);
    let zero: BTreeSet<String> = (0..30).map(|i| format!("z:{i}")).collect();
    for key in &zero {
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut db0).unwrap();
    }
    for i in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("t:{i}"))
            .arg("v")
            .query(&mut db2)
            .unwrap();
    }
    let _: () = redis::cmd("EXPIRE")
        .arg("t:0")
        .arg(1000)
        .query(&mut db2)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut db0).unwrap();
    assert!(info.contains("db0:keys=30,expires=0,"), "{info}");
    assert!(info.contains("db2:keys=20,expires=1,avg_ttl="), "{info}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut db0).unwrap();
    assert_eq!(sorted(keys), zero);
    assert_eq!(scan_all(&mut db0, None), zero);
    let size: i64 = redis::cmd("DBSIZE").query(&mut db0).unwrap();
    assert_eq!(size, 30);
    for _ in 0..20 {
        let random: String = redis::cmd("RANDOMKEY").query(&mut db0).unwrap();
        assert!(
            zero.contains(&random),
            "RANDOMKEY in database 0 gave {random}"
        );
    }
    let _: () = redis::cmd("FLUSHDB").query(&mut db0).unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(&mut db0).unwrap();
    assert_eq!(size, 0);
    let size: i64 = redis::cmd("DBSIZE").query(&mut db2).unwrap();
    assert_eq!(size, 20, "database 0's FLUSHDB kept database 2");
    let on_masters: i64 = cluster
        .masters()
        .iter()
        .map(|m| query::<i64>(m, &redis::cmd("DBSIZE")).unwrap())
        .sum();
    // Database 2's keys and the in-use marker its SELECT wrote.
    assert_eq!(on_masters, 21);
}

/// SCAN calls the masters have served since they started.
fn scans_on(cluster: &Cluster) -> i64 {
    cluster
        .masters()
        .iter()
        .map(|master| {
            let stats: String = query(master, redis::cmd("INFO").arg("commandstats")).unwrap();
            stats
                .lines()
                .find_map(|line| line.strip_prefix("cmdstat_scan:calls="))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Whether the in-use marker is on its master.
fn marker_on(cluster: &Cluster) -> bool {
    let marker = "__db:in-use";
    let master = cluster.node_for_slot(cluster.keyslot(marker));
    query::<i64>(&master, redis::cmd("EXISTS").arg(marker)).unwrap() == 1
}

#[test]
fn database_zero_counts_without_a_walk_until_another_database_is_selected() {
    let cluster = Cluster::start(3, 0);
    let config = new_config("commands:\n  allow: [flushall]\n");
    let proxy = Proxy::start(&["--config", &config, "--cluster", &cluster.seeds_arg()]);
    let mut db0 = connect_db(&proxy, 0);
    for i in 0..10 {
        let _: () = redis::cmd("SET")
            .arg(format!("k:{i}"))
            .arg("v")
            .query(&mut db0)
            .unwrap();
    }
    // No client has left database 0: the cluster's own counts, no SCAN of the keyspace.
    let size: i64 = redis::cmd("DBSIZE").query(&mut db0).unwrap();
    assert_eq!(size, 10);
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut db0).unwrap();
    assert!(info.contains("db0:keys=10,expires=0,"), "{info}");
    assert_eq!(
        scans_on(&cluster),
        0,
        "database 0's counts walked the keyspace"
    );
    assert!(!marker_on(&cluster));
    // A SELECT of database 3 writes the marker before its +OK; from then on database 0's
    // counts leave out database 3's keys and the marker.
    let mut db3 = connect_db(&proxy, 3);
    assert!(marker_on(&cluster));
    let _: () = redis::cmd("SET")
        .arg("k:0")
        .arg("w")
        .query(&mut db3)
        .unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(&mut db0).unwrap();
    assert_eq!(size, 10);
    assert!(scans_on(&cluster) > 0);
    let info: String = redis::cmd("INFO").arg("keyspace").query(&mut db0).unwrap();
    assert!(info.contains("db0:keys=10,expires=0,"), "{info}");
    assert!(info.contains("db3:keys=1,expires=0,"), "{info}");
    // FLUSHALL deletes the marker with every key; a client of this proxy is still in
    // database 3, so it is written again.
    let _: () = redis::cmd("FLUSHALL").query(&mut db0).unwrap();
    assert!(marker_on(&cluster));
    let _: () = redis::cmd("SET")
        .arg("k:1")
        .arg("w")
        .query(&mut db3)
        .unwrap();
    let size: i64 = redis::cmd("DBSIZE").query(&mut db0).unwrap();
    assert_eq!(size, 0);
    let size: i64 = redis::cmd("DBSIZE").query(&mut db3).unwrap();
    assert_eq!(size, 1);
}

#[test]
fn move_and_copy_db_go_between_databases() {
    let mut db7 = connect_db(proxy(), 7);
    let mut db8 = connect_db(proxy(), 8);
    let mut db10 = connect_db(proxy(), 10);
    let _: () = redis::cmd("SET")
        .arg("mv")
        .arg("v")
        .query(&mut db7)
        .unwrap();
    let _: () = redis::cmd("EXPIRE")
        .arg("mv")
        .arg(1000)
        .query(&mut db7)
        .unwrap();
    let moved: i64 = redis::cmd("MOVE").arg("mv").arg(8).query(&mut db7).unwrap();
    assert_eq!(moved, 1);
    let gone: Option<String> = redis::cmd("GET").arg("mv").query(&mut db7).unwrap();
    assert_eq!(gone, None);
    let there: String = redis::cmd("GET").arg("mv").query(&mut db8).unwrap();
    assert_eq!(there, "v");
    let ttl: i64 = redis::cmd("TTL").arg("mv").query(&mut db8).unwrap();
    assert!(ttl > 900, "MOVE keeps the TTL ({ttl})");
    let error = redis::cmd("MOVE")
        .arg("mv")
        .arg(8)
        .query::<i64>(&mut db8)
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("source and destination objects are the same"),
        "{error}"
    );
    let error = redis::cmd("MOVE")
        .arg("mv")
        .arg(16)
        .query::<i64>(&mut db8)
        .unwrap_err();
    assert!(
        error.to_string().ends_with(": DB index is out of range"),
        "{error}"
    );
    // The target exists: nothing moves.
    let _: () = redis::cmd("SET")
        .arg("mv")
        .arg("again")
        .query(&mut db7)
        .unwrap();
    let moved: i64 = redis::cmd("MOVE").arg("mv").arg(8).query(&mut db7).unwrap();
    assert_eq!(moved, 0);
    let kept: String = redis::cmd("GET").arg("mv").query(&mut db7).unwrap();
    assert_eq!(kept, "again");

    let copied: i64 = redis::cmd("COPY")
        .arg("mv")
        .arg("cp")
        .arg("DB")
        .arg(10)
        .query(&mut db8)
        .unwrap();
    assert_eq!(copied, 1);
    let copy: String = redis::cmd("GET").arg("cp").query(&mut db10).unwrap();
    assert_eq!(copy, "v");
    let copied: i64 = redis::cmd("COPY")
        .arg("mv")
        .arg("cp")
        .arg("DB")
        .arg(10)
        .query(&mut db7)
        .unwrap();
    assert_eq!(copied, 0, "no REPLACE, the target exists");
    let copied: i64 = redis::cmd("COPY")
        .arg("mv")
        .arg("cp")
        .arg("DB")
        .arg(10)
        .arg("REPLACE")
        .query(&mut db7)
        .unwrap();
    assert_eq!(copied, 1);
    let copy: String = redis::cmd("GET").arg("cp").query(&mut db10).unwrap();
    assert_eq!(copy, "again");
    let error = redis::cmd("COPY")
        .arg("mv")
        .arg("cp")
        .arg("DB")
        .arg(16)
        .query::<i64>(&mut db7)
        .unwrap_err();
    assert!(
        error.to_string().ends_with(": DB index is out of range"),
        "{error}"
    );
}

#[test]
fn swapdb_is_refused_with_its_reason() {
    let mut con = proxy().connect();
    let error = redis::cmd("SWAPDB")
        .arg(0)
        .arg(1)
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(
        error.to_string().contains("SWAPDB is not supported"),
        "{error}"
    );
}

#[test]
fn multi_exec_and_scripts_run_in_the_selected_database() {
    let mut db11 = connect_db(proxy(), 11);
    let mut db0 = proxy().connect();
    let _: () = redis::cmd("MULTI").query(&mut db11).unwrap();
    for cmd in [
        redis::cmd("SET").arg("{tx}a").arg(1).clone(),
        redis::cmd("INCR").arg("{tx}a").clone(),
        redis::cmd("GET").arg("{tx}a").clone(),
    ] {
        let queued: String = cmd.query(&mut db11).unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let (set, incr, get): (String, i64, String) = redis::cmd("EXEC").query(&mut db11).unwrap();
    assert_eq!((set.as_str(), incr, get.as_str()), ("OK", 2, "2"));
    let outside: Option<String> = redis::cmd("GET").arg("{tx}a").query(&mut db0).unwrap();
    assert_eq!(outside, None);
    assert_eq!(
        on_cluster(shared_cluster(), "__db11:{tx}a").as_deref(),
        Some("2")
    );
    // SELECT of another database inside MULTI fails the transaction.
    let _: () = redis::cmd("MULTI").query(&mut db11).unwrap();
    let error = redis::cmd("SELECT")
        .arg(3)
        .query::<()>(&mut db11)
        .unwrap_err();
    assert!(error.to_string().contains("inside MULTI"), "{error}");
    let error = redis::cmd("EXEC").query::<()>(&mut db11).unwrap_err();
    assert_eq!(error.kind(), redis::ErrorKind::ExecAbortError, "{error}");
    // A script's declared keys are the database's.
    let value: String = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])")
        .arg(1)
        .arg("scripted")
        .arg("x")
        .query(&mut db11)
        .unwrap();
    assert_eq!(value, "x");
    assert_eq!(
        on_cluster(shared_cluster(), "__db11:scripted").as_deref(),
        Some("x")
    );
}

#[test]
fn replies_name_keys_in_the_clients_database() {
    let mut con = connect_db(proxy(), 12);
    let _: () = redis::cmd("RPUSH")
        .arg("{q}1")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .unwrap();
    let popped: (String, String) = redis::cmd("BLPOP")
        .arg("{q}0")
        .arg("{q}1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped, ("{q}1".to_string(), "a".to_string()));
    let popped: (String, Vec<String>) = redis::cmd("LMPOP")
        .arg(2)
        .arg("{q}0")
        .arg("{q}1")
        .arg("LEFT")
        .query(&mut con)
        .unwrap();
    assert_eq!(popped, ("{q}1".to_string(), vec!["b".to_string()]));
    let _: () = redis::cmd("ZADD")
        .arg("{z}1")
        .arg(1)
        .arg("m")
        .query(&mut con)
        .unwrap();
    let popped: (String, String, String) = redis::cmd("BZPOPMIN")
        .arg("{z}0")
        .arg("{z}1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped.0, "{z}1");
    let _: String = redis::cmd("XADD")
        .arg("st")
        .arg("1-1")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let read: redis::Value = redis::cmd("XREAD")
        .arg("STREAMS")
        .arg("st")
        .arg("0")
        .query(&mut con)
        .unwrap();
    let text = format!("{read:?}");
    assert!(text.contains("\"st\"") || text.contains("st"), "{text}");
    assert!(
        !text.contains("__db12"),
        "stream names shown without the prefix: {text}"
    );
}

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("SLOTBRIDGE_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(python);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-tests/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// redis-py's `Redis(db=5)` sends SELECT 5 on each new connection.
#[test]
fn redis_py_with_db_5_works_in_database_5() {
    let proxy = proxy();
    let (host, port) = proxy.addr().rsplit_once(':').unwrap();
    let script = format!(
        "import redis\n\
         r = redis.Redis(host='{host}', port={port}, db=5, decode_responses=True)\n\
         r.set('py:k', 'five')\n\
         assert r.get('py:k') == 'five'\n\
         assert r.connection_pool.connection_kwargs['db'] == 5\n\
         assert redis.Redis(host='{host}', port={port}, db=0).get('py:k') is None\n\
         print('ok')\n"
    );
    let output = Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python with redis-py ({e}); see tests/python_clients.rs")
        });
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == "ok",
        "redis-py: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        on_cluster(shared_cluster(), "__db5:py:k").as_deref(),
        Some("five")
    );
}

/// A key layout's rules name database 0's keys: SELECT n > 0 is refused under one.
#[test]
fn select_of_another_database_is_refused_under_a_key_layout() {
    let proxy = Proxy::start_with_layout(
        &shared_cluster().seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "mybot",
    );
    let mut con = proxy.connect();
    let error = redis::cmd("SELECT")
        .arg(1)
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("key layout"), "{error}");
    let _: () = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();
}

/// A proxy user's key patterns match the names the client sends, in any database.
#[test]
fn acl_key_patterns_see_the_names_the_client_sends() {
    let dir = common::new_dir("select-acl");
    let config = dir.join("users.yaml");
    std::fs::write(
        &config,
        "users:\n  - name: app\n    password: secret\n    state: on\n    commands: [\"+@all\"]\n    \
         keys: [\"~app:*\"]\n",
    )
    .unwrap();
    let proxy = Proxy::start(&[
        "--config",
        config.to_str().unwrap(),
        "--cluster",
        &shared_cluster().seeds_arg(),
    ]);
    let client = redis::Client::open(format!("redis://app:secret@{}/13", proxy.addr())).unwrap();
    let mut con = client.get_connection().expect("AUTH then SELECT 13");
    let _: () = redis::cmd("SET")
        .arg("app:1")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let value: String = redis::cmd("GET").arg("app:1").query(&mut con).unwrap();
    assert_eq!(value, "v");
    let _: () = redis::cmd("RPUSH")
        .arg("app:{l}")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let popped: (String, String) = redis::cmd("BLPOP")
        .arg("app:{l}")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped.0, "app:{l}");
    let error = redis::cmd("SET")
        .arg("other")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("NOPERM"), "{error}");
    assert_eq!(
        on_cluster(shared_cluster(), "__db13:app:1").as_deref(),
        Some("v")
    );
}

/// Keyspace notifications of database 14 come on `__keyspace@14__` and `__keyevent@14__`
/// with the client's names; database 0's writes to the same name are not among them.
#[test]
fn keyspace_notifications_name_the_database_and_its_keys() {
    for master in shared_cluster().masters() {
        let _: () = query(
            &master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("notify-keyspace-events")
                .arg("KEA"),
        )
        .unwrap();
    }
    let mut subscriber = proxy().connect();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("__keyspace@14__:n:k").unwrap();
    pubsub.psubscribe("__keyevent@14__:*").unwrap();
    let mut db14 = connect_db(proxy(), 14);
    let mut db0 = proxy().connect();
    let _: () = redis::cmd("SET")
        .arg("n:k")
        .arg("0")
        .query(&mut db0)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("n:k")
        .arg("14")
        .query(&mut db14)
        .unwrap();
    let _: () = redis::cmd("DEL").arg("n:k").query(&mut db14).unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_millis(1500)))
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        let payload: String = message.get_payload().unwrap();
        seen.push(format!("{} {payload}", message.get_channel_name()));
        if seen.len() > 10 {
            break;
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "__keyevent@14__:del n:k",
            "__keyevent@14__:set n:k",
            "__keyspace@14__:n:k del",
            "__keyspace@14__:n:k set",
        ]
    );
}

/// Under RESP3 the replies the database layer builds keep RESP3's types.
#[test]
fn resp3_replies_in_a_database_keep_their_types() {
    let mut raw = common::Raw::connect(proxy().addr());
    assert!(raw.call(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(raw.call(&["SELECT", "15"]), "+OK\r\n");
    assert_eq!(raw.call(&["SET", "r3:a", "1"]), "+OK\r\n");
    assert_eq!(raw.call(&["KEYS", "r3:*"]), "*1\r\n$4\r\nr3:a\r\n");
    assert_eq!(raw.call(&["RANDOMKEY"]), "$4\r\nr3:a\r\n");
    assert_eq!(raw.call(&["RPUSH", "{r3}l", "x"]), ":1\r\n");
    assert_eq!(
        raw.call(&["LMPOP", "1", "{r3}l", "LEFT"]),
        "*2\r\n$5\r\n{r3}l\r\n*1\r\n$1\r\nx\r\n"
    );
    assert_eq!(raw.call(&["LMPOP", "1", "{r3}l", "LEFT"]), "_\r\n");
    assert!(raw.call(&["INFO", "keyspace"]).starts_with('='));
    assert_eq!(raw.call(&["SELECT", "14"]), "+OK\r\n");
    assert_eq!(raw.call(&["GET", "r3:a"]), "_\r\n");
}

/// Inside MULTI too, replies that name keys show the client's names: EXEC's reply is one
/// redis-server's for the same commands in the same database, in both protocols, with
/// SELECT's own answer and a local command's in their places.
#[test]
fn replies_inside_exec_name_keys_in_the_clients_database() {
    let standalone = Standalone::start();
    let steps = [
        "SELECT 13",
        "DEL {m}l {m}z {m}s",
        "MULTI",
        "RPUSH {m}l a b c",
        "LMPOP 1 {m}l LEFT",
        "BLPOP {m}l 1",
        "ZADD {m}z 1 m 2 n",
        "ZMPOP 1 {m}z MIN",
        "BZPOPMAX {m}z 1",
        "CLIENT GETNAME",
        "XADD {m}s 1-1 f v",
        "XREAD STREAMS {m}s 0",
        "EXEC",
    ];
    for resp3 in [false, true] {
        let mut reference = Raw::connect_in(standalone.addr(), resp3);
        let mut through = Raw::connect_in(proxy().addr(), resp3);
        for step in steps {
            let want = reference.call_line(step);
            assert_eq!(through.call_line(step), want, "RESP3 {resp3}: {step}");
        }
    }
}
