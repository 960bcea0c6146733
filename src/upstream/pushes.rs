//! Reading the frames a subscribed node connection receives: the elements of a flat
//! push or array, its kind word (`message`, `subscribe`...), and whether a channel is a
//! keyspace notification's. Pure; never panics on any input.

use std::ops::Range;

/// The prefix of keyspace notification channels (`__keyspace@<db>__:<key>`).
pub const KEYSPACE: &[u8] = b"__keyspace@";
/// The prefix of keyevent notification channels (`__keyevent@<db>__:<event>`).
pub const KEYEVENT: &[u8] = b"__keyevent@";

/// Whether `channel` is a keyspace or keyevent notification channel.
pub fn is_keyspace_channel(channel: &[u8]) -> bool {
    channel.starts_with(KEYSPACE) || channel.starts_with(KEYEVENT)
}

/// One element of a flat array or push frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Element {
    /// A bulk string: where its payload lies in the frame.
    Bulk(Range<usize>),
    /// A null (`$-1`, `*-1` or `_`).
    Null,
    /// An integer.
    Int(i64),
}

/// The elements of a flat `*` or `>` frame of bulk strings, integers and nulls (every
/// Pub/Sub confirmation and message is one); `None` for anything else.
pub fn elements(frame: &[u8]) -> Option<Vec<Element>> {
    if !matches!(frame.first(), Some(b'*' | b'>')) {
        return None;
    }
    let (count, mut pos) = line_number(frame, 1)?;
    let count = usize::try_from(count).ok()?;
    // The count comes from the backend: never reserve more than the frame can hold.
    let mut out = Vec::with_capacity(count.min(8));
    for _ in 0..count {
        match frame.get(pos)? {
            b'$' => {
                let (len, start) = line_number(frame, pos + 1)?;
                if len < 0 {
                    out.push(Element::Null);
                    pos = start;
                    continue;
                }
                let end = start.checked_add(usize::try_from(len).ok()?)?;
                if frame.get(end..end + 2)? != b"\r\n" {
                    return None;
                }
                out.push(Element::Bulk(start..end));
                pos = end + 2;
            }
            b':' => {
                let (n, next) = line_number(frame, pos + 1)?;
                out.push(Element::Int(n));
                pos = next;
            }
            b'_' => {
                if frame.get(pos + 1..pos + 3)? != b"\r\n" {
                    return None;
                }
                out.push(Element::Null);
                pos += 3;
            }
            _ => return None,
        }
    }
    (pos == frame.len()).then_some(out)
}

/// The number on the line starting at `from`, and where the next line starts.
fn line_number(frame: &[u8], from: usize) -> Option<(i64, usize)> {
    let rest = frame.get(from..)?;
    let cr = rest.iter().position(|&b| b == b'\r')?;
    if rest.get(cr + 1) != Some(&b'\n') {
        return None;
    }
    let n = std::str::from_utf8(&rest[..cr]).ok()?.parse().ok()?;
    Some((n, from + cr + 2))
}

/// The first element of a Pub/Sub frame (`message`, `subscribe`, ...), if it has one.
pub fn kind_word<'a>(frame: &'a [u8], elems: &[Element]) -> Option<&'a [u8]> {
    match elems.first()? {
        Element::Bulk(range) => frame.get(range.clone()),
        _ => None,
    }
}

/// Whether `word` names a subscription confirmation rather than a message.
pub fn is_confirmation(word: &[u8]) -> bool {
    matches!(
        word,
        b"subscribe"
            | b"unsubscribe"
            | b"psubscribe"
            | b"punsubscribe"
            | b"ssubscribe"
            | b"sunsubscribe"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_of_a_resp2_message_and_a_resp3_confirmation() {
        let message = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n";
        let elems = elements(message).expect("flat array");
        assert_eq!(kind_word(message, &elems), Some(&b"message"[..]));
        match &elems[2] {
            Element::Bulk(range) => assert_eq!(&message[range.clone()], b"hello"),
            other => panic!("payload parsed as {other:?}"),
        }
        let confirm = b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n";
        let elems = elements(confirm).expect("flat push");
        assert_eq!(elems[1], Element::Null);
        assert_eq!(elems[2], Element::Int(0));
    }

    #[test]
    fn elements_refuses_truncated_nested_or_trailing_input() {
        assert_eq!(elements(b"*2\r\n$7\r\nmessage\r\n"), None);
        assert_eq!(elements(b"*1\r\n*0\r\n"), None);
        assert_eq!(elements(b"*1\r\n:1\r\n:2\r\n"), None);
        assert_eq!(elements(b"*1\r\n$5\r\nab\r\n"), None);
        assert_eq!(elements(b"+OK\r\n"), None);
        assert_eq!(elements(b"*99999999999\r\n"), None);
    }
}
