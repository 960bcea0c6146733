//! CRC16-XMODEM hash slots with hash tags, as Redis Cluster computes them.

use crc::{Crc, Table, CRC_16_XMODEM};

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: usize = 16384;

/// Sixteen lookup tables (8 KiB): a typical key of 10-30 bytes hashes in one or two steps
/// of 16 bytes instead of one lookup per byte, which every routed request pays.
static XMODEM: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&CRC_16_XMODEM);

/// The hash slot of `key`: CRC16-XMODEM of its hash tag (the bytes between the first `{`
/// and the next `}`, when non-empty) or of the whole key, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16(hashed) % SLOT_COUNT as u16
}

/// A short hash tag whose keys live in `slot`: `{tag}anything` hashes to `slot`. The
/// decimal numbers from 0 up cover every slot below 200,000; the table (64 KiB) is built on
/// first use, by the rare commands that need a key of their own next to a client's key.
pub fn tag_in_slot(slot: u16) -> u32 {
    static TAGS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; SLOT_COUNT];
        let mut missing = SLOT_COUNT;
        let mut tag = 0u32;
        while missing > 0 {
            let at = usize::from(key_slot(tag.to_string().as_bytes()));
            if tags[at] == u32::MAX {
                tags[at] = tag;
                missing -= 1;
            }
            tag += 1;
        }
        tags
    });
    tags[usize::from(slot) % SLOT_COUNT]
}

/// CRC16-XMODEM of `bytes` with `XMODEM`'s tables, 16 bytes per step. The crate's own
/// `checksum` does the same, but reads the algorithm's parameters (reflection, initial and
/// final values) at run time: for a key of 16 bytes it took 112 instructions, this about 40.
fn crc16(bytes: &[u8]) -> u16 {
    let tables = XMODEM.table();
    let mut crc = 0u16;
    let mut blocks = bytes.chunks_exact(16);
    for block in &mut blocks {
        let [high, low] = crc.to_be_bytes();
        // The CRC of each byte followed by as many zero bytes as come after it in the block.
        crc = tables[15][usize::from(block[0] ^ high)] ^ tables[14][usize::from(block[1] ^ low)];
        for (table, &byte) in tables[..14].iter().rev().zip(&block[2..]) {
            crc ^= table[usize::from(byte)];
        }
    }
    for &byte in blocks.remainder() {
        let [high, _] = crc.to_be_bytes();
        crc = tables[0][usize::from(high ^ byte)] ^ (crc << 8);
    }
    crc
}

/// The part of `key` that is hashed when it has a non-empty `{...}` tag.
// Searched eight bytes per step: a byte-at-a-time search of a typical key cost about as
// much as its CRC, and `memchr`, made for long haystacks, 52 instructions for 16 bytes.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = find_byte(key, b'{')?;
    let rest = &key[open + 1..];
    let close = find_byte(rest, b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The offset of the first `byte` in `haystack`, eight bytes per step: a byte of a word
/// equal to `byte` becomes zero in `word ^ pattern`, and `(x - 0x01..) & !x & 0x80..` marks
/// the lowest zero byte of `x` exactly (a borrow marks only bytes above it).
fn find_byte(haystack: &[u8], byte: u8) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let pattern = ONES * u64::from(byte);
    let mut words = haystack.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let x = u64::from_le_bytes(word.try_into().ok()?) ^ pattern;
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return Some(offset + zeros.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    let tail = words.remainder().iter().position(|&b| b == byte)?;
    Some(offset + tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Redis's `crc16` of cluster.c computed bit by bit: the table-driven one must agree.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &byte in bytes {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    /// Redis's `keyHashSlot` tag search of cluster.c, byte by byte.
    fn hash_tag_bytewise(key: &[u8]) -> Option<&[u8]> {
        let open = key.iter().position(|&b| b == b'{')?;
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    }

    proptest! {
        #[test]
        fn the_word_search_finds_what_a_byte_search_finds(
            haystack in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), Just(0u8), Just(0xFF), any::<u8>()], 0..40),
            byte in prop_oneof![Just(b'{'), Just(b'}'), Just(0u8), Just(0xFF), any::<u8>()],
        ) {
            prop_assert_eq!(find_byte(&haystack, byte), haystack.iter().position(|&b| b == byte));
        }

        #[test]
        fn the_tag_search_agrees_with_redis_bytewise_one(
            key in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), any::<u8>()], 0..80)
        ) {
            prop_assert_eq!(hash_tag(&key), hash_tag_bytewise(&key));
        }

        #[test]
        fn the_sliced_tables_agree_with_the_bitwise_crc(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            prop_assert_eq!(crc16(&bytes), crc16_bitwise(&bytes));
            prop_assert_eq!(XMODEM.checksum(&bytes), crc16_bitwise(&bytes));
        }
    }

    #[test]
    fn reference_vector() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"123456789"), 12739);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"mybot:{ch:25}:r:chat-1"), key_slot(b"ch:25"));
        // Values from redis-server's CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn every_slot_has_a_tag_whose_keys_live_there() {
        for slot in 0..SLOT_COUNT as u16 {
            let key = format!("{{{}}}:scratch", tag_in_slot(slot));
            assert_eq!(key_slot(key.as_bytes()), slot);
        }
    }
}
