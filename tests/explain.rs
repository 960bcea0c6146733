//! `SLOTBRIDGE EXPLAIN` against a real 3-master cluster through the proxy: the shape the
//! planner picks (forward, split, fan-out, answered by the proxy, script, blocking,
//! refused), each key's slot and the master that owns it as `CLUSTER SLOTS` read on a
//! node says, the sub-requests of a split, the policy's and the ACL's refusal texts (the
//! same a real run gets), the layout's rewrite and index upkeep, the RESP3 map, the
//! errors of SLOTBRIDGE itself, and `slotbridge explain` on the command line. Nothing
//! explained runs: the key a SET names stays absent, the master counts no call.

mod common;

use std::process::Command;

use common::{new_dir, query, shared_cluster, Proxy, Raw};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

const USERS: &str = r#"
users:
  - name: didi
    password: didipw
    commands: ["+@all", "-@dangerous"]
    keys: ["~didi:*"]
  - name: blind
    password: blindpw
    commands: ["+@all", "-cluster"]
    keys: ["allkeys"]
"#;

fn cluster_proxy() -> Proxy {
    Proxy::start(&["--cluster", &shared_cluster().seeds_arg()])
}

fn users_proxy() -> Proxy {
    let path = new_dir("explain-users").join("slotbridge.yaml");
    std::fs::write(&path, USERS).unwrap();
    let config = path.to_str().unwrap().to_string();
    Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        &config,
    ])
}

/// The explanation's lines (`field: value`) for `args`, on `con`.
fn explain(con: &mut redis::Connection, args: &[&str]) -> Vec<String> {
    redis::cmd("SLOTBRIDGE")
        .arg("EXPLAIN")
        .arg(args)
        .query(con)
        .unwrap_or_else(|e| panic!("SLOTBRIDGE EXPLAIN {args:?}: {e}"))
}

/// The values of `field` in `lines`, in order.
fn values(lines: &[String], field: &str) -> Vec<String> {
    let prefix = format!("{field}: ");
    lines
        .iter()
        .filter_map(|line| line.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

fn one(lines: &[String], field: &str) -> String {
    let found = values(lines, field);
    assert_eq!(found.len(), 1, "one {field} in {lines:#?}");
    found[0].clone()
}

/// The master owning `slot`, from `CLUSTER SLOTS` read on the first node directly.
fn slot_owner(slot: u16) -> String {
    let node = &shared_cluster().masters()[0];
    let ranges: Vec<redis::Value> = query(node, redis::cmd("CLUSTER").arg("SLOTS")).unwrap();
    for range in ranges {
        let redis::Value::Array(range) = range else {
            panic!("CLUSTER SLOTS: {range:?}");
        };
        let start: u16 = redis::from_redis_value(&range[0]).unwrap();
        let end: u16 = redis::from_redis_value(&range[1]).unwrap();
        if (start..=end).contains(&slot) {
            let redis::Value::Array(master) = &range[2] else {
                panic!("CLUSTER SLOTS master: {range:?}");
            };
            let host: String = redis::from_redis_value(&master[0]).unwrap();
            let port: u16 = redis::from_redis_value(&master[1]).unwrap();
            return format!("{host}:{port}");
        }
    }
    panic!("slot {slot} not covered")
}

fn slot_of(key: &str) -> u16 {
    shared_cluster().keyslot(key)
}

#[test]
fn get_forwards_to_the_master_cluster_slots_names() {
    let proxy = cluster_proxy();
    let mut con = proxy.connect();
    let lines = explain(&mut con, &["GET", "explain:get"]);
    let slot = slot_of("explain:get");
    let owner = slot_owner(slot);
    assert_eq!(one(&lines, "command"), "get");
    assert_eq!(one(&lines, "shape"), "forward");
    assert_eq!(
        one(&lines, "route"),
        format!("as is to the master of slot {slot} ({owner})")
    );
    assert_eq!(
        one(&lines, "key"),
        format!("explain:get slot {slot} master {owner}")
    );
    assert_eq!(one(&lines, "layout"), "none");
    assert_eq!(one(&lines, "policy"), "allowed");
    assert_eq!(one(&lines, "acl"), "allowed");
    assert!(values(&lines, "reply").is_empty(), "{lines:#?}");
    // The documented field order.
    let fields: Vec<&str> = lines
        .iter()
        .map(|l| l.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["command", "shape", "route", "key", "layout", "policy", "acl"]
    );
}

#[test]
fn explained_writes_do_not_run() {
    let proxy = cluster_proxy();
    let mut con = proxy.connect();
    let key = "explain:never-set";
    let owner = slot_owner(slot_of(key));
    let calls = || -> String {
        let info: String = query(&owner, redis::cmd("INFO").arg("commandstats")).unwrap();
        let line = info.lines().find(|l| l.starts_with("cmdstat_setrange:"));
        line.map(|l| l.split(',').next().unwrap().to_string())
            .unwrap_or_default()
    };
    let before = calls();
    let set = explain(&mut con, &["SET", key, "v"]);
    assert_eq!(one(&set, "shape"), "forward");
    let setrange = explain(&mut con, &["SETRANGE", key, "0", "v"]);
    assert_eq!(one(&setrange, "shape"), "forward");
    let exists: i64 = query(&owner, redis::cmd("EXISTS").arg(key)).unwrap();
    assert_eq!(exists, 0, "an explained SET wrote the key");
    assert_eq!(calls(), before, "SETRANGE reached the master");
    // CLIENT SETNAME explained names nothing.
    let lines = explain(&mut con, &["CLIENT", "SETNAME", "explained"]);
    assert_eq!(one(&lines, "shape"), "proxy");
    let name: Option<String> = redis::cmd("CLIENT").arg("GETNAME").query(&mut con).unwrap();
    assert_eq!(name, None);
}

#[test]
fn mset_over_several_slots_is_split_per_slot() {
    let proxy = cluster_proxy();
    let mut con = proxy.connect();
    let args = ["MSET", "{a}1", "v1", "{b}1", "v2", "{a}2", "v3"];
    let lines = explain(&mut con, &args);
    let (a, b) = (slot_of("{a}1"), slot_of("{b}1"));
    assert_ne!(a, b);
    assert_eq!(one(&lines, "shape"), "split");
    assert_eq!(
        one(&lines, "route"),
        "one sub-request per slot, replies merged"
    );
    assert_eq!(
        values(&lines, "part"),
        [
            format!(
                "slot {a} master {}: MSET {{a}}1 v1 {{a}}2 v3",
                slot_owner(a)
            ),
            format!("slot {b} master {}: MSET {{b}}1 v2", slot_owner(b)),
        ]
    );
    assert_eq!(values(&lines, "key").len(), 3);
    let exists: i64 = redis::cmd("EXISTS").arg("{a}1").query(&mut con).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn shapes_of_fanout_proxy_script_and_blocking_commands() {
    let proxy = cluster_proxy();
    let mut con = proxy.connect();
    let mut masters = shared_cluster().masters();
    masters.sort();
    for args in [&["KEYS", "*"][..], &["DBSIZE"]] {
        let lines = explain(&mut con, args);
        assert_eq!(one(&lines, "shape"), "fanout", "{args:?}");
        let route = one(&lines, "route");
        let listed = route.strip_prefix("every master: ").expect(&route);
        let mut listed: Vec<String> = listed
            .split(" (")
            .next()
            .unwrap()
            .split(", ")
            .map(str::to_string)
            .collect();
        listed.sort();
        assert_eq!(listed, masters, "{args:?}");
    }
    for args in [&["PING"][..], &["CLIENT", "SETNAME", "x"], &["HELLO", "3"]] {
        let lines = explain(&mut con, args);
        assert_eq!(one(&lines, "shape"), "proxy", "{args:?}");
        assert_eq!(
            one(&lines, "route"),
            "answered by the proxy; no node sees it"
        );
    }
    let lines = explain(&mut con, &["MULTI"]);
    assert_eq!(one(&lines, "shape"), "transaction");
    let slot = slot_of("explain:script");
    let lines = explain(&mut con, &["EVAL", "return 1", "1", "explain:script"]);
    assert_eq!(one(&lines, "shape"), "script");
    let route = one(&lines, "route");
    assert!(
        route.ends_with(&format!(
            "on a connection of its own to the master of slot {slot} ({})",
            slot_owner(slot)
        )),
        "{route}"
    );
    let slot = slot_of("explain:list");
    let lines = explain(&mut con, &["BLPOP", "explain:list", "0"]);
    assert_eq!(one(&lines, "shape"), "blocking");
    assert_eq!(
        one(&lines, "route"),
        format!(
            "a dedicated connection to the master of slot {slot} ({})",
            slot_owner(slot)
        )
    );
    let lines = explain(&mut con, &["SUBSCRIBE", "news"]);
    assert_eq!(one(&lines, "shape"), "pubsub");
}

#[test]
fn refusals_carry_the_text_a_real_run_gets() {
    let proxy = cluster_proxy();
    let mut con = proxy.connect();
    let lines = explain(&mut con, &["FLUSHALL"]);
    let ran = redis::cmd("FLUSHALL").query::<()>(&mut con).unwrap_err();
    let policy = one(&lines, "policy");
    assert_eq!(
        policy,
        "ERR proxy: 'flushall' is disabled by the proxy's command policy (allow it with commands.allow: [flushall])"
    );
    assert!(ran.to_string().contains(&policy["ERR ".len()..]), "{ran}");
    let lines = explain(&mut con, &["NOSUCHCMD", "a"]);
    assert_eq!(one(&lines, "command"), "unknown (NOSUCHCMD)");
    assert_eq!(one(&lines, "shape"), "refused");
    assert_eq!(
        one(&lines, "reply"),
        "ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' "
    );
    let lines = explain(&mut con, &["GET"]);
    assert_eq!(
        one(&lines, "reply"),
        "ERR wrong number of arguments for 'get' command"
    );
    let lines = explain(&mut con, &["MGET", "{a}x", "{b}x"]);
    assert_eq!(one(&lines, "shape"), "split");
    let lines = explain(&mut con, &["MSETNX", "{a}x", "1", "{b}x", "2"]);
    assert_eq!(one(&lines, "shape"), "refused");
    assert!(one(&lines, "reply").starts_with("CROSSSLOT "), "{lines:#?}");
    let lines = explain(&mut con, &["RENAME", "{a}x", "{b}x"]);
    assert_eq!(one(&lines, "shape"), "crossslot");
    assert!(
        one(&lines, "route").starts_with("copied to the destination's master"),
        "{lines:#?}"
    );
}

#[test]
fn a_restricted_users_refusals_and_who_may_explain() {
    let proxy = users_proxy();
    let mut didi = proxy.connect();
    redis::cmd("AUTH")
        .arg("didi")
        .arg("didipw")
        .query::<()>(&mut didi)
        .unwrap();
    let lines = explain(&mut didi, &["GET", "other:key"]);
    let ran = redis::cmd("GET")
        .arg("other:key")
        .query::<Option<String>>(&mut didi)
        .unwrap_err();
    let acl = one(&lines, "acl");
    assert_eq!(
        acl,
        "NOPERM this user has no permissions to access one of the keys used as arguments"
    );
    assert!(
        ran.to_string()
            .contains("no permissions to access one of the keys"),
        "{ran}"
    );
    assert_eq!(
        one(&explain(&mut didi, &["GET", "didi:key"]), "acl"),
        "allowed"
    );
    let lines = explain(&mut didi, &["DEBUG", "SLEEP", "0"]);
    assert_eq!(
        one(&lines, "acl"),
        "NOPERM this user has no permissions to run the 'debug' command"
    );
    // A user who may not run CLUSTER may not see the topology through EXPLAIN.
    let mut blind = proxy.connect();
    redis::cmd("AUTH")
        .arg("blind")
        .arg("blindpw")
        .query::<()>(&mut blind)
        .unwrap();
    let err = redis::cmd("SLOTBRIDGE")
        .arg("EXPLAIN")
        .arg("GET")
        .arg("k")
        .query::<Vec<String>>(&mut blind)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "NOPERM: this user has no permissions to run the 'slotbridge|explain' command"
    );
}

#[test]
fn slotbridge_errors_are_worded_as_redis_words_its_own() {
    let proxy = cluster_proxy();
    let mut raw = Raw::connect(proxy.addr());
    assert_eq!(
        raw.call(&["SLOTBRIDGE"]),
        "-ERR wrong number of arguments for 'slotbridge' command\r\n"
    );
    assert_eq!(
        raw.call(&["SLOTBRIDGE", "EXPLAIN"]),
        "-ERR wrong number of arguments for 'slotbridge|explain' command\r\n"
    );
    assert_eq!(
        raw.call(&["slotbridge", "nope"]),
        "-ERR unknown subcommand 'nope'. Try SLOTBRIDGE HELP.\r\n"
    );
    assert!(raw
        .call(&["SLOTBRIDGE", "HELP"])
        .starts_with("*5\r\n+SLOTBRIDGE <subcommand>"));
    assert_eq!(raw.call(&["MULTI"]), "+OK\r\n");
    let queued = raw.call(&["SLOTBRIDGE", "EXPLAIN", "GET", "k"]);
    assert_eq!(raw.call(&["DISCARD"]), "+OK\r\n");
    // Not a command a transaction can queue (README says so).
    assert_eq!(
        queued,
        "-ERR unknown command 'SLOTBRIDGE', with args beginning with: 'EXPLAIN' 'GET' 'k' \r\n"
    );
    // The policy can turn it off.
    let denied = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "commands.deny=[slotbridge]",
    ]);
    assert_eq!(
        Raw::connect(denied.addr()).call(&["SLOTBRIDGE", "EXPLAIN", "GET", "k"]),
        "-ERR proxy: 'slotbridge|explain' is disabled by the proxy's command policy (allow it with commands.allow: [slotbridge|explain])\r\n"
    );
}

#[test]
fn resp3_gets_a_map_of_fields_to_their_values() {
    let proxy = cluster_proxy();
    let mut raw = Raw::connect(proxy.addr());
    assert!(raw.call(&["HELLO", "3"]).starts_with('%'));
    let slot = slot_of("k3");
    let reply = raw.call(&["SLOTBRIDGE", "EXPLAIN", "GET", "k3"]);
    let owner = slot_owner(slot);
    let route = format!("as is to the master of slot {slot} ({owner})");
    let key = format!("k3 slot {slot} master {owner}");
    let expected = [
        "%7\r\n".to_string(),
        "$7\r\ncommand\r\n*1\r\n$3\r\nget\r\n".into(),
        "$5\r\nshape\r\n*1\r\n$7\r\nforward\r\n".into(),
        format!("$5\r\nroute\r\n*1\r\n${}\r\n{route}\r\n", route.len()),
        format!("$3\r\nkey\r\n*1\r\n${}\r\n{key}\r\n", key.len()),
        "$6\r\nlayout\r\n*1\r\n$4\r\nnone\r\n".into(),
        "$6\r\npolicy\r\n*1\r\n$7\r\nallowed\r\n".into(),
        "$3\r\nacl\r\n*1\r\n$7\r\nallowed\r\n".into(),
    ]
    .concat();
    assert_eq!(reply, expected);
}

#[test]
fn the_layout_shows_rule_family_cluster_name_and_upkeep() {
    let cluster = shared_cluster();
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "xbot");
    let mut con = proxy.connect();
    let lines = explain(&mut con, &["SET", "xbot:chat:chat-1", "v"]);
    let cluster_key = "xbot:{ch:25}:r:chat-1";
    let slot = slot_of(cluster_key);
    assert_eq!(
        one(&lines, "key"),
        format!(
            "xbot:chat:chat-1 -> {cluster_key} (rule 3 <p>:chat:<id...> family chat) slot {slot} master {}",
            slot_owner(slot)
        )
    );
    assert_eq!(
        one(&lines, "upkeep"),
        format!("xbot:{{ch:25}}:idx member chat-1 (slot {slot})")
    );
    assert_eq!(
        one(&lines, "layout"),
        format!(
            "{PROFILE} (index upkeep: in the index upkeep script, atomically with the command)"
        )
    );
    assert_eq!(
        one(&lines, "route"),
        format!(
            "with its index upkeep to the master of slot {slot} ({})",
            slot_owner(slot)
        )
    );
    let exists: i64 = query(&slot_owner(slot), redis::cmd("EXISTS").arg(cluster_key)).unwrap();
    assert_eq!(exists, 0);
    // A read keeps no index; a key outside the prefix passes through.
    let lines = explain(&mut con, &["GET", "xbot:chat:chat-1"]);
    assert!(values(&lines, "upkeep").is_empty(), "{lines:#?}");
    assert_eq!(
        one(&lines, "route"),
        format!("as is to the master of slot {slot} ({})", slot_owner(slot))
    );
    let lines = explain(&mut con, &["GET", "plain:key"]);
    let slot = slot_of("plain:key");
    assert_eq!(
        one(&lines, "key"),
        format!(
            "plain:key outside every prefix slot {slot} master {}",
            slot_owner(slot)
        )
    );
    let lines = explain(&mut con, &["KEYS", "xbot:chat:*"]);
    assert_eq!(one(&lines, "shape"), "fanout");
    assert!(
        one(&lines, "route")
            .ends_with("; under the layout: index reads and SCAN by pattern, legacy names back"),
        "{lines:#?}"
    );
    let lines = explain(&mut con, &["GET", "xbot:nothing:here"]);
    assert!(
        one(&lines, "key").starts_with("xbot:nothing:here unmatched under prefix xbot slot "),
        "{lines:#?}"
    );
}

#[test]
fn the_command_line_prints_the_in_band_lines() {
    let proxy = users_proxy();
    let mut con = proxy.connect();
    redis::cmd("AUTH")
        .arg("didi")
        .arg("didipw")
        .query::<()>(&mut con)
        .unwrap();
    let args = ["MSET", "{a}1", "v1", "{b}1", "v2"];
    let expected = explain(&mut con, &args);
    let output = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["explain", "--addr", proxy.addr(), "--user", "didi"])
        .args(args)
        .env("REDIS_PASSWORD", "didipw")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(printed, expected);
    assert_eq!(
        one(&printed, "acl"),
        "NOPERM this user has no permissions to access one of the keys used as arguments"
    );
    // Without the password the proxy refuses, and the tool says so.
    let output = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["explain", "--addr", proxy.addr(), "GET", "k"])
        .env_remove("REDIS_PASSWORD")
        .env_remove("REDIS_USERNAME")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("NOAUTH"),
        "{output:?}"
    );
}
