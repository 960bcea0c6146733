//! Writing replies the proxy builds itself, in the client's protocol version.
//!
//! Each function appends one reply (or one aggregate header, whose elements the caller
//! appends next) to a `BytesMut`, allocating nothing besides that buffer. RESP3-only types
//! fall back to the form Redis itself uses for RESP2 clients: maps and sets become arrays,
//! doubles and verbatim strings become bulk strings, booleans become integers, and both
//! nulls become `$-1` / `*-1`.
//!
//! Simple strings and errors cannot carry `\r` or `\n`; like Redis's `addReplyError`,
//! these functions replace them with spaces so the output is always one valid frame.

use bytes::{BufMut, Bytes, BytesMut};

use super::Proto;

/// `+<text>\r\n`, e.g. `+OK`.
pub fn simple_string(out: &mut BytesMut, text: &[u8]) {
    out.put_u8(b'+');
    put_single_line(out, text);
}

/// `-<text>\r\n`; `text` is the whole message with its code, e.g. `ERR unknown command`.
pub fn error(out: &mut BytesMut, text: &[u8]) {
    out.put_u8(b'-');
    put_single_line(out, text);
}

/// `:<value>\r\n`.
pub fn integer(out: &mut BytesMut, value: i64) {
    out.put_u8(b':');
    put_signed(out, value);
    out.extend_from_slice(b"\r\n");
}

/// `$<len>\r\n<data>\r\n`.
pub fn bulk(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 25);
    put_header(out, b'$', data.len() as u64);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The null value: `$-1` (RESP2 null bulk string) or `_` (RESP3).
pub fn null(out: &mut BytesMut, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => b"$-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// The null array: `*-1` (RESP2) or `_` (RESP3, which has a single null).
pub fn null_array(out: &mut BytesMut, proto: Proto) {
    out.extend_from_slice(match proto {
        Proto::Resp2 => b"*-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// `*<len>\r\n`; the caller appends `len` elements.
pub fn array_header(out: &mut BytesMut, len: usize) {
    put_header(out, b'*', len as u64);
}

/// `%<pairs>\r\n` (RESP3) or `*<2 * pairs>\r\n` (RESP2); the caller appends key, value,
/// key, value...
pub fn map_header(out: &mut BytesMut, proto: Proto, pairs: usize) {
    match proto {
        Proto::Resp2 => put_header(out, b'*', (pairs as u64).saturating_mul(2)),
        Proto::Resp3 => put_header(out, b'%', pairs as u64),
    }
}

/// `~<len>\r\n` (RESP3) or `*<len>\r\n` (RESP2); the caller appends `len` elements.
pub fn set_header(out: &mut BytesMut, proto: Proto, len: usize) {
    let marker = match proto {
        Proto::Resp2 => b'*',
        Proto::Resp3 => b'~',
    };
    put_header(out, marker, len as u64);
}

/// `><len>\r\n` (RESP3 push) or `*<len>\r\n` (RESP2, as Redis sends pub/sub messages).
pub fn push_header(out: &mut BytesMut, proto: Proto, len: usize) {
    let marker = match proto {
        Proto::Resp2 => b'*',
        Proto::Resp3 => b'>',
    };
    put_header(out, marker, len as u64);
}

/// `,<value>\r\n` (RESP3) or a bulk string of the same text (RESP2).
///
/// The text is the shortest one that reads back as the same `f64`, with C's `%g` style
/// for very large or small magnitudes (`1e+300`); infinities are `inf` / `-inf`, as Redis
/// writes them, and NaN is `nan`.
pub fn double(out: &mut BytesMut, proto: Proto, value: f64) {
    let text = DoubleText::new(value);
    match proto {
        Proto::Resp2 => bulk(out, text.as_bytes()),
        Proto::Resp3 => {
            out.put_u8(b',');
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `#t` / `#f` (RESP3) or the integers `1` / `0` (RESP2).
pub fn boolean(out: &mut BytesMut, proto: Proto, value: bool) {
    match proto {
        Proto::Resp2 => integer(out, i64::from(value)),
        Proto::Resp3 => out.extend_from_slice(if value { b"#t\r\n" } else { b"#f\r\n" }),
    }
}

/// `=<len>\r\n<format>:<text>\r\n` (RESP3, `format` such as `txt` or `mkd`) or a bulk
/// string of `text` alone (RESP2).
pub fn verbatim(out: &mut BytesMut, proto: Proto, format: [u8; 3], text: &[u8]) {
    match proto {
        Proto::Resp2 => bulk(out, text),
        Proto::Resp3 => {
            out.reserve(text.len() + 20);
            // The length covers the three-letter format and its colon.
            put_header(out, b'=', text.len() as u64 + 4);
            out.extend_from_slice(&format);
            out.put_u8(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A command as a multibulk frame, the form every Redis server reads.
pub fn encode_request(args: &[&[u8]]) -> Bytes {
    // Per argument: `$`, up to 20 digits, two CRLFs.
    let size = 24 + args.iter().map(|arg| arg.len() + 25).sum::<usize>();
    let mut out = BytesMut::with_capacity(size);
    array_header(&mut out, args.len());
    for arg in args {
        bulk(&mut out, arg);
    }
    out.freeze()
}

/// A complete `$<len>\r\n<data>\r\n` frame, for a reply that is one bulk string.
pub fn bulk_frame(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 24);
    bulk(&mut out, data);
    out.freeze()
}

/// A complete `:<value>\r\n` frame, for a reply that is one integer.
pub fn integer_frame(value: i64) -> Bytes {
    let mut out = BytesMut::with_capacity(24);
    integer(&mut out, value);
    out.freeze()
}

/// A complete null frame in the client's protocol (see [`null`]).
pub fn null_frame(proto: Proto) -> Bytes {
    match proto {
        Proto::Resp2 => Bytes::from_static(b"$-1\r\n"),
        Proto::Resp3 => Bytes::from_static(b"_\r\n"),
    }
}

/// A complete array frame whose `count` elements are already-encoded frames.
pub fn array_frame<'a>(count: usize, elements: impl IntoIterator<Item = &'a Bytes>) -> Bytes {
    let mut out = BytesMut::new();
    array_header(&mut out, count);
    for element in elements {
        out.extend_from_slice(element);
    }
    out.freeze()
}

fn put_header(out: &mut BytesMut, marker: u8, len: u64) {
    // Most of what the proxy frames (members, scores, keys, arrays of a few elements) counts
    // fewer than 100: a header of a fixed size is one store, not a formatted line.
    match len {
        0..=9 => return out.extend_from_slice(&[marker, b'0' + len as u8, b'\r', b'\n']),
        10..=99 => {
            let (tens, ones) = (b'0' + (len / 10) as u8, b'0' + (len % 10) as u8);
            return out.extend_from_slice(&[marker, tens, ones, b'\r', b'\n']);
        }
        _ => {}
    }
    // Laid out on the stack and appended once, not in three appends: a split request
    // frames one header per argument.
    let mut line = [0u8; 23];
    let end = line.len() - 2;
    line[end..].copy_from_slice(b"\r\n");
    let start = digits_before(&mut line, end, len) - 1;
    line[start] = marker;
    out.extend_from_slice(&line[start..]);
}

fn put_single_line(out: &mut BytesMut, text: &[u8]) {
    out.reserve(text.len() + 2);
    for &byte in text {
        out.put_u8(if byte == b'\r' || byte == b'\n' {
            b' '
        } else {
            byte
        });
    }
    out.extend_from_slice(b"\r\n");
}

fn put_signed(out: &mut BytesMut, value: i64) {
    if value < 0 {
        out.put_u8(b'-');
    }
    put_unsigned(out, value.unsigned_abs());
}

fn put_unsigned(out: &mut BytesMut, value: u64) {
    // u64::MAX has 20 digits.
    let mut digits = [0u8; 20];
    let start = digits_before(&mut digits, 20, value);
    out.extend_from_slice(&digits[start..]);
}

/// Writes `value`'s decimal digits into `buf` so that they end just before `end`, and
/// returns where they start.
pub fn digits_before(buf: &mut [u8], end: usize, mut value: u64) -> usize {
    let mut start = end;
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return start;
        }
    }
}

/// A double's text, formatted on the stack.
struct DoubleText {
    bytes: [u8; 48],
    len: usize,
}

impl DoubleText {
    fn new(value: f64) -> Self {
        let mut text = DoubleText {
            bytes: [0; 48],
            len: 0,
        };
        if value.is_nan() {
            text.push(b"nan");
        } else if value.is_infinite() {
            text.push(if value > 0.0 { b"inf" } else { b"-inf" });
        } else if value == 0.0 || (1e-4..1e17).contains(&value.abs()) {
            // Rust's `Display` is the shortest text that reads back exactly.
            let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{value}"));
        } else {
            text.push_exponent_form(value);
        }
        text
    }

    /// `1.5e-7` as C writes it: `1.5e-07`, with an explicit `+` and two digits at least.
    fn push_exponent_form(&mut self, value: f64) {
        let mut rust_form = DoubleText {
            bytes: [0; 48],
            len: 0,
        };
        let _ = std::fmt::Write::write_fmt(&mut rust_form, format_args!("{value:e}"));
        let written = rust_form.as_bytes();
        let Some(e_at) = written.iter().position(|&byte| byte == b'e') else {
            self.push(written);
            return;
        };
        let (mantissa, exponent) = (&written[..e_at], &written[e_at + 1..]);
        let (sign, digits) = match exponent.split_first() {
            Some((b'-', digits)) => (b'-', digits),
            _ => (b'+', exponent),
        };
        self.push(mantissa);
        self.push(&[b'e', sign]);
        if digits.len() < 2 {
            self.push(b"0");
        }
        self.push(digits);
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.bytes.len() - self.len;
        let taken = bytes.len().min(room);
        self.bytes[self.len..self.len + taken].copy_from_slice(&bytes[..taken]);
        self.len += taken;
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Write for DoubleText {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.push(text.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RequestDecoder;
    use proptest::prelude::*;

    fn written(write: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        write(&mut out);
        out.to_vec()
    }

    #[test]
    fn scalars_match_the_resp_spec() {
        assert_eq!(written(|o| simple_string(o, b"OK")), b"+OK\r\n");
        assert_eq!(
            written(|o| error(o, b"ERR bad\r\nthing")),
            b"-ERR bad  thing\r\n"
        );
        assert_eq!(written(|o| integer(o, 0)), b":0\r\n");
        assert_eq!(
            written(|o| integer(o, i64::MIN)),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(written(|o| integer(o, 1000)), b":1000\r\n");
        assert_eq!(written(|o| bulk(o, b"")), b"$0\r\n\r\n");
        assert_eq!(written(|o| bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(written(|o| bulk(o, &[b'x'; 10]))[..5], *b"$10\r\n");
        for len in [9usize, 10, 99, 100, 1000] {
            let data = vec![b'y'; len];
            let mut expected = format!("${len}\r\n").into_bytes();
            expected.extend_from_slice(&data);
            expected.extend_from_slice(b"\r\n");
            assert_eq!(written(|o| bulk(o, &data)), expected, "{len}");
        }
        assert_eq!(
            written(|o| array_header(o, u64::MAX as usize)),
            b"*18446744073709551615\r\n"
        );
    }

    #[test]
    fn whole_frames_match_the_resp_spec() {
        assert_eq!(&bulk_frame(b"ab")[..], b"$2\r\nab\r\n");
        assert_eq!(&integer_frame(-7)[..], b":-7\r\n");
        assert_eq!(&null_frame(Proto::Resp2)[..], b"$-1\r\n");
        assert_eq!(&null_frame(Proto::Resp3)[..], b"_\r\n");
        let parts = [Bytes::from_static(b":1\r\n"), Bytes::from_static(b"+x\r\n")];
        assert_eq!(&array_frame(2, &parts)[..], b"*2\r\n:1\r\n+x\r\n");
        assert_eq!(&array_frame(0, &[])[..], b"*0\r\n");
    }

    #[test]
    fn resp3_types_fall_back_to_resp2_forms() {
        use Proto::{Resp2, Resp3};
        assert_eq!(written(|o| null(o, Resp2)), b"$-1\r\n");
        assert_eq!(written(|o| null(o, Resp3)), b"_\r\n");
        assert_eq!(written(|o| null_array(o, Resp2)), b"*-1\r\n");
        assert_eq!(written(|o| null_array(o, Resp3)), b"_\r\n");
        assert_eq!(written(|o| array_header(o, 3)), b"*3\r\n");
        assert_eq!(written(|o| map_header(o, Resp2, 2)), b"*4\r\n");
        assert_eq!(written(|o| map_header(o, Resp3, 2)), b"%2\r\n");
        assert_eq!(written(|o| set_header(o, Resp2, 5)), b"*5\r\n");
        assert_eq!(written(|o| set_header(o, Resp3, 5)), b"~5\r\n");
        assert_eq!(written(|o| push_header(o, Resp3, 3)), b">3\r\n");
        assert_eq!(written(|o| boolean(o, Resp2, true)), b":1\r\n");
        assert_eq!(written(|o| boolean(o, Resp2, false)), b":0\r\n");
        assert_eq!(written(|o| boolean(o, Resp3, true)), b"#t\r\n");
        assert_eq!(written(|o| boolean(o, Resp3, false)), b"#f\r\n");
        assert_eq!(written(|o| double(o, Resp3, 1.5)), b",1.5\r\n");
        assert_eq!(written(|o| double(o, Resp2, 1.5)), b"$3\r\n1.5\r\n");
        assert_eq!(written(|o| double(o, Resp3, f64::INFINITY)), b",inf\r\n");
        assert_eq!(
            written(|o| double(o, Resp2, f64::NEG_INFINITY)),
            b"$4\r\n-inf\r\n"
        );
        // The RESP3 spec's own example.
        assert_eq!(
            written(|o| verbatim(o, Resp3, *b"txt", b"Some string")),
            b"=15\r\ntxt:Some string\r\n"
        );
        assert_eq!(
            written(|o| verbatim(o, Resp2, *b"txt", b"Some string")),
            b"$11\r\nSome string\r\n"
        );
    }

    #[test]
    fn doubles_use_c_style_exponents_when_large_or_small() {
        let text = |value: f64| String::from_utf8(DoubleText::new(value).as_bytes().to_vec());
        assert_eq!(text(1.0).unwrap(), "1");
        assert_eq!(text(-0.25).unwrap(), "-0.25");
        assert_eq!(text(1e300).unwrap(), "1e+300");
        assert_eq!(text(1.5e-7).unwrap(), "1.5e-07");
        assert_eq!(text(f64::NAN).unwrap(), "nan");
    }

    #[test]
    fn encode_request_is_a_multibulk_frame() {
        assert_eq!(
            &encode_request(&[b"SET", b"k", b""])[..],
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    proptest! {
        #[test]
        fn doubles_read_back_exactly(value in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            let text = DoubleText::new(value);
            let parsed: f64 = std::str::from_utf8(text.as_bytes()).unwrap().parse().unwrap();
            prop_assert_eq!(parsed, value);
        }

        #[test]
        fn encoded_requests_decode_to_the_same_args(
            args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..8)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(|arg| &arg[..]).collect();
            let frame = encode_request(&refs);
            let mut buf = BytesMut::from(&frame[..]);
            let request = RequestDecoder::default().decode(&mut buf).unwrap().unwrap();
            prop_assert_eq!(request.raw, frame);
            let decoded: Vec<Vec<u8>> = request.args.iter().map(|arg| arg.to_vec()).collect();
            prop_assert_eq!(decoded, args);
        }
    }
}
