//! Commands about the whole data set through the proxy, checked against the masters
//! themselves: KEYS and SCAN see every key exactly once, also while a slot moves; DBSIZE
//! is the sum; RANDOMKEY finds a key; FLUSHALL and CONFIG SET reach every master; all of
//! it also with a standalone upstream. SLOWLOG, LATENCY (LATEST, HISTORY, HISTOGRAM, RESET),
//! LASTSAVE and MEMORY STATS read every master.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use common::{query, shared_cluster, Cluster, Proxy, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        Proxy::start(&[
            "--config",
            "tests/config/allow-admin.yaml",
            "--cluster",
            &shared_cluster().seeds_arg(),
        ])
    })
}

fn write_keys(con: &mut redis::Connection, keys: &[String]) {
    for chunk in keys.chunks(2000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("SET").arg(key).arg("v").ignore();
        }
        pipe.query::<()>(con).expect("SETs");
    }
}

/// Walks SCAN to the end (bounded), returning every key in the order returned.
fn scan_all(con: &mut redis::Connection, extra: &[&str]) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    for _ in 0..100_000 {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg(extra)
            .query(con)
            .expect("SCAN");
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            return keys;
        }
    }
    panic!("SCAN did not finish");
}

fn dbsize(addr: &str) -> i64 {
    query(addr, &redis::cmd("DBSIZE")).expect("DBSIZE")
}

/// One test, because FLUSHALL at its end empties the cluster the others would use.
#[test]
fn keys_scan_dbsize_randomkey_config_flushall_over_three_masters() {
    let cluster = shared_cluster();
    let mut con = proxy().connect();
    let keys: Vec<String> = (0..20_000).map(|i| format!("fan:{i}")).collect();
    write_keys(&mut con, &keys);
    let expected: BTreeSet<String> = keys.iter().cloned().collect();

    let listed: Vec<String> = redis::cmd("KEYS").arg("fan:*").query(&mut con).unwrap();
    assert_eq!(
        listed.len(),
        expected.len(),
        "KEYS returned duplicates or missed keys"
    );
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), expected);

    let scanned = scan_all(&mut con, &["COUNT", "500"]);
    let unique: BTreeSet<String> = scanned.iter().cloned().collect();
    assert_eq!(scanned.len(), unique.len(), "SCAN returned a key twice");
    assert_eq!(unique, expected);

    // MATCH and TYPE are passed to each master.
    let matched: BTreeSet<String> = scan_all(&mut con, &["MATCH", "fan:1?", "COUNT", "1000"])
        .into_iter()
        .collect();
    let want: BTreeSet<String> = (10..20).map(|i| format!("fan:{i}")).collect();
    assert_eq!(matched, want);
    let _: () = redis::cmd("RPUSH")
        .arg("fan:list")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let lists = scan_all(&mut con, &["TYPE", "list", "COUNT", "1000"]);
    assert_eq!(lists, vec!["fan:list".to_string()]);

    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let sum: i64 = masters.iter().map(|m| dbsize(m)).sum();
    let total: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(total, sum);
    assert!(total >= 20_001);

    let random: String = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg(&random).query(&mut con).unwrap();
    assert_eq!(exists, 1, "RANDOMKEY gave {random}");

    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg("77")
        .query(&mut con)
        .unwrap();
    for master in &masters {
        let got: HashMap<String, String> = query(
            master,
            redis::cmd("CONFIG").arg("GET").arg("slowlog-max-len"),
        )
        .unwrap();
        assert_eq!(got["slowlog-max-len"], "77", "{master}");
    }
    // A setting no master accepts: an error, as Redis gives.
    let bad: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("no-such-setting")
        .arg("1")
        .query(&mut con);
    assert!(bad.is_err());

    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(&mut con).unwrap();
    for master in &masters {
        assert_eq!(dbsize(master), 0, "{master} still has keys");
    }
    let total: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(total, 0);
    let random: Option<String> = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
    assert_eq!(random, None);
    // Masters that end with an empty page hand over in the same call: an empty keyspace
    // is one SCAN answering cursor 0, as on one Redis, and a key on the last master (in
    // the address order SCAN walks) comes back in the first call.
    let first: (String, Vec<String>) = redis::cmd("SCAN").arg(0).query(&mut con).unwrap();
    assert_eq!(first, ("0".to_string(), vec![]));
    let last_master = masters.iter().max().unwrap();
    let key = (0..)
        .map(|i| format!("fanlast:{i}"))
        .find(|key| cluster.node_for_slot(cluster.keyslot(key)) == *last_master)
        .unwrap();
    write_keys(&mut con, std::slice::from_ref(&key));
    let first: (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert_eq!(first, ("0".to_string(), vec![key]));
    let listed: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(listed.len(), 1);
}

/// A keyspace smaller than COUNT, one key on each master, is scanned in one call as on
/// one Redis: cursor 0 and every key; with COUNT 1 the walk still returns each key once.
#[test]
fn a_small_keyspace_is_scanned_in_one_call_as_on_one_redis() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let standalone = Standalone::start();
    // One key per master: three slots owned by the three masters.
    let mut keys = Vec::new();
    for master in cluster.masters() {
        let key = (0..)
            .map(|i| format!("small:{i}"))
            .find(|k| cluster.node_for_slot(cluster.keyslot(k)) == master && !keys.contains(k))
            .unwrap();
        keys.push(key);
    }
    let mut con = proxy.connect();
    let mut reference = standalone.connect();
    write_keys(&mut con, &keys);
    write_keys(&mut reference, &keys);
    let sorted = |(cursor, mut keys): (String, Vec<String>)| {
        keys.sort();
        (cursor, keys)
    };
    let scan: (String, Vec<String>) = redis::cmd("SCAN").arg(0).query(&mut con).unwrap();
    let on_redis: (String, Vec<String>) = redis::cmd("SCAN").arg(0).query(&mut reference).unwrap();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(sorted(scan), ("0".to_string(), expected.clone()));
    assert_eq!(sorted(on_redis), ("0".to_string(), expected.clone()));
    // MATCH filters within the same call.
    let matched: (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(&keys[2])
        .query(&mut con)
        .unwrap();
    assert_eq!(matched, ("0".to_string(), vec![keys[2].clone()]));
    let mut walked = scan_all(&mut con, &["COUNT", "1"]);
    walked.sort();
    assert_eq!(walked, expected);
}

#[test]
fn invalid_scan_cursor_is_refused_like_redis() {
    let standalone = Standalone::start();
    let mut reference = standalone.connect();
    let mut con = proxy().connect();
    for cursor in ["abc", " 1", "1x", "18446744073709551616"] {
        let want: redis::RedisResult<redis::Value> =
            redis::cmd("SCAN").arg(cursor).query(&mut reference);
        let got: redis::RedisResult<redis::Value> = redis::cmd("SCAN").arg(cursor).query(&mut con);
        assert_eq!(
            got.map_err(|e| e.to_string()),
            want.map_err(|e| e.to_string()),
            "cursor {cursor}"
        );
    }
    // Redis 7.0 reads the cursor with strtoul: these are accepted (what they return
    // depends on the data, so only acceptance is compared).
    for cursor in ["-1", "+0", ""] {
        let want: redis::RedisResult<redis::Value> =
            redis::cmd("SCAN").arg(cursor).query(&mut reference);
        let got: redis::RedisResult<redis::Value> = redis::cmd("SCAN").arg(cursor).query(&mut con);
        assert!(want.is_ok(), "redis refused {cursor:?}");
        assert!(got.is_ok(), "cursor {cursor:?}: {got:?}");
    }
}

#[test]
fn scan_returns_every_key_outside_a_slot_that_moves_mid_scan() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&[
        "--config",
        "tests/config/allow-admin.yaml",
        "--cluster",
        &cluster.seeds_arg(),
    ]);
    let mut con = proxy.connect();
    // 300 keys in one slot (hash tag) that will move, 3000 elsewhere.
    let moving: Vec<String> = (0..300).map(|i| format!("{{mv}}:{i}")).collect();
    let still: Vec<String> = (0..3000).map(|i| format!("still:{i}")).collect();
    write_keys(&mut con, &moving);
    write_keys(&mut con, &still);
    let slot = cluster.keyslot("{mv}");
    let from = cluster.node_for_slot(slot);
    let to = cluster
        .masters()
        .into_iter()
        .find(|m| *m != from)
        .expect("another master");

    let mut seen = Vec::new();
    let mut cursor: u64 = 0;
    let mut step = 0;
    loop {
        // Move the slot in stages while the scan is under way.
        match step {
            3 => cluster.begin_migration(slot, &to),
            5 => {
                cluster.migrate_keys(slot, &to, 150);
            }
            8 => {
                cluster.migrate_keys(slot, &to, usize::MAX);
                cluster.finish_migration(slot, &to);
            }
            _ => {}
        }
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(100)
            .query(&mut con)
            .expect("SCAN");
        seen.extend(batch);
        cursor = next;
        step += 1;
        if cursor == 0 {
            break;
        }
        assert!(step < 10_000, "SCAN did not finish");
    }
    assert!(
        step > 8,
        "the scan ended before the slot moved ({step} calls)"
    );
    let seen: BTreeSet<String> = seen.into_iter().collect();
    let missing: Vec<&String> = still.iter().filter(|k| !seen.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "missed {} keys: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(cluster.node_for_slot(slot), to);
}

#[test]
fn standalone_upstream_fans_out_to_its_one_node() {
    let server = Standalone::start();
    let proxy = Proxy::start(&[
        "--config",
        "tests/config/allow-admin.yaml",
        "--standalone",
        server.addr(),
    ]);
    let mut con = proxy.connect();
    let keys: Vec<String> = (0..500).map(|i| format!("solo:{i}")).collect();
    write_keys(&mut con, &keys);
    let expected: BTreeSet<String> = keys.iter().cloned().collect();
    let listed: BTreeSet<String> = redis::cmd("KEYS")
        .arg("*")
        .query::<Vec<String>>(&mut con)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(listed, expected);
    let scanned = scan_all(&mut con, &["COUNT", "50"]);
    assert_eq!(scanned.len(), 500);
    assert_eq!(scanned.into_iter().collect::<BTreeSet<_>>(), expected);
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, dbsize(server.addr()));
    let random: String = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
    assert!(expected.contains(&random));
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('GET', KEYS[1])")
        .query(&mut con)
        .unwrap();
    let value: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("solo:1")
        .query(&mut con)
        .unwrap();
    assert_eq!(value, "v");
    let _: () = redis::cmd("FLUSHDB").query(&mut con).unwrap();
    assert_eq!(dbsize(server.addr()), 0);
}

/// SLOWLOG through the proxy is every master's log as one, as Redis 7's request policy for
/// it (all nodes) asks: LEN is the sum, GET merges the entries newest first and cuts them
/// to the count, RESET empties every master's log.
#[test]
fn slowlog_reads_and_resets_every_master() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let set_threshold = |micros: &str| {
        for master in cluster.masters() {
            let ok: String = query(
                &master,
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("slowlog-log-slower-than")
                    .arg(micros),
            )
            .unwrap();
            assert_eq!(ok, "OK");
        }
    };
    let mut con = proxy.client().get_connection().unwrap();
    let reset: String = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    assert_eq!(reset, "OK");
    // Log every command for a moment, then nothing, so the logs hold still.
    set_threshold("0");
    let keys: Vec<String> = (0..30).map(|i| format!("slow:{i}")).collect();
    for key in &keys {
        redis::cmd("SET").arg(key).arg("v").exec(&mut con).unwrap();
    }
    set_threshold("100000000");
    let per_master: Vec<i64> = cluster
        .masters()
        .iter()
        .map(|master| query(master, redis::cmd("SLOWLOG").arg("LEN")).unwrap())
        .collect();
    assert!(per_master.iter().all(|&n| n > 0), "{per_master:?}");
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, per_master.iter().sum::<i64>());

    type Entry = (i64, i64, i64, Vec<String>, String, String);
    let all: Vec<Entry> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("-1")
        .query(&mut con)
        .unwrap();
    assert_eq!(all.len() as i64, len);
    let logged: Vec<&String> = all
        .iter()
        .filter(|entry| entry.3.first().is_some_and(|name| name == "SET"))
        .map(|entry| &entry.3[1])
        .collect();
    for key in &keys {
        assert!(logged.contains(&key), "{key} missing from {logged:?}");
    }
    let newest: Vec<Entry> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("5")
        .query(&mut con)
        .unwrap();
    assert_eq!(newest.len(), 5);
    assert!(newest.windows(2).all(|pair| pair[0].1 >= pair[1].1));
    let default: Vec<Entry> = redis::cmd("SLOWLOG").arg("GET").query(&mut con).unwrap();
    assert_eq!(default.len(), 10);
    // A bad count gets the masters' own error.
    let bad_count = redis::cmd("SLOWLOG").arg("GET").arg("-2").clone();
    let error = bad_count.query::<Vec<Entry>>(&mut con).unwrap_err();
    let node_error = query::<Vec<Entry>>(&cluster.masters()[0], &bad_count).unwrap_err();
    let detail = error.detail().unwrap_or_default();
    assert!(
        detail.contains("count") && node_error.ends_with(detail),
        "{error} / {node_error}"
    );

    let reset: String = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    assert_eq!(reset, "OK");
    for master in cluster.masters() {
        let left: i64 = query(&master, redis::cmd("SLOWLOG").arg("LEN")).unwrap();
        assert_eq!(left, 0, "{master}");
    }

    // As redis-py's test_slowlog_get: a GET after SLOWLOG RESET, both usually in one
    // second, is newer than every master's copy of the RESET, also when the GET's master
    // is the last one in the proxy's (address) order.
    set_threshold("0");
    let last = cluster.masters().into_iter().max().unwrap();
    let key = (0..)
        .map(|i| format!("slow:after-reset:{i}"))
        .find(|k| cluster.node_for_slot(cluster.keyslot(k)) == last)
        .unwrap();
    let _: String = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let _: Option<String> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let log: Vec<Entry> = redis::cmd("SLOWLOG").arg("GET").query(&mut con).unwrap();
    set_threshold("100000000");
    let commands: Vec<String> = log.iter().map(|entry| entry.3.join(" ")).collect();
    let get = commands.iter().position(|c| *c == format!("GET {key}"));
    let reset = commands.iter().position(|c| c == "SLOWLOG RESET");
    assert!(
        get.is_some() && reset.is_some() && get < reset,
        "{commands:?}"
    );
}

/// LATENCY through the proxy reads every master's monitor as one: LATEST lists an event
/// once with the newest sample and the highest maximum of all masters, HISTORY merges the
/// samples in time order, RESET sums what each master reset.
#[test]
fn latency_reads_and_resets_every_master() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.client().get_connection().unwrap();
    let masters = cluster.masters();
    // A command of `ms` milliseconds on each master, a second apart (samples are per second).
    let spin = "local s = redis.call('TIME') \
                while true do \
                  local n = redis.call('TIME') \
                  if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) * 1000 then return 1 end \
                end";
    for (master, ms) in masters.iter().zip([20, 60, 40]) {
        let _: () = query(
            master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("latency-monitor-threshold")
                .arg(1),
        )
        .unwrap();
        let _: i64 = query(master, redis::cmd("EVAL").arg(spin).arg(0).arg(ms)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    type Latest = Vec<(String, i64, i64, i64)>;
    let per_master: Vec<Latest> = masters
        .iter()
        .map(|master| query(master, redis::cmd("LATENCY").arg("LATEST")).unwrap())
        .collect();
    let command_of = |latest: &Latest| latest.iter().find(|e| e.0 == "command").cloned();
    let samples: Vec<(String, i64, i64, i64)> = per_master
        .iter()
        .map(|l| command_of(l).expect("a command event"))
        .collect();
    let latest: Latest = redis::cmd("LATENCY").arg("LATEST").query(&mut con).unwrap();
    assert_eq!(
        latest.iter().filter(|e| e.0 == "command").count(),
        1,
        "{latest:?}"
    );
    let merged = command_of(&latest).unwrap();
    let newest = samples.iter().max_by_key(|s| s.1).unwrap();
    assert_eq!(merged.1, newest.1, "newest timestamp");
    assert_eq!(merged.2, newest.2, "the newest sample's latency");
    assert_eq!(
        merged.3,
        samples.iter().map(|s| s.3).max().unwrap(),
        "highest max"
    );
    assert!(merged.3 >= 60, "{merged:?}");

    let history: Vec<(i64, i64)> = redis::cmd("LATENCY")
        .arg("HISTORY")
        .arg("command")
        .query(&mut con)
        .unwrap();
    let mut expected: Vec<(i64, i64)> = masters
        .iter()
        .flat_map(|master| {
            query::<Vec<(i64, i64)>>(master, redis::cmd("LATENCY").arg("HISTORY").arg("command"))
                .unwrap()
        })
        .collect();
    expected.sort();
    assert_eq!(history, expected);
    assert!(history.len() >= 3, "{history:?}");

    // LATENCY HISTOGRAM: each command's calls and cumulative distribution, summed.
    for i in 0..60 {
        let _: () = redis::cmd("SET")
            .arg(format!("histogram:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let histograms: Vec<(i64, Vec<(i64, i64)>)> = masters
        .iter()
        .map(|master| {
            let reply: redis::Value =
                query(master, redis::cmd("LATENCY").arg("HISTOGRAM").arg("set")).unwrap();
            set_histogram(&reply)
        })
        .collect();
    assert!(
        histograms.iter().all(|(calls, _)| *calls > 0),
        "every master ran some SETs: {histograms:?}"
    );
    let reply: redis::Value = redis::cmd("LATENCY")
        .arg("HISTOGRAM")
        .arg("set")
        .query(&mut con)
        .unwrap();
    let (calls, cumulative) = set_histogram(&reply);
    assert_eq!(calls, histograms.iter().map(|(c, _)| c).sum::<i64>());
    assert_eq!(
        cumulative.last().map(|(_, n)| *n),
        Some(calls),
        "{cumulative:?}"
    );
    for (bound, count) in &cumulative {
        let expected: i64 = histograms
            .iter()
            .map(|(_, dist)| {
                dist.iter()
                    .take_while(|(b, _)| b <= bound)
                    .last()
                    .map_or(0, |(_, n)| *n)
            })
            .sum();
        assert_eq!(
            *count, expected,
            "at {bound} us: {cumulative:?} from {histograms:?}"
        );
    }

    // LASTSAVE is the oldest: the masters started together, one saved seconds later.
    let _: () = query(&masters[1], &redis::cmd("SAVE")).unwrap();
    let saved: Vec<i64> = masters
        .iter()
        .map(|master| query(master, &redis::cmd("LASTSAVE")).unwrap())
        .collect();
    let oldest = *saved.iter().min().unwrap();
    assert!(saved[1] > oldest, "{saved:?}");
    for _ in &masters {
        let lastsave: i64 = redis::cmd("LASTSAVE").query(&mut con).unwrap();
        assert_eq!(lastsave, oldest, "{saved:?}");
    }

    let reset: i64 = redis::cmd("LATENCY").arg("RESET").query(&mut con).unwrap();
    let events: usize = per_master.iter().map(Vec::len).sum();
    assert_eq!(reset, events as i64);
    let after: Latest = redis::cmd("LATENCY").arg("LATEST").query(&mut con).unwrap();
    assert!(after.is_empty(), "{after:?}");
}

/// `LATENCY HISTOGRAM set` (RESP2) as the SET calls and the cumulative distribution.
fn set_histogram(reply: &redis::Value) -> (i64, Vec<(i64, i64)>) {
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    };
    let redis::Value::Array(top) = reply else {
        panic!("{reply:?}")
    };
    let redis::Value::Array(details) = &top[1] else {
        panic!("{reply:?}")
    };
    let redis::Value::Array(buckets) = &details[3] else {
        panic!("{reply:?}")
    };
    let cumulative = buckets
        .chunks(2)
        .map(|p| (int(&p[0]), int(&p[1])))
        .collect();
    (int(&details[1]), cumulative)
}

/// MEMORY STATS of the proxy is the masters' stats added up: the key counts and per-database
/// overheads exactly (nothing else writes to this cluster), the byte counts within what the
/// masters' own allocations move between the calls, and the percentages recomputed.
#[test]
fn memory_stats_adds_up_every_master() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    let keys: Vec<String> = (0..300).map(|i| format!("memstats:{i}")).collect();
    write_keys(&mut con, &keys);
    let stats = |value: redis::Value| -> HashMap<String, redis::Value> {
        let redis::Value::Array(items) = value else {
            panic!("MEMORY STATS: {value:?}")
        };
        items
            .chunks_exact(2)
            .map(|pair| (redis::from_redis_value(&pair[0]).unwrap(), pair[1].clone()))
            .collect()
    };
    let int = |value: &redis::Value| -> i64 { redis::from_redis_value(value).unwrap() };
    let through_proxy = stats(redis::cmd("MEMORY").arg("STATS").query(&mut con).unwrap());
    let masters: Vec<HashMap<String, redis::Value>> = cluster
        .masters()
        .iter()
        .map(|m| stats(query(m, redis::cmd("MEMORY").arg("STATS")).unwrap()))
        .collect();
    let summed = |name: &str| masters.iter().map(|m| int(&m[name])).sum::<i64>();
    assert_eq!(int(&through_proxy["keys.count"]), 300);
    assert_eq!(summed("keys.count"), 300);
    let db0 = stats(through_proxy["db.0"].clone());
    let masters_db0: i64 = masters
        .iter()
        .map(|m| int(&stats(m["db.0"].clone())["overhead.hashtable.main"]))
        .sum();
    assert_eq!(int(&db0["overhead.hashtable.main"]), masters_db0);
    let total = int(&through_proxy["total.allocated"]) as f64;
    let masters_total = summed("total.allocated") as f64;
    assert!(
        (total - masters_total).abs() < masters_total * 0.05,
        "total.allocated {total} through the proxy, {masters_total} summed"
    );
    let net = total - int(&through_proxy["startup.allocated"]) as f64;
    assert_eq!(
        int(&through_proxy["keys.bytes-per-key"]),
        (net / 300.0) as i64,
        "bytes per key from the sums"
    );
    let peak: f64 = redis::from_redis_value(&through_proxy["peak.percentage"]).unwrap();
    let expected = total * 100.0 / int(&through_proxy["peak.allocated"]) as f64;
    assert!((peak - expected).abs() < 0.01, "{peak} vs {expected}");
}
