//! Live migration through the proxy, against real servers: a standalone `redis-server` as
//! the source, a 3-master cluster as the target, clients of the `redis` crate. Commands
//! move the keys they touch before they run; the walker (of this proxy or another one that
//! joins) moves the rest and ends the migration; nothing a client was told is written is
//! lost, nothing deleted comes back, and a proxy killed in the middle loses nothing.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Proxy, Standalone};
use slotbridge::live::names::{claim_key, fence_key, EVERY_KEY_MOVED};

fn live_args<'a>(cluster: &'a str, source: &'a str, extra: &[&'a str]) -> Vec<String> {
    let mut args = vec![
        "--cluster".to_owned(),
        cluster.to_owned(),
        "--set".to_owned(),
        format!("migration.source=redis://{source}"),
        "--set".to_owned(),
        "migration.lease_ms=500".to_owned(),
    ];
    for setting in extra {
        args.push("--set".to_owned());
        args.push((*setting).to_owned());
    }
    args
}

fn start_proxy(cluster: &Cluster, source: &Standalone, extra: &[&str]) -> Proxy {
    let args = live_args(&cluster.seeds_arg(), source.addr(), extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proxy::start(&args)
}

fn target<T: redis::FromRedisValue>(cluster: &Cluster, key: &str, cmd: &redis::Cmd) -> T {
    common::query(&cluster.node_for_slot(cluster.keyslot(key)), cmd).unwrap()
}

fn source_keys(source: &Standalone) -> Vec<String> {
    let mut con = source.connect();
    common::scan_all(&mut con, "*")
}

/// Waits until the source holds nothing (keys or claims), at most `limit`.
fn wait_source_empty(source: &Standalone, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left = source_keys(source);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the source still holds {} names after {limit:?}, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn commands_move_their_keys_first_and_the_walker_ends_the_migration() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let mut src = source.connect();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .query(&mut src)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("t")
        .arg("EX")
        .arg(1000)
        .query(&mut src)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("1")
        .query(&mut src)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .query(&mut src)
        .unwrap();
    // The walker waits: every move below is a command's own.
    let proxy = start_proxy(
        &cluster,
        &source,
        &["migration.paused=true", "commands.allow=[flushall]"],
    );
    let mut con = proxy.connect();

    // A read moves the key: the value is the source's, now on the target only.
    let got: String = redis::cmd("GET").arg("k0").query(&mut con).unwrap();
    assert_eq!(got, "v0");
    let on_source: i64 = redis::cmd("EXISTS").arg("k0").query(&mut src).unwrap();
    assert_eq!(on_source, 0, "a moved key leaves the source");
    let moved: String = target(&cluster, "k0", redis::cmd("GET").arg("k0"));
    assert_eq!(moved, "v0");
    let fenced: i64 = target(
        &cluster,
        "k0",
        redis::cmd("HEXISTS").arg(&fence_key(b"k0")[..]).arg("k0"),
    );
    assert_eq!(fenced, 1, "the move is recorded in its slot's fence");

    // The TTL travels with the key.
    let ttl: i64 = redis::cmd("TTL").arg("ttl").query(&mut con).unwrap();
    assert!((990..=1000).contains(&ttl), "TTL after the move: {ttl}");

    // A write lands after the move; a pipeline keeps its order.
    let (set, got): (String, String) = redis::pipe()
        .cmd("SET")
        .arg("k1")
        .arg("new")
        .cmd("GET")
        .arg("k1")
        .query(&mut con)
        .unwrap();
    assert_eq!((set.as_str(), got.as_str()), ("OK", "new"));
    // Types other than strings, and a write that reads the old value.
    let count: i64 = redis::cmd("HINCRBY")
        .arg("h")
        .arg("f")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(count, 2);
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg("l")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(list, ["a", "b"]);

    // A delete of a key never moved: it stays deleted, whatever moves later.
    let deleted: i64 = redis::cmd("DEL").arg("k2").query(&mut con).unwrap();
    assert_eq!(deleted, 1, "DEL sees the source's key");
    let exists: i64 = redis::cmd("EXISTS").arg("k2").query(&mut con).unwrap();
    assert_eq!(exists, 0);

    // A transaction and a script move every declared key first.
    let (incr,): (i64,) = redis::pipe()
        .atomic()
        .cmd("APPEND")
        .arg("k3")
        .arg("+")
        .query(&mut con)
        .unwrap();
    assert_eq!(incr, 3, "APPEND in MULTI sees the source's value (v3+)");
    let script: String = redis::cmd("EVAL")
        .arg("return redis.call('GET', KEYS[1])")
        .arg(1)
        .arg("k4")
        .query(&mut con)
        .unwrap();
    assert_eq!(script, "v4");
    // Renaming moves both names.
    let _: () = redis::cmd("RENAME")
        .arg("k5")
        .arg("k6")
        .query(&mut con)
        .unwrap();
    let renamed: String = redis::cmd("GET").arg("k6").query(&mut con).unwrap();
    assert_eq!(renamed, "v5");

    // What the move cannot order with is refused while it lasts.
    let flush: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(&mut con);
    let error = flush.expect_err("FLUSHALL during a migration").to_string();
    assert!(error.contains("live migration"), "{error}");

    // A second proxy joins with its walker on: it moves the rest and ends the migration.
    let walker = start_proxy(&cluster, &source, &[]);
    wait_source_empty(&source, Duration::from_secs(30));
    let mut other = walker.connect();
    for (key, want) in [("k1", Some("new")), ("k2", None), ("k6", Some("v5"))] {
        for con in [&mut con, &mut other] {
            let got: Option<String> = redis::cmd("GET").arg(key).query(con).unwrap();
            assert_eq!(got.as_deref(), want, "{key} through either proxy");
        }
    }
    let got: Option<String> = redis::cmd("GET").arg("k5").query(&mut other).unwrap();
    assert_eq!(
        got, None,
        "a renamed key does not come back under its old name"
    );
    for i in (7..200).step_by(17) {
        let key = format!("k{i}");
        let got: String = target(&cluster, &key, redis::cmd("GET").arg(&key));
        assert_eq!(got, format!("v{i}"), "{key} moved by the walker");
    }
    let claim: i64 = redis::cmd("EXISTS")
        .arg(&claim_key(b"k7")[..])
        .query(&mut src)
        .unwrap();
    assert_eq!(claim, 0);
    // Both end the mode: the walker's proxy by its pass, the paused one by its look.
    for ended in [&walker, &proxy] {
        let done = wait_for(Duration::from_secs(10), || {
            ended.stderr().contains("live migration done").then_some(())
        });
        assert!(done.is_some(), "the mode did not end:\n{}", ended.stderr());
    }
    // The end compacted the target's moved-fences: one field per slot that had moves.
    let mut fences = 0;
    for master in cluster.masters() {
        let mut node = common::connect(&master);
        for fence in common::scan_all(&mut node, "slotbridge:live:*") {
            assert!(
                fence.ends_with(":moved"),
                "a record left on the target: {fence}"
            );
            let fields: HashMap<String, String> =
                redis::cmd("HGETALL").arg(&fence).query(&mut node).unwrap();
            let every_key = String::from_utf8_lossy(EVERY_KEY_MOVED).into_owned();
            assert_eq!(
                fields.into_keys().collect::<Vec<_>>(),
                [every_key],
                "{fence}"
            );
            fences += 1;
        }
    }
    assert!(fences > 0, "no moved-fence on the target after 200 moves");
    let allowed: String = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    assert_eq!(
        allowed, "OK",
        "FLUSHALL runs again once the migration is done"
    );
}

#[test]
fn a_hung_source_fails_only_the_commands_waiting_on_it_and_the_move_resumes() {
    let source = Standalone::start();
    let mut src = source.connect();
    for i in 0..10 {
        let _: () = redis::cmd("SET")
            .arg(format!("h{i}"))
            .arg(format!("v{i}"))
            .query(&mut src)
            .unwrap();
    }
    let cluster = Cluster::start(3, 0);
    let settings = ["migration.paused=true", "backend.read_timeout_ms=300"];
    let proxy = start_proxy(&cluster, &source, &settings);
    let mut con = proxy.connect();
    for i in 0..3 {
        let got: String = redis::cmd("GET")
            .arg(format!("h{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(got, format!("v{i}"));
    }

    source.set_paused(true);
    // A command on a key still on the source waits for the source, then is refused with
    // TRYAGAIN once the backend's read timeout has failed every attempt: nothing ran.
    let waiting = {
        let addr = proxy.addr().to_owned();
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut con = common::connect(&addr);
            let reply: redis::RedisResult<String> =
                redis::cmd("SET").arg("h5").arg("lost?").query(&mut con);
            (reply, started.elapsed())
        })
    };
    // Meanwhile the keys this proxy moved are served without the source, at once.
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..3 {
        let started = Instant::now();
        let _: () = redis::cmd("SET")
            .arg(format!("h{i}"))
            .arg(format!("new{i}"))
            .query(&mut con)
            .unwrap();
        // Waiting on the source would take a read timeout (300 ms) per attempt, then fail.
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "a moved key waited {:?} for the hung source",
            started.elapsed()
        );
    }
    let (reply, waited) = waiting.join().unwrap();
    let error = reply.expect_err("a write on an unmoved key while the source hangs");
    assert_eq!(error.code(), Some("TRYAGAIN"), "{error}");
    assert!(
        waited < Duration::from_secs(10),
        "refused only after {waited:?}"
    );
    let on_target: Option<String> = target(&cluster, "h5", redis::cmd("GET").arg("h5"));
    assert_eq!(on_target, None, "a refused command ran");
    // RANDOMKEY answers from the target when the source cannot.
    for _ in 0..4 {
        let drawn: Option<String> = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
        let drawn = drawn.expect("RANDOMKEY answered nil while the target holds keys");
        assert!(["h0", "h1", "h2"].contains(&drawn.as_str()), "{drawn}");
    }

    // The source answers again: the same write moves its key first, then runs.
    source.set_paused(false);
    let written = wait_for(Duration::from_secs(10), || {
        redis::cmd("SET")
            .arg("h5")
            .arg("after")
            .query::<()>(&mut con)
            .ok()
    });
    assert!(
        written.is_some(),
        "the write never ran after the source came back"
    );
    let walker = start_proxy(&cluster, &source, &[]);
    wait_source_empty(&source, Duration::from_secs(30));
    drop(walker);
    for (key, want) in [("h0", "new0"), ("h5", "after"), ("h9", "v9")] {
        let got: String = target(&cluster, key, redis::cmd("GET").arg(key));
        assert_eq!(got, want, "{key}");
    }
}

/// One client's INCRs: how many were acknowledged, and how many have an unknown outcome
/// (sent when its proxy was killed).
#[derive(Default)]
struct Tally {
    acked: HashMap<String, i64>,
    unknown: HashMap<String, i64>,
}

fn incr_until(addr: String, keys: usize, stop: Arc<AtomicBool>, seed: usize) -> Tally {
    let mut tally = Tally::default();
    let mut con = common::connect(&addr);
    let mut n = seed;
    while !stop.load(Ordering::Relaxed) {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = format!("c{}", (n >> 33) % keys);
        match redis::cmd("INCR").arg(&key).query::<i64>(&mut con) {
            Ok(_) => *tally.acked.entry(key).or_default() += 1,
            Err(e) => {
                assert!(
                    e.is_io_error() || e.is_connection_dropped() || e.is_timeout(),
                    "a client saw an error reply during the migration: {e}"
                );
                *tally.unknown.entry(key).or_default() += 1;
                return tally;
            }
        }
    }
    tally
}

#[test]
fn writers_lose_nothing_while_a_walker_is_killed_and_another_finishes() {
    // The writers work on the first `HOT` keys; the walker moves all of them.
    const KEYS: usize = 20_000;
    const HOT: usize = 2_000;
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let mut src = source.connect();
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.cmd("SET").arg(format!("c{i}")).arg(1000).ignore();
        if i % 1000 == 999 {
            let _: () = pipe.query(&mut src).unwrap();
            pipe.clear();
        }
    }
    // A slow walker, so it is killed in the middle of its pass.
    let mut first = start_proxy(&cluster, &source, &["migration.max_keys_per_second=2000"]);
    let steady = start_proxy(&cluster, &source, &["migration.paused=true"]);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = [first.addr(), steady.addr(), steady.addr()]
        .into_iter()
        .enumerate()
        .map(|(seed, addr)| {
            let (addr, stop) = (addr.to_owned(), stop.clone());
            std::thread::spawn(move || incr_until(addr, HOT, stop, seed + 1))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let left = source_keys(&source).len();
    assert!(
        left > 0 && left < KEYS,
        "the walker was killed in the middle of its pass ({left} names left)"
    );
    first.send_signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    // Its successor finishes the walk at full speed while the others keep writing.
    let successor = start_proxy(&cluster, &source, &["migration.max_keys_per_second=0"]);
    wait_source_empty(&source, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let tallies: Vec<Tally> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut con = successor.connect();
    let mut writes = 0;
    for i in (0..HOT).chain((HOT..KEYS).step_by(7)) {
        let key = format!("c{i}");
        let acked: i64 = tallies.iter().filter_map(|t| t.acked.get(&key)).sum();
        let unknown: i64 = tallies.iter().filter_map(|t| t.unknown.get(&key)).sum();
        writes += acked;
        let value: i64 = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert!(
            (1000 + acked..=1000 + acked + unknown).contains(&value),
            "{key}: {value} after {acked} acknowledged INCRs ({unknown} unknown)"
        );
    }
    assert!(
        writes > 1000,
        "the writers ran during the move ({writes} INCRs)"
    );
}

#[test]
fn a_legacy_keyspace_moves_to_cluster_v1_names_and_gets_its_markers() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    // Two prefixes under one layout: each gets its marker.
    let (p, q) = ("lmv", "lmw");
    common::write_plain(source.addr(), q, &[&["SET", "{p}:conv:1", "q-conv"]]);
    common::write_plain(
        source.addr(),
        p,
        &[
            &["SET", "{p}:chat:chat-1", "record"],
            &["SET", "{p}:chat:chat-2", "other"],
            &["SET", "{p}:checkpoint:c2", "cp", "PX", "600000"],
            &["ZADD", "{p}:msgs:chat-1", "1", "m1"],
            &["SET", "{p}:msg:chat-1:m1", "hello"],
            &["SET", "{p}:fence:team:ops", "7"],
            &["SET", "{p}:conv:42", "conv"],
        ],
    );
    let with_layout = |extra: &[&str]| {
        let mut args = live_args(&cluster.seeds_arg(), source.addr(), extra);
        args.extend(
            [
                "--set",
                "layout.file=config/botmesh-cluster-v1.yaml",
                "--set",
                &format!("layout.prefixes=[{p},{q}]"),
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proxy::start(&args)
    };
    let proxy = with_layout(&["migration.paused=true"]);
    let get = |key: String| -> Option<String> {
        common::query(proxy.addr(), redis::cmd("GET").arg(key)).unwrap()
    };
    // Touched before the walk: moved under its cluster:v1 name, read by its legacy one.
    assert_eq!(get(format!("{p}:chat:chat-1")).as_deref(), Some("record"));
    let on_source: i64 = common::query(
        source.addr(),
        redis::cmd("EXISTS").arg(format!("{p}:chat:chat-1")),
    )
    .unwrap();
    assert_eq!(on_source, 0);
    let legacy_on_target: Vec<String> = common::keys_on(&cluster.masters(), p)
        .into_iter()
        .filter(|key| key == &format!("{p}:chat:chat-1"))
        .collect();
    assert!(
        legacy_on_target.is_empty(),
        "the target holds the cluster:v1 name, not the legacy one"
    );
    // A lock fence only rises: a write of a lower value after the move is the client's own.
    let fence: String = get(format!("{p}:fence:team:ops")).unwrap();
    assert_eq!(fence, "7");

    // The walker of a second proxy moves the rest and writes the marker.
    let walker = with_layout(&[]);
    wait_source_empty(&source, Duration::from_secs(30));
    let marker: Option<String> = wait_for(Duration::from_secs(10), || {
        let key = format!("{p}:{{meta}}:layout");
        let value: Option<String> = target(&cluster, &key, redis::cmd("GET").arg(&key));
        value
    });
    assert_eq!(
        marker.as_deref(),
        Some("cluster:v1"),
        "the marker is written"
    );
    for through in [proxy.addr(), walker.addr()] {
        let get = |key: String| -> Option<String> {
            common::query(through, redis::cmd("GET").arg(key)).unwrap()
        };
        assert_eq!(get(format!("{p}:chat:chat-2")).as_deref(), Some("other"));
        assert_eq!(get(format!("{p}:msg:chat-1:m1")).as_deref(), Some("hello"));
        assert_eq!(get(format!("{p}:conv:42")).as_deref(), Some("conv"));
        let ttl: i64 = common::query(
            through,
            redis::cmd("PTTL").arg(format!("{p}:checkpoint:c2")),
        )
        .unwrap();
        assert!(ttl > 590_000 && ttl <= 600_000, "TTL kept: {ttl}");
        let mut chats: Vec<String> =
            common::query(through, redis::cmd("KEYS").arg(format!("{p}:chat:*"))).unwrap();
        chats.sort();
        assert_eq!(
            chats,
            [format!("{p}:chat:chat-1"), format!("{p}:chat:chat-2")],
            "the index-backed listing holds walked and touched records alike"
        );
    }

    // A rollback after the move: the offline copy takes the keyspace back to a legacy node,
    // the records of the moves staying behind.
    let old = Standalone::start();
    let first_master = cluster.masters()[0].clone();
    common::migrate_ok(&[
        "--source",
        &common::url(&first_master),
        "--target",
        &common::url(old.addr()),
        "--prefix",
        p,
        "--direction",
        "cluster-to-legacy",
    ]);
    let back = |key: String| -> Option<String> {
        common::query(old.addr(), redis::cmd("GET").arg(key)).unwrap()
    };
    assert_eq!(back(format!("{p}:chat:chat-1")).as_deref(), Some("record"));
    assert_eq!(back(format!("{p}:msg:chat-1:m1")).as_deref(), Some("hello"));
    assert_eq!(back(format!("{p}:fence:team:ops")).as_deref(), Some("7"));
    let ttl: i64 = common::query(
        old.addr(),
        redis::cmd("PTTL").arg(format!("{p}:checkpoint:c2")),
    )
    .unwrap();
    assert!(ttl > 0 && ttl <= 600_000, "TTL kept on the way back: {ttl}");
    let mut rolled_back = old.connect();
    let records = common::scan_all(&mut rolled_back, "slotbridge:live:*");
    assert!(records.is_empty(), "records went back too: {records:?}");
}

/// Polls `read` until it gives `Some`, at most `limit`; the last reading.
fn wait_for<T>(limit: Duration, mut read: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        let value = read();
        if value.is_some() || Instant::now() >= deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs a migrating proxy in front of `cluster` from `source` that must refuse to start; its
/// stderr.
fn refused_start(cluster: &Cluster, source: &Standalone) -> String {
    let (listen, admin) = (common::free_port(), common::free_port());
    let args = live_args(&cluster.seeds_arg(), source.addr(), &[]);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(&args)
        .output()
        .expect("run slotbridge");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the proxy started:\n{stderr}");
    stderr
}

#[test]
fn a_target_that_already_holds_a_copy_is_refused_at_start() {
    let source = Standalone::start();
    let cluster = Cluster::start(3, 0);
    let _: () = common::query(source.addr(), redis::cmd("SET").arg("dup").arg("source")).unwrap();
    let _: () = target(
        &cluster,
        "dup",
        redis::cmd("SET").arg("dup").arg("stale copy"),
    );
    let stderr = refused_start(&cluster, &source);
    assert!(
        stderr.contains("the target already holds dup") && stderr.contains("no move wrote"),
        "{stderr}"
    );
    // Once the stale copy is gone, the same proxy starts and serves the source's value.
    let _: i64 = target(&cluster, "dup", redis::cmd("DEL").arg("dup"));
    let proxy = start_proxy(&cluster, &source, &[]);
    let got: String = common::query(proxy.addr(), redis::cmd("GET").arg("dup")).unwrap();
    assert_eq!(got, "source");
}

#[test]
fn a_source_with_a_password_and_a_cluster_source_move_too() {
    // A source that needs a password: the credentials come from the migration's section.
    let source = Standalone::start();
    let _: () = common::query(source.addr(), redis::cmd("SET").arg("p1").arg("v")).unwrap();
    let _: () = common::query(
        source.addr(),
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("s3cret"),
    )
    .unwrap();
    let cluster = Cluster::start(3, 0);
    let proxy = start_proxy(&cluster, &source, &["migration.password=s3cret"]);
    let got: String = common::query(proxy.addr(), redis::cmd("GET").arg("p1")).unwrap();
    assert_eq!(got, "v");

    // A cluster as the source: every claim in its key's slot, the walk over every master.
    let old = Cluster::start(3, 0);
    let names: Vec<String> = (0..300).map(|i| format!("cs{i}")).collect();
    for name in &names {
        let _: () = target(&old, name, redis::cmd("SET").arg(name).arg(name));
    }
    let args = live_args(&cluster.seeds_arg(), &old.seeds()[0], &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let from_cluster = Proxy::start(&args);
    let got: String = common::query(from_cluster.addr(), redis::cmd("GET").arg("cs7")).unwrap();
    assert_eq!(got, "cs7", "a command's move from a cluster source");
    let emptied = wait_for(Duration::from_secs(30), || {
        let left: usize = old
            .masters()
            .iter()
            .map(|m| common::query::<i64>(m, &redis::cmd("DBSIZE")).unwrap() as usize)
            .sum();
        (left == 0).then_some(())
    });
    assert!(emptied.is_some(), "the walker emptied the cluster source");
    for name in &names {
        let got: String = target(&cluster, name, redis::cmd("GET").arg(name));
        assert_eq!(&got, name);
    }
}
