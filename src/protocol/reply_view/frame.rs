//! The byte-level reading behind [`super::ReplyView`]: a frame's header (the common ones,
//! a bulk string and an array with a plain count, on a short path), a frame's length
//! checked whole in one pass without recursion (a count of frames still to read says where
//! it ends, at any depth), and the view at the front of some bytes.

use super::{parse_i64, AggregateKind, Elements, ProtocolError, ReplyView};

/// One frame's header: a complete scalar, or an aggregate's kind and element count.
enum Head<'a> {
    Scalar(ReplyView<'a>),
    Aggregate(AggregateKind, usize),
    /// `|n`: n key/value pairs about the frame that follows.
    Attribute(usize),
}

/// Most digits a plain count line has: below 10^18, the sum cannot overflow.
const PLAIN_COUNT_DIGITS: usize = 18;

/// The count of a length or element-count line at the front of `buf` (after its type
/// byte) and where the bytes after it start, when the line is what Redis sends: `0`, or
/// digits without a leading zero, then CRLF. `None` for anything else, which the general
/// reading in [`read_head`] accepts or refuses.
fn plain_count(buf: &[u8]) -> Option<(usize, usize)> {
    let mut count = 0usize;
    let mut at = 1;
    while let Some(&digit) = buf.get(at) {
        if !digit.is_ascii_digit() {
            break;
        }
        count = count * 10 + usize::from(digit - b'0');
        at += 1;
        if at > PLAIN_COUNT_DIGITS {
            return None;
        }
    }
    let digits = at - 1;
    if digits == 0 || (digits > 1 && buf[1] == b'0') || buf.get(at..at + 2) != Some(b"\r\n") {
        return None;
    }
    Some((count, at + 2))
}

/// The header at the front of `buf` and where the bytes after it start.
#[inline]
fn read_head(buf: &[u8]) -> Result<(Head<'_>, usize), ProtocolError> {
    match plain_head(buf) {
        Some(head) => Ok(head),
        None => read_any_head(buf),
    }
}

/// A bulk string or an array with a count as Redis writes it, the bulk of what a reply
/// holds, read in one pass; `None` for anything else, which [`read_any_head`] reads or
/// refuses.
#[inline]
fn plain_head(buf: &[u8]) -> Option<(Head<'_>, usize)> {
    let kind = *buf.first()?;
    if kind != b'$' && kind != b'*' {
        return None;
    }
    let (count, after) = plain_count(buf)?;
    if kind == b'*' {
        return Some((Head::Aggregate(AggregateKind::Array, count), after));
    }
    let end = after.checked_add(count)?;
    let data = buf.get(after..end)?;
    if buf.get(end..end + 2) != Some(b"\r\n") {
        return None;
    }
    Some((Head::Scalar(ReplyView::Bulk(data)), end + 2))
}

/// [`read_head`] of any header, and the error of a malformed one.
#[inline(never)]
fn read_any_head(buf: &[u8]) -> Result<(Head<'_>, usize), ProtocolError> {
    let kind = *buf.first().ok_or_else(|| error("incomplete reply frame"))?;
    // The line starts after the type byte: a `\r` in its place (`\r\n`) is a type byte
    // like any unknown one, not an empty line before it.
    let cr = buf[1..]
        .iter()
        .position(|&b| b == b'\r')
        .map(|at| at + 1)
        .ok_or_else(|| error("incomplete reply frame"))?;
    if buf.get(cr + 1) != Some(&b'\n') {
        return Err(error("expected CRLF"));
    }
    let line = &buf[1..cr];
    let after = cr + 2;
    let scalar = |view| Ok((Head::Scalar(view), after));
    match kind {
        b'+' => scalar(ReplyView::Simple(line)),
        b'-' => scalar(ReplyView::Error(line)),
        b':' => scalar(ReplyView::Int(
            parse_i64(line).ok_or_else(|| error("invalid integer"))?,
        )),
        b',' => scalar(ReplyView::Double(line)),
        b'(' => scalar(ReplyView::BigNumber(line)),
        b'#' => match line {
            b"t" => scalar(ReplyView::Boolean(true)),
            b"f" => scalar(ReplyView::Boolean(false)),
            _ => Err(error("invalid boolean")),
        },
        b'_' if line.is_empty() => scalar(ReplyView::Null),
        b'$' | b'=' | b'!' => {
            let Some(len) = read_count(line)? else {
                return if kind == b'$' {
                    scalar(ReplyView::Null)
                } else {
                    Err(error("invalid length"))
                };
            };
            let (view, end) = read_blob(buf, kind, len, after)?;
            Ok((Head::Scalar(view), end))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(n) = read_count(line)? else {
                return if kind == b'*' {
                    scalar(ReplyView::Null)
                } else {
                    Err(error("invalid length"))
                };
            };
            let head = match kind {
                b'*' => Head::Aggregate(AggregateKind::Array, n),
                b'~' => Head::Aggregate(AggregateKind::Set, n),
                b'>' => Head::Aggregate(AggregateKind::Push, n),
                b'%' => Head::Aggregate(AggregateKind::Map, n),
                _ => Head::Attribute(n),
            };
            Ok((head, after))
        }
        _ => Err(error("invalid reply type")),
    }
}

/// A length or element count: `None` for `-1`, RESP2's null.
fn read_count(line: &[u8]) -> Result<Option<usize>, ProtocolError> {
    if let [b'-', b'1'] = line {
        return Ok(None);
    }
    parse_i64(line)
        .and_then(|n| usize::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| error("invalid length"))
}

/// The blob string of type `kind` (`$`, `=` or `!`) whose `len` bytes of data start at `at`
/// in `buf`, and where its frame ends.
fn read_blob(
    buf: &[u8],
    kind: u8,
    len: usize,
    at: usize,
) -> Result<(ReplyView<'_>, usize), ProtocolError> {
    let end = at.checked_add(len).ok_or_else(|| error("invalid length"))?;
    let data = buf
        .get(at..end)
        .ok_or_else(|| error("incomplete reply frame"))?;
    if buf.get(end..end + 2) != Some(b"\r\n") {
        return Err(error("expected CRLF"));
    }
    let view = match kind {
        b'!' => ReplyView::Error(data),
        b'=' => match (data.get(..3), data.get(3), data.get(4..)) {
            (Some(format), Some(b':'), Some(text)) => ReplyView::Verbatim { format, text },
            _ => return Err(error("invalid verbatim string")),
        },
        _ => ReplyView::Bulk(data),
    };
    Ok((view, end + 2))
}

/// The view of the frame at the front of `buf` and that frame's length. A scalar's header
/// is the whole frame, so it is read once; an aggregate's elements are measured from
/// where its header ends.
pub(super) fn view_at(buf: &[u8]) -> Result<(ReplyView<'_>, usize), ProtocolError> {
    match read_head(buf)? {
        (Head::Scalar(view), len) => Ok((view, len)),
        (head, len) => nested_view_at(buf, head, len),
    }
}

/// [`view_at`] of an aggregate or an attribute whose header `head` takes `len` bytes.
#[inline(never)]
fn nested_view_at<'a>(
    buf: &'a [u8],
    head: Head<'a>,
    len: usize,
) -> Result<(ReplyView<'a>, usize), ProtocolError> {
    match head {
        Head::Scalar(view) => Ok((view, len)),
        Head::Aggregate(kind, n) => {
            let remaining = if kind == AggregateKind::Map {
                n.checked_mul(2).ok_or_else(|| error("invalid length"))?
            } else {
                n
            };
            let end = len + frames_len(&buf[len..], remaining)?;
            let elements = Elements {
                rest: &buf[len..end],
                remaining,
            };
            Ok((ReplyView::Aggregate(kind, elements), end))
        }
        Head::Attribute(_) => {
            let end = frame_len(buf)?;
            Ok((read_view(&buf[..end])?, end))
        }
    }
}

/// The length of the frame at the front of `buf`, checked whole, without recursion.
pub(super) fn frame_len(buf: &[u8]) -> Result<usize, ProtocolError> {
    frames_len(buf, 1)
}

/// The length of the `frames` frames one after the other at the front of `buf`, checked
/// whole, without recursion.
fn frames_len(buf: &[u8], frames: usize) -> Result<usize, ProtocolError> {
    // Every frame takes at least 3 bytes: a count beyond that is a lie.
    if frames > buf.len() / 3 + 1 {
        return Err(error("incomplete reply frame"));
    }
    let mut at = 0;
    // Frames still to read: the ones asked for plus every element opened since.
    let mut pending = frames;
    while pending > 0 {
        let (head, len) = read_head(&buf[at..])?;
        at += len;
        pending -= 1;
        let more = match head {
            Head::Scalar(_) => Some(0),
            Head::Aggregate(AggregateKind::Map, n) => n.checked_mul(2),
            Head::Aggregate(_, n) => Some(n),
            // The pairs, then the frame they describe (still counted as one).
            Head::Attribute(n) => n.checked_mul(2).and_then(|pairs| pairs.checked_add(1)),
        };
        let more = more.ok_or_else(|| error("invalid length"))?;
        // Every element takes at least 3 bytes: a count beyond that is a lie.
        if more > (buf.len() - at) / 3 + 1 {
            return Err(error("incomplete reply frame"));
        }
        pending += more;
    }
    Ok(at)
}

/// The view of `frame`, one already checked frame, its attributes skipped.
pub(super) fn read_view(frame: &[u8]) -> Result<ReplyView<'_>, ProtocolError> {
    let mut at = 0;
    loop {
        let (head, len) = read_head(&frame[at..])?;
        at += len;
        match head {
            Head::Scalar(view) => return Ok(view),
            Head::Aggregate(kind, n) => {
                let remaining = if kind == AggregateKind::Map {
                    n.saturating_mul(2)
                } else {
                    n
                };
                let elements = Elements {
                    rest: &frame[at..],
                    remaining,
                };
                return Ok(ReplyView::Aggregate(kind, elements));
            }
            Head::Attribute(n) => {
                for _ in 0..n.saturating_mul(2) {
                    at += frame_len(&frame[at..])?;
                }
            }
        }
    }
}

pub(super) fn error(what: &str) -> ProtocolError {
    ProtocolError(format!("Protocol error: {what}"))
}
