//! ACL management of the proxy's users through the proxy, against a real cluster and real
//! clients (raw RESP and redis-cli): ACL SETUSER then AUTH as the new user, rules changed
//! on a connected user at its next command, ACL DELUSER closing its clients, CONFIG SET
//! requirepass acting on the proxy only (the masters never see it), ACL LOG, ACL SAVE and
//! LOAD over the `aclfile`, and the command policy refusing ACL changes unless allowed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::{new_dir, read_until_close, run_redis_cli, shared_cluster, Proxy, Raw};

const CLI_TIMEOUT: Duration = Duration::from_secs(10);

/// A proxy allowing the ACL changes and CONFIG SET, with `aclfile` in a fresh directory.
fn start_proxy(label: &str) -> (Proxy, PathBuf) {
    let dir = new_dir(label);
    let aclfile = dir.join("users.acl");
    let config = format!(
        "aclfile: {}\ncommands:\n  allow: [acl|setuser, acl|deluser, acl|save, acl|load, config|set]\n",
        aclfile.display()
    );
    let path = dir.join("slotbridge.yaml");
    std::fs::write(&path, config).unwrap();
    let proxy = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--config",
        path.to_str().unwrap(),
    ]);
    (proxy, aclfile)
}

fn shared_proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| start_proxy("acl-proxy").0)
}

fn port(proxy: &Proxy) -> &str {
    proxy.addr().rsplit(':').next().unwrap()
}

fn noperm_command(name: &str) -> String {
    format!("-NOPERM this user has no permissions to run the '{name}' command\r\n")
}

const NOPERM_KEYS: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";

#[test]
fn setuser_by_redis_cli_then_auth_as_the_new_user_enforces_its_rules() {
    let proxy = shared_proxy();
    let out = run_redis_cli(
        &[
            "-p",
            port(proxy),
            "ACL",
            "SETUSER",
            "cliuser",
            "on",
            ">clipw",
            "+get",
            "+set",
            "~cli:*",
        ],
        CLI_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.trim(), "OK");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(
        con.call(&["AUTH", "cliuser", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(con.call(&["AUTH", "cliuser", "clipw"]), "+OK\r\n");
    // As on Redis, ACL WHOAMI needs the user's rules to allow it.
    assert_eq!(con.call(&["ACL", "WHOAMI"]), noperm_command("acl|whoami"));
    assert_eq!(con.call(&["SET", "cli:a", "1"]), "+OK\r\n");
    assert_eq!(con.call(&["GET", "cli:a"]), "$1\r\n1\r\n");
    assert_eq!(con.call(&["GET", "other:a"]), NOPERM_KEYS);
    assert_eq!(con.call(&["DEL", "cli:a"]), noperm_command("del"));
    let users = Raw::connect(proxy.addr()).call(&["ACL", "USERS"]);
    assert!(users.contains("cliuser"), "{users}");
}

#[test]
fn setuser_on_a_connected_user_applies_at_its_next_command() {
    let proxy = shared_proxy();
    let mut admin = Raw::connect(proxy.addr());
    let setuser = &[
        "ACL", "SETUSER", "liveuser", "on", ">livepw", "+get", "~live:*",
    ];
    assert_eq!(admin.call(setuser), "+OK\r\n");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["AUTH", "liveuser", "livepw"]), "+OK\r\n");
    assert_eq!(con.call(&["GET", "live:x"]), "$-1\r\n");
    assert_eq!(
        admin.call(&["ACL", "SETUSER", "liveuser", "-get", "+strlen"]),
        "+OK\r\n"
    );
    assert_eq!(con.call(&["GET", "live:x"]), noperm_command("get"));
    assert_eq!(con.call(&["STRLEN", "live:x"]), ":0\r\n");
    // The denial is in the ACL log (other tests' entries may be newer: the log is shared).
    let log = admin.call(&["ACL", "LOG"]);
    let entry = "$8\r\nusername\r\n$8\r\nliveuser\r\n";
    assert!(log.contains(entry), "no entry for liveuser in {log}");
    assert!(log.contains("$6\r\nobject\r\n$3\r\nget\r\n"), "{log}");
}

#[test]
fn deluser_closes_the_connections_of_that_user() {
    let proxy = shared_proxy();
    let mut admin = Raw::connect(proxy.addr());
    let setuser = &["ACL", "SETUSER", "goner", "on", ">gonepw", "+@all", "~*"];
    assert_eq!(admin.call(setuser), "+OK\r\n");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["AUTH", "goner", "gonepw"]), "+OK\r\n");
    assert_eq!(con.call(&["PING"]), "+PONG\r\n");
    assert_eq!(admin.call(&["ACL", "DELUSER", "goner"]), ":1\r\n");
    con.send(&["PING"]);
    let (data, closed) = read_until_close(&mut con.stream, Duration::from_secs(5));
    assert!(closed, "connection still open");
    assert!(data.is_empty(), "{:?}", String::from_utf8_lossy(&data));
    assert_eq!(admin.call(&["ACL", "GETUSER", "goner"]), "$-1\r\n");
}

#[test]
fn failed_auth_is_in_the_acl_log() {
    let proxy = shared_proxy();
    let mut con = Raw::connect(proxy.addr());
    assert!(con
        .call(&["AUTH", "nobody-here", "x"])
        .starts_with("-WRONGPASS"));
    let log = con.call(&["ACL", "LOG"]);
    assert!(log.contains("nobody-here"), "{log}");
    assert!(log.contains("auth"), "{log}");
}

fn master_requirepass(master: &str) -> String {
    Raw::connect(master).call(&["CONFIG", "GET", "requirepass"])
}

#[test]
fn config_set_requirepass_locks_out_clients_but_not_the_proxy_backends() {
    let (proxy, _) = start_proxy("acl-requirepass");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(
        con.call(&["CONFIG", "SET", "requirepass", "sekret", "maxmemory", "0"]),
        "-ERR CONFIG SET requirepass sets the proxy's default password: send it alone, without other parameters\r\n"
    );
    assert_eq!(
        con.call(&["CONFIG", "SET", "requirepass", "sekret"]),
        "+OK\r\n"
    );
    let mut other = Raw::connect(proxy.addr());
    assert_eq!(
        other.call(&["GET", "rp:k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert!(other.call(&["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    assert_eq!(other.call(&["AUTH", "sekret"]), "+OK\r\n");
    assert_eq!(other.call(&["SET", "rp:k", "v"]), "+OK\r\n");
    assert_eq!(other.call(&["GET", "rp:k"]), "$1\r\nv\r\n");
    assert_eq!(
        other.call(&["CONFIG", "GET", "requirepass"]),
        "*2\r\n$11\r\nrequirepass\r\n$6\r\nsekret\r\n"
    );
    for master in shared_cluster().masters() {
        assert_eq!(
            master_requirepass(&master),
            "*2\r\n$11\r\nrequirepass\r\n$0\r\n\r\n",
            "{master}"
        );
    }
}

fn file_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn acl_save_then_load_round_trips_the_users_file() {
    let (proxy, aclfile) = start_proxy("acl-save-load");
    let mut con = Raw::connect(proxy.addr());
    let setuser = &["ACL", "SETUSER", "saved", "on", ">savedpw", "+get", "~s:*"];
    assert_eq!(con.call(setuser), "+OK\r\n");
    let listed = con.call(&["ACL", "LIST"]);
    assert_eq!(con.call(&["ACL", "SAVE"]), "+OK\r\n");
    let text = file_text(&aclfile);
    assert!(text.contains("user saved on"), "{text}");
    assert_eq!(con.call(&["ACL", "DELUSER", "saved"]), ":1\r\n");
    assert_eq!(con.call(&["ACL", "LOAD"]), "+OK\r\n");
    assert_eq!(con.call(&["ACL", "LIST"]), listed);
    let mut user = Raw::connect(proxy.addr());
    assert_eq!(user.call(&["AUTH", "saved", "savedpw"]), "+OK\r\n");
    assert_eq!(user.call(&["GET", "s:1"]), "$-1\r\n");
}

#[test]
fn acl_changes_are_refused_unless_the_policy_allows_them() {
    let proxy = Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]);
    let mut con = Raw::connect(proxy.addr());
    for (args, name) in [
        (&["ACL", "SETUSER", "x"][..], "acl|setuser"),
        (&["ACL", "DELUSER", "x"], "acl|deluser"),
        (&["ACL", "SAVE"], "acl|save"),
        (&["CONFIG", "SET", "requirepass", "x"], "config|set"),
    ] {
        assert_eq!(
            con.call(args),
            format!("-ERR proxy: '{name}' is disabled by the proxy's command policy (allow it with commands.allow: [{name}])\r\n")
        );
    }
    assert_eq!(con.call(&["ACL", "WHOAMI"]), "$7\r\ndefault\r\n");
    assert_eq!(con.call(&["ACL", "USERS"]), "*1\r\n$7\r\ndefault\r\n");
    assert_eq!(con.call(&["GET", "policy:k"]), "$-1\r\n");
}

#[test]
fn a_subscriber_whose_channel_rules_shrink_is_closed_at_its_next_command() {
    let proxy = shared_proxy();
    let mut admin = Raw::connect(proxy.addr());
    let setuser = &[
        "ACL", "SETUSER", "listener", "on", ">lpw", "+@all", "~*", "&news",
    ];
    assert_eq!(admin.call(setuser), "+OK\r\n");
    let mut con = Raw::connect(proxy.addr());
    assert_eq!(con.call(&["AUTH", "listener", "lpw"]), "+OK\r\n");
    assert_eq!(
        con.call(&["SUBSCRIBE", "news"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    // Widening the rules keeps the subscriber.
    let widen = &["ACL", "SETUSER", "listener", "&sports"];
    assert_eq!(admin.call(widen), "+OK\r\n");
    assert_eq!(con.call(&["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    let narrow = &["ACL", "SETUSER", "listener", "resetchannels", "&sports"];
    assert_eq!(admin.call(narrow), "+OK\r\n");
    con.send(&["PING"]);
    let (data, closed) = read_until_close(&mut con.stream, Duration::from_secs(5));
    assert!(closed, "subscriber still connected");
    assert!(data.is_empty(), "{:?}", String::from_utf8_lossy(&data));
}
