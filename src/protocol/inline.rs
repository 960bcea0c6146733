//! Inline commands: Redis's `sdssplitargs` rules.
//!
//! An inline command is one line (ended by `\n`, an optional `\r` before it is dropped)
//! split into arguments the way `redis-cli` and `telnet` users expect: blanks separate
//! arguments, `"..."` understands `\n \r \t \b \a \xHH` and `\<any>` escapes, `'...'`
//! understands only `\'`, and a closing quote must be followed by a blank or the end of
//! the line. The rules, the 64 KiB limit and the error texts are those of Redis 7's
//! `processInlineBuffer`, so the proxy refuses exactly what a Redis server refuses.
//!
//! Redis finds the line end with `strchr`, which stops at a NUL byte: a NUL before the
//! `\n` hides the line end, and Redis then waits for more input until the line limit is
//! exceeded. This module does the same, so both behave alike on such input.

use bytes::BytesMut;
use smallvec::SmallVec;

use super::encode;
use super::request::Request;
use super::{Limits, ProtocolError};

/// Redis: `Protocol error: too big inline request`.
const TOO_BIG_INLINE: &str = "Protocol error: too big inline request";
/// Redis: `Protocol error: unbalanced quotes in request`.
const UNBALANCED_QUOTES: &str = "Protocol error: unbalanced quotes in request";

/// What one attempt to take an inline command off the buffer found.
#[derive(Debug)]
pub(crate) enum InlineOutcome {
    /// No line end yet; resume the search for `\n` at this offset next time.
    Incomplete { resume_at: usize },
    /// A blank line of this many bytes (with its line end): Redis ignores it.
    Blank { consumed: usize },
    /// A command; `consumed` bytes of the buffer were its line.
    Command { request: Request, consumed: usize },
}

/// Looks for a complete inline command at the front of `buf`, searching for the line end
/// from `search_from` (bytes before it are known to hold neither `\n` nor NUL).
pub(crate) fn decode_inline(
    buf: &[u8],
    search_from: usize,
    limits: &Limits,
) -> Result<InlineOutcome, ProtocolError> {
    let tail = buf.get(search_from..).unwrap_or_default();
    let stop = tail
        .iter()
        .position(|&byte| byte == b'\n' || byte == 0)
        .map(|offset| search_from + offset);
    let newline = match stop {
        Some(at) if buf[at] == b'\n' => at,
        // Stuck on a NUL (see module doc) or no line end yet: only the size can end this.
        other => {
            if buf.len() > limits.max_inline_len {
                return Err(ProtocolError(TOO_BIG_INLINE.to_owned()));
            }
            return Ok(InlineOutcome::Incomplete {
                resume_at: other.unwrap_or(buf.len()),
            });
        }
    };
    let consumed = newline + 1;
    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
        newline - 1
    } else {
        newline
    };
    let args =
        split_args(&buf[..line_end]).ok_or_else(|| ProtocolError(UNBALANCED_QUOTES.to_owned()))?;
    if args.is_empty() {
        return Ok(InlineOutcome::Blank { consumed });
    }
    Ok(InlineOutcome::Command {
        request: request_from_args(&args),
        consumed,
    })
}

/// The arguments of one inline line, unescaped: their bytes back to back and where each
/// ends (a short line needs no allocation).
#[derive(Debug, Default)]
pub(crate) struct InlineArgs {
    bytes: ArgBytes,
    ends: SmallVec<[usize; 8]>,
}

impl InlineArgs {
    /// How many arguments the line had.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the line was blank.
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The arguments, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }
}

/// Builds a [`Request`] whose `raw` is the multibulk encoding of `args` and whose
/// `args` are slices of that `raw`.
fn request_from_args(args: &InlineArgs) -> Request {
    let mut raw = BytesMut::with_capacity(args.bytes.len() + 16 * (args.len() + 1));
    let mut spans: SmallVec<[(usize, usize); 4]> = SmallVec::with_capacity(args.len());
    encode::array_header(&mut raw, args.len());
    for arg in args.iter() {
        encode::bulk(&mut raw, arg);
        // The payload sits between the header line and the closing CRLF.
        spans.push((raw.len() - 2 - arg.len(), arg.len()));
    }
    let raw = raw.freeze();
    let args = spans
        .iter()
        .map(|&(start, len)| raw.slice(start..start + len))
        .collect();
    Request { raw, args }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Splits one line into arguments as Redis's `sdssplitargs` does; `None` for unbalanced
/// quotes or a closing quote followed by something other than a blank.
///
/// The line is read as a C string: the slice end, or a NUL byte, ends it.
pub(crate) fn split_args(line: &[u8]) -> Option<InlineArgs> {
    let line = match line.iter().position(|&byte| byte == 0) {
        Some(nul) => &line[..nul],
        None => line,
    };
    let mut cursor = Cursor { line, pos: 0 };
    let mut args = InlineArgs::default();
    loop {
        while cursor.at(0) != 0 && is_c_space(cursor.at(0)) {
            cursor.pos += 1;
        }
        if cursor.at(0) == 0 {
            return Some(args);
        }
        // The argument's bytes go straight after the previous one's.
        cursor.argument(&mut args.bytes)?;
        args.ends.push(args.bytes.len());
    }
}

/// Every argument's bytes, one after another.
type ArgBytes = SmallVec<[u8; 64]>;

/// A position in a line that [`split_args`] reads.
struct Cursor<'a> {
    line: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// The byte `ahead` of the position; past the end 0, standing for the C string's
    /// terminator.
    fn at(&self, ahead: usize) -> u8 {
        self.line.get(self.pos + ahead).copied().unwrap_or(0)
    }

    /// Reads one argument into `out`: bare bytes up to a blank or the end, where a quote
    /// opens a quoted part whose closing quote ends the argument. `None`: bad quoting.
    fn argument(&mut self, out: &mut ArgBytes) -> Option<()> {
        loop {
            let byte = self.at(0);
            self.pos += 1;
            match byte {
                // Unlike the blank skipping between arguments, only these four end a bare word.
                b' ' | b'\n' | b'\r' | b'\t' | 0 => return Some(()),
                b'"' => return self.double_quoted(out),
                b'\'' => return self.single_quoted(out),
                other => out.push(other),
            }
        }
    }

    /// The rest of a double-quoted part, with its escapes (`\n`, `\xHH`, ...), through the
    /// closing quote.
    fn double_quoted(&mut self, out: &mut ArgBytes) -> Option<()> {
        loop {
            let byte = self.at(0);
            if byte == b'\\' && self.at(1) == b'x' {
                if let (Some(high), Some(low)) = (hex_value(self.at(2)), hex_value(self.at(3))) {
                    out.push(high * 16 + low);
                    self.pos += 4;
                    continue;
                }
            }
            if byte == b'\\' && self.at(1) != 0 {
                self.pos += 1;
                out.push(match self.at(0) {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
            } else if byte == b'"' {
                return self.close_quote();
            } else if byte == 0 {
                return None;
            } else {
                out.push(byte);
            }
            self.pos += 1;
        }
    }

    /// The rest of a single-quoted part (only `\'` is an escape) through the closing quote.
    fn single_quoted(&mut self, out: &mut ArgBytes) -> Option<()> {
        loop {
            let byte = self.at(0);
            if byte == b'\\' && self.at(1) == b'\'' {
                self.pos += 1;
                out.push(b'\'');
            } else if byte == b'\'' {
                return self.close_quote();
            } else if byte == 0 {
                return None;
            } else {
                out.push(byte);
            }
            self.pos += 1;
        }
    }

    /// Steps over a closing quote, which must be followed by a blank or the end.
    fn close_quote(&mut self) -> Option<()> {
        if self.at(1) != 0 && !is_c_space(self.at(1)) {
            return None;
        }
        self.pos += 1;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> Option<Vec<String>> {
        split_args(line.as_bytes()).map(|args| {
            args.iter()
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect()
        })
    }

    #[test]
    fn bare_words_split_on_blanks() {
        assert_eq!(
            split("  SET  a\tb "),
            Some(vec!["SET".into(), "a".into(), "b".into()])
        );
        assert_eq!(split(""), Some(vec![]));
        assert_eq!(split(" \t "), Some(vec![]));
    }

    #[test]
    fn double_quotes_understand_c_escapes() {
        assert_eq!(
            split(r#""a\n\r\t\b\a\\\"\x41\x4a\q""#),
            Some(vec!["a\n\r\t\u{8}\u{7}\\\"AJq".into()])
        );
        // `\x` without two hex digits is an escaped `x`.
        assert_eq!(split(r#""\xZ1""#), Some(vec!["xZ1".into()]));
        assert_eq!(split(r#""""#), Some(vec!["".into()]));
    }

    #[test]
    fn single_quotes_understand_only_escaped_quote() {
        assert_eq!(split(r"'a\'b\n'"), Some(vec![r"a'b\n".into()]));
    }

    #[test]
    fn quotes_may_start_inside_a_word() {
        assert_eq!(split(r#"a"b c"d"#), None);
        assert_eq!(split(r#"a"b c""#), Some(vec!["ab c".into()]));
    }

    #[test]
    fn unbalanced_or_glued_quotes_are_errors() {
        assert_eq!(split(r#"SET "a b"#), None);
        assert_eq!(split(r#""a"b"#), None);
        assert_eq!(split("'a'b"), None);
        assert_eq!(split(r#""abc\"#), None);
    }

    #[test]
    fn vertical_tab_is_skipped_between_words_but_kept_inside_one() {
        assert_eq!(
            split("\u{b}x y\u{b}z"),
            Some(vec!["x".into(), "y\u{b}z".into()])
        );
    }

    #[test]
    fn decode_inline_reencodes_as_multibulk() {
        let limits = Limits::default();
        match decode_inline(b"ECHO \"a b\"\r\nrest", 0, &limits) {
            Ok(InlineOutcome::Command { request, consumed }) => {
                assert_eq!(consumed, 12);
                assert_eq!(&request.raw[..], b"*2\r\n$4\r\nECHO\r\n$3\r\na b\r\n");
                assert_eq!(request.args.len(), 2);
                assert_eq!(&request.args[1][..], b"a b");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    proptest::proptest! {
        /// An inline command is forwarded as the multibulk frame of exactly the arguments
        /// its line splits into.
        #[test]
        fn the_reencoded_frame_holds_the_split_arguments(
            line in proptest::collection::vec(
                proptest::sample::select(&b"ab \t\"'\\x4\0\r"[..]), 0..40),
        ) {
            let Some(args) = split_args(&line) else { return Ok(()) };
            let mut input = line.clone();
            input.extend_from_slice(b"\n");
            let outcome = decode_inline(&input, 0, &Limits::default());
            let Ok(InlineOutcome::Command { request, .. }) = outcome else {
                // A NUL hides the line end; a blank line is no command.
                proptest::prop_assert!(line.contains(&0) || args.is_empty());
                return Ok(());
            };
            let want: Vec<&[u8]> = args.iter().collect();
            let got: Vec<&[u8]> = request.args.iter().map(|arg| &arg[..]).collect();
            proptest::prop_assert_eq!(&got, &want);
            let mut raw = BytesMut::from(&request.raw[..]);
            let reread = crate::protocol::RequestDecoder::default().decode(&mut raw).unwrap().unwrap();
            proptest::prop_assert!(raw.is_empty());
            proptest::prop_assert_eq!(reread.args, request.args);
        }
    }

    #[test]
    fn nul_hides_the_line_end_until_the_limit() {
        let limits = Limits {
            max_inline_len: 8,
            ..Limits::default()
        };
        assert!(matches!(
            decode_inline(b"PI\0NG\r\n", 0, &limits),
            Ok(InlineOutcome::Incomplete { resume_at: 2 })
        ));
        assert_eq!(
            decode_inline(b"PI\0NG\r\nPING\r\n", 2, &limits)
                .unwrap_err()
                .0,
            TOO_BIG_INLINE
        );
    }
}
