//! A proxy user's rules hold on every path, against a real cluster and a real standalone
//! upstream: scripts and functions (which run as the proxy's backend user) are refused to a
//! user whose rules they would escape, in a transaction too, and the secret they aimed at is
//! unchanged on its node; a user with `scripts: trusted` and an unrestricted user still run
//! them. Channel rules and SORT's patterns answer as a real redis-server 7 with the same
//! `ACL SETUSER` answers, text for text.

mod common;

use common::{new_dir, query, shared_cluster, transcript, Proxy, Raw, Standalone};

const USERS: &str = r#"
users:
  - name: didi
    password: didipw
    commands: ["+@all", "-@dangerous"]
    keys: ["~didi:*"]
  - name: trusty
    password: trustypw
    commands: ["+@all"]
    keys: ["~didi:*"]
    scripts: trusted
  - name: pub
    password: pubpw
    commands: ["+@all"]
    keys: ["allkeys"]
    channels: ["&news:*", "&exact", "&__keyspace@0__:didi:*"]
  - name: admin
    password: adminpw
    commands: ["+@all"]
    keys: ["allkeys"]
    channels: ["allchannels"]
"#;

/// The same users on a redis-server, as `ACL SETUSER` arguments (`trusty` as Redis has no
/// script trust: its key patterns hold inside scripts there).
const SETUSERS: &[&[&str]] = &[
    &["didi", "on", ">didipw", "+@all", "-@dangerous", "~didi:*"],
    &["trusty", "on", ">trustypw", "+@all", "~didi:*"],
    &[
        "pub",
        "on",
        ">pubpw",
        "+@all",
        "~*",
        "&news:*",
        "&exact",
        "&__keyspace@0__:didi:*",
    ],
    &["admin", "on", ">adminpw", "+@all", "~*", "&*"],
];

fn config_path() -> String {
    let dir = new_dir("permissions-config");
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, USERS).unwrap();
    path.to_str().unwrap().to_string()
}

fn cluster_proxy() -> Proxy {
    Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        &config_path(),
    ])
}

/// A proxy in front of a standalone server of its own.
fn standalone_proxy() -> (Proxy, Standalone) {
    let server = Standalone::start();
    let proxy = Proxy::start(&["--standalone", server.addr(), "--config", &config_path()]);
    (proxy, server)
}

/// A redis-server with the proxy's users, to compare texts with.
fn reference_redis() -> Standalone {
    let server = Standalone::start();
    for setuser in SETUSERS {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(*setuser);
        let _: () = query(server.addr(), &cmd).unwrap();
    }
    server
}

fn login(addr: &str, user: &str) -> Raw {
    let mut con = Raw::connect(addr);
    assert_eq!(con.call(&["AUTH", user, &format!("{user}pw")]), "+OK\r\n");
    con
}

/// The proxy's refusal of script command `name` to a user whose scripts are not trusted.
fn script_refusal(name: &str) -> String {
    format!(
        "-NOPERM this user has no permissions to run the '{name}' command: scripts and functions run as the proxy's backend user, where this user's command, key and channel rules do not hold (allow them with 'scripts: trusted' in the user's entry)\r\n"
    )
}

const NOPERM_KEYS: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

fn bulk(value: &str) -> String {
    format!("${}\r\n{value}\r\n", value.len())
}

/// A library whose functions read and write any key they are given as an argument.
fn library(name: &str) -> String {
    format!(
        "#!lua name={name}\n\
         redis.register_function{{function_name='{name}_get', callback=function(keys, args) return redis.call('GET', args[1]) end, flags={{'no-writes'}}}}\n\
         redis.register_function('{name}_set', function(keys, args) return redis.call('SET', args[1], args[2]) end)"
    )
}

/// Every way `didi` could run code reaching `secret` is refused, the secret (read on
/// `secret_node`, not through the proxy) is unchanged, and users whose scripts are
/// trusted still run theirs. `lib` names a library unique to this upstream.
fn scripts_are_refused_to_untrusted_users(proxy: &str, secret_node: &str, lib: &str) {
    let (secret, own) = ("secret:{x}", "didi:{x}");
    let mut admin = login(proxy, "admin");
    assert_eq!(admin.call(&["SET", secret, "original"]), "+OK\r\n");
    let code = library(lib);
    assert_eq!(
        admin.call(&["FUNCTION", "LOAD", "REPLACE", &code]),
        bulk(lib)
    );
    let get_script = "return redis.call('GET', ARGV[1])";
    let sha_reply = admin.call(&["SCRIPT", "LOAD", get_script]);
    let sha = sha_reply.lines().nth(1).expect("a sha").to_string();
    let (get_fn, set_fn) = (format!("{lib}_get"), format!("{lib}_set"));

    let mut didi = login(proxy, "didi");
    assert_eq!(didi.call(&["SET", own, "mine"]), "+OK\r\n");
    assert_eq!(didi.call(&["GET", secret]), NOPERM_KEYS);
    let read = format!("return redis.call('GET', '{secret}')");
    let write = format!("return redis.call('SET', '{secret}', 'owned')");
    let refused: Vec<(Vec<&str>, &str)> = vec![
        (vec!["EVAL", &read, "1", own], "eval"),
        (vec!["EVAL", &write, "1", own], "eval"),
        (vec!["EVAL_RO", &read, "1", own], "eval_ro"),
        (vec!["EVALSHA", &sha, "1", own, secret], "evalsha"),
        (vec!["EVALSHA_RO", &sha, "1", own, secret], "evalsha_ro"),
        (vec!["FCALL", &get_fn, "1", own, secret], "fcall"),
        (vec!["FCALL", &set_fn, "1", own, secret, "owned"], "fcall"),
        (vec!["FCALL_RO", &get_fn, "1", own, secret], "fcall_ro"),
        (vec!["SCRIPT", "LOAD", &write], "script|load"),
        (vec!["FUNCTION", "LOAD", "REPLACE", &code], "function|load"),
        (vec!["FUNCTION", "DELETE", lib], "function|delete"),
        (vec!["FUNCTION", "FLUSH"], "function|flush"),
    ];
    for (command, name) in &refused {
        assert_eq!(didi.call(command), script_refusal(name), "{command:?}");
    }
    // A refusal when queued aborts the transaction, as Redis's NOPERM does.
    assert_eq!(didi.call(&["MULTI"]), "+OK\r\n");
    assert_eq!(didi.call(&["SET", own, "queued"]), "+QUEUED\r\n");
    assert_eq!(
        didi.call(&["EVAL", &write, "1", own]),
        script_refusal("eval")
    );
    assert_eq!(
        didi.call(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );

    let on_node: String = query(secret_node, redis::cmd("GET").arg(secret)).unwrap();
    assert_eq!(on_node, "original", "the secret on its node");
    let own_on_node: String = query(secret_node, redis::cmd("GET").arg(own)).unwrap();
    assert_eq!(own_on_node, "mine", "the aborted transaction wrote nothing");
    // FUNCTION DELETE and FLUSH were refused: the library is still there.
    assert_eq!(
        admin.call(&["FCALL_RO", &get_fn, "1", secret, secret]),
        bulk("original")
    );

    // Trusted scripts run as before (and reach what the backend user may).
    let mut trusty = login(proxy, "trusty");
    let own_read = "return redis.call('GET', KEYS[1])";
    assert_eq!(trusty.call(&["EVAL", own_read, "1", own]), bulk("mine"));
    assert_eq!(
        trusty.call(&["FCALL", &get_fn, "1", own, own]),
        bulk("mine")
    );
    // Its key patterns still hold for the keys it names.
    assert_eq!(trusty.call(&["EVAL", own_read, "1", secret]), NOPERM_KEYS);
    // An unrestricted user is unaffected.
    assert_eq!(admin.call(&["EVAL", &read, "1", own]), bulk("original"));
    assert_eq!(
        admin.call(&["EVALSHA", &sha, "1", own, secret]),
        bulk("original")
    );
    assert_eq!(
        admin.call(&["FCALL", &set_fn, "1", own, own, "admin"]),
        "+OK\r\n"
    );
    assert_eq!(admin.call(&["FUNCTION", "DELETE", lib]), "+OK\r\n");
}

#[test]
fn scripts_are_refused_to_untrusted_users_on_a_cluster() {
    let proxy = cluster_proxy();
    let cluster = shared_cluster();
    let node = cluster.node_for_slot(cluster.keyslot("secret:{x}"));
    scripts_are_refused_to_untrusted_users(proxy.addr(), &node, "permscluster");
}

#[test]
fn scripts_are_refused_to_untrusted_users_on_a_standalone_upstream() {
    let (proxy, server) = standalone_proxy();
    scripts_are_refused_to_untrusted_users(proxy.addr(), server.addr(), "permsstandalone");
}

/// Each `(user, command)` on a fresh connection: the reply after logging in.
fn each_alone(addr: &str, steps: &[(&str, &[&str])]) -> Vec<String> {
    steps
        .iter()
        .map(|(user, command)| login(addr, user).call(command))
        .collect()
}

/// PUBLISH, SPUBLISH and the SUBSCRIBE family, keyspace channels included, answer as on a
/// redis-server 7 with the same users (`ACL SETUSER ... &news:* &exact`), on `proxy`.
fn channels_answer_as_redis(proxy: &str, redis: &str) {
    // What is allowed works: a subscriber of an allowed channel gets the message. (First:
    // the patterns subscribed below, still closing, would change the count.)
    let mut subscriber = login(proxy, "pub");
    assert!(subscriber
        .call(&["SUBSCRIBE", "news:live"])
        .starts_with("*3\r\n$9\r\nsubscribe\r\n"));
    assert_eq!(
        login(proxy, "pub").call(&["PUBLISH", "news:live", "hello"]),
        ":1\r\n"
    );
    assert_eq!(
        subscriber.read_reply(),
        "*3\r\n$7\r\nmessage\r\n$9\r\nnews:live\r\n$5\r\nhello\r\n"
    );
    drop(subscriber);
    // Publishes first: a subscriber still closing would change their counts.
    let steps: &[(&str, &[&str])] = &[
        ("pub", &["PUBLISH", "news:1", "m"]),
        ("pub", &["PUBLISH", "other", "m"]),
        ("pub", &["SPUBLISH", "exact", "m"]),
        ("pub", &["SPUBLISH", "other", "m"]),
        ("didi", &["PUBLISH", "anychannel", "x"]),
        ("admin", &["PUBLISH", "anychannel", "x"]),
        // (One channel each where all are allowed: `call` reads one reply.)
        ("pub", &["SUBSCRIBE", "news:1"]),
        ("pub", &["SUBSCRIBE", "exact"]),
        ("pub", &["SUBSCRIBE", "news:2", "other"]),
        ("pub", &["SSUBSCRIBE", "exact"]),
        ("pub", &["SSUBSCRIBE", "other"]),
        ("pub", &["PSUBSCRIBE", "news:*"]),
        ("pub", &["PSUBSCRIBE", "news:1"]),
        ("pub", &["PSUBSCRIBE", "n*"]),
        ("pub", &["UNSUBSCRIBE", "other"]),
        ("pub", &["PUNSUBSCRIBE", "o*"]),
        ("pub", &["SUBSCRIBE", "__keyspace@0__:didi:1"]),
        ("pub", &["SUBSCRIBE", "__keyspace@0__:other"]),
        ("pub", &["PSUBSCRIBE", "__keyspace@0__:didi:*"]),
        ("pub", &["PSUBSCRIBE", "__keyspace@0__:*"]),
        ("pub", &["PSUBSCRIBE", "__keyevent@0__:set"]),
        ("didi", &["SUBSCRIBE", "anychannel"]),
        ("didi", &["PSUBSCRIBE", "*"]),
        ("admin", &["PSUBSCRIBE", "*"]),
    ];
    let expected = each_alone(redis, steps);
    let noperm =
        "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n";
    let refusals = expected.iter().filter(|reply| *reply == noperm).count();
    assert_eq!(refusals, 12, "redis refuses: {expected:?}");
    let got = each_alone(proxy, steps);
    for ((step, want), got) in steps.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "{step:?}");
    }

    // The same in a transaction: a refused PUBLISH aborts it.
    let lines = [
        "AUTH pub pubpw",
        "MULTI",
        "PUBLISH news:1 m",
        "PUBLISH other m",
        "EXEC",
    ];
    let expected = transcript(redis, &lines);
    assert!(expected.contains("-EXECABORT"), "redis aborts: {expected}");
    assert_eq!(transcript(proxy, &lines), expected);
}

#[test]
fn channels_answer_as_redis_on_a_cluster() {
    let proxy = cluster_proxy();
    let redis = reference_redis();
    channels_answer_as_redis(proxy.addr(), redis.addr());
}

#[test]
fn channels_answer_as_redis_on_a_standalone_upstream() {
    let (proxy, _server) = standalone_proxy();
    let redis = reference_redis();
    channels_answer_as_redis(proxy.addr(), redis.addr());
}

/// SORT's BY and GET patterns name keys no check sees beforehand: refused to a user without
/// every key with Redis's texts, wherever Redis meets them among the arguments.
#[test]
fn sort_patterns_are_refused_as_redis_refuses_them() {
    let proxy = cluster_proxy();
    let redis = reference_redis();
    let lines = [
        "AUTH trusty trustypw",
        "RPUSH didi:{l} 2 1 3",
        "SORT didi:{l} BY w_*",
        "SORT didi:{l} GET #",
        "SORT didi:{l} BY nosort",
        "SORT didi:{l} BY w_* GET x",
        "SORT didi:{l} LIMIT a b BY w_*",
        "SORT didi:{l} BLAH GET #",
        "SORT_RO didi:{l} BY nosort GET #",
        "SORT didi:{l} LIMIT 0 2",
        "SORT secret:{l}",
        "DEL didi:{l}",
    ];
    let expected = transcript(redis.addr(), &lines);
    for text in [
        "-ERR BY option of SORT denied due to insufficient ACL permissions.",
        "-ERR GET option of SORT denied due to insufficient ACL permissions.",
    ] {
        assert!(expected.contains(text), "redis: {expected}");
    }
    assert_eq!(transcript(proxy.addr(), &lines), expected);
    // A user with every key still sorts by patterns (the proxy looks them up).
    let mut admin = login(proxy.addr(), "admin");
    assert_eq!(admin.call(&["RPUSH", "perms:{s}", "b", "a"]), ":2\r\n");
    assert_eq!(admin.call(&["SET", "w_a", "1"]), "+OK\r\n");
    assert_eq!(admin.call(&["SET", "w_b", "2"]), "+OK\r\n");
    assert_eq!(
        admin.call(&["SORT", "perms:{s}", "BY", "w_*"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(admin.call(&["DEL", "perms:{s}", "w_a", "w_b"]), ":3\r\n");
}
