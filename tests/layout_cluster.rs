//! The layout translation through the proxy against a real 3-master cluster: legacy names
//! written through the proxy land under the cluster:v1 names of LAYOUT.md (read on the
//! cluster directly), indices carry the records with their expiry, listings give back
//! exactly the legacy names, and the start-up marker check refuses legacy data.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, new_dir, query, resp_command, scan_all, shared_cluster, Cluster, Proxy};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

fn layout_proxy(cluster: &Cluster, prefix: &str) -> Proxy {
    Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, prefix)
}

/// A command on the node that owns `key` (the cluster, read directly).
fn on_cluster<T: redis::FromRedisValue>(cluster: &Cluster, key: &str, cmd: &redis::Cmd) -> T {
    let node = cluster.node_for_slot(cluster.keyslot(key));
    query(&node, cmd).unwrap_or_else(|e| panic!("{key} on {node}: {e}"))
}

/// The PEXPIRETIME of `record` and the score of `member` in `index`, both read on the cluster.
fn expiry_and_score(cluster: &Cluster, record: &str, index: &str, member: &str) -> (i64, f64) {
    let at = on_cluster(cluster, record, redis::cmd("PEXPIRETIME").arg(record));
    let score = on_cluster(cluster, index, redis::cmd("ZSCORE").arg(index).arg(member));
    (at, score)
}

fn exists_on_cluster(cluster: &Cluster, key: &str) -> bool {
    on_cluster::<i64>(cluster, key, redis::cmd("EXISTS").arg(key)) == 1
}

/// Every key of the cluster under `prefix:` (KEYS on each master).
fn cluster_keys(cluster: &Cluster, prefix: &str) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for master in cluster.masters() {
        let keys: Vec<String> =
            query(&master, redis::cmd("KEYS").arg(format!("{prefix}:*"))).unwrap();
        all.extend(keys);
    }
    all
}

/// The worked examples of LAYOUT.md with `p` = `mybot`, under another prefix.
fn expected_rows(p: &str) -> Vec<(String, String)> {
    [
        ("chat:chat-1", "{ch:25}:r:chat-1"),
        ("chat:a:b{c}", "{ch:1}:r:a%3Ab%7Bc%7D"),
        ("checkpoint:c2", "{cp:0}:r:c2"),
        ("msgs:chat-1", "{m:chat-1}:z"),
        ("msg:chat-1:m1", "{m:chat-1}:i:m1"),
        ("user:u1:prefs:lang", "{ud:u1}:e:prefs:lang"),
        ("lock:team:ops", "{lk:team%3Aops}:l"),
        ("fence:team:ops", "{lk:team%3Aops}:f"),
        ("co:turn:chat-1:seq", "co:{t:chat-1}:seq"),
        ("co:leader:sched", "co:{ld:sched}"),
        ("co:leader:sched:term", "co:{ld:sched}:term"),
        ("conv:42", "conv:42"),
        ("co:rep:x", "co:rep:x"),
    ]
    .iter()
    .map(|(legacy, cluster)| (format!("{p}:{legacy}"), format!("{p}:{cluster}")))
    .collect()
}

#[test]
fn legacy_writes_land_under_cluster_names_with_indices() {
    let cluster = shared_cluster();
    let p = "lyrows";
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.client().get_connection().unwrap();
    for (legacy, _) in expected_rows(p) {
        let _: () = redis::cmd("SET")
            .arg(&legacy)
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    // Outside every prefix: untouched.
    let _: () = redis::cmd("SET")
        .arg("other:chat:1")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert!(exists_on_cluster(cluster, "other:chat:1"));
    let mut expected: BTreeSet<String> = BTreeSet::new();
    for (legacy, cluster_key) in expected_rows(p) {
        assert!(
            exists_on_cluster(cluster, &cluster_key),
            "{legacy} must be stored as {cluster_key}"
        );
        let got: String = redis::cmd("GET").arg(&legacy).query(&mut con).unwrap();
        assert_eq!(got, "v", "read back {legacy} through the proxy");
        expected.insert(cluster_key);
    }
    expected.insert(format!("{p}:{{ch:25}}:idx"));
    expected.insert(format!("{p}:{{ch:1}}:idx"));
    expected.insert(format!("{p}:{{cp:0}}:idx"));
    expected.insert(format!("{p}:{{ud:u1}}:idx"));
    assert_eq!(cluster_keys(cluster, p), expected, "no legacy names left");

    // Persistent record: +inf; with PX: its PEXPIRETIME; deleted: gone from the index.
    let idx = format!("{p}:{{ch:25}}:idx");
    let score: String = on_cluster(cluster, &idx, redis::cmd("ZSCORE").arg(&idx).arg("chat-1"));
    assert_eq!(score, "inf");
    let ch1 = format!("{p}:{{ch:1}}:idx");
    let members: Vec<String> =
        on_cluster(cluster, &ch1, redis::cmd("ZRANGE").arg(&ch1).arg(0).arg(-1));
    assert_eq!(members, vec!["a%3Ab%7Bc%7D"]);
    let cp = format!("{p}:checkpoint:c2");
    let cp_cluster = format!("{p}:{{cp:0}}:r:c2");
    let cp_idx = format!("{p}:{{cp:0}}:idx");
    let _: () = redis::cmd("SET")
        .arg(&cp)
        .arg("x")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let (at, score) = expiry_and_score(cluster, &cp_cluster, &cp_idx, "c2");
    assert!(at > 0);
    assert_eq!(score, at as f64);
    let _: i64 = redis::cmd("PERSIST").arg(&cp).query(&mut con).unwrap();
    let score: String = on_cluster(
        cluster,
        &cp_idx,
        redis::cmd("ZSCORE").arg(&cp_idx).arg("c2"),
    );
    assert_eq!(score, "inf", "PERSIST re-scores the entry");
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&cp)
        .arg(90_000)
        .query(&mut con)
        .unwrap();
    let (at, score) = expiry_and_score(cluster, &cp_cluster, &cp_idx, "c2");
    assert_eq!(score, at as f64, "PEXPIRE re-scores the entry");

    // HSET on a user-data key: indexed under <ns>:<key>.
    let _: i64 = redis::cmd("HSET")
        .arg(format!("{p}:user:u1:prefs:theme"))
        .arg("f")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let ud_idx = format!("{p}:{{ud:u1}}:idx");
    let members: Vec<String> = on_cluster(
        cluster,
        &ud_idx,
        redis::cmd("ZRANGE").arg(&ud_idx).arg(0).arg(-1),
    );
    assert_eq!(members, vec!["prefs:lang", "prefs:theme"]);

    // DEL over records in different slots: split per slot, every part keeps its index.
    let deleted: i64 = redis::cmd("DEL")
        .arg(format!("{p}:chat:chat-1"))
        .arg(format!("{p}:chat:a:b{{c}}"))
        .arg(format!("{p}:checkpoint:c2"))
        .arg(format!("{p}:chat:missing"))
        .query(&mut con)
        .unwrap();
    assert_eq!(deleted, 3);
    for idx in [idx, format!("{p}:{{ch:1}}:idx"), cp_idx] {
        assert!(
            !exists_on_cluster(cluster, &idx),
            "{idx} must be empty (gone)"
        );
    }
}

#[test]
fn upkeep_keeps_replies_byte_exact() {
    let cluster = shared_cluster();
    let p = "lyexact";
    let proxy = layout_proxy(cluster, p);
    let node = cluster.node_for_slot(cluster.keyslot("{lyexact}plain"));
    let check = |commands: &[&[&str]]| {
        for hello in ["2", "3"] {
            let mut via_proxy = raw_session(proxy.addr(), hello);
            let mut direct = raw_session(&node, hello);
            for command in commands {
                // Same command on a plain key directly and on a record through the proxy.
                let record: Vec<String> = command
                    .iter()
                    .map(|a| a.replace("KEY", &format!("{p}:chat:x")))
                    .collect();
                let plain: Vec<String> = command
                    .iter()
                    .map(|a| a.replace("KEY", "{lyexact}plain"))
                    .collect();
                let a = via_proxy.call(&record);
                let b = direct.call(&plain);
                assert_eq!(
                    String::from_utf8_lossy(&a),
                    String::from_utf8_lossy(&b),
                    "RESP{hello} reply of {command:?}"
                );
            }
        }
    };
    check(&[
        &["DEL", "KEY"],
        &["SET", "KEY", "v"],
        &["SET", "KEY", "w", "GET"],
        &["SET", "KEY", "w", "NX"],
        &["GETDEL", "KEY"],
        &["GETDEL", "KEY"],
        &["HSET", "KEY", "a", "1", "b", "2"],
        &["HINCRBYFLOAT", "KEY", "a", "1.5"],
        &["INCR", "KEY"],
        &["EXPIRE", "KEY", "100"],
        &["PERSIST", "KEY"],
        &["DEL", "KEY"],
    ]);
}

/// A raw RESP connection (after HELLO `proto`) that returns each reply's bytes.
struct RawSession {
    stream: std::net::TcpStream,
    buffer: Vec<u8>,
}

fn raw_session(addr: &str, proto: &str) -> RawSession {
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut session = RawSession {
        stream,
        buffer: Vec::new(),
    };
    session.call(&["HELLO".to_string(), proto.to_string()]);
    session
}

impl RawSession {
    fn call(&mut self, args: &[String]) -> Vec<u8> {
        use std::io::Write;
        self.stream.write_all(&resp_command(args)).unwrap();
        loop {
            if let Some(len) = frame_len(&self.buffer) {
                return self.buffer.drain(..len).collect();
            }
            let mut chunk = [0u8; 4096];
            let n = common::read_some(&mut self.stream, &mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Length of the complete RESP2/RESP3 frame at the start of `buf`, if complete.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&buf[1..line_end]).ok()?;
    let after = line_end + 2;
    match buf[0] {
        b'$' | b'=' | b'!' => {
            let len: i64 = head.parse().ok()?;
            if len < 0 {
                return Some(after);
            }
            let end = after + len as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count: i64 = head.parse().ok()?;
            let count = if matches!(buf[0], b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut at = after;
            for _ in 0..count.max(0) {
                at += frame_len(&buf[at..])?;
            }
            Some(at)
        }
        _ => Some(after),
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[test]
fn listings_return_exactly_the_legacy_names() {
    let cluster = shared_cluster();
    let p = "lylist";
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.client().get_connection().unwrap();
    let mut chats = Vec::new();
    for i in 0..50 {
        let name = format!("{p}:chat:c{i}:x{{y}}");
        let _: () = redis::cmd("SET").arg(&name).arg(i).query(&mut con).unwrap();
        chats.push(name);
    }
    let mut live = Vec::new();
    for i in 0..10 {
        let name = format!("{p}:checkpoint:live-{i}");
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg(1)
            .arg("PX")
            .arg(600_000)
            .query(&mut con)
            .unwrap();
        live.push(name);
        let _: () = redis::cmd("SET")
            .arg(format!("{p}:checkpoint:short-{i}"))
            .arg(1)
            .arg("PX")
            .arg(200)
            .query(&mut con)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg(format!("{p}:conv:1"))
        .arg(1)
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}:checkpoint:*"))
        .query(&mut con)
        .unwrap();
    assert_eq!(
        sorted(keys),
        sorted(live.clone()),
        "expired checkpoints vanish"
    );
    let scanned = scan_all(&mut con, &format!("{p}:chat:*"));
    assert_eq!(sorted(scanned), sorted(chats.clone()));
    let narrow = scan_all(&mut con, &format!("{p}:chat:c1*"));
    let expected: Vec<String> = chats
        .iter()
        .filter(|c| c.starts_with(&format!("{p}:chat:c1")))
        .cloned()
        .collect();
    assert_eq!(sorted(narrow), sorted(expected));

    // A broad pattern: indices plus the fan-out, no internal key, no duplicate.
    let all: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}:*"))
        .query(&mut con)
        .unwrap();
    let mut expected: Vec<String> = chats.iter().chain(live.iter()).cloned().collect();
    expected.push(format!("{p}:conv:1"));
    assert_eq!(sorted(all), sorted(expected.clone()));
    let all = scan_all(&mut con, &format!("{p}:*"));
    assert_eq!(sorted(all), sorted(expected));

    // The cluster is shared: other tests' keys (their own prefixes, shown as they are) can
    // be drawn too; none drawn may be an internal key of this prefix.
    for _ in 0..20 {
        let random: Option<String> = redis::cmd("RANDOMKEY").query(&mut con).unwrap();
        let random = random.expect("a key");
        let internal = random.contains("{ch:") || random.contains(":idx");
        assert!(
            !(random.starts_with(&format!("{p}:")) && internal),
            "{random}"
        );
    }
}

#[test]
fn pops_and_stream_reads_name_legacy_keys() {
    let cluster = shared_cluster();
    let p = "lypop";
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.client().get_connection().unwrap();
    let log = format!("{p}:msgs:chat-1");
    let _: i64 = redis::cmd("RPUSH")
        .arg(&log)
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert!(exists_on_cluster(cluster, &format!("{p}:{{m:chat-1}}:z")));
    let popped: (String, String) = redis::cmd("BLPOP")
        .arg(&log)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped, (log.clone(), "a".to_string()));
    let _: i64 = redis::cmd("ZADD")
        .arg(&log)
        .arg(1)
        .arg("m")
        .query(&mut con)
        .unwrap();
    let popped: (String, String, String) = redis::cmd("BZPOPMIN")
        .arg(&log)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(popped.0, log);
    let _: String = redis::cmd("XADD")
        .arg(&log)
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let read: redis::Value = redis::cmd("XREAD")
        .arg("STREAMS")
        .arg(&log)
        .arg("0")
        .query(&mut con)
        .unwrap();
    let text = format!("{read:?}");
    assert!(text.contains(&log), "{text}");
    assert!(!text.contains("{m:"), "{text}");
}

#[test]
fn strict_mode_refuses_unmatched_keys() {
    let cluster = shared_cluster();
    let p = "lystrict";
    let dir = new_dir("layout-strict");
    let config = dir.join("slotbridge.yaml");
    std::fs::write(
        &config,
        format!(
            "layout:\n  file: {PROFILE}\n  prefixes: [{p}]\n  strict: true\ncluster: [{}]\n",
            cluster.seeds().join(", ")
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let mut con = proxy.client().get_connection().unwrap();
    let refused = redis::cmd("SET")
        .arg(format!("{p}:nosuchfamily:1"))
        .arg(1)
        .query::<()>(&mut con);
    let error = refused.expect_err("strict refuses").to_string();
    assert!(error.contains("matches no layout rule"), "{error}");
    let _: () = redis::cmd("SET")
        .arg(format!("{p}:chat:1"))
        .arg(1)
        .query(&mut con)
        .unwrap();
}

/// Runs the proxy binary to completion (or until it serves) and returns (started, output).
fn try_start(args: &[String]) -> (bool, String) {
    let dir = new_dir("layout-start");
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let log = dir.join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--listen", &listen, "--admin-listen", &admin])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let started = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if std::net::TcpStream::connect(&listen).is_ok() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    (started, std::fs::read_to_string(&log).unwrap_or_default())
}

#[test]
fn start_up_refuses_legacy_data_without_marker() {
    let cluster = shared_cluster();
    let p = "lymarker";
    let legacy = format!("{p}:chat:old");
    on_cluster::<()>(cluster, &legacy, redis::cmd("SET").arg(&legacy).arg(1));
    let base = vec![
        "--cluster".to_string(),
        cluster.seeds_arg(),
        "--layout".to_string(),
        PROFILE.to_string(),
        "--prefix".to_string(),
        p.to_string(),
    ];
    let (started, output) = try_start(&base);
    assert!(!started, "must refuse: {output}");
    assert!(output.contains("run the migration first"), "{output}");

    // allow_legacy_data lets it start.
    let dir = new_dir("layout-allow");
    let config = dir.join("slotbridge.yaml");
    std::fs::write(
        &config,
        format!("layout:\n  file: {PROFILE}\n  prefixes: [{p}]\n  allow_legacy_data: true\n"),
    )
    .unwrap();
    let mut allowed = base[..2].to_vec();
    allowed.extend(["--config".to_string(), config.display().to_string()]);
    let (started, output) = try_start(&allowed);
    assert!(started, "allow_legacy_data must start: {output}");

    // A marker naming another layout: refused; the right marker: starts.
    let marker = format!("{p}:{{meta}}:layout");
    on_cluster::<()>(
        cluster,
        &marker,
        redis::cmd("SET").arg(&marker).arg("cluster:v0"),
    );
    let (started, output) = try_start(&base);
    assert!(!started && output.contains("cluster:v0"), "{output}");
    on_cluster::<()>(
        cluster,
        &marker,
        redis::cmd("SET").arg(&marker).arg("cluster:v1"),
    );
    let (started, output) = try_start(&base);
    assert!(started, "marker present must start: {output}");
}

const SLIDING_WINDOW: &str = r#"
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)
if count < limit then
    local seq_key = key .. ':seq'
    local seq = redis.call('INCR', seq_key)
    redis.call('EXPIRE', seq_key, math.ceil(window / 1000))
    redis.call('ZADD', key, now, now .. '-' .. seq)
    redis.call('EXPIRE', key, math.ceil(window / 1000))
    return 1
end
return 0
"#;

#[test]
fn script_deriving_a_key_works_with_the_hash_tag_rule() {
    let cluster = shared_cluster();
    let p = "lyrl";
    // A user whose key and derived `:seq` key live on different masters.
    let node_of = |key: String| cluster.node_for_slot(cluster.keyslot(&key));
    let user = (0..100)
        .map(|i| format!("sliding:{i}"))
        .find(|id| {
            node_of(format!("{p}:ratelimit:{id}")) != node_of(format!("{p}:ratelimit:{id}:seq"))
        })
        .unwrap();
    let key = format!("{p}:ratelimit:{user}");
    let call = |proxy: &Proxy| {
        let mut con = proxy.client().get_connection().unwrap();
        redis::cmd("EVAL")
            .arg(SLIDING_WINDOW)
            .arg(1)
            .arg(&key)
            .arg(1_000_000)
            .arg(60_000)
            .arg(100)
            .query::<i64>(&mut con)
    };
    let plain = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    let error = call(&plain).expect_err("plain proxy: the derived key is in another slot");
    assert!(
        error.to_string().contains("Script attempted to access")
            && error.to_string().contains("needs the same hash tag"),
        "the node's error with the proxy's hint: {error}"
    );
    let tagged = Proxy::start_with_layout(
        &cluster.seeds_arg(),
        "config/examples/hash-tag-generic.yaml",
        p,
    );
    assert_eq!(call(&tagged).unwrap(), 1);
    // Captures are percent-encoded (LAYOUT.md): `:` becomes `%3A`.
    let seq = format!("{p}:{{rl:{}}}:seq", user.replace(':', "%3A"));
    assert!(exists_on_cluster(cluster, &seq), "{seq}");
    // The derived key reads back under its legacy name too.
    let mut con = tagged.client().get_connection().unwrap();
    let value: i64 = redis::cmd("GET")
        .arg(format!("{key}:seq"))
        .query(&mut con)
        .unwrap();
    assert_eq!(value, 1);
}

/// `calls=` of `cmdstat_<command>` in the node's INFO commandstats (0 when never called).
fn command_calls(node: &str, command: &str) -> u64 {
    let stats: String = query(node, redis::cmd("INFO").arg("commandstats")).unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// A script of the client's own cannot run inside the upkeep script, so it runs in one
/// MULTI/EXEC with the refresh of the index entries of the records it writes: no other
/// request runs between the two. What cannot run in that block (an EVALSHA the node lacks)
/// still gets the node's own answer.
#[test]
fn a_client_script_on_a_record_runs_in_one_exec_with_its_index_refresh() {
    // A cluster of its own: every EXEC on it is this test's.
    let cluster = Cluster::start(3, 0);
    let execs_of_all = || -> u64 {
        cluster
            .masters()
            .iter()
            .map(|node| command_calls(node, "exec"))
            .sum()
    };
    let p = "lyeval";
    let proxy = layout_proxy(&cluster, p);
    let mut con = proxy.client().get_connection().unwrap();
    let legacy = format!("{p}:checkpoint:c7");
    let execs = execs_of_all();

    let reply: String = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return 'done'")
        .arg(1)
        .arg(&legacy)
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(reply, "done");
    assert_eq!(
        execs_of_all(),
        execs + 1,
        "the script and the refresh ran in one EXEC"
    );
    let record = cluster_keys(&cluster, p)
        .into_iter()
        .find(|key| key.ends_with(":r:c7"))
        .expect("the record under its cluster name");
    let index = record.replace(":r:c7", ":idx");
    let (at, score) = expiry_and_score(&cluster, &record, &index, "c7");
    assert!(at > 0);
    assert_eq!(score, at as f64, "the entry carries the record's expiry");

    // A script error is the script's reply; what it wrote before failing stays indexed.
    let error = redis::cmd("EVAL")
        .arg("redis.call('DEL', KEYS[1]) return redis.call('INCR', 'x', 'y')")
        .arg(1)
        .arg(&legacy)
        .query::<()>(&mut con)
        .expect_err("the script fails after its DEL");
    assert!(
        error
            .to_string()
            .contains("Wrong number of args calling Redis command"),
        "{error}"
    );
    assert_eq!(execs_of_all(), execs + 2);
    assert!(
        !exists_on_cluster(&cluster, &index),
        "DEL took the entry too"
    );

    // The node lacks this script: the block runs nothing of it, the client gets NOSCRIPT.
    let error = redis::cmd("EVALSHA")
        .arg("0123456789012345678901234567890123456789")
        .arg(1)
        .arg(&legacy)
        .query::<()>(&mut con)
        .expect_err("no such script");
    assert!(error.to_string().contains("No matching script"), "{error}");
}

/// SORT's BY and GET patterns form legacy names; under the layout they are read at their
/// cluster names, so sorting by weights written through the proxy works.
#[test]
fn sort_patterns_read_legacy_keys_at_their_cluster_names() {
    let cluster = shared_cluster();
    let p = "lysort";
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.client().get_connection().unwrap();
    for (turn, seq) in [("c1", 30), ("c2", 10), ("c3", 20)] {
        let _: () = redis::cmd("SET")
            .arg(format!("{p}:co:turn:{turn}:seq"))
            .arg(seq)
            .query(&mut con)
            .unwrap();
    }
    assert!(exists_on_cluster(cluster, &format!("{p}:co:{{t:c2}}:seq")));
    let _: i64 = redis::cmd("RPUSH")
        .arg("lysort-list")
        .arg(&["c1", "c2", "c3"])
        .query(&mut con)
        .unwrap();
    let weight = format!("{p}:co:turn:*:seq");
    let sorted: Vec<String> = redis::cmd("SORT")
        .arg("lysort-list")
        .arg("BY")
        .arg(&weight)
        .arg("GET")
        .arg("#")
        .arg("GET")
        .arg(&weight)
        .query(&mut con)
        .unwrap();
    assert_eq!(sorted, ["c2", "10", "c3", "20", "c1", "30"]);
}

/// Commands on keys inside the prefix are sent in the client's batches like plain ones
/// (renamed, and writes to index-backed records inside the upkeep script): a pipeline that
/// mixes them keeps its order. When the masters lost their script cache behind the proxy's
/// back (SCRIPT FLUSH on the nodes), the upkeep calls answer `-NOSCRIPT` and go again with
/// the script's body: the writes land and their index entries follow. (Requests pipelined
/// behind such a call may run before its second attempt, so that round reads afterwards.)
/// A SCRIPT FLUSH through the proxy loads the script again, and order holds.
#[test]
fn pipelined_layout_writes_keep_order_and_survive_a_lost_script_cache() {
    let p = "batched";
    let cluster = shared_cluster();
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.connect();
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v).unwrap();
    for round in 0..3 {
        let flushed = round == 1;
        if flushed {
            for master in cluster.masters() {
                let _: () = query(&master, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
            }
        }
        if round == 2 {
            // Through the proxy, which loads the layout's script again at once.
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
        }
        let mut writes = redis::pipe();
        let mut reads = redis::pipe();
        for i in 0..20 {
            let chat = format!("{p}:chat:c{i}");
            let fence = format!("{p}:fence:f{i}");
            writes
                .cmd("SET")
                .arg(&chat)
                .arg(round)
                .arg("PX")
                .arg(60_000 + i);
            writes.cmd("INCR").arg(&fence);
            writes.cmd("INCR").arg(format!("plain:{p}:{i}"));
            let read_into = if flushed { &mut reads } else { &mut writes };
            read_into.cmd("GET").arg(&chat);
            read_into.cmd("GET").arg(&fence);
        }
        let mut replies: Vec<redis::Value> = writes.query(&mut con).unwrap();
        if flushed {
            let written = std::mem::take(&mut replies);
            let read: Vec<redis::Value> = reads.query(&mut con).unwrap();
            for (three, two) in written.chunks(3).zip(read.chunks(2)) {
                replies.extend_from_slice(three);
                replies.extend_from_slice(two);
            }
        }
        // Per record: SET, INCR, INCR, GET, GET (interleaved, or joined after the flush).
        let count = (round + 1).to_string();
        for (i, five) in replies.chunks(5).enumerate() {
            let expected = ["OK", &round.to_string(), &count, &count, &count];
            let got: Vec<String> = five.iter().map(text).collect();
            let got = [&got[0], &got[3], &got[1], &got[4], &got[2]];
            assert_eq!(
                got.map(String::as_str),
                expected,
                "round {round}, record {i}: SET, GET, INCR, GET, INCR"
            );
        }
        for i in 0..20 {
            let id = format!("c{i}");
            let record = format!("{p}:{{ch:{}}}:r:{id}", bucket(&id));
            let index = format!("{p}:{{ch:{}}}:idx", bucket(&id));
            let (at, score) = expiry_and_score(cluster, &record, &index, &id);
            assert!(at > 0, "{record} has its expiry");
            assert_eq!(score, at as f64, "{index} scores {id} with its expiry");
        }
    }
}

/// LAYOUT.md's bucket of a record id.
fn bucket(id: &str) -> u8 {
    slotbridge::rewrite::encoding::bucket(id.as_bytes())
}

#[test]
fn a_split_mset_of_renamed_kept_and_outside_keys_lands_under_cluster_names() {
    let cluster = shared_cluster();
    let p = "lysplit";
    let proxy = layout_proxy(cluster, p);
    let mut con = proxy.connect();
    // Renamed (lock), kept (conv) and outside-prefix keys, with an empty value among them:
    // the parts frame renamed and empty arguments anew and copy the others as sent.
    let pairs: Vec<(String, String, &str)> = (0..4)
        .flat_map(|i| {
            [
                (
                    format!("{p}:lock:l{i}"),
                    format!("{p}:{{lk:l{i}}}:l"),
                    "locked",
                ),
                (format!("{p}:conv:c{i}"), format!("{p}:conv:c{i}"), ""),
                (format!("plain:{p}:{i}"), format!("plain:{p}:{i}"), "plain"),
            ]
        })
        .collect();
    let slots: BTreeSet<u16> = pairs
        .iter()
        .map(|(_, key, _)| cluster.keyslot(key))
        .collect();
    assert!(slots.len() > 6, "the MSET must span slots: {slots:?}");
    let mut mset = redis::cmd("MSET");
    for (legacy, _, value) in &pairs {
        mset.arg(legacy).arg(*value);
    }
    let _: () = mset.query(&mut con).unwrap();
    let mut mget = redis::cmd("MGET");
    for (legacy, cluster_key, value) in &pairs {
        let stored: String = on_cluster(cluster, cluster_key, redis::cmd("GET").arg(cluster_key));
        assert_eq!(stored, *value, "{legacy} stored as {cluster_key}");
        mget.arg(legacy);
    }
    let read: Vec<String> = mget.query(&mut con).unwrap();
    let written: Vec<&str> = pairs.iter().map(|(_, _, value)| *value).collect();
    assert_eq!(read, written);
}
