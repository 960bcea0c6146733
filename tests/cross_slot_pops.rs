//! LMPOP and ZMPOP of keys in several slots through the proxy in front of a 3-master
//! cluster, each key on another master: every reply equals what one redis-server 7.0 gives
//! for the same sequence, in RESP2 and RESP3 (the first key in order with data popped,
//! COUNT, both ends, the null array when every key is empty, WRONGTYPE in Redis's order,
//! the argument errors); clients popping the same keys at once while others push never get
//! one element twice and lose none; keys in one slot are forwarded as before; under a key
//! layout the reply names the client's key; and `cross_slot.blocking: refuse` answers
//! `-CROSSSLOT` naming the setting.

mod common;

use std::collections::HashSet;
use std::thread;

use common::{replay_on_both, shared_cluster, Proxy, Raw, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: std::sync::OnceLock<Proxy> = std::sync::OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// Sequences run on one redis-server and through the proxy, `{a}` `{b}` `{c}` the keys.
const SEQUENCES: &[&str] = &[
    // Lists: the first key in order with data, from either end, COUNT past the length.
    "RPUSH {b} 1 2 3 4|RPUSH {c} x|LMPOP 3 {a} {b} {c} LEFT|LMPOP 3 {a} {b} {c} RIGHT COUNT 2|LMPOP 2 {a} {b} LEFT COUNT 9|EXISTS {b}|LMPOP 3 {a} {b} {c} RIGHT|LMPOP 3 {a} {b} {c} LEFT",
    "RPUSH {a} a1|RPUSH {c} c1 c2|LMPOP 3 {c} {b} {a} left count 1|LMPOP 2 {b} {a} RIGHT|LRANGE {c} 0 -1",
    // Sorted sets: MIN and MAX, COUNT, scores in the client's protocol.
    "ZADD {b} 1 m 2.5 n 3 o 4 p|ZADD {c} 0 q|ZMPOP 3 {a} {b} {c} MIN|ZMPOP 3 {a} {b} {c} MAX COUNT 2|ZMPOP 3 {a} {b} {c} MIN COUNT 5|ZMPOP 2 {b} {c} max|ZMPOP 3 {a} {b} {c} MIN|EXISTS {b} {c}",
    // WRONGTYPE only when the wrong key comes before the first with data, as in Redis.
    "SET {a} str|RPUSH {b} x y|LMPOP 2 {b} {a} LEFT|LMPOP 2 {a} {b} LEFT|LLEN {b}|ZADD {c} 1 m|ZMPOP 2 {c} {a} MIN|ZMPOP 2 {a} {c} MIN|ZMPOP 2 {b} {c} MAX",
    "RPUSH {c} x|LMPOP 3 {a} {b} {c} LEFT|ZADD {b} 1 m|LMPOP 3 {a} {b} {c} LEFT",
    // Every key empty: the null array.
    "LMPOP 3 {a} {b} {c} LEFT|ZMPOP 2 {a} {c} MAX COUNT 3",
    // Errors before any key is looked at.
    "LMPOP 0 {a} {b} LEFT|LMPOP 2 {a} {b} UP|LMPOP 2 {a} {b} LEFT COUNT 0|LMPOP 2 {a} {b} LEFT COUNT|ZMPOP 2 {a} {b} LEFT|ZMPOP 2 {a} {b} MIN COUNT x|LMPOP 2 {a} {b} LEFT COUNT 1 COUNT 1",
];

#[test]
fn replies_equal_one_redis_in_both_protocols() {
    let standalone = Standalone::start();
    let keys = shared_cluster().keys_on_three_masters("mpop:same");
    replay_on_both(
        standalone.addr(),
        proxy().addr(),
        SEQUENCES,
        &keys,
        |_, _| false,
    );
}

/// The elements of an LMPOP reply in RESP2 (`*2 key *n elements`), none for the null.
fn popped_elements(reply: &str) -> Vec<String> {
    if reply == "*-1\r\n" {
        return Vec::new();
    }
    let lines: Vec<&str> = reply.split("\r\n").collect();
    assert!(lines[0] == "*2" && lines[3].starts_with('*'), "{reply:?}");
    lines[4..]
        .chunks(2)
        .filter(|pair| pair.len() == 2 && !pair[1].is_empty())
        .map(|pair| pair[1].to_string())
        .collect()
}

#[test]
fn concurrent_pops_take_every_element_once() {
    const PER_KEY: usize = 300;
    let [a, b, c] = shared_cluster().keys_on_three_masters("mpop:race");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    admin.call_line(&format!("DEL {a} {b} {c}"));
    let keys = [a.clone(), b.clone(), c.clone()];
    // Pushers fill the three keys while poppers empty them from both ends.
    let pushers: Vec<_> = keys
        .iter()
        .map(|key| {
            let key = key.clone();
            thread::spawn(move || {
                let mut conn = Raw::connect_in(proxy().addr(), false);
                for i in 0..PER_KEY {
                    conn.call_line(&format!("RPUSH {key} {key}#{i}"));
                }
            })
        })
        .collect();
    let poppers: Vec<_> = (0..4)
        .map(|n| {
            let order = format!(
                "{} {} {}",
                keys[n % 3],
                keys[(n + 1) % 3],
                keys[(n + 2) % 3]
            );
            let end = if n % 2 == 0 { "LEFT" } else { "RIGHT" };
            thread::spawn(move || {
                let mut conn = Raw::connect_in(proxy().addr(), false);
                let mut taken = Vec::new();
                let mut empty_in_a_row = 0;
                while empty_in_a_row < 50 {
                    let reply = conn.call_line(&format!("LMPOP 3 {order} {end} COUNT 2"));
                    let elements = popped_elements(&reply);
                    empty_in_a_row = if elements.is_empty() {
                        empty_in_a_row + 1
                    } else {
                        0
                    };
                    taken.extend(elements);
                }
                taken
            })
        })
        .collect();
    for pusher in pushers {
        pusher.join().unwrap();
    }
    let mut taken: Vec<String> = poppers
        .into_iter()
        .flat_map(|popper| popper.join().unwrap())
        .collect();
    // What the poppers left (they may stop before the last pushes): popped here.
    loop {
        let elements =
            popped_elements(&admin.call_line(&format!("LMPOP 3 {a} {b} {c} LEFT COUNT 100")));
        if elements.is_empty() {
            break;
        }
        taken.extend(elements);
    }
    let distinct: HashSet<&String> = taken.iter().collect();
    assert_eq!(distinct.len(), taken.len(), "an element popped twice");
    assert_eq!(taken.len(), 3 * PER_KEY, "an element lost");
}

#[test]
fn keys_in_one_slot_are_forwarded_as_before() {
    let mut conn = Raw::connect_in(proxy().addr(), false);
    conn.call_line("DEL {mpop}x {mpop}y");
    assert_eq!(conn.call_line("RPUSH {mpop}y v w"), ":2\r\n");
    assert_eq!(
        conn.call_line("LMPOP 2 {mpop}x {mpop}y RIGHT"),
        "*2\r\n$7\r\n{mpop}y\r\n*1\r\n$1\r\nw\r\n"
    );
    // Planned as a forward, where keys in several slots are carried out by the proxy.
    let explained = conn.call_line("SLOTBRIDGE EXPLAIN LMPOP 2 {mpop}x {mpop}y RIGHT");
    assert!(explained.contains("shape: forward"), "{explained}");
    let [a, b, _] = shared_cluster().keys_on_three_masters("mpop:explain");
    let explained = conn.call_line(&format!("SLOTBRIDGE EXPLAIN ZMPOP 2 {a} {b} MIN"));
    assert!(explained.contains("shape: crossslot"), "{explained}");
}

#[test]
fn refused_pops_name_their_setting() {
    let refusing = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.blocking=refuse",
    ]);
    let [a, b, c] = shared_cluster().keys_on_three_masters("mpop:off");
    let mut conn = Raw::connect_in(refusing.addr(), false);
    for command in [
        format!("LMPOP 2 {a} {b} LEFT"),
        format!("ZMPOP 3 {a} {b} {c} MAX COUNT 2"),
    ] {
        assert_eq!(
            conn.call_line(&command),
            "-CROSSSLOT Keys in request don't hash to the same slot (emulation off: cross_slot.blocking)\r\n",
            "{command}"
        );
    }
    assert_eq!(conn.call_line("RPUSH {mpop}r v"), ":1\r\n");
    assert_eq!(
        conn.call_line("LMPOP 2 {mpop}q {mpop}r LEFT"),
        "*2\r\n$7\r\n{mpop}r\r\n*1\r\n$1\r\nv\r\n"
    );
}

/// Under a key layout the keys are probed and popped by their cluster names and the reply
/// names the key as the client wrote it.
#[test]
fn under_a_layout_the_reply_names_the_clients_key() {
    let p = "mpoply";
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
    assert_eq!(
        conn.call_line(&format!("LMPOP 2 {first} {second} LEFT")),
        format!(
            "*2\r\n${}\r\n{second}\r\n*1\r\n$5\r\nhello\r\n",
            second.len()
        )
    );
    assert_eq!(
        conn.call_line(&format!("LMPOP 2 {first} {second} LEFT")),
        "*-1\r\n"
    );
}
