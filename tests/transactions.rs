//! MULTI/EXEC/DISCARD/WATCH through the proxy against a real 3-master cluster: replies
//! compared byte for byte with a single redis-server running the same transaction, the
//! cross-slot rule compared with a cluster node, `cross_slot_transactions: split`, WATCH
//! with and without a concurrent change, and RESET leaving MULTI.

mod common;

use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::Duration;

use common::{
    exchange_on, new_dir, query, resp_lines, shared_cluster, transcript, wait_until, Proxy,
    Standalone,
};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

fn split_proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        let path = new_dir("txn-config").join("split.yaml");
        std::fs::write(&path, "cross_slot_transactions: split\n").unwrap();
        Proxy::start(&[
            "--cluster",
            &shared_cluster().seeds_arg(),
            "--config",
            path.to_str().unwrap(),
        ])
    })
}

fn standalone() -> &'static Standalone {
    static SERVER: OnceLock<Standalone> = OnceLock::new();
    SERVER.get_or_init(Standalone::start)
}

/// Runs `script` through `proxy_addr` and on the standalone server, asserts the two
/// transcripts are identical, and returns the server's.
fn proxy_matches_redis(proxy_addr: &str, script: &[&str]) -> String {
    let through_proxy = transcript(proxy_addr, script);
    let direct = transcript(standalone().addr(), script);
    assert_eq!(through_proxy, direct);
    direct
}

#[test]
fn same_slot_transaction_matches_a_single_redis_byte_for_byte() {
    let script = [
        "MULTI",
        "SET {txn1}a 1",
        "INCR {txn1}a",
        "SET {txn1}s text",
        "INCR {txn1}s",
        "GET {txn1}a",
        "PING",
        "EXEC",
        "GET {txn1}a",
    ];
    let direct = proxy_matches_redis(proxy().addr(), &script);
    // A real answer, not two identical failures: INCR on a string fails inside EXEC only.
    assert!(direct.contains("+QUEUED") && direct.contains("-ERR value is not an integer"));
    assert!(direct.ends_with("$1\r\n2\r\n"), "{direct:?}");
}

#[test]
fn queue_time_errors_abort_exec_as_redis_does() {
    let script = [
        "EXEC",
        "DISCARD",
        "MULTI",
        "MULTI",
        "WATCH {txn2}a",
        "GET",
        "NOSUCHCOMMAND x y",
        "SET {txn2}a 1",
        "EXEC",
        "GET {txn2}a",
        "MULTI",
        "EXEC",
        "MULTI",
        "SET {txn2}b 1",
        "DISCARD",
        "GET {txn2}b",
        "MULTI",
        "SET {txn2}c 1",
        "RESET",
        "EXEC",
        "GET {txn2}c",
    ];
    let direct = proxy_matches_redis(proxy().addr(), &script);
    assert!(direct.contains("-EXECABORT Transaction discarded because of previous errors."));
    assert!(direct.contains("+RESET"));
}

/// An EXEC that Redis rejects (wrong arity) ends the transaction with EXECABORT.
#[test]
fn a_rejected_exec_discards_the_transaction_as_redis_does() {
    let script = [
        "MULTI",
        "SET {txn9}a 1",
        "EXEC extra",
        "GET {txn9}a",
        "EXEC",
    ];
    let direct = proxy_matches_redis(proxy().addr(), &script);
    assert!(direct.contains("-EXECABORT Transaction discarded because of: wrong number"));
    assert!(
        direct.ends_with("-ERR EXEC without MULTI\r\n"),
        "{direct:?}"
    );
}

/// Commands the proxy runs on every master cannot join one node's MULTI block: each is
/// refused at queue time (and fails the EXEC) instead of acting on, or counting, one
/// master's keys.
#[test]
fn commands_that_span_every_master_are_refused_inside_multi() {
    for command in [
        "DBSIZE",
        "KEYS *",
        "SCAN 0",
        "RANDOMKEY",
        "INFO keyspace",
        "SCRIPT EXISTS abc",
        "SLOWLOG LEN",
        "SORT {txn10}l BY w_*",
        "SORT_RO {txn10}l GET o_*",
    ] {
        let lines = ["MULTI", "SET {txn10}a 1", command, "EXEC", "GET {txn10}a"];
        let out = transcript(proxy().addr(), &lines);
        let name = command.split(' ').next().unwrap().to_lowercase();
        assert!(
            out.contains(&format!("-ERR proxy: '{name}"))
                && out.contains("not supported inside MULTI"),
            "{command}: {out:?}"
        );
        assert!(out.contains("-EXECABORT"), "{command}: {out:?}");
        assert!(out.ends_with("$-1\r\n"), "{command}: the SET ran: {out:?}");
    }
}

/// Connection commands the proxy answers itself (SELECT, CLIENT SETNAME/GETNAME, ACL
/// WHOAMI) are queued like any other and answered in their places inside EXEC's reply,
/// after the block ran, in both transaction modes; a transaction that EXECABORTs runs none
/// of them.
#[test]
fn connection_commands_queue_and_answer_in_their_places_as_redis_does() {
    for (addr, tag) in [(proxy().addr(), "txn11"), (split_proxy().addr(), "txn12")] {
        let set = format!("SET {{{tag}}}a 1");
        let incr = format!("INCR {{{tag}}}a");
        let script = [
            "MULTI",
            "CLIENT SETNAME before",
            &set,
            "SELECT 0",
            "CLIENT GETNAME",
            &incr,
            "SELECT abc",
            "CLIENT SETNAME after",
            "ACL WHOAMI",
            "EXEC",
            "CLIENT GETNAME",
            // Only connection commands: no backend block to wait for.
            "MULTI",
            "CLIENT GETNAME",
            "CLIENT SETNAME only",
            "EXEC",
            "CLIENT GETNAME",
            // A discarded transaction changes nothing.
            "MULTI",
            "CLIENT SETNAME discarded",
            "GET",
            "EXEC",
            "CLIENT GETNAME",
        ];
        let direct = proxy_matches_redis(addr, &script);
        assert!(
            direct.contains(
                "*8\r\n+OK\r\n+OK\r\n+OK\r\n$6\r\nbefore\r\n:2\r\n-ERR value is not an integer"
            ),
            "{direct:?}"
        );
        assert!(
            direct.contains("$7\r\ndefault\r\n$5\r\nafter\r\n"),
            "{direct:?}"
        );
        assert!(
            direct.ends_with(
                "-EXECABORT Transaction discarded because of previous errors.\r\n$4\r\nonly\r\n"
            ),
            "{direct:?}"
        );
    }
}

/// CLIENT REPLY and CLIENT KILL change how the session itself goes on, which an EXEC reply
/// cannot carry: refused when queued, and the EXEC aborts.
#[test]
fn client_reply_and_kill_are_refused_inside_multi() {
    for command in ["CLIENT REPLY OFF", "CLIENT KILL 127.0.0.1:1"] {
        let lines = ["MULTI", "SET {txn13}a 1", command, "EXEC", "GET {txn13}a"];
        let out = transcript(proxy().addr(), &lines);
        assert!(
            out.contains("not supported inside MULTI"),
            "{command}: {out:?}"
        );
        assert!(out.contains("-EXECABORT"), "{command}: {out:?}");
        assert!(out.ends_with("$-1\r\n"), "{command}: the SET ran: {out:?}");
    }
}

/// An EXEC that fails its WATCH answers null and runs none of its commands, the
/// connection's own included.
#[test]
fn a_failed_watch_runs_no_queued_connection_command() {
    let mut con = proxy().client().get_connection().unwrap();
    let mut other = proxy().client().get_connection().unwrap();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("kept")
        .exec(&mut con)
        .unwrap();
    redis::cmd("WATCH").arg("{txn14}w").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg("{txn14}w")
        .arg("changed")
        .exec(&mut other)
        .unwrap();
    redis::cmd("MULTI").exec(&mut con).unwrap();
    for args in [&["SETNAME", "lost"][..], &["GETNAME"]] {
        let queued: String = redis::cmd("CLIENT").arg(args).query(&mut con).unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let exec: redis::Value = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(exec, redis::Value::Nil);
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut con).unwrap();
    assert_eq!(name, "kept");
}

#[test]
fn resp3_transaction_matches_a_single_redis() {
    let script = [
        "MULTI",
        "HSET {txn3}h f v",
        "HGETALL {txn3}h",
        "CLIENT GETNAME",
        "GET {txn3}missing",
        "EXEC",
    ];
    let run = |addr: &str| {
        let mut stream = TcpStream::connect(addr).unwrap();
        let hello = exchange_on(
            &mut stream,
            &resp_lines(&["HELLO 3"]),
            Duration::from_millis(300),
        );
        assert!(hello.starts_with(b"%"), "{hello:?}");
        let out = exchange_on(
            &mut stream,
            &resp_lines(&script),
            Duration::from_millis(400),
        );
        String::from_utf8_lossy(&out).into_owned()
    };
    let direct = run(standalone().addr());
    assert!(
        // CLIENT GETNAME's null (answered by the proxy) next to GET's (by the node).
        direct.contains("%1\r\n") && direct.contains("_\r\n_\r\n"),
        "{direct:?}"
    );
    assert_eq!(run(proxy().addr()), direct);
}

/// Two keys of different slots served by different masters.
fn keys_on_two_masters(prefix: &str) -> (String, String) {
    let cluster = shared_cluster();
    let first = format!("{prefix}:0");
    let owner = cluster.node_for_slot(cluster.keyslot(&first));
    for i in 1..200 {
        let other = format!("{prefix}:{i}");
        if cluster.node_for_slot(cluster.keyslot(&other)) != owner {
            return (first, other);
        }
    }
    panic!("no key on another master");
}

#[test]
fn cross_slot_transaction_is_refused_like_a_cluster_node() {
    let (a, b) = keys_on_two_masters("txn4");
    let script = [
        "MULTI",
        &format!("SET {a} 1"),
        &format!("SET {b} 1"),
        "EXEC",
    ];
    let through_proxy = transcript(proxy().addr(), &script);
    let lines: Vec<&str> = through_proxy.split("\r\n").collect();
    assert_eq!(lines[0], "+OK");
    assert_eq!(lines[1], "+QUEUED");
    assert!(
        lines[2].starts_with("-CROSSSLOT Keys in request don't hash to the same slot"),
        "{through_proxy:?}"
    );
    assert!(lines[2].contains(&a) && lines[2].contains(&b));
    // A cluster node refuses the second key at queue time too (it is not served there),
    // and its EXEC is the same EXECABORT.
    let node = shared_cluster().node_for_slot(shared_cluster().keyslot(&a));
    let direct = transcript(&node, &script);
    let direct_lines: Vec<&str> = direct.split("\r\n").collect();
    assert!(direct_lines[2].starts_with("-MOVED"), "{direct:?}");
    assert_eq!(lines[3], direct_lines[3]);
    assert_eq!(
        lines[3],
        "-EXECABORT Transaction discarded because of previous errors."
    );
    let value: Option<String> = query(proxy().addr(), redis::cmd("GET").arg(&a)).unwrap();
    assert_eq!(value, None, "nothing of the refused transaction ran");
}

#[test]
fn split_mode_runs_each_slot_and_answers_in_command_order() {
    let (a, b) = keys_on_two_masters("txn5");
    let script = [
        "MULTI",
        &format!("SET {a} 1"),
        &format!("SET {b} 2"),
        &format!("INCR {a}"),
        "PING",
        &format!("GET {b}"),
        "EXEC",
    ];
    let direct = proxy_matches_redis(split_proxy().addr(), &script);
    assert!(direct.ends_with("*5\r\n+OK\r\n+OK\r\n:2\r\n+PONG\r\n$1\r\n2\r\n"));
}

/// Under `split` a transaction may leave the watched slot: every watch is checked before
/// any slot runs (see tests/transactions_watch_split.rs), and the replies are Redis's.
#[test]
fn split_mode_runs_a_transaction_beyond_the_watched_slot_as_redis_does() {
    let (a, b) = keys_on_two_masters("txn6");
    let direct = proxy_matches_redis(
        split_proxy().addr(),
        &[
            &format!("WATCH {a}"),
            "MULTI",
            &format!("SET {b} 1"),
            &format!("SET {a} 2"),
            "EXEC",
        ],
    );
    assert_eq!(
        direct,
        "+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n+OK\r\n"
    );
}

/// Runs `MULTI`, `SET key value`, `EXEC` on `con` and returns EXEC's reply.
fn set_in_transaction(con: &mut redis::Connection, key: &str, value: &str) -> redis::Value {
    redis::cmd("MULTI").exec(con).unwrap();
    redis::cmd("SET").arg(key).arg(value).exec(con).unwrap();
    redis::cmd("EXEC").query(con).unwrap()
}

#[test]
fn watch_detects_a_change_from_another_client() {
    let mut watcher = proxy().connect();
    let mut other = proxy().connect();
    let key = "txn7:{w}";
    redis::cmd("SET")
        .arg(key)
        .arg("0")
        .exec(&mut other)
        .unwrap();

    redis::cmd("WATCH").arg(key).exec(&mut watcher).unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg("changed")
        .exec(&mut other)
        .unwrap();
    let exec = set_in_transaction(&mut watcher, key, "mine");
    assert_eq!(
        exec,
        redis::Value::Nil,
        "EXEC after a watched change is null"
    );
    let value: String = redis::cmd("GET").arg(key).query(&mut other).unwrap();
    assert_eq!(value, "changed");

    redis::cmd("WATCH").arg(key).exec(&mut watcher).unwrap();
    let exec = set_in_transaction(&mut watcher, key, "mine");
    assert_eq!(exec, redis::Value::Array(vec![redis::Value::Okay]));
    let value: String = redis::cmd("GET").arg(key).query(&mut other).unwrap();
    assert_eq!(value, "mine");
}

/// Connections on `node` whose last command was `command`.
fn connections_running(node: &str, command: &str) -> usize {
    let list: String = query(node, redis::cmd("CLIENT").arg("LIST")).unwrap();
    list.lines()
        .filter(|line| line.contains(&format!(" cmd={command} ")))
        .count()
}

/// Ids of the connections on `node` whose last command was `command`.
fn connection_ids_running(node: &str, command: &str) -> Vec<String> {
    let list: String = query(node, redis::cmd("CLIENT").arg("LIST")).unwrap();
    list.lines()
        .filter(|line| line.contains(&format!(" cmd={command} ")))
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The server forgets a connection's watched keys with the connection: once the pinned
/// connection is gone, a later WATCH must not open a new one that EXEC then trusts, or a
/// change made in between would go unseen.
#[test]
fn a_watch_survives_no_reconnect_of_its_pinned_connection() {
    // An upstream of its own, so the only WATCH connection on it is this test's.
    let server = Standalone::start();
    let proxy = Proxy::start(&["--standalone", server.addr()]);
    let mut watcher = proxy.connect();
    let key = "txn10:lost-pin";
    query::<()>(server.addr(), redis::cmd("SET").arg(key).arg("0")).unwrap();

    redis::cmd("WATCH").arg(key).exec(&mut watcher).unwrap();
    let pinned = connection_ids_running(server.addr(), "watch");
    assert_eq!(pinned.len(), 1, "one pinned connection: {pinned:?}");
    let killed: i64 = query(
        server.addr(),
        redis::cmd("CLIENT").arg("KILL").arg("ID").arg(&pinned[0]),
    )
    .unwrap();
    assert_eq!(killed, 1);
    query::<()>(server.addr(), redis::cmd("SET").arg(key).arg("changed")).unwrap();

    // Redis answers a second WATCH with OK whatever happened since the first.
    redis::cmd("WATCH").arg(key).exec(&mut watcher).unwrap();
    let exec = set_in_transaction(&mut watcher, key, "mine");
    assert_eq!(
        exec,
        redis::Value::Nil,
        "EXEC is null: the first WATCH's connection is gone with what it watched"
    );
    let value: String = query(server.addr(), redis::cmd("GET").arg(key)).unwrap();
    assert_eq!(value, "changed");
}

#[test]
fn unwatch_discard_and_reset_release_the_pinned_connection() {
    let key = "txn8:{pin}";
    let node = shared_cluster().node_for_slot(shared_cluster().keyslot(key));
    for release in ["UNWATCH", "DISCARD", "RESET"] {
        let before = connections_running(&node, "watch");
        let mut stream = TcpStream::connect(proxy().addr()).unwrap();
        let mut lines = vec![format!("WATCH {key}")];
        if release == "DISCARD" {
            lines.push("MULTI".into());
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        exchange_on(&mut stream, &resp_lines(&lines), Duration::from_millis(300));
        assert_eq!(connections_running(&node, "watch"), before + 1, "{release}");
        let answer = exchange_on(
            &mut stream,
            &resp_lines(&[release]),
            Duration::from_millis(300),
        );
        assert!(answer.starts_with(b"+"), "{release}: {answer:?}");
        wait_until(
            &format!("{release} to release the pin"),
            Duration::from_secs(3),
            || connections_running(&node, "watch") <= before,
        );
    }
}

#[test]
fn atomic_pipeline_over_unrelated_keys_needs_split_mode() {
    let (a, b) = keys_on_two_masters("txn9");
    let mut refused = proxy().connect();
    let result: redis::RedisResult<(String, String)> = redis::pipe()
        .atomic()
        .set(&a, "1")
        .set(&b, "2")
        .get(&a)
        .get(&b)
        .query(&mut refused);
    let error = result.expect_err("cross-slot transaction refused by default");
    let text = error.to_string().to_ascii_lowercase();
    assert!(
        text.contains("execabort") || text.contains("crossslot"),
        "{error}"
    );

    let mut split = split_proxy().connect();
    let ((), (), got_a, got_b): ((), (), String, String) = redis::pipe()
        .atomic()
        .set(&a, "1")
        .set(&b, "2")
        .get(&a)
        .get(&b)
        .query(&mut split)
        .expect("split transaction");
    assert_eq!((got_a.as_str(), got_b.as_str()), ("1", "2"));
}

#[test]
fn exec_follows_a_moved_slot_but_a_watch_on_it_fails() {
    let cluster = common::Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "txn10:{moving}";
    let slot = cluster.keyslot(key);
    let owner = cluster.node_for_slot(slot);
    let target = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    let mut con = proxy.connect();
    redis::cmd("SET").arg(key).arg("1").exec(&mut con).unwrap();
    let mut watcher = proxy.connect();
    redis::cmd("WATCH").arg(key).exec(&mut watcher).unwrap();

    // The slot moves behind the proxy's back; the next EXEC meets MOVED at queue time.
    cluster.migrate_slot(slot, &target);
    let exec: redis::Value = redis::pipe().atomic().incr(key, 1).query(&mut con).unwrap();
    assert_eq!(exec, redis::Value::Array(vec![redis::Value::Int(2)]));

    // The watched keys lived on the old owner: EXEC answers as after a watched change.
    redis::cmd("MULTI").exec(&mut watcher).unwrap();
    redis::cmd("INCR").arg(key).exec(&mut watcher).unwrap();
    let exec: redis::Value = redis::cmd("EXEC").query(&mut watcher).unwrap();
    assert_eq!(exec, redis::Value::Nil);
    let value: i64 = query(&target, redis::cmd("GET").arg(key)).unwrap();
    assert_eq!(value, 2, "the failed WATCH transaction did not run");
}
