//! WATCH of keys in several slots under `cross_slot_transactions: split`, against real
//! 3-master clusters: EXEC applies every slot when no watched key changed; a change to a
//! watched key in any slot before EXEC makes EXEC null with nothing applied; UNWATCH,
//! DISCARD and RESET clear every slot's watch; a watched key changed between EXEC's check
//! and its own slot's EXEC (forced with CLIENT PAUSE WRITE on that slot's master) answers
//! the applied slots' replies and an error in the aborted slot's places, and is counted;
//! `refuse` still answers -CROSSSLOT.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{http_get, new_dir, query, shared_cluster, wait_until, Cluster, Proxy, Raw};

fn split_config() -> String {
    let path = new_dir("watch-split-config").join("split.yaml");
    std::fs::write(&path, "cross_slot_transactions: split\n").unwrap();
    path.to_str().unwrap().to_owned()
}

fn split_proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        let config = split_config();
        Proxy::start(&[
            "--cluster",
            &shared_cluster().seeds_arg(),
            "--config",
            &config,
        ])
    })
}

fn refuse_proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

fn set(addr: &str, key: &str, value: &str) {
    let _: () = query(addr, redis::cmd("SET").arg(key).arg(value)).unwrap();
}

fn get(addr: &str, key: &str) -> Option<String> {
    query(addr, redis::cmd("GET").arg(key)).unwrap()
}

#[test]
fn watch_across_slots_then_exec_applies_every_slot() {
    let proxy = split_proxy().addr();
    let [a, b, c] = shared_cluster().keys_on_three_masters("wsplit1");
    set(proxy, &a, "1");
    set(proxy, &b, "2");
    let mut client = Raw::connect(proxy);
    assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
    // Commands between WATCH and MULTI run as usual.
    assert_eq!(client.call(&["GET", &a]), "$1\r\n1\r\n");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", &c, "3"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["INCR", &a]), "+QUEUED\r\n");
    assert_eq!(client.call(&["PING"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["EXEC"]), "*3\r\n+OK\r\n:2\r\n+PONG\r\n");
    assert_eq!(get(proxy, &a).as_deref(), Some("2"));
    assert_eq!(get(proxy, &c).as_deref(), Some("3"));

    // A transaction of watches only: Redis's empty EXEC.
    assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["EXEC"]), "*0\r\n");
}

/// Watches `a`, `b` and `c` (with two WATCH commands, so later ones join the earlier
/// slots' connections), lets `change` run, then queues writes to `a` and `b` (`c` is
/// watched only) and returns EXEC's reply.
fn watched_exec(proxy: &str, keys: &[String; 3], change: impl FnOnce()) -> String {
    let [a, b, c] = keys;
    let mut client = Raw::connect(proxy);
    assert_eq!(client.call(&["WATCH", a]), "+OK\r\n");
    assert_eq!(client.call(&["WATCH", b, c]), "+OK\r\n");
    change();
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", a, "mine"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["SET", b, "mine"]), "+QUEUED\r\n");
    client.call(&["EXEC"])
}

#[test]
fn a_change_to_a_watched_key_in_any_slot_makes_exec_null_and_applies_nothing() {
    let proxy = split_proxy().addr();
    let keys = shared_cluster().keys_on_three_masters("wsplit2");
    for changed in 0..3 {
        for key in &keys {
            set(proxy, key, "before");
        }
        let exec = watched_exec(proxy, &keys, || set(proxy, &keys[changed], "theirs"));
        assert_eq!(exec, "*-1\r\n", "a change to {} before EXEC", keys[changed]);
        for (i, key) in keys.iter().enumerate() {
            let want = if i == changed { "theirs" } else { "before" };
            assert_eq!(get(proxy, key).as_deref(), Some(want), "{key}");
        }
    }
    // Unchanged, the same transaction applies.
    let exec = watched_exec(proxy, &keys, || {});
    assert_eq!(exec, "*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(get(proxy, &keys[0]).as_deref(), Some("mine"));
    assert_eq!(get(proxy, &keys[1]).as_deref(), Some("mine"));
}

#[test]
fn a_change_in_resp3_makes_exec_the_resp3_null() {
    let proxy = split_proxy().addr();
    let [a, b, _] = shared_cluster().keys_on_three_masters("wsplit3");
    let mut client = Raw::connect(proxy);
    assert!(client.call(&["HELLO", "3"]).starts_with('%'));
    assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
    set(proxy, &b, "theirs");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", &a, "mine"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["EXEC"]), "_\r\n");
    assert_eq!(get(proxy, &a), None);
}

#[test]
fn unwatch_discard_and_reset_clear_the_watch_of_every_slot() {
    let proxy = split_proxy().addr();
    let [a, b, c] = shared_cluster().keys_on_three_masters("wsplit4");
    for clear in ["UNWATCH", "DISCARD", "RESET"] {
        set(proxy, &b, "before");
        let mut client = Raw::connect(proxy);
        assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
        if clear == "DISCARD" {
            assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
        }
        let answer = client.call(&[clear]);
        assert!(answer == "+OK\r\n" || answer == "+RESET\r\n", "{answer}");
        set(proxy, &b, "theirs");
        assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
        assert_eq!(client.call(&["SET", &a, clear]), "+QUEUED\r\n");
        assert_eq!(client.call(&["SET", &c, clear]), "+QUEUED\r\n");
        assert_eq!(
            client.call(&["EXEC"]),
            "*2\r\n+OK\r\n+OK\r\n",
            "after {clear} no key is watched"
        );
        assert_eq!(get(proxy, &a).as_deref(), Some(clear));
    }
    // And EXEC ends the watches too: a change after it fails nothing later.
    let mut client = Raw::connect(proxy);
    assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["EXEC"]), "*0\r\n");
    set(proxy, &b, "again");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", &c, "after-exec"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["EXEC"]), "*1\r\n+OK\r\n");
}

#[test]
fn watch_inside_multi_stays_redis_error() {
    let [a, b, _] = shared_cluster().keys_on_three_masters("wsplit5");
    let mut client = Raw::connect(split_proxy().addr());
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(
        client.call(&["WATCH", &a, &b]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(client.call(&["EXEC"]), "*0\r\n");
}

#[test]
fn refuse_mode_still_answers_crossslot_to_a_watch_across_slots() {
    let [a, b, _] = shared_cluster().keys_on_three_masters("wsplit6");
    let mut client = Raw::connect(refuse_proxy().addr());
    let answer = client.call(&["WATCH", &a, &b]);
    assert!(
        answer.starts_with("-CROSSSLOT Keys in request don't hash to the same slot"),
        "{answer}"
    );
    assert_eq!(client.call(&["WATCH", &a]), "+OK\r\n");
    let answer = client.call(&["WATCH", &b]);
    assert!(answer.starts_with("-CROSSSLOT"), "{answer}");
}

/// Lines of `node`'s CLIENT LIST of connections blocked now (flag `b`), such as writes
/// held by CLIENT PAUSE WRITE.
fn blocked_clients(node: &str) -> Vec<String> {
    let list: String = query(node, redis::cmd("CLIENT").arg("LIST")).unwrap();
    list.lines()
        .filter(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("flags="))
                .is_some_and(|flags| flags.contains('b'))
        })
        .map(str::to_owned)
        .collect()
}

fn metric(proxy: &Proxy, series: &str) -> f64 {
    let (status, body) = http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// The one case weaker than one Redis, made deterministic: `b`'s master holds writes
/// (CLIENT PAUSE WRITE), so another client's write to the watched `b` waits there, EXEC's
/// check (reads) passes, `a`'s slot applies, and `b`'s block waits behind that write; on
/// unpause the write goes first, and `b`'s master aborts its block.
#[test]
fn a_watched_key_changed_after_the_check_aborts_its_slot_alone_and_is_counted() {
    let cluster = Cluster::start(3, 0);
    let config = split_config();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg(), "--config", &config]);
    let [a, b, _] = cluster.keys_on_three_masters("wsplit7");
    let b_master = cluster.node_for_slot(cluster.keyslot(&b));
    set(proxy.addr(), &a, "before");
    set(proxy.addr(), &b, "before");

    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["WATCH", &a, &b]), "+OK\r\n");
    assert_eq!(client.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(client.call(&["SET", &a, "mine"]), "+QUEUED\r\n");
    assert_eq!(client.call(&["SET", &b, "mine"]), "+QUEUED\r\n");

    let _: () = query(
        &b_master,
        redis::cmd("CLIENT").arg("PAUSE").arg(20_000).arg("WRITE"),
    )
    .unwrap();
    let mut writer = Raw::connect(&b_master);
    writer.send(&["SET", &b, "theirs"]);
    wait_until(
        "the other client's write held",
        Duration::from_secs(5),
        || blocked_clients(&b_master).len() == 1,
    );
    client.send(&["EXEC"]);
    wait_until("b's block held behind it", Duration::from_secs(5), || {
        blocked_clients(&b_master).len() == 2
    });
    wait_until("a's slot applied", Duration::from_secs(5), || {
        get(proxy.addr(), &a).as_deref() == Some("mine")
    });
    let _: () = query(&b_master, redis::cmd("CLIENT").arg("UNPAUSE")).unwrap();

    assert_eq!(writer.read_reply(), "+OK\r\n");
    assert_eq!(
        client.read_reply(),
        "*2\r\n+OK\r\n-ERR proxy: a key watched in this slot changed after EXEC checked the \
         watches: this slot's commands did not run, other slots' commands did \
         (cross_slot_transactions: split)\r\n"
    );
    assert_eq!(get(proxy.addr(), &b).as_deref(), Some("theirs"));
    assert_eq!(
        metric(&proxy, "slotbridge_split_transactions_partly_applied_total"),
        1.0
    );
}
