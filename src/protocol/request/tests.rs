use super::*;
use proptest::prelude::*;

#[test]
fn folded_names_fit_sixteen_bytes_or_match_nothing() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut buf = BytesMut::from(
        &b"*1\r\n$4\r\nExEc\r\n*1\r\n$16\r\nSUBSCRIBESUBSCRI\r\n*1\r\n$17\r\nSUBSCRIBESUBSCRIB\r\n"
            [..],
    );
    let mut next = || FoldedName::of(&decoder.decode(&mut buf).unwrap().unwrap());
    assert_eq!(next().as_bytes(), b"exec");
    assert_eq!(next().as_bytes(), b"subscribesubscri");
    assert_eq!(next().as_bytes(), b"");
}

fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn decode_all(decoder: &mut RequestDecoder, buf: &mut BytesMut) -> Vec<Request> {
    let mut requests = Vec::new();
    while let Some(request) = decoder.decode(buf).expect("valid input") {
        requests.push(request);
    }
    requests
}

fn error_of(input: &[u8], limits: Limits) -> String {
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::from(input);
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error for {:?}", String::from_utf8_lossy(input)),
            Err(error) => return error.0,
        }
    }
}

#[test]
fn multibulk_args_are_slices_of_raw() {
    let frame = multibulk(&[b"SET", b"key", b"va\r\nlue"]);
    let mut buf = BytesMut::from(&frame[..]);
    buf.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let mut decoder = RequestDecoder::default();
    let request = decoder.decode(&mut buf).unwrap().unwrap();
    assert_eq!(&request.raw[..], &frame[..]);
    assert_eq!(request.name(), b"SET");
    assert_eq!(&request.args[2][..], b"va\r\nlue");
    let raw_range = request.raw.as_ptr_range();
    for arg in &request.args {
        assert!(
            raw_range.contains(&arg.as_ptr()),
            "argument copied out of raw"
        );
    }
    let ping = decoder.decode(&mut buf).unwrap().unwrap();
    assert_eq!(&ping.args[..], &[Bytes::from_static(b"PING")]);
    assert!(buf.is_empty());
    assert_eq!(decoder.decode(&mut buf), Ok(None));
}

#[test]
fn empty_and_negative_counts_are_skipped() {
    let mut buf = BytesMut::from(&b"*0\r\n*-5\r\n\r\n  \r\n*1\r\n$4\r\nPING\r\n"[..]);
    let requests = decode_all(&mut RequestDecoder::default(), &mut buf);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].name(), b"PING");
    assert!(buf.is_empty());
}

#[test]
fn inline_commands_decode_between_multibulk_ones() {
    let mut buf = BytesMut::from(&b"PING\n*1\r\n$4\r\nPING\r\nECHO 'x y'\r\n"[..]);
    let requests = decode_all(&mut RequestDecoder::default(), &mut buf);
    let names: Vec<&[u8]> = requests.iter().map(|r| r.name()).collect();
    assert_eq!(names, [&b"PING"[..], b"PING", b"ECHO"]);
    assert_eq!(&requests[0].raw[..], b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(&requests[2].args[1][..], b"x y");
}

#[test]
fn bytes_after_count_and_payload_are_skipped_unchecked_like_redis() {
    // Redis 7 reads `*1\rX` as a count line and skips the two bytes after a payload.
    let mut buf = BytesMut::from(&b"*1\rX$4\r\nPINGXY"[..]);
    let requests = decode_all(&mut RequestDecoder::default(), &mut buf);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].name(), b"PING");
}

#[test]
fn limits_are_applied_as_redis_applies_them() {
    let small = Limits {
        max_bulk_len: 10,
        max_multibulk_len: 3,
        max_inline_len: 16,
    };
    assert_eq!(error_of(b"*4\r\n", small), INVALID_MULTIBULK_LEN);
    assert_eq!(error_of(b"*1\r\n$11\r\n", small), INVALID_BULK_LEN);
    assert_eq!(error_of(b"*123456789012345678", small), TOO_BIG_MBULK_COUNT);
    assert_eq!(
        error_of(b"*1\r\n$12345678901234567", small),
        TOO_BIG_BULK_COUNT
    );
    assert_eq!(
        error_of(b"PING PING PING PING", small),
        "Protocol error: too big inline request"
    );
    // Exactly at the limits is fine.
    let mut buf = BytesMut::from(&multibulk(&[b"a", b"b", b"0123456789"])[..]);
    assert_eq!(
        decode_all(&mut RequestDecoder::new(small), &mut buf).len(),
        1
    );
}

#[test]
fn malformed_headers_get_redis_texts() {
    let limits = Limits::default();
    assert_eq!(error_of(b"*abc\r\n", limits), INVALID_MULTIBULK_LEN);
    assert_eq!(error_of(b"*01\r\n", limits), INVALID_MULTIBULK_LEN);
    assert_eq!(error_of(b"*1\r\n$-1\r\n", limits), INVALID_BULK_LEN);
    assert_eq!(
        error_of(b"*1\r\nfoo\r\n", limits),
        "Protocol error: expected '$', got 'f'"
    );
    assert_eq!(
        error_of(b"*1\r\n\r\n", limits),
        "Protocol error: expected '$', got ' '"
    );
}

#[test]
fn large_frame_in_small_chunks_is_scanned_in_linear_time() {
    let value = vec![b'v'; 200];
    let mut args: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    for index in 0..4_999 {
        args.push(format!("key:{index:06}").into_bytes());
        args.push(value.clone());
    }
    args.push(b"last".to_vec());
    let arg_refs: Vec<&[u8]> = args.iter().map(|arg| &arg[..]).collect();
    let frame = multibulk(&arg_refs);
    assert_eq!(args.len(), 10_000);
    assert!(frame.len() > 1_000_000, "frame is {} bytes", frame.len());

    let started = std::time::Instant::now();
    let mut decoder = RequestDecoder::default();
    let mut buf = BytesMut::new();
    let mut decoded = None;
    for chunk in frame.chunks(16) {
        assert!(decoded.is_none(), "decoded before the last chunk");
        buf.extend_from_slice(chunk);
        decoded = decoder.decode(&mut buf).unwrap();
    }
    // Rescanning from byte 0 on each of the ~65,000 calls would read ~35 GB.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let request = decoded.expect("whole frame decoded");
    assert_eq!(request.args.len(), 10_000);
    assert_eq!(&request.raw[..], &frame[..]);
    assert!(request
        .args
        .iter()
        .zip(&args)
        .all(|(got, want)| got[..] == want[..]));
}

#[test]
fn arg_frames_are_the_frames_the_client_sent_or_none() {
    let mut decoder = RequestDecoder::default();
    let mut buf = BytesMut::from(
        &b"*5\r\n$4\r\nMSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n$0\r\n\r\n$1\r\nv\r\n"[..],
    );
    let request = decoder.decode(&mut buf).unwrap().unwrap();
    assert_eq!(request.arg_frames(0..1), Some(&b"$4\r\nMSET\r\n"[..]));
    assert_eq!(
        request.arg_frames(1..3),
        Some(&b"$1\r\nk\r\n$10\r\n0123456789\r\n"[..])
    );
    // An empty argument is no slice of the frame; past the end there is nothing.
    assert_eq!(request.arg_frames(3..5), None);
    assert_eq!(request.arg_frames(4..6), None);
    // An argument replaced after decoding, even by a slice of the frame.
    let mut renamed = request.clone();
    renamed.args[1] = Bytes::from_static(b"k");
    assert_eq!(renamed.arg_frames(1..3), None);
    assert_eq!(
        renamed.arg_frames(2..3),
        Some(&b"$10\r\n0123456789\r\n"[..])
    );
    // A slice of the frame that is not an argument of it: the "1" inside the value.
    let inside = request.raw.len() - 24;
    renamed.args[2] = request.raw.slice(inside..inside + 1);
    assert_eq!(&renamed.args[2][..], b"1");
    assert_eq!(renamed.arg_frames(2..3), None);
    // The last argument's own frame is a frame wherever it is asked for.
    renamed.args[2] = request
        .raw
        .slice(request.raw.len() - 3..request.raw.len() - 2);
    assert_eq!(renamed.arg_frames(2..3), Some(&b"$1\r\nv\r\n"[..]));
    // Out of order: each frame is right, but they are not consecutive.
    let mut swapped = request.clone();
    swapped.args.swap(1, 2);
    assert_eq!(swapped.arg_frames(1..3), None);
    // Inline commands are re-encoded as multibulk, their arguments sliced from it.
    let mut buf = BytesMut::from(&b"mset key value\r\n"[..]);
    let inline = decoder.decode(&mut buf).unwrap().unwrap();
    assert_eq!(
        inline.arg_frames(1..3),
        Some(&b"$3\r\nkey\r\n$5\r\nvalue\r\n"[..])
    );
}

fn arbitrary_request() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)
}

proptest! {
    #[test]
    fn frames_split_at_every_byte_decode_the_same(
        requests in prop::collection::vec(arbitrary_request(), 1..4)
    ) {
        let mut stream = Vec::new();
        for request in &requests {
            let refs: Vec<&[u8]> = request.iter().map(|arg| &arg[..]).collect();
            stream.extend_from_slice(&multibulk(&refs));
        }
        for split in 0..=stream.len() {
            let mut decoder = RequestDecoder::default();
            let mut buf = BytesMut::from(&stream[..split]);
            let mut decoded = decode_all(&mut decoder, &mut buf);
            buf.extend_from_slice(&stream[split..]);
            decoded.extend(decode_all(&mut decoder, &mut buf));
            prop_assert!(buf.is_empty());
            let decoded_args: Vec<Vec<Vec<u8>>> = decoded
                .iter()
                .map(|r| r.args.iter().map(|a| a.to_vec()).collect())
                .collect();
            prop_assert_eq!(&decoded_args, &requests);
        }
        // One byte at a time.
        let mut decoder = RequestDecoder::default();
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for &byte in &stream {
            buf.extend_from_slice(&[byte]);
            decoded.extend(decode_all(&mut decoder, &mut buf));
        }
        prop_assert_eq!(decoded.len(), requests.len());
    }

    #[test]
    fn arg_frames_equal_their_encoding(request in arbitrary_request()) {
        let refs: Vec<&[u8]> = request.iter().map(|arg| &arg[..]).collect();
        let mut buf = BytesMut::from(&multibulk(&refs)[..]);
        let decoded = RequestDecoder::default().decode(&mut buf).unwrap().unwrap();
        for start in 0..refs.len() {
            for end in start + 1..=refs.len() {
                let frames = decoded.arg_frames(start..end);
                let encoded = multibulk(&refs[start..end]);
                let header = format!("*{}\r\n", end - start).len();
                if refs[start..end].iter().all(|arg| !arg.is_empty()) {
                    prop_assert_eq!(frames, Some(&encoded[header..]));
                } else {
                    prop_assert_eq!(frames, None);
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut decoder = RequestDecoder::default();
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = decoder.decode(&mut buf) {}
    }
}

proptest! {
    // Only some inputs are whole, well-formed requests (a changed byte, a cut end or
    // random parts send the rest to the resumable path only), so more cases.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn the_one_pass_path_reads_as_the_resumable_one(
        input in prop_oneof![
            // Well-formed requests, perhaps with one byte changed or their last bytes cut.
            (
                arbitrary_request(),
                prop::option::of((
                    any::<prop::sample::Index>(),
                    prop::sample::select(&b"*$\r\n0-+ 9\0x"[..]),
                )),
                0usize..3,
            ).prop_map(|(args, change, cut)| {
                let refs: Vec<&[u8]> = args.iter().map(|arg| &arg[..]).collect();
                let mut frame = multibulk(&refs);
                if let Some((at, byte)) = change {
                    let at = at.index(frame.len());
                    frame[at] = byte;
                }
                frame.truncate(frame.len() - cut);
                frame
            }),
            prop::collection::vec(
                prop_oneof![
                    Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()),
                    (0u32..30).prop_map(|n| n.to_string().into_bytes()),
                    prop::collection::vec(any::<u8>(), 0..4),
                ],
                0..24,
            ).prop_map(|parts| parts.concat()),
        ],
        max_bulk_len in 30usize..50,
        max_multibulk_len in 4usize..7,
    ) {
        let limits = Limits { max_bulk_len, max_multibulk_len, ..Limits::default() };
        let mut fast = BytesMut::from(&input[..]);
        let mut taken = Request::default();
        if !take_whole_multibulk(&mut fast, &limits, &mut taken) {
            prop_assert_eq!(&fast[..], &input[..]);
            prop_assert_eq!(taken, Request::default());
            return Ok(());
        }
        let mut slow = BytesMut::from(&input[..]);
        let read = RequestDecoder::new(limits).decode_resumable(&mut slow);
        prop_assert_eq!(read, Ok(Some(taken)));
        prop_assert_eq!(fast, slow);
    }
}

proptest! {
    /// A place decoded into again and again (as the session does) holds exactly the request
    /// decoded last, whatever the argument counts before it.
    #[test]
    fn a_reused_place_holds_only_the_last_request(
        requests in prop::collection::vec(arbitrary_request(), 1..8),
    ) {
        let mut stream = Vec::new();
        for args in &requests {
            let refs: Vec<&[u8]> = args.iter().map(|arg| &arg[..]).collect();
            stream.extend_from_slice(&multibulk(&refs));
        }
        let mut buf = BytesMut::from(&stream[..]);
        let mut decoder = RequestDecoder::default();
        let mut place = Request::default();
        for args in &requests {
            prop_assert_eq!(decoder.decode_into(&mut buf, &mut place), Ok(true));
            let decoded: Vec<&[u8]> = place.args.iter().map(|arg| &arg[..]).collect();
            let sent: Vec<&[u8]> = args.iter().map(|arg| &arg[..]).collect();
            prop_assert_eq!(decoded, sent);
        }
        prop_assert!(buf.is_empty());
    }
}
