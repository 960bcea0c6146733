//! The core proxy against a real 3-master cluster: plain (non-cluster) clients, the
//! commands the proxy answers itself, RESP3, inline commands, and protocol errors compared
//! byte for byte with a real redis-server.

mod common;

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::{exchange, shared_cluster, transcript, Proxy, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// Sends `lines` through the proxy and to a standalone redis-server, asserts the two
/// transcripts are identical, and returns the proxy's.
fn proxy_matches_redis(lines: &[&str]) -> String {
    static SERVER: OnceLock<Standalone> = OnceLock::new();
    let server = SERVER.get_or_init(Standalone::start);
    let through_proxy = transcript(proxy().addr(), lines);
    assert_eq!(through_proxy, transcript(server.addr(), lines));
    through_proxy
}

#[test]
fn ten_thousand_keys_through_a_plain_client() {
    let mut con = proxy().client().get_connection().expect("connect to proxy");
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("SET")
            .arg(format!("core:key:{i}"))
            .arg(format!("value-{i}"))
            .ignore();
    }
    pipe.query::<()>(&mut con).expect("10,000 SETs");
    let mut get = redis::pipe();
    for i in 0..10_000 {
        get.cmd("GET").arg(format!("core:key:{i}"));
    }
    let values: Vec<String> = get.query(&mut con).expect("10,000 GETs");
    for (i, value) in values.iter().enumerate() {
        assert_eq!(value, &format!("value-{i}"), "key core:key:{i}");
    }
    // The keys really are spread over every master.
    for master in shared_cluster().masters() {
        let count: usize =
            common::query(&master, redis::cmd("DBSIZE").arg(&[] as &[&str])).unwrap();
        assert!(count > 2000, "{master} holds only {count} keys");
    }
}

#[test]
fn redis_cli_without_cluster_mode() {
    let port = proxy().addr().rsplit_once(':').unwrap().1.to_string();
    for i in 0..20 {
        let set = Command::new("redis-cli")
            .args(["-p", &port, "SET", &format!("cli:{i}"), &format!("v{i}")])
            .output()
            .expect("redis-cli runs");
        assert_eq!(String::from_utf8_lossy(&set.stdout).trim(), "OK");
        let get = Command::new("redis-cli")
            .args(["-p", &port, "GET", &format!("cli:{i}")])
            .output()
            .expect("redis-cli runs");
        assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), format!("v{i}"));
    }
}

#[test]
fn hello_3_then_hgetall_is_a_map() {
    let addr = proxy().addr();
    let (reply, _) = exchange(
        addr,
        b"*4\r\n$4\r\nHSET\r\n$7\r\ncore:h3\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$7\r\nHGETALL\r\n$7\r\ncore:h3\r\n",
        Duration::from_millis(500),
    );
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with(":"), "HSET reply first: {text}");
    assert!(text.contains("%7\r\n"), "HELLO 3 answers a map: {text}");
    assert!(
        text.ends_with("%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
        "HGETALL in RESP3 is a map: {text}"
    );
    // HELLO reports the version the masters run (clients pick features by it).
    let info: String = common::query(
        &shared_cluster().masters()[0],
        redis::cmd("INFO").arg("server"),
    )
    .unwrap();
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap();
    assert!(
        text.contains(&format!(
            "$7\r\nversion\r\n${}\r\n{version}\r\n",
            version.len()
        )),
        "HELLO reports version {version}: {text}"
    );
}

#[test]
fn inline_commands_with_quotes() {
    let (reply, _) = exchange(
        proxy().addr(),
        b"SET \"core:a b\" 'c d'\r\nGET \"core:a b\"\r\n\r\nPING\r\n",
        Duration::from_millis(500),
    );
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "+OK\r\n$3\r\nc d\r\n+PONG\r\n"
    );
}

#[test]
fn empty_multibulk_requests_are_ignored_like_redis() {
    let input = b"*0\r\n*-5\r\n*1\r\n$4\r\nPING\r\n";
    let (from_proxy, _) = exchange(proxy().addr(), input, Duration::from_millis(300));
    let (from_redis, _) = exchange(
        &shared_cluster().masters()[0],
        input,
        Duration::from_millis(300),
    );
    assert_eq!(from_proxy, from_redis);
    assert_eq!(from_proxy, b"+PONG\r\n");
}

#[test]
fn protocol_errors_match_redis_and_close_only_that_client() {
    let bystander = &mut proxy().client().get_connection().unwrap();
    let cases: [&[u8]; 5] = [
        b"*abc\r\n",
        b"*1\r\n$99999999999\r\n",
        b"SET \"unbalanced\r\n",
        b"*1\r\nfoo\r\n",
        b"*2\r\n$3\r\nGET\r\n$-3\r\n",
    ];
    let node = &shared_cluster().masters()[0];
    for input in cases {
        let (from_redis, redis_closed) = exchange(node, input, Duration::from_secs(2));
        let (from_proxy, proxy_closed) = exchange(proxy().addr(), input, Duration::from_secs(2));
        assert!(
            from_redis.starts_with(b"-ERR Protocol error"),
            "redis said {:?}",
            String::from_utf8_lossy(&from_redis)
        );
        assert_eq!(
            String::from_utf8_lossy(&from_proxy),
            String::from_utf8_lossy(&from_redis),
            "input {:?}",
            String::from_utf8_lossy(input)
        );
        assert!(
            redis_closed && proxy_closed,
            "both close after {:?}",
            String::from_utf8_lossy(input)
        );
        let pong: String = redis::cmd("PING")
            .query(bystander)
            .expect("other clients go on");
        assert_eq!(pong, "PONG");
    }
}

#[test]
fn local_answers_as_a_single_redis() {
    let mut con = proxy().client().get_connection().unwrap();
    let echo: String = redis::cmd("ECHO").arg("hi").query(&mut con).unwrap();
    assert_eq!(echo, "hi");
    let ok: String = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();
    assert_eq!(ok, "OK");
    // Databases 0..15, as Redis's default `databases` (see tests/select_databases.rs).
    let err = redis::cmd("SELECT")
        .arg(16)
        .query::<String>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string().contains("DB index is out of range"),
        "{err}"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("bot-1")
        .query(&mut con)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut con).unwrap();
    assert_eq!(name, "bot-1");
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
    assert!(id > 0);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    assert!(
        list.contains(&format!("id={id} ")) && list.contains("name=bot-1"),
        "{list}"
    );
    // Both ends' addresses as the accept gave them: the client's, and the proxy's it
    // connected to.
    let mut raw = common::Raw::connect(proxy().addr());
    let info = raw.call(&["CLIENT", "INFO"]);
    let client_addr = raw.stream.local_addr().unwrap();
    assert!(
        info.contains(&format!(" addr={client_addr} laddr={} ", proxy().addr())),
        "{info}"
    );
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("foo")
        .query(&mut con)
        .unwrap();
    assert_eq!(slot, 12182);
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
    assert!(
        info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:1"),
        "{info}"
    );
    let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    let port: i64 = proxy().addr().rsplit_once(':').unwrap().1.parse().unwrap();
    let text = format!("{slots:?}");
    assert!(
        text.contains(&format!("int({port})")),
        "CLUSTER SLOTS points at the proxy: {text}"
    );
    let info: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(info.contains("cluster_enabled:0"), "{info}");
    assert!(
        info.contains("# Proxy") && info.contains("proxy_slots_covered:16384"),
        "{info}"
    );
    let time: Vec<String> = redis::cmd("TIME").query(&mut con).unwrap();
    assert_eq!(time.len(), 2);
    // CONFIG GET shows the proxy's port and no cluster, as INFO does.
    let config: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .arg("cluster-enabled")
        .arg("maxmemory-policy")
        .query(&mut con)
        .unwrap();
    assert_eq!(config["port"], port.to_string());
    assert_eq!(config["cluster-enabled"], "no");
    assert!(!config["maxmemory-policy"].is_empty(), "{config:?}");
    // Inside MULTI it is still one node's answer, queued like any read.
    let (ok, queued): (String, String) = (
        redis::cmd("MULTI").query(&mut con).unwrap(),
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query(&mut con)
            .unwrap(),
    );
    assert_eq!((ok.as_str(), queued.as_str()), ("OK", "QUEUED"));
    let exec: Vec<std::collections::HashMap<String, String>> =
        redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(exec[0]["maxmemory-policy"], config["maxmemory-policy"]);
}

/// CLUSTER COUNTKEYSINSLOT and GETKEYSINSLOT go to the master of the slot they name, so
/// they see the keys written there, whichever master that is.
#[test]
fn keys_in_slot_are_asked_of_the_slots_master() {
    let cluster = shared_cluster();
    let mut con = proxy().client().get_connection().unwrap();
    let mut masters_seen = std::collections::BTreeSet::new();
    for i in 0.. {
        if masters_seen.len() == 3 {
            break;
        }
        let key = format!("inslot:{i}");
        let slot = cluster.keyslot(&key);
        if !masters_seen.insert(cluster.node_for_slot(slot)) {
            continue;
        }
        let _: () = redis::cmd("SET").arg(&key).arg(1).query(&mut con).unwrap();
        // Asked several times: a command sent to any master would be right only by luck.
        for _ in 0..3 {
            let count: i64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query(&mut con)
                .unwrap();
            // Other tests of this binary may write keys in the same slot meanwhile.
            assert!(count >= 1, "{key} in slot {slot}: {count}");
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(1000)
                .query(&mut con)
                .unwrap();
            assert!(keys.contains(&key), "slot {slot}: {keys:?}");
        }
    }
    let error = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(16384)
        .query::<i64>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("Invalid slot"), "{error}");
}

/// CLIENT REPLY OFF / SKIP / ON hide replies exactly as Redis does (RESET turns them back
/// on), and the CLIENT subcommands answered here parse their arguments as Redis does.
#[test]
fn client_reply_modes_match_redis() {
    let lines = [
        "CLIENT REPLY OFF",
        "SET creply:{k}a 1",
        "GET creply:{k}a",
        "CLIENT REPLY SKIP",
        "CLIENT REPLY ON",
        "GET creply:{k}a",
        "CLIENT REPLY SKIP",
        "GET creply:{k}a",
        "INCR creply:{k}a",
        "CLIENT REPLY OFF",
        "NOSUCHCOMMAND",
        "RESET",
        "PING",
        "CLIENT REPLY maybe",
        "CLIENT REPLY",
        "CLIENT GETREDIR",
        "CLIENT GETREDIR x",
        "CLIENT NO-EVICT maybe",
        "CLIENT NO-EVICT on",
        "CLIENT NO-EVICT",
        "CLIENT NO-EVICT on x",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy.starts_with("+OK\r\n$1\r\n1\r\n:2\r\n+RESET\r\n"),
        "{through_proxy:?}"
    );
}

/// A subcommand's internal name sent as a command (`CONFIG|GET`) is an unknown command,
/// as on Redis, whether the proxy would answer, fan out or forward the subcommand.
#[test]
fn a_subcommands_internal_name_is_an_unknown_command() {
    let lines = [
        "CONFIG|GET x",
        "config|get maxmemory",
        "OBJECT|ENCODING k",
        "client|id",
        "cluster|count-failure-reports id",
        "PING",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy
            .starts_with("-ERR unknown command 'CONFIG|GET', with args beginning with: 'x' \r\n"),
        "{through_proxy:?}"
    );
    assert!(through_proxy.ends_with("+PONG\r\n"), "{through_proxy:?}");
}

/// RESET clears what the proxy holds for the connection as Redis clears it: the open
/// MULTI (EXEC then has none), the name, RESP3 (back to RESP2), the subscriptions
/// (PING answers as outside subscribed mode), CLIENT REPLY OFF (RESET's own reply is
/// sent), CLIENT TRACKING (off again); the database is 0. (MONITOR: `tests/monitor.rs`; the
/// user: `tests/auth.rs`.)
#[test]
fn reset_clears_the_connection_as_redis_does() {
    let lines = [
        "CLIENT SETNAME before",
        "HELLO 3",
        "MULTI",
        "SET reset:{k}a 1",
        "RESET",
        "EXEC",
        "CLIENT GETNAME",
        "GET reset:{k}a",
        "SUBSCRIBE reset:channel",
        "PSUBSCRIBE reset:*",
        "RESET",
        "PING",
        "CLIENT TRACKING on BCAST PREFIX reset:",
        "CLIENT REPLY OFF",
        "PING",
        "RESET",
        "PING",
        "CLIENT TRACKINGINFO",
        "SELECT 0",
        "HELLO 3 SETNAME again",
        "RESET",
        "CLIENT GETNAME",
    ];
    // HELLO's client ids are the only difference.
    let without_ids = |transcript: String| {
        let parts: Vec<&str> = transcript.split("$2\r\nid\r\n:").collect();
        let rest = parts[1..]
            .iter()
            .map(|part| &part[part.find('\r').unwrap()..]);
        std::iter::once(parts[0])
            .chain(rest)
            .collect::<Vec<_>>()
            .join("ID")
    };
    let through_proxy = without_ids(transcript(proxy().addr(), &lines));
    let server = Standalone::start();
    assert_eq!(
        through_proxy,
        without_ids(transcript(server.addr(), &lines))
    );
    assert!(
        through_proxy.contains("+RESET\r\n-ERR EXEC without MULTI\r\n$-1\r\n$-1\r\n"),
        "{through_proxy:?}"
    );
    assert!(
        through_proxy.ends_with("+RESET\r\n$-1\r\n"),
        "{through_proxy:?}"
    );
}

/// Commands the proxy answers itself reject a wrong argument count as Redis does: AUTH's
/// arity, EXEC's (EXECABORT even outside MULTI, and the WATCH is dropped), an unknown
/// CLUSTER subcommand.
#[test]
fn local_commands_reject_bad_arguments_as_redis_does() {
    let lines = [
        "AUTH",
        "AUTH a b c",
        "WATCH localargs:{k}a",
        "EXEC x",
        "SET localargs:{k}a 1",
        "MULTI",
        "GET localargs:{k}a",
        "EXEC",
        "CLUSTER NOSUCHSUB",
        "CLIENT NOSUCHSUB",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy.contains("-EXECABORT Transaction discarded because of: wrong number"),
        "{through_proxy:?}"
    );
}

/// CLIENT SETINFO, which redis-py and node-redis send on connecting, is checked as Redis
/// (7.2, which has it) checks it, and CLIENT INFO and LIST show what it set.
#[test]
fn client_setinfo_is_checked_as_redis_does() {
    let mut con = proxy().client().get_connection().unwrap();
    let mut setinfo = |attr: &str, value: &str| {
        redis::cmd("CLIENT")
            .arg("SETINFO")
            .arg(attr)
            .arg(value)
            .query::<String>(&mut con)
            .map_err(|e| e.to_string())
    };
    assert_eq!(setinfo("lib-name", "redis-py"), Ok("OK".to_owned()));
    assert_eq!(setinfo("LIB-VER", "5.0.1"), Ok("OK".to_owned()));
    let bad = setinfo("lib-name", "a b").unwrap_err();
    assert!(
        bad.contains("lib-name cannot contain spaces, newlines or special characters."),
        "{bad}"
    );
    let unknown = setinfo("lib-color", "red").unwrap_err();
    assert!(
        unknown.contains("Unrecognized option 'lib-color'"),
        "{unknown}"
    );
    // The refused value left the name as it was; a later SETINFO replaces it.
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(
        info.ends_with(" resp=2 lib-name=redis-py lib-ver=5.0.1\n"),
        "{info:?}"
    );
    redis::cmd("CLIENT")
        .arg("SETINFO")
        .arg("lib-name")
        .arg("bot")
        .query::<()>(&mut con)
        .unwrap();
    let id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut con).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(&mut con)
        .unwrap();
    assert!(list.contains(" lib-name=bot lib-ver=5.0.1\n"), "{list:?}");
    // Another client shows its own: the redis crate announces itself on connecting, a
    // client that sends no SETINFO shows none.
    let mut other = proxy().client().get_connection().unwrap();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut other).unwrap();
    assert!(info.contains(" lib-name=redis-rs lib-ver="), "{info:?}");
    let mut raw = common::Raw::connect(proxy().addr());
    let info = raw.call(&["CLIENT", "INFO"]);
    assert!(info.ends_with(" lib-name= lib-ver=\n\r\n"), "{info:?}");
}

/// SELECT and HELLO read their numbers as Redis does (`string2ll`: no `+`, no leading
/// zero, no `-0`), byte for byte.
#[test]
fn select_and_hello_read_numbers_as_redis_does() {
    let lines = [
        "SELECT 00",
        "SELECT +0",
        "SELECT -0",
        "SELECT 0",
        "HELLO 03",
        "HELLO +3",
        "HELLO -0",
        "HELLO 4",
        "HELLO x",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(through_proxy.contains("+OK"), "{through_proxy:?}");
}

#[test]
fn errors_name_what_is_wrong() {
    let mut con = proxy().client().get_connection().unwrap();
    let err = redis::cmd("NOSUCHCMD")
        .arg("x")
        .query::<String>(&mut con)
        .unwrap_err();
    assert!(
        err.to_string().contains("unknown command 'NOSUCHCMD'"),
        "{err}"
    );
    let err = redis::cmd("GET").query::<String>(&mut con).unwrap_err();
    assert!(
        err.to_string()
            .contains("wrong number of arguments for 'get' command"),
        "{err}"
    );
    // "a" and "b" hash to different slots: a script over both is refused, naming them.
    let err = redis::cmd("EVAL")
        .arg("return 1")
        .arg(2)
        .arg("a")
        .arg("b")
        .query::<i64>(&mut con)
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind(), redis::ErrorKind::CrossSlot, "{text}");
    assert!(
        text.contains("'a' -> 15495") && text.contains("'b' -> 3300"),
        "{text}"
    );
    let one: i64 = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(one, 1);
    let same: String = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[2])")
        .arg(2)
        .arg("{core}:x")
        .arg("{core}:x")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(same, "v");
}

#[test]
fn multi_key_commands_split_by_slot() {
    let mut con = proxy().client().get_connection().unwrap();
    let keys: Vec<String> = (0..50).map(|i| format!("core:mk:{i}")).collect();
    let mut mset = redis::cmd("MSET");
    for key in &keys {
        mset.arg(key).arg(format!("{key}=v"));
    }
    let _: () = mset.query(&mut con).unwrap();
    let mut mget = redis::cmd("MGET");
    mget.arg(&keys).arg("core:mk:missing");
    let values: Vec<Option<String>> = mget.query(&mut con).unwrap();
    assert_eq!(values.len(), 51);
    for (key, value) in keys.iter().zip(&values) {
        assert_eq!(value.as_deref(), Some(format!("{key}=v").as_str()));
    }
    assert_eq!(values[50], None);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&keys)
        .arg("core:mk:missing")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 50);
    let deleted: i64 = redis::cmd("DEL").arg(&keys[..10]).query(&mut con).unwrap();
    assert_eq!(deleted, 10);
    let err = redis::cmd("MSETNX")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::CrossSlot, "{err}");
}

/// `count` commands over a few keys, mixing what the proxy batches per master (SET, GET,
/// INCR, APPEND), splits by slot (MSET, MGET, DEL, EXISTS), runs as a script (EVAL) and
/// answers itself (PING, ECHO), with error replies among them (INCR of a text, GET of a list).
/// The SET values are long enough that the requests queued for one master pass the size at
/// which the client's session writes the node's outbox itself, instead of the writer task.
fn mixed_pipeline(prefix: &str, count: usize) -> Vec<String> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    let key = |n: u64| format!("{prefix}:k{n}");
    (0..count)
        .map(|i| {
            let (a, b, c) = (key(next(12)), key(next(12)), key(next(12)));
            match next(12) {
                0 => format!("SET {a} v{i}:{}", "x".repeat(2000)),
                1 => format!("GET {a}"),
                2 => format!("INCR {a}"),
                3 => format!("MSET {a} {i} {b} x{i} {c} {i}"),
                4 => format!("MGET {a} {b} {c}"),
                5 => format!("EVAL return(redis.call('GET',KEYS[1])) 1 {a}"),
                6 => format!("DEL {a} {b}"),
                7 => format!("EXISTS {a} {b} {c}"),
                8 => format!("APPEND {a} +{i}"),
                9 => format!("LPUSH {prefix}:k11 {i}"),
                10 => "PING".to_string(),
                _ => format!("ECHO e{i}"),
            }
        })
        .collect()
}

/// Replies one redis-server gives to `mixed_pipeline(prefix, count)`: they do not depend
/// on the prefix (no reply names a key), so one run serves every prefix.
fn replies_of_one_redis(count: usize) -> Vec<Vec<u8>> {
    let lines = mixed_pipeline("one", count);
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let single = common::Standalone::start();
    let replies = common::Raw::connect(single.addr()).pipeline(&common::resp_lines(&lines), count);
    let errors = replies.iter().filter(|r| r.first() == Some(&b'-')).count();
    assert!(errors > 0, "the pipeline exercises error replies too");
    replies
}

/// Sends `mixed_pipeline(prefix, expected.len())` to `addr` in one write and compares
/// every reply with `expected`.
fn check_mixed_pipeline(addr: &str, prefix: &str, expected: &[Vec<u8>]) {
    let lines = mixed_pipeline(prefix, expected.len());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    // The same bytes in one write, so the proxy sees them in a few reads and batches them.
    let got = common::Raw::connect(addr).pipeline(&common::resp_lines(&lines), lines.len());
    for (i, (got, expected)) in got.iter().zip(expected).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(got),
            String::from_utf8_lossy(expected),
            "reply {i} to {:?}",
            lines[i]
        );
    }
}

#[test]
fn a_mixed_pipeline_answers_like_one_redis() {
    let expected = replies_of_one_redis(600);
    check_mixed_pipeline(proxy().addr(), "core:mixed", &expected);
}

#[test]
fn mixed_pipelines_on_a_two_thread_proxy_answer_like_one_redis() {
    let expected = std::sync::Arc::new(replies_of_one_redis(600));
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg(), "--threads", "2"]);
    let clients: Vec<_> = (0..4)
        .map(|n| {
            let addr = proxy.addr().to_string();
            let expected = expected.clone();
            std::thread::spawn(move || {
                for round in 0..3 {
                    check_mixed_pipeline(&addr, &format!("core:mt{n}:{round}"), &expected);
                }
            })
        })
        .collect();
    for client in clients {
        client
            .join()
            .expect("every client got one redis-server's replies");
    }
}

/// CLIENT KILL, LIST and INFO argument handling, byte for byte with Redis (only filters
/// that match no client: other tests share both servers).
#[test]
fn client_kill_and_list_arguments_match_redis() {
    let lines = [
        "CLIENT KILL",
        "CLIENT KILL 10.9.9.9:1",
        "CLIENT KILL ID 0",
        "CLIENT KILL ID -3",
        "CLIENT KILL ID x",
        "CLIENT KILL ID 99999999",
        "CLIENT KILL ID 99999999 SKIPME",
        "CLIENT KILL TYPE sometimes",
        "CLIENT KILL TYPE master",
        "CLIENT KILL TYPE SLAVE",
        "CLIENT KILL USER nobody",
        "CLIENT KILL SKIPME maybe",
        "CLIENT KILL BOGUS x",
        "CLIENT KILL ADDR 10.9.9.9:1 LADDR 10.9.9.9:2",
        "CLIENT KILL USER default ADDR 10.9.9.9:1",
        "CLIENT LIST TYPE sometimes",
        "CLIENT LIST TYPE master",
        "CLIENT LIST TYPE replica extra",
        "CLIENT LIST ID",
        "CLIENT LIST ID x",
        "CLIENT LIST ID 99999999 -1",
        "CLIENT LIST bogus",
        "CLIENT INFO extra",
        "CLIENT HELP extra",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy.starts_with(
            "-ERR wrong number of arguments for 'client|kill' command\r\n-ERR No such client\r\n"
        ),
        "{through_proxy:?}"
    );
}

/// Reads until the peer closes the connection; fails if it stays open for `limit`.
fn closed_within(raw: &mut common::Raw, limit: Duration, what: &str) {
    raw.stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match common::read_some(&mut raw.stream, &mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the connection stayed open ({e})"),
        }
    }
}

fn lines_with(list: &str, needle: &str) -> usize {
    list.lines().filter(|line| line.contains(needle)).count()
}

/// What an operator sees when listing and killing clients on `addr` (a proxy or a
/// redis-server with no other clients): the same list of facts from both.
fn kill_scenario(addr: &str) -> Vec<String> {
    use common::Raw;
    let mut facts = Vec::new();
    let mut admin = Raw::connect(addr);
    let mut victim = Raw::connect(addr);
    let mut subscriber = Raw::connect(addr);
    let id_of = |raw: &mut Raw| raw.call(&["CLIENT", "ID"]).trim()[1..].to_string();
    let admin_id = id_of(&mut admin);
    let victim_id = id_of(&mut victim);
    let subscriber_id = id_of(&mut subscriber);
    victim.call(&["CLIENT", "SETNAME", "victim"]);
    let subscribe =
        common::resp_lines(&["SUBSCRIBE killtest:a killtest:b", "PSUBSCRIBE killtest:*"]);
    subscriber.pipeline(&subscribe, 3);

    let pubsub = admin.call(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    facts.push(format!("pubsub clients: {}", lines_with(&pubsub, "id=")));
    facts.push(format!(
        "the subscriber, flags P, 2 channels, 1 pattern: {}",
        lines_with(&pubsub, &format!("id={subscriber_id} ")) == 1
            && pubsub.contains(" flags=P ")
            && pubsub.contains(" sub=2 psub=1 ")
    ));
    let normal = admin.call(&["CLIENT", "LIST", "TYPE", "NORMAL"]);
    facts.push(format!("normal clients: {}", lines_with(&normal, "id=")));
    let by_id = admin.call(&["CLIENT", "LIST", "ID", &victim_id, "99999999", &admin_id]);
    facts.push(format!(
        "by id: {} lines, victim first: {}",
        lines_with(&by_id, "id="),
        by_id
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains(" name=victim "))
    ));
    let info = admin.call(&["CLIENT", "INFO"]);
    facts.push(format!(
        "info is the caller: {}",
        info.contains(&format!("id={admin_id} "))
    ));

    // A client blocked in BLPOP is closed at once, not after its command.
    victim.send(&["BLPOP", "killtest:never", "0"]);
    common::wait_until("the victim's BLPOP running", Duration::from_secs(5), || {
        admin
            .call(&["CLIENT", "LIST", "ID", &victim_id])
            .contains(" cmd=blpop ")
    });
    facts.push(format!(
        "kill by id: {}",
        admin.call(&["CLIENT", "KILL", "ID", &victim_id]).trim()
    ));
    closed_within(&mut victim, Duration::from_secs(2), "killed by id");
    facts.push(format!(
        "kill the same id again: {}",
        admin.call(&["CLIENT", "KILL", "ID", &victim_id]).trim()
    ));

    // The old form names the client's address and answers +OK.
    let subscriber_addr = subscriber.stream.local_addr().unwrap().to_string();
    facts.push(format!(
        "old form: {}",
        admin.call(&["CLIENT", "KILL", &subscriber_addr]).trim()
    ));
    closed_within(&mut subscriber, Duration::from_secs(2), "killed by address");
    let pubsub = admin.call(&["CLIENT", "LIST", "TYPE", "pubsub"]);
    facts.push(format!(
        "pubsub clients after: {}",
        lines_with(&pubsub, "id=")
    ));

    // The caller is spared unless SKIPME no; then its reply comes first.
    facts.push(format!(
        "kill self, skipme default: {}",
        admin.call(&["CLIENT", "KILL", "ID", &admin_id]).trim()
    ));
    let mut other = Raw::connect(addr);
    other.call(&["PING"]);
    let other_addr = other.stream.local_addr().unwrap().to_string();
    facts.push(format!(
        "kill by user, sparing self: {}",
        admin
            .call(&["CLIENT", "KILL", "USER", "default", "ADDR", &other_addr])
            .trim()
    ));
    closed_within(&mut other, Duration::from_secs(2), "killed by user");
    facts.push(format!(
        "kill self, skipme no: {}",
        admin
            .call(&["CLIENT", "KILL", "ID", &admin_id, "SKIPME", "no"])
            .trim()
    ));
    closed_within(&mut admin, Duration::from_secs(2), "killed itself");
    facts
}

/// CLIENT KILL ends the clients it names at once (a blocked one too), LIST filters by
/// type and id, and subscribers list as pubsub clients: the same facts as on Redis.
#[test]
fn client_kill_and_list_act_as_on_redis() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let server = Standalone::start();
    let on_proxy = kill_scenario(proxy.addr());
    assert_eq!(on_proxy, kill_scenario(server.addr()));
    for fact in [
        "pubsub clients: 1",
        "normal clients: 2",
        "by id: 2 lines, victim first: true",
        "kill by id: :1",
        "kill the same id again: :0",
        "old form: +OK",
        "pubsub clients after: 0",
        "kill self, skipme default: :0",
        "kill by user, sparing self: :1",
        "kill self, skipme no: :1",
    ] {
        assert!(on_proxy.iter().any(|f| f == fact), "{fact}: {on_proxy:?}");
    }
    // The killed clients are gone from the list; a new client still gets served.
    let mut con = proxy.connect();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    assert_eq!(lines_with(&list, "id="), 1, "{list}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// CLIENT INFO and LIST are verbatim strings in RESP3, as Redis sends them; CLIENT HELP
/// lists the subcommands the proxy answers in Redis's words.
#[test]
fn client_info_is_verbatim_in_resp3_and_help_is_redis_text() {
    let mut raw = common::Raw::connect(proxy().addr());
    raw.call(&["HELLO", "3"]);
    let info = raw.call(&["CLIENT", "INFO"]);
    assert!(
        info.starts_with('=') && info.contains("\r\ntxt:id="),
        "{info:?}"
    );
    assert!(
        info.contains(" resp=3 lib-name= lib-ver=\n\r\n"),
        "{info:?}"
    );
    let list = raw.call(&["CLIENT", "LIST", "TYPE", "normal"]);
    assert!(
        list.starts_with('=') && list.contains("\r\ntxt:id="),
        "{list:?}"
    );
    let help = raw.call(&["CLIENT", "HELP"]);
    for line in [
        "+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n",
        "+KILL <option> <value> [<option> <value> [...]]\r\n",
        "+LIST [options ...]\r\n",
        "+HELP\r\n",
    ] {
        assert!(help.contains(line), "{line:?} in {help:?}");
    }
}

/// SORT with BY and GET patterns (weights and values on every master), BY nosort, and
/// STORE into another slot: byte for byte what one Redis answers.
#[test]
fn sort_with_patterns_answers_like_one_redis() {
    let lines = [
        "DEL {srt}l {srt}s srt:l2 srt:z srt:s srt:str {srt}dst {srt}dst2 {srt}dst3",
        "DEL srtw_1 srtw_2 srtw_3 srtw_10 srtw_bad srth_1 srth_2 srth_3 srth_10 srth_20",
        "DEL srto_1 srto_2 srto_10",
        "RPUSH {srt}l 3 1 2 10 20",
        "SET srtw_3 30",
        "SET srtw_1 100",
        "SET srtw_2 -5",
        "SET srtw_10 7",
        "HSET srth_1 f b",
        "HSET srth_2 f a",
        "HSET srth_3 f c",
        "HSET srth_10 f e",
        "HSET srth_20 f d",
        "SET srto_1 one",
        "SET srto_2 two",
        "SET srto_10 ten",
        "SORT {srt}l BY srtw_*",
        // Writes pipelined after a SORT never show in it; those before always do.
        "SET srtw_2 500",
        "SORT {srt}l BY srtw_* LIMIT 0 1",
        "SET srtw_2 -5",
        "SORT {srt}l BY srtw_* DESC LIMIT 1 3",
        "SORT {srt}l BY srtw_* LIMIT -5 100",
        "SORT {srt}l BY srtw_* LIMIT 9 1",
        "SORT {srt}l BY srtw_* GET # GET srto_* GET srth_*->f",
        "SORT {srt}l BY srth_*->f ALPHA",
        "SORT {srt}l BY srth_*->f ALPHA DESC GET srto_*",
        "SORT {srt}l BY srto_*->f",
        "SORT {srt}l GET srto_*",
        "SORT {srt}l ALPHA GET # GET srto_*",
        "SORT {srt}l BY nosort GET srto_*",
        "SORT {srt}l BY nosort DESC LIMIT 0 2 GET #",
        "SORT {srt}l GET nopattern",
        "SORT {srt}l BY srtw_* STORE {srt}dst",
        "LRANGE {srt}dst 0 -1",
        "SORT {srt}l BY srtw_* GET srto_* STORE {srt}dst2",
        "LRANGE {srt}dst2 0 -1",
        "SORT {srt}l DESC STORE {srt}dst3",
        "LRANGE {srt}dst3 0 -1",
        "SORT {srt}l BY nosort DESC GET # STORE {srt}dst3",
        "LRANGE {srt}dst3 0 -1",
        "SADD {srt}s c 10 b 9 a",
        "SORT {srt}s BY nosort GET # STORE {srt}dst3",
        "LRANGE {srt}dst3 0 -1",
        "SORT {srt}nokey BY srtw_* GET #",
        "SORT {srt}nokey BY srtw_* STORE {srt}dst",
        "EXISTS {srt}dst",
        "ZADD srt:z 1 c 2 a 3 b",
        "SORT srt:z BY nosort GET #",
        "SORT srt:z BY srtw_* GET #",
        "SADD srt:s 3 1 2",
        "SORT srt:s BY srtw_*",
        "SORT_RO srt:s BY srtw_* GET srto_*",
        "SET srt:str v",
        "SORT srt:str BY srtw_*",
        "SORT srt:str GET #",
        "RPUSH srt:l2 bad 1",
        "SET srtw_bad abc",
        "SORT srt:l2 BY srtw_*",
        "SORT srt:l2 BY srtw_* ALPHA",
        "SORT {srt}l BY srtw_* LIMIT 0 x",
        "SORT {srt}l GET # BOGUS",
        "SORT {srt}l GET",
        "SORT_RO {srt}l GET # STORE {srt}dst",
        "SORT",
        "SORT_RO",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy.contains("*5\r\n$1\r\n2\r\n$2\r\n20\r\n$2\r\n10\r\n$1\r\n3\r\n$1\r\n1\r\n"),
        "numeric order by weights on other masters: {through_proxy:?}"
    );
    // A STORE into another slot is a cross-slot store: the sorted list, replaced whole on
    // the destination's master (tests/cross_slot_source_stores.rs compares more cases).
    let mut con = proxy().connect();
    for extra in [&[][..], &["BY", "srtw_*"][..]] {
        let sorted: Vec<String> = redis::cmd("SORT")
            .arg("{srt}l")
            .arg(extra)
            .query(&mut con)
            .unwrap();
        let stored: i64 = redis::cmd("SORT")
            .arg("{srt}l")
            .arg(extra)
            .arg("STORE")
            .arg("srt:elsewhere")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        assert_eq!(stored, sorted.len() as i64, "{extra:?}");
        let held: Vec<String> = redis::cmd("LRANGE")
            .arg("srt:elsewhere")
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(held, sorted, "{extra:?}");
    }
}

/// In RESP3 a missing GET value is RESP3's null, as Redis sends it.
#[test]
fn sort_get_values_are_resp3_nulls_in_resp3() {
    let server = Standalone::start();
    let mut replies = Vec::new();
    for addr in [proxy().addr(), server.addr()] {
        let mut raw = common::Raw::connect(addr);
        raw.call(&["HELLO", "3"]);
        raw.call(&["DEL", "srt3:l", "srt3o_1"]);
        raw.call(&["RPUSH", "srt3:l", "1", "2"]);
        raw.call(&["SET", "srt3o_1", "one"]);
        replies.push(raw.call(&["SORT", "srt3:l", "GET", "srt3o_*"]));
    }
    assert_eq!(replies[0], "*2\r\n$3\r\none\r\n_\r\n");
    assert_eq!(replies[0], replies[1]);
}

/// CLIENT TRACKING, TRACKINGINFO, GETREDIR and CACHING answer as Redis answers them:
/// options checked in Redis's order with its texts, a second ON merged as Redis merges
/// it, the flags and prefixes reported as Redis reports them. (What tracking then sends:
/// `tests/client_tracking.rs`.)
#[test]
fn client_tracking_caching_and_unpause_match_redis() {
    let lines = [
        "CLIENT TRACKING off",
        "CLIENT TRACKING OFF BCAST PREFIX a: PREFIX b: OPTIN OPTOUT NOLOOP",
        "CLIENT TRACKING off REDIRECT 99999999",
        "CLIENT TRACKING off REDIRECT x",
        "CLIENT TRACKING off REDIRECT",
        "CLIENT TRACKING off BOGUS",
        "CLIENT TRACKING maybe",
        "CLIENT TRACKING",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKINGINFO x",
        "CLIENT GETREDIR",
        "CLIENT CACHING yes",
        "CLIENT CACHING",
        "CLIENT TRACKING on PREFIX a:",
        "CLIENT TRACKING on OPTIN OPTOUT",
        "CLIENT TRACKING on BCAST OPTIN",
        "CLIENT TRACKING on BCAST PREFIX a PREFIX ab",
        "CLIENT TRACKING on",
        "CLIENT GETREDIR",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING on BCAST",
        "CLIENT TRACKING on OPTOUT NOLOOP",
        "CLIENT CACHING yes",
        "CLIENT CACHING no",
        "CLIENT TRACKINGINFO",
        "CLIENT CACHING maybe",
        "CLIENT TRACKING on OPTIN",
        "CLIENT TRACKING off",
        "CLIENT TRACKING on BCAST PREFIX b: PREFIX a:",
        "CLIENT TRACKING on BCAST PREFIX c:",
        "CLIENT TRACKING on BCAST PREFIX c:x",
        "CLIENT TRACKING on BCAST PREFIX b:",
        "CLIENT TRACKINGINFO",
        "CLIENT TRACKING off",
        "CLIENT TRACKINGINFO",
        "CLIENT GETREDIR",
        "CLIENT UNPAUSE",
        "CLIENT UNPAUSE x",
    ];
    let through_proxy = proxy_matches_redis(&lines);
    assert!(
        through_proxy.starts_with("+OK\r\n+OK\r\n-ERR The client ID"),
        "{through_proxy:?}"
    );
    assert!(
        through_proxy.contains(
            "$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*3\r\n$2\r\na:\r\n"
        ),
        "{through_proxy:?}"
    );
}

/// CLIENT LIST shows how long a client has been idle and what it ran last, as Redis does:
/// what an operator looks at to find a stuck or idle bot.
#[test]
fn client_list_shows_idle_time_and_last_command_as_redis_does() {
    let server = Standalone::start();
    let facts = |addr: &str| {
        let mut bot = common::Raw::connect(addr);
        let mut admin = common::Raw::connect(addr);
        let fresh = admin.call(&["CLIENT", "INFO"]);
        let bot_id = bot.call(&["CLIENT", "ID"]).trim()[1..].to_string();
        bot.call(&["GET", "idle:key"]);
        std::thread::sleep(Duration::from_millis(2100));
        let line = admin.call(&["CLIENT", "LIST", "ID", &bot_id]);
        let idle: u64 = line
            .split(" idle=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no idle= in {line:?}"));
        // The latest command, as it changes and changes back (the proxy writes what others
        // see only when it changes).
        let mut latest = Vec::new();
        for command in [
            &["GET", "idle:key"][..],
            &["GET", "idle:key"],
            &["SET", "idle:key", "v"],
            &["GET", "idle:key"],
            &["PING"],
            &["PING"],
            &["GET", "idle:key"],
        ] {
            bot.call(command);
            let line = admin.call(&["CLIENT", "LIST", "ID", &bot_id]);
            latest.push(
                line.split(" cmd=")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .unwrap_or("-")
                    .to_string(),
            );
        }
        vec![
            format!("own command shown: {}", fresh.contains(" cmd=client|info ")),
            format!("bot's last command: {}", line.contains(" cmd=get ")),
            format!("bot idle 2-3 s: {}", (2..=3).contains(&idle)),
            format!("bot's latest, command by command: {latest:?}"),
        ]
    };
    let on_proxy = facts(proxy().addr());
    assert_eq!(on_proxy, facts(server.addr()));
    assert!(
        on_proxy[..3].iter().all(|fact| fact.ends_with("true")),
        "{on_proxy:?}"
    );
    assert_eq!(
        on_proxy[3],
        r#"bot's latest, command by command: ["get", "get", "set", "get", "ping", "ping", "get"]"#
    );
}

/// ASKING is answered here, never sent on: on a shared backend connection it would mark
/// the next command of another client.
#[test]
fn asking_is_answered_by_the_proxy_and_reaches_no_master() {
    let asked = || -> u64 {
        shared_cluster()
            .masters()
            .iter()
            .map(|master| {
                let stats: String =
                    common::query(master, redis::cmd("INFO").arg("commandstats")).unwrap();
                stats
                    .lines()
                    .find_map(|line| line.strip_prefix("cmdstat_asking:calls="))
                    .and_then(|rest| rest.split(',').next())
                    .map_or(0, |calls| calls.parse().unwrap())
            })
            .sum()
    };
    let before = asked();
    let replies = transcript(
        proxy().addr(),
        &["ASKING", "ASKING", "ASKING extra", "PING"],
    );
    assert_eq!(
        replies,
        "+OK\r\n+OK\r\n-ERR wrong number of arguments for 'asking' command\r\n+PONG\r\n"
    );
    assert_eq!(asked(), before, "an ASKING reached a master");
}

/// Every command and subcommand Redis knows, with no, one and two arguments: each gets a
/// reply and the connection stays usable (no request may end or stall it). In RESP2 and
/// RESP3, queued in MULTI, and under a layout with arguments that are keys of its families.
#[test]
fn every_command_with_few_arguments_gets_a_reply() {
    let names: Vec<String> = common::query(
        &shared_cluster().masters()[0],
        redis::cmd("COMMAND").arg("LIST"),
    )
    .unwrap();
    assert!(names.len() > 200, "{}", names.len());
    // QUIT ends the connection by design; everything else must leave it open. (PFSELFTEST,
    // which would hold a master the other tests share, is refused by the default policy.)
    let names: Vec<String> = names.into_iter().filter(|n| n != "quit").collect();
    let plain = ["sweep:x", "sweep:y"];
    sweep(proxy().addr(), &names, None, plain);
    sweep(proxy().addr(), &names, Some("HELLO 3"), plain);
    sweep(proxy().addr(), &names, Some("MULTI"), plain);
    // Numbers where counts, indexes and cursors go: key counts past the arguments given,
    // negative counts.
    sweep(proxy().addr(), &names, None, ["2", "sweep:x"]);
    sweep(proxy().addr(), &names, None, ["-1", "1"]);
    let layout = Proxy::start_with_layout(
        &shared_cluster().seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "sweep",
    );
    let family_keys = ["sweep:chat:a:b", "sweep:msgs:c1"];
    sweep(layout.addr(), &names, None, family_keys);
    sweep(layout.addr(), &names, Some("MULTI"), family_keys);
}

/// Sends each of `names` (`a|b` as two words) bare and with `args`, after `first`, on its
/// own connection, and checks RESET and PING are answered after them.
fn sweep(addr: &str, names: &[String], first: Option<&str>, args: [&str; 2]) {
    use std::io::Write;
    let workers: Vec<_> = names
        .chunks(names.len().div_ceil(6))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let addr = addr.to_string();
            let first = first.map(str::to_string);
            let args = args.map(str::to_string);
            std::thread::spawn(move || {
                for name in chunk {
                    let base: Vec<&str> = name.split('|').collect();
                    let mut lines: Vec<String> = first.iter().cloned().collect();
                    for extra in [&args[..0], &args[..1], &args[..]] {
                        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                        lines.push([&base[..], &extra[..]].concat().join(" "));
                    }
                    lines.push("RESET".into());
                    lines.push("PING".into());
                    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    stream.write_all(&common::resp_lines(&lines)).unwrap();
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 65536];
                    while !seen.ends_with(b"+RESET\r\n+PONG\r\n") {
                        match common::read_some(&mut stream, &mut buf) {
                            Ok(0) => panic!(
                                "{name} {args:?}: connection closed after {:?}",
                                String::from_utf8_lossy(&seen)
                            ),
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                            Err(e) => panic!(
                                "{name} {args:?}: no reply ({e}) after {:?}",
                                String::from_utf8_lossy(&seen)
                            ),
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("every command got its replies");
    }
}

/// Requests after HELLO (or RESET) that switches the protocol go to other backend
/// connections than those before it; they still see every write pipelined before it.
#[test]
fn a_protocol_switch_in_a_pipeline_keeps_its_order() {
    for (switch, back) in [("HELLO 3", "HELLO 2"), ("HELLO 3", "RESET")] {
        let mut lines: Vec<String> = (0..300).map(|i| format!("SET hswitch:{i} v{i}")).collect();
        lines.push(switch.into());
        lines.extend((0..300).map(|i| format!("GET hswitch:{i}")));
        lines.extend((0..300).map(|i| format!("SET hswitch:{i} w{i}")));
        lines.push(back.into());
        lines.extend((0..300).map(|i| format!("GET hswitch:{i}")));
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let mut raw = common::Raw::connect(proxy().addr());
        let replies = raw.pipeline(&common::resp_lines(&lines), lines.len());
        let bulk = |value: String| format!("${}\r\n{value}\r\n", value.len());
        for i in 0..300 {
            let first = String::from_utf8_lossy(&replies[301 + i]).into_owned();
            assert_eq!(first, bulk(format!("v{i}")), "{switch}: GET {i}");
            let second = String::from_utf8_lossy(&replies[902 + i]).into_owned();
            assert_eq!(second, bulk(format!("w{i}")), "{back}: GET {i}");
        }
    }
}

/// How long a command took while a pause was on, in words the two servers can agree on.
fn timed(raw: &mut common::Raw, args: &[&str]) -> String {
    let started = std::time::Instant::now();
    let reply = raw.call(args);
    format!("{args:?} {}: {reply:?}", took(started))
}

fn took(started: std::time::Instant) -> &'static str {
    match started.elapsed() {
        t if t < Duration::from_millis(400) => "at once",
        t if t >= Duration::from_millis(800) => "held",
        _ => "neither at once nor held to the pause's end",
    }
}

/// CLIENT PAUSE on `addr` (1 s pauses), from another client and from the paused one.
fn pause_scenario(addr: &str) -> Vec<String> {
    let mut admin = common::Raw::connect(addr);
    let mut client = common::Raw::connect(addr);
    let client_id = client.call(&["CLIENT", "ID"]);
    let client_id = client_id.trim_start_matches(':').trim_end();
    let mut seen = vec![transcript(
        addr,
        &[
            "CLIENT PAUSE",
            "CLIENT PAUSE x",
            "CLIENT PAUSE -1",
            "CLIENT PAUSE 10 sometimes",
            "CLIENT PAUSE 10 WRITE x",
            "CLIENT PAUSE 0",
        ],
    )];
    let mut pause =
        |mode: &str| assert_eq!(admin.call(&["CLIENT", "PAUSE", "1000", mode]), "+OK\r\n");
    // WRITE: reads pass, writes and what may replicate wait.
    for command in [
        &["GET", "pause:k"][..],
        &["SET", "pause:k", "1"],
        &["EVAL", "return 1", "0"],
        &["PUBLISH", "pause:channel", "m"],
        &["PING"],
    ] {
        pause("WRITE");
        seen.push(timed(&mut client, command));
    }
    // A transaction: queuing a write waits, and so does the EXEC of a block that writes.
    pause("WRITE");
    for command in [
        &["MULTI"][..],
        &["GET", "pause:k"],
        &["EXEC"],
        &["MULTI"],
        &["INCR", "pause:k"],
    ] {
        seen.push(timed(&mut client, command));
    }
    pause("WRITE");
    seen.push(timed(&mut client, &["EXEC"]));
    // A pipeline keeps its order: the read behind the held write waits for it.
    pause("WRITE");
    let started = std::time::Instant::now();
    let replies = client.pipeline(b"SET pause:k 3\r\nGET pause:k\r\n", 2);
    seen.push(format!("pipeline {}: {replies:?}", took(started)));
    // ALL: everything waits, CLIENT UNPAUSE too, the pausing client's own commands too.
    pause("ALL");
    seen.push(timed(&mut client, &["PING"]));
    pause("ALL");
    seen.push(timed(&mut admin, &["CLIENT", "UNPAUSE"]));
    // UNPAUSE under a WRITE pause ends it: the held write goes at once.
    assert_eq!(
        admin.call(&["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    let started = std::time::Instant::now();
    client.send(&["SET", "pause:k", "4"]);
    // CLIENT LIST shows the held client blocked, on the held command.
    let shown = |admin: &mut common::Raw| {
        let list = admin.call(&["CLIENT", "LIST"]);
        let line = list
            .lines()
            .find(|line| line.contains(&format!("id={client_id} ")))
            .unwrap_or_else(|| panic!("client {client_id} in {list:?}"))
            .to_string();
        let field = |name: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or("-")
                .to_string()
        };
        format!("flags={} cmd={}", field("flags"), field("cmd"))
    };
    common::wait_until("the SET held", Duration::from_secs(5), || {
        shown(&mut admin).ends_with(" cmd=set")
    });
    seen.push(format!("held client: {}", shown(&mut admin)));
    seen.push(timed(&mut admin, &["CLIENT", "UNPAUSE"]));
    let reply = client.read_reply();
    seen.push(format!(
        "released after {}: {reply:?}",
        if started.elapsed() < Duration::from_secs(2) {
            "the unpause"
        } else {
            "too long"
        }
    ));
    seen.push(format!("released client: {}", shown(&mut admin)));
    seen
}

/// CLIENT PAUSE holds the proxy's clients as Redis holds its own: which commands wait
/// under WRITE and ALL, in MULTI and in a pipeline, and when UNPAUSE releases them.
#[test]
fn client_pause_holds_clients_as_redis_does() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let server = Standalone::start();
    let redis = std::thread::spawn({
        let addr = server.addr().to_string();
        move || pause_scenario(&addr)
    });
    let through_proxy = pause_scenario(proxy.addr());
    let of_redis = redis.join().unwrap();
    assert_eq!(through_proxy, of_redis);
    assert!(
        through_proxy
            .iter()
            .any(|line| line.starts_with(r#"["SET", "pause:k", "1"] held"#)),
        "{through_proxy:#?}"
    );
}
