//! Client request decoding: multibulk (`*N\r\n$len\r\n...`) and inline commands.
//!
//! Check, then parse: the decoder first walks the buffered bytes to learn whether a whole
//! request is there and within [`Limits`], remembering where each argument lies, and only
//! when the request is complete splits it off the buffer and slices the arguments out of
//! it. Its progress (header read, arguments seen, current offset) is kept between calls,
//! so a request arriving in many small reads is scanned once, in linear time.
//!
//! The accepted syntax, the limits and the error texts follow Redis 7's
//! `processMultibulkBuffer`: count and length lines end at the first `\r` (the byte after
//! it is skipped unchecked), numbers are read by `string2ll`, and the two bytes after a
//! bulk's payload are skipped unchecked. Forwarding the raw bytes to a Redis backend is
//! therefore read by the backend exactly as the decoder read it.

use bytes::{Buf, Bytes, BytesMut};
use smallvec::SmallVec;

use super::inline::{decode_inline, InlineOutcome};
use super::number::parse_i64;
use super::{Limits, ProtocolError};

/// Redis: `Protocol error: invalid multibulk length`.
const INVALID_MULTIBULK_LEN: &str = "Protocol error: invalid multibulk length";
/// Redis: `Protocol error: too big mbulk count string`.
const TOO_BIG_MBULK_COUNT: &str = "Protocol error: too big mbulk count string";
/// Redis: `Protocol error: invalid bulk length`.
const INVALID_BULK_LEN: &str = "Protocol error: invalid bulk length";
/// Redis: `Protocol error: too big bulk count string`.
const TOO_BIG_BULK_COUNT: &str = "Protocol error: too big bulk count string";

/// Argument slots reserved up front, whatever count the client announces: a huge count
/// must not allocate before the arguments actually arrive (Redis caps it at 1024 too).
const MAX_PREALLOCATED_ARGS: usize = 1024;

/// One command as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request as a RESP multibulk frame, byte-exact when the client sent multibulk
    /// (re-encoded for inline commands), so an untouched command is forwarded as is.
    pub raw: Bytes,
    /// The arguments, command name first; each a slice of `raw` (no copy).
    /// Never empty: empty requests are skipped by the decoder.
    pub args: SmallVec<[Bytes; 4]>,
}

impl Request {
    /// The command name as sent (any case).
    pub fn name(&self) -> &[u8] {
        &self.args[0]
    }

    /// The bytes of `args[range]` as they stand in `raw`, each with its `$<len>` header
    /// and the two bytes after it: what re-encoding them gives a backend to read, without
    /// the work (a split MSET forwards each key and value this way). `None` when they are
    /// not consecutive bulk frames of `raw` (an empty argument, or arguments rewritten
    /// after decoding): the caller encodes them instead.
    pub fn arg_frames(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        let raw: &[u8] = &self.raw;
        let base = raw.as_ptr() as usize;
        let mut frames: Option<std::ops::Range<usize>> = None;
        for arg in self.args.get(range)? {
            let offset = (arg.as_ptr() as usize).checked_sub(base)?;
            let header = bulk_header_at(raw, offset, arg.len())?;
            let end = offset.checked_add(arg.len() + 2)?;
            if end > raw.len() {
                return None;
            }
            frames = match frames {
                None => Some(header..end),
                Some(frames) if frames.end == header => Some(frames.start..end),
                Some(_) => return None,
            };
        }
        frames.map(|frames| &raw[frames])
    }
}

/// Where the `$<len>\r` header of a bulk whose payload starts at `payload` begins, when
/// `raw` holds one there for exactly `len` bytes, in the canonical digits (no sign, no
/// leading zero) that are all the decoder accepts. Read backwards from the payload, whose
/// place is what is known: finding the header's start first and reading it with
/// `read_length_line` cost a 10-key MSET 2 % more instructions.
fn bulk_header_at(raw: &[u8], payload: usize, len: usize) -> Option<usize> {
    let line_end = payload.checked_sub(2)?;
    if len == 0 || raw.get(line_end) != Some(&b'\r') {
        return None;
    }
    let header = &raw[..line_end];
    let (mut value, mut place) = (0usize, 1usize);
    // Digits read backwards from the `\r`; up to 18, which cannot overflow a `usize`.
    for (i, &byte) in header.iter().rev().enumerate().take(19) {
        match byte {
            b'0'..=b'9' => {
                value += usize::from(byte - b'0') * place;
                place *= 10;
            }
            b'$' if i > 0 && (i == 1 || header[line_end - i] != b'0') => {
                return (value == len).then_some(line_end - i - 1);
            }
            _ => return None,
        }
    }
    None
}

/// A request's command name in lower case, folded once per request for the session's
/// checks of the few names it answers itself (MULTI, SUBSCRIBE, PING, CLIENT...). Empty, so
/// matching none of them, when the name is longer than the longest of those.
#[derive(Debug, Clone, Copy, Default)]
pub struct FoldedName {
    bytes: [u8; FoldedName::MAX_LEN],
    len: u8,
}

impl FoldedName {
    const MAX_LEN: usize = 16;

    /// The name of `request`, folded.
    pub fn of(request: &Request) -> FoldedName {
        let mut folded = FoldedName::default();
        let name = request.name();
        if let Some(dest) = folded.bytes.get_mut(..name.len()) {
            for (d, s) in dest.iter_mut().zip(name) {
                *d = s.to_ascii_lowercase();
            }
            folded.len = name.len() as u8;
        }
        folded
    }

    /// The folded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Where the decoder stands in the request at the front of the buffer.
#[derive(Debug, Default)]
enum Progress {
    /// Nothing is known about the bytes at the front of the buffer.
    #[default]
    Start,
    /// An inline command whose line end has been searched for up to `searched`.
    Inline { searched: usize },
    /// A multibulk request whose `*N` line has been searched for `\r` up to `searched`.
    Header { searched: usize },
    /// A multibulk request whose header has been read.
    Arguments(ArgumentScan),
}

/// Progress through the arguments of a multibulk request; offsets are from the buffer start.
#[derive(Debug)]
struct ArgumentScan {
    /// Arguments announced by the header.
    expected: usize,
    /// `(offset, length)` of each complete argument so far. Inline like `Request::args`,
    /// so decoding a command of up to four arguments does not touch the heap.
    spans: SmallVec<[(usize, usize); 4]>,
    /// Start of the next unread `$len` line or payload.
    pos: usize,
    /// Where the search for the `$len` line's `\r` resumes.
    searched: usize,
    /// The current argument's length, once its `$len` line has been read.
    bulk_len: Option<usize>,
}

/// Result of one step over the buffered bytes.
enum Step {
    /// More bytes are needed.
    NeedMore,
    /// An empty request of this many bytes was found and must be skipped.
    Skip(usize),
    /// A whole request is ready.
    Ready(Request),
}

/// Incremental request decoder; one per client connection.
///
/// Between a call that returns `Ok(None)` and the next one, the caller may only append
/// to the buffer: the decoder remembers offsets into it.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
    progress: Progress,
}

impl RequestDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestDecoder {
            limits,
            progress: Progress::Start,
        }
    }

    /// Enforces `limits` from the next check on, as Redis applies a CONFIG SET of
    /// `proto-max-bulk-len` to its connected clients (a length already accepted stands).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Takes the next whole request off the front of `buf`.
    ///
    /// `Ok(None)`: more bytes are needed (nothing consumed that matters). Empty requests
    /// (`*0`, negative counts, blank inline lines) are consumed silently, as Redis does.
    /// `Err`: the connection must be answered `-ERR <text>` and closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        if let Progress::Start = self.progress {
            if let Some(request) = take_whole_multibulk(buf, &self.limits) {
                return Ok(Some(request));
            }
        }
        self.decode_resumable(buf)
    }

    /// [`RequestDecoder::decode`] without the one-pass path for whole requests.
    fn decode_resumable(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        loop {
            if buf.is_empty() {
                return Ok(None);
            }
            let step = match self.step(buf) {
                Ok(step) => step,
                Err(error) => {
                    self.progress = Progress::Start;
                    return Err(error);
                }
            };
            match step {
                Step::NeedMore => return Ok(None),
                Step::Skip(consumed) => {
                    buf.advance(consumed);
                    self.progress = Progress::Start;
                }
                Step::Ready(request) => {
                    self.progress = Progress::Start;
                    return Ok(Some(request));
                }
            }
        }
    }

    /// Advances over `buf` as far as the buffered bytes allow.
    fn step(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        if let Progress::Start = self.progress {
            self.progress = if buf[0] == b'*' {
                Progress::Header { searched: 1 }
            } else {
                Progress::Inline { searched: 0 }
            };
        }
        match &mut self.progress {
            Progress::Start => Ok(Step::NeedMore),
            Progress::Inline { searched } => match decode_inline(buf, *searched, &self.limits)? {
                InlineOutcome::Incomplete { resume_at } => {
                    *searched = resume_at;
                    Ok(Step::NeedMore)
                }
                InlineOutcome::Blank { consumed } => Ok(Step::Skip(consumed)),
                InlineOutcome::Command { request, consumed } => {
                    buf.advance(consumed);
                    Ok(Step::Ready(request))
                }
            },
            Progress::Header { searched } => {
                let Some(line_end) = find_line_end(buf, 0, searched) else {
                    return if buf.len() > self.limits.max_inline_len {
                        Err(ProtocolError(TOO_BIG_MBULK_COUNT.to_owned()))
                    } else {
                        Ok(Step::NeedMore)
                    };
                };
                let count = parse_i64(&buf[1..line_end])
                    .ok_or_else(|| ProtocolError(INVALID_MULTIBULK_LEN.to_owned()))?;
                let header_len = line_end + 2;
                if count <= 0 {
                    return Ok(Step::Skip(header_len));
                }
                let expected = usize::try_from(count)
                    .ok()
                    .filter(|&count| count <= self.limits.max_multibulk_len)
                    .ok_or_else(|| ProtocolError(INVALID_MULTIBULK_LEN.to_owned()))?;
                let mut scan = ArgumentScan {
                    expected,
                    spans: SmallVec::with_capacity(expected.min(MAX_PREALLOCATED_ARGS)),
                    pos: header_len,
                    searched: header_len,
                    bulk_len: None,
                };
                let step = scan_arguments(&mut scan, buf, &self.limits)?;
                // Parked only when incomplete: a whole request (the common case) is not
                // moved into `progress` just to be reset.
                if let Step::NeedMore = step {
                    self.progress = Progress::Arguments(scan);
                }
                Ok(step)
            }
            Progress::Arguments(scan) => scan_arguments(scan, buf, &self.limits),
        }
    }
}

/// Takes a whole, well-formed multibulk request off the front of `buf` in one pass: the
/// common case of a pipelined or unpipelined client, worth a path without the resumable
/// state. `None` leaves `buf` untouched for the resumable path, which also answers every
/// malformed request (and empty ones) exactly as Redis does: this path accepts only what
/// that path would accept, and reads it the same way.
// Inlined, as `split_request`: the request is then made where `decode` returns it, not
// copied there (2 % of a pipelined SET's instructions).
#[inline(always)]
fn take_whole_multibulk(buf: &mut BytesMut, limits: &Limits) -> Option<Request> {
    if buf.first() != Some(&b'*') {
        return None;
    }
    let (count, mut pos) = read_length_line(buf, 1)?;
    if count == 0 || count > limits.max_multibulk_len {
        return None;
    }
    let mut spans: SmallVec<[(usize, usize); 4]> = SmallVec::new();
    if count > spans.inline_size() {
        // One allocation for a long request (MSET), not one per doubling.
        spans.reserve_exact(count.min(MAX_PREALLOCATED_ARGS));
    }
    for _ in 0..count {
        if buf.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, start) = read_length_line(buf, pos + 1)?;
        if len > limits.max_bulk_len || buf.len() - start < len + 2 {
            return None;
        }
        spans.push((start, len));
        pos = start + len + 2;
    }
    Some(split_request(buf, pos, &spans))
}

/// Splits the request of `len` bytes off `buf`, its arguments at `spans` (offsets from the
/// buffer start).
#[inline(always)]
fn split_request(buf: &mut BytesMut, len: usize, spans: &[(usize, usize)]) -> Request {
    let raw = buf.split_to(len).freeze();
    // A loop of pushes into a sized vector: `collect` costs a third more here, and a
    // vector made `with_capacity` is a copy more.
    let mut args: SmallVec<[Bytes; 4]> = SmallVec::new();
    if spans.len() > args.inline_size() {
        args.reserve_exact(spans.len());
    }
    for &(start, len) in spans {
        args.push(raw.slice(start..start + len));
    }
    Request { raw, args }
}

/// Reads the digits of a count or length line from `at` up to its `\r`, and returns the
/// number and where the next line starts (the byte after `\r` is skipped unchecked, as in
/// [`find_line_end`]). `None` for anything else: a sign, a leading zero, another byte, more
/// digits than fit, or a line not yet whole; the resumable path sorts those out.
fn read_length_line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    /// Digits of a length that cannot overflow; longer ones exceed every limit anyway.
    const MAX_DIGITS: usize = 18;
    let mut value = 0u64;
    for (i, &byte) in buf.get(at..)?.iter().enumerate().take(MAX_DIGITS + 1) {
        match byte {
            b'0'..=b'9' if i < MAX_DIGITS && !(i == 1 && value == 0) => {
                value = value * 10 + u64::from(byte - b'0');
            }
            b'\r' if i > 0 && at + i + 2 <= buf.len() => {
                return Some((usize::try_from(value).ok()?, at + i + 2));
            }
            _ => return None,
        }
    }
    None
}

/// Finds the `\r` ending the line that starts at `line_start`, resuming the search at
/// `*searched`. Returns its offset once the byte after it is buffered too (Redis skips
/// that byte without checking it is `\n`).
///
/// Redis searches with `strchr`, which stops at a NUL byte: a NUL before the `\r` hides
/// the line end for good, and only the size limit can then end the request.
fn find_line_end(buf: &[u8], line_start: usize, searched: &mut usize) -> Option<usize> {
    let from = (*searched).max(line_start);
    let tail = buf.get(from..).unwrap_or_default();
    match tail.iter().position(|&byte| byte == b'\r' || byte == 0) {
        Some(offset) => {
            let at = from + offset;
            *searched = at;
            (buf[at] == b'\r' && at + 2 <= buf.len()).then_some(at)
        }
        None => {
            *searched = buf.len();
            None
        }
    }
}

/// Walks the arguments of a multibulk request from where `scan` stopped.
fn scan_arguments(
    scan: &mut ArgumentScan,
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Step, ProtocolError> {
    while scan.spans.len() < scan.expected {
        let bulk_len = match scan.bulk_len {
            Some(len) => len,
            None => {
                let Some(line_end) = find_line_end(buf, scan.pos, &mut scan.searched) else {
                    return if buf.len() - scan.pos > limits.max_inline_len {
                        Err(ProtocolError(TOO_BIG_BULK_COUNT.to_owned()))
                    } else {
                        Ok(Step::NeedMore)
                    };
                };
                let marker = buf[scan.pos];
                if marker != b'$' {
                    return Err(expected_dollar(marker));
                }
                let len = parse_i64(&buf[scan.pos + 1..line_end])
                    .and_then(|len| usize::try_from(len).ok())
                    .filter(|&len| len <= limits.max_bulk_len)
                    .ok_or_else(|| ProtocolError(INVALID_BULK_LEN.to_owned()))?;
                scan.pos = line_end + 2;
                scan.bulk_len = Some(len);
                len
            }
        };
        // The payload plus the two bytes that end it must be buffered.
        if buf.len() - scan.pos < bulk_len.saturating_add(2) {
            return Ok(Step::NeedMore);
        }
        scan.spans.push((scan.pos, bulk_len));
        scan.pos += bulk_len + 2;
        scan.searched = scan.pos;
        scan.bulk_len = None;
    }
    Ok(Step::Ready(split_request(buf, scan.pos, &scan.spans)))
}

/// Redis's `expected '$', got 'X'` error. Redis replaces `\r` and `\n` in error texts
/// with spaces; a byte above 0x7f is shown as the Latin-1 character of that value.
fn expected_dollar(marker: u8) -> ProtocolError {
    let shown = match marker {
        b'\r' | b'\n' => ' ',
        other => char::from(other),
    };
    ProtocolError(format!("Protocol error: expected '$', got '{shown}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folded_names_fit_sixteen_bytes_or_match_nothing() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(
            &b"*1\r\n$4\r\nExEc\r\n*1\r\n$16\r\nSUBSCRIBESUBSCRI\r\n*1\r\n$17\r\nSUBSCRIBESUBSCRIB\r\n"[..],
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
            max_nesting: 4,
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
            let Some(taken) = take_whole_multibulk(&mut fast, &limits) else {
                prop_assert_eq!(&fast[..], &input[..]);
                return Ok(());
            };
            let mut slow = BytesMut::from(&input[..]);
            let read = RequestDecoder::new(limits).decode_resumable(&mut slow);
            prop_assert_eq!(read, Ok(Some(taken)));
            prop_assert_eq!(fast, slow);
        }
    }
}
