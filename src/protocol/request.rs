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
use one_pass::take_whole_multibulk;

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

/// One command as the client sent it. The default has no arguments: a place for
/// [`RequestDecoder::decode_into`] to decode into, never a request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request as a RESP multibulk frame, byte-exact when the client sent multibulk
    /// (re-encoded for inline commands), so an untouched command is forwarded as is.
    pub raw: Bytes,
    /// The arguments, command name first; each a slice of `raw` (no copy).
    /// Never empty in a decoded request: empty requests are skipped by the decoder.
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
    /// A multibulk request whose header has been read. Boxed: only a request split across
    /// reads parks here, and inline it would make every client's decoder 100 bytes larger.
    Arguments(Box<ArgumentScan>),
}

/// `(offset, length)` of each argument of a request in its buffer. Inline like
/// `Request::args`, so decoding a command of up to four arguments does not touch the heap.
type Spans = SmallVec<[(usize, usize); 4]>;

/// Progress through the arguments of a multibulk request; offsets are from the buffer start.
#[derive(Debug)]
struct ArgumentScan {
    /// Arguments announced by the header.
    expected: usize,
    /// Each complete argument so far.
    spans: Spans,
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
        let mut request = Request::default();
        Ok(self.decode_into(buf, &mut request)?.then_some(request))
    }

    /// [`RequestDecoder::decode`] into `request`, whose contents it replaces when it takes
    /// one (`Ok(true)`). A whole request (the usual case) is made in place: a request holds
    /// four arguments inline, and each move of one is a copy (two when it is returned).
    pub fn decode_into(
        &mut self,
        buf: &mut BytesMut,
        request: &mut Request,
    ) -> Result<bool, ProtocolError> {
        if let Progress::Start = self.progress {
            if take_whole_multibulk(buf, &self.limits, request) {
                return Ok(true);
            }
        }
        match self.decode_resumable(buf)? {
            Some(decoded) => {
                *request = decoded;
                Ok(true)
            }
            None => Ok(false),
        }
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
                    self.progress = Progress::Arguments(Box::new(scan));
                }
                Ok(step)
            }
            Progress::Arguments(scan) => scan_arguments(scan, buf, &self.limits),
        }
    }
}

/// Splits the request of `len` bytes off `buf`, its arguments at `spans` (offsets from the
/// buffer start).
fn split_request(buf: &mut BytesMut, len: usize, spans: &[(usize, usize)]) -> Request {
    let mut request = Request::default();
    split_request_into(buf, len, spans, &mut request);
    request
}

/// [`split_request`] into `request`, whose contents it replaces.
#[inline(always)]
fn split_request_into(
    buf: &mut BytesMut,
    len: usize,
    spans: &[(usize, usize)],
    request: &mut Request,
) {
    let raw = buf.split_to(len).freeze();
    let args = &mut request.args;
    // Within a pass the place still holds the arguments of the request before, often as
    // many (a pipeline of one command): those are replaced where they are, which spares
    // the clearing and the pushes.
    if args.len() == spans.len() {
        for (arg, &(start, len)) in args.iter_mut().zip(spans) {
            *arg = raw.slice(start..start + len);
        }
    } else {
        args.clear();
        if spans.len() > args.capacity() {
            args.reserve_exact(spans.len());
        }
        for &(start, len) in spans {
            args.push(raw.slice(start..start + len));
        }
    }
    request.raw = raw;
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

mod one_pass;
#[cfg(test)]
mod tests;
