//! The command policy through the proxy: dangerous commands refused by default with an error
//! that says how to allow them, an allow-list that lets one through, a deny-list (also
//! of a plain single-key command), and `REPLICAOF NO ONE`, a no-op the proxy answers.

mod common;

use common::{new_dir, shared_cluster, Proxy, Raw, Standalone};

/// A proxy in front of its own standalone server: the allowed FLUSHDB must not wipe the
/// cluster other tests of this binary share.
fn proxy_with(config: &str) -> (Proxy, Standalone) {
    let dir = new_dir("policy-config");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, config).unwrap();
    let server = Standalone::start();
    let proxy = Proxy::start(&[
        "--standalone",
        server.addr(),
        "--config",
        path.to_str().unwrap(),
    ]);
    (proxy, server)
}

fn refusal(name: &str) -> String {
    format!(
        "-ERR proxy: '{name}' is disabled by the proxy's command policy (allow it with commands.allow: [{name}])\r\n"
    )
}

#[test]
fn dangerous_commands_are_refused_by_default() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["SET", "policy:kept", "1"]), "+OK\r\n");
    let refused: [(&[&str], &str); 9] = [
        (&["FLUSHALL"], "flushall"),
        (&["flushdb", "ASYNC"], "flushdb"),
        (&["CONFIG", "SET", "maxmemory", "1"], "config|set"),
        (&["DEBUG", "SLEEP", "0"], "debug"),
        (&["PFSELFTEST"], "pfselftest"),
        (&["SHUTDOWN", "NOSAVE"], "shutdown"),
        (&["ACL", "SETUSER", "x"], "acl|setuser"),
        (&["REPLICAOF", "127.0.0.1", "6379"], "replicaof"),
        (&["SCRIPT", "KILL"], "script|kill"),
    ];
    for (command, name) in refused {
        assert_eq!(con.call(command), refusal(name), "{command:?}");
    }
    // Nothing was flushed, and harmless relatives still pass.
    assert_eq!(con.call(&["GET", "policy:kept"]), "$1\r\n1\r\n");
    let config = con.call(&["CONFIG", "GET", "maxmemory"]);
    assert!(config.starts_with("*2\r\n$9\r\nmaxmemory\r\n"), "{config}");
    // CLUSTER writes keep the emulation's explanation.
    let cluster = con.call(&["CLUSTER", "FORGET", "abc"]);
    assert!(
        cluster.starts_with("-ERR proxy: CLUSTER FORGET is not available"),
        "{cluster}"
    );
}

/// How many REPLICAOF and SLAVEOF calls `master` counted.
fn replicaof_calls(master: &str) -> u64 {
    let stats: String = common::query(master, redis::cmd("INFO").arg("commandstats")).unwrap();
    stats
        .lines()
        .filter(|line| {
            line.starts_with("cmdstat_replicaof:") || line.starts_with("cmdstat_slaveof:")
        })
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The proxy shows itself as a master (INFO's `role:master`), where `REPLICAOF NO ONE` is
/// a no-op: `+OK` from the proxy under the default policy and the like-one-redis profile,
/// no master reached; a master's address stays refused, and the arity error is Redis's.
#[test]
fn replicaof_no_one_is_a_no_op_answered_by_the_proxy() {
    let cluster = shared_cluster();
    let standalone = Standalone::start();
    let mut reference = Raw::connect(standalone.addr());
    let before: Vec<u64> = cluster
        .masters()
        .iter()
        .map(|m| replicaof_calls(m))
        .collect();
    for profile in [None, Some("config/examples/like-one-redis.yaml")] {
        let mut args = vec!["--cluster".to_string(), cluster.seeds_arg()];
        if let Some(profile) = profile {
            args.extend(["--config".to_string(), profile.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let proxy = Proxy::start(&args);
        let mut con = Raw::connect(proxy.addr());
        let info = con.call(&["INFO", "replication"]);
        assert!(info.contains("role:master"), "{info}");
        for command in [
            &["REPLICAOF", "NO", "ONE"][..],
            &["replicaof", "no", "one"],
            &["SLAVEOF", "No", "One"],
            &["REPLICAOF", "NO ONE"],
            &["REPLICAOF", "NO", "ONE", "x"],
        ] {
            assert_eq!(
                con.call(command),
                reference.call(command),
                "{profile:?} {command:?}"
            );
        }
        assert_eq!(
            con.call(&["REPLICAOF", "127.0.0.1", "6379"]),
            refusal("replicaof"),
            "{profile:?}"
        );
        assert_eq!(con.call(&["SLAVEOF", "NO", "TWO"]), refusal("slaveof"));
    }
    let after: Vec<u64> = cluster
        .masters()
        .iter()
        .map(|m| replicaof_calls(m))
        .collect();
    assert_eq!(after, before, "REPLICAOF reached a master");
}

#[test]
fn allow_and_deny_lists_change_the_policy() {
    let (proxy, _server) = proxy_with("commands:\n  allow: [flushdb]\n  deny: [keys, append]\n");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["FLUSHDB"]), "+OK\r\n");
    assert_eq!(con.call(&["FLUSHALL"]), refusal("flushall"));
    assert_eq!(con.call(&["KEYS", "*"]), refusal("keys"));
    // A plain single-key command the proxy would otherwise batch straight to its master.
    assert_eq!(
        con.call(&["APPEND", "policy:denied", "x"]),
        refusal("append")
    );
    assert_eq!(con.call(&["EXISTS", "policy:denied"]), ":0\r\n");
}

#[test]
fn contradicting_lists_stop_the_proxy_at_start() {
    let dir = new_dir("policy-bad");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(
        &path,
        "cluster: [127.0.0.1:7001]\ncommands:\n  allow: [keys]\n  deny: [keys]\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .args(["check-config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'keys' is both allowed and denied"),
        "{stderr}"
    );
}

/// Commands that would turn a shared backend connection into something else (the script
/// debugger, a replication stream) are refused even when the policy allows them, and
/// every client's next commands on that node still get their own replies. (MONITOR shows
/// the proxy's own traffic and never reaches a node: see `tests/monitor.rs`.)
#[test]
fn commands_that_would_take_over_a_shared_connection_are_always_refused() {
    let (proxy, _server) = proxy_with("commands:\n  allow: [sync, psync]\n");
    let mut con = Raw::connect(proxy.addr());
    let mut other = Raw::connect(proxy.addr());
    for (command, name) in [
        (&["SCRIPT", "DEBUG", "YES"][..], "script|debug"),
        (&["SCRIPT", "DEBUG", "SYNC"], "script|debug"),
        (&["SYNC"], "sync"),
        (&["PSYNC", "?", "-1"], "psync"),
        (&["REPLCONF", "listening-port", "1"], "replconf"),
    ] {
        assert_eq!(
            con.call(command),
            format!("-ERR proxy: '{name}' is not supported: it would change the backend connection it runs on, which other clients share\r\n"),
            "{command:?}"
        );
        // A script runs as usual for this client and for another one.
        assert_eq!(
            con.call(&["EVAL", "return 1", "0"]),
            ":1\r\n",
            "{command:?}"
        );
        assert_eq!(
            other.call(&["EVAL", "return 2", "0"]),
            ":2\r\n",
            "{command:?}"
        );
        assert_eq!(other.call(&["SET", "policy:after", "1"]), "+OK\r\n");
    }
    // Inside MULTI it is refused when queued, and the transaction aborts.
    assert_eq!(con.call(&["MULTI"]), "+OK\r\n");
    assert!(con
        .call(&["SCRIPT", "DEBUG", "YES"])
        .starts_with("-ERR proxy: 'script|debug' is not supported inside MULTI"));
    assert!(con.call(&["EXEC"]).starts_with("-EXECABORT"));
}
