//! The forward rewrite of requests and the reverse rewrite of replies, over the shipped
//! profile and the built-in Redis 7 command table. Expected names come from LAYOUT.md.

use super::*;
use crate::command::CommandTable;
use crate::protocol::Proto;

fn active(strict: bool) -> ActiveLayout {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/botmesh-cluster-v1.yaml"
    );
    let layout = Layout::load(path, &["mybot".to_string()]).expect("shipped profile loads");
    ActiveLayout::new(layout, strict, false)
}

fn request(args: &[&str]) -> Request {
    let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    Request {
        raw: encode_request(&refs),
        args: args
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect(),
    }
}

fn rewrite(active: &ActiveLayout, args: &[&str]) -> Result<RewrittenRequest, Bytes> {
    let table = CommandTable::builtin();
    let arg_bytes: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let spec = table.lookup(&arg_bytes).expect("known command").clone();
    active.rewrite_request(&spec, request(args))
}

fn args_of(rewritten: &RewrittenRequest) -> Vec<String> {
    rewritten
        .request
        .args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn every_key_position_is_rewritten_and_the_frame_matches() {
    let layout = active(false);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["GET", "mybot:chat:chat-1"],
            &["GET", "mybot:{ch:25}:r:chat-1"],
        ),
        (
            &[
                "EVAL",
                "return 1",
                "2",
                "mybot:msgs:chat-1",
                "mybot:msg:chat-1:m1",
                "mybot:msgs:x",
            ],
            &[
                "EVAL",
                "return 1",
                "2",
                "mybot:{m:chat-1}:z",
                "mybot:{m:chat-1}:i:m1",
                "mybot:msgs:x",
            ],
        ),
        (
            &[
                "XREAD",
                "COUNT",
                "1",
                "STREAMS",
                "mybot:msgs:chat-1",
                "mybot:lock:team:ops",
                "0",
                "mybot:msgs:x",
            ],
            &[
                "XREAD",
                "COUNT",
                "1",
                "STREAMS",
                "mybot:{m:chat-1}:z",
                "mybot:{lk:team%3Aops}:l",
                "0",
                "mybot:msgs:x",
            ],
        ),
        (
            &[
                "ZUNIONSTORE",
                "mybot:msgs:d",
                "2",
                "mybot:msgs:a",
                "mybot:msgs:b",
                "WEIGHTS",
                "1",
                "2",
            ],
            &[
                "ZUNIONSTORE",
                "mybot:{m:d}:z",
                "2",
                "mybot:{m:a}:z",
                "mybot:{m:b}:z",
                "WEIGHTS",
                "1",
                "2",
            ],
        ),
        (
            &["SORT", "mybot:msgs:a", "STORE", "mybot:msgs:b"],
            &["SORT", "mybot:{m:a}:z", "STORE", "mybot:{m:b}:z"],
        ),
        (
            &["OBJECT", "ENCODING", "mybot:chat:a:b{c}"],
            &["OBJECT", "ENCODING", "mybot:{ch:1}:r:a%3Ab%7Bc%7D"],
        ),
        (
            &["WATCH", "mybot:co:turn:chat-1:seq"],
            &["WATCH", "mybot:co:{t:chat-1}:seq"],
        ),
        (
            &["DUMP", "mybot:co:leader:sched:term"],
            &["DUMP", "mybot:co:{ld:sched}:term"],
        ),
        (&["GET", "mybot:conv:42"], &["GET", "mybot:conv:42"]),
        (&["GET", "other:chat:1"], &["GET", "other:chat:1"]),
    ];
    for (input, expected) in cases {
        let rewritten = rewrite(&layout, input).unwrap();
        assert_eq!(args_of(&rewritten), *expected, "{input:?}");
        let refs: Vec<&[u8]> = expected.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(
            rewritten.request.raw,
            encode_request(&refs),
            "{input:?} frame"
        );
    }
}

#[test]
fn unchanged_keys_keep_the_original_frame() {
    let layout = active(false);
    let original = request(&["MGET", "other:1", "mybot:conv:1"]);
    let rewritten = rewrite(&layout, &["MGET", "other:1", "mybot:conv:1"]).unwrap();
    // Same buffer, not a copy: nothing was rebuilt.
    assert_eq!(rewritten.request.raw, original.raw);
    assert!(rewritten.indexed.is_empty());
}

#[test]
fn writes_to_index_backed_keys_are_marked_for_upkeep() {
    let layout = active(false);
    let set = rewrite(&layout, &["SET", "mybot:checkpoint:c2", "v", "PX", "100"]).unwrap();
    assert_eq!(set.indexed.len(), 1);
    assert_eq!(&set.indexed[0].record[..], b"mybot:{cp:0}:r:c2");
    assert_eq!(&set.indexed[0].entry.key[..], b"mybot:{cp:0}:idx");
    assert_eq!(&set.indexed[0].entry.member[..], b"c2");
    let user = rewrite(&layout, &["HSET", "mybot:user:u1:prefs:lang", "f", "v"]).unwrap();
    assert_eq!(&user.indexed[0].entry.member[..], b"prefs:lang");
    for read in [
        &["GET", "mybot:chat:x"][..],
        &["TTL", "mybot:chat:x"],
        &["EXISTS", "mybot:chat:x"],
    ] {
        assert!(
            rewrite(&layout, read).unwrap().indexed.is_empty(),
            "{read:?} reads only"
        );
    }
    for write in [
        &["DEL", "mybot:chat:x"][..],
        &["EXPIRE", "mybot:chat:x", "1"],
        &["PERSIST", "mybot:chat:x"],
        &["GETDEL", "mybot:chat:x"],
        &["RESTORE", "mybot:chat:x", "0", "x"],
    ] {
        assert_eq!(
            rewrite(&layout, write).unwrap().indexed.len(),
            1,
            "{write:?} writes"
        );
    }
    // A script's declared keys get upkeep whatever the key spec flags say.
    let eval = rewrite(&layout, &["EVALSHA", "abc", "1", "mybot:chat:x"]).unwrap();
    assert_eq!(eval.indexed.len(), 1);
    // Non-indexed families never do.
    assert!(rewrite(&layout, &["SET", "mybot:lock:a", "1"])
        .unwrap()
        .indexed
        .is_empty());
}

#[test]
fn strict_refuses_unmatched_keys_under_a_prefix_only() {
    let strict = active(true);
    let error = rewrite(&strict, &["GET", "mybot:nosuch:1"]).unwrap_err();
    assert!(error.starts_with(b"-ERR key 'mybot:nosuch:1'"), "{error:?}");
    assert!(rewrite(&strict, &["GET", "other:nosuch:1"]).is_ok());
    let lenient = active(false);
    let passed = rewrite(&lenient, &["GET", "mybot:nosuch:1"]).unwrap();
    assert_eq!(args_of(&passed), ["GET", "mybot:nosuch:1"]);
}

#[test]
fn replies_name_legacy_keys() {
    let layout = active(false);
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let blpop = format!("*2\r\n{}{}", bulk("mybot:{m:chat-1}:z"), bulk("a"));
    let shown = layout.reverse_reply("blpop", Bytes::from(blpop)).unwrap();
    assert_eq!(
        shown,
        Bytes::from(format!("*2\r\n{}{}", bulk("mybot:msgs:chat-1"), bulk("a")))
    );
    let random = layout
        .reverse_reply("randomkey", Bytes::from(bulk("mybot:{ch:25}:r:chat-1")))
        .unwrap();
    assert_eq!(random, Bytes::from(bulk("mybot:chat:chat-1")));
    assert_eq!(
        layout.reverse_reply("randomkey", Bytes::from(bulk("mybot:{ch:25}:idx"))),
        None
    );
    let entries = format!(
        "*1\r\n*2\r\n{}{}\r\n",
        bulk("1-0"),
        "*2\r\n$1\r\nf\r\n$1\r\nv"
    );
    let xread2 = format!("*1\r\n*2\r\n{}{entries}", bulk("mybot:{m:c}:z"));
    let xread3 = format!("%1\r\n{}{entries}", bulk("mybot:{m:c}:z"));
    for (reply, head) in [(xread2, "*1\r\n*2\r\n"), (xread3, "%1\r\n")] {
        let shown = layout.reverse_reply("xread", Bytes::from(reply)).unwrap();
        assert_eq!(
            shown,
            Bytes::from(format!("{head}{}{entries}", bulk("mybot:msgs:c")))
        );
    }
    let untouched = Bytes::from_static(b":1\r\n");
    assert_eq!(
        layout.reverse_reply("get", untouched.clone()),
        Some(untouched)
    );
}

#[test]
fn keyspace_channels_map_back_and_internal_ones_drop() {
    let layout = active(false);
    assert_eq!(
        layout
            .legacy_channel(b"__keyspace@0__:mybot:{ch:25}:r:chat-1")
            .as_deref(),
        Some(&b"__keyspace@0__:mybot:chat:chat-1"[..])
    );
    assert_eq!(
        layout.legacy_channel(b"__keyspace@0__:mybot:{ch:25}:idx"),
        None
    );
    assert_eq!(
        layout.legacy_channel(b"__keyspace@0__:mybot:{meta}:layout"),
        None
    );
    assert_eq!(
        layout.legacy_channel(b"news").as_deref(),
        Some(&b"news"[..])
    );
    assert_eq!(
        layout
            .legacy_keyevent_payload(b"__keyevent@0__:set", b"mybot:{lk:a}:l")
            .as_deref(),
        Some(&b"mybot:lock:a"[..])
    );
}

/// `direct_rewrite` of `args`, next to what the layout path's rewrite makes of them.
fn direct(
    active: &ActiveLayout,
    args: &[&str],
) -> (Option<DirectRewrite>, Result<RewrittenRequest, Bytes>) {
    let table = CommandTable::builtin();
    let request = request(args);
    let spec = table.lookup(&request.args).expect("known command").clone();
    let mut keys: KeyList = SmallVec::new();
    spec.keys(&request.args, &mut keys);
    let direct = active.direct_rewrite(&spec, &request.args, &keys, Proto::Resp2);
    (direct, active.rewrite_request(&spec, request))
}

#[test]
fn requests_the_layout_only_renames_are_batched_with_the_layout_paths_frame() {
    let layout = active(false);
    for args in [
        &["SET", "mybot:lock:a", "1", "NX"][..],
        &["GET", "mybot:chat:chat-1"],
        &["HGETALL", "mybot:user:u1:prefs:theme"],
        &["GET", "mybot:conv:kept"],
        &["GET", "mybot:nosuchfamily:x"],
        &["MGET", "mybot:lock:a", "mybot:fence:a"],
    ] {
        let (direct, rewritten) = direct(&layout, args);
        let direct = direct.unwrap_or_else(|| panic!("{args:?} is batched"));
        let rewritten = rewritten.expect("the layout path accepts it");
        assert_eq!(
            direct.frame.as_ref().unwrap_or(&request(args).raw),
            &rewritten.request.raw,
            "{args:?}"
        );
        assert_eq!(
            direct.slot,
            crate::route::key_slot(&rewritten.request.args[rewritten.keys[0].index]),
            "{args:?}"
        );
        assert_eq!(
            direct.frame.is_none(),
            rewritten.request.raw == request(args).raw
        );
    }
}

#[test]
fn requests_needing_more_than_a_rename_take_the_layout_path() {
    let lenient = active(false);
    for args in [
        // Writes to an index-backed family while the upkeep script is not loaded.
        &["SET", "mybot:chat:chat-1", "v"][..],
        &["EXPIRE", "mybot:chat:chat-1", "10"],
        &["DEL", "mybot:user:u1:prefs:theme"],
        // The reply names a key.
        &["LMPOP", "1", "mybot:conv:q", "LEFT"],
        // Renamed into different slots.
        &["MGET", "mybot:lock:a", "mybot:lock:b"],
        // A script on an index-backed record (it runs with the refresh in one EXEC).
        &["EVAL", "return 1", "1", "mybot:chat:c1"],
        &[
            "EVALSHA",
            "0123456789012345678901234567890123456789",
            "1",
            "mybot:user:u1:ns:k",
        ],
    ] {
        assert_eq!(direct(&lenient, args).0, None, "{args:?}");
    }
    // A script on renamed keys without an index is renamed only.
    let script = direct(
        &lenient,
        &["EVAL", "return 1", "2", "mybot:lock:a", "mybot:fence:a"],
    );
    assert!(script.0.is_some_and(|d| !d.upkeep && d.frame.is_some()));
    let strict = active(true);
    assert_eq!(direct(&strict, &["GET", "mybot:nosuchfamily:x"]).0, None);
    assert!(direct(&strict, &["GET", "mybot:lock:a"]).0.is_some());
}

#[test]
fn writes_to_index_backed_records_are_batched_inside_the_upkeep_script() {
    let layout = active(false);
    let sha = Bytes::from_static(b"0123456789012345678901234567890123456789");
    layout.script_sha.set(sha.clone()).unwrap();
    let table = CommandTable::builtin();
    for args in [
        &["SET", "mybot:chat:chat-1", "v"][..],
        &["EXPIRE", "mybot:chat:chat-1", "10"],
        &["DEL", "mybot:user:u1:prefs:theme"],
        &["HSET", "mybot:contact:c1", "f", "v"],
    ] {
        let (direct, rewritten) = direct(&layout, args);
        let direct = direct.unwrap_or_else(|| panic!("{args:?} is batched"));
        let rewritten = rewritten.unwrap();
        let spec = table.lookup(&rewritten.request.args).unwrap();
        // What the layout path queues inside MULTI: the command inside the script.
        let queued = layout.queued_requests(spec, &rewritten, Proto::Resp2);
        assert!(direct.upkeep, "{args:?}");
        assert_eq!(direct.frame.as_ref(), Some(&queued.requests[0]), "{args:?}");
        assert_eq!(
            direct.slot,
            crate::route::key_slot(&rewritten.indexed[0].record)
        );
        // On NOSCRIPT the same call goes again by the script's body.
        let eval = upkeep_as_eval(direct.frame.as_ref().unwrap()).unwrap();
        let expected = {
            let frame = &queued.requests[0][..];
            let tail_at = frame
                .windows(sha.len())
                .position(|w| w == &sha[..])
                .unwrap()
                + sha.len()
                + 2;
            let mut out = b"*".to_vec();
            out.extend_from_slice(
                &frame[1..frame.windows(2).position(|w| w == b"\r\n").unwrap() + 2],
            );
            out.extend_from_slice(b"$4\r\nEVAL\r\n");
            out.extend_from_slice(format!("${}\r\n", UPKEEP_SCRIPT.len()).as_bytes());
            out.extend_from_slice(UPKEEP_SCRIPT.as_bytes());
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&frame[tail_at..]);
            out
        };
        assert_eq!(&eval[..], &expected[..], "{args:?}");
    }
    // Reads of the same records are renamed only.
    let (read, _) = direct(&layout, &["GET", "mybot:chat:chat-1"]);
    assert!(!read.unwrap().upkeep);
    assert_eq!(upkeep_as_eval(b"*1\r\n$4\r\nPING\r\n"), None);
}

/// Every command the batched path may take, over every pair of layout keys (kept, renamed,
/// index-backed, unmatched, outside) in its key positions: when `direct_rewrite` batches
/// a request, it sends exactly the frame the layout path would send, to the slot of every
/// cluster name, wrapped in the upkeep script exactly when the layout path wraps it.
#[test]
fn the_batched_frame_is_the_layout_paths_for_every_forwardable_command() {
    let layout = active(false);
    layout
        .script_sha
        .set(Bytes::from_static(
            b"0123456789012345678901234567890123456789",
        ))
        .unwrap();
    let table = CommandTable::builtin();
    let flags = crate::dispatch::Forwardable::of(&table, &crate::policy::Policy::default());
    let keys = [
        "mybot:conv:a",
        "mybot:lock:a",
        "mybot:fence:a",
        "mybot:chat:c1",
        "mybot:user:u1:ns:k",
        "mybot:nomatch",
        "outside:a",
    ];
    let mut batched = 0;
    for index in 0..table.len() {
        let spec = table.spec(index).unwrap();
        if spec.name.contains('|') || flags.get(index) != crate::dispatch::direct::Batchable::AsIs {
            continue;
        }
        for first in keys {
            for second in keys {
                for extra in [&[][..], &["1"][..], &["1", "2"][..], &["f", "v", "1"][..]] {
                    let mut args = vec![spec.name.as_str()];
                    args.extend([first, second]);
                    args.extend_from_slice(extra);
                    let request = request(&args);
                    if !spec.arity_ok(request.args.len()) {
                        continue;
                    }
                    let mut positions: KeyList = SmallVec::new();
                    spec.keys(&request.args, &mut positions);
                    if !layout.concerns_keys(&request.args, &positions) {
                        continue;
                    }
                    let Some(direct) =
                        layout.direct_rewrite(spec, &request.args, &positions, Proto::Resp2)
                    else {
                        continue;
                    };
                    batched += 1;
                    let raw = request.raw.clone();
                    let rewritten = layout
                        .rewrite_request(spec, request)
                        .unwrap_or_else(|e| panic!("{args:?}: {e:?}"));
                    let queued = layout.queued_requests(spec, &rewritten, Proto::Resp2);
                    assert_eq!(queued.requests.len(), 1, "{args:?}");
                    assert_eq!(
                        direct.frame.as_ref().unwrap_or(&raw),
                        &queued.requests[0],
                        "{args:?}"
                    );
                    assert_eq!(direct.upkeep, !rewritten.indexed.is_empty(), "{args:?}");
                    let names = rewritten
                        .keys
                        .iter()
                        .map(|k| &rewritten.request.args[k.index]);
                    let indices = rewritten.indexed.iter().map(|k| &k.entry.key);
                    for name in names.chain(indices) {
                        assert_eq!(crate::route::key_slot(name), direct.slot, "{args:?}");
                    }
                }
            }
        }
    }
    assert!(batched > 5000, "only {batched} requests were batched");
}
