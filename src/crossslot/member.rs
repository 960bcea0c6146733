//! Members in byte order, compared fast: a sort of a set's members is most of a cross-slot
//! set command's own work, and comparing two short members through `memcmp` costs a call
//! each time.

use std::cmp::Ordering;

use bytes::Bytes;

/// A member and the first eight bytes of its text as one big-endian integer (zero bytes
/// after a shorter text). Two members compare by that integer first and by their whole
/// text only when it is equal, which is their byte order: a shorter text that is a prefix
/// of a longer one, or the same text, has an equal integer or a smaller one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Member<'a> {
    prefix: u64,
    /// The member's text.
    pub text: &'a Bytes,
}

impl<'a> Member<'a> {
    /// `text` with its sort key.
    pub fn of(text: &'a Bytes) -> Member<'a> {
        let prefix = match text.first_chunk::<8>() {
            Some(head) => u64::from_be_bytes(*head),
            None => {
                let mut prefix = 0u64;
                for &byte in text.iter() {
                    prefix = prefix << 8 | u64::from(byte);
                }
                // Fewer than 8 bytes: the zeros after them.
                prefix.checked_shl(8 * (8 - text.len() as u32)).unwrap_or(0)
            }
        };
        Member { prefix, text }
    }
}

impl Ord for Member<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.text.cmp(other.text))
    }
}

impl PartialOrd for Member<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn members_sort_in_byte_order(
            a in proptest::collection::vec(any::<u8>(), 0..12),
            b in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            let (a, b) = (Bytes::from(a), Bytes::from(b));
            prop_assert_eq!(Member::of(&a).cmp(&Member::of(&b)), a.cmp(&b));
            prop_assert_eq!(Member::of(&a) == Member::of(&b), a == b);
        }
    }

    #[test]
    fn a_prefix_and_zero_bytes_keep_their_order() {
        let texts = [
            &b""[..],
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\x01",
            b"b",
        ];
        let texts: Vec<Bytes> = texts.iter().map(|t| Bytes::copy_from_slice(t)).collect();
        for pair in texts.windows(2) {
            assert!(Member::of(&pair[0]) < Member::of(&pair[1]), "{pair:?}");
        }
    }
}
