use super::*;

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|word| Bytes::copy_from_slice(word.as_bytes()))
        .collect()
}

fn parsed(line: &str) -> BlockingPop {
    parse_blocking_pop(&args(line))
        .expect("a blocking pop")
        .expect("valid arguments")
}

fn refused(line: &str) -> String {
    let reply = parse_blocking_pop(&args(line))
        .expect("a blocking pop")
        .expect_err("refused");
    String::from_utf8_lossy(&reply).into_owned()
}

fn frame(bytes: &str) -> Bytes {
    Bytes::copy_from_slice(bytes.as_bytes())
}

#[test]
fn keys_and_timeouts_are_read_as_redis_reads_them() {
    let pop = parsed("BLPOP a b c 1.5");
    assert_eq!(pop.keys, args("a b c"));
    assert_eq!(pop.holds, Holds::List);
    assert_eq!(pop.timeout, Some(Duration::from_millis(1500)));
    assert_eq!(parsed("brpop a b 0").timeout, None);
    // Rounded up to a millisecond; a negative fraction of one is no timeout, as in Redis.
    assert_eq!(
        parsed("BRPOP a b 0.0004").timeout,
        Some(Duration::from_millis(1))
    );
    assert_eq!(parsed("BRPOP a b -0.0004").timeout, None);
    // Hexadecimal floats, as strtold reads them.
    assert_eq!(
        parsed("BLPOP a b 0x1.8p-1").timeout,
        Some(Duration::from_millis(750))
    );
    assert_eq!(
        parsed("BLPOP a b 0X2").timeout,
        Some(Duration::from_secs(2))
    );
    assert_eq!(parsed("BLPOP a b -0x0").timeout, None);
    assert_eq!(
        parsed("BRPOP a b .5").timeout,
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        parsed("BRPOP a b 1e15").timeout,
        Some(Duration::from_secs(1_000_000_000_000_000))
    );
    let pop = parsed("BZPOPMAX x y 2");
    assert_eq!(pop.holds, Holds::SortedSet);
    assert_eq!(pop.timeout, Some(Duration::from_secs(2)));
    assert_eq!(parse_blocking_pop(&args("BLMOVE a b LEFT LEFT 0")), None);
}

#[test]
fn bad_timeouts_get_redis_errors() {
    assert_eq!(
        refused("BLPOP a b x"),
        "-ERR timeout is not a float or out of range\r\n"
    );
    assert_eq!(refused("BLPOP a b -1"), "-ERR timeout is negative\r\n");
    // Beyond 64 bits of milliseconds Redis 7.0 reads a negative number.
    assert_eq!(refused("BZPOPMIN a b inf"), "-ERR timeout is negative\r\n");
    assert_eq!(refused("BZPOPMIN a b 1e18"), "-ERR timeout is negative\r\n");
    for bad in ["nan", " 1", "1 ", ""] {
        let mut words = args("BLPOP a b");
        words.push(Bytes::copy_from_slice(bad.as_bytes()));
        let reply = parse_blocking_pop(&words).unwrap().unwrap_err();
        assert_eq!(
            &reply[..],
            b"-ERR timeout is not a float or out of range\r\n",
            "{bad:?}"
        );
    }
    assert_eq!(
        refused("BLPOP 0"),
        "-ERR wrong number of arguments for 'blpop' command\r\n"
    );
}

#[test]
fn mpop_forms_check_numkeys_end_and_count_before_the_timeout() {
    let pop = parsed("BLMPOP 0.25 2 a b RIGHT COUNT 3");
    assert_eq!(pop.keys, args("a b"));
    assert_eq!(pop.timeout, Some(Duration::from_millis(250)));
    assert_eq!(pop.pop(1), request_frame(&args("LMPOP 1 b RIGHT COUNT 3")));
    let pop = parsed("BZMPOP 0 3 a b c min");
    assert_eq!(pop.holds, Holds::SortedSet);
    assert_eq!(pop.pop(2), request_frame(&args("ZMPOP 1 c min")));
    assert_eq!(
        refused("BLMPOP 0 0 a LEFT"),
        "-ERR numkeys should be greater than 0\r\n"
    );
    assert_eq!(refused("BLMPOP 0 3 a b LEFT"), "-ERR syntax error\r\n");
    assert_eq!(refused("BLMPOP 0 2 a b UP"), "-ERR syntax error\r\n");
    assert_eq!(refused("BZMPOP 0 2 a b LEFT"), "-ERR syntax error\r\n");
    assert_eq!(
        refused("BLMPOP 0 2 a b LEFT COUNT 0"),
        "-ERR count should be greater than 0\r\n"
    );
    assert_eq!(
        refused("BLMPOP 0 2 a b LEFT COUNT"),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        refused("BLMPOP x 2 a b LEFT"),
        "-ERR timeout is not a float or out of range\r\n"
    );
}

#[test]
fn lmpop_and_zmpop_are_the_same_pops_without_a_wait() {
    let pop = parsed("LMPOP 2 a b RIGHT COUNT 3");
    assert_eq!(pop.keys, args("a b"));
    assert_eq!(pop.holds, Holds::List);
    assert!(!pop.blocks);
    assert_eq!(pop.timeout, None);
    assert_eq!(pop.pop(1), request_frame(&args("LMPOP 1 b RIGHT COUNT 3")));
    let pop = parsed("zmpop 3 a b c MAX");
    assert_eq!(pop.holds, Holds::SortedSet);
    assert_eq!(pop.keys, args("a b c"));
    assert_eq!(pop.pop(0), request_frame(&args("ZMPOP 1 a MAX")));
    assert!(parsed("BLMPOP 0 2 a b LEFT").blocks);
    assert_eq!(
        refused("LMPOP 0 a LEFT"),
        "-ERR numkeys should be greater than 0\r\n"
    );
    assert_eq!(refused("LMPOP 3 a b LEFT"), "-ERR syntax error\r\n");
    assert_eq!(refused("ZMPOP 2 a b LEFT"), "-ERR syntax error\r\n");
    assert_eq!(
        refused("ZMPOP 2 a b MIN COUNT -1"),
        "-ERR count should be greater than 0\r\n"
    );
    // Its reply is the node's own, `[key, [elements]]`, in the client's protocol.
    let multi = frame("*2\r\n$1\r\nb\r\n*1\r\n$1\r\nx\r\n");
    assert_eq!(parsed("LMPOP 2 a b LEFT").popped(1, &multi), Some(multi));
}

#[test]
fn the_first_key_in_order_with_data_or_an_error_decides() {
    let pop = parsed("BLPOP a b c 0");
    let zero = frame(":0\r\n");
    let some = frame(":2\r\n");
    let wrong = frame("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
    assert_eq!(
        pop.probed(&[zero.clone(), some.clone(), wrong.clone()]),
        Probed::Ready(1)
    );
    assert_eq!(
        pop.probed(&[zero.clone(), wrong.clone(), some.clone()]),
        Probed::Reply(wrong)
    );
    assert_eq!(
        pop.probed(&[zero.clone(), zero.clone(), zero]),
        Probed::Empty
    );
    assert_eq!(pop.probe(&Bytes::from("b")), request_frame(&args("LLEN b")));
    assert_eq!(
        parsed("BZPOPMIN a b 0").probe(&Bytes::from("a")),
        request_frame(&args("ZCARD a"))
    );
}

#[test]
fn pops_are_replied_in_the_blocking_forms_shape() {
    let pop = parsed("BLPOP a bb 0");
    assert_eq!(pop.pop(1), request_frame(&args("LPOP bb")));
    assert_eq!(
        pop.popped(1, &frame("$1\r\nx\r\n")),
        Some(frame("*2\r\n$2\r\nbb\r\n$1\r\nx\r\n"))
    );
    assert_eq!(pop.popped(1, &frame("$-1\r\n")), None);
    assert_eq!(pop.popped(1, &frame("_\r\n")), None);
    assert_eq!(parsed("BRPOP a b 0").pop(0), request_frame(&args("RPOP a")));
    let pop = parsed("BZPOPMIN a z 0");
    assert_eq!(pop.pop(1), request_frame(&args("ZPOPMIN z")));
    assert_eq!(
        pop.popped(1, &frame("*2\r\n$1\r\nm\r\n$1\r\n1\r\n")),
        Some(frame("*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n1\r\n"))
    );
    // RESP3: the score is a double, kept as the node sent it.
    assert_eq!(
        pop.popped(1, &frame("*2\r\n$1\r\nm\r\n,1.5\r\n")),
        Some(frame("*3\r\n$1\r\nz\r\n$1\r\nm\r\n,1.5\r\n"))
    );
    assert_eq!(pop.popped(1, &frame("*0\r\n")), None);
    let refused = frame("-NOPERM this user has no permissions to run the 'zpopmin' command\r\n");
    assert_eq!(pop.popped(1, &refused), Some(refused.clone()));
    let multi = frame("*2\r\n$1\r\nb\r\n*1\r\n$1\r\nx\r\n");
    assert_eq!(parsed("BLMPOP 0 2 a b LEFT").popped(1, &multi), Some(multi));
    assert_eq!(
        parsed("BLMPOP 0 2 a b LEFT").popped(1, &frame("*-1\r\n")),
        None
    );
}

#[test]
fn a_wait_takes_nothing_and_its_answer_says_what_next() {
    assert_eq!(
        BlockingPop::wait(&Bytes::from("k"), None),
        request_frame(&args("BLMOVE k k LEFT LEFT 0"))
    );
    assert_eq!(
        BlockingPop::wait(&Bytes::from("k"), Some(0.25)),
        request_frame(&args("BLMOVE k k LEFT LEFT 0.250"))
    );
    let null = frame("$-1\r\n");
    let null_reply = Waited::Reply(frame("*-1\r\n"));
    // A list wait ends with its client: timed out, or unblocked. A poll is unblocked.
    assert_eq!(
        BlockingPop::waited(&null, false, false, Proto::Resp2),
        null_reply
    );
    assert_eq!(
        BlockingPop::waited(&null, true, false, Proto::Resp2),
        null_reply
    );
    assert_eq!(
        BlockingPop::waited(&frame("_\r\n"), true, true, Proto::Resp3),
        Waited::Reply(frame("_\r\n"))
    );
    // The end of a poll interval, no unblock sent: probe again.
    assert_eq!(
        BlockingPop::waited(&null, false, true, Proto::Resp2),
        Waited::Probe
    );
    assert_eq!(
        BlockingPop::waited(&frame("$1\r\nx\r\n"), false, false, Proto::Resp2),
        Waited::Probe
    );
    assert_eq!(
        BlockingPop::waited(&frame("-WRONGTYPE x\r\n"), false, false, Proto::Resp2),
        Waited::Probe
    );
    let unblocked = frame("-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n");
    assert_eq!(
        BlockingPop::waited(&unblocked, true, false, Proto::Resp2),
        Waited::Reply(unblocked)
    );
}
