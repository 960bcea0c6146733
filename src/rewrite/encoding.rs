//! Percent-encoding of variable key segments and the FNV-1a bucket of a record id.
//!
//! Invariants: an encoded segment never holds `% : { } * ? [ ] \`, a byte below 0x21 or
//! 0x7F raw, so it can never end a segment, break a hash tag or act as a glob character.
//! [`decode_segment`] is the exact inverse of [`encode_segment`] and refuses every input
//! that [`encode_segment`] cannot produce (lower-case hex, a bad escape, a raw byte that
//! should have been escaped), so a foreign cluster key is never mistaken for ours.

/// Number of buckets that bucket-indexed families spread over.
pub const BUCKET_COUNT: u32 = 32;

const FNV_OFFSET_BASIS: u32 = 2_166_136_261;
const FNV_PRIME: u32 = 16_777_619;
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// True when `byte` is written as `%XX` inside an encoded segment.
pub fn needs_encoding(byte: u8) -> bool {
    matches!(
        byte,
        b'%' | b':' | b'{' | b'}' | b'*' | b'?' | b'[' | b']' | b'\\'
    ) || byte < 0x21
        || byte == 0x7F
}

/// Appends the encoded form of `raw` to `out`.
pub fn encode_segment(raw: &[u8], out: &mut Vec<u8>) {
    for &byte in raw {
        if needs_encoding(byte) {
            out.extend_from_slice(&[
                b'%',
                HEX_UPPER[usize::from(byte >> 4)],
                HEX_UPPER[usize::from(byte & 0x0F)],
            ]);
        } else {
            out.push(byte);
        }
    }
}

/// The encoded form of `raw` as a new vector.
pub fn encoded(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(raw));
    encode_segment(raw, &mut out);
    out
}

/// Length of the encoded form of `raw`, without building it.
pub fn encoded_len(raw: &[u8]) -> usize {
    raw.iter()
        .map(|&byte| if needs_encoding(byte) { 3 } else { 1 })
        .sum()
}

/// True when `byte` may appear inside an encoded segment (raw or as the `%` of an escape).
pub fn is_encoded_byte(byte: u8) -> bool {
    byte == b'%' || !needs_encoding(byte)
}

/// Decodes `encoded`, or `None` when it is not something [`encode_segment`] produces.
pub fn decode_segment(encoded: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let (&high, tail) = tail.split_first()?;
            let (&low, tail) = tail.split_first()?;
            let decoded = (upper_hex_value(high)? << 4) | upper_hex_value(low)?;
            // An escape of a byte that travels raw would give two spellings of one id.
            if !needs_encoding(decoded) {
                return None;
            }
            out.push(decoded);
            rest = tail;
        } else if needs_encoding(byte) {
            return None;
        } else {
            out.push(byte);
            rest = tail;
        }
    }
    Some(out)
}

fn upper_hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// 32-bit FNV-1a of `raw`.
pub fn fnv1a32(raw: &[u8]) -> u32 {
    raw.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The bucket (0..32) of a record whose raw (not encoded) id is `raw_id`.
pub fn bucket(raw_id: &[u8]) -> u8 {
    // The modulus is 32, so the value always fits in a byte.
    (fnv1a32(raw_id) % BUCKET_COUNT) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv_vectors_from_the_layout_table() {
        let vectors: [(&[u8], u32, u8); 7] = [
            (b"", 0x811c_9dc5, 5),
            (b"a", 0xe40c_292c, 12),
            (b"chat-1", 0x6e1e_e9f9, 25),
            (b"123456789", 0xbb86_b11c, 28),
            (b"user:42", 0x2f6b_7b82, 2),
            (b"5491122334455@s.whatsapp.net", 0x705d_a045, 5),
            ("ñandú".as_bytes(), 0xb48f_3ccb, 11),
        ];
        for (id, hash, expected_bucket) in vectors {
            assert_eq!(fnv1a32(id), hash, "hash of {:?}", id.escape_ascii());
            assert_eq!(
                bucket(id),
                expected_bucket,
                "bucket of {:?}",
                id.escape_ascii()
            );
        }
    }

    #[test]
    fn every_special_byte_is_escaped_in_upper_case() {
        let cases: [(&[u8], &[u8]); 12] = [
            (b"%", b"%25"),
            (b":", b"%3A"),
            (b"{", b"%7B"),
            (b"}", b"%7D"),
            (b"*", b"%2A"),
            (b"?", b"%3F"),
            (b"[", b"%5B"),
            (b"]", b"%5D"),
            (b"\\", b"%5C"),
            (b" ", b"%20"),
            (b"\x00\x1f\x7f", b"%00%1F%7F"),
            (b"a:b{c}", b"a%3Ab%7Bc%7D"),
        ];
        for (raw, expected) in cases {
            assert_eq!(encoded(raw), expected);
            assert_eq!(decode_segment(expected).as_deref(), Some(raw));
        }
    }

    #[test]
    fn plain_bytes_and_utf8_pass_unchanged() {
        let raw = "chat-1_A.b@c!\"#$&'()+,-./;<=>^`|~ñandú".as_bytes();
        assert_eq!(encoded(raw), raw);
        assert_eq!(decode_segment(raw).as_deref(), Some(raw));
    }

    #[test]
    fn foreign_spellings_do_not_decode() {
        for bad in [
            &b"%G1"[..],
            b"%3a",
            b"%",
            b"%3",
            b"a:b",
            b"a{b",
            b"a b",
            b"a*",
            b"%41", // `A` travels raw, so `%41` is not ours
        ] {
            assert_eq!(decode_segment(bad), None, "{:?}", bad.escape_ascii());
        }
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let enc = encoded(&raw);
            prop_assert_eq!(enc.len(), encoded_len(&raw));
            prop_assert!(enc.iter().all(|&b| is_encoded_byte(b)));
            prop_assert_eq!(decode_segment(&enc), Some(raw));
        }

        #[test]
        fn decode_accepts_only_canonical_text(text in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Some(raw) = decode_segment(&text) {
                prop_assert_eq!(encoded(&raw), text);
            }
        }
    }
}
