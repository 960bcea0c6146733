//! Topology changes done for real while clients run through the proxy: a slot migrated by
//! hand, a replica promoted with CLUSTER FAILOVER, and a master that stops answering. Each
//! test owns its cluster.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{http_get, new_dir, Cluster, Proxy};

/// A master of `cluster` other than `than`.
fn other_master(cluster: &Cluster, than: &str) -> String {
    cluster
        .masters()
        .into_iter()
        .find(|m| m != than)
        .expect("a second master")
}

/// Keys that all hash to one slot, found by asking the cluster.
fn keys_in_one_slot(cluster: &Cluster, count: usize) -> (u16, Vec<String>) {
    let slot = cluster.keyslot("{moving}");
    let keys = (0..count).map(|i| format!("{{moving}}:{i}")).collect();
    (slot, keys)
}

#[test]
fn slot_migration_is_invisible_to_a_plain_client() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let (slot, all_keys) = keys_in_one_slot(&cluster, 300);
    // The pipelined check below uses keys 100..200, the workers the others. The source
    // lists a slot's keys newest first, so moving 150 keys moves about half of those.
    let piped = &all_keys[100..200];
    let keys: Vec<String> = all_keys[..100]
        .iter()
        .chain(&all_keys[200..])
        .cloned()
        .collect();
    let mut con = proxy.client().get_connection().unwrap();
    for key in &all_keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(format!("{key}:0"))
            .query(&mut con)
            .unwrap();
    }
    let source = cluster.node_for_slot(slot);
    let target = other_master(&cluster, &source);

    let stop = Arc::new(AtomicBool::new(false));
    let seen_errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let loops: Vec<_> = (0..2)
        .map(|worker| {
            let stop = stop.clone();
            let errors = seen_errors.clone();
            let keys = keys.clone();
            let client = proxy.client();
            thread::spawn(move || {
                let mut con = client.get_connection().unwrap();
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    for key in keys.iter().skip(worker).step_by(2) {
                        let value = format!("{key}:{round}");
                        let set: redis::RedisResult<()> =
                            redis::cmd("SET").arg(key).arg(&value).query(&mut con);
                        let get: redis::RedisResult<String> =
                            redis::cmd("GET").arg(key).query(&mut con);
                        match (set, get) {
                            (Ok(()), Ok(got)) if got == value => {}
                            (set, get) => errors
                                .lock()
                                .unwrap()
                                .push(format!("{key}: {set:?} {get:?}")),
                        }
                    }
                }
                round
            })
        })
        .collect();

    // Move the slot by hand, holding it half-way for a while so clients meet ASK.
    cluster.begin_migration(slot, &target);
    cluster.migrate_keys(slot, &target, 150);
    // Half-way: one write of GET, SET, GET per key, some keys answered by the source and
    // some redirected with ASK, all within the same per-master batches.
    let moved = piped
        .iter()
        // The source answers ASK (not 0) for a key it no longer has while migrating.
        .filter(|key| common::query::<i64>(&source, redis::cmd("EXISTS").arg(key)) != Ok(1))
        .count();
    assert!(
        moved > 0 && moved < piped.len(),
        "{moved} of {} pipelined keys moved: the check needs both kinds",
        piped.len()
    );
    let mut lines = Vec::new();
    for key in piped {
        lines.push(format!("GET {key}"));
        lines.push(format!("SET {key} {key}:piped"));
        lines.push(format!("GET {key}"));
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let replies =
        common::Raw::connect(proxy.addr()).pipeline(&common::resp_lines(&lines), lines.len());
    for (key, replies) in piped.iter().zip(replies.chunks(3)) {
        let text: Vec<String> = replies
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect();
        let before = format!("{key}:0");
        let after = format!("{key}:piped");
        assert_eq!(
            text,
            [
                format!("${}\r\n{before}\r\n", before.len()),
                "+OK\r\n".to_string(),
                format!("${}\r\n{after}\r\n", after.len())
            ],
            "pipelined replies for {key} during the move"
        );
    }
    // A multi-key command while keys are split between nodes gets TRYAGAIN internally and
    // succeeds once the move settles.
    let mget_client = proxy.client();
    let mget_keys = keys[..150].to_vec();
    let mget = thread::spawn(move || {
        let mut con = mget_client.get_connection().unwrap();
        let started = Instant::now();
        let values: redis::RedisResult<Vec<Option<String>>> =
            redis::cmd("MGET").arg(&mget_keys).query(&mut con);
        (values, started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
    cluster.migrate_keys(slot, &target, usize::MAX);
    cluster.finish_migration(slot, &target);
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for handle in loops {
        let rounds = handle.join().unwrap();
        assert!(rounds > 0);
    }
    let errors = seen_errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "client saw errors or wrong values during the move: {:?}",
        &errors[..errors.len().min(5)]
    );
    let (values, _took) = mget.join().unwrap();
    let values = values.expect("MGET across the moving slot succeeds");
    assert!(
        values.iter().all(Option::is_some),
        "every key still has a value"
    );
    assert_eq!(cluster.node_for_slot(slot), target);
}

#[test]
fn failover_is_followed_without_client_changes() {
    let cluster = Cluster::start(3, 1);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "{failover}:counter";
    let slot = cluster.keyslot(key);
    let master = cluster.node_for_slot(slot);
    let replica = cluster
        .replicas_of(&master)
        .into_iter()
        .next()
        .expect("a replica");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = proxy.client();
        thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let (mut ok, mut errors) = (0u64, Vec::<String>::new());
            while !stop.load(Ordering::Relaxed) {
                match redis::cmd("INCR").arg(key).query::<i64>(&mut con) {
                    Ok(_) => ok += 1,
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (ok, errors)
        })
    };
    thread::sleep(Duration::from_millis(300));
    cluster.failover(&replica);
    thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    let (ok, errors) = writer.join().unwrap();
    println!(
        "failover: {ok} INCRs acknowledged, client saw {} errors: {:?}",
        errors.len(),
        errors
    );
    assert!(ok > 0);
    for error in &errors {
        assert!(
            error.contains("outcome is unknown"),
            "only lost-reply errors are acceptable, got: {error}"
        );
    }
    // After the failover the proxy writes to the new master.
    let mut con = proxy.client().get_connection().unwrap();
    let _: i64 = redis::cmd("INCR")
        .arg(key)
        .query(&mut con)
        .expect("write after failover");
    assert_eq!(cluster.node_for_slot(slot), replica);
}

#[test]
fn starts_while_a_seed_and_a_node_are_down() {
    let cluster = Cluster::start(3, 1);
    let replica = cluster.replicas().into_iter().next().expect("a replica");
    cluster.kill_node(&replica);
    // The first seed does not answer at all; the dead replica is listed too.
    let dead_seed = format!("127.0.0.1:{}", common::free_port());
    let seeds = format!("{dead_seed},{replica},{}", cluster.seeds_arg());
    let proxy = Proxy::start(&["--cluster", &seeds]);
    let mut con = proxy.client().get_connection().unwrap();
    for i in 0..100 {
        let key = format!("down:{i}");
        let _: () = redis::cmd("SET").arg(&key).arg(i).query(&mut con).unwrap();
        let value: i64 = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert_eq!(value, i);
    }
}

#[test]
fn a_master_that_stops_answering_fails_its_requests_after_the_read_timeout() {
    let cluster = Cluster::start(3, 0);
    let config = new_dir("read-timeout").join("slotbridge.yaml");
    std::fs::write(&config, "backend:\n  read_timeout_ms: 300\n").unwrap();
    let proxy = Proxy::start(&[
        "--config",
        config.to_str().unwrap(),
        "--cluster",
        &cluster.seeds_arg(),
    ]);
    let stalled_key = "{stall}:value";
    let stalled = cluster.node_for_slot(cluster.keyslot(stalled_key));
    let other_key = (0..)
        .map(|i| format!("{{stall-other-{i}}}:value"))
        .find(|key| cluster.node_for_slot(cluster.keyslot(key)) != stalled)
        .expect("a key on another master");
    let mut con = proxy.connect();
    let mut other_con = proxy.connect();
    let _: () = redis::cmd("SET")
        .arg(stalled_key)
        .arg("1")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&other_key)
        .arg("2")
        .query(&mut con)
        .unwrap();

    // Paused well under the cluster's node timeout, so nobody marks the master failing.
    cluster.set_node_paused(&stalled, true);
    let started = Instant::now();
    let result: redis::RedisResult<String> = redis::cmd("GET").arg(stalled_key).query(&mut con);
    let elapsed = started.elapsed();
    let other: redis::RedisResult<String> = redis::cmd("GET").arg(&other_key).query(&mut other_con);
    cluster.set_node_paused(&stalled, false);

    let error = result
        .expect_err("a stopped master cannot answer")
        .to_string();
    assert!(
        error.contains("outcome is unknown") && error.contains("no reply within 300 ms"),
        "unexpected error: {error}"
    );
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "failed after {elapsed:?}"
    );
    assert_eq!(other.expect("the other masters still answer"), "2");

    // The same client reads the master again once it runs (over a new connection).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match redis::cmd("GET").arg(stalled_key).query::<String>(&mut con) {
            Ok(value) => {
                assert_eq!(value, "1");
                break;
            }
            Err(e) if Instant::now() < deadline => {
                println!("while the master recovers: {e}");
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the master never answered again: {e}"),
        }
    }
    // Blocking commands wait on their own connection, which has no read timeout.
    let started = Instant::now();
    let popped: Option<(String, String)> = redis::cmd("BLPOP")
        .arg("{stall}:empty")
        .arg(1)
        .query(&mut con)
        .expect("BLPOP times out as in Redis");
    assert_eq!(popped, None);
    assert!(started.elapsed() >= Duration::from_secs(1));

    // /readyz asks every master, also one whose connection is open: 503 naming it.
    assert_eq!(http_get(proxy.admin_addr(), "/readyz").0, 200);
    cluster.set_node_paused(&stalled, true);
    let (status, body) = http_get(proxy.admin_addr(), "/readyz");
    cluster.set_node_paused(&stalled, false);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(&stalled), "{body}");

    let (status, metrics) = http_get(proxy.admin_addr(), "/metrics");
    assert_eq!(status, 200);
    let series = format!("slotbridge_backend_read_timeouts_total{{node=\"{stalled}\"}} ");
    let count: f64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in the metrics"))
        .trim()
        .parse()
        .unwrap();
    assert!(count >= 1.0, "{series}{count}");
}

/// A transaction whose keys are split between the two masters of a slot that is moving is
/// refused by the node at EXEC (TRYAGAIN), before anything ran: the proxy retries it, and
/// it runs once the move is done, instead of handing TRYAGAIN to a client written for one
/// Redis.
#[test]
fn a_transaction_refused_at_exec_while_its_slot_moves_is_retried() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let (slot, _) = keys_in_one_slot(&cluster, 0);
    let (here, there) = ("{moving}:here", "{moving}:there");
    let mut con = proxy.client().get_connection().unwrap();
    for key in [here, there] {
        redis::cmd("SET").arg(key).arg(10).exec(&mut con).unwrap();
    }
    let source = cluster.node_for_slot(slot);
    let target = other_master(&cluster, &source);
    cluster.begin_migration(slot, &target);
    let (host, port) = target.rsplit_once(':').unwrap();
    let moved: String = common::query(
        &source,
        redis::cmd("MIGRATE")
            .arg(host)
            .arg(port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(there),
    )
    .unwrap();
    assert_eq!(moved, "OK");
    // The rest of the move happens while the transaction is being retried.
    let finisher = {
        let (cluster, target) = (&cluster, target.clone());
        move || {
            thread::sleep(Duration::from_millis(400));
            cluster.migrate_keys(slot, &target, usize::MAX);
            cluster.finish_migration(slot, &target);
        }
    };
    thread::scope(|scope| {
        scope.spawn(finisher);
        let (a, b): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(here)
            .cmd("INCR")
            .arg(there)
            .query(&mut con)
            .expect("the transaction runs once the slot has moved");
        assert_eq!((a, b), (11, 11));
    });
    for (key, want) in [(here, "11"), (there, "11")] {
        let value: String = redis::cmd("GET").arg(key).query(&mut con).unwrap();
        assert_eq!(value, want, "{key}");
    }
}

/// The requests a client pipelines at one key, redirected together while the key's slot
/// moves, take effect in the order sent: a read after a write sees the write, whichever
/// of them is a plain forward, a command split over masters, or a script. First with the
/// key already on the importing master (every request meets ASK), then once the move is
/// done (the first requests meet MOVED).
#[test]
fn pipelined_requests_at_a_moving_key_take_effect_in_order() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let key = "{moving}:k";
    let (slot, _) = keys_in_one_slot(&cluster, 0);
    let home = cluster.node_for_slot(slot);
    let away = other_master(&cluster, &home);
    let mut client = OrderedClient::connect(proxy.addr());
    client.check(key, 1);
    cluster.begin_migration(slot, &away);
    cluster.migrate_keys(slot, &away, usize::MAX);
    client.check(key, 50);
    cluster.finish_migration(slot, &away);
    client.check(key, 3);
}

type Pattern = fn(&str, &str) -> Vec<Vec<String>>;

/// A write then a read of one key, in one pipeline, in the shapes that take different
/// paths through the proxy.
const ORDER_PATTERNS: [(&str, Pattern); 5] = [
    ("SET then GET", |k, v| {
        vec![words(&["SET", k, v]), words(&["GET", k])]
    }),
    ("SET then MGET", |k, v| {
        vec![words(&["SET", k, v]), words(&["MGET", k, "{other}:x"])]
    }),
    ("MSET then GET", |k, v| {
        vec![words(&["MSET", k, v, "{other}:x", "1"]), words(&["GET", k])]
    }),
    ("MSET then MGET", |k, v| {
        vec![
            words(&["MSET", k, v, "{other}:x", "1"]),
            words(&["MGET", k, "{other}:x"]),
        ]
    }),
    ("SET then EVAL", |k, v| {
        vec![
            words(&["SET", k, v]),
            words(&["EVAL", "return redis.call('GET', KEYS[1])", "1", k]),
        ]
    }),
];

struct OrderedClient {
    stream: std::net::TcpStream,
    pending: Vec<u8>,
    round: u64,
}

impl OrderedClient {
    fn connect(addr: &str) -> OrderedClient {
        OrderedClient {
            stream: std::net::TcpStream::connect(addr).unwrap(),
            pending: Vec::new(),
            round: 0,
        }
    }

    /// Runs every pattern `rounds` times on `key`; each read must show its write.
    fn check(&mut self, key: &str, rounds: usize) {
        use std::io::Write;
        for (name, pattern) in ORDER_PATTERNS {
            for _ in 0..rounds {
                self.round += 1;
                let value = format!("v{}", self.round);
                let batch = pattern(key, &value);
                let wire: Vec<u8> = batch.iter().flat_map(|args| encode(args)).collect();
                self.stream.write_all(&wire).unwrap();
                let replies = common::read_replies(&mut self.stream, &mut self.pending, 2)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let read = String::from_utf8_lossy(&replies[1]);
                assert!(
                    !replies[0].starts_with(b"-") && read.contains(&value),
                    "{name}: the read missed the write before it: {:?} then {read:?}",
                    String::from_utf8_lossy(&replies[0])
                );
            }
        }
    }
}

fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn encode(args: &[String]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// Reads what arrives on `stream` within `wait` (nothing: an empty vector).
fn read_within(stream: &mut std::net::TcpStream, wait: Duration) -> Vec<u8> {
    stream
        .set_read_timeout(Some(wait))
        .expect("set a read timeout");
    let mut buf = vec![0u8; 4096];
    match common::read_some(stream, &mut buf) {
        Ok(n) => buf[..n].to_vec(),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Vec::new()
        }
        Err(e) => panic!("reading the proxy's replies: {e}"),
    }
}

/// A key (with a hash tag of its own) whose slot `master` serves.
fn key_on(cluster: &Cluster, master: &str, name: &str) -> String {
    (0..)
        .map(|i| format!("{{{name}-{i}}}:value"))
        .find(|key| cluster.node_for_slot(cluster.keyslot(key)) == master)
        .expect("a key on every master")
}

/// Sends `GET key` for each of `keys` in one write, so the proxy reads them together.
fn send_gets(stream: &mut std::net::TcpStream, keys: &[&str]) {
    use std::io::Write;
    let lines: Vec<String> = keys.iter().map(|key| format!("GET {key}")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    stream
        .write_all(&common::resp_lines(&lines))
        .expect("send to the proxy");
}

/// `SET key value` through `con`.
fn set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(con).unwrap();
}

/// As Redis answers the commands of one read with one write, the proxy holds the replies of
/// a read whose commands span masters until the last of them is in, instead of writing one
/// batch per master; a large reply, a redirect's retry and a later read hold nothing.
#[test]
fn a_read_spanning_masters_is_answered_in_one_write() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let masters = cluster.masters();
    let (first, second) = (&masters[0], &masters[1]);
    let key_a = key_on(&cluster, first, "held-a");
    let key_b = key_on(&cluster, second, "held-b");
    let mut con = proxy.connect();
    set(&mut con, &key_a, "a");
    set(&mut con, &key_b, "b");
    let mut raw = common::Raw::connect(proxy.addr());
    // Flow control sends a new client's first request alone, until its replies' size is
    // known (see `client::flow`): the reads below are those of a client already served.
    assert_eq!(raw.call(&["PING"]), "+PONG\r\n");

    // One read, two masters, the second stopped: the first master's reply waits for it.
    cluster.set_node_paused(second, true);
    send_gets(&mut raw.stream, &[&key_a, &key_b]);
    let early = read_within(&mut raw.stream, Duration::from_millis(400));
    cluster.set_node_paused(second, false);
    assert!(
        early.is_empty(),
        "a reply left before the rest of its read: {:?}",
        String::from_utf8_lossy(&early)
    );
    let together = read_within(&mut raw.stream, Duration::from_secs(5));
    assert_eq!(
        String::from_utf8_lossy(&together),
        "$1\r\na\r\n$1\r\nb\r\n",
        "both replies in the first bytes that arrive"
    );

    // A large reply (past 64 KiB) does not wait for the rest of its read.
    let big = "x".repeat(100 * 1024);
    set(&mut con, &key_a, &big);
    cluster.set_node_paused(second, true);
    send_gets(&mut raw.stream, &[&key_a, &key_b]);
    let big_reply = format!("${}\r\n{big}\r\n", big.len());
    let mut large = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(1500);
    while large.len() < big_reply.len() && Instant::now() < deadline {
        large.extend(read_within(&mut raw.stream, Duration::from_millis(200)));
    }
    cluster.set_node_paused(second, false);
    assert!(
        large == big_reply.as_bytes(),
        "the large reply, while the rest of its read waits for a stopped master: {} of {} bytes",
        large.len(),
        big_reply.len()
    );
    let after_large = read_within(&mut raw.stream, Duration::from_secs(5));
    assert_eq!(String::from_utf8_lossy(&after_large), "$1\r\nb\r\n");
    set(&mut con, &key_a, "a");

    // Two reads: the first one's reply leaves once it is in, though the second one's is not.
    cluster.set_node_paused(first, true);
    send_gets(&mut raw.stream, &[&key_a]);
    thread::sleep(Duration::from_millis(150));
    cluster.set_node_paused(second, true);
    send_gets(&mut raw.stream, &[&key_b]);
    thread::sleep(Duration::from_millis(150));
    cluster.set_node_paused(first, false);
    let first_read = read_within(&mut raw.stream, Duration::from_millis(1500));
    cluster.set_node_paused(second, false);
    assert_eq!(
        String::from_utf8_lossy(&first_read),
        "$1\r\na\r\n",
        "the earlier read's reply, while the later read's master is stopped"
    );
    let second_read = read_within(&mut raw.stream, Duration::from_secs(5));
    assert_eq!(String::from_utf8_lossy(&second_read), "$1\r\nb\r\n");

    // A forward whose first answer is a redirect goes on as a retry: the replies before it
    // leave without waiting for that (here, for a master that is stopped).
    let third = &masters[2];
    let key_c = key_on(&cluster, second, "held-c");
    set(&mut con, &key_c, "c");
    let slot_c = cluster.keyslot(&key_c);
    cluster.begin_migration(slot_c, third);
    assert_eq!(cluster.migrate_keys(slot_c, third, usize::MAX), 1);
    // The redirect comes after the first master's reply, which waits for it until then.
    cluster.set_node_paused(third, true);
    cluster.set_node_paused(second, true);
    send_gets(&mut raw.stream, &[&key_a, &key_c]);
    let before_redirect = read_within(&mut raw.stream, Duration::from_millis(300));
    cluster.set_node_paused(second, false);
    let before_retry = read_within(&mut raw.stream, Duration::from_millis(1500));
    cluster.set_node_paused(third, false);
    assert!(
        before_redirect.is_empty(),
        "a reply left before the rest of its read: {:?}",
        String::from_utf8_lossy(&before_redirect)
    );
    assert_eq!(
        String::from_utf8_lossy(&before_retry),
        "$1\r\na\r\n",
        "the reply before an ASK retry, while the retry's master is stopped"
    );
    let retried = read_within(&mut raw.stream, Duration::from_secs(5));
    assert_eq!(String::from_utf8_lossy(&retried), "$1\r\nc\r\n");
    cluster.finish_migration(slot_c, third);
}
