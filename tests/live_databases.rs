//! A live migration of a single node whose clients use several databases (`SELECT n`),
//! against real servers: a standalone `redis-server` holding keys in databases 0, 2 and 5,
//! a 3-master cluster as the target, clients of the `redis` crate selecting databases
//! through the proxy. Each database's keys move to the names `SELECT n` gives them on the
//! cluster (`__db<n>:k`), the same name in two databases lands apart, and listings in each
//! database show its keys wherever they are during the move.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{http_get, http_raw, scan_all, Cluster, Proxy, Standalone};
use serde_json::Value;

const DONE_WITHIN: Duration = Duration::from_secs(60);

/// A connection to `addr` with database `db` selected (the client sends SELECT itself).
fn in_db(addr: &str, db: u32) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{addr}/{db}")).unwrap();
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr} db {db}: {e}"))
}

fn run<T: redis::FromRedisValue>(con: &mut redis::Connection, cmd: &mut redis::Cmd) -> T {
    let text: Vec<String> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            redis::Arg::Cursor => "<cursor>".to_owned(),
        })
        .collect();
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{}: {e}", text.join(" ")))
}

fn sorted_keys(con: &mut redis::Connection) -> BTreeSet<String> {
    run(con, redis::cmd("KEYS").arg("*"))
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// `INFO keyspace`'s `keys=` count of each database, as the proxy reports them.
fn keyspace(con: &mut redis::Connection) -> Vec<(u32, u64)> {
    let text: String = run(con, redis::cmd("INFO").arg("keyspace"));
    text.lines()
        .filter_map(|line| {
            let (db, fields) = line.strip_prefix("db")?.split_once(':')?;
            let keys = fields.split(',').next()?.strip_prefix("keys=")?;
            Some((db.parse().ok()?, keys.parse().ok()?))
        })
        .collect()
}

fn migration(admin: &str) -> Value {
    let (status, body) = http_get(admin, "/migration");
    assert_eq!(status, 200, "GET /migration: {body}");
    serde_json::from_str(&body).unwrap()
}

fn live_args(cluster: &Cluster, source: &Standalone, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--cluster".to_owned(),
        cluster.seeds_arg(),
        "--set".to_owned(),
        format!("migration.source=redis://{}", source.addr()),
        "--set".to_owned(),
        "migration.lease_ms=500".to_owned(),
    ];
    for setting in extra {
        args.extend(["--set".to_owned(), (*setting).to_owned()]);
    }
    args
}

/// The source's keys: `k` in databases 0, 2 and 5 (with a TTL in 5), more in 0 and 2.
fn fill(source: &Standalone) {
    let mut db0 = in_db(source.addr(), 0);
    run::<()>(&mut db0, redis::cmd("MSET").arg(&["k", "v0", "only0", "x"]));
    let mut db2 = in_db(source.addr(), 2);
    run::<()>(&mut db2, redis::cmd("SET").arg(&["k", "v2"]));
    run::<()>(&mut db2, redis::cmd("HSET").arg(&["h", "a", "1"]));
    let mut db5 = in_db(source.addr(), 5);
    run::<()>(
        &mut db5,
        redis::cmd("SET").arg(&["k", "v5", "PX", "100000"]),
    );
}

#[test]
fn every_database_of_the_source_moves_to_the_names_select_n_gives_it() {
    let source = Standalone::start();
    fill(&source);
    let cluster = Cluster::start(3, 0);
    let args = live_args(&cluster, &source, &["migration.paused=true"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proxy = Proxy::start(&args);
    let (mut db0, mut db2, mut db5) = (
        in_db(proxy.addr(), 0),
        in_db(proxy.addr(), 2),
        in_db(proxy.addr(), 5),
    );

    // Nothing moved yet: each database lists and counts its own keys from the source.
    assert_eq!(sorted_keys(&mut db0), names(&["k", "only0"]));
    assert_eq!(sorted_keys(&mut db2), names(&["h", "k"]));
    assert_eq!(sorted_keys(&mut db5), names(&["k"]));
    assert_eq!(run::<i64>(&mut db0, &mut redis::cmd("DBSIZE")), 2);
    assert_eq!(run::<i64>(&mut db2, &mut redis::cmd("DBSIZE")), 2);
    let scanned: BTreeSet<String> = scan_all(&mut db2, "*").into_iter().collect();
    assert_eq!(scanned, names(&["h", "k"]));
    let matched: BTreeSet<String> = scan_all(&mut db2, "h*").into_iter().collect();
    assert_eq!(matched, names(&["h"]));
    let drawn: String = run(&mut db5, &mut redis::cmd("RANDOMKEY"));
    assert_eq!(drawn, "k");

    // Commands move what they touch, from their own database.
    assert_eq!(run::<String>(&mut db2, redis::cmd("GET").arg("k")), "v2");
    assert_eq!(run::<String>(&mut db0, redis::cmd("GET").arg("k")), "v0");
    run::<()>(&mut db2, redis::cmd("SET").arg(&["k2", "new"]));
    let ttl: i64 = run(&mut db5, redis::cmd("PTTL").arg("k"));
    assert!(ttl > 90_000 && ttl <= 100_000, "TTL {ttl}");
    let mut source_db2 = in_db(source.addr(), 2);
    assert_eq!(sorted_keys(&mut source_db2), names(&["h"]), "k left db 2");
    let on_target = |key: &str| -> Option<String> {
        let node = cluster.node_for_slot(cluster.keyslot(key));
        common::query(&node, redis::cmd("GET").arg(key)).unwrap()
    };
    assert_eq!(on_target("__db2:k").as_deref(), Some("v2"));
    assert_eq!(on_target("k").as_deref(), Some("v0"));
    // Half moved, half not: still each key once, in its own database.
    assert_eq!(sorted_keys(&mut db2), names(&["h", "k", "k2"]));
    assert_eq!(run::<i64>(&mut db2, &mut redis::cmd("DBSIZE")), 3);
    assert_eq!(sorted_keys(&mut db0), names(&["k", "only0"]));
    assert_eq!(run::<i64>(&mut db0, &mut redis::cmd("DBSIZE")), 2);
    // INFO keyspace counts each database's keys wherever they are (its walk reads each
    // other database's key's TTL, which moves it).
    assert_eq!(keyspace(&mut db2), [(0, 2), (2, 3), (5, 1)]);

    // The walker moves the rest, database by database, and ends the migration.
    let request = "POST /migration/resume HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n";
    let (code, body) = http_raw(proxy.admin_addr(), request.as_bytes());
    assert_eq!(code, 200, "{body}");
    common::wait_until("the migration is done", DONE_WITHIN, || {
        migration(proxy.admin_addr())["state"] == "done"
    });
    for db in [0, 2, 5] {
        let left = sorted_keys(&mut in_db(source.addr(), db));
        assert!(left.is_empty(), "database {db} still holds {left:?}");
    }
    let node = cluster.node_for_slot(cluster.keyslot("__db5:k"));
    let ttl: i64 = common::query(&node, redis::cmd("PTTL").arg("__db5:k")).unwrap();
    assert!(ttl > 0, "__db5:k lost its TTL: {ttl}");
    assert_eq!(on_target("__db5:k").as_deref(), Some("v5"));
    assert_eq!(
        run::<String>(&mut db2, redis::cmd("HGET").arg(&["h", "a"])),
        "1"
    );
    assert_eq!(sorted_keys(&mut db0), names(&["k", "only0"]));
    assert_eq!(run::<i64>(&mut db0, &mut redis::cmd("DBSIZE")), 2);
    assert_eq!(sorted_keys(&mut db2), names(&["h", "k", "k2"]));
    assert_eq!(sorted_keys(&mut db5), names(&["k"]));
    assert_eq!(keyspace(&mut db0), [(0, 2), (2, 3), (5, 1)]);
    let done = migration(proxy.admin_addr());
    let moved =
        done["moved_on_touch"].as_u64().unwrap() + done["moved_by_walker"].as_u64().unwrap();
    assert_eq!(moved, 5, "{done}");
}

/// A proxy that must refuse to start with `extra` settings; its stderr.
fn refused(cluster: &Cluster, source: &Standalone, extra: &[&str]) -> String {
    let (listen, admin) = (common::free_port(), common::free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(live_args(cluster, source, extra))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run slotbridge");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the proxy started with {extra:?} (still running after 20 s)");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "the proxy started:\n{stderr}");
    stderr
}

#[test]
fn other_databases_no_client_could_reach_are_refused_at_start() {
    let source = Standalone::start();
    fill(&source);
    let cluster = Cluster::start(3, 0);
    // Under a key layout clients cannot SELECT another database.
    let stderr = refused(
        &cluster,
        &source,
        &[
            "layout.file=config/botmesh-cluster-v1.yaml",
            "layout.prefixes=[mybot]",
        ],
    );
    assert!(
        stderr.contains("keys in database 2") && stderr.contains("key layout"),
        "{stderr}"
    );
    // Database 5 is beyond what the proxy offers.
    let stderr = refused(&cluster, &source, &["databases=4"]);
    assert!(
        stderr.contains("keys in database 5") && stderr.contains("`databases`"),
        "{stderr}"
    );
    let _: () = common::query(source.addr(), &redis::cmd("FLUSHALL")).unwrap();
    let target_keys: Vec<String> = cluster
        .masters()
        .iter()
        .flat_map(|node| scan_all(&mut common::connect(node), "*"))
        .collect();
    assert!(
        target_keys.is_empty(),
        "a refused start wrote {target_keys:?}"
    );
}

#[test]
fn a_database_0_name_reserved_for_another_database_stays_until_renamed() {
    let source = Standalone::start();
    let mut db0 = in_db(source.addr(), 0);
    run::<()>(
        &mut db0,
        redis::cmd("MSET").arg(&["__db2:y", "db0's", "plain", "p"]),
    );
    let mut db2 = in_db(source.addr(), 2);
    run::<()>(&mut db2, redis::cmd("SET").arg(&["y", "db2's"]));
    let cluster = Cluster::start(3, 0);
    let args = live_args(&cluster, &source, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proxy = Proxy::start(&args);
    let admin = proxy.admin_addr();

    // Everything else moves; the reserved name stays, named in the status, and the
    // migration does not end.
    common::wait_until("the walker named the reserved key", DONE_WITHIN, || {
        let status = migration(admin);
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("__db2:y") && e.contains("reserved for database 2"))
    });
    common::wait_until("database 2 moved", DONE_WITHIN, || {
        sorted_keys(&mut db2).is_empty()
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_ne!(migration(admin)["state"], "done");
    assert_eq!(sorted_keys(&mut db0), names(&["__db2:y"]));
    let mut client2 = in_db(proxy.addr(), 2);
    assert_eq!(
        run::<String>(&mut client2, redis::cmd("GET").arg("y")),
        "db2's"
    );

    // Renamed on the source, it moves as database 0's key, and the migration ends.
    run::<()>(&mut db0, redis::cmd("RENAME").arg(&["__db2:y", "renamed"]));
    common::wait_until("the migration is done", DONE_WITHIN, || {
        migration(admin)["state"] == "done"
    });
    let mut client0 = in_db(proxy.addr(), 0);
    assert_eq!(
        run::<String>(&mut client0, redis::cmd("GET").arg("renamed")),
        "db0's"
    );
    assert_eq!(
        run::<String>(&mut client2, redis::cmd("GET").arg("y")),
        "db2's"
    );
}
