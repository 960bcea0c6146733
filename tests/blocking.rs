//! Blocking commands through the proxy against real clusters: timeouts as in Redis, no
//! stall for other clients while one blocks, wake-up by another client, the backend
//! connection released when the client goes away, CROSSSLOT, MOVED followed, a failover
//! waited through, WAIT, and the client's own later requests held until the blocking one is
//! answered.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{async_connect, query, resp_lines, shared_cluster, wait_until, Cluster, Proxy, Raw};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// Connections on `node` blocked in (or last running) `command`.
fn connections_running(node: &str, command: &str) -> usize {
    let list: String = query(node, redis::cmd("CLIENT").arg("LIST")).unwrap();
    list.lines()
        .filter(|line| line.contains(&format!(" cmd={command} ")))
        .count()
}

#[test]
fn blpop_with_timeout_returns_null_after_the_timeout() {
    let mut con = proxy().connect();
    let started = Instant::now();
    let value: redis::Value = redis::cmd("BLPOP")
        .arg("block1:{empty}")
        .arg(1)
        .query(&mut con)
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(value, redis::Value::Nil);
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(2500),
        "{elapsed:?}"
    );
}

#[test]
fn blocked_client_does_not_stall_others_and_lpush_wakes_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let addr = proxy().addr().to_string();
        let key = "block2:{wake}";
        let mut blocked = async_connect(&addr).await;
        let waiter = tokio::spawn(async move {
            let value: (String, String) = redis::cmd("BLPOP")
                .arg(key)
                .arg(0)
                .query_async(&mut blocked)
                .await
                .unwrap();
            value
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let mut workers = Vec::new();
        for worker in 0..50 {
            let addr = addr.clone();
            workers.push(tokio::spawn(async move {
                let mut con = async_connect(&addr).await;
                for i in 0..40 {
                    let key = format!("block2:traffic:{worker}:{i}");
                    let () = redis::cmd("SET")
                        .arg(&key)
                        .arg(i)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    let got: i64 = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    assert_eq!(got, i);
                }
            }));
        }
        for worker in workers {
            tokio::time::timeout(Duration::from_secs(10), worker)
                .await
                .expect("traffic stalled behind a blocked client")
                .unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!waiter.is_finished(), "BLPOP 0 returned before any push");

        let mut pusher = async_connect(&addr).await;
        let _: i64 = redis::cmd("LPUSH")
            .arg(key)
            .arg("hello")
            .query_async(&mut pusher)
            .await
            .unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("BLPOP woken by LPUSH")
            .unwrap();
        assert_eq!(woken, (key.to_string(), "hello".to_string()));
    });
}

#[test]
fn client_disconnect_releases_the_blocked_backend_connection() {
    let key = "block3:{gone}";
    let cluster = shared_cluster();
    let node = cluster.node_for_slot(cluster.keyslot(key));
    let before = connections_running(&node, "blpop");
    let mut stream = TcpStream::connect(proxy().addr()).unwrap();
    stream
        .write_all(
            format!(
                "*3\r\n$5\r\nBLPOP\r\n${}\r\n{key}\r\n$1\r\n0\r\n",
                key.len()
            )
            .as_bytes(),
        )
        .unwrap();
    wait_until(
        "the BLPOP to block on the master",
        Duration::from_secs(3),
        || connections_running(&node, "blpop") == before + 1,
    );
    drop(stream);
    wait_until(
        "the blocked connection to close",
        Duration::from_secs(2),
        || connections_running(&node, "blpop") == before,
    );
}

/// A blocking command the proxy does not emulate across slots (multi-key pops and XREAD it
/// does, see `cross_slot_blocking.rs` and `cross_slot_streams.rs`).
#[test]
fn blocking_keys_in_different_slots_are_refused() {
    let mut stream = TcpStream::connect(proxy().addr()).unwrap();
    stream
        .write_all(&common::resp_lines(&[
            "XREADGROUP GROUP g c BLOCK 1000 STREAMS a b > >",
        ]))
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = common::read_some(&mut stream, &mut buf).unwrap();
    let reply = String::from_utf8_lossy(&buf[..n]);
    assert!(
        reply.starts_with("-CROSSSLOT Keys in request don't hash to the same slot"),
        "{reply}"
    );
}

#[test]
fn wait_goes_to_the_master_of_the_last_write() {
    let mut con = proxy().connect();
    redis::cmd("SET")
        .arg("block4:{wait}")
        .arg("1")
        .exec(&mut con)
        .unwrap();
    // No replicas in this cluster: WAIT answers 0 once its timeout passes.
    let acked: i64 = redis::cmd("WAIT").arg(0).arg(100).query(&mut con).unwrap();
    assert_eq!(acked, 0);
}

/// WAIT counts a replica once it has the client's writes, and not before: a replica that
/// cannot process them (asleep in DEBUG SLEEP) is not counted, as Redis's own WAIT would
/// not count it.
#[test]
fn wait_counts_only_replicas_that_have_the_writes() {
    let cluster = Cluster::start(1, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let replica = cluster.replicas()[0].clone();
    let mut con = proxy.connect();
    let set = |con: &mut redis::Connection, value: &str| {
        redis::cmd("SET")
            .arg("block6:wait")
            .arg(value)
            .exec(con)
            .unwrap();
    };
    let wait = |con: &mut redis::Connection, timeout_ms: u64| -> i64 {
        redis::cmd("WAIT")
            .arg(1)
            .arg(timeout_ms)
            .query(con)
            .unwrap()
    };

    set(&mut con, "1");
    let started = Instant::now();
    assert_eq!(wait(&mut con, 5000), 1);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "WAIT answered when the replica caught up, not at its timeout"
    );

    let sleeping = replica.clone();
    let sleeper = std::thread::spawn(move || {
        query::<()>(&sleeping, redis::cmd("DEBUG").arg("SLEEP").arg(2)).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    set(&mut con, "2");
    assert_eq!(
        wait(&mut con, 300),
        0,
        "the sleeping replica has not got the write"
    );
    sleeper.join().unwrap();
    assert_eq!(wait(&mut con, 5000), 1, "awake again, it has");
    let on_replica: String = {
        let mut replica_con = common::connect(&replica);
        redis::cmd("READONLY").exec(&mut replica_con).unwrap();
        redis::cmd("GET")
            .arg("block6:wait")
            .query(&mut replica_con)
            .unwrap()
    };
    assert_eq!(on_replica, "2");
}

#[test]
fn blocking_command_follows_moved_on_a_dedicated_connection() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "block5:{moved}";
    let slot = cluster.keyslot(key);
    let owner = cluster.node_for_slot(slot);
    let mut con = proxy.connect();
    // The proxy learns the slot map, then the slot moves behind its back.
    redis::cmd("SET")
        .arg("block5:{warm}")
        .arg("1")
        .exec(&mut con)
        .unwrap();
    let target = cluster.masters().into_iter().find(|m| *m != owner).unwrap();
    cluster.migrate_slot(slot, &target);
    let _: i64 = query(&target, redis::cmd("RPUSH").arg(key).arg("moved-value")).unwrap();
    let value: (String, String) = redis::cmd("BLPOP").arg(key).arg(2).query(&mut con).unwrap();
    assert_eq!(value, (key.to_string(), "moved-value".to_string()));
}

/// Requests pipelined behind a blocking command take effect after it, as on one Redis,
/// where a blocked client's next command waits: the BLPOP times out on the empty list
/// instead of popping what the RPUSH behind it adds.
#[test]
fn requests_pipelined_behind_a_blocking_command_run_after_it() {
    let key = "seq1:{pipe}";
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut proxy().connect())
        .unwrap();
    let mut raw = Raw::connect(proxy().addr());
    let replies = raw.pipeline(
        &resp_lines(&[
            &format!("BLPOP {key} 1"),
            &format!("RPUSH {key} v"),
            &format!("LRANGE {key} 0 -1"),
        ]),
        3,
    );
    let replies: Vec<String> = replies
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(
        replies,
        ["*-1\r\n", ":1\r\n", "*1\r\n$1\r\nv\r\n"],
        "BLPOP popped what the RPUSH behind it pushed"
    );
}

/// While a client is blocked, the writes it pipelined behind the blocking command are not
/// visible to other clients; they run once it is woken.
#[test]
fn writes_behind_a_blocked_command_wait_for_it() {
    let (list, flag) = ("seq2:{wait}list", "seq2:{wait}flag");
    let mut other = proxy().connect();
    let _: i64 = redis::cmd("DEL")
        .arg(list)
        .arg(flag)
        .query(&mut other)
        .unwrap();
    let node = shared_cluster().node_for_slot(shared_cluster().keyslot(list));
    let blocked_before = connections_running(&node, "blpop");
    let mut raw = Raw::connect(proxy().addr());
    raw.stream
        .write_all(&resp_lines(&[
            &format!("BLPOP {list} 0"),
            &format!("SET {flag} 1"),
        ]))
        .unwrap();
    wait_until(
        "the BLPOP to block on its node",
        Duration::from_secs(5),
        || connections_running(&node, "blpop") > blocked_before,
    );
    // Time for a SET that did not wait to land.
    std::thread::sleep(Duration::from_millis(200));
    let seen: Option<String> = redis::cmd("GET").arg(flag).query(&mut other).unwrap();
    assert_eq!(seen, None, "the SET behind the blocked BLPOP ran before it");
    let _: i64 = redis::cmd("RPUSH")
        .arg(list)
        .arg("e")
        .query(&mut other)
        .unwrap();
    let replies = raw.pipeline(b"", 2);
    assert_eq!(
        replies,
        [
            format!("*2\r\n${}\r\n{list}\r\n$1\r\ne\r\n", list.len()).into_bytes(),
            b"+OK\r\n".to_vec()
        ]
    );
    let seen: Option<String> = redis::cmd("GET").arg(flag).query(&mut other).unwrap();
    assert_eq!(seen.as_deref(), Some("1"));
}

/// While a blocking command waits, the proxy reads on only until about 1 MiB of requests
/// is waiting behind it: the rest stays in TCP (the client's writes block, the kernel's
/// buffers hold up to a few tens of MiB here), and it all runs once the command is answered.
#[test]
fn input_held_behind_a_blocked_command_is_bounded() {
    let list = "seq3:{held}list";
    let mut other = proxy().connect();
    let _: i64 = redis::cmd("DEL").arg(list).query(&mut other).unwrap();
    let mut raw = Raw::connect(proxy().addr());
    raw.stream
        .write_all(&resp_lines(&[&format!("BLPOP {list} 0")]))
        .unwrap();
    let command = resp_lines(&[&format!("SET seq3:{{held}}key {}", "x".repeat(1000))]);
    let chunk = command.repeat(1024);
    let offered = 96 * chunk.len();
    raw.stream.set_nonblocking(true).unwrap();
    let (mut sent, mut stalled_since) = (0, Instant::now());
    // Write until the proxy has taken nothing for 2 s (or everything was taken).
    while sent < offered && stalled_since.elapsed() < Duration::from_secs(2) {
        match raw.stream.write(&chunk[sent % chunk.len()..]) {
            Ok(n) => {
                sent += n;
                stalled_since = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    assert!(
        sent < offered / 2,
        "{sent} of {offered} bytes taken behind a blocked BLPOP"
    );
    raw.stream.set_nonblocking(false).unwrap();
    // Wake the BLPOP, complete the last command, and every request sent is answered.
    let _: i64 = redis::cmd("RPUSH")
        .arg(list)
        .arg("e")
        .query(&mut other)
        .unwrap();
    let partial = sent % command.len();
    if partial > 0 {
        raw.stream.write_all(&command[partial..]).unwrap();
    }
    let commands = sent.div_ceil(command.len());
    let replies = raw.pipeline(b"", 1 + commands);
    assert_eq!(replies.len(), 1 + commands);
    assert!(replies[0].starts_with(b"*2\r\n"), "{:?}", replies[0]);
    assert!(replies[1..].iter().all(|r| r == b"+OK\r\n"));
}

/// CLIENT UNBLOCK through the proxy, against a single Redis running the same scenario: the
/// blocked client shows `flags=b`, a TIMEOUT unblock answers its command as a timeout, an
/// ERROR unblock with `-UNBLOCKED`, and a client that is not blocked (or unknown) gives 0.
#[test]
fn client_unblock_ends_a_blocked_command_as_on_a_single_redis() {
    fn scenario(addr: &str) -> Vec<String> {
        let mut blocked = Raw::connect(addr);
        let mut other = Raw::connect(addr);
        let id = blocked.call(&["CLIENT", "ID"]);
        let id = id.trim_start_matches(':').trim_end();
        let shows_blocked = |other: &mut Raw| {
            let line = other.call(&["CLIENT", "LIST", "ID", id]);
            line.contains(" flags=b ")
        };
        let mut seen = Vec::new();
        let waits = [
            &["BLPOP", "unblock:{l}", "0"][..],
            &["XREAD", "BLOCK", "0", "STREAMS", "unblock:{s}", "$"],
        ];
        for (wait, mode) in waits.iter().zip(["TIMEOUT", "ERROR"]) {
            blocked.send(wait);
            wait_until("the client to block", Duration::from_secs(3), || {
                shows_blocked(&mut other)
            });
            seen.push(other.call(&["CLIENT", "UNBLOCK", id, mode]));
            seen.push(blocked.read_reply());
            assert!(!shows_blocked(&mut other), "{addr}: still blocked");
        }
        // Not blocked, unknown, malformed.
        seen.push(other.call(&["CLIENT", "UNBLOCK", id]));
        seen.push(other.call(&["CLIENT", "UNBLOCK", "999999"]));
        seen.push(other.call(&["CLIENT", "UNBLOCK", "abc"]));
        seen.push(other.call(&["CLIENT", "UNBLOCK", id, "LATER"]));
        seen.push(other.call(&["CLIENT", "UNBLOCK"]));
        // The unblocked client goes on.
        seen.push(blocked.call(&["PING"]));
        seen
    }
    let server = common::Standalone::start();
    let direct = scenario(server.addr());
    assert_eq!(direct[0], ":1\r\n");
    assert_eq!(
        direct[3],
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    );
    assert_eq!(scenario(proxy().addr()), direct);
}

/// Under the layout profile a blocking command on a renamed legacy key is planned by the
/// layout, not forwarded: CLIENT UNBLOCK still finds where it waits and ends it.
#[test]
fn client_unblock_ends_a_blocked_command_on_a_renamed_key() {
    let cluster = shared_cluster();
    let proxy = Proxy::start_with_layout(
        &cluster.seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        "lyunblock",
    );
    let mut blocked = Raw::connect(proxy.addr());
    let mut other = Raw::connect(proxy.addr());
    let id = blocked.call(&["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim_end().to_string();
    let shows_blocked = |other: &mut Raw| {
        let line = other.call(&["CLIENT", "LIST", "ID", &id]);
        line.contains(" flags=b ")
    };
    // `lock:...` is renamed to `{lk:...}:l` (LAYOUT.md).
    blocked.send(&["BLPOP", "lyunblock:lock:team:ops", "0"]);
    wait_until("the client to block", Duration::from_secs(3), || {
        shows_blocked(&mut other)
    });
    assert_eq!(other.call(&["CLIENT", "UNBLOCK", &id]), ":1\r\n");
    assert_eq!(blocked.read_reply(), "*-1\r\n");
    assert!(!shows_blocked(&mut other), "still blocked");
    assert_eq!(blocked.call(&["PING"]), "+PONG\r\n");
}

/// A master failover while a client waits in BLPOP: Redis ends the wait on the demoted
/// master with `-UNBLOCKED ... instance state changed`, and nothing was popped, so the
/// proxy blocks again on the new master instead of passing the error on (as it does for
/// READONLY); the client gets the value pushed after the failover.
#[test]
fn a_blocked_command_waits_again_on_the_new_master_after_a_failover() {
    let cluster = Cluster::start(1, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "block7:failover";
    let master = cluster.masters()[0].clone();
    let replica = cluster.replicas()[0].clone();
    let mut blocked = Raw::connect(proxy.addr());
    blocked.send(&["BLPOP", key, "20"]);
    wait_until("BLPOP to block", Duration::from_secs(5), || {
        connections_running(&master, "blpop") == 1
    });
    cluster.failover(&replica);
    wait_until(
        "BLPOP to block on the new master",
        Duration::from_secs(10),
        || connections_running(&replica, "blpop") == 1,
    );
    let mut pusher = Raw::connect(proxy.addr());
    assert_eq!(pusher.call(&["RPUSH", key, "after"]), ":1\r\n");
    assert_eq!(
        blocked.read_reply(),
        format!("*2\r\n${}\r\n{key}\r\n$5\r\nafter\r\n", key.len())
    );
}
