//! Unit tests of parsing (Redis 7.0's exact error texts) and of the computations' corner
//! cases; the differential tests against a real server are in `tests/crossslot_compute.rs`.

use bytes::{Bytes, BytesMut};

use super::*;

fn args(text: &str) -> Vec<Bytes> {
    text.split(' ')
        .map(|arg| Bytes::from(arg.to_owned()))
        .collect()
}

fn error_of(text: &str) -> String {
    let reply = parse(&args(text)).expect_err(text);
    String::from_utf8(reply.to_vec()).expect("utf-8")
}

fn late_error_of(text: &str) -> String {
    let request = parse(&args(text)).expect(text);
    let values = vec![Value::Missing; request.reads.len()];
    let outcome = compute(&request, &values, Proto::Resp2, &Limits::default());
    String::from_utf8(outcome.reply.to_vec()).expect("utf-8")
}

#[test]
fn early_errors_match_redis_texts() {
    let cases = [
        (
            "sintercard 0 a",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "sintercard abc a",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "sintercard 3 a",
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
        (
            "sintercard 1 a limit -1",
            "-ERR LIMIT can't be negative\r\n",
        ),
        ("sintercard 1 a limit x", "-ERR LIMIT can't be negative\r\n"),
        ("sintercard 1 a limit", "-ERR syntax error\r\n"),
        ("sintercard 1 a foo", "-ERR syntax error\r\n"),
        (
            "zunion 0 a",
            "-ERR at least 1 input key is needed for 'zunion' command\r\n",
        ),
        (
            "zintercard 0 a",
            "-ERR at least 1 input key is needed for 'zintercard' command\r\n",
        ),
        (
            "zunion x a",
            "-ERR value is not an integer or out of range\r\n",
        ),
        ("zunion 3 a", "-ERR syntax error\r\n"),
        ("zunionstore d 2 a", "-ERR syntax error\r\n"),
        ("bitop foo d s", "-ERR syntax error\r\n"),
        (
            "bitop not d s s",
            "-ERR BITOP NOT must be called with a single source key.\r\n",
        ),
        (
            "sunion",
            "-ERR wrong number of arguments for 'sunion' command\r\n",
        ),
        (
            "zunionstore d 1",
            "-ERR wrong number of arguments for 'zunionstore' command\r\n",
        ),
        (
            "lcs a",
            "-ERR wrong number of arguments for 'lcs' command\r\n",
        ),
    ];
    for (command, expected) in cases {
        assert_eq!(error_of(command), expected, "{command}");
    }
}

#[test]
fn late_errors_come_after_type_checks() {
    let cases = [
        (
            "zunion 1 z weights x",
            "-ERR weight value is not a float\r\n",
        ),
        (
            "zunion 1 z weights nan",
            "-ERR weight value is not a float\r\n",
        ),
        (
            "zunion 1 z weights 1e400",
            "-ERR weight value is not a float\r\n",
        ),
        ("zunion 1 z aggregate foo", "-ERR syntax error\r\n"),
        ("zunion 1 z aggregate", "-ERR syntax error\r\n"),
        ("zunion 1 z weights", "-ERR syntax error\r\n"),
        (
            "zintercard 1 z limit -1",
            "-ERR LIMIT can't be negative\r\n",
        ),
        ("zintercard 1 z withscores", "-ERR syntax error\r\n"),
        ("zdiff 1 z weights 1", "-ERR syntax error\r\n"),
        ("zunionstore d 1 z withscores", "-ERR syntax error\r\n"),
        (
            "lcs a b len idx",
            "-ERR If you want both the length and indexes, please just use IDX.\r\n",
        ),
        (
            "lcs a b minmatchlen x",
            "-ERR value is not an integer or out of range\r\n",
        ),
        ("lcs a b foo", "-ERR syntax error\r\n"),
    ];
    for (command, expected) in cases {
        assert_eq!(late_error_of(command), expected, "{command}");
    }
    // A WRONGTYPE key wins over an option error, as Redis checks types first.
    let request = parse(&args("zunion 1 s weights x")).expect("parses");
    let outcome = compute(
        &request,
        &[Value::WrongType],
        Proto::Resp2,
        &Limits::default(),
    );
    assert_eq!(
        &outcome.reply[..],
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
}

#[test]
fn reads_say_how_each_key_is_read() {
    let request = parse(&args("zunionstore d 2 a b")).expect("parses");
    assert_eq!(request.destination, Some(Bytes::from_static(b"d")));
    assert_eq!(request.reads.len(), 2);
    assert_eq!(request.reads[0].kind, ReadKind::Scored);
    assert_eq!(request.reads[0].command()[0], Bytes::from_static(b"ZRANGE"));
    assert_eq!(
        request.reads[0].as_set().map(|read| read.kind),
        Some(ReadKind::Members)
    );
    let merge = parse(&args("pfmerge d a")).expect("parses");
    let keys: Vec<&[u8]> = merge.reads.iter().map(|read| &read.key[..]).collect();
    assert_eq!(keys, [&b"d"[..], b"a"], "PFMERGE reads its destination too");
}

#[test]
fn a_read_frames_the_request_its_command_names() {
    for kind in [ReadKind::Members, ReadKind::Scored, ReadKind::Text] {
        let read = Read {
            key: Bytes::from_static(b"{user}:k"),
            kind,
        };
        let mut framed = BytesMut::new();
        read.frame_into(&mut framed);
        assert_eq!(
            framed,
            crate::crossslot::moves::request_frame(&read.command()),
            "{kind:?}"
        );
    }
}

#[test]
fn sum_of_opposite_infinities_is_zero() {
    let request = parse(&args("zunion 2 a b withscores")).expect("parses");
    let m = Bytes::from_static(b"m");
    let values = [
        Value::Scored(vec![(m.clone(), f64::INFINITY)]),
        Value::Scored(vec![(m, f64::NEG_INFINITY)]),
    ];
    let outcome = compute(&request, &values, Proto::Resp3, &Limits::default());
    assert_eq!(&outcome.reply[..], b"*1\r\n*2\r\n$1\r\nm\r\n,0\r\n");
}

#[test]
fn stores_replace_the_destination_in_one_transaction() {
    let request = parse(&args("sunionstore d a")).expect("parses");
    let members: Vec<Bytes> = (0..2500).map(|n| Bytes::from(format!("m{n}"))).collect();
    let outcome = compute(
        &request,
        &[Value::Members(members)],
        Proto::Resp2,
        &Limits::default(),
    );
    assert_eq!(&outcome.reply[..], b":2500\r\n");
    let names: Vec<&[u8]> = outcome.writes.iter().map(|write| &write[0][..]).collect();
    assert_eq!(
        names,
        [&b"MULTI"[..], b"DEL", b"SADD", b"SADD", b"SADD", b"EXEC"]
    );
    let empty = compute(
        &request,
        &[Value::Missing],
        Proto::Resp2,
        &Limits::default(),
    );
    assert_eq!(&empty.reply[..], b":0\r\n");
    assert_eq!(
        empty.writes,
        vec![vec![Bytes::from_static(b"DEL"), Bytes::from_static(b"d")]]
    );
}

#[test]
fn inputs_over_the_limit_are_refused() {
    let request = parse(&args("sunion a b")).expect("parses");
    let members = |n: usize| Value::Members((0..n).map(|i| Bytes::from(i.to_string())).collect());
    let limits = Limits {
        max_members: 10,
        ..Limits::default()
    };
    let outcome = compute(&request, &[members(6), members(5)], Proto::Resp2, &limits);
    let text = String::from_utf8(outcome.reply.to_vec()).expect("utf-8");
    assert!(
        text.starts_with(
            "-ERR proxy: cross-slot SUNION reads 11 members, more than the limit of 10"
        ),
        "{text}"
    );
    assert!(outcome.writes.is_empty());
}

#[test]
fn small_integer_sets_reply_in_numeric_order() {
    let request = parse(&args("sunion a b")).expect("parses");
    let members = |list: &[&'static str]| {
        Value::Members(
            list.iter()
                .map(|m| Bytes::from_static(m.as_bytes()))
                .collect(),
        )
    };
    let outcome = compute(
        &request,
        &[members(&["10", "9"]), members(&["-1"])],
        Proto::Resp3,
        &Limits::default(),
    );
    assert_eq!(
        &outcome.reply[..],
        b"~3\r\n$2\r\n-1\r\n$1\r\n9\r\n$2\r\n10\r\n"
    );
}

#[test]
fn lcs_matches_redis_documented_example() {
    assert_eq!(&lcs::common(b"ohmytext", b"mynewtext")[..], b"mytext");
    let request = parse(&args("lcs a b idx minmatchlen 4 withmatchlen")).expect("parses");
    let values = [
        Value::Text(Bytes::from_static(b"ohmytext")),
        Value::Text(Bytes::from_static(b"mynewtext")),
    ];
    let outcome = compute(&request, &values, Proto::Resp2, &Limits::default());
    // From the LCS command's documentation.
    assert_eq!(
        &outcome.reply[..],
        &b"*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n"[..]
    );
}

#[test]
fn hll_refuses_strings_that_are_not_hyperloglogs() {
    let request = parse(&args("pfcount a b")).expect("parses");
    let values = [Value::Text(Bytes::from_static(b"HYLL\x01")), Value::Missing];
    let outcome = compute(&request, &values, Proto::Resp2, &Limits::default());
    assert_eq!(
        &outcome.reply[..],
        b"-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n"
    );
    let mut corrupt = b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
    corrupt.push(0x7f); // XZERO of 16129 registers, then nothing: short of 16384.
    corrupt.push(0x00);
    assert!(hll::registers_of(&corrupt).is_none());
    let values = [Value::Text(Bytes::from(corrupt)), Value::Missing];
    let outcome = compute(&request, &values, Proto::Resp2, &Limits::default());
    assert_eq!(
        &outcome.reply[..],
        b"-INVALIDOBJ Corrupted HLL object detected\r\n"
    );
}
