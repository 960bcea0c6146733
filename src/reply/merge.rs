//! Merging the replies of a command that was split by slot back into the one reply a
//! single Redis would have given. Pure functions over raw reply frames.

use bytes::Bytes;

use crate::protocol::{encode, ReplyView};

/// The integer of a `:n` reply.
pub fn integer(frame: &[u8]) -> Option<i64> {
    if frame.first() != Some(&b':') {
        return None;
    }
    ReplyView::parse(frame).ok()?.int()
}

/// A `:n` reply.
pub fn integer_frame(n: i64) -> Bytes {
    encode::integer_frame(n)
}

/// An array reply made of `elements` (complete frames).
pub fn array_frame<'a>(count: usize, elements: impl Iterator<Item = &'a Bytes>) -> Bytes {
    encode::array_frame(count, elements)
}

/// The sum of integer replies (DEL, EXISTS ... split by slot); the first reply that is not
/// an integer is returned as is, as the whole command's answer.
pub fn sum_counts(replies: &[Bytes]) -> Bytes {
    fold_integers(replies, 0, i64::saturating_add)
}

/// The smallest integer of `replies`, or the first reply that is not an integer.
pub fn least(replies: &[Bytes]) -> Bytes {
    fold_integers(replies, i64::MAX, i64::min)
}

fn fold_integers(replies: &[Bytes], start: i64, step: fn(i64, i64) -> i64) -> Bytes {
    let mut total = start;
    for reply in replies {
        match integer(reply) {
            Some(n) => total = step(total, n),
            None => return reply.clone(),
        }
    }
    integer_frame(total)
}

/// The first error among `parts`, in request order: what Redis would have answered.
pub fn first_error(parts: &[Bytes]) -> Option<&Bytes> {
    parts.iter().find(|p| p.first() == Some(&b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(integer(b":42\r\n"), Some(42));
        assert_eq!(integer(b"+OK\r\n"), None);
        assert_eq!(integer_frame(-3), Bytes::from_static(b":-3\r\n"));
    }

    #[test]
    fn least_is_the_smallest_integer_and_non_integers_win() {
        let parts = [
            Bytes::from_static(b":7\r\n"),
            Bytes::from_static(b":3\r\n"),
            Bytes::from_static(b":5\r\n"),
        ];
        assert_eq!(least(&parts), Bytes::from_static(b":3\r\n"));
        let failed = [
            Bytes::from_static(b":1\r\n"),
            Bytes::from_static(b"-ERR x\r\n"),
        ];
        assert_eq!(least(&failed), Bytes::from_static(b"-ERR x\r\n"));
    }

    #[test]
    fn counts_sum_and_non_integers_win() {
        let parts = [Bytes::from_static(b":2\r\n"), Bytes::from_static(b":3\r\n")];
        assert_eq!(sum_counts(&parts), Bytes::from_static(b":5\r\n"));
        let odd = [
            Bytes::from_static(b":2\r\n"),
            Bytes::from_static(b"+OK\r\n"),
        ];
        assert_eq!(sum_counts(&odd), Bytes::from_static(b"+OK\r\n"));
        assert_eq!(sum_counts(&[]), Bytes::from_static(b":0\r\n"));
    }
}
