//! Pub/Sub through the proxy against a real 3-master cluster: channels, patterns, RESP3
//! pushes, RESP2 subscribed mode compared byte for byte with a real redis-server, shard
//! channels on every master (one SSUBSCRIBE may name several, as on one Redis),
//! re-subscription after a slot migration, and a subscriber that never reads.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{query, shared_cluster, wait_until, Cluster, Proxy, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// A raw RESP client: exact bytes in, exact bytes out.
struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Raw { stream }
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).unwrap();
    }

    /// Reads until `expected` bytes arrived or 5 s passed, then until the peer is quiet.
    fn read_at_least(&mut self, expected: usize) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match common::read_some(&mut self.stream, &mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) if out.len() >= expected || Instant::now() >= deadline => return out,
                Err(_) => {}
            }
        }
    }

    /// Reads until the peer has been quiet for the read timeout.
    fn read_quiet(&mut self) -> Vec<u8> {
        self.read_at_least(0)
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace("\r\n", "\\r\\n")
}

/// Publishes through the proxy until `read` sees `needle` (subscriptions on other nodes
/// may take a moment), at most 10 s.
fn publish_until_seen(publish: &[&str], raw: &mut Raw, needle: &[u8]) -> Vec<u8> {
    let mut con = proxy().connect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let mut cmd = redis::cmd(publish[0]);
        for arg in &publish[1..] {
            cmd.arg(*arg);
        }
        let _: i64 = cmd.query(&mut con).expect("publish through the proxy");
        seen.extend(raw.read_quiet());
        if seen.windows(needle.len()).any(|w| w == needle) {
            return seen;
        }
    }
    panic!("never saw {:?}; got {}", show(needle), show(&seen));
}

#[test]
fn subscribe_and_publish_from_another_client() {
    let mut sub_con = proxy().connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("ps:news").expect("SUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut con = proxy().connect();
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg("ps:news")
        .arg("hello")
        .query(&mut con)
        .expect("PUBLISH");
    assert_eq!(receivers, 1, "the one subscriber");
    let message = pubsub.get_message().expect("message arrives");
    assert_eq!(message.get_channel_name(), "ps:news");
    assert_eq!(message.get_payload::<String>().unwrap(), "hello");
}

/// Every client's channels and patterns live on one master, and PUBLISH and PUBSUB
/// CHANNELS/NUMSUB/NUMPAT run there: they count every subscriber of the proxy, as a single
/// Redis counts its own (a cluster node counts only its own clients).
#[test]
fn publish_and_pubsub_count_every_subscriber_as_one_redis() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let channel = "ps:home:news";
    // More subscribers than masters: spread over the masters, no node would see them all.
    let mut connections: Vec<redis::Connection> = (0..5).map(|_| proxy.connect()).collect();
    // Held: a dropped `PubSub` unsubscribes.
    let _subscribed: Vec<redis::PubSub<'_>> = connections
        .iter_mut()
        .enumerate()
        .map(|(i, con)| {
            let mut pubsub = con.as_pubsub();
            if i < 4 {
                pubsub.subscribe(channel).expect("SUBSCRIBE");
            } else {
                pubsub.psubscribe("ps:home:*").expect("PSUBSCRIBE");
            }
            pubsub
        })
        .collect();
    let mut con = proxy.connect();
    for attempt in 0..6 {
        let receivers: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(attempt)
            .query(&mut con)
            .unwrap();
        assert_eq!(receivers, 5, "four channel subscribers and one pattern");
    }
    let numsub: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut con)
        .unwrap();
    assert_eq!(numsub, (channel.to_string(), 4));
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("ps:home:*")
        .query(&mut con)
        .unwrap();
    assert_eq!(channels, vec![channel.to_string()]);
    let numpat: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(&mut con).unwrap();
    assert!(numpat >= 1, "PUBSUB NUMPAT {numpat}");
}

#[test]
fn psubscribe_matches_patterns() {
    let mut sub_con = proxy().connect();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("ps:pat:*").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut con = proxy().connect();
    for (channel, payload) in [
        ("ps:other", "no"),
        ("ps:pat:a", "yes-a"),
        ("ps:pat:b", "yes-b"),
    ] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(payload)
            .query(&mut con)
            .unwrap();
    }
    for (channel, payload) in [("ps:pat:a", "yes-a"), ("ps:pat:b", "yes-b")] {
        let message = pubsub.get_message().expect("pmessage arrives");
        assert_eq!(message.get_pattern::<String>().unwrap(), "ps:pat:*");
        assert_eq!(message.get_channel_name(), channel);
        assert_eq!(message.get_payload::<String>().unwrap(), payload);
    }
}

#[test]
fn resp3_pushes_interleave_with_replies() {
    let mut raw = Raw::connect(proxy().addr());
    raw.send(&[b"HELLO", b"3"]);
    let hello = raw.read_quiet();
    assert!(hello.starts_with(b"%"), "{}", show(&hello));
    raw.send(&[b"SUBSCRIBE", b"ps:r3"]);
    raw.send(&[b"GET", b"ps:r3:missing"]);
    // RESP3: the confirmation is a push, and GET still works in subscribed mode.
    let expected = b">3\r\n$9\r\nsubscribe\r\n$5\r\nps:r3\r\n:1\r\n_\r\n";
    assert_eq!(show(&raw.read_at_least(expected.len())), show(expected));
    let seen = publish_until_seen(&["PUBLISH", "ps:r3", "pushed"], &mut raw, b"pushed");
    let message = b">3\r\n$7\r\nmessage\r\n$5\r\nps:r3\r\n$6\r\npushed\r\n";
    assert!(seen.starts_with(message), "{}", show(&seen));
}

/// The same RESP2 session against the proxy and a real redis-server gives the same bytes.
#[test]
fn resp2_subscribed_mode_matches_redis_byte_for_byte() {
    let redis = Standalone::start();
    let steps: &[&[&[u8]]] = &[
        &[b"SUBSCRIBE", b"ps:mode"],
        &[b"GET", b"ps:mode:k"],
        &[b"CLIENT", b"ID"],
        &[b"PING"],
        &[b"PING", b"hi"],
        &[b"PSUBSCRIBE", b"ps:mode:*"],
        &[b"PUNSUBSCRIBE"],
        &[b"UNSUBSCRIBE"],
        // Out of subscribed mode: commands work again.
        &[b"GET", b"ps:mode:k"],
        &[b"PING"],
        &[b"UNSUBSCRIBE"],
        &[b"UNSUBSCRIBE", b"x", b"y"],
        &[b"SUBSCRIBE", b"ps:mode"],
        &[b"RESET"],
        &[b"GET", b"ps:mode:k"],
    ];
    let run = |addr: &str| {
        let mut raw = Raw::connect(addr);
        let mut out = Vec::new();
        for step in steps {
            raw.send(step);
            out.extend(raw.read_quiet());
        }
        out
    };
    let from_redis = run(redis.addr());
    let from_proxy = run(proxy().addr());
    assert!(
        show(&from_redis).contains("only (P|S)SUBSCRIBE"),
        "{}",
        show(&from_redis)
    );
    assert_eq!(show(&from_proxy), show(&from_redis));
}

/// A channel name whose slot is owned by `master`.
fn channel_on(cluster: &Cluster, master: &str, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|name| cluster.node_for_slot(cluster.keyslot(name)) == master)
        .expect("a channel on every master")
}

fn smessage(channel: &str, payload: &str) -> Vec<u8> {
    format!(
        "*3\r\n$8\r\nsmessage\r\n${}\r\n{channel}\r\n${}\r\n{payload}\r\n",
        channel.len(),
        payload.len()
    )
    .into_bytes()
}

#[test]
fn shard_channels_on_every_master() {
    let cluster = shared_cluster();
    let mut raw = Raw::connect(proxy().addr());
    let channels: Vec<String> = cluster
        .masters()
        .iter()
        .map(|m| channel_on(cluster, m, "ps:shard:"))
        .collect();
    for (i, channel) in channels.iter().enumerate() {
        raw.send(&[b"SSUBSCRIBE", channel.as_bytes()]);
        let expected = format!(
            "*3\r\n$10\r\nssubscribe\r\n${}\r\n{channel}\r\n:{}\r\n",
            channel.len(),
            i + 1
        );
        assert_eq!(
            show(&raw.read_at_least(expected.len())),
            show(expected.as_bytes())
        );
    }
    let mut con = proxy().connect();
    for channel in &channels {
        // SPUBLISH counts the shard subscribers of the owning node: exactly our one.
        let receivers: i64 = redis::cmd("SPUBLISH")
            .arg(channel)
            .arg("s-payload")
            .query(&mut con)
            .unwrap();
        assert_eq!(receivers, 1, "SPUBLISH {channel}");
        let expected = smessage(channel, "s-payload");
        assert_eq!(show(&raw.read_at_least(expected.len())), show(&expected));
    }
    // PUBSUB asks each shard channel's own master: every subscription is counted and listed.
    let mut numsub = redis::cmd("PUBSUB");
    numsub
        .arg("SHARDNUMSUB")
        .arg(&channels)
        .arg("ps:shard:nobody");
    let counts: std::collections::HashMap<String, i64> = numsub.query(&mut con).unwrap();
    assert_eq!(counts.len(), channels.len() + 1, "{counts:?}");
    for channel in &channels {
        assert_eq!(counts[channel], 1, "{channel}: {counts:?}");
    }
    assert_eq!(counts["ps:shard:nobody"], 0);
    let mut listed: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg("ps:shard:*")
        .query(&mut con)
        .unwrap();
    listed.sort();
    let mut want = channels.clone();
    want.sort();
    assert_eq!(listed, want);
    // Channels of different slots in one SSUBSCRIBE, as one Redis takes them: already
    // subscribed, so the count stays.
    raw.send(&[
        b"SSUBSCRIBE",
        channels[0].as_bytes(),
        channels[1].as_bytes(),
    ]);
    let again: String = channels[..2]
        .iter()
        .map(|c| format!("*3\r\n$10\r\nssubscribe\r\n${}\r\n{c}\r\n:3\r\n", c.len()))
        .collect();
    assert_eq!(
        show(&raw.read_at_least(again.len())),
        show(again.as_bytes())
    );
    raw.send(&[b"SUNSUBSCRIBE"]);
    let confirmations = raw.read_at_least(3 * 30);
    assert_eq!(
        confirmations
            .windows(12)
            .filter(|w| w == b"sunsubscribe")
            .count(),
        3,
        "{}",
        show(&confirmations)
    );
    assert!(
        confirmations.ends_with(b":0\r\n"),
        "{}",
        show(&confirmations)
    );
    raw.send(&[b"GET", b"ps:shard:k"]);
    assert_eq!(show(&raw.read_quiet()), "$-1\\r\\n");
}

/// The frames of `reply` (confirmations or messages), each as one string, in order.
fn frames_of(mut reply: &[u8]) -> Vec<String> {
    let mut frames = Vec::new();
    while !reply.is_empty() {
        let mut end = 1;
        while !common::reply_complete(&reply[..end]) {
            end += 1;
        }
        frames.push(show(&reply[..end]));
        reply = &reply[end..];
    }
    frames
}

/// One SSUBSCRIBE and SUNSUBSCRIBE naming shard channels of every master: the same bytes as
/// one redis-server sends (confirmations in the client's order, counts of the client's
/// shard subscriptions, a repeated or unknown channel), in RESP2 and RESP3; every channel
/// is subscribed on its own master (SPUBLISH reaches it, SHARDNUMSUB counts it), and
/// SUNSUBSCRIBE without a channel leaves them all.
#[test]
fn one_ssubscribe_takes_channels_of_every_master_as_one_redis() {
    let cluster = shared_cluster();
    let standalone = Standalone::start();
    let [c0, c1, c2]: [String; 3] = cluster
        .masters()
        .iter()
        .map(|m| channel_on(cluster, m, "ps:multi:"))
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let (c0, c1, c2) = (c0.as_bytes(), c1.as_bytes(), c2.as_bytes());
    let steps: &[&[&[u8]]] = &[
        &[b"SSUBSCRIBE", c0, c1, c2, c0],
        &[b"SUNSUBSCRIBE", c1, c2, b"ps:multi:none"],
        &[b"SSUBSCRIBE", c2, c1],
        &[b"SUNSUBSCRIBE", c0, c2],
        &[b"SSUBSCRIBE", c2, c0],
    ];
    for resp3 in [false, true] {
        let mut reference = Raw::connect(standalone.addr());
        let mut through = Raw::connect(proxy().addr());
        if resp3 {
            for conn in [&mut reference, &mut through] {
                conn.send(&[b"HELLO", b"3"]);
                assert!(conn.read_at_least(1).starts_with(b"%"));
            }
        }
        for step in steps {
            reference.send(step);
            let want = reference.read_quiet();
            through.send(step);
            let got = through.read_at_least(want.len());
            assert_eq!(
                show(&got),
                show(&want),
                "RESP3 {resp3}: {}",
                show(&step.concat())
            );
        }
        // Subscribed now to all three, each on its master.
        let mut con = proxy().connect();
        for channel in [c0, c1, c2] {
            let receivers: i64 = redis::cmd("SPUBLISH")
                .arg(channel)
                .arg("m")
                .query(&mut con)
                .unwrap();
            assert_eq!(receivers, 1);
            let message = through.read_at_least(20);
            assert!(
                message.windows(channel.len()).any(|w| w == channel),
                "{}",
                show(&message)
            );
        }
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(c0)
            .arg(c1)
            .arg(c2)
            .query(&mut con)
            .unwrap();
        assert!(counts.iter().all(|(_, n)| *n == 1), "{counts:?}");
        // Without a channel: every one ends, in an order of Redis's own (a hash table's),
        // the counts going down to 0.
        for conn in [&mut reference, &mut through] {
            conn.send(&[b"SUNSUBSCRIBE"]);
        }
        let want = frames_of(&reference.read_quiet());
        let mut got = frames_of(&through.read_at_least(3 * 40));
        assert_eq!(got.len(), 3, "{got:?}");
        let counts: Vec<bool> = got.iter().map(|f| f.ends_with(":0\\r\\n")).collect();
        assert_eq!(counts, [false, false, true], "{got:?}");
        let mut want_names: Vec<String> = want.iter().map(|f| strip_count(f)).collect();
        got = got.iter().map(|f| strip_count(f)).collect();
        want_names.sort();
        got.sort();
        assert_eq!(got, want_names);
        let receivers: i64 = redis::cmd("SPUBLISH")
            .arg(c1)
            .arg("m")
            .query(&mut con)
            .unwrap();
        assert_eq!(receivers, 0, "unsubscribed on its master");
    }
}

/// A confirmation without its count.
fn strip_count(frame: &str) -> String {
    frame
        .rsplit_once(':')
        .map_or(frame, |(head, _)| head)
        .to_string()
}

#[test]
fn shard_subscription_follows_a_migrated_slot() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let masters = cluster.masters();
    let channel = channel_on(&cluster, &masters[0], "ps:move:");
    let slot = cluster.keyslot(&channel);
    // Subscribed in one call with a channel of a master the move leaves alone.
    let stays = channel_on(&cluster, &masters[2], "ps:stay:");
    let mut raw = Raw::connect(proxy.addr());
    raw.send(&[b"SSUBSCRIBE", channel.as_bytes(), stays.as_bytes()]);
    let confirmed = raw.read_at_least(40);
    assert!(
        show(&confirmed).ends_with(":2\\r\\n"),
        "{}",
        show(&confirmed)
    );

    cluster.migrate_slot(slot, &masters[1]);

    let mut con = proxy.connect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let expected = smessage(&channel, "after-move");
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        // 1 once the subscription lives on the slot's new owner.
        let receivers: i64 = redis::cmd("SPUBLISH")
            .arg(&channel)
            .arg("after-move")
            .query(&mut con)
            .unwrap();
        seen.extend(raw.read_quiet());
        if receivers == 1 && seen.windows(expected.len()).any(|w| w == expected) {
            break;
        }
    }
    assert!(
        seen.windows(expected.len()).any(|w| w == expected),
        "no message after the move: {}",
        show(&seen)
    );
    // The move is invisible to the client: it was never told it lost the channel.
    assert!(
        !seen.windows(12).any(|w| w == b"sunsubscribe"),
        "{}",
        show(&seen)
    );
    let receivers: i64 = redis::cmd("SPUBLISH")
        .arg(&stays)
        .arg("still")
        .query(&mut con)
        .unwrap();
    assert_eq!(receivers, 1, "the other channel stays subscribed");
    let expected = smessage(&stays, "still");
    assert_eq!(show(&raw.read_at_least(expected.len())), show(&expected));
}

/// Channels and patterns live on the master of slot 0, where PUBLISH and PUBSUB go. When
/// slot 0 moves to another master (a rebalance after adding one), the subscriptions follow
/// it, so PUBLISH keeps counting the subscriber and it keeps getting every message once.
#[test]
fn channel_subscriptions_follow_slot_0_to_its_new_master() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let old_home = cluster.node_for_slot(0);
    let new_home = cluster
        .masters()
        .into_iter()
        .find(|master| *master != old_home)
        .expect("another master");
    let mut raw = Raw::connect(proxy.addr());
    raw.send(&[b"SUBSCRIBE", b"ps:home:moving"]);
    raw.send(&[b"PSUBSCRIBE", b"ps:home:m*"]);
    let confirmed = raw.read_at_least(70);
    assert!(
        show(&confirmed).contains("psubscribe"),
        "{}",
        show(&confirmed)
    );
    let numsub = |addr: &str| -> i64 {
        let (_, count): (String, i64) = query(
            addr,
            redis::cmd("PUBSUB").arg("NUMSUB").arg("ps:home:moving"),
        )
        .unwrap();
        count
    };
    assert_eq!((numsub(&old_home), numsub(&new_home)), (1, 0));

    cluster.migrate_slot(0, &new_home);
    // A key of slot 0 meets MOVED: the proxy learns the move at once.
    let slot_0_key = (0..100_000)
        .map(|i| format!("k{i}"))
        .find(|key| cluster.keyslot(key) == 0)
        .expect("a key of slot 0");
    let mut con = proxy.connect();
    let _: Option<String> = redis::cmd("GET").arg(&slot_0_key).query(&mut con).unwrap();
    wait_until(
        &format!("the subscription moved to {new_home}"),
        Duration::from_secs(10),
        || numsub(&new_home) == 1,
    );
    assert_eq!(numsub(&old_home), 0, "left {old_home}");
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg("ps:home:moving")
        .arg("after")
        .query(&mut con)
        .unwrap();
    assert_eq!(receivers, 2, "the channel and the pattern, on the new home");
    let seen = raw.read_at_least(90);
    let message = b"$7\r\nmessage\r\n$14\r\nps:home:moving\r\n$5\r\nafter\r\n";
    let count = seen.windows(message.len()).filter(|w| w == message).count();
    assert_eq!(count, 1, "{}", show(&seen));
    assert!(show(&seen).contains("pmessage"), "{}", show(&seen));
}

#[test]
fn slow_subscriber_is_disconnected_and_others_are_not() {
    let dir = common::new_dir("pubsub-config");
    let config = dir.join("slotbridge.yaml");
    std::fs::write(&config, "pubsub:\n  max_buffer_bytes: 1048576\n").unwrap();
    let proxy = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let mut slow = Raw::connect(proxy.addr());
    slow.send(&[b"SUBSCRIBE", b"ps:flood"]);
    let confirmed = slow.read_at_least(20);
    assert!(
        show(&confirmed).contains("subscribe"),
        "{}",
        show(&confirmed)
    );

    // A well-behaved subscriber on another channel, and a plain client.
    let mut good_con = proxy.connect();
    let mut good = good_con.as_pubsub();
    good.subscribe("ps:calm").unwrap();
    good.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

    // 40 MB towards a client that reads nothing: far past the limit plus socket buffers.
    let payload = vec![b'x'; 100 * 1024];
    let mut con = proxy.connect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut published = 0;
    while published < 400 && Instant::now() < deadline {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("ps:flood")
            .arg(&payload[..])
            .query(&mut con)
            .unwrap();
        published += 1;
        if proxy.stderr().contains("does not read its messages") {
            break;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proxy.stderr().contains("does not read its messages") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = proxy.stderr();
    assert_eq!(
        log.matches("does not read its messages").count(),
        1,
        "one log line expected:\n{log}"
    );
    // The slow client's connection ends once what the kernel buffered is drained.
    slow.stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut drained = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let closed = loop {
        match common::read_some(&mut slow.stream, &mut buf) {
            Ok(0) => break true,
            Ok(n) => drained += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(
        closed,
        "slow subscriber still connected after {drained} bytes"
    );
    assert!(drained < 40 * 1024 * 1024, "{drained} bytes drained");

    // Everyone else is fine.
    let _: i64 = redis::cmd("PUBLISH")
        .arg("ps:calm")
        .arg("still here")
        .query(&mut con)
        .unwrap();
    let message = good
        .get_message()
        .expect("the other subscriber still gets messages");
    assert_eq!(message.get_payload::<String>().unwrap(), "still here");
    let _: () = redis::cmd("SET")
        .arg("ps:after")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let value: String = redis::cmd("GET").arg("ps:after").query(&mut con).unwrap();
    assert_eq!(value, "1");
    let _ = std::fs::remove_dir_all(&dir);
}
