//! Unit tests over the shipped Redis 7.0 capture and small hand-written replies.
//! Expected values come from the Redis command docs (`COMMAND INFO` output there).

use bytes::Bytes;
use smallvec::SmallVec;

use super::*;

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

fn key_indexes(table: &CommandTable, words: &[&str]) -> Vec<usize> {
    let argv = args(words);
    let spec = table.lookup(&argv).expect("known command");
    let mut out = SmallVec::new();
    spec.keys(&argv, &mut out);
    out.iter().map(|k| k.index).collect()
}

#[test]
fn builtin_capture_parses_every_command() {
    let table = CommandTable::builtin();
    // Redis 7.0.15 has 240 top-level commands and 126 subcommands.
    let top_level = table.iter().filter(|s| !s.name.contains('|')).count();
    assert_eq!(top_level, 240);
    assert_eq!(table.len(), 366);
    assert!(!table.is_empty());
    assert!(table.get("object|encoding").is_some());
    assert!(table.get("cluster|count-failure-reports").is_some());
}

#[test]
fn get_spec_matches_the_docs() {
    let table = CommandTable::builtin();
    let get = table.get("get").expect("get");
    assert_eq!(get.name(), "get");
    assert_eq!(get.arity, 2);
    assert!(get.flags.has(CommandFlags::READONLY) && get.flags.has(CommandFlags::FAST));
    assert!(!get.is_write());
    assert_eq!((get.first_key, get.last_key, get.step), (1, 1, 1));
    assert!(get.has_acl_category("read") && get.has_acl_category("@string"));
    assert!(get.has_acl_category("fast") && !get.has_acl_category("write"));
    assert_eq!(
        get.key_specs,
        [KeySpec {
            flags: KeyFlags(KeyFlags::RO | KeyFlags::ACCESS),
            begin_search: BeginSearch::Index(1),
            find_keys: FindKeys::Range {
                lastkey: 0,
                step: 1,
                limit: 0
            },
        }]
    );
}

#[test]
fn keyword_and_keynum_specs_parse() {
    let table = CommandTable::builtin();
    let xread = table.get("xread").expect("xread");
    assert_eq!(
        xread.key_specs[0].begin_search,
        BeginSearch::Keyword {
            keyword: Bytes::from_static(b"STREAMS"),
            startfrom: 1
        }
    );
    assert_eq!(
        xread.key_specs[0].find_keys,
        FindKeys::Range {
            lastkey: -1,
            step: 1,
            limit: 2
        }
    );
    let eval = table.get("eval").expect("eval");
    assert_eq!(eval.key_specs[0].begin_search, BeginSearch::Index(2));
    assert_eq!(
        eval.key_specs[0].find_keys,
        FindKeys::Keynum {
            keynumidx: 0,
            firstkey: 1,
            step: 1
        }
    );
    let sort = table.get("sort").expect("sort");
    assert!(sort
        .key_specs
        .iter()
        .any(|s| s.begin_search == BeginSearch::Unknown && s.find_keys == FindKeys::Unknown));
    let migrate = table.get("migrate").expect("migrate");
    assert!(migrate.key_specs[1].flags.has(KeyFlags::INCOMPLETE));
    let set = table.get("set").expect("set");
    assert!(set.key_specs[0].flags.has(KeyFlags::VARIABLE_FLAGS));
    let ssubscribe = table.get("ssubscribe").expect("ssubscribe");
    assert!(ssubscribe.key_specs[0].flags.has(KeyFlags::NOT_KEY));
}

#[test]
fn lookup_is_case_insensitive_and_resolves_subcommands() {
    let table = CommandTable::builtin();
    let name = |words: &[&str]| table.lookup(&args(words)).map(|s| s.name.clone());
    assert_eq!(name(&["gEt", "k"]).as_deref(), Some("get"));
    assert_eq!(
        name(&["OBJECT", "ENCODING", "k"]).as_deref(),
        Some("object|encoding")
    );
    assert_eq!(
        name(&["object", "Freq", "k"]).as_deref(),
        Some("object|freq")
    );
    assert_eq!(
        name(&["xinfo", "STREAM", "s"]).as_deref(),
        Some("xinfo|stream")
    );
    assert_eq!(
        name(&["Cluster", "COUNT-FAILURE-REPORTS", "id"]).as_deref(),
        Some("cluster|count-failure-reports")
    );
    // Unknown or missing subcommand: the container's own spec.
    assert_eq!(name(&["OBJECT", "nosuch"]).as_deref(), Some("object"));
    assert_eq!(name(&["OBJECT"]).as_deref(), Some("object"));
    let long_sub = "x".repeat(MAX_NAME_LEN);
    assert_eq!(name(&["config", &long_sub]).as_deref(), Some("config"));
    // A plain command never reads its first argument as a subcommand.
    assert_eq!(name(&["GET", "encoding"]).as_deref(), Some("get"));
    assert_eq!(name(&["nosuchcommand"]), None);
    // A subcommand's internal name sent as a command is unknown, as on Redis.
    assert_eq!(name(&["CONFIG|GET", "x"]), None);
    assert_eq!(name(&["object|encoding", "k"]), None);
    assert_eq!(name(&["cluster|count-failure-reports", "id"]), None);
    assert_eq!(name(&[&"g".repeat(MAX_NAME_LEN + 1)]), None);
    assert_eq!(name(&[""]), None);
    assert_eq!(name(&[]), None);
}

#[test]
fn arity_follows_redis_rules() {
    let table = CommandTable::builtin();
    let get = table.get("get").expect("get"); // arity 2
    assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
    let set = table.get("set").expect("set"); // arity -3
    assert!(!set.arity_ok(2) && set.arity_ok(3) && set.arity_ok(7));
    let encoding = table.get("object|encoding").expect("object|encoding"); // arity 3
    assert!(encoding.arity_ok(3) && !encoding.arity_ok(4));
}

#[test]
fn blocking_helpers() {
    let table = CommandTable::builtin();
    let blocks = |words: &[&str]| {
        let argv = args(words);
        table.lookup(&argv).expect("known").blocks(&argv)
    };
    assert!(blocks(&["BLPOP", "a", "b", "0"]));
    assert!(blocks(&["BZMPOP", "1", "1", "z", "MIN"]));
    assert!(blocks(&["WAIT", "1", "0"]));
    assert!(!blocks(&["LPOP", "a"]));
    assert!(!blocks(&["XREAD", "COUNT", "2", "STREAMS", "s", "0"]));
    assert!(blocks(&[
        "XREAD", "COUNT", "2", "BLOCK", "0", "STREAMS", "s", "0"
    ]));
    assert!(blocks(&[
        "xreadgroup",
        "GROUP",
        "g",
        "c",
        "block",
        "10",
        "STREAMS",
        "s",
        ">"
    ]));
    assert!(!blocks(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "NOACK",
        "STREAMS",
        "block",
        ">"
    ]));
    // A stream named BLOCK after STREAMS is not the option.
    assert!(!blocks(&["XREAD", "STREAMS", "BLOCK", "0"]));

    let get = |name: &str| table.get(name).expect(name).clone();
    assert!(get("blpop").is_blocking() && get("xread").is_blocking());
    assert!(get("set").is_write() && !get("get").is_write());
    assert!(get("publish").is_pubsub() && get("subscribe").is_pubsub());
    assert!(!get("get").is_pubsub());
}

#[test]
fn key_positions_from_specs_and_routines() {
    let table = CommandTable::builtin();
    assert_eq!(key_indexes(&table, &["MSET", "a", "1", "b", "2"]), [1, 3]);
    assert_eq!(
        key_indexes(&table, &["EVAL", "s", "2", "a", "b", "x"]),
        [3, 4]
    );
    assert!(key_indexes(&table, &["EVAL", "s", "0", "x"]).is_empty());
    assert_eq!(
        key_indexes(&table, &["ZUNIONSTORE", "d", "2", "a", "b"]),
        [1, 3, 4]
    );
    assert_eq!(
        key_indexes(
            &table,
            &["XREAD", "COUNT", "1", "STREAMS", "a", "b", "0", "0"]
        ),
        [4, 5]
    );
    assert_eq!(
        key_indexes(&table, &["SORT", "k", "BY", "store", "STORE", "d"]),
        [1, 5]
    );
    assert_eq!(
        key_indexes(
            &table,
            &["MIGRATE", "h", "1", "", "0", "10", "KEYS", "a", "b"]
        ),
        [7, 8]
    );
    assert_eq!(key_indexes(&table, &["OBJECT", "ENCODING", "k"]), [2]);
    // SSUBSCRIBE's channels are not keys.
    assert!(key_indexes(&table, &["SSUBSCRIBE", "c"]).is_empty());
    // Short or malformed lists give what Redis would find, without panicking.
    assert!(key_indexes(&table, &["EVAL", "s", "5", "a"]).is_empty());
    assert!(key_indexes(&table, &["EVAL"]).is_empty());
    assert!(key_indexes(&table, &["GET"]).is_empty());
    assert!(key_indexes(&table, &["XREAD", "STREAMS"]).is_empty());

    let argv = args(&["SET", "k", "v", "GET"]);
    let mut out = SmallVec::new();
    table.lookup(&argv).expect("set").keys(&argv, &mut out);
    assert_eq!(
        out[0].flags,
        KeyFlags(KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE)
    );
    let argv = args(&["SET", "k", "v"]);
    table.lookup(&argv).expect("set").keys(&argv, &mut out);
    assert_eq!(out[0].flags, KeyFlags(KeyFlags::OW | KeyFlags::UPDATE));
}

/// GET's entry as Redis 7.0 sends it after `HELLO 3`: sets for flags, tips, key specs
/// and subcommands; maps inside key specs.
const GET_RESP3: &[u8] = b"*1\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n\
:1\r\n:1\r\n:1\r\n~3\r\n+@read\r\n+@string\r\n+@fast\r\n~0\r\n\
~1\r\n%3\r\n$5\r\nflags\r\n~2\r\n+RO\r\n+access\r\n\
$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n\
$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n\
%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n~0\r\n";

#[test]
fn resp3_reply_reads_like_resp2() {
    let resp3 = CommandTable::from_command_reply(GET_RESP3).expect("resp3 parses");
    let from3 = resp3.get("get").expect("get");
    let builtin = CommandTable::builtin();
    let from2 = builtin.get("get").expect("get");
    assert_eq!(from3.arity, from2.arity);
    assert_eq!(from3.flags, from2.flags);
    assert_eq!(from3.acl_categories, from2.acl_categories);
    assert_eq!(from3.key_specs, from2.key_specs);
}

#[test]
fn redis6_entries_use_the_legacy_triple() {
    // Redis 6 MSET (keys 1, -1, step 2) and RENAME (keys 1, 2, step 1): 7 fields, no
    // key specs.
    let reply = b"*2\r\n*7\r\n$4\r\nmset\r\n:-3\r\n*2\r\n+write\r\n+denyoom\r\n\
:1\r\n:-1\r\n:2\r\n*3\r\n+@write\r\n+@string\r\n+@slow\r\n\
*7\r\n$6\r\nrename\r\n:3\r\n*1\r\n+write\r\n:1\r\n:2\r\n:1\r\n*0\r\n";
    let table = CommandTable::from_command_reply(reply).expect("parses");
    assert_eq!(key_indexes(&table, &["mset", "a", "1", "b", "2"]), [1, 3]);
    assert_eq!(key_indexes(&table, &["RENAME", "a", "b"]), [1, 2]);
    // Too few arguments for the fixed range: Redis finds no keys.
    assert!(key_indexes(&table, &["rename", "a"]).is_empty());
}

#[test]
fn bad_replies_are_errors_not_panics() {
    let capture = include_bytes!("redis7_command.resp");
    for cut in [0, 1, 10, capture.len() / 2, capture.len() - 1] {
        assert!(
            CommandTable::from_command_reply(&capture[..cut]).is_err(),
            "cut {cut}"
        );
    }
    let mut trailing = capture.to_vec();
    trailing.extend_from_slice(b"+OK\r\n");
    assert!(CommandTable::from_command_reply(&trailing).is_err());
    for bad in [
        &b"-ERR unknown command\r\n"[..],
        b"+OK\r\n",
        b"*1\r\n:1\r\n",
        b"*1\r\n*2\r\n$3\r\nget\r\n:2\r\n",
        b"*1\r\n*6\r\n:1\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
        b"*1\r\n*6\r\n$1\r\nx\r\n$1\r\ny\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
        b"garbage",
    ] {
        assert!(CommandTable::from_command_reply(bad).is_err(), "{bad:?}");
    }
    // An empty array is a valid (empty) table.
    assert!(CommandTable::from_command_reply(b"*0\r\n")
        .expect("empty")
        .is_empty());
}

#[test]
fn every_command_survives_short_and_odd_arguments() {
    let table = CommandTable::builtin();
    let words = ["1", "-1", "0", "STORE", "KEYS", "STREAMS", "GET", "", "x"];
    let mut out = SmallVec::new();
    for spec in table.iter() {
        // The command's own name words first, as a client sends them.
        let head: Vec<Bytes> = spec
            .name
            .split('|')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        for len in 0..=3u32 {
            for mut code in 0..(words.len() as u32).pow(len) {
                let mut argv = head.clone();
                for _ in 0..len {
                    argv.push(Bytes::from_static(words[(code % 9) as usize].as_bytes()));
                    code /= 9;
                }
                spec.keys(&argv, &mut out);
                assert!(out.iter().all(|k| k.index < argv.len()), "{argv:?}");
                let _ = spec.blocks(&argv);
            }
        }
        spec.keys(&[], &mut out);
        assert!(out.is_empty() || spec.key_specs.is_empty());
    }
}

/// What `lookup_index` must answer, by a linear search over the table's names.
fn lookup_by_search(table: &CommandTable, argv: &[Bytes]) -> Option<usize> {
    let folded = |word: &[u8]| word.to_ascii_lowercase();
    let first = folded(argv.first()?);
    // A subcommand's `container|sub` name is no command, as in Redis.
    if first.len() > MAX_NAME_LEN || first.contains(&b'|') {
        return None;
    }
    let position = |name: &[u8]| table.iter().position(|spec| spec.name.as_bytes() == name);
    let index = position(&first)?;
    if !table.spec(index)?.has_subcommands {
        return Some(index);
    }
    let sub = argv.get(1).and_then(|sub| {
        let full = [first.as_slice(), b"|", &folded(sub)].concat();
        (full.len() <= MAX_NAME_LEN)
            .then(|| position(&full))
            .flatten()
    });
    Some(sub.unwrap_or(index))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// The packed fast path and the byte-slice map answer as a search of the names would:
    /// table names in any case, cut or extended, with NUL bytes, and names past 16 bytes.
    #[test]
    fn lookup_answers_as_a_search_of_the_names(
        pick in 0usize..1000,
        case_mask in proptest::prelude::any::<u64>(),
        edit in 0u8..5,
        noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20),
        sub in proptest::option::of("[a-zA-Z|-]{0,30}"),
    ) {
        let table = CommandTable::builtin();
        let names: Vec<&str> = table.iter().map(|spec| spec.name.as_str()).collect();
        let name = names[pick % names.len()].as_bytes();
        let mut word: Vec<u8> = name
            .iter()
            .enumerate()
            .map(|(i, &b)| if case_mask >> (i % 64) & 1 == 1 { b.to_ascii_uppercase() } else { b })
            .collect();
        match edit {
            0 => {}
            1 => word.truncate(noise.len() % (word.len() + 1)),
            2 => word.extend_from_slice(&noise),
            3 => word.push(0),
            _ => word = noise.clone(),
        }
        let mut argv = vec![Bytes::from(word)];
        argv.extend(sub.map(Bytes::from));
        proptest::prop_assert_eq!(table.lookup_index(&argv), lookup_by_search(&table, &argv));
    }
}

#[test]
fn an_error_or_too_deep_a_reply_is_refused_unread() {
    assert_eq!(
        CommandTable::from_command_reply(b"-ERR unknown command\r\n").err(),
        Some("COMMAND reply: server error: ERR unknown command".to_owned())
    );
    // Reading subcommands recurses: the depth is measured before anything is read.
    let deep = "*1\r\n".repeat(100_000) + ":1\r\n";
    let refused = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || CommandTable::from_command_reply(deep.as_bytes()).err())
        .expect("spawn")
        .join()
        .expect("no overflow");
    assert_eq!(
        refused,
        Some("COMMAND reply: frame nests deeper than 32 levels".to_owned())
    );
}
