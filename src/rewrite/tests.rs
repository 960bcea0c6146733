//! Layout-level tests: LAYOUT.md's worked examples and table, precedence, round trips,
//! listings, the shipped rule files.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::route::key_slot;

fn config_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn botmesh() -> Layout {
    Layout::load(
        config_path("config/botmesh-cluster-v1.yaml"),
        &["mybot".to_owned()],
    )
    .expect("shipped profile loads")
}

fn rewritten(layout: &Layout, key: &str) -> Rewritten {
    match layout.forward(key.as_bytes()) {
        Forward::Rewritten(rewritten) => rewritten,
        other => panic!("{key} was not rewritten: {other:?}"),
    }
}

fn legacy(key: &str) -> Reverse {
    Reverse::Legacy(Bytes::copy_from_slice(key.as_bytes()))
}

/// A legacy key, its cluster key, its index entry (key, member) and its family.
type TableRow<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>, &'a str);

/// LAYOUT.md "Worked examples", plus one key for every row of its table.
#[test]
fn layout_examples_and_table_rows_translate_both_ways() {
    let layout = botmesh();
    // (legacy, cluster, index key, index member, family)
    let rows: &[TableRow] = &[
        (
            "mybot:chat:chat-1",
            "mybot:{ch:25}:r:chat-1",
            Some(("mybot:{ch:25}:idx", "chat-1")),
            "chat",
        ),
        (
            "mybot:chat:a:b{c}",
            "mybot:{ch:1}:r:a%3Ab%7Bc%7D",
            Some(("mybot:{ch:1}:idx", "a%3Ab%7Bc%7D")),
            "chat",
        ),
        (
            "mybot:checkpoint:c2",
            "mybot:{cp:0}:r:c2",
            Some(("mybot:{cp:0}:idx", "c2")),
            "checkpoint",
        ),
        ("mybot:msgs:chat-1", "mybot:{m:chat-1}:z", None, "msgs"),
        ("mybot:msg:chat-1:m1", "mybot:{m:chat-1}:i:m1", None, "msg"),
        (
            "mybot:user:u1:prefs:lang",
            "mybot:{ud:u1}:e:prefs:lang",
            Some(("mybot:{ud:u1}:idx", "prefs:lang")),
            "user",
        ),
        (
            "mybot:lock:team:ops",
            "mybot:{lk:team%3Aops}:l",
            None,
            "lock",
        ),
        (
            "mybot:co:turn:chat-1:seq",
            "mybot:co:{t:chat-1}:seq",
            None,
            "turn",
        ),
        (
            "mybot:co:leader:sched:term",
            "mybot:co:{ld:sched}:term",
            None,
            "leader_term",
        ),
        ("mybot:conv:42", "mybot:conv:42", None, "conv"),
        // The remaining rows of the table; buckets from FNV-1a vectors in LAYOUT.md.
        (
            "mybot:contact:a",
            "mybot:{ct:12}:r:a",
            Some(("mybot:{ct:12}:idx", "a")),
            "contact",
        ),
        (
            "mybot:schedule:123456789",
            "mybot:{sc:28}:r:123456789",
            Some(("mybot:{sc:28}:idx", "123456789")),
            "schedule",
        ),
        (
            "mybot:chat:user:42",
            "mybot:{ch:2}:r:user%3A42",
            Some(("mybot:{ch:2}:idx", "user%3A42")),
            "chat",
        ),
        (
            "mybot:fence:team:ops",
            "mybot:{lk:team%3Aops}:f",
            None,
            "fence",
        ),
        ("mybot:msg:a:b:m1", "mybot:{m:a%3Ab}:i:m1", None, "msg"),
        ("mybot:co:turn:c:tix", "mybot:co:{t:c}:tix", None, "turn"),
        (
            "mybot:co:turn:c:serving",
            "mybot:co:{t:c}:serving",
            None,
            "turn",
        ),
        (
            "mybot:co:turn:c:owner",
            "mybot:co:{t:c}:owner",
            None,
            "turn",
        ),
        ("mybot:co:turn:c:last", "mybot:co:{t:c}:last", None, "turn"),
        (
            "mybot:co:leader:sched",
            "mybot:co:{ld:sched}",
            None,
            "leader",
        ),
        ("mybot:cursor:x", "mybot:cursor:x", None, "cursor"),
        ("mybot:lease:x:y", "mybot:lease:x:y", None, "lease"),
        ("mybot:co:rep:x", "mybot:co:rep:x", None, "co_rep"),
        (
            "mybot:{durable:orders}:7",
            "mybot:{durable:orders}:7",
            None,
            "durable",
        ),
    ];
    for (legacy_key, cluster_key, index, family) in rows {
        let out = rewritten(&layout, legacy_key);
        assert_eq!(out.key, cluster_key.as_bytes(), "{legacy_key}");
        assert_eq!(layout.family_name(out.family), *family, "{legacy_key}");
        let expected_index = index.map(|(key, member)| IndexEntry {
            key: Bytes::copy_from_slice(key.as_bytes()),
            member: Bytes::copy_from_slice(member.as_bytes()),
        });
        assert_eq!(out.index, expected_index, "{legacy_key}");
        assert_eq!(
            layout.reverse(cluster_key.as_bytes()),
            legacy(legacy_key),
            "{cluster_key}"
        );
        if let Some(index) = &out.index {
            assert_eq!(
                key_slot(&index.key),
                key_slot(&out.key),
                "{legacy_key}: index in another slot"
            );
            assert_eq!(layout.reverse(&index.key), Reverse::Internal);
        }
    }
}

#[test]
fn other_prefixes_are_untouched() {
    let layout = botmesh();
    assert_eq!(layout.forward(b"other:chat:1"), Forward::Outside);
    assert_eq!(layout.forward(b"mybotx:chat:1"), Forward::Outside);
    assert_eq!(layout.forward(b"mybot"), Forward::Outside);
    assert_eq!(layout.forward(b""), Forward::Outside);
    assert_eq!(layout.reverse(b"other:chat:1"), Reverse::Outside);
    assert_eq!(layout.prefix_of(b"other:chat:1"), None);
}

#[test]
fn keys_under_the_prefix_without_a_rule_are_unmatched() {
    let layout = botmesh();
    assert_eq!(
        layout.forward(b"mybot:unknown:1"),
        Forward::Unmatched { prefix: 0 }
    );
    assert_eq!(
        layout.forward(b"mybot:co:turn:x:other"),
        Forward::Unmatched { prefix: 0 }
    );
    assert_eq!(layout.reverse(b"mybot:unknown:1"), Reverse::Outside);
}

#[test]
fn most_specific_rule_wins() {
    let layout = botmesh();
    let family = |key: &str| {
        layout
            .family_name(rewritten(&layout, key).family)
            .to_owned()
    };
    assert_eq!(family("mybot:co:rep:x"), "co_rep");
    assert_eq!(rewritten(&layout, "mybot:co:rep:x").key, "mybot:co:rep:x");
    assert_eq!(family("mybot:co:leader:x"), "leader");
    assert_eq!(family("mybot:co:leader:x:term"), "leader_term");
    assert_eq!(
        rewritten(&layout, "mybot:co:leader:x:term").key,
        "mybot:co:{ld:x}:term"
    );
    assert_eq!(family("mybot:co:turn:x:seq"), "turn");
    assert_eq!(
        rewritten(&layout, "mybot:co:turn:x:seq").key,
        "mybot:co:{t:x}:seq"
    );
    assert_eq!(family("mybot:co:rep:turn:x:seq"), "co_rep");
}

#[test]
fn internal_and_foreign_cluster_keys() {
    let layout = botmesh();
    assert_eq!(marker_key("mybot"), "mybot:{meta}:layout");
    assert_eq!(layout.reverse(b"mybot:{meta}:layout"), Reverse::Internal);
    assert_eq!(layout.layout_name(), Some(CLUSTER_V1));
    assert_eq!(layout.reverse(b"mybot:{ch:0}:idx"), Reverse::Internal);
    assert_eq!(layout.reverse(b"mybot:{ud:u%3A1}:idx"), Reverse::Internal);
    for foreign in [
        &b"mybot:{ch:7}:r:chat-1"[..], // wrong bucket for chat-1
        b"mybot:{ch:25}:r:%G1",        // bad escape
        b"mybot:{ch:25}:r:chat%2d1",   // lower-case / needless escape
        b"mybot:{ch:25}:r:a b",        // raw space
        b"mybot:co:{ld:x%3Aterm}",     // its legacy name belongs to the term rule
        b"mybot:{m:a}:z:extra",
    ] {
        assert_eq!(
            layout.reverse(foreign),
            Reverse::Outside,
            "{:?}",
            foreign.escape_ascii()
        );
    }
}

#[test]
fn special_bytes_are_encoded_in_cluster_keys() {
    let layout = botmesh();
    let raw = "a:{b}*?[c]\\%d e\u{1}\u{7f}ñandú";
    let out = rewritten(&layout, &format!("mybot:lock:{raw}"));
    assert_eq!(
        out.key,
        "mybot:{lk:a%3A%7Bb%7D%2A%3F%5Bc%5D%5C%25d%20e%01%7Fñandú}:l".as_bytes()
    );
}

#[test]
fn index_helpers() {
    let layout = botmesh();
    let chat = layout.family_id("chat").unwrap();
    let keys = layout.index_keys(0, chat);
    let expected: Vec<Bytes> = (0..32)
        .map(|b| Bytes::from(format!("mybot:{{ch:{b}}}:idx")))
        .collect();
    assert_eq!(keys, expected);
    assert!(layout
        .index_keys(0, layout.family_id("user").unwrap())
        .is_empty());
    assert!(layout
        .index_keys(0, layout.family_id("lock").unwrap())
        .is_empty());
    assert_eq!(
        layout
            .legacy_from_index_member(0, chat, b"a%3Ab%7Bc%7D")
            .as_deref(),
        Some(&b"mybot:chat:a:b{c}"[..])
    );
    assert_eq!(layout.legacy_from_index_member(0, chat, b"a:b"), None);
    assert_eq!(
        layout
            .legacy_from_index_entry(b"mybot:{ud:u1}:idx", b"prefs:lang")
            .as_deref(),
        Some(&b"mybot:user:u1:prefs:lang"[..])
    );
    // A member filed under the wrong bucket is not ours.
    assert_eq!(
        layout.legacy_from_index_entry(b"mybot:{ch:3}:idx", b"chat-1"),
        None
    );
}

#[test]
fn explain_names_rule_cluster_key_slot_and_index() {
    let layout = botmesh();
    let text = layout.explain(b"mybot:chat:chat-1");
    assert!(text.contains("prefix: mybot"), "{text}");
    assert!(text.contains("family chat"), "{text}");
    assert!(
        text.contains("cluster key: mybot:{ch:25}:r:chat-1"),
        "{text}"
    );
    assert!(
        text.contains(&format!("hash slot: {}", key_slot(b"ch:25"))),
        "{text}"
    );
    assert!(
        text.contains("index: mybot:{ch:25}:idx member chat-1"),
        "{text}"
    );
    assert!(layout.explain(b"other:chat:1").contains("outside"));
}

#[test]
fn rule_of_names_the_rule_forward_applies() {
    let layout = botmesh();
    let rule = layout.rule_of(b"mybot:chat:chat-1").expect("a rule");
    assert_eq!(
        (rule.family.as_str(), rule.legacy.as_str()),
        ("chat", "<p>:chat:<id...>")
    );
    let Forward::Rewritten(rewritten) = layout.forward(b"mybot:chat:chat-1") else {
        panic!("not rewritten");
    };
    assert_eq!(layout.family_name(rewritten.family), rule.family);
    assert_eq!(layout.rule_of(b"other:chat:1"), None);
    assert_eq!(layout.rule_of(b"mybot:nothing:here"), None);
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml")
        {
            out.push(path);
        }
    }
}

/// Every YAML file under `config/` that is a rule file loads and has no rule conflicts.
#[test]
fn every_rule_file_under_config_loads_without_conflicts() {
    let mut files = Vec::new();
    yaml_files(&config_path("config"), &mut files);
    let mut rule_files = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
        // Other modules keep their own YAML (proxy configuration) in config/ too.
        if value.get("rules").is_none() {
            continue;
        }
        let layout = Layout::load(&path, &["mybot".to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(layout.conflicts(), Vec::new(), "{}", path.display());
        rule_files += 1;
    }
    assert!(
        rule_files >= 2,
        "expected the shipped profile and the example"
    );
}

#[test]
fn conflicts_are_reported_with_an_example() {
    let text = r#"
rules:
  - family: a
    legacy: "<p>:x:<id...>"
    cluster: "<p>:{a:<id>}"
  - family: b
    legacy: "<p>:<id...>:x"
    cluster: "<p>:{b:<id>}"
"#;
    let layout = Layout::from_yaml_str(text, "test.yaml", &["p".to_owned()]).unwrap();
    let conflicts = layout.conflicts();
    assert_eq!(conflicts.len(), 1);
    assert_eq!((conflicts[0].first, conflicts[0].second), (1, 2));
    let example = conflicts[0].example.clone().unwrap();
    assert_eq!(example, "p:x:x");
}

#[test]
fn errors_name_the_file_and_the_rule() {
    let prefixes = ["p".to_owned()];
    let bad_rule = "rules:\n  - family: ok\n    legacy: \"<p>:a:<id>\"\n    cluster: \"<p>:{a:<id>}\"\n  - family: broken\n    legacy: \"<p>:b:<x...>:<y...>\"\n    cluster: \"<p>:{b:<x>}\"\n";
    let error = Layout::from_yaml_str(bad_rule, "rules.yaml", &prefixes)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("rules.yaml") && error.contains("rule 2") && error.contains("broken"),
        "{error}"
    );

    let unknown_field = "rules:\n  - family: a\n    legacy: \"<p>:a:<id>\"\n    clutser: \"x\"\n";
    let error = Layout::from_yaml_str(unknown_field, "f.yaml", &prefixes)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("f.yaml") && error.contains("line 4"),
        "{error}"
    );

    let missing_capture =
        "rules:\n  - family: a\n    legacy: \"<p>:a:<id>:<x>\"\n    cluster: \"<p>:{a:<id>}\"\n";
    assert!(Layout::from_yaml_str(missing_capture, "f.yaml", &prefixes).is_err());

    let split_slot = "rules:\n  - family: a\n    legacy: \"<p>:a:<id>\"\n    cluster: \"<p>:{a:<id>}\"\n    index: { key: \"<p>:{i:<b>}\", member: \"<id>\" }\n";
    assert!(Layout::from_yaml_str(split_slot, "f.yaml", &prefixes).is_err());

    let error = Layout::load("/nonexistent/layout.yaml", &prefixes)
        .unwrap_err()
        .to_string();
    assert!(error.contains("/nonexistent/layout.yaml"), "{error}");
}

#[test]
fn bad_prefixes_are_refused() {
    let text = "rules: []\n";
    for prefixes in [
        vec!["a{b".to_owned()],
        vec!["a}".to_owned()],
        vec![String::new()],
        vec!["a".to_owned(), "a".to_owned()],
        vec!["a".to_owned(), "a:b".to_owned()],
        vec![],
    ] {
        assert!(
            Layout::from_yaml_str(text, "f.yaml", &prefixes).is_err(),
            "{prefixes:?}"
        );
    }
    let from_file = "prefixes: [bot1, bot2]\nrules: []\n";
    let layout = Layout::from_yaml_str(from_file, "f.yaml", &[]).unwrap();
    assert_eq!(layout.prefixes(), ["bot1", "bot2"]);
    let overridden = Layout::from_yaml_str(from_file, "f.yaml", &["x".to_owned()]).unwrap();
    assert_eq!(overridden.prefixes(), ["x"]);
}

#[test]
fn two_prefixes_share_one_rule_file() {
    let layout = Layout::load(
        config_path("config/botmesh-cluster-v1.yaml"),
        &["bot1".to_owned(), "bot2".to_owned()],
    )
    .unwrap();
    assert_eq!(
        rewritten(&layout, "bot2:chat:chat-1").key,
        "bot2:{ch:25}:r:chat-1"
    );
    assert_eq!(
        layout.reverse(b"bot1:{ch:25}:r:chat-1"),
        legacy("bot1:chat:chat-1")
    );
    assert_eq!(
        layout.forward(b"bot2:nothing"),
        Forward::Unmatched { prefix: 1 }
    );
}

#[test]
fn hash_tag_example_keeps_derived_script_keys_in_one_slot() {
    let layout = Layout::load(
        config_path("config/examples/hash-tag-generic.yaml"),
        &["app".to_owned()],
    )
    .unwrap();
    let declared = rewritten(&layout, "app:ratelimit:sliding:42").key;
    assert_eq!(declared, "app:{rl:sliding%3A42}");
    // What the limiter script builds from KEYS[1].
    let derived = [&declared[..], b":seq"].concat();
    assert_eq!(key_slot(&derived), key_slot(&declared));
    // Without the rule the two legacy names fall in different slots.
    assert_ne!(
        key_slot(b"app:ratelimit:sliding:42"),
        key_slot(b"app:ratelimit:sliding:42:seq")
    );
    assert_eq!(
        layout.reverse(&derived),
        legacy("app:ratelimit:sliding:42:seq")
    );
    assert_eq!(
        rewritten(&layout, "app:ratelimit:sliding:42:seq").key,
        derived
    );
}

#[test]
fn listing_a_bucket_family_reads_only_its_indices() {
    let layout = botmesh();
    let plan = layout.listing_plan(b"mybot:chat:*");
    assert!(plan.indexed_only);
    assert!(plan.scan_patterns.is_empty());
    assert_eq!(plan.index_reads.len(), 1);
    let read = &plan.index_reads[0];
    assert_eq!(layout.family_name(read.family), "chat");
    assert_eq!(read.index_keys, layout.index_keys(0, read.family));
    assert_eq!(
        plan.legacy_from_index(&layout, b"mybot:{ch:25}:idx", b"chat-1")
            .as_deref(),
        Some(&b"mybot:chat:chat-1"[..])
    );
    let narrow = layout.listing_plan(b"mybot:chat:x*");
    assert_eq!(
        narrow.legacy_from_index(&layout, b"mybot:{ch:25}:idx", b"chat-1"),
        None
    );
}

#[test]
fn listing_user_data_needs_the_user_pinned() {
    let layout = botmesh();
    let pinned = layout.listing_plan(b"mybot:user:u1:prefs:*");
    assert!(pinned.indexed_only);
    assert_eq!(pinned.index_reads.len(), 1);
    assert_eq!(
        pinned.index_reads[0].index_keys,
        vec![Bytes::from_static(b"mybot:{ud:u1}:idx")]
    );
    // `mybot:user:u1:x` matches this glob but is no user-data key (it lacks `<ns>:`), so a
    // scan must still look for such stray keys; user data itself comes from the index.
    let user_only = layout.listing_plan(b"mybot:user:u1:*");
    assert!(!user_only.indexed_only);
    assert_eq!(user_only.index_reads, pinned.index_reads);
    assert_eq!(
        user_only.legacy_from_scanned(&layout, b"mybot:{ud:u1}:e:ns:k"),
        None
    );
    assert_eq!(
        user_only
            .legacy_from_scanned(&layout, b"mybot:user:u1:x")
            .as_deref(),
        Some(&b"mybot:user:u1:x"[..])
    );
    let open = layout.listing_plan(b"mybot:user:*");
    assert!(!open.indexed_only);
    assert!(open.index_reads.is_empty());
    assert_eq!(open.scan_patterns, vec![Bytes::from_static(b"mybot:*")]);
    assert_eq!(
        open.legacy_from_scanned(&layout, b"mybot:{ud:u2}:e:ns:k")
            .as_deref(),
        Some(&b"mybot:user:u2:ns:k"[..])
    );
}

#[test]
fn broad_listings_combine_indices_and_a_scan_without_duplicates() {
    let layout = botmesh();
    let plan = layout.listing_plan(b"mybot:*");
    assert!(!plan.indexed_only);
    assert_eq!(plan.scan_patterns, vec![Bytes::from_static(b"mybot:*")]);
    let mut families: Vec<&str> = plan
        .index_reads
        .iter()
        .map(|r| layout.family_name(r.family))
        .collect();
    families.sort_unstable();
    assert_eq!(families, ["chat", "checkpoint", "contact", "schedule"]);
    // Listed from the index, so dropped from the scan; internal keys never listed.
    assert_eq!(
        plan.legacy_from_scanned(&layout, b"mybot:{ch:25}:r:chat-1"),
        None
    );
    assert_eq!(
        plan.legacy_from_scanned(&layout, b"mybot:{ch:25}:idx"),
        None
    );
    assert_eq!(
        plan.legacy_from_scanned(&layout, b"mybot:{meta}:layout"),
        None
    );
    assert_eq!(
        plan.legacy_from_scanned(&layout, b"mybot:{m:chat-1}:z")
            .as_deref(),
        Some(&b"mybot:msgs:chat-1"[..])
    );
    assert_eq!(
        plan.legacy_from_scanned(&layout, b"mybot:stray").as_deref(),
        Some(&b"mybot:stray"[..])
    );
    assert_eq!(plan.legacy_from_scanned(&layout, b"other:x"), None);

    let everything = layout.listing_plan(b"*");
    assert_eq!(everything.scan_patterns, vec![Bytes::from_static(b"*")]);
    assert_eq!(
        everything
            .legacy_from_scanned(&layout, b"other:x")
            .as_deref(),
        Some(&b"other:x"[..])
    );
}

#[test]
fn listings_of_unchanged_names_scan_with_the_glob_itself() {
    let layout = botmesh();
    let plan = layout.listing_plan(b"mybot:conv:*");
    assert!(!plan.indexed_only);
    assert!(plan.index_reads.is_empty());
    assert_eq!(
        plan.scan_patterns,
        vec![Bytes::from_static(b"mybot:conv:*")]
    );
    let outside = layout.listing_plan(b"other:*");
    assert_eq!(outside.scan_patterns, vec![Bytes::from_static(b"other:*")]);
}

/// Characters that must survive the round trip: separators, braces, glob characters,
/// the escape character itself, spaces, control bytes and UTF-8.
fn id_strategy(allow_colon: bool) -> impl Strategy<Value = String> {
    let mut alphabet: Vec<&'static str> = vec![
        "{", "}", "*", "?", "[", "]", "\\", "%", " ", "\u{0}", "\u{1f}", "\u{7f}", "a", "Z", "1",
        "-", "ñ", "ú", "@", ".",
    ];
    if allow_colon {
        alphabet.push(":");
    }
    proptest::collection::vec(proptest::sample::select(alphabet), 0..12)
        .prop_map(|parts| parts.concat())
}

fn family_keys() -> impl Strategy<Value = (String, &'static [&'static str])> {
    let many = || id_strategy(true);
    let one = || id_strategy(false);
    prop_oneof![
        many().prop_map(|c| (format!("mybot:msgs:{c}"), &["msgs"][..])),
        (many(), one()).prop_map(|(c, m)| (format!("mybot:msg:{c}:{m}"), &["msg"][..])),
        many().prop_map(|i| (format!("mybot:chat:{i}"), &["chat"][..])),
        many().prop_map(|i| (format!("mybot:contact:{i}"), &["contact"][..])),
        many().prop_map(|i| (format!("mybot:checkpoint:{i}"), &["checkpoint"][..])),
        many().prop_map(|i| (format!("mybot:schedule:{i}"), &["schedule"][..])),
        (one(), one(), many())
            .prop_map(|(u, n, k)| (format!("mybot:user:{u}:{n}:{k}"), &["user"][..])),
        many().prop_map(|k| (format!("mybot:lock:{k}"), &["lock"][..])),
        many().prop_map(|k| (format!("mybot:fence:{k}"), &["fence"][..])),
        (
            many(),
            proptest::sample::select(vec!["seq", "tix", "serving", "owner", "last"])
        )
            .prop_map(|(c, f)| (format!("mybot:co:turn:{c}:{f}"), &["turn"][..])),
        many().prop_map(|n| (
            format!("mybot:co:leader:{n}"),
            &["leader", "leader_term"][..]
        )),
        many().prop_map(|n| (format!("mybot:co:leader:{n}:term"), &["leader_term"][..])),
        many().prop_map(|r| (format!("mybot:conv:{r}"), &["conv"][..])),
        many().prop_map(|r| (format!("mybot:cursor:{r}"), &["cursor"][..])),
        many().prop_map(|r| (format!("mybot:lease:{r}"), &["lease"][..])),
        many().prop_map(|r| (format!("mybot:co:rep:{r}"), &["co_rep"][..])),
        (one(), many()).prop_map(|(t, r)| (format!("mybot:{{durable:{t}}}:{r}"), &["durable"][..])),
    ]
}

proptest! {
    #[test]
    fn reverse_inverts_forward_for_every_family((key, families) in family_keys()) {
        let layout = botmesh();
        let out = match layout.forward(key.as_bytes()) {
            Forward::Rewritten(out) => out,
            other => return Err(TestCaseError::fail(format!("{key:?}: {other:?}"))),
        };
        prop_assert!(families.contains(&layout.family_name(out.family)), "{key:?}");
        prop_assert_eq!(layout.reverse(&out.key), legacy(&key));
        if let Some(index) = &out.index {
            prop_assert_eq!(key_slot(&index.key), key_slot(&out.key));
            prop_assert_eq!(layout.reverse(&index.key), Reverse::Internal);
            prop_assert_eq!(
                layout.legacy_from_index_entry(&index.key, &index.member),
                Some(Bytes::copy_from_slice(key.as_bytes()))
            );
        }
    }

    #[test]
    fn forward_and_reverse_never_panic(key in proptest::collection::vec(any::<u8>(), 0..40)) {
        let layout = botmesh();
        let mut full = b"mybot:".to_vec();
        full.extend_from_slice(&key);
        let _ = layout.forward(&full);
        if let Reverse::Legacy(legacy) = layout.reverse(&full) {
            // Whatever reverse accepts, forward maps back to it exactly.
            match layout.forward(&legacy) {
                Forward::Rewritten(out) => prop_assert_eq!(&out.key[..], &full[..]),
                other => prop_assert!(false, "{:?}", other),
            }
        }
        let _ = layout.explain(&full);
        let _ = layout.listing_plan(&key);
    }
}
