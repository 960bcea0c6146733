//! Transactions where they meet other features, against a real 3-master cluster: the key
//! layout inside MULTI/EXEC and WATCH, and the command policy and ACL at queue time.
//! Expected cluster names and index entries come from LAYOUT.md's worked examples;
//! expected error transcripts come from a real redis-server.

mod common;

use common::{new_dir, query, shared_cluster, transcript, Cluster, Proxy, Standalone};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

/// A proxy over the shared cluster with the botmesh layout for `prefix` and `yaml` as
/// its configuration file.
fn layout_proxy(prefix: &str, yaml: &str) -> Proxy {
    let path = new_dir("tx-layout-config").join("slotbridge.yaml");
    std::fs::write(&path, yaml).unwrap();
    Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--layout",
        PROFILE,
        "--prefix",
        prefix,
        "--config",
        path.to_str().unwrap(),
    ])
}

/// A command on the node that owns `key` (the cluster, read directly).
fn on_cluster<T: redis::FromRedisValue>(cluster: &Cluster, key: &str, cmd: &redis::Cmd) -> T {
    let node = cluster.node_for_slot(cluster.keyslot(key));
    query(&node, cmd).unwrap_or_else(|e| panic!("{key} on {node}: {e}"))
}

fn exists_on_cluster(cluster: &Cluster, key: &str) -> bool {
    on_cluster::<i64>(cluster, key, redis::cmd("EXISTS").arg(key)) == 1
}

fn queued(con: &mut redis::Connection, cmd: &redis::Cmd) {
    let reply: String = cmd.query(con).unwrap();
    assert_eq!(reply, "QUEUED");
}

#[test]
fn multi_exec_under_a_layout_writes_cluster_names_and_keeps_indices() {
    let cluster = shared_cluster();
    let p = "gapmulti";
    let proxy = layout_proxy(p, "cross_slot_transactions: split\n");
    let mut con = proxy.connect();
    let lock = format!("{p}:lock:team:ops");
    let _: i64 = redis::cmd("RPUSH")
        .arg(&lock)
        .arg("a")
        .query(&mut con)
        .unwrap();

    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    queued(
        &mut con,
        redis::cmd("SET").arg(format!("{p}:chat:chat-1")).arg("v"),
    );
    queued(
        &mut con,
        redis::cmd("HSET")
            .arg(format!("{p}:user:u1:prefs:lang"))
            .arg("value")
            .arg("en"),
    );
    queued(&mut con, redis::cmd("LMPOP").arg(1).arg(&lock).arg("LEFT"));
    let exec: redis::Value = redis::cmd("EXEC").query(&mut con).unwrap();
    let redis::Value::Array(elements) = exec else {
        panic!("EXEC must answer an array: {exec:?}");
    };
    assert_eq!(
        elements.len(),
        3,
        "one element per queued command: {elements:?}"
    );
    assert_eq!(elements[0], redis::Value::Okay);
    assert_eq!(elements[1], redis::Value::Int(1));
    // LMPOP names the list it popped from: the legacy name, as outside MULTI.
    let popped: (String, Vec<String>) = redis::from_redis_value(&elements[2]).unwrap();
    assert_eq!(popped, (lock.clone(), vec!["a".to_string()]));

    // LAYOUT.md: chat:chat-1 -> {ch:25}:r:chat-1, user:u1:prefs:lang -> {ud:u1}:e:prefs:lang.
    let chat = format!("{p}:{{ch:25}}:r:chat-1");
    let prefs = format!("{p}:{{ud:u1}}:e:prefs:lang");
    assert!(exists_on_cluster(cluster, &chat));
    assert!(exists_on_cluster(cluster, &prefs));
    assert!(!exists_on_cluster(cluster, &format!("{p}:chat:chat-1")));
    assert!(!exists_on_cluster(
        cluster,
        &format!("{p}:user:u1:prefs:lang")
    ));
    let ch_idx = format!("{p}:{{ch:25}}:idx");
    let score: String = on_cluster(
        cluster,
        &ch_idx,
        redis::cmd("ZSCORE").arg(&ch_idx).arg("chat-1"),
    );
    assert_eq!(score, "inf", "a persistent record is indexed with +inf");
    let ud_idx = format!("{p}:{{ud:u1}}:idx");
    let members: Vec<String> = on_cluster(
        cluster,
        &ud_idx,
        redis::cmd("ZRANGE").arg(&ud_idx).arg(0).arg(-1),
    );
    assert_eq!(members, vec!["prefs:lang"]);

    // The upkeep works when the node lost its script cache: the block loads it first.
    for master in cluster.masters() {
        let _: () = query(&master, redis::cmd("SCRIPT").arg("FLUSH")).unwrap();
    }
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    queued(
        &mut con,
        redis::cmd("SET")
            .arg(format!("{p}:chat:chat-1"))
            .arg("w")
            .arg("PX")
            .arg(60_000),
    );
    let exec: Vec<String> = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(exec, vec!["OK"]);
    let at: i64 = on_cluster(cluster, &chat, redis::cmd("PEXPIRETIME").arg(&chat));
    let score: f64 = on_cluster(
        cluster,
        &ch_idx,
        redis::cmd("ZSCORE").arg(&ch_idx).arg("chat-1"),
    );
    assert!(at > 0);
    assert_eq!(score, at as f64, "the index entry follows the new expiry");
}

#[test]
fn watch_under_a_layout_watches_the_cluster_name() {
    let p = "gapwatch";
    let proxy = layout_proxy(p, "");
    let key = format!("{p}:chat:chat-1");
    let mut con = proxy.connect();
    let mut other = proxy.connect();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("1")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("WATCH").arg(&key).query(&mut con).unwrap();
    // Another client changes the key (stored under its cluster name).
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("2")
        .query(&mut other)
        .unwrap();
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    queued(&mut con, redis::cmd("GET").arg(&key));
    let exec: redis::Value = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(
        exec,
        redis::Value::Nil,
        "a change to a watched key fails EXEC"
    );

    // Unchanged: EXEC runs.
    let _: () = redis::cmd("WATCH").arg(&key).query(&mut con).unwrap();
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    queued(&mut con, redis::cmd("GET").arg(&key));
    let exec: Vec<String> = redis::cmd("EXEC").query(&mut con).unwrap();
    assert_eq!(exec, vec!["2"]);
}

/// Under `split` a WATCH of legacy keys whose cluster names are on different masters
/// watches each cluster name on its own master: a change to either fails EXEC with nothing
/// applied; unchanged, every slot applies.
#[test]
fn watch_across_slots_under_a_layout_watches_each_cluster_name() {
    let cluster = shared_cluster();
    let p = "gapwatchsplit";
    let proxy = layout_proxy(p, "cross_slot_transactions: split\n");
    // Message logs `p:msgs:<chat>` live at `p:{m:<chat>}:z` (LAYOUT.md).
    let owner = |chat: &str| cluster.node_for_slot(cluster.keyslot(&format!("{p}:{{m:{chat}}}:z")));
    let first = "chat-0";
    let second = (1..200)
        .map(|i| format!("chat-{i}"))
        .find(|chat| owner(chat) != owner(first))
        .expect("a chat whose log is on another master");
    let logs = [format!("{p}:msgs:{first}"), format!("{p}:msgs:{second}")];
    let mut con = proxy.connect();
    let mut other = proxy.connect();
    let run = |con: &mut redis::Connection| -> redis::Value {
        let _: () = redis::cmd("MULTI").query(con).unwrap();
        for log in &logs {
            queued(con, redis::cmd("ZADD").arg(log).arg(1).arg("mine"));
        }
        redis::cmd("EXEC").query(con).unwrap()
    };

    let _: () = redis::cmd("WATCH")
        .arg(&logs[0])
        .arg(&logs[1])
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg(&logs[1])
        .arg(2)
        .arg("theirs")
        .query(&mut other)
        .unwrap();
    assert_eq!(run(&mut con), redis::Value::Nil, "a change fails EXEC");
    let first_log = format!("{p}:{{m:{first}}}:z");
    assert!(!exists_on_cluster(cluster, &first_log), "nothing applied");

    let _: () = redis::cmd("WATCH")
        .arg(&logs[0])
        .arg(&logs[1])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        run(&mut con),
        redis::Value::Array(vec![redis::Value::Int(1), redis::Value::Int(1)])
    );
    assert!(exists_on_cluster(cluster, &first_log));
    let second_members: i64 = on_cluster(
        cluster,
        &format!("{p}:{{m:{second}}}:z"),
        redis::cmd("ZCARD").arg(format!("{p}:{{m:{second}}}:z")),
    );
    assert_eq!(second_members, 2);
}

/// The same transaction, through the proxy with a configured ACL user and on a real
/// redis-server with the same user, answers the same.
#[test]
fn queued_commands_pass_the_acl_like_redis() {
    let users = r#"
users:
  - name: bot
    password: botpw
    commands: ["+@all", "-del"]
    keys: ["~gapacl:*"]
"#;
    let dir = new_dir("gaps-acl");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, users).unwrap();
    let proxy = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        path.to_str().unwrap(),
    ]);
    let server = Standalone::start();
    let _: () = query(
        server.addr(),
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("bot")
            .arg("on")
            .arg(">botpw")
            .arg("+@all")
            .arg("-del")
            .arg("~gapacl:*"),
    )
    .unwrap();
    let lines = [
        "AUTH bot botpw",
        "MULTI",
        "SET gapacl:{t}1 x",
        "DEL gapacl:{t}1",
        "GET other:1",
        "EXEC",
        "GET gapacl:{t}1",
        "WATCH other:1",
    ];
    let expected = transcript(server.addr(), &lines);
    assert!(expected.contains("-NOPERM"), "redis refuses: {expected}");
    assert!(expected.contains("-EXECABORT"), "redis aborts: {expected}");
    assert_eq!(transcript(proxy.addr(), &lines), expected);
}

#[test]
fn policy_refusal_at_queue_time_aborts_the_transaction() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let out = transcript(
        proxy.addr(),
        &[
            "SET gappolicy:1 kept",
            "MULTI",
            "FLUSHALL",
            "EXEC",
            "GET gappolicy:1",
        ],
    );
    let lines: Vec<&str> = out.split("\r\n").collect();
    assert_eq!(lines[0], "+OK");
    assert_eq!(lines[1], "+OK");
    assert!(
        lines[2].starts_with('-'),
        "FLUSHALL is refused when queued: {out}"
    );
    assert_eq!(
        lines[3],
        "-EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(&lines[4..6], &["$4", "kept"], "nothing was flushed: {out}");
}
