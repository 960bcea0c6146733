//! Reading the frames a subscribed node connection receives: the elements of a flat
//! push or array, its kind word (`message`, `subscribe`...), and whether a channel is a
//! keyspace notification's. Pure; never panics on any input.

use crate::protocol::ReplyView;

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
pub enum Element<'a> {
    /// A bulk string's payload, as a slice of the frame.
    Bulk(&'a [u8]),
    /// A null (`$-1` or `_`).
    Null,
    /// An integer.
    Int(i64),
}

/// The elements of a flat `*` or `>` frame of bulk strings, integers and nulls (every
/// Pub/Sub confirmation and message is one); `None` for anything else.
pub fn elements(frame: &[u8]) -> Option<Vec<Element<'_>>> {
    if !matches!(frame.first(), Some(b'*' | b'>')) {
        return None;
    }
    let items = ReplyView::parse(frame).ok()?.elements()?;
    let mut out = Vec::with_capacity(items.len());
    // The type byte of each element's frame tells a null bulk string from a null array,
    // which no Pub/Sub frame holds.
    for (item, item_frame) in items.clone().zip(items.frames()) {
        out.push(match (item_frame.first(), item) {
            (Some(b'$' | b'_'), ReplyView::Null) => Element::Null,
            (Some(b'$'), ReplyView::Bulk(data)) => Element::Bulk(data),
            (Some(b':'), ReplyView::Int(n)) => Element::Int(n),
            _ => return None,
        });
    }
    Some(out)
}

/// The first element of a Pub/Sub frame (`message`, `subscribe`, ...), if it has one.
pub fn kind_word<'a>(elems: &[Element<'a>]) -> Option<&'a [u8]> {
    match elems.first()? {
        Element::Bulk(word) => Some(word),
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
        assert_eq!(kind_word(&elems), Some(&b"message"[..]));
        assert_eq!(elems[2], Element::Bulk(b"hello"));
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
        assert_eq!(elements(b"*1\r\n*-1\r\n"), None);
        assert_eq!(elements(b"*1\r\n+OK\r\n"), None);
        assert_eq!(elements(b"*-1\r\n"), None);
        assert_eq!(elements(b"%1\r\n:1\r\n:2\r\n"), None);
        assert_eq!(
            elements(b"*2\r\n$-1\r\n:-3\r\n"),
            Some(vec![Element::Null, Element::Int(-3)])
        );
        assert_eq!(elements(b"*0\r\n"), Some(vec![]));
    }
}
