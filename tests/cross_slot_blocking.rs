//! Multi-key blocking pops across slots (BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP)
//! through the proxy in front of a 3-master cluster, each key on another master: with data
//! present, every reply equals what one redis-server 7.0 gives for the same sequence, in
//! RESP2 and RESP3 (the first key in order with data wins, WRONGTYPE in Redis's order, the
//! timeout's errors and its null); without, a push to any key serves the blocked client,
//! one push serves exactly one of two clients blocked on overlapping keys, CLIENT UNBLOCK
//! ends the wait, a client that goes away leaves no wait behind, under a key layout the
//! reply names the client's key, and `refuse` answers `-CROSSSLOT` naming the setting.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::{query, replay_on_both, shared_cluster, wait_until, Proxy, Raw, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// The tests count blocked connections on the shared masters: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sequences run on one redis-server and through the proxy, `{a}` `{b}` `{c}` the keys.
const SEQUENCES: &[&str] = &[
    // The second key has data, the first none: the second's element, from either end.
    "RPUSH {b} x y z|RPUSH {c} w|BLPOP {a} {b} {c} 1|BRPOP {a} {b} {c} 1|BLPOP {c} {b} 1|LRANGE {b} 0 -1",
    "RPUSH {b} 1 2 3 4|BLMPOP 1 3 {a} {b} {c} LEFT COUNT 2|BLMPOP 1 3 {a} {b} {c} RIGHT|BLMPOP 1 2 {a} {b} RIGHT COUNT 9|EXISTS {b}",
    "ZADD {b} 1 m 2 n 3 o 4 p|ZADD {c} 0 q|BZPOPMIN {a} {b} {c} 1|BZPOPMAX {a} {b} {c} 1|BZMPOP 1 3 {a} {b} {c} MIN COUNT 5|BZMPOP 1 2 {a} {c} MAX|EXISTS {b} {c}",
    // WRONGTYPE only when the wrong key comes before the first with data, as in Redis.
    "SET {a} str|RPUSH {b} x|BLPOP {b} {a} 1|RPUSH {b} y|BLPOP {a} {b} 1|LLEN {b}|BZPOPMIN {c} {a} 1",
    "SET {b} str|ZADD {c} 1 m|BZPOPMIN {a} {b} {c} 1|ZCARD {c}|BLMPOP 1 3 {a} {c} {b} LEFT",
    // Errors before any key is looked at.
    "BLPOP {a} {b} x|BLPOP {a} {b} -1|BZPOPMIN {a} {b} inf|BLMPOP 1 0 {a} {b} LEFT|BLMPOP 1 2 {a} {b} UP|BLMPOP 1 2 {a} {b} LEFT COUNT 0|BZMPOP 1 2 {a} {b} LEFT",
    // Nothing anywhere: the timeout's null.
    "BLPOP {a} {b} {c} 0.2|BRPOP {a} {c} 0.1|BLPOP {a} {b} 0x1.8p-4|BLPOP {a} {b} 0x|BLPOP {a} {b} 0x1p|BLMPOP 0.1 2 {a} {b} LEFT|BZPOPMIN {a} {b} {c} 0.2|BZMPOP 0.1 2 {b} {c} MAX",
];

#[test]
fn replies_with_data_present_or_none_equal_one_redis() {
    let _serial = serial();
    let standalone = Standalone::start();
    let keys = shared_cluster().keys_on_three_masters("bpop:same");
    replay_on_both(
        standalone.addr(),
        proxy().addr(),
        SEQUENCES,
        &keys,
        |step, want| step.contains(" 0.2") && want.starts_with(['*', '_']) && want.len() < 6,
    );
}

/// Connections on every master waiting in BLMOVE (what a blocked emulated pop runs).
fn waits_on_masters() -> usize {
    shared_cluster().connections_on_masters(&[" cmd=blmove "])
}

#[test]
fn a_push_to_any_key_serves_the_blocked_client() {
    let _serial = serial();
    let [a, b, c] = shared_cluster().keys_on_three_masters("bpop:push");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    admin.call_line(&format!("DEL {a} {b} {c}"));
    for (resp3, blocking, push, served) in [
        (
            false,
            "BLPOP {a} {b} {c} 0",
            "RPUSH {c} v",
            "*2\r\n${n}\r\n{c}\r\n$1\r\nv\r\n",
        ),
        (
            true,
            "BRPOP {a} {b} {c} 5",
            "LPUSH {b} v",
            "*2\r\n${n}\r\n{b}\r\n$1\r\nv\r\n",
        ),
        (
            false,
            "BZPOPMIN {a} {b} {c} 0",
            "ZADD {c} 5 m",
            "*3\r\n${n}\r\n{c}\r\n$1\r\nm\r\n$1\r\n5\r\n",
        ),
        (
            true,
            "BZMPOP 0 3 {a} {b} {c} MAX",
            "ZADD {a} 2.5 m",
            "*2\r\n${n}\r\n{a}\r\n*1\r\n*2\r\n$1\r\nm\r\n,2.5\r\n",
        ),
    ] {
        let fill = |text: &str| {
            text.replace("{a}", &a)
                .replace("{b}", &b)
                .replace("{c}", &c)
                .replace("{n}", &a.len().to_string())
        };
        let mut blocked = Raw::connect_in(proxy().addr(), resp3);
        let id = blocked.client_id();
        blocked.send_line(&fill(blocking));
        wait_until("the client blocked", Duration::from_secs(5), || {
            admin.shows_blocked(&id)
        });
        assert_eq!(blocked.reply_within(Duration::from_millis(300)), None);
        let started = Instant::now();
        admin.call_line(&fill(push));
        let reply = blocked
            .reply_within(Duration::from_secs(3))
            .expect("served");
        assert_eq!(reply, fill(served), "{blocking}");
        // Sorted sets are polled: served within the longest interval, and some slack.
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(admin.call_line(&format!("EXISTS {a} {b} {c}")), ":0\r\n");
    }
}

#[test]
fn one_push_serves_exactly_one_of_two_clients_blocked_on_overlapping_keys() {
    let _serial = serial();
    let [a, b, c] = shared_cluster().keys_on_three_masters("bpop:two");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    for (first_cmd, second_cmd, push) in [
        ("BLPOP {a} {b} 0", "BLPOP {b} {c} 0", "RPUSH {b} {e}"),
        ("BZPOPMIN {a} {b} 0", "BZPOPMAX {c} {b} 0", "ZADD {b} 1 {e}"),
    ] {
        admin.call_line(&format!("DEL {a} {b} {c}"));
        let fill = |text: &str, element: &str| {
            text.replace("{a}", &a)
                .replace("{b}", &b)
                .replace("{c}", &c)
                .replace("{e}", element)
        };
        let mut first = Raw::connect_in(proxy().addr(), false);
        let mut second = Raw::connect_in(proxy().addr(), false);
        let (first_id, second_id) = (first.client_id(), second.client_id());
        first.send_line(&fill(first_cmd, ""));
        second.send_line(&fill(second_cmd, ""));
        wait_until("both clients blocked", Duration::from_secs(5), || {
            admin.shows_blocked(&first_id) && admin.shows_blocked(&second_id)
        });
        admin.call_line(&fill(push, "one"));
        let replies = [
            first.reply_within(Duration::from_millis(800)),
            second.reply_within(Duration::from_millis(800)),
        ];
        let served = replies.iter().filter(|reply| reply.is_some()).count();
        assert_eq!(served, 1, "{first_cmd} / {second_cmd}: {replies:?}");
        let winner = replies.iter().flatten().next().unwrap().clone();
        assert!(winner.contains("\r\none\r\n"), "{winner}");
        // The other keeps waiting, and the next push is its.
        let waiting = if replies[0].is_none() {
            &mut first
        } else {
            &mut second
        };
        admin.call_line(&fill(push, "two"));
        let other = waiting
            .reply_within(Duration::from_secs(3))
            .expect("the other served");
        assert!(other.contains("\r\ntwo\r\n"), "{other}");
        assert_eq!(admin.call_line(&format!("EXISTS {b}")), ":0\r\n");
    }
}

#[test]
fn client_unblock_ends_the_wait_and_a_disconnect_leaves_none() {
    let _serial = serial();
    let [a, b, c] = shared_cluster().keys_on_three_masters("bpop:unblock");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    admin.call_line(&format!("DEL {a} {b} {c}"));
    for (blocking, mode, answer) in [
        ("BLPOP {a} {b} {c} 0", "TIMEOUT", "*-1\r\n"),
        (
            "BRPOP {a} {b} 0",
            "ERROR",
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n",
        ),
        ("BZPOPMIN {a} {b} {c} 0", "TIMEOUT", "*-1\r\n"),
    ] {
        let blocking = blocking
            .replace("{a}", &a)
            .replace("{b}", &b)
            .replace("{c}", &c);
        let mut blocked = Raw::connect_in(proxy().addr(), false);
        let id = blocked.client_id();
        blocked.send_line(&blocking);
        // A sorted-set pop shows as blocked while it waits between two probes.
        wait_until("unblocked", Duration::from_secs(5), || {
            admin.call(&["CLIENT", "UNBLOCK", &id, mode]) == ":1\r\n"
        });
        let reply = blocked
            .reply_within(Duration::from_secs(3))
            .expect("answered");
        assert_eq!(reply, answer, "{blocking}");
    }
    // A client that goes away ends its waits on every master.
    let before = waits_on_masters();
    let mut leaving = Raw::connect_in(proxy().addr(), false);
    let id = leaving.client_id();
    leaving.send_line(&format!("BLPOP {a} {b} {c} 0"));
    wait_until("waits on every master", Duration::from_secs(5), || {
        admin.shows_blocked(&id) && waits_on_masters() >= before + 3
    });
    drop(leaving);
    wait_until("no wait left", Duration::from_secs(5), || {
        waits_on_masters() <= before
    });
    assert_eq!(admin.call_line(&format!("EXISTS {a} {b} {c}")), ":0\r\n");
}

#[test]
fn refused_blocking_pops_name_their_setting() {
    let refusing = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.blocking=refuse",
    ]);
    let [a, b, c] = shared_cluster().keys_on_three_masters("bpop:off");
    let mut conn = Raw::connect_in(refusing.addr(), false);
    for command in [
        format!("BLPOP {a} {b} 0"),
        format!("BRPOP {a} {b} {c} 1"),
        format!("BLMPOP 0 2 {a} {b} LEFT"),
        format!("BZPOPMIN {a} {c} 0"),
        format!("BZPOPMAX {a} {c} 0"),
        format!("BZMPOP 0 2 {a} {b} MIN"),
    ] {
        assert_eq!(
            conn.call_line(&command),
            "-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.blocking)\r\n",
            "{command}"
        );
    }
    // One slot is forwarded whatever the setting.
    assert_eq!(conn.call_line("RPUSH {bpop}x v"), ":1\r\n");
    assert_eq!(
        conn.call_line("BLPOP {bpop}y {bpop}x 0"),
        "*2\r\n$7\r\n{bpop}x\r\n$1\r\nv\r\n"
    );
}

/// Under a key layout the keys are waited on by their cluster names and the reply names
/// the key as the client wrote it.
#[test]
fn under_a_layout_the_reply_names_the_clients_key() {
    let _serial = serial();
    let p = "bpoply";
    let layout = Proxy::start_with_layout(
        &shared_cluster().seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        p,
    );
    let cluster = shared_cluster();
    // Message logs of two chats live under their chats' hash tags: two slots.
    let chats: Vec<String> = (1..)
        .map(|i| format!("{p}:msgs:chat-{i}"))
        .take(40)
        .collect();
    let tagged = |log: &str| {
        let chat = log.rsplit(':').next().unwrap();
        cluster.node_for_slot(cluster.keyslot(&format!("{p}:{{m:{chat}}}:z")))
    };
    let first = &chats[0];
    let second = chats
        .iter()
        .find(|log| tagged(log) != tagged(first))
        .expect("a chat on another master");
    let mut conn = Raw::connect_in(layout.addr(), false);
    conn.call_line(&format!("DEL {first} {second}"));
    assert_eq!(conn.call_line(&format!("RPUSH {second} hello")), ":1\r\n");
    // The log is where the layout puts it, on another master than the first chat's.
    let chat = second.rsplit(':').next().unwrap();
    let stored: i64 = query(
        &tagged(second),
        redis::cmd("EXISTS").arg(format!("{p}:{{m:{chat}}}:z")),
    )
    .unwrap();
    assert_eq!(stored, 1);
    assert_eq!(
        conn.call_line(&format!("BLPOP {first} {second} 1")),
        format!("*2\r\n${}\r\n{second}\r\n$5\r\nhello\r\n", second.len())
    );
    // Blocked on both, served by a push to the first.
    let mut blocked = Raw::connect_in(layout.addr(), false);
    blocked.send_line(&format!("BRPOP {second} {first} 0"));
    assert_eq!(blocked.reply_within(Duration::from_millis(300)), None);
    conn.call_line(&format!("LPUSH {first} later"));
    assert_eq!(
        blocked
            .reply_within(Duration::from_secs(3))
            .expect("served"),
        format!("*2\r\n${}\r\n{first}\r\n$5\r\nlater\r\n", first.len())
    );
}
