use super::*;

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|word| Bytes::copy_from_slice(word.as_bytes()))
        .collect()
}

fn parsed(line: &str) -> MoveRequest {
    parse_move(&args(line)).expect("a move").expect("valid")
}

fn refused(line: &str) -> Bytes {
    parse_move(&args(line))
        .expect("a move")
        .expect_err("an error")
}

fn mover(line: &str, proto: Proto) -> Mover {
    Mover::new(parsed(line), proto, 1000)
}

/// The command a step sends, as words (the script body shortened to its first word).
fn sent(next: &Next) -> (Side, Vec<String>) {
    let Next::Send(side, command) = next else {
        panic!("expected a command, got {next:?}");
    };
    let words = command
        .iter()
        .map(|arg| {
            let text = String::from_utf8_lossy(arg).into_owned();
            text.split(' ').next().unwrap_or_default().to_owned()
        })
        .collect();
    (*side, words)
}

fn reply(next: Next) -> Bytes {
    match next {
        Next::Reply(reply) => reply,
        other => panic!("expected the reply, got {other:?}"),
    }
}

const DUMPED: &[u8] = b"*2\r\n$5\r\nbytes\r\n:1500\r\n";

#[test]
fn parses_each_move_with_redis_errors() {
    assert_eq!(parsed("RENAME a b").kind, MoveKind::Rename { nx: false });
    assert_eq!(parsed("renamenx a b").kind, MoveKind::Rename { nx: true });
    assert_eq!(
        parsed("LMOVE a b left RIGHT").kind,
        MoveKind::Lmove {
            from: End::Left,
            to: End::Right,
            timeout: None
        }
    );
    assert_eq!(
        parsed("RPOPLPUSH a b").kind,
        MoveKind::Lmove {
            from: End::Right,
            to: End::Left,
            timeout: None
        }
    );
    assert_eq!(parsed("COPY a b").kind, MoveKind::Copy { replace: false });
    assert_eq!(
        parsed("COPY a b db 0 REPLACE").kind,
        MoveKind::Copy { replace: true }
    );
    assert_eq!(
        parsed("BRPOPLPUSH a b 1.5").kind,
        MoveKind::Lmove {
            from: End::Right,
            to: End::Left,
            timeout: Some(Bytes::from_static(b"1.5"))
        }
    );
    assert_eq!(&refused("LMOVE a b up left")[..], b"-ERR syntax error\r\n");
    assert_eq!(
        &refused("BLMOVE a b left up x")[..],
        b"-ERR syntax error\r\n"
    );
    assert_eq!(&refused("COPY a b foo")[..], b"-ERR syntax error\r\n");
    assert_eq!(&refused("COPY a b DB")[..], b"-ERR syntax error\r\n");
    assert_eq!(
        &refused("COPY a b DB x")[..],
        b"-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        &refused("COPY a b DB 16")[..],
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        &refused("COPY a b DB 1")[..],
        b"-ERR Copying to another database is not allowed in cluster mode\r\n"
    );
    assert_eq!(
        &refused("SMOVE a b")[..],
        b"-ERR wrong number of arguments for 'smove' command\r\n"
    );
    assert!(parse_move(&args("MSETNX a 1 b 2")).is_none());
}

#[test]
fn rename_watches_dumps_restores_with_the_ttl_then_deletes_if_unchanged() {
    let mut rename = mover("RENAME src dst", Proto::Resp2);
    assert_eq!(rename.start(), Next::WatchSource);
    let (side, read) = sent(&rename.step(b"+OK\r\n"));
    assert_eq!(side, Side::Source);
    assert_eq!(read[0], "EVAL");
    assert_eq!(read[3..], ["src", "1000"]);
    let (side, write) = sent(&rename.step(DUMPED));
    assert_eq!(side, Side::Destination);
    assert_eq!(write, ["RESTORE", "dst", "1500", "bytes", "REPLACE"]);
    let Next::ExecWatched(block) = rename.step(b"+OK\r\n") else {
        panic!("the delete goes on the watching connection");
    };
    assert_eq!(block, vec![args("DEL src")]);
    assert_eq!(&reply(rename.step(b"*1\r\n:1\r\n"))[..], b"+OK\r\n");
}

#[test]
fn rename_keeps_a_changed_source_and_still_answers_ok() {
    let mut rename = mover("RENAMENX src dst", Proto::Resp3);
    rename.start();
    rename.step(b"+OK\r\n");
    let (_, write) = sent(&rename.step(DUMPED));
    assert_eq!(write, ["RESTORE", "dst", "1500", "bytes"], "no REPLACE");
    assert!(matches!(rename.step(b"+OK\r\n"), Next::ExecWatched(_)));
    // EXEC's null: the source was written after the WATCH, so it was not deleted.
    assert_eq!(&reply(rename.step(b"_\r\n"))[..], b":1\r\n");
}

#[test]
fn rename_errors_and_refusals_are_redis_replies() {
    let mut missing = mover("RENAME src dst", Proto::Resp2);
    missing.start();
    missing.step(b"+OK\r\n");
    assert_eq!(
        &reply(missing.step(b"$-1\r\n"))[..],
        b"-ERR no such key\r\n"
    );

    let mut busy = mover("RENAMENX src dst", Proto::Resp2);
    busy.start();
    busy.step(b"+OK\r\n");
    busy.step(DUMPED);
    let busykey = b"-BUSYKEY Target key name already exists.\r\n";
    assert_eq!(&reply(busy.step(busykey))[..], b":0\r\n");

    let mut large = mover("RENAME src dst", Proto::Resp2);
    large.start();
    large.step(b"+OK\r\n");
    let refusal = reply(large.step(b":5000\r\n"));
    assert!(refusal.starts_with(b"-ERR proxy: cross-slot RENAME reads 5000 bytes"));

    let mut watch_refused = mover("RENAME src dst", Proto::Resp2);
    watch_refused.start();
    let error = b"-ERR proxy: node unreachable\r\n";
    assert_eq!(&reply(watch_refused.step(error))[..], error);
}

#[test]
fn a_ttl_is_kept_and_a_key_without_one_gets_none() {
    let mut no_ttl = mover("COPY src dst", Proto::Resp2);
    no_ttl.start();
    let (_, write) = sent(&no_ttl.step(b"*2\r\n$1\r\nv\r\n:-1\r\n"));
    assert_eq!(write, ["RESTORE", "dst", "0", "v"]);
    // 0 ms left must not become "no TTL".
    let mut expiring = mover("COPY src dst REPLACE", Proto::Resp2);
    expiring.start();
    let (_, write) = sent(&expiring.step(b"*2\r\n$1\r\nv\r\n:0\r\n"));
    assert_eq!(write, ["RESTORE", "dst", "1", "v", "REPLACE"]);
}

#[test]
fn copy_answers_one_zero_or_the_error() {
    for (restored, want) in [
        (&b"+OK\r\n"[..], &b":1\r\n"[..]),
        (b"-BUSYKEY Target key name already exists.\r\n", b":0\r\n"),
        (b"-ERR Bad data format\r\n", b"-ERR Bad data format\r\n"),
    ] {
        let mut copy = mover("COPY src dst", Proto::Resp2);
        assert!(matches!(copy.start(), Next::Send(Side::Source, _)));
        copy.step(DUMPED);
        assert_eq!(&reply(copy.step(restored))[..], want);
    }
    let mut missing = mover("COPY src dst", Proto::Resp2);
    missing.start();
    assert_eq!(&reply(missing.step(b"$-1\r\n"))[..], b":0\r\n");
}

#[test]
fn smove_adds_before_it_removes_and_answers_what_srem_removed() {
    let mut smove = mover("SMOVE src dst m", Proto::Resp2);
    let (side, peek) = sent(&smove.start());
    assert_eq!(
        (side, &peek[3..]),
        (Side::Source, &["src", "m"].map(String::from)[..])
    );
    let (side, add) = sent(&smove.step(b":1\r\n"));
    assert_eq!(
        (side, add),
        (
            Side::Destination,
            vec!["SADD".into(), "dst".into(), "m".into()]
        )
    );
    let (side, remove) = sent(&smove.step(b":1\r\n"));
    assert_eq!(
        (side, remove),
        (Side::Source, vec!["SREM".into(), "src".into(), "m".into()])
    );
    // Another client took the member in between: 0, as Redis would answer after it.
    assert_eq!(&reply(smove.step(b":0\r\n"))[..], b":0\r\n");
}

#[test]
fn smove_checks_types_in_redis_order() {
    let wrongtype = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    // A missing source answers 0 whatever the destination is.
    let mut missing = mover("SMOVE src dst m", Proto::Resp2);
    missing.start();
    assert_eq!(&reply(missing.step(b":-1\r\n"))[..], b":0\r\n");
    let mut not_a_set = mover("SMOVE src dst m", Proto::Resp2);
    not_a_set.start();
    assert_eq!(&reply(not_a_set.step(b":-2\r\n"))[..], wrongtype);
    // Not a member: the destination's type still decides between 0 and WRONGTYPE.
    for (dst_type, want) in [
        (&b"+none\r\n"[..], &b":0\r\n"[..]),
        (b"+set\r\n", b":0\r\n"),
        (b"+string\r\n", &wrongtype[..]),
    ] {
        let mut absent = mover("SMOVE src dst m", Proto::Resp2);
        absent.start();
        let (_, check) = sent(&absent.step(b":0\r\n"));
        assert_eq!(check, ["TYPE", "dst"]);
        assert_eq!(&reply(absent.step(dst_type))[..], want);
    }
    let mut dst_wrong = mover("SMOVE src dst m", Proto::Resp2);
    dst_wrong.start();
    dst_wrong.step(b":1\r\n");
    assert_eq!(
        &reply(dst_wrong.step(wrongtype))[..],
        wrongtype,
        "nothing removed"
    );
}

#[test]
fn lmove_pushes_then_pops_only_the_same_element() {
    let mut lmove = mover("LMOVE src dst LEFT RIGHT", Proto::Resp2);
    let (_, peek) = sent(&lmove.start());
    assert_eq!(peek[3..], ["src", "0"]);
    let (side, push) = sent(&lmove.step(b"*1\r\n$1\r\nx\r\n"));
    assert_eq!(
        (side, push),
        (
            Side::Destination,
            vec!["RPUSH".into(), "dst".into(), "x".into()]
        )
    );
    let (side, pop) = sent(&lmove.step(b":3\r\n"));
    assert_eq!(side, Side::Source);
    assert_eq!(pop[3..], ["src", "0", "x", "LPOP"]);
    assert_eq!(&reply(lmove.step(b":1\r\n"))[..], b"$1\r\nx\r\n");

    let mut rpoplpush = mover("RPOPLPUSH src dst", Proto::Resp3);
    let (_, peek) = sent(&rpoplpush.start());
    assert_eq!(peek[3..], ["src", "-1"]);
    let (_, push) = sent(&rpoplpush.step(b"*1\r\n$1\r\ny\r\n"));
    assert_eq!(push, ["LPUSH", "dst", "y"]);
    let (_, pop) = sent(&rpoplpush.step(b":1\r\n"));
    assert_eq!(pop[4..], ["-1", "y", "RPOP"]);
    // The end changed: the element stays in the source too, the reply is still it.
    assert_eq!(&reply(rpoplpush.step(b":0\r\n"))[..], b"$1\r\ny\r\n");
}

#[test]
fn lmove_of_a_missing_source_is_null_in_the_clients_protocol() {
    for (proto, null) in [(Proto::Resp2, &b"$-1\r\n"[..]), (Proto::Resp3, b"_\r\n")] {
        let mut lmove = mover("LMOVE src dst RIGHT LEFT", proto);
        lmove.start();
        assert_eq!(&reply(lmove.step(b":-1\r\n"))[..], null);
    }
    let mut wrong = mover("LMOVE src dst RIGHT LEFT", Proto::Resp2);
    wrong.start();
    assert!(reply(wrong.step(b":-2\r\n")).starts_with(b"-WRONGTYPE"));
}

#[test]
fn an_error_after_the_copy_is_the_reply() {
    let mut lmove = mover("LMOVE src dst RIGHT LEFT", Proto::Resp2);
    lmove.start();
    lmove.step(b"*1\r\n$1\r\nx\r\n");
    lmove.step(b":1\r\n");
    let lost = b"-ERR proxy: the reply from node was lost\r\n";
    assert_eq!(&reply(lmove.step(lost))[..], lost);
    // A step after the reply is a planner bug, answered as such.
    assert!(reply(lmove.step(b":1\r\n")).starts_with(b"-ERR proxy: unexpected"));
}

#[test]
fn a_blocking_move_waits_on_the_source_then_moves_as_lmove() {
    let mut blmove = mover("BLMOVE src dst RIGHT LEFT 2", Proto::Resp3);
    let Next::Block(wait) = blmove.start() else {
        panic!("a blocking move waits first");
    };
    assert_eq!(wait, args("BLMOVE src src RIGHT RIGHT 2"));
    // The source has an element now: read it, push it, pop it.
    let (side, peek) = sent(&blmove.step(b"$1\r\nx\r\n"));
    assert_eq!(
        (side, &peek[3..]),
        (Side::Source, &["src", "-1"].map(String::from)[..])
    );
    let (_, push) = sent(&blmove.step(b"*1\r\n$1\r\nx\r\n"));
    assert_eq!(push, ["LPUSH", "dst", "x"]);
    let (_, pop) = sent(&blmove.step(b":1\r\n"));
    assert_eq!(pop[4..], ["-1", "x", "RPOP"]);
    assert_eq!(&reply(blmove.step(b":1\r\n"))[..], b"$1\r\nx\r\n");
}

#[test]
fn a_blocking_move_waits_again_when_another_client_took_the_element() {
    let mut brpoplpush = mover("BRPOPLPUSH src dst 0", Proto::Resp2);
    assert!(matches!(brpoplpush.start(), Next::Block(_)));
    brpoplpush.step(b"$1\r\nx\r\n");
    // Gone by the time the proxy read the source: wait again, nothing pushed.
    assert!(matches!(brpoplpush.step(b":-1\r\n"), Next::Block(_)));
    // The wait's own answers are the reply: a timeout's null, an error.
    assert_eq!(&reply(brpoplpush.step(b"*-1\r\n"))[..], b"*-1\r\n");
    let mut resp3 = mover("BLMOVE src dst LEFT LEFT 1", Proto::Resp3);
    resp3.start();
    assert_eq!(&reply(resp3.step(b"_\r\n"))[..], b"_\r\n");
    let mut bad = mover("BLMOVE src dst LEFT LEFT x", Proto::Resp2);
    bad.start();
    let error = b"-ERR timeout is not a float or out of range\r\n";
    assert_eq!(&reply(bad.step(error))[..], error);
}
