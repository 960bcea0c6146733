//! Turning one complete reply frame into a structured value, for the callers that must
//! look inside a reply (merging, reverse key rewriting) rather than forward its bytes.
//!
//! Frames are read into redis-protocol's RESP3 [`BytesFrame`], whose strings are slices of
//! the input (no copy). RESP2 frames are read by the RESP2 decoder first and converted,
//! because the RESP3 decoder takes RESP2's null bulk string `$-1` for a streamed string;
//! a frame using RESP3-only types fails that decoder and is read as RESP3. Both decoders
//! recurse once per level, so a frame nesting deeper than [`MAX_PARSED_NESTING`] is
//! refused before either sees it.

use bytes::Bytes;
use redis_protocol::resp2::decode::decode_bytes as decode_resp2;
use redis_protocol::resp3::decode::complete::decode_bytes as decode_resp3;
pub use redis_protocol::resp3::types::BytesFrame;

use super::{reply_nesting, ProtocolError, MAX_PARSED_NESTING};

/// Parses `bytes`, which must hold exactly one complete reply frame (as measured by
/// [`super::ReplyScanner`]), RESP2 or RESP3.
pub fn parse_frame(bytes: &Bytes) -> Result<BytesFrame, ProtocolError> {
    if reply_nesting(bytes)? > MAX_PARSED_NESTING {
        return Err(ProtocolError(format!(
            "Protocol error: reply nests deeper than {MAX_PARSED_NESTING} levels"
        )));
    }
    if let Ok(Some((frame, len))) = decode_resp2(bytes) {
        return whole(len, bytes).map(|()| frame.into_resp3());
    }
    match decode_resp3(bytes) {
        Ok(Some((frame, len))) => whole(len, bytes).map(|()| frame),
        Ok(None) => Err(ProtocolError(
            "Protocol error: incomplete reply frame".to_owned(),
        )),
        Err(error) => Err(ProtocolError(format!("Protocol error: {error}"))),
    }
}

fn whole(len: usize, bytes: &Bytes) -> Result<(), ProtocolError> {
    if len == bytes.len() {
        Ok(())
    } else {
        Err(ProtocolError(
            "Protocol error: bytes after the reply frame".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &'static [u8]) -> Result<BytesFrame, ProtocolError> {
        parse_frame(&Bytes::from_static(input))
    }

    fn bulk(data: &'static [u8]) -> BytesFrame {
        BytesFrame::BlobString {
            data: Bytes::from_static(data),
            attributes: None,
        }
    }

    #[test]
    fn resp2_frames_and_nulls() {
        assert_eq!(parse(b"$-1\r\n"), Ok(BytesFrame::Null));
        assert_eq!(parse(b"*-1\r\n"), Ok(BytesFrame::Null));
        assert_eq!(
            parse(b"*3\r\n$3\r\nfoo\r\n$-1\r\n:7\r\n"),
            Ok(BytesFrame::Array {
                data: vec![
                    bulk(b"foo"),
                    BytesFrame::Null,
                    BytesFrame::Number {
                        data: 7,
                        attributes: None
                    },
                ],
                attributes: None,
            })
        );
    }

    #[test]
    fn resp3_frames() {
        assert_eq!(parse(b"_\r\n"), Ok(BytesFrame::Null));
        assert_eq!(
            parse(b"*2\r\n,1.5\r\n#t\r\n"),
            Ok(BytesFrame::Array {
                data: vec![
                    BytesFrame::Double {
                        data: 1.5,
                        attributes: None
                    },
                    BytesFrame::Boolean {
                        data: true,
                        attributes: None
                    },
                ],
                attributes: None,
            })
        );
        match parse(b"%1\r\n$1\r\na\r\n:1\r\n") {
            Ok(BytesFrame::Map { data, .. }) => assert_eq!(data.len(), 1),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn nesting_beyond_the_readable_is_refused_without_recursion() {
        let frame = |depth: usize| Bytes::from("*1\r\n%1\r\n+k\r\n".repeat(depth) + ":1\r\n");
        let deepest = frame(MAX_PARSED_NESTING / 2);
        // Every level the decoders accept fits a 1 MiB stack, even unoptimised.
        let parsed = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || parse_frame(&deepest).is_ok())
            .expect("spawn")
            .join()
            .expect("no overflow");
        assert!(parsed);
        let too_deep = frame(MAX_PARSED_NESTING / 2 + 1);
        assert_eq!(
            parse_frame(&too_deep),
            Err(ProtocolError(
                "Protocol error: reply nests deeper than 32 levels".to_owned()
            ))
        );
        let lua_reply = Bytes::from("*1\r\n".repeat(100_000) + "-ERR reached lua stack limit\r\n");
        let refused = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || parse_frame(&lua_reply).is_err())
            .expect("spawn")
            .join()
            .expect("no overflow");
        assert!(refused);
    }

    #[test]
    fn incomplete_or_extra_bytes_are_errors() {
        assert!(parse(b"$3\r\nfo").is_err());
        assert!(parse(b"+OK\r\n+OK\r\n").is_err());
        assert!(parse(b"@\r\n").is_err());
    }
}
