//! Lua scripts and functions through the proxy on real clusters: a script loaded through
//! the proxy keeps working by SHA after its slot moves to a master that does not have it;
//! SCRIPT LOAD/EXISTS/FLUSH and FUNCTION LOAD/DELETE reach every master; FCALL works on
//! keys of every master.

mod common;

use std::time::{Duration, Instant};

use common::{query, shared_cluster, Cluster, Proxy};

const GET_SCRIPT: &str = "return redis.call('GET', KEYS[1])";

fn script_exists(addr: &str, sha: &str) -> bool {
    let flags: Vec<i64> = query(addr, redis::cmd("SCRIPT").arg("EXISTS").arg(sha)).unwrap();
    flags == vec![1]
}

/// A key owned by each master of `cluster`, in the order of `cluster.masters()`.
fn key_per_master(cluster: &Cluster, prefix: &str) -> Vec<String> {
    cluster
        .masters()
        .iter()
        .map(|master| {
            (0..10_000)
                .map(|i| format!("{prefix}:{i}"))
                .find(|key| cluster.node_for_slot(cluster.keyslot(key)) == *master)
                .expect("a key on every master")
        })
        .collect()
}

#[test]
fn evalsha_survives_a_slot_move_to_a_master_without_the_script() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();

    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(GET_SCRIPT)
        .query(&mut con)
        .unwrap();
    for master in cluster.masters() {
        assert!(script_exists(&master, &sha), "SCRIPT LOAD missed {master}");
    }
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .arg("0000000000000000000000000000000000000000")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![1, 0]);

    let key = "script:moving";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("before")
        .query(&mut con)
        .unwrap();
    let slot = cluster.keyslot(key);
    let from = cluster.node_for_slot(slot);
    let to = cluster.masters().into_iter().find(|m| *m != from).unwrap();
    // The target must really lack the script.
    let _: () = query(&to, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    assert!(!script_exists(&to, &sha));
    cluster.migrate_slot(slot, &to);

    let value: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg(key)
        .query(&mut con)
        .unwrap();
    assert_eq!(value, "before");
    assert!(
        script_exists(&to, &sha),
        "the proxy did not load the script on {to}"
    );

    // A body seen only through EVAL is remembered too.
    let body = "return 'from eval'";
    let answer: String = redis::cmd("EVAL")
        .arg(body)
        .arg(1)
        .arg(key)
        .query(&mut con)
        .unwrap();
    assert_eq!(answer, "from eval");
    for master in cluster.masters() {
        let _: () = query(&master, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    }
    let eval_sha: String = query(&from, redis::cmd("SCRIPT").arg("LOAD").arg(body)).unwrap();
    let _: () = query(&from, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    let again: String = redis::cmd("EVALSHA")
        .arg(&eval_sha)
        .arg(1)
        .arg(key)
        .query(&mut con)
        .unwrap();
    assert_eq!(again, "from eval");

    // SCRIPT FLUSH through the proxy: gone everywhere, and no longer reloadable.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    for master in cluster.masters() {
        assert!(!script_exists(&master, &eval_sha));
    }
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&eval_sha)
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, vec![0]);
    let missing: redis::RedisResult<String> = redis::cmd("EVALSHA")
        .arg(&eval_sha)
        .arg(1)
        .arg(key)
        .query(&mut con);
    let error = missing.expect_err("flushed script still ran");
    assert_eq!(error.code(), Some("NOSCRIPT"), "{error}");
}

#[test]
fn functions_load_everywhere_and_run_on_every_master() {
    let cluster = shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    let library = "#!lua name=fanoutlib\n\
                   redis.register_function{function_name='fan_get', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n\
                   redis.register_function('fan_set', function(keys, args) return redis.call('SET', keys[1], args[1]) end)";
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library)
        .query(&mut con)
        .unwrap();
    assert_eq!(name, "fanoutlib");
    // Loading again without REPLACE fails as on one server.
    let again: redis::RedisResult<String> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut con);
    assert!(again.is_err());

    for (i, key) in key_per_master(cluster, "fn").iter().enumerate() {
        let _: () = redis::cmd("FCALL")
            .arg("fan_set")
            .arg(1)
            .arg(key)
            .arg(format!("value-{i}"))
            .query(&mut con)
            .unwrap();
        let value: String = redis::cmd("FCALL_RO")
            .arg("fan_get")
            .arg(1)
            .arg(key)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("FCALL_RO on {key}: {e}"));
        assert_eq!(value, format!("value-{i}"));
    }

    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("fanoutlib")
        .query(&mut con)
        .unwrap();
    for master in cluster.masters() {
        let libraries: Vec<redis::Value> =
            query(&master, redis::cmd("FUNCTION").arg("LIST")).unwrap();
        assert!(libraries.is_empty(), "{master} still has {libraries:?}");
    }
}

/// A node that lost its scripts (a restart, a replica just promoted) and every connection
/// gets the scripts clients used from the proxy's new connection before any request: a
/// pipelined EVALSHA then runs where it was sent, before the requests behind it (a NOSCRIPT
/// answer would have it loaded and sent again after them).
#[test]
fn a_node_gets_the_scripts_back_when_the_proxy_reconnects() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "scr3:{preload}";
    let node = cluster.node_for_slot(cluster.keyslot(key));
    let mut con = proxy.connect();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('INCR', KEYS[1])")
        .query(&mut con)
        .unwrap();
    redis::cmd("SET").arg(key).arg(0).exec(&mut con).unwrap();

    query::<()>(&node, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    let killed: i64 = query(
        &node,
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"),
    )
    .unwrap();
    assert!(killed >= 1, "the proxy's connections to {node} are gone");
    assert!(!script_exists(&node, &sha));
    // The first request may meet the closed connection; the proxy then opens a new one.
    common::wait_until("the proxy to reconnect", Duration::from_secs(5), || {
        redis::cmd("GET").arg(key).query::<String>(&mut con).is_ok()
    });
    assert!(
        script_exists(&node, &sha),
        "loaded again on the new connection"
    );

    let pipeline = [format!("EVALSHA {sha} 1 {key}"), format!("GET {key}")];
    let lines: Vec<&str> = pipeline.iter().map(String::as_str).collect();
    let replies = common::Raw::connect(proxy.addr()).pipeline(&common::resp_lines(&lines), 2);
    assert_eq!(replies, vec![b":1\r\n".to_vec(), b"$1\r\n1\r\n".to_vec()]);
}

/// SCRIPT KILL and FUNCTION KILL, once allowed, stop a script that runs forever on a master:
/// the proxy asks each master on a connection of its own, since the node stops reading the
/// connection the script came on until it ends. The script's client gets Redis's error;
/// another client of that master got the node's `-BUSY` meanwhile, as on one Redis (the
/// script held only a connection of its own), and its reply after the kill.
#[test]
fn script_kill_and_function_kill_stop_a_busy_script() {
    let cluster = Cluster::start(3, 0);
    for master in cluster.masters() {
        // Redis reads other connections during a script only after this long.
        query::<()>(
            &master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("busy-reply-threshold")
                .arg("100"),
        )
        .unwrap();
    }
    let proxy = Proxy::start(&[
        "--cluster",
        &cluster.seeds_arg(),
        "--set",
        "commands.allow=[script|kill, function|kill]",
    ]);
    let mut operator = common::Raw::connect(proxy.addr());
    assert!(
        operator.call(&["SCRIPT", "KILL"]).starts_with("-NOTBUSY "),
        "nothing runs yet"
    );
    let key = "kill:spin";
    let mut other = common::Raw::connect(proxy.addr());
    assert_eq!(other.call(&["SET", key, "before"]), "+OK\r\n");

    let library =
        "#!lua name=spinlib\nredis.register_function('spin', function(keys) while true do end end)";
    assert_eq!(
        operator.call(&["FUNCTION", "LOAD", library]),
        "$7\r\nspinlib\r\n"
    );
    let runs: [(&[&str], &str); 2] = [
        (&["EVAL", "while true do end", "1", key], "SCRIPT"),
        (&["FCALL", "spin", "1", key], "FUNCTION"),
    ];
    for (command, kill) in runs {
        let mut spinner = common::Raw::connect(proxy.addr());
        spinner.send(command);
        std::thread::sleep(Duration::from_millis(300));
        let busy = other.call(&["GET", key]);
        assert!(
            busy.starts_with("-BUSY Redis is busy running a script. You can only call")
                && busy.contains(&format!(" {kill} KILL ")),
            "{busy}"
        );
        let started = Instant::now();
        assert_eq!(operator.call(&[kill, "KILL"]), "+OK\r\n", "{kill} KILL");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{kill} KILL waited {:?}",
            started.elapsed()
        );
        let killed = spinner.read_reply();
        assert!(
            killed.starts_with("-ERR ") && killed.contains("killed by user"),
            "{command:?}: {killed}"
        );
        assert_eq!(
            other.call(&["GET", key]),
            "$6\r\nbefore\r\n",
            "after {kill} KILL"
        );
    }
}

/// A master that joins after FUNCTION LOAD has no libraries: FCALL for a key that moved
/// there still runs, because the proxy copies the libraries over when the node says
/// "Function not found". A function no master has still gets the node's error.
#[test]
fn fcall_works_on_a_master_that_joined_after_function_load() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    let library = "#!lua name=joinlib\n\
                   redis.register_function('join_incr', function(keys, args) return redis.call('INCR', keys[1]) end)";
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut con)
        .unwrap();
    assert_eq!(name, "joinlib");
    let key = "fn:joined";
    let incr = |con: &mut redis::Connection| -> redis::RedisResult<i64> {
        redis::cmd("FCALL")
            .arg("join_incr")
            .arg(1)
            .arg(key)
            .query(con)
    };
    assert_eq!(incr(&mut con).unwrap(), 1);

    let joined = cluster.add_master();
    let listed = |addr: &str| -> usize {
        query::<Vec<redis::Value>>(addr, redis::cmd("FUNCTION").arg("LIST"))
            .unwrap()
            .len()
    };
    assert_eq!(listed(&joined), 0, "a new master starts without libraries");
    cluster.migrate_slot(cluster.keyslot(key), &joined);
    assert_eq!(incr(&mut con).unwrap(), 2, "FCALL on the new master");
    assert_eq!(listed(&joined), 1, "the library was copied to {joined}");

    let missing: redis::RedisResult<i64> = redis::cmd("FCALL")
        .arg("nowhere")
        .arg(1)
        .arg(key)
        .query(&mut con);
    let error = missing.expect_err("a function no master has");
    assert!(error.to_string().contains("Function not found"), "{error}");
}

/// EVAL and EVALSHA go out in the client's batches with its other commands: in a pipeline
/// they keep their place (each script sees the writes before it, and the reads after it see
/// its own), across every master.
#[test]
fn pipelined_scripts_keep_their_place_among_other_commands() {
    let cluster = common::shared_cluster();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut con = proxy.connect();
    let append = "redis.call('APPEND', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(append)
        .query(&mut con)
        .unwrap();
    let keys = key_per_master(cluster, "pipelined-script");
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("SET").arg(key).arg("a");
        pipe.cmd("EVALSHA").arg(&sha).arg(1).arg(key).arg("b");
        pipe.cmd("APPEND").arg(key).arg("c");
        pipe.cmd("EVAL").arg(append).arg(1).arg(key).arg("d");
        pipe.cmd("GET").arg(key);
    }
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    for (key, five) in keys.iter().zip(replies.chunks(5)) {
        let got: Vec<String> = five
            .iter()
            .map(|v| match v {
                redis::Value::Int(n) => n.to_string(),
                other => redis::from_redis_value(other).unwrap(),
            })
            .collect();
        assert_eq!(got, ["OK", "ab", "3", "abcd", "abcd"], "{key}");
    }
}
