use super::*;

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|word| Bytes::copy_from_slice(word.as_bytes()))
        .collect()
}

fn parsed(line: &str) -> StreamRead {
    parse_stream_read(&args(line))
        .expect("an XREAD")
        .expect("valid arguments")
}

fn refused(line: &str) -> String {
    let reply = parse_stream_read(&args(line))
        .expect("an XREAD")
        .expect_err("refused");
    String::from_utf8_lossy(&reply).into_owned()
}

fn frame(bytes: &str) -> Bytes {
    Bytes::copy_from_slice(bytes.as_bytes())
}

fn text(bytes: &Bytes) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn only_xread_is_parsed_here() {
    assert!(parse_stream_read(&args("XREADGROUP GROUP g c STREAMS a b > >")).is_none());
    assert!(parse_stream_read(&args("BLPOP a b 0")).is_none());
    assert!(parse_stream_read(&[]).is_none());
}

#[test]
fn options_are_read_as_redis_reads_them() {
    let read = parsed("xread count 5 block 100 streams a b 0 $");
    assert_eq!(read.keys, args("a b"));
    assert_eq!(read.client_ids(), &args("0 $")[..]);
    assert_eq!(read.count, Some(5));
    assert_eq!(read.block, Some(Some(Duration::from_millis(100))));
    // BLOCK 0 waits for ever; no BLOCK does not wait; the last of a repeated option counts.
    assert_eq!(parsed("XREAD BLOCK 0 STREAMS a b 0 0").block, Some(None));
    assert_eq!(parsed("XREAD STREAMS a b 0 0").block, None);
    assert_eq!(
        parsed("XREAD COUNT 1 COUNT 2 STREAMS a b 0 0").count,
        Some(2)
    );
    // A COUNT of 0 or less is no limit, as in Redis.
    assert_eq!(parsed("XREAD COUNT -5 STREAMS a b 0 0").count, None);
    assert_eq!(parsed("XREAD COUNT 0 STREAMS a b 0 0").count, None);
    // "streams" as a key name after STREAMS is a key.
    assert_eq!(
        parsed("XREAD STREAMS streams block 0 0").keys,
        args("streams block")
    );
}

#[test]
fn bad_arguments_get_redis_7_0s_errors() {
    assert_eq!(
        refused("XREAD STREAMS a b 0"),
        "-ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.\r\n"
    );
    assert_eq!(
        refused("XREAD BLOCK x STREAMS a b 0 0"),
        "-ERR timeout is not an integer or out of range\r\n"
    );
    assert_eq!(
        refused("XREAD BLOCK 1.5 STREAMS a b 0 0"),
        "-ERR timeout is not an integer or out of range\r\n"
    );
    assert_eq!(
        refused("XREAD BLOCK -1 STREAMS a b 0 0"),
        "-ERR timeout is negative\r\n"
    );
    assert_eq!(
        refused("XREAD COUNT x STREAMS a b 0 0"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        refused("XREAD FOO STREAMS a b 0 0"),
        "-ERR syntax error\r\n"
    );
    assert_eq!(refused("XREAD COUNT 1 BLOCK"), "-ERR syntax error\r\n");
    assert_eq!(
        refused("XREAD GROUP g c STREAMS a b 0 0"),
        "-ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.\r\n"
    );
    assert_eq!(
        refused("XREAD NOACK STREAMS a b 0 0"),
        "-ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.\r\n"
    );
}

#[test]
fn a_dollar_is_probed_for_the_last_entry_and_other_ids_are_read() {
    let read = parsed("XREAD COUNT 3 BLOCK 10 STREAMS a b 1-1 $");
    let ids = read.client_ids().to_vec();
    assert_eq!(
        read.probe(0, &ids),
        request_frame(&args("XREAD COUNT 3 STREAMS a 1-1"))
    );
    assert_eq!(
        read.probe(1, &ids),
        request_frame(&args("XREVRANGE b + - COUNT 1"))
    );
}

#[test]
fn streams_with_entries_are_the_reply_in_the_clients_order() {
    let read = parsed("XREAD STREAMS a b c 0 0 0");
    let ids = read.client_ids().to_vec();
    let a = "*1\r\n*2\r\n$1\r\na\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
    let c = "*1\r\n*2\r\n$1\r\nc\r\n*1\r\n*2\r\n$3\r\n2-1\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n";
    let replies = [frame(a), frame("*-1\r\n"), frame(c)];
    let Probed::Reply(reply) = read.probed(&ids, &replies, Proto::Resp2) else {
        panic!("entries were found");
    };
    assert_eq!(text(&reply), format!("*2\r\n{}{}", &a[4..], &c[4..]));
    // RESP3: a map of stream name to entries.
    let a3 = a.replacen("*1\r\n*2\r\n", "%1\r\n", 1);
    let replies = [frame(&a3), frame("_\r\n"), frame("_\r\n")];
    let Probed::Reply(reply) = read.probed(&ids, &replies, Proto::Resp3) else {
        panic!("entries were found");
    };
    assert_eq!(text(&reply), format!("%1\r\n{}", &a3[4..]));
}

#[test]
fn the_first_error_in_stream_order_is_the_reply() {
    let read = parsed("XREAD STREAMS a b c 0 0 x");
    let ids = read.client_ids().to_vec();
    let entries = "*1\r\n*2\r\n$1\r\na\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
    let wrong = frame("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
    let invalid = frame("-ERR Invalid stream ID specified as stream command argument\r\n");
    let replies = [frame(entries), wrong.clone(), invalid];
    assert_eq!(
        read.probed(&ids, &replies, Proto::Resp2),
        Probed::Reply(wrong)
    );
    // An answer that is not an XREAD reply is not taken for "no entries".
    let replies = [frame("+OK\r\n"), frame("*-1\r\n"), frame("*-1\r\n")];
    assert!(matches!(
        read.probed(&ids, &replies, Proto::Resp2),
        Probed::Reply(reply) if text(&reply).contains("unexpected reply")
    ));
}

#[test]
fn without_entries_a_dollar_becomes_the_last_entrys_id() {
    let read = parsed("XREAD BLOCK 0 STREAMS a b c 5-0 $ $");
    let ids = read.client_ids().to_vec();
    let last = "*1\r\n*2\r\n$4\r\n7-12\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
    let replies = [frame("*-1\r\n"), frame(last), frame("*0\r\n")];
    assert_eq!(
        read.probed(&ids, &replies, Proto::Resp2),
        Probed::Empty(args("5-0 7-12 0-0"))
    );
    let fixed = args("5-0 7-12 0-0");
    assert_eq!(
        read.wait(1, &fixed, Some(Duration::from_micros(1500))),
        request_frame(&args("XREAD BLOCK 1 STREAMS b 7-12"))
    );
    // A wait shorter than a millisecond still ends: BLOCK 0 would not.
    assert_eq!(
        read.wait(2, &fixed, Some(Duration::from_micros(10))),
        request_frame(&args("XREAD BLOCK 1 STREAMS c 0-0"))
    );
    assert_eq!(
        read.wait(0, &fixed, None),
        request_frame(&args("XREAD BLOCK 0 STREAMS a 5-0"))
    );
}

#[test]
fn a_waits_null_ends_the_read_unless_a_poll_interval_ended() {
    let null = frame("*-1\r\n");
    assert_eq!(
        StreamRead::waited(&null, false, false),
        Waited::Reply(null.clone())
    );
    assert_eq!(StreamRead::waited(&null, false, true), Waited::Probe);
    assert_eq!(
        StreamRead::waited(&null, true, true),
        Waited::Reply(null.clone())
    );
    let entries = frame("*1\r\n*2\r\n$1\r\na\r\n*0\r\n");
    assert_eq!(
        StreamRead::waited(&entries, false, true),
        Waited::Reply(entries.clone())
    );
    let unblocked = frame("-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n");
    assert_eq!(
        StreamRead::waited(&unblocked, false, true),
        Waited::Reply(unblocked.clone())
    );
}
