//! Proxy-side authentication and ACLs against a real cluster: NOAUTH before AUTH, exact
//! WRONGPASS, AUTH for the default user and for ACL users, HELLO 3 AUTH, ACL WHOAMI, NOPERM
//! for a command and for a key pattern, logins and RESET inside one pipelined write, and
//! protected mode refusing an open public listener.
//! Expected texts are Redis 7's own.

mod common;

use std::process::Command;
use std::sync::OnceLock;

use common::{new_dir, shared_cluster, Proxy, Raw};

const USERS: &str = r#"
users:
  - name: bot
    password: botpw
    commands: ["+@read", "+set", "-@dangerous"]
    keys: ["~mybot:*"]
  - name: hashed
    # SHA-256 of "password"
    password_sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
    commands: ["+@all"]
    keys: ["allkeys"]
  - name: off
    password: offpw
    state: off
    commands: ["+@all"]
"#;

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        let dir = new_dir("auth-config");
        let path = dir.join("slotbridge.yaml");
        std::fs::write(&path, USERS).unwrap();
        Proxy::start_with_env(
            &[
                "--cluster",
                &shared_cluster().seeds_arg(),
                "--config",
                path.to_str().unwrap(),
            ],
            &[("SLOTBRIDGE_REQUIREPASS", "toppw")],
        )
    })
}

/// Redis's reply to a command the user's ACL does not allow.
fn noperm_command(name: &str) -> String {
    format!("-NOPERM this user has no permissions to run the '{name}' command\r\n")
}

const WRONGPASS: &str = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";

#[test]
fn commands_before_auth_get_noauth() {
    let mut con = Raw::connect(proxy().addr());
    for command in [&["GET", "k"][..], &["PING"], &["ACL", "WHOAMI"]] {
        assert_eq!(con.call(command), "-NOAUTH Authentication required.\r\n");
    }
    let hello = con.call(&["HELLO", "3"]);
    assert!(hello.starts_with("-NOAUTH HELLO must be called"), "{hello}");
}

#[test]
fn wrong_password_gets_wrongpass_and_right_one_works() {
    let mut con = Raw::connect(proxy().addr());
    assert_eq!(con.call(&["AUTH", "nope"]), WRONGPASS);
    assert_eq!(con.call(&["AUTH", "default", "nope"]), WRONGPASS);
    assert_eq!(con.call(&["AUTH", "nosuchuser", "toppw"]), WRONGPASS);
    assert_eq!(
        con.call(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(con.call(&["AUTH", "toppw"]), "+OK\r\n");
    assert_eq!(con.call(&["SET", "auth:plain", "v"]), "+OK\r\n");
    assert_eq!(con.call(&["GET", "auth:plain"]), "$1\r\nv\r\n");
    assert_eq!(con.call(&["ACL", "WHOAMI"]), "$7\r\ndefault\r\n");
}

#[test]
fn disabled_user_cannot_log_in_and_hashed_password_can() {
    let mut con = Raw::connect(proxy().addr());
    assert_eq!(con.call(&["AUTH", "off", "offpw"]), WRONGPASS);
    assert_eq!(con.call(&["AUTH", "hashed", "password"]), "+OK\r\n");
    assert_eq!(con.call(&["ACL", "WHOAMI"]), "$6\r\nhashed\r\n");
}

#[test]
fn acl_user_is_limited_to_its_commands_and_keys() {
    let mut con = Raw::connect(proxy().addr());
    assert_eq!(con.call(&["AUTH", "bot", "botpw"]), "+OK\r\n");
    assert_eq!(con.call(&["SET", "mybot:1", "x"]), "+OK\r\n");
    assert_eq!(con.call(&["GET", "mybot:1"]), "$1\r\nx\r\n");
    assert_eq!(
        con.call(&["GET", "other:1"]),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    // One key out of the pattern is enough to refuse a multi-key command.
    assert_eq!(
        con.call(&["MGET", "mybot:1", "other:1"]),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    assert_eq!(con.call(&["DEL", "mybot:1"]), noperm_command("del"));
    // KEYS is @read but also @dangerous, and the later rule wins.
    assert_eq!(con.call(&["KEYS", "*"]), noperm_command("keys"));
    // Commands the proxy answers itself or runs on connections of the client's own are
    // checked too (PING is @connection, CLIENT LIST @dangerous, MULTI @transaction).
    for (command, name) in [
        (&["PING"][..], "ping"),
        (&["CLIENT", "LIST"][..], "client|list"),
        (&["CLIENT", "KILL", "ID", "1"][..], "client|kill"),
        (&["MULTI"][..], "multi"),
        (&["SUBSCRIBE", "news"][..], "subscribe"),
    ] {
        assert_eq!(con.call(command), noperm_command(name), "{command:?}");
    }
    // AUTH and HELLO are open to every user, as in Redis.
    assert_eq!(con.call(&["AUTH", "bot", "botpw"]), "+OK\r\n");
    assert!(con.call(&["HELLO", "2"]).starts_with('*'));
}

#[test]
fn a_login_inside_one_pipelined_write_applies_to_the_commands_after_it() {
    let mut con = Raw::connect(proxy().addr());
    let wire = common::resp_lines(&[
        "AUTH toppw",
        "SET other:piped 1",
        "AUTH bot botpw",
        "SET other:piped 2",
        "SET mybot:piped 3",
        "RESET",
        "GET mybot:piped",
        "AUTH toppw",
        "GET other:piped",
    ]);
    let replies: Vec<String> = con
        .pipeline(&wire, 9)
        .iter()
        .map(|reply| String::from_utf8_lossy(reply).into_owned())
        .collect();
    let expected = [
        "+OK\r\n",
        "+OK\r\n",
        "+OK\r\n",
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n",
        "+OK\r\n",
        "+RESET\r\n",
        "-NOAUTH Authentication required.\r\n",
        "+OK\r\n",
        "$1\r\n1\r\n",
    ];
    assert_eq!(replies, expected);
}

#[test]
fn hello_3_auth_logs_in_and_switches_protocol() {
    let mut con = Raw::connect(proxy().addr());
    assert_eq!(con.call(&["HELLO", "3", "AUTH", "bot", "wrong"]), WRONGPASS);
    let hello = con.call(&["HELLO", "3", "AUTH", "bot", "botpw"]);
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");
    // Logged in as bot: its key pattern applies (and ACL WHOAMI, @slow, is not in its
    // commands, as Redis also answers).
    assert_eq!(
        con.call(&["GET", "other:1"]),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    assert_eq!(con.call(&["ACL", "WHOAMI"]), noperm_command("acl|whoami"));
    // RESP3 null for a missing key.
    assert_eq!(con.call(&["GET", "mybot:missing"]), "_\r\n");
}

#[test]
fn a_redis_client_logs_in_with_a_url() {
    let url = format!("redis://bot:botpw@{}/", proxy().addr());
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("mybot:url")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let value: String = redis::cmd("GET").arg("mybot:url").query(&mut con).unwrap();
    assert_eq!(value, "1");
}

#[test]
fn protected_mode_refuses_a_public_listener_without_auth() {
    let output = Command::new(env!("CARGO_BIN_EXE_slotbridge"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--listen", "0.0.0.0:0", "--cluster", "127.0.0.1:1"])
        .output()
        .expect("run slotbridge");
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("protected_mode") && stderr.contains("0.0.0.0:0"),
        "{stderr}"
    );
}
