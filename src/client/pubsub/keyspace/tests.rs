//! Keyspace translation over the shipped profile; cluster names come from LAYOUT.md's
//! worked examples (`mybot:chat:chat-1` -> `mybot:{ch:25}:r:chat-1`).

use super::*;
use crate::rewrite::Layout;

fn active() -> ActiveLayout {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/botmesh-cluster-v1.yaml"
    );
    let layout = Layout::load(path, &["mybot".to_string()]).expect("shipped profile loads");
    ActiveLayout::new(layout, false, false)
}

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn frame(header: u8, parts: &[&str]) -> Bytes {
    let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    encode(header, &parts)
}

#[test]
fn classes_follow_the_literal_start() {
    assert_eq!(pattern_class(b"news.*"), PatternClass::Ordinary);
    assert_eq!(
        pattern_class(b"__keyspace@0__:mybot:chat:*"),
        PatternClass::Keyspace
    );
    assert_eq!(pattern_class(b"__keyevent@*"), PatternClass::Keyspace);
    assert_eq!(pattern_class(b"*"), PatternClass::Mixed);
    assert_eq!(pattern_class(b"__key*"), PatternClass::Mixed);
    assert_eq!(pattern_class(b"__keys[xp]ace@*"), PatternClass::Mixed);
    assert!(is_keyspace_channel(b"__keyevent@0__:set"));
    assert!(!is_keyspace_channel(b"__keyspac"));
}

#[test]
fn channels_translate_forward_exactly() {
    let layout = active();
    assert_eq!(
        upstream_channel(Some(&layout), 1, b"__keyspace@0__:mybot:chat:chat-1"),
        b("__keyspace@0__:mybot:{ch:25}:r:chat-1")
    );
    assert_eq!(
        upstream_channel(Some(&layout), 1, b"__keyspace@0__:other:x"),
        b("__keyspace@0__:other:x")
    );
    assert_eq!(
        upstream_channel(Some(&layout), 1, b"__keyevent@0__:set"),
        b("__keyevent@0__:set")
    );
    assert_eq!(
        upstream_channel(None, 1, b"__keyspace@0__:mybot:chat:chat-1"),
        b("__keyspace@0__:mybot:chat:chat-1")
    );
}

#[test]
fn patterns_widen_to_a_cover() {
    let layout = active();
    let up = |p: &str| upstream_pattern(Some(&layout), 1, p.as_bytes());
    assert_eq!(
        up("__keyspace@0__:mybot:chat:*"),
        b("__keyspace@0__:mybot:*")
    );
    assert_eq!(
        up("__keyspace@0__:mybot:chat:chat-1"),
        b("__keyspace@0__:mybot:{ch:25}:r:chat-1")
    );
    assert_eq!(up("__keyspace@0__:my*"), b("__keyspace@0__:my*"));
    assert_eq!(up("__keyspace@0__:other:*"), b("__keyspace@0__:other:*"));
    assert_eq!(up("__keyspace@*"), b("__keyspace@*"));
    assert_eq!(up("__keyevent@0__:set"), b("__keyevent@0__:set"));
    assert_eq!(up("*"), b("*"));
    assert_eq!(
        upstream_pattern(None, 1, b"__keyspace@0__:mybot:chat:*"),
        b("__keyspace@0__:mybot:chat:*")
    );
    // Every cluster channel the client's glob can reach must match its cover.
    let cover = up("__keyspace@0__:mybot:chat:*");
    assert!(glob_match(&cover, b"__keyspace@0__:mybot:{ch:25}:r:chat-1"));
}

#[test]
fn keyspace_messages_come_back_under_legacy_names_and_client_patterns() {
    let layout = active();
    let mut upstream = Upstream::default();
    let cover = upstream_pattern(Some(&layout), 1, b"__keyspace@0__:mybot:chat:*");
    assert!(upstream.add_pattern(cover.clone(), b("__keyspace@0__:mybot:chat:*")));
    assert!(!upstream.add_pattern(cover.clone(), b("__keyspace@0__:mybot:ch*")));
    let message = frame(
        b'>',
        &[
            "pmessage",
            "__keyspace@0__:mybot:*",
            "__keyspace@0__:mybot:{ch:25}:r:chat-1",
            "set",
        ],
    );
    let expected = [
        frame(
            b'>',
            &[
                "pmessage",
                "__keyspace@0__:mybot:chat:*",
                "__keyspace@0__:mybot:chat:chat-1",
                "set",
            ],
        ),
        frame(
            b'>',
            &[
                "pmessage",
                "__keyspace@0__:mybot:ch*",
                "__keyspace@0__:mybot:chat:chat-1",
                "set",
            ],
        ),
    ]
    .concat();
    assert_eq!(
        upstream.deliver(Some(&layout), 1, message).as_deref(),
        Some(&expected[..])
    );
    // The index of the same bucket is internal: dropped.
    let index = frame(
        b'*',
        &[
            "pmessage",
            "__keyspace@0__:mybot:*",
            "__keyspace@0__:mybot:{ch:25}:idx",
            "zadd",
        ],
    );
    assert_eq!(upstream.deliver(Some(&layout), 1, index), None);
    // A key of another family is under the cover but not under the client's globs.
    let other = frame(
        b'*',
        &[
            "pmessage",
            "__keyspace@0__:mybot:*",
            "__keyspace@0__:mybot:{lk:x}:l",
            "set",
        ],
    );
    assert_eq!(upstream.deliver(Some(&layout), 1, other), None);
    assert!(!upstream.remove_pattern(&cover, b"__keyspace@0__:mybot:ch*"));
    assert!(upstream.remove_pattern(&cover, b"__keyspace@0__:mybot:chat:*"));
    assert!(upstream.is_empty());
}

#[test]
fn keyevent_payloads_map_back_and_internal_keys_drop() {
    let layout = active();
    let mut upstream = Upstream::default();
    assert!(upstream.add_channel(b("__keyevent@0__:set"), b("__keyevent@0__:set")));
    let set = frame(
        b'*',
        &["message", "__keyevent@0__:set", "mybot:{ch:25}:r:chat-1"],
    );
    assert_eq!(
        upstream.deliver(Some(&layout), 1, set),
        Some(frame(
            b'*',
            &["message", "__keyevent@0__:set", "mybot:chat:chat-1"]
        ))
    );
    let marker = frame(
        b'*',
        &["message", "__keyevent@0__:set", "mybot:{meta}:layout"],
    );
    assert_eq!(upstream.deliver(Some(&layout), 1, marker), None);
    let plain = frame(b'*', &["message", "__keyevent@0__:set", "other:x"]);
    assert_eq!(
        upstream.deliver(Some(&layout), 1, plain.clone()),
        Some(plain)
    );
}

#[test]
fn without_a_layout_messages_pass_unchanged() {
    let mut upstream = Upstream::default();
    upstream.add_pattern(b("__keyspace@0__:*"), b("__keyspace@0__:*"));
    let message = frame(
        b'*',
        &["pmessage", "__keyspace@0__:*", "__keyspace@0__:a", "set"],
    );
    assert_eq!(upstream.deliver(None, 1, message.clone()), Some(message));
    let unknown = frame(b'*', &["pmessage", "nope", "__keyspace@0__:a", "set"]);
    assert_eq!(upstream.deliver(None, 1, unknown), None);
    assert_eq!(
        upstream.deliver(None, 1, Bytes::from_static(b"junk")),
        Some(b("junk"))
    );
}
