//! Two proxy processes in front of one real cluster, as several pods behind one Service run:
//! everything that lives in Redis holds across them (keys, the layout's indices, scripts,
//! channels, WATCH), and what the proxy keeps for its own clients (CLIENT LIST, maxclients)
//! is per proxy.

mod common;

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::time::Duration;

use common::{query, read_until_close, scan_all, shared_cluster, Cluster, Proxy, Raw};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

/// Two proxies in front of `cluster`, each started with `args` after `--cluster`.
fn two_proxies(cluster: &Cluster, args: &[&str]) -> (Proxy, Proxy) {
    let seeds = cluster.seeds_arg();
    let mut full = vec!["--cluster", seeds.as_str()];
    full.extend_from_slice(args);
    (Proxy::start(&full), Proxy::start(&full))
}

fn sorted(names: Vec<String>) -> BTreeSet<String> {
    names.into_iter().collect()
}

#[test]
fn a_write_through_one_proxy_is_read_through_the_other() {
    let (a, b) = two_proxies(shared_cluster(), &[]);
    let mut via_a = a.connect();
    let mut via_b = b.connect();
    for i in 0..20 {
        let key = format!("tp-plain:{i}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(i)
            .query(&mut via_a)
            .unwrap();
        let got: i64 = redis::cmd("GET").arg(&key).query(&mut via_b).unwrap();
        assert_eq!(got, i, "{key} written through A, read through B");
    }
    let _: i64 = redis::cmd("INCR")
        .arg("tp-plain:n")
        .query(&mut via_a)
        .unwrap();
    let n: i64 = redis::cmd("INCR")
        .arg("tp-plain:n")
        .query(&mut via_b)
        .unwrap();
    assert_eq!(n, 2, "one counter for both proxies");
    let _: () = redis::cmd("DEL")
        .arg("tp-plain:3")
        .query(&mut via_b)
        .unwrap();
    let gone: Option<String> = redis::cmd("GET")
        .arg("tp-plain:3")
        .query(&mut via_a)
        .unwrap();
    assert_eq!(gone, None);
}

#[test]
fn scan_through_either_proxy_sees_the_same_keys() {
    let (a, b) = two_proxies(shared_cluster(), &[]);
    let mut via_a = a.connect();
    let mut via_b = b.connect();
    let mut expected = BTreeSet::new();
    for i in 0..60 {
        let key = format!("tp-scan:{i}");
        let con = if i % 2 == 0 { &mut via_a } else { &mut via_b };
        let _: () = redis::cmd("SET").arg(&key).arg(i).query(con).unwrap();
        expected.insert(key);
    }
    assert_eq!(sorted(scan_all(&mut via_a, "tp-scan:*")), expected);
    assert_eq!(sorted(scan_all(&mut via_b, "tp-scan:*")), expected);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tp-scan:*")
        .query(&mut via_b)
        .unwrap();
    assert_eq!(sorted(keys), expected);
}

#[test]
fn a_layout_family_written_through_one_is_listed_through_the_other() {
    let cluster = shared_cluster();
    let p = "tplayout";
    let a = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, p);
    let b = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, p);
    let mut via_a = a.connect();
    let mut via_b = b.connect();
    let mut chats = BTreeSet::new();
    for i in 0..30 {
        let name = format!("{p}:chat:c{i}");
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg(i)
            .query(&mut via_a)
            .unwrap();
        chats.insert(name);
    }
    // The chats are index-backed: their listing reads the indices A kept, through B.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}:chat:*"))
        .query(&mut via_b)
        .unwrap();
    assert_eq!(sorted(keys), chats);
    assert_eq!(sorted(scan_all(&mut via_b, &format!("{p}:chat:*"))), chats);
    let idx = format!("{p}:{{ch:");
    let on_cluster: Vec<String> = cluster
        .masters()
        .iter()
        .flat_map(|m| query::<Vec<String>>(m, redis::cmd("KEYS").arg(format!("{idx}*:idx"))))
        .flatten()
        .collect();
    assert!(!on_cluster.is_empty(), "the indices live on the cluster");

    // A delete and a write with an expiry through B: A's listing follows.
    let removed = format!("{p}:chat:c7");
    let _: () = redis::cmd("DEL").arg(&removed).query(&mut via_b).unwrap();
    chats.remove(&removed);
    let added = format!("{p}:chat:new");
    let _: () = redis::cmd("SET")
        .arg(&added)
        .arg(1)
        .arg("PX")
        .arg(600_000)
        .query(&mut via_b)
        .unwrap();
    chats.insert(added.clone());
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}:chat:*"))
        .query(&mut via_a)
        .unwrap();
    assert_eq!(sorted(keys), chats);
    let got: String = redis::cmd("GET").arg(&added).query(&mut via_a).unwrap();
    assert_eq!(got, "1");
}

#[test]
fn a_subscriber_on_one_proxy_gets_what_the_other_publishes() {
    let (a, b) = two_proxies(shared_cluster(), &[]);
    let mut subscriber = Raw::connect(a.addr());
    assert_eq!(
        subscriber.call(&["SUBSCRIBE", "tp-news"]),
        "*3\r\n$9\r\nsubscribe\r\n$7\r\ntp-news\r\n:1\r\n"
    );
    let mut shard_subscriber = Raw::connect(a.addr());
    assert_eq!(
        shard_subscriber.call(&["SSUBSCRIBE", "tp-shard"]),
        "*3\r\n$10\r\nssubscribe\r\n$8\r\ntp-shard\r\n:1\r\n"
    );
    let mut publisher = Raw::connect(b.addr());
    // Both proxies subscribe on the master of slot 0, where B's PUBLISH runs: it counts A's
    // subscriber.
    assert_eq!(publisher.call(&["PUBLISH", "tp-news", "hello"]), ":1\r\n");
    assert_eq!(
        subscriber.read_reply(),
        "*3\r\n$7\r\nmessage\r\n$7\r\ntp-news\r\n$5\r\nhello\r\n"
    );
    assert_eq!(publisher.call(&["SPUBLISH", "tp-shard", "hi"]), ":1\r\n");
    assert_eq!(
        shard_subscriber.read_reply(),
        "*3\r\n$8\r\nsmessage\r\n$8\r\ntp-shard\r\n$2\r\nhi\r\n"
    );
    assert_eq!(
        publisher.call(&["PUBSUB", "NUMSUB", "tp-news"]),
        "*2\r\n$7\r\ntp-news\r\n:1\r\n"
    );
}

/// SCRIPT FLUSH on every master, behind both proxies' backs.
fn flush_scripts(cluster: &Cluster) {
    for master in cluster.masters() {
        let _: () = query(&master, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    }
}

#[test]
fn a_script_loaded_through_one_proxy_runs_through_the_other() {
    // Its own cluster: the test flushes the nodes' script caches.
    let cluster = Cluster::start(3, 0);
    let (a, b) = two_proxies(&cluster, &[]);
    let mut via_a = Raw::connect(a.addr());
    let mut via_b = Raw::connect(b.addr());
    let body = "return redis.call('INCR', KEYS[1])";
    let reply = via_a.call(&["SCRIPT", "LOAD", body]);
    let sha = reply.lines().nth(1).expect("a sha").to_string();
    // SCRIPT LOAD went to every master: B's EVALSHA finds it there.
    assert_eq!(via_b.call(&["EVALSHA", &sha, "1", "{tp}n"]), ":1\r\n");

    // The nodes lose their scripts. A saw the body and loads it again on NOSCRIPT; B never
    // saw it, so its client gets the node's NOSCRIPT (and answers with EVAL, as any client
    // of one Redis does), until a proxy has loaded the script on that node again.
    flush_scripts(&cluster);
    assert_eq!(
        via_b.call(&["EVALSHA", &sha, "1", "{tp}n"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(via_a.call(&["EVALSHA", &sha, "1", "{tp}n"]), ":2\r\n");
    assert_eq!(via_b.call(&["EVALSHA", &sha, "1", "{tp}n"]), ":3\r\n");

    // Once B has seen the body (EVAL), it reloads it on NOSCRIPT as well.
    assert_eq!(via_b.call(&["EVAL", body, "1", "{tp}n"]), ":4\r\n");
    flush_scripts(&cluster);
    assert_eq!(via_b.call(&["EVALSHA", &sha, "1", "{tp}n"]), ":5\r\n");
}

#[test]
fn a_watched_key_written_through_the_other_proxy_aborts_the_transaction() {
    let (a, b) = two_proxies(shared_cluster(), &[]);
    let mut tx = Raw::connect(a.addr());
    let mut other = Raw::connect(b.addr());
    assert_eq!(tx.call(&["SET", "{tpw}k", "start"]), "+OK\r\n");
    for (interfere, exec_reply) in [(true, "*-1\r\n"), (false, "*1\r\n+OK\r\n")] {
        assert_eq!(tx.call(&["WATCH", "{tpw}k"]), "+OK\r\n");
        assert_eq!(tx.call(&["MULTI"]), "+OK\r\n");
        assert_eq!(tx.call(&["SET", "{tpw}k", "mine"]), "+QUEUED\r\n");
        if interfere {
            assert_eq!(other.call(&["SET", "{tpw}k", "theirs"]), "+OK\r\n");
        }
        assert_eq!(tx.call(&["EXEC"]), exec_reply, "interfere: {interfere}");
        let expected = if interfere { "theirs" } else { "mine" };
        let got = other.call(&["GET", "{tpw}k"]);
        assert_eq!(got, format!("${}\r\n{expected}\r\n", expected.len()));
    }
}

/// The `name=` fields of a CLIENT LIST reply.
fn client_names(list: &str) -> BTreeSet<String> {
    list.split_whitespace()
        .filter_map(|field| field.strip_prefix("name="))
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn client_list_and_maxclients_are_per_proxy() {
    let (a, b) = two_proxies(shared_cluster(), &["--set", "maxclients=2"]);
    // The harness's readiness probe may still hold a place for a moment.
    a.wait_no_clients();
    b.wait_no_clients();
    let mut a1 = Raw::connect(a.addr());
    let mut a2 = Raw::connect(a.addr());
    let mut b1 = Raw::connect(b.addr());
    for (client, name) in [(&mut a1, "tp-a1"), (&mut a2, "tp-a2"), (&mut b1, "tp-b1")] {
        assert_eq!(client.call(&["CLIENT", "SETNAME", name]), "+OK\r\n");
    }
    let expected_a: BTreeSet<String> = ["tp-a1", "tp-a2"].map(String::from).into();
    assert_eq!(client_names(&a1.call(&["CLIENT", "LIST"])), expected_a);
    let expected_b: BTreeSet<String> = ["tp-b1"].map(String::from).into();
    assert_eq!(client_names(&b1.call(&["CLIENT", "LIST"])), expected_b);

    // A is full; B, with one client, takes another.
    let mut third = TcpStream::connect(a.addr()).unwrap();
    let (reply, closed) = read_until_close(&mut third, Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "-ERR max number of clients reached\r\n"
    );
    assert!(closed, "the refused client is disconnected");
    let mut b2 = Raw::connect(b.addr());
    assert_eq!(b2.call(&["PING"]), "+PONG\r\n");
}

#[test]
fn slowlog_is_the_clusters_and_monitor_shows_each_proxys_own_clients() {
    // Its own cluster: the test sets every master's slowlog threshold.
    let cluster = Cluster::start(3, 0);
    for master in cluster.masters() {
        let _: () = query(
            &master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(0),
        )
        .unwrap();
        let _: () = query(&master, redis::cmd("SLOWLOG").arg("RESET")).unwrap();
    }
    let (a, b) = two_proxies(&cluster, &[]);
    let mut via_a = Raw::connect(a.addr());
    let mut via_b = Raw::connect(b.addr());
    assert_eq!(via_a.call(&["SET", "tp-slow", "through-a"]), "+OK\r\n");
    // SLOWLOG GET merges every master's log: B shows the command A sent.
    let log = via_b.call(&["SLOWLOG", "GET", "128"]);
    assert!(log.contains("through-a"), "{log}");
    // MONITOR on B shows B's clients only: A's SET never, B's own GET.
    let mut monitor_b = Raw::connect(b.addr());
    assert_eq!(monitor_b.call(&["MONITOR"]), "+OK\r\n");
    assert_eq!(via_a.call(&["SET", "tp-monitor", "through-a"]), "+OK\r\n");
    assert_eq!(via_b.call(&["GET", "tp-monitor"]), "$9\r\nthrough-a\r\n");
    let line = monitor_b.read_reply();
    assert!(line.ends_with("] \"GET\" \"tp-monitor\"\r\n"), "{line}");
}
