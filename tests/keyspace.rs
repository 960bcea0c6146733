//! Keyspace notifications through the proxy against a real 3-master cluster: Redis Cluster
//! publishes them only on the master that owns the key, so the proxy must listen on every
//! master and merge; under a key layout the subscriber sees legacy names (channels,
//! keyevent payloads, its own pattern) and never an index or marker key.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{query, shared_cluster, Cluster, Proxy};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

/// One delivered message: (pattern, channel, payload).
type Seen = (Option<String>, String, String);

fn enable_notifications(cluster: &Cluster) {
    for master in cluster.masters() {
        let _: () = query(
            &master,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("notify-keyspace-events")
                .arg("KEA"),
        )
        .unwrap_or_else(|e| panic!("CONFIG SET on {master}: {e}"));
    }
}

/// Every message until the subscriber has been quiet for a while, counted.
fn drain(pubsub: &mut redis::PubSub<'_>) -> BTreeMap<Seen, usize> {
    pubsub
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = BTreeMap::new();
    while Instant::now() < deadline {
        let Ok(message) = pubsub.get_message() else {
            break;
        };
        let pattern = message.from_pattern().then(|| {
            message
                .get_pattern::<String>()
                .expect("pattern is a string")
        });
        let payload = message
            .get_payload::<String>()
            .expect("payload is a string");
        *seen
            .entry((pattern, message.get_channel_name().to_string(), payload))
            .or_insert(0) += 1;
    }
    seen
}

fn expect(entries: &[(Option<&str>, &str, &str)]) -> BTreeMap<Seen, usize> {
    let mut out = BTreeMap::new();
    for (pattern, channel, payload) in entries {
        *out.entry((
            pattern.map(str::to_string),
            channel.to_string(),
            payload.to_string(),
        ))
        .or_insert(0) += 1;
    }
    out
}

/// The master holding `key` (read on the cluster directly), if any holds it.
fn holder(cluster: &Cluster, pattern: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for master in cluster.masters() {
        let keys: Vec<String> = query(&master, redis::cmd("KEYS").arg(pattern)).unwrap();
        found.extend(keys.into_iter().map(|k| (k, master.clone())));
    }
    found
}

/// Keys (of the form `{base}{n}`) whose slots are owned by different masters, one per master.
fn one_key_per_master(cluster: &Cluster, base: &str) -> Vec<String> {
    let mut by_master: BTreeMap<String, String> = BTreeMap::new();
    for n in 0..200 {
        let key = format!("{base}{n}");
        let master = cluster.node_for_slot(cluster.keyslot(&key));
        by_master.entry(master).or_insert(key);
    }
    by_master.into_values().collect()
}

fn under_layout(cluster: &Cluster) {
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let mut writer = proxy.connect();
    // Chat records spread over 32 buckets: find two that live on different masters.
    let ids: Vec<String> = (0..16).map(|n| format!("ks{n}")).collect();
    for id in &ids {
        let _: () = redis::cmd("SET")
            .arg(format!("mybot:chat:{id}"))
            .arg("0")
            .query(&mut writer)
            .unwrap();
    }
    let records = holder(cluster, "mybot:*:r:ks*");
    let (first_key, first_master) = records.first().expect("records on the cluster").clone();
    let (second_key, _) = records
        .iter()
        .find(|(_, master)| *master != first_master)
        .expect("records on two masters")
        .clone();
    let id_of = |cluster_key: &str| {
        ids.iter()
            .find(|id| cluster_key.ends_with(&format!(":r:{id}")))
            .expect("record of a written id")
            .clone()
    };
    let (a, b) = (id_of(&first_key), id_of(&second_key));

    let mut sub_con = proxy.connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:mybot:chat:*").unwrap();
    pubsub.psubscribe("__keyspace@0__:other:*").unwrap();
    pubsub.subscribe("__keyevent@0__:set").unwrap();
    for key in [
        format!("mybot:chat:{a}"),
        format!("mybot:chat:{b}"),
        "other:x".to_string(),
    ] {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("1")
            .query(&mut writer)
            .unwrap();
    }
    let seen = drain(&mut pubsub);
    let (chat_a, chat_b) = (format!("mybot:chat:{a}"), format!("mybot:chat:{b}"));
    let (space_a, space_b) = (
        format!("__keyspace@0__:{chat_a}"),
        format!("__keyspace@0__:{chat_b}"),
    );
    let pattern = Some("__keyspace@0__:mybot:chat:*");
    let wanted = expect(&[
        (pattern, &space_a, "set"),
        (pattern, &space_b, "set"),
        (
            Some("__keyspace@0__:other:*"),
            "__keyspace@0__:other:x",
            "set",
        ),
        (None, "__keyevent@0__:set", &chat_a),
        (None, "__keyevent@0__:set", &chat_b),
        (None, "__keyevent@0__:set", "other:x"),
    ]);
    assert_eq!(seen, wanted, "each notification once, under legacy names");
    for (_, channel, payload) in seen.keys() {
        assert!(
            !channel.contains('{') && !payload.contains('{'),
            "a cluster-side name leaked: {channel} {payload}"
        );
    }

    // RESP3: the same notification as exact push frames.
    let mut raw = TcpStream::connect(proxy.addr()).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    raw.write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n").unwrap();
    read_for(&mut raw, Duration::from_millis(500));
    let channel = "__keyevent@0__:set";
    raw.write_all(
        format!(
            "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
            channel.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let confirmation = read_for(&mut raw, Duration::from_millis(800));
    assert_eq!(
        String::from_utf8_lossy(&confirmation),
        format!(
            ">3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
            channel.len()
        )
    );
    let _: () = redis::cmd("SET")
        .arg(&chat_a)
        .arg("2")
        .query(&mut writer)
        .unwrap();
    let push = read_for(&mut raw, Duration::from_millis(1500));
    assert_eq!(
        String::from_utf8_lossy(&push),
        format!(
            ">3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n{chat_a}\r\n",
            channel.len(),
            chat_a.len()
        )
    );
}

/// Everything the peer sends within `window`.
fn read_for(stream: &mut TcpStream, window: Duration) -> Vec<u8> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match common::read_some(stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    out
}

fn without_layout(cluster: &Cluster) {
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let keys = one_key_per_master(cluster, "plainks:");
    assert_eq!(keys.len(), 3, "a key on each master");
    let mut sub_con = proxy.connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:plainks:*").unwrap();
    // A pattern that matches ordinary channels and notifications alike.
    let mut all_con = proxy.connect();
    let mut all = all_con.as_pubsub();
    all.psubscribe("*").unwrap();
    let mut writer = proxy.connect();
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("1")
            .query(&mut writer)
            .unwrap();
    }
    let _: i64 = redis::cmd("PUBLISH")
        .arg("plainks-news")
        .arg("hello")
        .query(&mut writer)
        .unwrap();
    let pattern = "__keyspace@0__:plainks:*";
    let channels: Vec<String> = keys.iter().map(|k| format!("__keyspace@0__:{k}")).collect();
    let wanted: Vec<(Option<&str>, &str, &str)> = channels
        .iter()
        .map(|c| (Some(pattern), c.as_str(), "set"))
        .collect();
    assert_eq!(
        drain(&mut pubsub),
        expect(&wanted),
        "events of every master"
    );
    let mut wanted: Vec<(Option<&str>, &str, &str)> = channels
        .iter()
        .map(|c| (Some("*"), c.as_str(), "set"))
        .collect();
    for key in &keys {
        wanted.push((Some("*"), "__keyevent@0__:set", key.as_str()));
    }
    wanted.push((Some("*"), "plainks-news", "hello"));
    assert_eq!(
        drain(&mut all),
        expect(&wanted),
        "each message once, notifications from every master"
    );
}

#[test]
fn keyspace_notifications_from_every_master_under_legacy_names() {
    let cluster = shared_cluster();
    enable_notifications(cluster);
    without_layout(cluster);
    under_layout(cluster);
}

/// A master added after the client subscribed (a cluster scaled out, a slot moved onto it)
/// is listened to as soon as the proxy's slot map shows it: notifications of keys now
/// there reach the subscriber without it reconnecting.
#[test]
fn keyspace_subscriptions_follow_a_master_added_later() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut sub_con = proxy.connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:grown:*").unwrap();
    let added = cluster.add_master();
    enable_notifications(&cluster);
    let key = "grown:key";
    cluster.migrate_slot(cluster.keyslot(key), &added);
    // The first write meets MOVED and makes the proxy read the new slot map; the
    // subscription reaches the new master shortly after, so write until a message comes.
    let mut writer = proxy.connect();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    while seen.is_none() && Instant::now() < deadline {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("1")
            .query(&mut writer)
            .unwrap();
        if let Ok(message) = pubsub.get_message() {
            let payload: String = message.get_payload().unwrap();
            seen = Some((message.get_channel_name().to_string(), payload));
        }
    }
    assert_eq!(
        holder(&cluster, key),
        vec![(key.to_string(), added.clone())],
        "the key lives on the added master"
    );
    assert_eq!(
        seen,
        Some((format!("__keyspace@0__:{key}"), "set".to_string())),
        "no notification from the master added at {added} within 20 s"
    );
}
