//! The request decoder against a real `redis-server`: for the same bytes, the decoder must
//! refuse with the very error text the server replies, wait where the server waits, and
//! find the arguments the server executes.

mod common;

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use slotbridge::protocol::{Limits, RequestDecoder};

use common::Standalone;

/// Sends `input` to `addr` on a fresh connection and returns what the server replied until it
/// closed the connection, `expected_len` bytes arrived, or `quiet` passed in silence.
fn exchange(addr: &str, input: &[u8], expected_len: Option<usize>, quiet: Duration) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(quiet)).expect("timeout");
    // The server may close mid-write after refusing; what it replied is still readable.
    let _ = stream.write_all(input);
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if expected_len.is_some_and(|len| reply.len() >= len) {
            return reply;
        }
        match common::read_some(&mut stream, &mut chunk) {
            Ok(0) => return reply,
            Ok(read) => reply.extend_from_slice(&chunk[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return reply
            }
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return reply,
            Err(error) => panic!("read: {error}"),
        }
    }
}

/// What the decoder makes of `input` fed at once: the requests, then an error text if any.
fn decode(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, Option<String>) {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut buf = BytesMut::from(input);
    let mut requests = Vec::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(request)) => {
                requests.push(request.args.iter().map(|arg| arg.to_vec()).collect());
            }
            Ok(None) => return (requests, None),
            Err(error) => return (requests, Some(error.0)),
        }
    }
}

fn show(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    text.chars().take(60).collect()
}

#[test]
fn malformed_requests_get_the_servers_error_text() {
    let server = Standalone::start();
    let long_inline = vec![b'a'; 70_000];
    let long_count = [&b"*"[..], &vec![b'1'; 70_000]].concat();
    let long_bulk_len = [&b"*1\r\n$"[..], &vec![b'1'; 70_000]].concat();
    let cases: Vec<&[u8]> = vec![
        b"*abc\r\n",
        b"*1\r\n$99999999999\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\r\n$536870913\r\n",
        b"*3000000000\r\n",
        b"*-0\r\n",
        b"*01\r\n",
        b"*+1\r\n",
        b"*1\r\n$03\r\nfoo\r\n",
        b"*1\r\nfoo\r\n",
        b"*1\r\n+\r\n",
        b"*1\r\n\r\n",
        b"*1\r\n\n\r\n",
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
        b"SET \"a b\r\n",
        b"ECHO \"a\"b\r\n",
        b"ECHO 'abc\r\n",
        b"ECHO 'a'b\r\n",
        b"ECHO \"abc\\\r\n",
        b"PING\r\n*abc\r\n",
        &long_inline,
        &long_count,
        &long_bulk_len,
    ];
    for input in cases {
        let reply = exchange(server.addr(), input, None, Duration::from_secs(2));
        let reply = String::from_utf8_lossy(&reply).into_owned();
        let (_, error) = decode(input);
        let error = error.unwrap_or_else(|| panic!("no error for {:?}", show(input)));
        let expected_tail = format!("-ERR {error}\r\n");
        assert!(
            reply.ends_with(&expected_tail),
            "for {:?} the server replied {reply:?}, the decoder said {error:?}",
            show(input)
        );
    }
}

#[test]
fn incomplete_requests_wait_like_the_server() {
    let server = Standalone::start();
    let cases: [&[u8]; 7] = [
        b"*3\r\n$3\r\nSET\r\nfoo",
        // A NUL hides the line end from Redis's `strchr`.
        b"PI\0NG\r\n",
        b"*1\r\n$4\0\r\nPING\r\n",
        b"*1\r\n$536870912\r\n",
        b"*2\r\n$4\r\nECHO\r\n$3\r\nabc",
        b"ECHO abc",
        b"*1",
    ];
    for input in cases {
        let reply = exchange(server.addr(), input, None, Duration::from_millis(300));
        assert_eq!(reply, b"", "server replied to {:?}", show(input));
        assert_eq!(decode(input), (vec![], None), "{:?}", show(input));
    }
}

#[test]
fn valid_requests_decode_to_what_the_server_executes() {
    let server = Standalone::start();
    let cases: [&[u8]; 12] = [
        b"ECHO \"a\\x41\\q\\n\\t\\r\\b\\a\\\\\\\"\"\r\n",
        b"ECHO 'a\\'b\\n'\r\n",
        b"ECHO a\"b c\"\r\n",
        b"ECHO \x0bx\r\nECHO x\x0by\n",
        b"ECHO \"\"\r\nECHO \"\\xff\\x00\\xZZ\"\r\n",
        b"*0\r\n*-5\r\nPING\r\n",
        b"*-5\r\n*1\r\n$4\r\nPING\r\n",
        b"\r\n\r\n  \n\t\nPING\n",
        b"*2\rX$4\r\nECHO\r\n$2\r\nhiXY",
        b"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n   ECHO   spaced\tout  \r\n",
        b"ECHO \"a b\" 'c d'\r\n",
        b"ECHO\r\r\n",
    ];
    for input in cases {
        let (requests, error) = decode(input);
        assert_eq!(error, None, "{:?}", show(input));
        // What the server must answer if it ran the requests the decoder found.
        let mut expected = Vec::new();
        for args in &requests {
            match (args[0].as_slice(), args.len()) {
                (b"PING", 1) => expected.extend_from_slice(b"+PONG\r\n"),
                (b"ECHO", 2) => {
                    expected.extend_from_slice(format!("${}\r\n", args[1].len()).as_bytes());
                    expected.extend_from_slice(&args[1]);
                    expected.extend_from_slice(b"\r\n");
                }
                (b"ECHO", _) => expected
                    .extend_from_slice(b"-ERR wrong number of arguments for 'echo' command\r\n"),
                _ => panic!("unexpected request {args:?}"),
            }
        }
        assert!(!expected.is_empty(), "{:?} decoded to nothing", show(input));
        let reply = exchange(
            server.addr(),
            input,
            Some(expected.len()),
            Duration::from_secs(2),
        );
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(&expected),
            "for {:?}",
            show(input)
        );
        assert_eq!(reply, expected);
    }
}
