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

/// The layout stage of `args` (a known command with a valid arity).
fn stage(active: &ActiveLayout, args: &[&str]) -> Result<Option<Rewrite>, Refused> {
    let table = CommandTable::builtin();
    let request = request(args);
    let spec = table.lookup(&request.args).expect("known command");
    let mut keys: KeyList = SmallVec::new();
    spec.keys(&request.args, &mut keys);
    active.stage(spec, &request, &keys)
}

/// The upkeep plan of `args` (a write on an index-backed record) and its batched form.
fn batched_upkeep(active: &Arc<ActiveLayout>, args: &[&str]) -> Option<(u16, Bytes)> {
    let table = CommandTable::builtin();
    let original = request(args);
    let spec = table.lookup(&original.args).expect("known command");
    let mut keys: KeyList = SmallVec::new();
    spec.keys(&original.args, &mut keys);
    let rewrite = active.stage(spec, &original, &keys).ok()??;
    if rewrite.indexed.is_empty() {
        // The plan is the plain one: no upkeep to batch.
        return None;
    }
    let cluster = rewrite.request(&original);
    let plan = upkeep_plan(active, spec, cluster, &keys, &rewrite.indexed, || {
        crate::dispatch::Plan::Answer(Bytes::new())
    });
    match plan {
        crate::dispatch::Plan::Upkeep(upkeep) => upkeep.batched(&cluster.args, Proto::Resp2),
        _ => None,
    }
}

#[test]
fn requests_outside_every_prefix_are_left_alone() {
    let layout = active(true);
    for args in [
        &["GET", "other:chat:1"][..],
        &["MSET", "a", "1", "b", "2"],
        &["BLPOP", "q", "0"],
    ] {
        assert_eq!(stage(&layout, args), Ok(None), "{args:?}");
    }
}

#[test]
fn the_stage_records_what_the_reply_needs_back() {
    let layout = active(false);
    let names = |args: &[&str]| stage(&layout, args).unwrap().expect("concerned").reply;
    assert_eq!(names(&["KEYS", "*"]), ReplyNames::Listed(Listing::Keys));
    assert_eq!(names(&["SCAN", "0"]), ReplyNames::Listed(Listing::Scan));
    assert_eq!(
        names(&["RANDOMKEY"]),
        ReplyNames::Rewritten(ReplyKeys::Bulk)
    );
    assert_eq!(
        names(&["BLPOP", "mybot:msgs:a", "0"]),
        ReplyNames::Rewritten(ReplyKeys::FirstElement)
    );
    assert_eq!(
        names(&["XREAD", "STREAMS", "mybot:msgs:a", "0"]),
        ReplyNames::Rewritten(ReplyKeys::StreamNames)
    );
    assert_eq!(names(&["GET", "mybot:chat:a"]), ReplyNames::Unchanged);
    // Keyless requests concern the layout but rename nothing.
    let ping = stage(&layout, &["PING"]).unwrap().expect("keyless");
    assert_eq!(ping.renamed, None);
    assert_eq!(ping.counts, RewriteCounts::default());
}

#[test]
fn the_stage_counts_renamed_families_and_unmatched_prefixes() {
    let lenient = active(false);
    let rewrite = stage(
        &lenient,
        &["MGET", "mybot:lock:a", "mybot:conv:kept", "mybot:nosuch:x"],
    )
    .unwrap()
    .expect("concerned");
    let lock = lenient
        .layout
        .families()
        .iter()
        .position(|family| family == "lock")
        .expect("a lock family");
    assert_eq!(
        rewrite.counts,
        RewriteCounts {
            families: SmallVec::from_elem(u16::try_from(lock).unwrap(), 1),
            prefixes: SmallVec::from_elem(0, 1),
        }
    );
    // Under strict the refusal counts what was seen up to the unmatched key.
    let refused = stage(
        &active(true),
        &["MGET", "mybot:lock:a", "mybot:nosuch:x", "mybot:lock:b"],
    )
    .unwrap_err();
    assert!(refused.reply.starts_with(b"-ERR key 'mybot:nosuch:x'"));
    assert_eq!(refused.counts.families.len(), 1);
    assert_eq!(refused.counts.prefixes.as_slice(), &[0]);
}

#[test]
fn writes_to_index_backed_records_are_batched_inside_the_upkeep_script() {
    let layout = Arc::new(active(false));
    let table = CommandTable::builtin();
    // Without the script loaded they run on the planned path (EVAL by body).
    assert_eq!(
        batched_upkeep(&layout, &["SET", "mybot:chat:chat-1", "v"]),
        None
    );
    let sha = Bytes::from_static(b"0123456789012345678901234567890123456789");
    layout.script_sha.set(sha.clone()).unwrap();
    for args in [
        &["SET", "mybot:chat:chat-1", "v"][..],
        &["EXPIRE", "mybot:chat:chat-1", "10"],
        &["DEL", "mybot:user:u1:prefs:theme"],
        &["HSET", "mybot:contact:c1", "f", "v"],
    ] {
        let (slot, frame) =
            batched_upkeep(&layout, args).unwrap_or_else(|| panic!("{args:?} is batched"));
        let rewritten = rewrite(&layout, args).unwrap();
        let spec = table.lookup(&rewritten.request.args).unwrap();
        // What a transaction queues: the command inside the script.
        let queued = layout.queued_requests(spec, &rewritten, Proto::Resp2);
        assert_eq!(frame, queued.requests[0], "{args:?}");
        assert_eq!(slot, crate::route::key_slot(&rewritten.indexed[0].record));
        // On NOSCRIPT the same call goes again by the script's body.
        let eval = upkeep_as_eval(&frame).unwrap();
        let expected = {
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
    for args in [
        // Reads of the same records need no upkeep.
        &["GET", "mybot:chat:chat-1"][..],
        // A script on an index-backed record runs with the refresh in one EXEC.
        &["EVAL", "return 1", "1", "mybot:chat:c1"],
        // Records in two slots: split per slot on the planned path.
        &["DEL", "mybot:chat:a", "mybot:chat:b"],
    ] {
        assert_eq!(batched_upkeep(&layout, args), None, "{args:?}");
    }
    assert_eq!(upkeep_as_eval(b"*1\r\n$4\r\nPING\r\n"), None);
}

/// Every command the batched path may take, over every pair of layout keys (kept, renamed,
/// index-backed, unmatched, outside) in its key positions: the stage's request, or its
/// batched upkeep call, is exactly what a transaction queues for it, in the slot of every
/// cluster name.
#[test]
fn the_stage_gives_the_batched_and_the_queued_path_one_frame() {
    let layout = Arc::new(active(false));
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
    let mut compared = 0;
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
                    let original = request(&args);
                    if !spec.arity_ok(original.args.len()) {
                        continue;
                    }
                    let mut positions: KeyList = SmallVec::new();
                    spec.keys(&original.args, &mut positions);
                    let Some(rewrite) = layout.stage(spec, &original, &positions).unwrap() else {
                        continue;
                    };
                    let cluster = rewrite.request(&original);
                    let rewritten = layout
                        .rewrite_request(spec, original.clone())
                        .unwrap_or_else(|e| panic!("{args:?}: {e:?}"));
                    let queued = layout.queued_requests(spec, &rewritten, Proto::Resp2);
                    let (slot, frame) = if rewrite.indexed.is_empty() {
                        let names = positions.iter().map(|k| &cluster.args[k.index]);
                        let slots: Vec<u16> = names.map(|n| crate::route::key_slot(n)).collect();
                        // Keyless (any master) or spanning slots: not batched.
                        if slots.is_empty() || slots.iter().any(|slot| *slot != slots[0]) {
                            continue;
                        }
                        (slots[0], cluster.raw.clone())
                    } else {
                        let plan = upkeep_plan(
                            &layout,
                            spec,
                            cluster,
                            &positions,
                            &rewrite.indexed,
                            || crate::dispatch::Plan::Answer(Bytes::new()),
                        );
                        let crate::dispatch::Plan::Upkeep(upkeep) = plan else {
                            continue;
                        };
                        let Some(batched) = upkeep.batched(&cluster.args, Proto::Resp2) else {
                            continue;
                        };
                        batched
                    };
                    compared += 1;
                    assert_eq!(queued.requests.len(), 1, "{args:?}");
                    assert_eq!(frame, queued.requests[0], "{args:?}");
                    let names = positions.iter().map(|k| &cluster.args[k.index]);
                    let indices = rewrite.indexed.iter().map(|k| &k.entry.key);
                    for name in names.chain(indices) {
                        assert_eq!(crate::route::key_slot(name), slot, "{args:?}");
                    }
                }
            }
        }
    }
    assert!(compared > 5000, "only {compared} requests were compared");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn key() -> impl Strategy<Value = String> {
        let id = "[a-z0-9:{}%-]{1,12}";
        prop_oneof![
            id.prop_map(|i| format!("mybot:chat:{i}")),
            id.prop_map(|i| format!("mybot:lock:{i}")),
            id.prop_map(|i| format!("mybot:msgs:{i}")),
            id.prop_map(|i| format!("mybot:conv:{i}")),
            id.prop_map(|i| format!("mybot:nosuch:{i}")),
            id.prop_map(|i| format!("other:{i}")),
        ]
    }

    proptest! {
        /// The stage renames exactly the key positions, each as the rules forward it alone,
        /// leaves every other argument as it was, frames what it renamed, and names each
        /// record it writes with its rule's index entry; the reverse rule gives every
        /// renamed key's legacy name back.
        #[test]
        fn the_stage_is_the_rules_applied_at_the_key_positions(
            keys in proptest::collection::vec(key(), 1..5),
            command in prop_oneof![Just("MGET"), Just("DEL"), Just("MSET"), Just("EXISTS")],
        ) {
            let layout = active(false);
            let mut args: Vec<String> = vec![command.to_string()];
            for (at, key) in keys.iter().enumerate() {
                args.push(key.clone());
                if command == "MSET" {
                    args.push(format!("v{at}"));
                }
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let original = request(&refs);
            let table = CommandTable::builtin();
            let spec = table.lookup(&original.args).unwrap();
            let mut positions: KeyList = SmallVec::new();
            spec.keys(&original.args, &mut positions);
            let staged = layout.stage(spec, &original, &positions).unwrap();
            let under_a_prefix = keys.iter().any(|key| key.starts_with("mybot:"));
            prop_assert_eq!(staged.is_some(), under_a_prefix);
            let Some(rewrite) = staged else { return Ok(()) };
            let cluster = rewrite.request(&original);
            prop_assert_eq!(cluster.args.len(), original.args.len());
            let mut renamed = 0;
            for (at, (before, after)) in original.args.iter().zip(&cluster.args).enumerate() {
                let key = positions.iter().find(|k| k.index == at);
                let expected = match (key, layout.layout.forward(before)) {
                    (Some(_), Forward::Rewritten(r)) => r.key,
                    _ => before.clone(),
                };
                prop_assert_eq!(after, &expected);
                if after != before {
                    renamed += 1;
                    prop_assert_eq!(layout.legacy_name(after), Some(before.clone()));
                }
            }
            prop_assert_eq!(rewrite.counts.families.len(), renamed);
            prop_assert_eq!(rewrite.renamed.is_some(), renamed > 0);
            let frame: Vec<&[u8]> = cluster.args.iter().map(|a| &a[..]).collect();
            // An indexed request is framed only where it is sent as is.
            prop_assert_eq!(cluster.raw.is_empty(), rewrite.renamed.is_some() && !rewrite.indexed.is_empty());
            prop_assert_eq!(&framed(cluster.clone()).raw, &encode_request(&frame));
            for indexed in &rewrite.indexed {
                let Forward::Rewritten(r) = layout.layout.forward(&original.args[indexed.arg]) else {
                    return Err(TestCaseError::fail("an indexed key the rules do not rename"));
                };
                prop_assert_eq!(&indexed.record, &r.key);
                prop_assert_eq!(Some(&indexed.entry), r.index.as_ref());
                prop_assert!(command != "MGET" && command != "EXISTS", "a read keeps no index");
            }
        }
    }
}
