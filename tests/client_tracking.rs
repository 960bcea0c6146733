//! Client-side caching (CLIENT TRACKING) through the proxy against a real 3-master
//! cluster: a tracking client is told of every change to a key it read (written through
//! the proxy, or straight to the master; expired; flushed), BCAST clients of every key
//! under their prefixes, RESP2 clients through REDIRECT to a subscribed client, OPTIN
//! follows CLIENT CACHING, OFF and RESET stop the messages, the table of keys is bounded,
//! keys are named as the client names them (another database, a key layout), and the
//! replies about tracking are Redis's.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{http_get, resp_command, shared_cluster, split_replies, Proxy};

/// How long a message that must come may take (the master's active expiry included).
const WAIT: Duration = Duration::from_secs(5);
/// How long to watch for a message that must not come.
const QUIET: Duration = Duration::from_millis(300);

/// A raw RESP connection that reads frame by frame, pushes included.
struct Conn {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Conn {
    fn open(proxy: &Proxy, resp3: bool) -> Conn {
        let stream = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
        let mut conn = Conn {
            stream,
            pending: Vec::new(),
        };
        if resp3 {
            let hello = conn.call(&["HELLO", "3"]);
            assert!(hello.starts_with('%'), "{hello}");
        }
        conn
    }

    fn send(&mut self, args: &[&str]) {
        self.stream.write_all(&resp_command(args)).expect("send");
    }

    /// Sends a command and returns its reply; a push met first fails the test.
    fn call(&mut self, args: &[&str]) -> String {
        self.send(args);
        let frame = self.next(WAIT).expect("a reply");
        assert!(
            !frame.starts_with('>'),
            "{args:?}: a push before the reply: {frame:?}"
        );
        frame
    }

    /// Sends a command and returns its reply, passing over the pushes met first.
    fn call_past_pushes(&mut self, args: &[&str]) -> String {
        self.send(args);
        loop {
            let frame = self.next(WAIT).expect("a reply");
            if !frame.starts_with('>') {
                return frame;
            }
        }
    }

    /// The next frame within `wait`, if one comes.
    fn next(&mut self, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(frame) = split_replies(&self.pending).into_iter().next() {
                self.pending.drain(..frame.len());
                return Some(String::from_utf8_lossy(&frame).into_owned());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match common::read_some(&mut self.stream, &mut buf) {
                Ok(0) => panic!("the proxy closed the connection"),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(_) => return None,
            }
        }
    }

    /// Fails if a frame arrives within [`QUIET`].
    fn expect_nothing(&mut self, after: &str) {
        if let Some(frame) = self.next(QUIET) {
            panic!("{after}: unexpected {frame:?}");
        }
    }
}

fn invalidate(keys: &[&str]) -> String {
    let mut out = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
    for key in keys {
        out.push_str(&format!("${}\r\n{key}\r\n", key.len()));
    }
    out
}

const FLUSH: &str = ">2\r\n$10\r\ninvalidate\r\n_\r\n";

fn proxy() -> Proxy {
    Proxy::start(&["--cluster", &shared_cluster().seeds_arg()])
}

fn proxy_with(config: &str) -> Proxy {
    let dir = common::new_dir("tracking-config");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, config).unwrap();
    let seeds = shared_cluster().seeds_arg();
    Proxy::start(&["--cluster", &seeds, "--config", path.to_str().unwrap()])
}

/// Writes `key` straight on its master, as a client that does not go through the proxy.
fn write_on_master(key: &str, value: &str) {
    let cluster = shared_cluster();
    let master = cluster.node_for_slot(cluster.keyslot(key));
    let mut con = common::connect(&master);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut con)
        .unwrap();
}

#[test]
fn a_key_read_while_tracking_is_invalidated_once_whoever_writes_it() {
    let proxy = proxy();
    let mut reader = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    assert_eq!(reader.call(&["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
    writer.call(&["SET", "trk:a", "1"]);
    assert_eq!(reader.call(&["GET", "trk:a"]), "$1\r\n1\r\n");
    writer.call(&["SET", "trk:a", "2"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["trk:a"])));
    // Invalidated once, then forgotten until read again, as Redis.
    writer.call(&["SET", "trk:a", "3"]);
    reader.expect_nothing("a second write of a key not read again");
    assert_eq!(reader.call(&["GET", "trk:a"]), "$1\r\n3\r\n");
    write_on_master("trk:a", "4");
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["trk:a"])));
    // Through another proxy in front of the same cluster.
    let other = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let mut elsewhere = Conn::open(&other, false);
    assert_eq!(reader.call(&["GET", "trk:a"]), "$1\r\n4\r\n");
    elsewhere.call(&["SET", "trk:a", "5"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["trk:a"])));
    // A key read in a transaction, and one in another database, named as the client does.
    reader.call(&["MULTI"]);
    reader.call(&["MGET", "trk:b"]);
    reader.call(&["EXEC"]);
    writer.call(&["DEL", "trk:b"]);
    writer.call(&["SET", "trk:b", "x"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["trk:b"])));
    reader.call(&["SELECT", "3"]);
    reader.call(&["GET", "trk:c"]);
    writer.call(&["SELECT", "3"]);
    writer.call(&["SET", "trk:c", "x"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["trk:c"])));
    assert_eq!(reader.call(&["CLIENT", "TRACKING", "OFF"]), "+OK\r\n");
    reader.call(&["SELECT", "0"]);
    reader.call(&["GET", "trk:a"]);
    writer.call(&["SELECT", "0"]);
    writer.call(&["SET", "trk:a", "6"]);
    reader.expect_nothing("tracking off");
}

#[test]
fn expiry_and_flushall_invalidate() {
    // A cluster of its own: a flush reaches the tracking clients of every proxy in front
    // of the cluster, those of the other tests included.
    let cluster = common::Cluster::start(3, 0);
    let dir = common::new_dir("tracking-flush");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, "commands:\n  allow: [flushall]\n").unwrap();
    let config = path.to_str().unwrap();
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg(), "--config", config]);
    let mut reader = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    reader.call(&["CLIENT", "TRACKING", "ON"]);
    writer.call(&["SET", "trk:exp", "1", "PX", "200"]);
    assert_eq!(reader.call(&["GET", "trk:exp"]), "$1\r\n1\r\n");
    // The master's active expiry deletes it and reports it, with nobody touching it.
    assert_eq!(
        reader.next(WAIT).as_deref(),
        Some(&*invalidate(&["trk:exp"]))
    );
    reader.call(&["GET", "trk:f"]);
    assert_eq!(writer.call(&["FLUSHALL"]), "+OK\r\n");
    assert_eq!(reader.next(WAIT).as_deref(), Some(FLUSH));
    // Each master reports its flush; the client, which sent nothing since the first,
    // holds nothing the others could concern and is told once.
    reader.expect_nothing("the other masters' flushes");
}

#[test]
fn bcast_clients_hear_of_every_key_under_their_prefixes() {
    let proxy = proxy();
    let mut bcast = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    let on = [
        "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "bc:a:", "PREFIX", "bc:b:",
    ];
    assert_eq!(bcast.call(&on), "+OK\r\n");
    writer.call(&["SET", "bc:c:1", "x"]);
    bcast.expect_nothing("a key under no prefix");
    writer.call(&["SET", "bc:a:1", "x"]);
    assert_eq!(bcast.next(WAIT).as_deref(), Some(&*invalidate(&["bc:a:1"])));
    write_on_master("bc:b:2", "y");
    assert_eq!(bcast.next(WAIT).as_deref(), Some(&*invalidate(&["bc:b:2"])));
    let overlap = bcast.call(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "bc:a:x"]);
    assert_eq!(
        overlap,
        "-ERR Prefix 'bc:a:x' overlaps with an existing prefix 'bc:a:'. Prefixes for a single client must not overlap.\r\n"
    );
    let info = bcast.call(&["CLIENT", "TRACKINGINFO"]);
    assert!(
        info.contains("$5\r\nbcast\r\n") && info.contains("$5\r\nbc:b:\r\n"),
        "{info}"
    );
    let stats = bcast.call(&["INFO", "stats"]);
    assert!(stats.contains("tracking_total_prefixes:2\r\n"), "{stats}");
    let listed = bcast.call(&["CLIENT", "INFO"]);
    assert!(
        listed.contains(" flags=tB ") && listed.contains(" redir=0 "),
        "{listed}"
    );
    // RESET ends tracking, as on Redis.
    bcast.call(&["RESET"]);
    writer.call(&["SET", "bc:a:1", "z"]);
    bcast.expect_nothing("after RESET");
}

#[test]
fn resp2_clients_get_invalidations_through_redirect_and_hear_when_it_breaks() {
    let proxy = proxy();
    let mut listener = Conn::open(&proxy, false);
    let listener_id = listener.call(&["CLIENT", "ID"]);
    let listener_id = listener_id.trim_start_matches(':').trim().to_owned();
    listener.call(&["SUBSCRIBE", "__redis__:invalidate"]);
    let mut reader = Conn::open(&proxy, false);
    assert_eq!(
        reader.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]),
        "-ERR The client ID you want redirect to does not exist\r\n"
    );
    let on = ["CLIENT", "TRACKING", "ON", "REDIRECT", &listener_id];
    assert_eq!(reader.call(&on), "+OK\r\n");
    assert_eq!(
        reader.call(&["CLIENT", "GETREDIR"]),
        format!(":{listener_id}\r\n")
    );
    let mut writer = Conn::open(&proxy, false);
    reader.call(&["GET", "rd:k"]);
    writer.call(&["SET", "rd:k", "1"]);
    let message = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$4\r\nrd:k\r\n";
    assert_eq!(listener.next(WAIT).as_deref(), Some(message));
    reader.expect_nothing("a RESP2 client with REDIRECT");

    // A RESP3 client whose REDIRECT client goes away is told so, as Redis tells it.
    let mut target = Conn::open(&proxy, false);
    let target_id = target
        .call(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .to_owned();
    let mut reader3 = Conn::open(&proxy, true);
    reader3.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &target_id]);
    reader3.call(&["GET", "rd:j"]);
    drop(target);
    std::thread::sleep(Duration::from_millis(100));
    writer.call(&["SET", "rd:j", "1"]);
    let broken = format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{target_id}\r\n");
    assert_eq!(reader3.next(WAIT), Some(broken));
    let info = reader3.call(&["CLIENT", "TRACKINGINFO"]);
    assert!(info.contains("$15\r\nbroken_redirect\r\n"), "{info}");
    let listed = reader3.call(&["CLIENT", "INFO"]);
    assert!(listed.contains(" flags=tR "), "{listed}");
}

#[test]
fn optin_tracks_only_the_command_after_client_caching_yes() {
    let proxy = proxy();
    let mut reader = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    assert_eq!(
        reader.call(&["CLIENT", "CACHING", "yes"]),
        "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n"
    );
    reader.call(&["CLIENT", "TRACKING", "ON", "OPTIN"]);
    assert_eq!(
        reader.call(&["CLIENT", "CACHING", "no"]),
        "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n"
    );
    reader.call(&["GET", "oi:1"]);
    assert_eq!(reader.call(&["CLIENT", "CACHING", "yes"]), "+OK\r\n");
    reader.call(&["GET", "oi:2"]);
    reader.call(&["GET", "oi:3"]);
    writer.call(&["SET", "oi:1", "x"]);
    writer.call(&["SET", "oi:3", "x"]);
    writer.call(&["SET", "oi:2", "x"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["oi:2"])));
    reader.expect_nothing("keys read without CLIENT CACHING yes");

    // OPTOUT: every read is tracked but the one after CLIENT CACHING no.
    let mut optout = Conn::open(&proxy, true);
    optout.call(&["CLIENT", "TRACKING", "ON", "OPTOUT"]);
    optout.call(&["GET", "oo:1"]);
    assert_eq!(optout.call(&["CLIENT", "CACHING", "no"]), "+OK\r\n");
    optout.call(&["GET", "oo:2"]);
    optout.call(&["GET", "oo:3"]);
    writer.call(&["SET", "oo:2", "x"]);
    writer.call(&["SET", "oo:1", "x"]);
    writer.call(&["SET", "oo:3", "x"]);
    let mut seen = vec![optout.next(WAIT), optout.next(WAIT)];
    seen.sort();
    let expected = vec![Some(invalidate(&["oo:1"])), Some(invalidate(&["oo:3"]))];
    assert_eq!(seen, expected);
    optout.expect_nothing("the key read after CLIENT CACHING no");
}

#[test]
fn the_tracking_table_is_bounded_and_tracking_can_be_refused() {
    let proxy = proxy_with("tracking_table_max_keys: 10\n");
    let mut reader = Conn::open(&proxy, true);
    reader.call(&["CLIENT", "TRACKING", "ON"]);
    // Past the bound, keys are dropped with an invalidation, so the client caches no more
    // than the proxy remembers.
    let keys: Vec<String> = (0..30).map(|n| format!("tb:{n}")).collect();
    let mut dropped = 0;
    for key in &keys {
        reader.send(&["GET", key]);
    }
    let mut replies = 0;
    while replies < keys.len() || dropped < 20 {
        let frame = reader.next(WAIT).expect("a reply or an invalidation");
        if frame.starts_with(">2\r\n$10\r\ninvalidate\r\n*1\r\n") {
            dropped += 1;
        } else {
            assert_eq!(frame, "_\r\n");
            replies += 1;
        }
    }
    assert_eq!(dropped, 20);
    let (_, metrics) = http_get(proxy.admin_addr(), "/metrics");
    assert!(metrics.contains("slotbridge_tracking_keys 10"), "{metrics}");
    assert!(
        metrics.contains("slotbridge_tracking_clients 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slotbridge_tracking_invalidations_total{kind=\"keys\"} 20"),
        "{metrics}"
    );
    let info = reader.call(&["INFO", "clients"]);
    assert!(info.contains("tracking_clients:1\r\n"), "{info}");
    // The table's size is the proxy's, not the masters' (which count its tracking
    // connections).
    let stats = reader.call(&["INFO", "stats"]);
    for line in [
        "tracking_total_keys:10",
        "tracking_total_items:10",
        "tracking_total_prefixes:0",
    ] {
        assert!(stats.contains(&format!("{line}\r\n")), "{line}: {stats}");
    }

    // The bound is the proxy's, not each client's: many tracking clients hold no more, and
    // a client that does not track is sent nothing.
    let mut others: Vec<Conn> = (0..10).map(|_| Conn::open(&proxy, true)).collect();
    let mut plain = Conn::open(&proxy, true);
    for (n, other) in others.iter_mut().enumerate() {
        other.call(&["CLIENT", "TRACKING", "ON"]);
        for k in 0..5 {
            let key = format!("tb:{n}:{k}");
            assert_eq!(other.call_past_pushes(&["GET", &key]), "_\r\n");
        }
    }
    let (_, metrics) = http_get(proxy.admin_addr(), "/metrics");
    assert!(metrics.contains("slotbridge_tracking_keys 10"), "{metrics}");
    assert!(
        metrics.contains("slotbridge_tracking_clients 11"),
        "{metrics}"
    );
    assert_eq!(plain.call(&["SET", "tb:0:0", "x"]), "+OK\r\n");
    plain.expect_nothing("a client that does not track");

    let refusing = proxy_with("client_tracking: refuse\n");
    let mut client = Conn::open(&refusing, true);
    assert_eq!(
        client.call(&["CLIENT", "TRACKING", "ON"]),
        "-ERR proxy: CLIENT TRACKING ON is refused by this proxy's configuration (client_tracking: refuse)\r\n"
    );
}

#[test]
fn under_a_key_layout_invalidations_name_the_legacy_keys() {
    let p = "trklayout";
    let proxy = Proxy::start_with_layout(
        &shared_cluster().seeds_arg(),
        "config/botmesh-cluster-v1.yaml",
        p,
    );
    let legacy = format!("{p}:chat:chat-1");
    let stored = format!("{p}:{{ch:25}}:r:chat-1");
    let mut reader = Conn::open(&proxy, true);
    let mut bcast = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    assert_eq!(reader.call(&["CLIENT", "TRACKING", "ON"]), "+OK\r\n");
    let chats = format!("{p}:chat:");
    let on = ["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", &chats];
    assert_eq!(bcast.call(&on), "+OK\r\n");
    reader.call(&["GET", &legacy]);
    // Written through the proxy: the record and its index change on the cluster; the
    // clients hear of the legacy name only (the index is nobody's key).
    writer.call(&["SET", &legacy, "v"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&[&legacy])));
    assert_eq!(bcast.next(WAIT).as_deref(), Some(&*invalidate(&[&legacy])));
    reader.expect_nothing("the layout's index");
    bcast.expect_nothing("the layout's index");
    // Written straight on the master under its cluster name.
    assert_eq!(reader.call(&["GET", &legacy]), "$1\r\nv\r\n");
    write_on_master(&stored, "w");
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&[&legacy])));
    assert_eq!(bcast.next(WAIT).as_deref(), Some(&*invalidate(&[&legacy])));
    // A name under the prefix that no rule matches is stored as it is: one that looks like
    // the record's cluster name reads the record, and hears of its writes by that name.
    let mut odd = Conn::open(&proxy, true);
    odd.call(&["CLIENT", "TRACKING", "ON"]);
    assert_eq!(odd.call(&["GET", &stored]), "$1\r\nw\r\n");
    writer.call(&["SET", &legacy, "x"]);
    assert_eq!(odd.next(WAIT).as_deref(), Some(&*invalidate(&[&stored])));
}

/// The id (on `master`) of the tracking connection a proxy holds there.
fn tracking_connection_on(master: &str) -> String {
    let listed: String = common::query(master, redis::cmd("CLIENT").arg("LIST")).unwrap();
    let line = listed
        .lines()
        .find(|line| line.contains(" flags=t"))
        .unwrap_or_else(|| panic!("no tracking connection on {master}: {listed}"));
    line.split(' ')
        .next()
        .unwrap()
        .trim_start_matches("id=")
        .to_owned()
}

#[test]
fn a_lost_tracking_connection_flushes_and_reads_are_not_cached_until_it_is_back() {
    // A cluster of its own: the test kills the proxy's tracking connection and denies the
    // master's CLIENT TRACKING for a while.
    let cluster = common::Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut reader = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    reader.call(&["CLIENT", "TRACKING", "ON"]);
    reader.call(&["GET", "lost:k"]);
    let master = cluster.node_for_slot(cluster.keyslot("lost:k"));
    let kill = |id: &str| {
        let _: () =
            common::query(&master, redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id)).unwrap();
    };
    kill(&tracking_connection_on(&master));
    // What the client read may change unseen: it is told to drop everything.
    assert_eq!(reader.next(WAIT).as_deref(), Some(FLUSH));

    let acl = |rule: &str| {
        let cmd = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg(rule)
            .clone();
        let _: () = common::query(&master, &cmd).unwrap();
    };
    acl("-client|tracking");
    common::wait_until("the tracking connection refused", WAIT, || {
        let listed: String = common::query(&master, redis::cmd("CLIENT").arg("LIST")).unwrap();
        if let Some(line) = listed.lines().find(|line| line.contains(" flags=t")) {
            kill(line.split(' ').next().unwrap().trim_start_matches("id="));
            return false;
        }
        true
    });
    // While the master does not report, a read is invalidated right behind its reply.
    reader.call(&["GET", "lost:k"]);
    assert_eq!(
        reader.next(WAIT).as_deref(),
        Some(&*invalidate(&["lost:k"]))
    );

    acl("+client|tracking");
    // Back: the client, which read meanwhile, drops everything once more, then keys are
    // tracked again.
    assert_eq!(reader.next(WAIT).as_deref(), Some(FLUSH));
    reader.call(&["GET", "lost:k"]);
    writer.call(&["SET", "lost:k", "1"]);
    assert_eq!(
        reader.next(WAIT).as_deref(),
        Some(&*invalidate(&["lost:k"]))
    );
}

#[test]
fn the_redis_crate_in_resp3_gets_its_invalidations() {
    let proxy = proxy();
    let url = format!("redis://{}/?protocol=resp3", proxy.addr());
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let (pushes, received) = std::sync::mpsc::channel();
    con.set_push_sender(pushes);
    let _: () = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .query(&mut con)
        .unwrap();
    let _: Option<String> = redis::cmd("GET").arg("rc:k").query(&mut con).unwrap();
    let mut writer = proxy.connect();
    let _: () = redis::cmd("SET")
        .arg("rc:k")
        .arg("v")
        .query(&mut writer)
        .unwrap();
    // A synchronous connection hands pushes over as it reads replies.
    let deadline = Instant::now() + WAIT;
    let push = loop {
        let _: String = redis::cmd("PING").query(&mut con).unwrap();
        if let Ok(push) = received.try_recv() {
            break push;
        }
        assert!(Instant::now() < deadline, "no invalidation");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(push.kind, redis::PushKind::Invalidate);
    let key = redis::Value::BulkString(b"rc:k".to_vec());
    assert_eq!(push.data, vec![redis::Value::Array(vec![key])]);
}

#[test]
fn a_key_moved_to_a_new_master_is_invalidated_and_tracked_there() {
    // A cluster of its own: the test adds a master and moves a slot to it.
    let cluster = common::Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let mut reader = Conn::open(&proxy, true);
    let mut writer = Conn::open(&proxy, false);
    reader.call(&["CLIENT", "TRACKING", "ON"]);
    writer.call(&["SET", "mv:k", "1"]);
    assert_eq!(reader.call(&["GET", "mv:k"]), "$1\r\n1\r\n");
    let new = cluster.add_master();
    cluster.migrate_slot(cluster.keyslot("mv:k"), &new);
    // The proxy learns of the new master (a MOVED, here).
    assert_eq!(writer.call(&["GET", "mv:k"]), "$1\r\n1\r\n");
    // MIGRATE deleted the key on its old master, which reports it; and once the new
    // master reports too, the reader, which read from the cluster since its last flush,
    // drops everything. In either order.
    let mut seen = vec![reader.next(WAIT), reader.next(WAIT)];
    seen.sort();
    assert_eq!(
        seen,
        vec![Some(invalidate(&["mv:k"])), Some(FLUSH.to_owned())]
    );
    assert_eq!(reader.call(&["GET", "mv:k"]), "$1\r\n1\r\n");
    writer.call(&["SET", "mv:k", "2"]);
    assert_eq!(reader.next(WAIT).as_deref(), Some(&*invalidate(&["mv:k"])));
}

#[test]
fn noloop_is_shown_and_a_clients_own_write_still_invalidates() {
    let proxy = proxy();
    let mut client = Conn::open(&proxy, true);
    assert_eq!(
        client.call(&["CLIENT", "TRACKING", "ON", "NOLOOP"]),
        "+OK\r\n"
    );
    let info = client.call(&["CLIENT", "TRACKINGINFO"]);
    assert!(info.contains("$6\r\nnoloop\r\n"), "{info}");
    client.call(&["GET", "nl:k"]);
    // Weaker than Redis, by choice (README): a master's report does not say who wrote, so
    // the client hears of its own write rather than risk missing another client's. The
    // invalidation and the write's reply may come in either order.
    client.send(&["SET", "nl:k", "1"]);
    let mut seen = vec![client.next(WAIT), client.next(WAIT)];
    seen.sort();
    assert_eq!(
        seen,
        vec![Some("+OK\r\n".to_owned()), Some(invalidate(&["nl:k"]))]
    );
}

#[test]
fn a_cache_kept_from_the_invalidations_ends_with_the_last_write() {
    let proxy = proxy();
    let mut reader = Conn::open(&proxy, true);
    reader.call(&["CLIENT", "TRACKING", "ON"]);
    let key = "race:k";
    let writes: u32 = 2000;
    // Writes through the proxy and straight on the master, in turns, while the reader
    // caches what it reads and drops it on each invalidation.
    let proxy_addr = proxy.addr().to_owned();
    let writer = std::thread::spawn(move || {
        let mut through_proxy = common::connect(&proxy_addr);
        let cluster = shared_cluster();
        let mut direct = common::connect(&cluster.node_for_slot(cluster.keyslot(key)));
        for n in 1..=writes {
            let con = if n % 2 == 0 {
                &mut through_proxy
            } else {
                &mut direct
            };
            let _: () = redis::cmd("SET").arg(key).arg(n).query(con).unwrap();
        }
    });
    let mut cached: Option<String> = None;
    let mut reading = false;
    let mut invalidations = 0;
    let mut finished_at: Option<Instant> = None;
    loop {
        if cached.is_none() && !reading {
            reader.send(&["GET", key]);
            reading = true;
        }
        let wait = if finished_at.is_some() {
            QUIET
        } else {
            Duration::from_millis(50)
        };
        match reader.next(wait) {
            Some(frame) if frame.starts_with('>') => {
                assert_eq!(frame, invalidate(&[key]));
                invalidations += 1;
                cached = None;
            }
            Some(frame) => {
                reading = false;
                cached = Some(frame);
            }
            None if finished_at.is_some() && !reading => break,
            None => {}
        }
        if finished_at.is_none() && writer.is_finished() {
            finished_at = Some(Instant::now());
        }
    }
    writer.join().unwrap();
    let last = format!("${}\r\n{writes}\r\n", writes.to_string().len());
    assert!(invalidations > 0);
    // What the client holds (it reads again whenever it holds nothing) is the last value
    // written: no invalidation was missed, and none overtook the reply it invalidated.
    let held = cached.expect("the loop ends holding a value");
    assert_eq!(held, last, "after {invalidations} invalidations");
}
