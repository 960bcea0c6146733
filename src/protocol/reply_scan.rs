//! Finding the end of one reply frame (RESP2 or RESP3) in a backend byte stream.
//!
//! The scanner only measures: it walks type bytes, lines and blob lengths, keeping a stack
//! of open aggregates, and reports how many bytes the first complete frame spans, so
//! replies can be forwarded without being parsed into values. Its position is kept
//! between calls, so a large reply arriving in small reads is walked once.
//!
//! Nesting has no limit of its own, as Redis has none on what it writes (a Lua script
//! returning a table that holds itself nests thousands deep): the stack of open aggregates
//! is a vector, never the call stack, and its length is bounded by the bytes buffered
//! (each level takes at least 4). [`reply_nesting`] measures a whole frame the same way,
//! for the readers that recurse to refuse what they could not read.
//!
//! Frames: RESP2 `+ - : $ *` (with the nulls `$-1` and `*-1`) and RESP3 `_ , # ! = ( % ~ >`
//! and `|`. An attribute (`|`) is not a frame of its own: it is measured together with the
//! frame it annotates, at whatever depth it appears. Streamed RESP3 strings and
//! aggregates (`$?`, `*?`) are refused: Redis never sends them.

use super::number::parse_i64;
use super::{Limits, ProtocolError};

/// An aggregate whose elements are not all buffered yet.
#[derive(Debug, Clone, Copy)]
struct OpenAggregate {
    /// Elements still to come (for maps and attributes, keys and values both count).
    remaining: u64,
    /// An attribute: when it ends, the frame it annotates comes next, at the same depth.
    is_attribute: bool,
}

/// Incremental scanner over a backend's reply stream; one per backend connection.
///
/// State is reset automatically whenever [`ReplyScanner::next_frame_len`] returns
/// `Some(len)`: the caller must then split exactly `len` bytes off the buffer before the
/// next call. Between calls that return `None`, the caller may only append to the buffer.
/// After an error the stream is unusable and the connection must be dropped.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    limits: Limits,
    /// Offset of the next unread line (type byte) of the current frame.
    pos: usize,
    /// Where the search for the current line's `\r` resumes.
    searched: usize,
    /// While waiting for a blob's payload: the offset just past its closing `\r\n`.
    blob_end: Option<usize>,
    /// Aggregates opened and not yet complete, innermost last.
    open: Vec<OpenAggregate>,
    /// The most aggregates open at once in the current frame.
    deepest: usize,
}

/// Open aggregates a scanner keeps room for between frames; a deeper frame's stack is
/// given back once it is measured, so one odd reply does not hold memory for good.
const KEPT_NESTING: usize = 64;

impl ReplyScanner {
    /// A scanner enforcing `limits.max_bulk_len`.
    pub fn new(limits: Limits) -> Self {
        ReplyScanner {
            limits,
            ..ReplyScanner::default()
        }
    }

    /// Length of the complete frame at the front of `buf`, if it is all buffered.
    /// Keeps its progress so that repeated calls on a growing buffer stay linear.
    /// The caller splits `len` bytes off `buf` and calls again for the next frame.
    pub fn next_frame_len(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        // Only on a frame's first look: a frame still arriving is resumed where it stopped.
        if self.searched == 0 {
            if let Some(len) = whole_simple_frame(buf, self.limits.max_bulk_len) {
                return Ok(Some(len));
            }
        }
        self.next_frame_len_resumable(buf)
    }

    /// [`ReplyScanner::next_frame_len`] without the one-pass path for whole simple frames.
    fn next_frame_len_resumable(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let outcome = self.scan(buf);
        if !matches!(outcome, Ok(None)) {
            self.reset();
        }
        outcome
    }

    fn reset(&mut self) {
        self.pos = 0;
        self.searched = 0;
        self.blob_end = None;
        self.open.clear();
        self.open.shrink_to(KEPT_NESTING);
        self.deepest = 0;
    }

    fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        loop {
            if let Some(end) = self.blob_end {
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Err(error("bulk payload not followed by CRLF"));
                }
                self.blob_end = None;
                self.move_to(end);
                if self.element_done() {
                    return Ok(Some(end));
                }
                continue;
            }
            let Some(line_end) = self.find_line_end(buf)? else {
                return Ok(None);
            };
            let kind = buf[self.pos];
            let line = &buf[self.pos + 1..line_end];
            let next = line_end + 2;
            match kind {
                b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => {
                    self.move_to(next);
                    if self.element_done() {
                        return Ok(Some(next));
                    }
                }
                b'$' | b'!' | b'=' => {
                    let len = parse_i64(line).ok_or_else(|| error("invalid bulk length"))?;
                    self.move_to(next);
                    if len == -1 {
                        if self.element_done() {
                            return Ok(Some(next));
                        }
                        continue;
                    }
                    let len = usize::try_from(len)
                        .ok()
                        .filter(|&len| len <= self.limits.max_bulk_len)
                        .ok_or_else(|| error("invalid bulk length"))?;
                    self.blob_end = Some(next.saturating_add(len).saturating_add(2));
                }
                b'*' | b'%' | b'~' | b'>' | b'|' => {
                    let count = parse_i64(line).ok_or_else(|| error("invalid multibulk length"))?;
                    self.move_to(next);
                    let is_attribute = kind == b'|';
                    let per_entry = if kind == b'%' || is_attribute { 2 } else { 1 };
                    let remaining = match u64::try_from(count) {
                        Ok(count) => count
                            .checked_mul(per_entry)
                            .ok_or_else(|| error("invalid multibulk length"))?,
                        // The RESP2 null array, `*-1`.
                        Err(_) if count == -1 && !is_attribute => 0,
                        Err(_) => return Err(error("invalid multibulk length")),
                    };
                    if remaining == 0 {
                        // An empty attribute annotates nothing of its own; an empty or
                        // null aggregate is a whole element.
                        if !is_attribute && self.element_done() {
                            return Ok(Some(next));
                        }
                        continue;
                    }
                    self.open.push(OpenAggregate {
                        remaining,
                        is_attribute,
                    });
                    self.deepest = self.deepest.max(self.open.len());
                }
                other => {
                    return Err(ProtocolError(format!(
                        "Protocol error: unknown reply type '{}'",
                        char::from(other).escape_default()
                    )))
                }
            }
        }
    }

    fn move_to(&mut self, pos: usize) {
        self.pos = pos;
        self.searched = pos;
    }

    /// Offset of the `\r` ending the line at `self.pos`, once its `\n` is buffered.
    fn find_line_end(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let from = self.searched.max(self.pos);
        let tail = buf.get(from..).unwrap_or_default();
        let Some(offset) = tail.iter().position(|&byte| byte == b'\r') else {
            self.searched = buf.len();
            return Ok(None);
        };
        let at = from + offset;
        self.searched = at;
        match buf.get(at + 1) {
            None => Ok(None),
            Some(b'\n') if at > self.pos => Ok(Some(at)),
            Some(_) => Err(error("malformed reply line")),
        }
    }

    /// Records that one element ended; true when that completes the whole frame.
    fn element_done(&mut self) -> bool {
        while let Some(top) = self.open.last_mut() {
            top.remaining -= 1;
            if top.remaining > 0 {
                return false;
            }
            let finished = self.open.pop();
            if finished.is_some_and(|aggregate| aggregate.is_attribute) {
                // The annotated frame is still to come.
                return false;
            }
        }
        true
    }
}

/// How many aggregates of `frame`, which must be exactly one complete reply frame, nest
/// inside each other at the deepest point: 0 for a simple frame, 1 for an array of simple
/// frames (an attribute counts as a level too). Measured without recursion, at any depth.
pub fn reply_nesting(frame: &[u8]) -> Result<usize, ProtocolError> {
    let mut scanner = ReplyScanner::default();
    match scanner.scan(frame)? {
        Some(len) if len == frame.len() => Ok(scanner.deepest),
        Some(_) => Err(error("bytes after the reply frame")),
        None => Err(error("incomplete reply frame")),
    }
}

/// The length of the frame at the front of `buf` when it is a whole, well-formed simple
/// string, error, integer, bulk string or RESP2 null (nearly every reply of a plain
/// command: a GET of a missing key answers `$-1`), read in one pass; `None` for anything
/// else, which the resumable scan then reads (or refuses) with its own state and error
/// texts.
fn whole_simple_frame(buf: &[u8], max_bulk_len: usize) -> Option<usize> {
    const NULLS: [&[u8]; 2] = [b"$-1\r\n", b"*-1\r\n"];
    if NULLS.iter().any(|null| buf.starts_with(null)) {
        return Some(5);
    }
    match *buf.first()? {
        b'+' | b'-' | b':' => {
            let cr = buf.iter().position(|&byte| byte == b'\r')?;
            (buf.get(cr + 1) == Some(&b'\n')).then_some(cr + 2)
        }
        b'$' => {
            // Digits only (no sign, no leading zero), as `string2ll` reads a valid length.
            const MAX_DIGITS: usize = 18;
            let mut len = 0usize;
            let mut at = 1;
            loop {
                match *buf.get(at)? {
                    b'0'..=b'9' if at <= MAX_DIGITS && !(at == 2 && len == 0) => {
                        len = len * 10 + usize::from(buf[at] - b'0');
                    }
                    b'\r' if at > 1 => break,
                    _ => return None,
                }
                at += 1;
            }
            if buf.get(at + 1) != Some(&b'\n') || len > max_bulk_len {
                return None;
            }
            let end = at + 2 + len + 2;
            (buf.get(end - 2..end)? == b"\r\n").then_some(end)
        }
        _ => None,
    }
}

fn error(what: &str) -> ProtocolError {
    ProtocolError(format!("Protocol error: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use proptest::prelude::*;

    /// Feeds `stream` whole and returns the frame lengths found, in order.
    fn frame_lens(scanner: &mut ReplyScanner, stream: &[u8]) -> Result<Vec<usize>, ProtocolError> {
        let mut buf = BytesMut::from(stream);
        let mut lens = Vec::new();
        while let Some(len) = scanner.next_frame_len(&buf)? {
            let _ = buf.split_to(len);
            lens.push(len);
        }
        Ok(lens)
    }

    /// Every type, each followed by a PING reply so over-reading would show.
    const EXAMPLES: &[&[u8]] = &[
        b"+OK\r\n",
        b"-ERR unknown command 'FOO'\r\n",
        b":-42\r\n",
        b"$5\r\nhello\r\n",
        b"$0\r\n\r\n",
        b"$6\r\nab\r\ncd\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*2\r\n$3\r\nfoo\r\n:1\r\n",
        b"_\r\n",
        b",3.14\r\n",
        b",inf\r\n",
        b"#t\r\n",
        b"!21\r\nSYNTAX invalid syntax\r\n",
        b"=15\r\ntxt:Some string\r\n",
        b"(3492890328409238509324850943850943825024385\r\n",
        b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
        b"~3\r\n+a\r\n+b\r\n+c\r\n",
        b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n",
        b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.19\r\n$1\r\nb\r\n,0.05\r\n*2\r\n:2039123\r\n:9543892\r\n",
        b"*3\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n:3\r\n",
        b"|0\r\n+OK\r\n",
        b"*2\r\n*2\r\n*1\r\n:1\r\n%0\r\n~0\r\n",
    ];

    #[test]
    fn every_type_is_measured_exactly() {
        for example in EXAMPLES {
            let mut stream = example.to_vec();
            stream.extend_from_slice(b"+PONG\r\n");
            let lens = frame_lens(&mut ReplyScanner::default(), &stream).unwrap();
            assert_eq!(
                lens,
                [example.len(), 7],
                "{:?}",
                String::from_utf8_lossy(example)
            );
        }
    }

    #[test]
    fn every_example_split_at_every_byte() {
        let stream: Vec<u8> = EXAMPLES.concat();
        let expected: Vec<usize> = EXAMPLES.iter().map(|example| example.len()).collect();
        for split in 0..=stream.len() {
            assert_eq!(feed_in_two(&stream, split), expected, "split at {split}");
        }
    }

    fn feed_in_two(stream: &[u8], split: usize) -> Vec<usize> {
        let mut scanner = ReplyScanner::default();
        let mut buf = BytesMut::from(&stream[..split]);
        let mut lens = Vec::new();
        for part in [&[][..], &stream[split..]] {
            buf.extend_from_slice(part);
            while let Some(len) = scanner.next_frame_len(&buf).unwrap() {
                let _ = buf.split_to(len);
                lens.push(len);
            }
        }
        assert!(buf.is_empty());
        lens
    }

    /// One level of each aggregate kind Redis can nest, each holding the next level
    /// (a map as its value, an attribute as the frame it annotates), innermost `leaf`.
    fn nested(levels: &[&[u8]], depth: usize, leaf: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        for level in 0..depth {
            frame.extend_from_slice(levels[level % levels.len()]);
        }
        frame.extend_from_slice(leaf);
        frame
    }

    /// Every aggregate kind: array, map (value), set, push, attribute (annotated frame).
    const LEVELS: &[&[u8]] = &[
        b"*1\r\n",
        b"%1\r\n+key\r\n",
        b"~1\r\n",
        b">2\r\n:1\r\n",
        b"|1\r\n+ttl\r\n:3600\r\n*1\r\n",
        b"*2\r\n$-1\r\n",
    ];

    #[test]
    fn nesting_has_no_limit_of_its_own() {
        // As Redis answers `EVAL "local a = {}; local b = {a}; a[1] = b; return a" 0`.
        let lua = nested(&[b"*1\r\n"], 7995, b"-ERR reached lua stack limit\r\n");
        let mut stream = lua.clone();
        stream.extend_from_slice(b"+PONG\r\n");
        assert_eq!(
            frame_lens(&mut ReplyScanner::default(), &stream),
            Ok(vec![lua.len(), 7])
        );
        assert_eq!(reply_nesting(&lua), Ok(7995));
        let mixed = nested(LEVELS, 3000, b"_\r\n");
        assert_eq!(
            frame_lens(&mut ReplyScanner::default(), &mixed),
            Ok(vec![mixed.len()])
        );
    }

    #[test]
    fn deep_nesting_split_at_every_byte() {
        for levels in LEVELS.iter().map(std::slice::from_ref).chain([LEVELS]) {
            let mut stream = nested(levels, 300, b":7\r\n");
            let first = stream.len();
            stream.extend_from_slice(&nested(levels, 2, b"$2\r\nhi\r\n"));
            let expected = vec![first, stream.len() - first];
            for split in 0..=stream.len() {
                assert_eq!(feed_in_two(&stream, split), expected, "split at {split}");
            }
        }
    }

    #[test]
    fn depth_of_100_000_fits_a_small_stack() {
        // No recursion: a 256 KiB stack would overflow long before 100,000 frames of it.
        let outcome = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let frame = nested(LEVELS, 100_000, b"+deepest\r\n");
                let mut scanner = ReplyScanner::default();
                let mut buf = BytesMut::new();
                let mut lens = Vec::new();
                for chunk in frame.chunks(4096) {
                    buf.extend_from_slice(chunk);
                    if let Some(len) = scanner.next_frame_len(&buf).unwrap() {
                        lens.push(len);
                    }
                }
                (lens, frame.len(), reply_nesting(&frame))
            })
            .expect("spawn")
            .join()
            .expect("no overflow");
        let (lens, len, nesting) = outcome;
        assert_eq!(lens, vec![len]);
        assert_eq!(nesting, Ok(100_000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any chain of aggregate kinds, of any length, is one frame as deep as the chain,
        /// wherever the stream is cut.
        #[test]
        fn arbitrary_deep_chains_split_anywhere(
            kinds in prop::collection::vec(0..LEVELS.len(), 1..3000),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut frame: Vec<u8> = kinds.iter().flat_map(|&kind| LEVELS[kind].to_vec()).collect();
            frame.extend_from_slice(b"$3\r\nend\r\n");
            let split = cut.index(frame.len() + 1);
            prop_assert_eq!(feed_in_two(&frame, split), vec![frame.len()]);
            prop_assert_eq!(reply_nesting(&frame), Ok(kinds.len()));
        }
    }

    #[test]
    fn nesting_is_measured_per_frame() {
        assert_eq!(reply_nesting(b"+OK\r\n"), Ok(0));
        assert_eq!(reply_nesting(b"*0\r\n"), Ok(0));
        assert_eq!(reply_nesting(b"*2\r\n:1\r\n*1\r\n:2\r\n"), Ok(2));
        assert_eq!(reply_nesting(b"|1\r\n+a\r\n:1\r\n*1\r\n:2\r\n"), Ok(1));
        assert_eq!(
            reply_nesting(b"*1\r\n|1\r\n+a\r\n*1\r\n:1\r\n:2\r\n"),
            Ok(3)
        );
        assert!(reply_nesting(b"*2\r\n:1\r\n").is_err());
        assert!(reply_nesting(b"+OK\r\n+OK\r\n").is_err());
        // A scanner that measured a deep frame measures the next one afresh.
        let mut scanner = ReplyScanner::default();
        let deep = nested(&[b"*1\r\n"], 10_000, b":1\r\n");
        assert_eq!(frame_lens(&mut scanner, &deep), Ok(vec![deep.len()]));
        assert!(scanner.open.capacity() <= KEPT_NESTING);
        assert_eq!(scanner.deepest, 0);
    }

    #[test]
    fn bulk_beyond_the_limit_and_garbage_are_refused() {
        let limits = Limits {
            max_bulk_len: 4,
            ..Limits::default()
        };
        assert_eq!(
            frame_lens(&mut ReplyScanner::new(limits), b"$4\r\nabcd\r\n"),
            Ok(vec![10])
        );
        for bad in [
            &b"$5\r\nabcde\r\n"[..],
            b"$-2\r\n",
            b"$x\r\n",
            b"*-2\r\n",
            b"$?\r\n",
            b"@1\r\n",
            b"+OK\rX",
            b"$2\r\nabXY",
            b"\r\n",
        ] {
            assert!(
                frame_lens(&mut ReplyScanner::new(limits), bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn five_megabyte_bulk_in_small_chunks() {
        let payload_len = 5 * 1024 * 1024;
        let mut frame = format!("${payload_len}\r\n").into_bytes();
        frame.resize(frame.len() + payload_len, b'x');
        frame.extend_from_slice(b"\r\n");
        let started = std::time::Instant::now();
        let mut scanner = ReplyScanner::default();
        let mut buf = BytesMut::new();
        let mut found = None;
        for chunk in frame.chunks(512) {
            assert_eq!(found, None, "frame reported before its last byte");
            buf.extend_from_slice(chunk);
            found = scanner.next_frame_len(&buf).unwrap();
        }
        assert_eq!(found, Some(frame.len()));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    /// A reply value, to generate arbitrary well-formed frames.
    #[derive(Debug, Clone)]
    enum Value {
        Simple(String),
        Integer(i64),
        Bulk(Vec<u8>),
        Null,
        Array(Vec<Value>),
        Map(Vec<(Value, Value)>),
        Attributed(Vec<(Value, Value)>, Box<Value>),
    }

    fn encode(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Simple(text) => out.extend_from_slice(format!("+{text}\r\n").as_bytes()),
            Value::Integer(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Value::Bulk(data) => {
                out.extend_from_slice(format!("${}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Value::Null => out.extend_from_slice(b"_\r\n"),
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|item| encode(item, out));
            }
            Value::Map(pairs) | Value::Attributed(pairs, _) => {
                let marker = if matches!(value, Value::Map(_)) {
                    '%'
                } else {
                    '|'
                };
                out.extend_from_slice(format!("{marker}{}\r\n", pairs.len()).as_bytes());
                for (key, item) in pairs {
                    encode(key, out);
                    encode(item, out);
                }
                if let Value::Attributed(_, annotated) = value {
                    encode(annotated, out);
                }
            }
        }
    }

    fn arbitrary_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            "[a-z ]{0,8}".prop_map(Value::Simple),
            any::<i64>().prop_map(Value::Integer),
            prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bulk),
            Just(Value::Null),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((inner.clone(), inner.clone()), 0..3).prop_map(Value::Map),
                (
                    prop::collection::vec((inner.clone(), inner.clone()), 0..2),
                    inner
                )
                    .prop_map(|(pairs, annotated)| Value::Attributed(pairs, Box::new(annotated))),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_frames_split_at_every_byte(values in prop::collection::vec(arbitrary_value(), 1..4)) {
            let mut stream = Vec::new();
            let mut expected = Vec::new();
            for value in &values {
                let before = stream.len();
                encode(value, &mut stream);
                expected.push(stream.len() - before);
            }
            for split in 0..=stream.len() {
                prop_assert_eq!(feed_in_two(&stream, split), expected.clone());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = frame_lens(&mut ReplyScanner::default(), &input);
        }
    }

    proptest! {
        // Most inputs are not whole simple frames (a changed byte, a cut end, random
        // parts), so more cases.
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Whatever the one-pass path measures, the resumable scan measures the same.
        #[test]
        fn the_one_pass_path_reads_as_the_resumable_one(
            input in prop_oneof![
                (
                    arbitrary_value(),
                    prop::option::of((
                        any::<prop::sample::Index>(),
                        prop::sample::select(&b"+-:$*\r\n0-9x"[..]),
                    )),
                    0usize..3,
                ).prop_map(|(value, change, cut)| {
                    let mut frame = Vec::new();
                    encode(&value, &mut frame);
                    if let Some((at, byte)) = change {
                        let at = at.index(frame.len());
                        frame[at] = byte;
                    }
                    frame.truncate(frame.len().saturating_sub(cut));
                    frame.extend_from_slice(b"+PONG\r\n");
                    frame
                }),
                prop::collection::vec(
                    prop_oneof![
                        Just(b"$".to_vec()), Just(b"+".to_vec()), Just(b"\r\n".to_vec()),
                        (0u32..30).prop_map(|n| n.to_string().into_bytes()),
                        prop::collection::vec(any::<u8>(), 0..4),
                    ],
                    0..12,
                ).prop_map(|parts| parts.concat()),
            ],
            max_bulk_len in 5usize..12,
        ) {
            let limits = Limits { max_bulk_len, ..Limits::default() };
            let Some(len) = whole_simple_frame(&input, max_bulk_len) else {
                return Ok(());
            };
            let resumable = ReplyScanner::new(limits).next_frame_len_resumable(&input);
            prop_assert_eq!(resumable, Ok(Some(len)));
        }
    }

    #[test]
    fn common_replies_take_the_one_pass_path() {
        for frame in [
            &b"+OK\r\n"[..],
            b"-ERR x\r\n",
            b":12\r\n",
            b"$0\r\n\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
        ] {
            assert_eq!(whole_simple_frame(frame, 512), Some(frame.len()));
        }
        for frame in [
            &b"$-1\r"[..],
            b"$-2\r\n",
            b"*1\r\n:1\r\n",
            b"$03\r\nabc\r\n",
            b"$3\r\nab",
            b"+OK\r",
        ] {
            assert_eq!(whole_simple_frame(frame, 512), None);
        }
    }
}
