use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::command::CommandTable;
use crate::config::{Config, Secret};
use crate::protocol::Proto;

fn catalog() -> &'static Catalog {
    Catalog::builtin()
}

fn user(rules: &[&str]) -> Result<AclUser, RuleError> {
    let mut user = AclUser::new("u", catalog());
    for rule in rules {
        user.apply(rule.as_bytes(), catalog())?;
    }
    Ok(user)
}

fn call(users: &UserSet, args: &[&str]) -> String {
    let log = AclLog::default();
    let table = CommandTable::builtin();
    let request = AclRequest {
        users,
        log: &log,
        commands: &table,
        proto: Proto::Resp2,
        whoami: Some("default"),
    };
    let args: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    String::from_utf8_lossy(&answer(&request, &args)).into_owned()
}

#[test]
fn new_and_default_users_are_listed_as_redis_lists_them() {
    assert_eq!(
        list_line(&user(&[]).unwrap(), catalog()),
        "user u off resetchannels -@all"
    );
    assert_eq!(
        list_line(&AclUser::default_user(catalog()), catalog()),
        "user default on nopass ~* &* +@all"
    );
    let reset = user(&["on", ">p", "~k", "+@all", "reset"]).unwrap();
    assert_eq!(
        list_line(&reset, catalog()),
        "user u off sanitize-payload resetchannels -@all"
    );
}

#[test]
fn rules_normalize_as_redis() {
    let u = user(&[
        "on", ">p1", ">p1", "%RW~k1", "~k1", "~k2", "&c", "+get", "-get", "+set",
    ])
    .unwrap();
    assert_eq!(
        list_line(&u, catalog()),
        format!(
            "user u on #{} ~k1 ~k2 resetchannels &c -@all +set",
            sha256_hex(b"p1")
        )
    );
    // Every read command: the category, not the commands one by one.
    assert_eq!(
        command_rules(&user(&["+@read"]).unwrap(), catalog()),
        "-@all +@read"
    );
    let minus = command_rules(
        &user(&["+@all", "-@dangerous", "+flushall"]).unwrap(),
        catalog(),
    );
    assert!(minus.starts_with("+@all -@admin "), "{minus}");
    assert!(!minus.contains("flushall"), "{minus}");
    assert!(minus.contains(" -keys"), "{minus}");
    // A container's rule covers its subcommands; one subcommand back is listed as such.
    let config = command_rules(&user(&["+config", "-config|set"]).unwrap(), catalog());
    assert!(config.starts_with("-@all +config "), "{config}");
    assert!(
        config.ends_with("-config|set") || config.contains(" -config|set "),
        "{config}"
    );
}

#[test]
fn bad_rules_get_redis_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["+nosuch"], text::RULE_UNKNOWN),
        (&["+@nosuch"], text::RULE_UNKNOWN),
        (&["-select|0"], text::RULE_UNKNOWN),
        (&["+"], text::RULE_UNKNOWN),
        (&["+config|"], text::RULE_SYNTAX),
        (&["%X~a"], text::RULE_SYNTAX),
        (&["%~a"], text::RULE_SYNTAX),
        (&["~a b"], text::RULE_SYNTAX),
        (&["bogus"], text::RULE_SYNTAX),
        (&["allkeys", "~a"], text::RULE_KEY_AFTER_ALL),
        (&["&*", "&a"], text::RULE_CHANNEL_AFTER_ALL),
        (&["<never"], text::RULE_NO_SUCH_PASSWORD),
        (&["#ABC"], text::RULE_BAD_HASH),
        (&["+config|get|x"], text::RULE_FIRST_ARG_OF_SUBCOMMAND),
    ];
    for (rules, expected) in cases {
        assert_eq!(user(rules), Err(RuleError::Redis(expected)), "{rules:?}");
    }
}

#[test]
fn what_the_proxy_cannot_enforce_is_refused_by_name() {
    let users = UserSet::from_config(&Config::default(), None).unwrap();
    for (rules, named) in [
        (&["(~x +get)"][..], "'(~x +get)'"),
        (&["(~x", "+get)"], "'(~x +get)'"),
        (&["%R~x"], "'%R~x'"),
        (&["%W~x"], "'%W~x'"),
        (&["+select|0"], "'+select|0'"),
        (&["skip-sanitize-payload"], "'skip-sanitize-payload'"),
    ] {
        let mut args = vec!["ACL", "SETUSER", "u"];
        args.extend_from_slice(rules);
        let reply = call(&users, &args);
        assert!(
            reply.starts_with(&format!("-ERR Error in ACL SETUSER modifier {named}: ")),
            "{rules:?}: {reply}"
        );
        assert!(reply.contains("not supported by this proxy"), "{reply}");
    }
    let mut binary = AclUser::new("u", catalog());
    binary.apply(b"~k\xff", catalog()).unwrap();
    let (rule, reason) = binary.check_supported(catalog()).unwrap_err();
    assert_eq!(
        (rule.as_str(), reason.as_str()),
        ("~k\u{fffd}", text::BINARY_PATTERN_UNSUPPORTED)
    );
    // Nothing was created by the refused calls.
    assert!(users.get("u").is_none());
    // Both halves of a pattern make a whole one; a later rule can clear a first-arg grant.
    let reply = call(
        &users,
        &[
            "ACL",
            "SETUSER",
            "u",
            "%R~x",
            "%W~x",
            "+select|0",
            "-select",
        ],
    );
    assert_eq!(reply, "+OK\r\n");
    assert_eq!(
        call(&users, &["ACL", "LIST"]).lines().nth(4),
        Some("user u off ~x resetchannels -@all")
    );
    assert_eq!(
        call(&users, &["ACL", "SETUSER", "u", "(~x"]),
        "-ERR Unmatched parenthesis in acl selector starting at '(~x'.\r\n"
    );
}

#[test]
fn sessions_see_changes_at_their_next_command_and_deletions() {
    let users = UserSet::from_config(&Config::default(), None).unwrap();
    assert_eq!(
        call(
            &users,
            &["ACL", "SETUSER", "app", "on", ">pw", "+get", "~*"]
        ),
        "+OK\r\n"
    );
    let held = users.check(b"app", b"pw").expect("app logs in");
    assert!(matches!(users.refresh(&held), Freshness::Current));
    assert_eq!(call(&users, &["ACL", "SETUSER", "app", "+set"]), "+OK\r\n");
    let Freshness::Changed(now) = users.refresh(&held) else {
        panic!("a changed user must be seen as changed");
    };
    assert!(now.generation > held.generation);
    let table = CommandTable::builtin();
    let set = [
        Bytes::from_static(b"set"),
        Bytes::from_static(b"k"),
        Bytes::from_static(b"v"),
    ];
    assert!(held
        .user
        .denial(table.lookup(&set).unwrap(), &set)
        .is_some());
    assert!(now.user.denial(table.lookup(&set).unwrap(), &set).is_none());
    assert_eq!(call(&users, &["ACL", "DELUSER", "app", "nobody"]), ":1\r\n");
    assert!(matches!(users.refresh(&now), Freshness::Deleted));
    assert!(now.is_deleted());
    assert_eq!(
        call(&users, &["ACL", "DELUSER", "default"]),
        format!("-{}\r\n", text::DELETE_DEFAULT)
    );
    // Disabled users and wrong passwords do not authenticate.
    call(&users, &["ACL", "SETUSER", "off", "off", ">pw"]);
    assert!(users.check(b"off", b"pw").is_none());
    assert!(users.check(b"nobody", b"pw").is_none());
}

#[test]
fn configured_users_keep_their_rules_and_close_default() {
    let config = Config {
        users: vec![crate::config::UserConfig {
            name: "bot".into(),
            password: Some(Secret("pw".into())),
            commands: vec!["+@all".into(), "-@dangerous".into()],
            keys: vec!["allkeys".into(), "~ignored".into()],
            channels: vec!["&news".into()],
            ..Default::default()
        }],
        ..Config::default()
    };
    let users = UserSet::from_config(&config, None).unwrap();
    let bot = users.check(b"bot", b"pw").expect("bot logs in");
    assert!(bot.acl.allkeys && bot.acl.keys.is_empty());
    assert!(
        users.open_default().is_none(),
        "configured users close default"
    );
    let line = list_line(&bot.acl, catalog());
    assert!(line.starts_with("user bot on #"), "{line}");
    assert!(
        line.ends_with(" ~* resetchannels &news +@all -@dangerous"),
        "{line}"
    );
    // `requirepass` is `default`'s password.
    let config = Config {
        requirepass: Some(Secret("s3".into())),
        ..Config::default()
    };
    let users = UserSet::from_config(&config, None).unwrap();
    assert!(users.check(b"default", b"s3").is_some());
    assert!(users.open_default().is_none());
    assert!(UserSet::from_config(&Config::default(), None)
        .unwrap()
        .open_default()
        .is_some());
}

#[test]
fn users_files_load_all_or_nothing() {
    let loaded = parse_users_file(b"user a on >x +get\n\nuser b off\n", "f", catalog()).unwrap();
    assert_eq!(loaded.len(), 2);
    let text = render_users_file(loaded.iter(), catalog());
    assert_eq!(
        parse_users_file(text.as_bytes(), "f", catalog()).unwrap(),
        loaded
    );
    let error =
        parse_users_file(b"user a on (~x +get\nuser a\nuser b %R~k\n", "f", catalog()).unwrap_err();
    assert!(
        error.starts_with("f:1: Unmatched parenthesis in selector definition."),
        "{error}"
    );
    assert!(
        error.contains("WARNING: Duplicate user 'a' found on line 2. "),
        "{error}"
    );
    assert!(error.contains("f:3: '%R~k': Read-only"), "{error}");
    assert!(error.ends_with("no change to the previously active ACL rules was performed"));

    let dir = std::env::temp_dir().join(format!("slotbridge-acl-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("users.acl");
    std::fs::write(&path, "user a on nopass +@all ~*\n").unwrap();
    let users = UserSet::from_config(&Config::default(), Some(path.clone())).unwrap();
    let before_default: Arc<LiveUser> = users.get("default").unwrap();
    assert_eq!(call(&users, &["ACL", "LOAD"]), "+OK\r\n");
    // No default line: default is closed, and every session of the old set is told.
    assert!(users.open_default().is_none());
    assert!(!matches!(
        users.refresh(&before_default),
        Freshness::Current
    ));
    std::fs::write(&path, "user a on +nosuch\n").unwrap();
    let reply = call(&users, &["ACL", "LOAD"]);
    assert!(
        reply.contains("Error in applying operation '+nosuch'"),
        "{reply}"
    );
    assert!(
        users.get("a").unwrap().acl.nopass,
        "a bad file changed the users"
    );
    // A successful LOAD ends the sessions of every old user but default, as in Redis.
    let held_a = users.get("a").unwrap();
    let held_default = users.get("default").unwrap();
    std::fs::write(
        &path,
        "user a on nopass +@all ~*\nuser default on nopass +@all\n",
    )
    .unwrap();
    assert_eq!(call(&users, &["ACL", "LOAD"]), "+OK\r\n");
    assert!(matches!(users.refresh(&held_a), Freshness::Deleted));
    assert!(matches!(
        users.refresh(&held_default),
        Freshness::Changed(_)
    ));
    assert!(users.open_default().is_some());
    std::fs::write(&path, "user a on nopass +@all ~*\n").unwrap();
    assert_eq!(call(&users, &["ACL", "LOAD"]), "+OK\r\n");
    assert_eq!(call(&users, &["ACL", "SAVE"]), "+OK\r\n");
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(
        saved.starts_with("user a on nopass ~* resetchannels +@all\n"),
        "{saved}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

#[test]
fn dryrun_and_getuser_reply_as_redis() {
    let users = UserSet::from_config(&Config::default(), None).unwrap();
    call(
        &users,
        &["ACL", "SETUSER", "r", "on", "+get", "+publish", "~k*", "&c"],
    );
    assert_eq!(
        call(&users, &["ACL", "DRYRUN", "r", "get", "k1"]),
        "+OK\r\n"
    );
    assert_eq!(
        call(&users, &["ACL", "DRYRUN", "r", "get", "x"]),
        bulk("This user has no permissions to access the 'x' key")
    );
    assert_eq!(
        call(&users, &["ACL", "DRYRUN", "r", "set", "k", "v"]),
        bulk("This user has no permissions to run the 'set' command")
    );
    assert_eq!(
        call(&users, &["ACL", "DRYRUN", "r", "publish", "d", "m"]),
        bulk("This user has no permissions to access the 'd' channel")
    );
    assert_eq!(
        call(&users, &["ACL", "DRYRUN", "nobody", "get", "k"]),
        "-ERR User 'nobody' not found\r\n"
    );
    let rules = command_rules(&users.get("r").unwrap().acl, catalog());
    assert!(
        rules == "-@all +get +publish" || rules == "-@all +publish +get",
        "{rules}"
    );
    assert_eq!(
        call(&users, &["ACL", "GETUSER", "r"]),
        format!(
            "*12\r\n{}*1\r\n{}{}*0\r\n{}{}{}{}{}{}{}*0\r\n",
            bulk("flags"),
            bulk("on"),
            bulk("passwords"),
            bulk("commands"),
            bulk(&rules),
            bulk("keys"),
            bulk("~k*"),
            bulk("channels"),
            bulk("&c"),
            bulk("selectors"),
        )
    );
    assert_eq!(call(&users, &["ACL", "GETUSER", "nobody"]), "$-1\r\n");
    assert_eq!(call(&users, &["ACL", "WHOAMI"]), "$7\r\ndefault\r\n");
    assert_eq!(
        call(&users, &["ACL", "USERS"]),
        "*2\r\n$7\r\ndefault\r\n$1\r\nr\r\n"
    );
    assert_eq!(
        call(&users, &["ACL", "SETUSER", "a b"]),
        format!("-{}\r\n", text::USERNAME_SPACES)
    );
}
