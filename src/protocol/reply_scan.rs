//! Finding the end of one reply frame (RESP2 or RESP3) in a backend byte stream.

use bytes::BytesMut;

use super::{Limits, ProtocolError};

/// Incremental scanner over a backend's reply stream; one per backend connection.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    limits: Limits,
}

impl ReplyScanner {
    pub fn new(limits: Limits) -> Self {
        ReplyScanner { limits }
    }

    /// Length of the complete frame at the front of `buf`, if it is all buffered.
    /// Keeps its progress so that repeated calls on a growing buffer stay linear.
    /// The caller splits `len` bytes off `buf` and calls again for the next frame.
    pub fn next_frame_len(&mut self, buf: &BytesMut) -> Result<Option<usize>, ProtocolError> {
        // This version rescans from the start on every call: simple and correct, but
        // quadratic for a large frame arriving in many small reads.
        let mut pos = 0usize;
        // Elements still expected by each open aggregate, innermost last.
        let mut open: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
        loop {
            let Some(line_end) = find_crlf(buf, pos) else {
                return Ok(None);
            };
            let kind = buf[pos];
            let header = &buf[pos + 1..line_end];
            pos = line_end + 2;
            let children = match kind {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
                b'$' | b'!' | b'=' => {
                    let len = parse_len(header)?;
                    if len >= 0 {
                        let len = usize::try_from(len).map_err(|_| bad("invalid bulk length"))?;
                        if len > self.limits.max_bulk_len {
                            return Err(bad("invalid bulk length"));
                        }
                        let end = pos
                            .checked_add(len)
                            .ok_or_else(|| bad("invalid bulk length"))?;
                        if buf.len() < end + 2 {
                            return Ok(None);
                        }
                        if &buf[end..end + 2] != b"\r\n" {
                            return Err(bad("bulk string not terminated by CRLF"));
                        }
                        pos = end + 2;
                    }
                    0
                }
                b'*' | b'~' | b'>' | b'%' | b'|' => {
                    let count = parse_len(header)?;
                    let count = usize::try_from(count).unwrap_or(0);
                    let per_entry = if matches!(kind, b'%' | b'|') { 2 } else { 1 };
                    let mut children = count
                        .checked_mul(per_entry)
                        .ok_or_else(|| bad("invalid multibulk length"))?;
                    if kind == b'|' {
                        // Attributes precede the frame they describe: both form one reply.
                        children += 1;
                    }
                    children
                }
                other => return Err(bad(&format!("unexpected reply type byte 0x{other:02x}"))),
            };
            if children > 0 {
                if open.len() >= self.limits.max_nesting {
                    return Err(bad("reply nested too deeply"));
                }
                open.push(children);
                continue;
            }
            // One element finished: close every aggregate it completes.
            loop {
                match open.last_mut() {
                    None => return Ok(Some(pos)),
                    Some(remaining) => {
                        *remaining -= 1;
                        if *remaining > 0 {
                            break;
                        }
                        open.pop();
                    }
                }
            }
        }
    }
}

fn bad(what: &str) -> ProtocolError {
    ProtocolError(format!("Protocol error: {what}"))
}

/// Index of the `\r` of the first CRLF at or after `from`.
fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at < buf.len() {
        let cr = at + buf.get(at..)?.iter().position(|&b| b == b'\r')?;
        match buf.get(cr + 1) {
            Some(b'\n') => return Some(cr),
            Some(_) => at = cr + 1,
            None => return None,
        }
    }
    None
}

/// A decimal length or count, as RESP writes it (`-1` for null).
fn parse_len(digits: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .filter(|&n| n >= -1)
        .ok_or_else(|| bad("invalid length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(bytes: &[u8]) -> Result<Option<usize>, ProtocolError> {
        ReplyScanner::new(Limits::default()).next_frame_len(&BytesMut::from(bytes))
    }

    #[test]
    fn complete_frames_report_their_length() {
        let frames: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b"$3\r\nfoo\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"_\r\n",
            b",1.5\r\n",
            b"#t\r\n",
            b"(123\r\n",
            b"!3\r\nerr\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"%1\r\n+k\r\n$1\r\nv\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b">2\r\n+message\r\n$1\r\nx\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
        ];
        for frame in frames {
            let mut with_tail = frame.to_vec();
            with_tail.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(scan(&with_tail).unwrap(), Some(frame.len()), "{frame:?}");
            for cut in 0..frame.len() {
                assert_eq!(scan(&frame[..cut]).unwrap(), None, "{frame:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(scan(b"?x\r\n").is_err());
        assert!(scan(b"$3\r\nfooXY").is_err());
        assert!(scan(b"*x\r\n").is_err());
        let deep = "*1\r\n".repeat(200);
        assert!(scan(deep.as_bytes()).is_err());
    }
}
