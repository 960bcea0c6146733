//! A client's script that runs forever, through the proxy on a real cluster, compared with
//! one Redis: the other clients of its master get the node's `-BUSY` within a bounded time
//! (never a hang), the clients of the other masters see nothing, SCRIPT KILL and FUNCTION
//! KILL end it, and a transaction queued while the master is busy ends with Redis's own
//! replies (EXECABORT). Every wait is bounded (the raw client's read timeout and explicit
//! elapsed-time checks), so a regression fails instead of hanging.

mod common;

use std::time::{Duration, Instant};

use common::{query, Cluster, Proxy, Raw, Standalone};

/// How long a script runs before a node answers `-BUSY` on its other connections.
const THRESHOLD_MS: &str = "100";
/// Waited after starting a script, so it runs past [`THRESHOLD_MS`].
const PAST_THRESHOLD: Duration = Duration::from_millis(300);
/// The longest an answer may take while a master is busy.
const BOUND: Duration = Duration::from_secs(2);

const SPIN: &str = "while true do end";
const EVAL_BUSY: &str =
    "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
const FCALL_BUSY: &str =
    "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n";
const NOTBUSY: &str = "-NOTBUSY No scripts in execution right now.\r\n";
const SPIN_LIBRARY: &str =
    "#!lua name=spinlib\nredis.register_function('spin', function(keys) while true do end end)";

/// Sets the busy threshold low on `node`, directly (not through the proxy).
fn lower_busy_threshold(node: &str) {
    query::<()>(
        node,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("busy-reply-threshold")
            .arg(THRESHOLD_MS),
    )
    .unwrap();
}

/// A cluster of 3 masters with a low busy threshold, and a proxy that allows the KILLs.
fn busy_cluster() -> (Cluster, Proxy) {
    let cluster = Cluster::start(3, 0);
    for master in cluster.masters() {
        lower_busy_threshold(&master);
    }
    let proxy = Proxy::start(&[
        "--cluster",
        &cluster.seeds_arg(),
        "--set",
        "commands.allow=[script|kill, function|kill]",
    ]);
    (cluster, proxy)
}

/// A key of `master`, named `prefix:N`.
fn key_on(cluster: &Cluster, master: &str, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|key| cluster.node_for_slot(cluster.keyslot(key)) == master)
        .expect("a key on every master")
}

/// Sends `command` on `client` and returns its reply and how long it took.
fn timed(client: &mut Raw, command: &[&str]) -> (String, Duration) {
    let started = Instant::now();
    let reply = client.call(command);
    (reply, started.elapsed())
}

/// A new client that starts `command` (a script that never ends) and does not wait.
fn spinner(addr: &str, command: &[&str]) -> Raw {
    let mut spinner = Raw::connect(addr);
    spinner.send(command);
    std::thread::sleep(PAST_THRESHOLD);
    spinner
}

/// Asserts that `killer`'s `KILL` (SCRIPT or FUNCTION) answers OK within [`BOUND`] and that
/// the spinning client then gets the node's "killed" error.
fn kill(killer: &mut Raw, which: &str, spinner: &mut Raw) {
    let (reply, took) = timed(killer, &[which, "KILL"]);
    assert_eq!(reply, "+OK\r\n", "{which} KILL");
    assert!(took < BOUND, "{which} KILL took {took:?}");
    let killed = spinner.read_reply();
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
}

#[test]
fn a_busy_script_stalls_no_client_and_only_its_master_answers_busy() {
    let (cluster, proxy) = busy_cluster();
    let masters = cluster.masters();
    let busy_key = key_on(&cluster, &masters[0], "busy");
    let other_key = key_on(&cluster, &masters[1], "calm");
    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["SET", &busy_key, "before"]), "+OK\r\n");
    let mut operator = Raw::connect(proxy.addr());
    assert_eq!(operator.call(&["SCRIPT", "KILL"]), NOTBUSY);

    let mut spinning = spinner(proxy.addr(), &["EVAL", SPIN, "1", &busy_key]);
    // The same master: the node's own refusal, soon, for every client and command.
    for command in [
        &["GET", busy_key.as_str()][..],
        &["SET", &busy_key, "during"],
        &["EVAL", "return 1", "1", &busy_key],
    ] {
        let (reply, took) = timed(&mut client, command);
        assert_eq!(reply, EVAL_BUSY, "{command:?}");
        assert!(took < BOUND, "{command:?} took {took:?}");
    }
    // Another master: answered as usual, at once.
    let mut elsewhere = Raw::connect(proxy.addr());
    for (command, expected) in [
        (&["SET", other_key.as_str(), "v"][..], "+OK\r\n"),
        (&["GET", &other_key], "$1\r\nv\r\n"),
        (&["EVAL", "return 7", "1", &other_key], ":7\r\n"),
    ] {
        let (reply, took) = timed(&mut elsewhere, command);
        assert_eq!(reply, expected, "{command:?}");
        assert!(
            took < Duration::from_millis(500),
            "{command:?} took {took:?}"
        );
    }

    kill(&mut operator, "SCRIPT", &mut spinning);
    assert_eq!(client.call(&["GET", &busy_key]), "$6\r\nbefore\r\n");
    assert_eq!(spinning.call(&["SET", &busy_key, "after"]), "+OK\r\n");
    assert_eq!(elsewhere.call(&["GET", &busy_key]), "$5\r\nafter\r\n");
    assert_eq!(operator.call(&["SCRIPT", "KILL"]), NOTBUSY);
}

/// Scripts run on connections of a small pool per master, reused from call to call,
/// rather than a new connection each; a client's order holds around them.
#[test]
fn script_connections_are_reused_and_a_client_keeps_its_order() {
    let (cluster, proxy) = busy_cluster();
    let master = &cluster.masters()[0];
    let key = key_on(&cluster, master, "order");
    let connected = || -> usize {
        let list: String = query(master, redis::cmd("CLIENT").arg("LIST")).unwrap();
        list.lines().count()
    };
    let mut client = Raw::connect(proxy.addr());
    assert_eq!(client.call(&["SET", &key, "0"]), "+OK\r\n");
    let plain = connected();
    // Plain commands keep to the shared connection: no connection of their own.
    for _ in 0..100 {
        assert_eq!(client.call(&["SET", &key, "1"]), "+OK\r\n");
        assert_eq!(client.call(&["GET", &key]), "$1\r\n1\r\n");
    }
    assert_eq!(connected(), plain, "GET and SET opened connections");
    assert_eq!(client.call(&["EVAL", "return 1", "1", &key]), ":1\r\n");
    let before = connected();
    for _ in 0..20 {
        assert_eq!(client.call(&["EVAL", "return 1", "1", &key]), ":1\r\n");
    }
    assert_eq!(
        connected(),
        before,
        "20 scripts in a row used one connection"
    );

    // A pipeline mixing plain commands and scripts on one key answers in order, as one
    // Redis does: each script sees the writes before it, and the reads after it see its.
    // Without spaces: `resp_lines` splits on them.
    let incr = "return(redis.call('INCR',KEYS[1]))";
    let lines = [
        format!("SET {key} 10"),
        format!("EVAL {incr} 1 {key}"),
        format!("INCR {key}"),
        format!("EVAL {incr} 1 {key}"),
        format!("GET {key}"),
    ];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let replies = client.pipeline(&common::resp_lines(&lines), lines.len());
    let replies: Vec<String> = replies
        .iter()
        .map(|reply| String::from_utf8_lossy(reply).into_owned())
        .collect();
    assert_eq!(
        replies,
        ["+OK\r\n", ":11\r\n", ":12\r\n", ":13\r\n", "$2\r\n13\r\n"]
    );
}

#[test]
fn function_kill_ends_a_busy_fcall() {
    let (cluster, proxy) = busy_cluster();
    let masters = cluster.masters();
    let busy_key = key_on(&cluster, &masters[2], "fbusy");
    let other_key = key_on(&cluster, &masters[0], "fcalm");
    let mut operator = Raw::connect(proxy.addr());
    assert_eq!(
        operator.call(&["FUNCTION", "LOAD", SPIN_LIBRARY]),
        "$7\r\nspinlib\r\n"
    );
    assert_eq!(operator.call(&["FUNCTION", "KILL"]), NOTBUSY);

    let mut spinning = spinner(proxy.addr(), &["FCALL", "spin", "1", &busy_key]);
    let mut client = Raw::connect(proxy.addr());
    let (reply, took) = timed(&mut client, &["GET", &busy_key]);
    assert_eq!(reply, FCALL_BUSY);
    assert!(took < BOUND, "GET took {took:?}");
    let (reply, took) = timed(&mut client, &["GET", &other_key]);
    assert_eq!(reply, "$-1\r\n");
    assert!(
        took < Duration::from_millis(500),
        "GET elsewhere took {took:?}"
    );
    // SCRIPT KILL does not kill a function: the busy master says so, as Redis does.
    assert_eq!(operator.call(&["SCRIPT", "KILL"]), FCALL_BUSY);

    kill(&mut operator, "FUNCTION", &mut spinning);
    assert_eq!(client.call(&["GET", &busy_key]), "$-1\r\n");
    assert_eq!(operator.call(&["FUNCTION", "KILL"]), NOTBUSY);
}

/// One transaction scenario against `addr` (the proxy or one Redis), with the spinning
/// script on the slot of `{tx}`: every reply the transaction's client and the spinner got,
/// in order.
type Scenario = fn(&str) -> Vec<String>;

/// MULTI, INCR (refused: busy), SCRIPT KILL from another client, INCR, EXEC.
fn refused_then_killed(addr: &str) -> Vec<String> {
    let mut spinning = spinner(addr, &["EVAL", SPIN, "1", "{tx}spin"]);
    let mut client = Raw::connect(addr);
    let mut replies = vec![client.call(&["MULTI"]), timed_busy(&mut client)];
    replies.push(Raw::connect(addr).call(&["SCRIPT", "KILL"]));
    replies.push(spinning.read_reply());
    replies.push(client.call(&["INCR", "{tx}xx"]));
    replies.push(client.call(&["EXEC"]));
    replies.push(client.call(&["GET", "{tx}xx"]));
    replies
}

/// The whole MULTI body and EXEC while the script runs, pipelined; then the kill.
fn body_and_exec_while_busy(addr: &str) -> Vec<String> {
    let mut spinning = spinner(addr, &["EVAL", SPIN, "1", "{tx}spin"]);
    let mut client = Raw::connect(addr);
    let lines = [
        "MULTI",
        "INCR {tx}xx",
        "SET {tx}yy 1",
        "INCR {tx}xx",
        "EXEC",
    ];
    let started = Instant::now();
    let mut replies: Vec<String> = client
        .pipeline(&common::resp_lines(&lines), lines.len())
        .iter()
        .map(|reply| String::from_utf8_lossy(reply).into_owned())
        .collect();
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    replies.push(Raw::connect(addr).call(&["SCRIPT", "KILL"]));
    replies.push(spinning.read_reply());
    replies.push(client.call(&["MGET", "{tx}xx", "{tx}yy"]));
    replies
}

/// MULTI and its body before the script starts, EXEC while it runs.
fn exec_while_busy(addr: &str) -> Vec<String> {
    let mut client = Raw::connect(addr);
    let mut replies = vec![client.call(&["MULTI"]), client.call(&["INCR", "{tx}xx"])];
    let mut spinning = spinner(addr, &["EVAL", SPIN, "1", "{tx}spin"]);
    let (exec, took) = timed(&mut client, &["EXEC"]);
    assert!(took < BOUND, "EXEC took {took:?}");
    replies.push(exec);
    replies.push(Raw::connect(addr).call(&["SCRIPT", "KILL"]));
    replies.push(spinning.read_reply());
    replies.push(client.call(&["GET", "{tx}xx"]));
    replies
}

/// The script's client goes away while the script runs on (the node does not stop it):
/// MULTI, INCR (refused), SCRIPT KILL from another client, INCR, EXEC.
fn spinner_gone(addr: &str) -> Vec<String> {
    drop(spinner(addr, &["EVAL", SPIN, "1", "{tx}spin"]));
    std::thread::sleep(Duration::from_millis(100));
    let mut client = Raw::connect(addr);
    let mut replies = vec![client.call(&["MULTI"]), timed_busy(&mut client)];
    replies.push(Raw::connect(addr).call(&["SCRIPT", "KILL"]));
    // The script stops at its next instruction check, shortly after KILL's `+OK`; no
    // client of its own reads the error that would say so.
    std::thread::sleep(Duration::from_millis(100));
    replies.push(client.call(&["INCR", "{tx}xx"]));
    replies.push(client.call(&["EXEC"]));
    replies.push(client.call(&["GET", "{tx}xx"]));
    replies
}

/// INCR of `{tx}xx` while the master is busy: its reply, checked to come within [`BOUND`].
fn timed_busy(client: &mut Raw) -> String {
    let (reply, took) = timed(client, &["INCR", "{tx}xx"]);
    assert!(took < BOUND, "INCR took {took:?}");
    reply
}

#[test]
fn a_transaction_against_a_busy_master_ends_as_on_one_redis() {
    common::require_tool("redis-server");
    let redis = Standalone::start();
    lower_busy_threshold(redis.addr());
    let (_cluster, proxy) = busy_cluster();
    let execabort_busy = format!(
        "-EXECABORT Transaction discarded because of: {}",
        &EVAL_BUSY[1..]
    );
    let cases: [(&str, Scenario, Vec<&str>); 4] = [
        (
            "refused, then killed",
            refused_then_killed,
            vec![
                "+OK\r\n",
                EVAL_BUSY,
                "+OK\r\n",
                "",
                "+QUEUED\r\n",
                "-EXECABORT Transaction discarded because of previous errors.\r\n",
                "$-1\r\n",
            ],
        ),
        (
            "the script's client gone",
            spinner_gone,
            vec![
                "+OK\r\n",
                EVAL_BUSY,
                "+OK\r\n",
                "+QUEUED\r\n",
                "-EXECABORT Transaction discarded because of previous errors.\r\n",
                "$-1\r\n",
            ],
        ),
        (
            "body and EXEC while busy",
            body_and_exec_while_busy,
            vec![
                "+OK\r\n",
                EVAL_BUSY,
                EVAL_BUSY,
                EVAL_BUSY,
                &execabort_busy,
                "+OK\r\n",
                "",
                "*2\r\n$-1\r\n$-1\r\n",
            ],
        ),
        (
            "EXEC while busy",
            exec_while_busy,
            vec![
                "+OK\r\n",
                "+QUEUED\r\n",
                &execabort_busy,
                "+OK\r\n",
                "",
                "$-1\r\n",
            ],
        ),
    ];
    for (name, scenario, expected) in cases {
        let on_redis = scenario(redis.addr());
        let through_proxy = scenario(proxy.addr());
        assert_eq!(
            through_proxy, on_redis,
            "{name}: the proxy differs from Redis"
        );
        assert_eq!(on_redis.len(), expected.len(), "{name}: {on_redis:?}");
        for (reply, expected) in on_redis.iter().zip(&expected) {
            // The killed script's error names its SHA: checked by its start only.
            if expected.is_empty() {
                assert!(
                    reply.starts_with("-ERR Script killed by user"),
                    "{name}: {reply}"
                );
            } else {
                assert_eq!(reply, expected, "{name}");
            }
        }
    }
}
