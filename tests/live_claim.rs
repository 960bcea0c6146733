//! The claim protocol of live migration against real servers: a standalone `redis-server`
//! as the source and a 3-master cluster as the target. The dangerous interleavings are
//! produced deterministically: a move is driven up to a chosen phase and left there (as a
//! paused or killed proxy would leave it), and the other movers run against that state.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{shared_cluster, Cluster, Standalone};
use futures_util::future::join_all;
use slotbridge::live::mover::move_recorded;
use slotbridge::live::names::{claim_key, fence_key, slot_fence, EVERY_KEY_MOVED};
use slotbridge::live::{Check, Claim, KeyMove, MoveSpec, Mover, Outcome, Phase, Seal};
use slotbridge::migrate::load_layout;
use slotbridge::migrate::plan::{plan_forward, FamilyFilter, Step};

/// Short, so a test waits for a lapsed claim in well under a second.
const LEASE: Duration = Duration::from_millis(300);

/// A mover with its own connections to both sides, as another proxy would have.
async fn mover(source: &Standalone, cluster: &Cluster, lease: Duration) -> Mover {
    mover_from(&[source.addr().to_owned()], cluster, lease).await
}

async fn mover_from(source_seeds: &[String], cluster: &Cluster, lease: Duration) -> Mover {
    let from = common::endpoint(source_seeds).await;
    let to = common::endpoint(&cluster.seeds()).await;
    Mover::new(from, to, lease).await.unwrap()
}

/// Runs `cmd` on the cluster master serving `key`.
fn on_target<T: redis::FromRedisValue>(cluster: &Cluster, key: &[u8], cmd: &redis::Cmd) -> T {
    let slot = cluster.keyslot(std::str::from_utf8(key).unwrap());
    common::query(&cluster.node_for_slot(slot), cmd).unwrap()
}

fn on_source<T: redis::FromRedisValue>(source: &Standalone, cmd: &redis::Cmd) -> T {
    common::query(source.addr(), cmd).unwrap()
}

fn cmd(name: &str, args: &[&[u8]]) -> redis::Cmd {
    let mut c = redis::cmd(name);
    for a in args {
        c.arg(*a);
    }
    c
}

fn exists_on_source(source: &Standalone, key: &[u8]) -> bool {
    on_source::<i64>(source, &cmd("EXISTS", &[key])) == 1
}

/// The source is clean of `key`: neither the key nor a claim on it.
fn assert_source_clean(source: &Standalone, key: &[u8]) {
    assert!(!exists_on_source(source, key), "source still holds {key:?}");
    assert!(
        !exists_on_source(source, &claim_key(key)),
        "claim on {key:?} left"
    );
}

fn get_target(cluster: &Cluster, key: &[u8]) -> Option<Vec<u8>> {
    on_target(cluster, key, &cmd("GET", &[key]))
}

/// Drives a fresh move of `spec` until just before `phase` holds, returning where it is.
async fn pause_before(
    m: &Mover,
    spec: &MoveSpec,
    token: &Bytes,
    stop: impl Fn(&Phase) -> bool,
) -> KeyMove {
    m.drive(spec, token, KeyMove::new(), stop).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_mover_is_refused_then_takes_over_and_the_first_ones_late_seal_lands_nowhere() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:takeover".as_slice();
    on_source::<()>(&source, &cmd("SET", &[key, b"original"]));
    let spec = MoveSpec::same_name(Bytes::from_static(b"claim:takeover"));
    let (a, b) = (
        mover(&source, cluster, LEASE).await,
        mover(&source, cluster, LEASE).await,
    );

    // A claims and reads the value, then stalls before writing the target.
    let token_a = Mover::token();
    let paused = pause_before(&a, &spec, &token_a, |p| matches!(p, Phase::Seal(_))).await;
    let Phase::Seal(Some(read_by_a)) = paused.phase().clone() else {
        panic!("A should hold a value to seal: {:?}", paused.phase());
    };
    match b.claim(&spec, &Mover::token()).await.unwrap() {
        Claim::Busy { remaining_ms } => assert!(remaining_ms > 0 && remaining_ms <= 300),
        other => panic!("a live claim must refuse another mover, got {other:?}"),
    }
    assert_eq!(get_target(cluster, key), None, "nothing on the target yet");

    // B waits out A's lease, takes over and completes the move.
    let started = Instant::now();
    assert_eq!(b.run(&spec).await.unwrap(), Outcome::Moved);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "B did not wait"
    );
    assert_eq!(
        get_target(cluster, key).as_deref(),
        Some(b"original".as_slice())
    );
    assert_source_clean(&source, key);

    // A client writes the moved key; then A wakes up and sends what it read long ago.
    on_target::<()>(cluster, key, &cmd("SET", &[key, b"written after the move"]));
    assert_eq!(
        a.seal(&spec, Some(&read_by_a)).await.unwrap(),
        Seal::AlreadyMoved
    );
    assert_eq!(
        a.finish(&spec, &token_a).await.unwrap(),
        slotbridge::live::Finish::NotHolder
    );
    assert_eq!(
        get_target(cluster, key).as_deref(),
        Some(b"written after the move".as_slice()),
        "a late seal undid an acknowledged write"
    );
    // A's own machine, resumed, reads again, finds the move done and touches nothing.
    let resumed = a.drive(&spec, &token_a, paused, |_| false).await.unwrap();
    assert_eq!(resumed.phase(), &Phase::Done(Outcome::NotOnSource));
    assert_eq!(
        get_target(cluster, key).as_deref(),
        Some(b"written after the move".as_slice())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_fence_refuses_every_late_seal_of_its_slot() {
    let source = Standalone::start();
    // A cluster of its own: compacting a slot's fence refuses the first seal of any key in it.
    let cluster = Cluster::start(3, 0);
    let (key, neighbour) = (b"compact:{s}:a".as_slice(), b"compact:{s}:b".as_slice());
    on_source::<()>(&source, &cmd("SET", &[key, b"original"]));
    let spec = MoveSpec::same_name(Bytes::from_static(b"compact:{s}:a"));
    let (a, b) = (
        mover(&source, &cluster, LEASE).await,
        mover(&source, &cluster, LEASE).await,
    );
    // A reads the value and stalls; B takes over once A's lease is spent and moves the key,
    // which a client then writes. The source is empty: the walk's end compacts the fence.
    let token_a = Mover::token();
    let paused = pause_before(&a, &spec, &token_a, |p| matches!(p, Phase::Seal(_))).await;
    let Phase::Seal(Some(read_by_a)) = paused.phase().clone() else {
        panic!("A should hold a value to seal: {:?}", paused.phase());
    };
    assert_eq!(b.run(&spec).await.unwrap(), Outcome::Moved);
    on_target::<()>(
        &cluster,
        key,
        &cmd("SET", &[key, b"written after the move"]),
    );
    let slot = cluster.keyslot(std::str::from_utf8(key).unwrap());
    assert!(b.compact_fence(slot).await.unwrap(), "the slot had a fence");
    let fence = fence_key(key);
    let fields: Vec<Vec<u8>> = on_target(&cluster, key, &cmd("HKEYS", &[&fence]));
    assert_eq!(fields, [EVERY_KEY_MOVED.to_vec()], "one field for the slot");
    // Compacting again, or a slot that never had a move, changes nothing.
    assert!(b.compact_fence(slot).await.unwrap());
    let quiet = (slot + 1) % 16384;
    assert!(
        !b.compact_fence(quiet).await.unwrap(),
        "no fence to compact"
    );
    let created: i64 = on_target(
        &cluster,
        &slot_fence(quiet),
        &cmd("EXISTS", &[&slot_fence(quiet)]),
    );
    assert_eq!(created, 0, "compaction created a fence");

    // A's late seal, and any seal of its slot, lands nowhere; the move counts as recorded.
    assert_eq!(
        a.seal(&spec, Some(&read_by_a)).await.unwrap(),
        Seal::AlreadyMoved
    );
    let other = MoveSpec::same_name(Bytes::from_static(b"compact:{s}:b"));
    assert_eq!(
        a.seal(&other, Some(&read_by_a)).await.unwrap(),
        Seal::AlreadyMoved
    );
    assert_eq!(
        get_target(&cluster, key).as_deref(),
        Some(b"written after the move".as_slice()),
        "a late seal undid an acknowledged write"
    );
    assert_eq!(get_target(&cluster, neighbour), None);
    let target = common::endpoint(&cluster.seeds()).await;
    for name in [key, neighbour] {
        assert!(move_recorded(&target, name).await.unwrap(), "{name:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mover_killed_between_seal_and_finish_is_finished_by_its_successor_with_the_ttl() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:killed".as_slice();
    on_source::<()>(&source, &cmd("HSET", &[key, b"f1", b"v1", b"f2", b"v2"]));
    on_source::<()>(&source, &cmd("PEXPIRE", &[key, b"100000"]));
    let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
    {
        let doomed = mover(&source, cluster, LEASE).await;
        let token = Mover::token();
        let stopped = pause_before(&doomed, &spec, &token, |p| *p == Phase::Finish).await;
        assert_eq!(stopped.phase(), &Phase::Finish);
        // Dropped here with its connections: killed after the target write.
    }
    assert!(exists_on_source(&source, key) && exists_on_source(&source, &claim_key(key)));
    let successor = mover(&source, cluster, LEASE).await;
    assert_eq!(successor.run(&spec).await.unwrap(), Outcome::Finished);
    let all: Vec<Vec<u8>> = on_target(cluster, key, &cmd("HGETALL", &[key]));
    assert_eq!(
        all,
        [
            b"f1".to_vec(),
            b"v1".to_vec(),
            b"f2".to_vec(),
            b"v2".to_vec()
        ]
    );
    let ttl: i64 = on_target(cluster, key, &cmd("PTTL", &[key]));
    assert!(ttl > 90_000 && ttl <= 100_000, "TTL kept: {ttl}");
    assert_source_clean(&source, key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_during_a_move_waits_for_it_and_is_never_lost() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:write".as_slice();
    on_source::<()>(&source, &cmd("SET", &[key, b"old"]));
    let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
    let holder = mover(&source, cluster, Duration::from_secs(5)).await;
    let writer = mover(&source, cluster, Duration::from_secs(5)).await;
    let token = Mover::token();
    let claimed = pause_before(&holder, &spec, &token, |p| matches!(p, Phase::Seal(_))).await;

    let write = async {
        // The write path: move first, then write on the target.
        let outcome = writer.run(&spec).await.unwrap();
        let clean_when_writing = !exists_on_source(&source, key);
        on_target::<()>(cluster, key, &cmd("SET", &[key, b"new"]));
        (outcome, clean_when_writing, Instant::now())
    };
    // The holder resumes only after this pause: a writer that waited for it writes later.
    let pause = Duration::from_millis(200);
    let started = Instant::now();
    let finish_holder = async {
        tokio::time::sleep(pause).await;
        holder
            .drive(&spec, &token, claimed, |_| false)
            .await
            .unwrap()
    };
    let ((outcome, clean_when_writing, wrote_at), done) = tokio::join!(write, finish_holder);
    assert_eq!(done.phase(), &Phase::Done(Outcome::Moved));
    assert_eq!(
        outcome,
        Outcome::NotOnSource,
        "the holder moved it, not the writer"
    );
    assert!(clean_when_writing, "the write ran before the move finished");
    // Not `wrote_at` against the holder's own clock read: both futures run in one task, and
    // the writer may be polled first after the finish it waited for.
    assert!(
        wrote_at.duration_since(started) >= pause,
        "the writer did not wait for the holder"
    );
    assert_eq!(get_target(cluster, key).as_deref(), Some(b"new".as_slice()));
    assert_source_clean(&source, key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_after_its_move_never_comes_back() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:deleted".as_slice();
    on_source::<()>(&source, &cmd("SET", &[key, b"doomed"]));
    let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
    let (a, b) = (
        mover(&source, cluster, LEASE).await,
        mover(&source, cluster, LEASE).await,
    );
    // B read the value under its claim, then stalled past its lease.
    let token_b = Mover::token();
    let stale = pause_before(&b, &spec, &token_b, |p| matches!(p, Phase::Seal(_))).await;
    let Phase::Seal(old) = stale.phase().clone() else {
        unreachable!()
    };
    tokio::time::sleep(LEASE).await;
    // A client's DEL: move, then delete on the target.
    assert_eq!(a.run(&spec).await.unwrap(), Outcome::Moved);
    assert_eq!(on_target::<i64>(cluster, key, &cmd("DEL", &[key])), 1);

    assert_eq!(
        b.seal(&spec, old.as_ref()).await.unwrap(),
        Seal::AlreadyMoved
    );
    assert_eq!(a.run(&spec).await.unwrap(), Outcome::NotOnSource);
    assert_eq!(get_target(cluster, key), None, "a deleted key came back");
    assert_source_clean(&source, key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_expires_on_the_source_mid_move_is_not_revived_by_a_late_seal() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:expiring".as_slice();
    let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
    let (a, b) = (
        mover(&source, cluster, LEASE).await,
        mover(&source, cluster, LEASE).await,
    );
    // Long enough for A's claim to find it on a loaded machine, shorter than the test.
    on_source::<()>(&source, &cmd("SET", &[key, b"short", b"PX", b"1000"]));
    let token_a = Mover::token();
    let paused = pause_before(&a, &spec, &token_a, |p| matches!(p, Phase::Seal(_))).await;
    let Phase::Seal(read_by_a) = paused.phase().clone() else {
        unreachable!()
    };
    common::wait_until_async("the source key expired", Duration::from_secs(5), || {
        !exists_on_source(&source, key)
    })
    .await;
    // B takes over the lapsed claim: the key is gone, so the target is cleared and fenced.
    assert_eq!(b.run(&spec).await.unwrap(), Outcome::Moved);
    assert_eq!(
        a.seal(&spec, read_by_a.as_ref()).await.unwrap(),
        Seal::AlreadyMoved
    );
    assert_eq!(get_target(cluster, key), None);
    assert_source_clean(&source, key);
}

/// A key's type and value in a form that compares across servers: a set's or a hash's
/// order (and so its DUMP) depends on each server's hash seed.
fn contents(addr: &str, key: &[u8]) -> String {
    let kind: String = common::query(addr, &cmd("TYPE", &[key])).unwrap();
    let read = |name: &str, args: &[&[u8]]| -> Vec<Vec<u8>> {
        common::query(addr, &cmd(name, args)).unwrap()
    };
    let value = match kind.as_str() {
        "string" => format!("{:?}", read("MGET", &[key])),
        "hash" => {
            let mut fields = read("HKEYS", &[key]);
            fields.sort();
            let values: Vec<Vec<Vec<u8>>> = fields
                .iter()
                .map(|f| read("HMGET", &[key, f.as_slice()]))
                .collect();
            format!("{fields:?} {values:?}")
        }
        "list" => format!("{:?}", read("LRANGE", &[key, b"0", b"-1"])),
        "set" => {
            let mut members = read("SMEMBERS", &[key]);
            members.sort();
            format!("{members:?}")
        }
        "zset" => format!("{:?}", read("ZRANGE", &[key, b"0", b"-1", b"WITHSCORES"])),
        "stream" => {
            let entries: redis::Value =
                common::query(addr, &cmd("XRANGE", &[key, b"-", b"+"])).unwrap();
            format!("{entries:?}")
        }
        other => panic!("{key:?}: unexpected type {other}"),
    };
    format!("{kind} {value}")
}

/// One key of every family, with a TTL (and one without), as they were on the source.
fn fill_every_family(source: &Standalone, prefix: &str) -> Vec<(Vec<u8>, String, i64)> {
    let k = |name: &str| format!("{prefix}:{name}").into_bytes();
    let writes: Vec<(Vec<u8>, redis::Cmd)> = vec![
        (k("string"), cmd("SET", &[&k("string"), b"text"])),
        (
            k("hash"),
            cmd("HSET", &[&k("hash"), b"a", b"1", b"b", b"2"]),
        ),
        (k("list"), cmd("RPUSH", &[&k("list"), b"x", b"y", b"z"])),
        (k("set"), cmd("SADD", &[&k("set"), b"m1", b"m2"])),
        (
            k("zset"),
            cmd("ZADD", &[&k("zset"), b"1", b"one", b"2", b"two"]),
        ),
        (
            k("stream"),
            cmd("XADD", &[&k("stream"), b"1-1", b"field", b"value"]),
        ),
        (k("persistent"), cmd("SET", &[&k("persistent"), b"forever"])),
    ];
    let mut out = Vec::new();
    for (key, write) in writes {
        on_source::<redis::Value>(source, &write);
        if !key.ends_with(b"persistent") {
            on_source::<()>(source, &cmd("PEXPIRE", &[&key, b"100000"]));
        }
        let value = contents(source.addr(), &key);
        let pttl: i64 = on_source(source, &cmd("PTTL", &[&key]));
        out.push((key, value, pttl));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_of_value_moves_with_its_ttl() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let keys = fill_every_family(&source, "family");
    let m = mover(&source, cluster, LEASE).await;
    let kinds: Vec<String> = keys
        .iter()
        .map(|(_, value, _)| value.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["string", "hash", "list", "set", "zset", "stream", "string"]
    );
    for (key, value, pttl) in &keys {
        let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
        assert_eq!(m.run(&spec).await.unwrap(), Outcome::Moved, "{key:?}");
        let slot = cluster.keyslot(std::str::from_utf8(key).unwrap());
        let moved = contents(&cluster.node_for_slot(slot), key);
        assert_eq!(&moved, value, "{key:?}: value changed in the move");
        let ttl: i64 = on_target(cluster, key, &cmd("PTTL", &[key]));
        if *pttl == -1 {
            assert_eq!(ttl, -1, "{key:?} became volatile");
        } else {
            assert!(
                ttl > 90_000 && ttl <= *pttl,
                "{key:?}: TTL {ttl}, was {pttl}"
            );
        }
        assert_source_clean(&source, key);
        let fenced: i64 = on_target(cluster, key, &cmd("HEXISTS", &[&fence_key(key), key]));
        assert_eq!(fenced, 1, "{key:?}: the move left no fence");
    }
}

/// Drives a fresh move of `spec` until it is sealed (the claim still held), runs `between`,
/// checks the value on both sides, and finishes the move.
async fn check_before_finish(m: &Mover, spec: &MoveSpec, between: impl FnOnce()) -> Check {
    let token = Mover::token();
    let sealed = pause_before(m, spec, &token, |p| matches!(p, Phase::Finish)).await;
    assert!(sealed.wrote(), "{:?}: the seal did not write", spec.from);
    between();
    let check = m.check_value(spec).await.unwrap();
    let done = m.drive(spec, &token, sealed, |_| false).await.unwrap();
    assert_eq!(
        done.phase(),
        &Phase::Done(Outcome::Moved),
        "{:?}",
        spec.from
    );
    check
}

fn dump(addr: &str, key: &[u8]) -> Vec<u8> {
    common::query(addr, &cmd("DUMP", &[key])).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_value_is_the_same_on_both_sides_whatever_each_servers_encoding() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    // The source keeps small hashes, sorted sets and lists in their large encodings; the
    // target keeps them compact: their DUMP payloads differ, their values do not.
    for (name, value) in [
        ("hash-max-listpack-entries", "0"),
        ("zset-max-listpack-entries", "0"),
        ("list-max-listpack-size", "1"),
    ] {
        on_source::<()>(
            &source,
            &cmd("CONFIG", &[b"SET", name.as_bytes(), value.as_bytes()]),
        );
    }
    let keys = fill_every_family(&source, "digest");
    let m = mover(&source, cluster, LEASE).await;
    for (key, _, _) in &keys {
        let before = dump(source.addr(), key);
        let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
        let check = check_before_finish(&m, &spec, || {}).await;
        assert_eq!(check, Check::Same, "{key:?}");
        let slot = cluster.keyslot(std::str::from_utf8(key).unwrap());
        let after = dump(&cluster.node_for_slot(slot), key);
        if key.ends_with(b":hash") || key.ends_with(b":zset") {
            assert_ne!(before, after, "{key:?}: the encodings should differ");
        }
    }
    // A counter is compared by its number.
    let counter = layout_spec("mybot:fence:checked");
    on_source::<()>(&source, &cmd("SET", &[b"mybot:fence:checked", b"41"]));
    assert_eq!(check_before_finish(&m, &counter, || {}).await, Check::Same);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_value_differs_when_a_side_was_written_behind_the_movers_back() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let m = mover(&source, cluster, LEASE).await;
    let spec = |key: &str| MoveSpec::same_name(Bytes::copy_from_slice(key.as_bytes()));
    let differs = |check: Check, said: &str| match check {
        Check::Differs(how) => assert!(how.contains(said), "{how}"),
        other => panic!("expected a difference ({said}), got {other:?}"),
    };

    // A client still connected to the source writes the key during its move.
    on_source::<()>(&source, &cmd("SET", &[b"behind:source", b"v1"]));
    let check = check_before_finish(&m, &spec("behind:source"), || {
        on_source::<()>(&source, &cmd("SET", &[b"behind:source", b"v2"]));
    })
    .await;
    differs(check, "string's elements differ");

    // The target's copy gains a field, or a TTL, that the source's value does not have.
    on_source::<()>(&source, &cmd("HSET", &[b"behind:hash", b"a", b"1"]));
    let check = check_before_finish(&m, &spec("behind:hash"), || {
        on_target::<()>(
            cluster,
            b"behind:hash",
            &cmd("HSET", &[b"behind:hash", b"b", b"2"]),
        );
    })
    .await;
    differs(check, "hash's elements differ");
    on_source::<()>(&source, &cmd("SET", &[b"behind:ttl", b"v"]));
    let check = check_before_finish(&m, &spec("behind:ttl"), || {
        on_target::<()>(
            cluster,
            b"behind:ttl",
            &cmd("PEXPIRE", &[b"behind:ttl", b"100000"]),
        );
    })
    .await;
    differs(check, "TTL on one side only");

    // A counter lower on the target than on the source.
    let counter = layout_spec("mybot:fence:lowered");
    on_source::<()>(&source, &cmd("SET", &[b"mybot:fence:lowered", b"41"]));
    let check = check_before_finish(&m, &counter, || {
        on_target::<()>(cluster, &counter.to, &cmd("SET", &[&counter.to, b"40"]));
    })
    .await;
    differs(check, "counter 41 on the source");

    // What cannot be compared is not called a difference: a key that expired, a value past
    // the limit.
    on_source::<()>(
        &source,
        &cmd("SET", &[b"behind:expiring", b"v", b"PX", b"200"]),
    );
    let check = check_before_finish(&m, &spec("behind:expiring"), || {
        std::thread::sleep(Duration::from_millis(300));
    })
    .await;
    assert_eq!(check, Check::Unchecked);
    let mut large = cmd("SADD", &[b"behind:large"]);
    for i in 0..2000 {
        large.arg(format!("member-{i}"));
    }
    on_source::<()>(&source, &large);
    let check = check_before_finish(&m, &spec("behind:large"), || {}).await;
    assert_eq!(check, Check::Unchecked);
}

fn layout_spec(key: &str) -> MoveSpec {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/botmesh-cluster-v1.yaml"
    ));
    let layout = load_layout(&path, "mybot").unwrap();
    match plan_forward(
        &layout,
        &Bytes::copy_from_slice(key.as_bytes()),
        true,
        &FamilyFilter::default(),
    ) {
        Step::Copy(step) => MoveSpec::from_copy_step(&step),
        other => panic!("{key}: planned as {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_moves_keep_the_copy_rules_index_entries_and_rising_fences() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let m = mover(&source, cluster, LEASE).await;

    // A chat record: renamed to cluster:v1, its index entry scored with its expiry.
    on_source::<()>(
        &source,
        &cmd("SET", &[b"mybot:chat:chat-1", b"{}", b"PX", b"100000"]),
    );
    let record = layout_spec("mybot:chat:chat-1");
    assert_eq!(record.to.as_ref(), b"mybot:{ch:25}:r:chat-1");
    assert_eq!(m.run(&record).await.unwrap(), Outcome::Moved);
    let index = record.index.as_ref().unwrap();
    let score: f64 = on_target(
        cluster,
        &index.key,
        &cmd("ZSCORE", &[&index.key, &index.member]),
    );
    let expires: i64 = on_target(cluster, &record.to, &cmd("PEXPIRETIME", &[&record.to]));
    assert_eq!(score as i64, expires);
    assert_source_clean(&source, b"mybot:chat:chat-1");

    // A lock fence already higher on the target stays; a lower one rises.
    let high = layout_spec("mybot:fence:high");
    assert!(high.counter);
    on_source::<()>(&source, &cmd("SET", &[b"mybot:fence:high", b"7"]));
    on_target::<()>(cluster, &high.to, &cmd("SET", &[&high.to, b"9"]));
    m.run(&high).await.unwrap();
    assert_eq!(
        get_target(cluster, &high.to).as_deref(),
        Some(b"9".as_slice())
    );
    let low = layout_spec("mybot:fence:low");
    on_source::<()>(&source, &cmd("SET", &[b"mybot:fence:low", b"12"]));
    on_target::<()>(cluster, &low.to, &cmd("SET", &[&low.to, b"3"]));
    m.run(&low).await.unwrap();
    assert_eq!(
        get_target(cluster, &low.to).as_deref(),
        Some(b"12".as_slice())
    );
    assert_source_clean(&source, b"mybot:fence:high");
    assert_source_clean(&source, b"mybot:fence:low");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_movers_on_the_same_keys_write_each_key_once() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let keys: Vec<Bytes> = (0..150)
        .map(|i| Bytes::from(format!("claim:crowd:{i}")))
        .collect();
    for key in &keys {
        on_source::<()>(&source, &cmd("SET", &[key, key]));
    }
    let movers = [
        mover(&source, cluster, LEASE).await,
        mover(&source, cluster, LEASE).await,
        mover(&source, cluster, LEASE).await,
    ];
    let runs = movers.iter().map(|m| async {
        let mut outcomes = Vec::new();
        for key in &keys {
            outcomes.push(m.run(&MoveSpec::same_name(key.clone())).await.unwrap());
        }
        outcomes
    });
    let outcomes = join_all(runs).await;
    for (i, key) in keys.iter().enumerate() {
        let writers = outcomes.iter().filter(|o| o[i] == Outcome::Moved).count();
        assert_eq!(writers, 1, "{key:?} written by {writers} movers");
        assert_eq!(get_target(cluster, key).as_deref(), Some(key.as_ref()));
        assert_source_clean(&source, key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_lost_by_the_servers_are_sent_again_by_their_text() {
    let source = Standalone::start();
    let cluster = shared_cluster();
    let key = b"claim:flushed".as_slice();
    on_source::<()>(&source, &cmd("SET", &[key, b"kept"]));
    let m = mover(&source, cluster, LEASE).await;
    // As after a restart: the scripts the mover loaded are gone on both sides.
    on_source::<()>(&source, &cmd("SCRIPT", &[b"FLUSH"]));
    for master in cluster.masters() {
        common::query::<()>(&master, &cmd("SCRIPT", &[b"FLUSH"])).unwrap();
    }
    let spec = MoveSpec::same_name(Bytes::copy_from_slice(key));
    assert_eq!(m.run(&spec).await.unwrap(), Outcome::Moved);
    assert_eq!(
        get_target(cluster, key).as_deref(),
        Some(b"kept".as_slice())
    );
    assert_source_clean(&source, key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_source_keeps_each_claim_in_its_keys_slot() {
    let source = Cluster::start(3, 0);
    let target = shared_cluster();
    let m = mover_from(&source.seeds(), target, LEASE).await;
    let keys = [
        "cluster-source:plain",
        "a}b",
        "x{y}z",
        "{}x",
        "cluster-source:{tag}:k",
    ];
    for key in keys {
        let at = source.node_for_slot(source.keyslot(key));
        common::query::<()>(&at, &cmd("SET", &[key.as_bytes(), key.as_bytes()])).unwrap();
        // A claim in another slot would fail the script with CROSSSLOT on a cluster.
        let spec = MoveSpec::same_name(Bytes::copy_from_slice(key.as_bytes()));
        assert_eq!(m.run(&spec).await.unwrap(), Outcome::Moved, "{key}");
        assert_eq!(
            get_target(target, key.as_bytes()).as_deref(),
            Some(key.as_bytes())
        );
        let left: i64 = common::query(
            &at,
            &cmd("EXISTS", &[key.as_bytes(), &claim_key(key.as_bytes())]),
        )
        .unwrap();
        assert_eq!(left, 0, "{key}: key or claim left on the source");
    }
}
