//! The one-pass path of the request decoder: a whole, well-formed multibulk request (what
//! pipelined and unpipelined clients send nearly always) read and split off in one walk,
//! without the resumable state. It accepts only what the resumable path would accept, and
//! reads it the same way; anything else is left to that path untouched.

use bytes::BytesMut;

use super::{split_request_into, Limits, Request, MAX_PREALLOCATED_ARGS};

/// Takes a whole, well-formed multibulk request off the front of `buf` in one pass, into
/// `request`: the common case of a pipelined or unpipelined client, worth a path without
/// the resumable state. `false` leaves `buf` and `request` untouched for the resumable
/// path, which also answers every malformed request (and empty ones) exactly as Redis
/// does: this path accepts only what that path would accept, and reads it the same way.
#[inline(always)]
pub(super) fn take_whole_multibulk(
    buf: &mut BytesMut,
    limits: &Limits,
    request: &mut Request,
) -> bool {
    if buf.first() != Some(&b'*') {
        return false;
    }
    let Some((count, pos)) = read_length_line(buf, 1) else {
        return false;
    };
    if count == 0 || count > limits.max_multibulk_len {
        return false;
    }
    // One allocation for a long request (MSET); a count past the preallocation's cap
    // (its arguments may never come) takes the resumable path, which grows as they do.
    if count > MAX_PREALLOCATED_ARGS {
        return false;
    }
    // Most requests have a few arguments: their places are found on the stack, without
    // the growth checks of a vector (about 40 instructions of a SET).
    let mut inline = [(0, 0); INLINE_SPANS];
    let mut long = Vec::new();
    let spans = if count <= INLINE_SPANS {
        &mut inline[..count]
    } else {
        long.resize(count, (0, 0));
        &mut long[..]
    };
    let Some(len) = locate_arguments(buf, limits, pos, spans) else {
        return false;
    };
    split_request_into(buf, len, spans, request);
    true
}

/// Arguments whose places [`take_whole_multibulk`] finds on the stack.
const INLINE_SPANS: usize = 4;

/// Fills `spans` with the places of as many bulk arguments, the first at `pos`, and returns
/// the request's length; `None` when one is not whole or not well-formed (see
/// [`take_whole_multibulk`]).
#[inline(always)]
fn locate_arguments(
    buf: &[u8],
    limits: &Limits,
    mut pos: usize,
    spans: &mut [(usize, usize)],
) -> Option<usize> {
    for span in spans {
        if buf.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, start) = read_length_line(buf, pos + 1)?;
        if len > limits.max_bulk_len || buf.len() - start < len + 2 {
            return None;
        }
        *span = (start, len);
        pos = start + len + 2;
    }
    Some(pos)
}

/// Reads the digits of a count or length line from `at` up to its `\r`, and returns the
/// number and where the next line starts (the byte after `\r` is skipped unchecked, as in
/// `find_line_end`). `None` for anything else: a sign, a leading zero, another byte, more
/// digits than fit, or a line not yet whole; the resumable path sorts those out.
#[inline(always)]
fn read_length_line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    let line = buf.get(at..)?;
    // One and two digits (a command's arguments, most values) without the loop's checks
    // per byte: a line is whole once the byte after its `\r` is there.
    if let [first, second, third, ..] = *line {
        let high = first.wrapping_sub(b'0');
        if high <= 9 {
            if second == b'\r' {
                return Some((usize::from(high), at + 3));
            }
            let low = second.wrapping_sub(b'0');
            if low <= 9 && high != 0 && third == b'\r' && line.len() >= 4 {
                return Some((usize::from(high * 10 + low), at + 4));
            }
        }
    }
    read_long_length_line(buf, at)
}

/// [`read_length_line`] of any line, a digit at a time.
fn read_long_length_line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
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
