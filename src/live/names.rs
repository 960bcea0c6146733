//! The names of the records a live move keeps beside the keys it moves: a claim record on
//! the source per key being moved, and a moved-fence per hash slot on the target.
//!
//! Invariants: a record is in the same hash slot as the key it speaks for, so one script
//! can read and write both on a cluster as on a single node; every record name starts with
//! [`RECORD_PREFIX`], so a walk of the keyspace and its listings can tell them from data.

use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};

use crate::route::{key_slot, SLOT_COUNT};

/// The start of every record name (claims and fences), never a key of the keyspace moved.
pub const RECORD_PREFIX: &[u8] = b"slotbridge:live:";

/// The claim record of source key `key`: a hash (`token`, `deadline`) on the source.
pub fn claim_key(key: &[u8]) -> Bytes {
    let mut out = tagged(key_slot(key), b":claim:", key.len());
    out.put_slice(key);
    out.freeze()
}

/// The moved-fence of target key `key`: a hash on the target, one per slot, whose field
/// `key` exists once the key's move has written the target.
pub fn fence_key(key: &[u8]) -> Bytes {
    tagged(key_slot(key), b":moved", 0).freeze()
}

/// The one field of a compacted moved-fence (`compact.lua`): every key of its slot is moved,
/// every later seal refused. A record name, so never the name of a key moved.
pub const EVERY_KEY_MOVED: &[u8] = b"slotbridge:live:all";

/// The moved-fence of hash slot `slot`.
pub fn slot_fence(slot: u16) -> Bytes {
    tagged(slot, b":moved", 0).freeze()
}

/// Whether `key` is a record of live moves rather than a key of the keyspace.
pub fn is_record(key: &[u8]) -> bool {
    key.starts_with(RECORD_PREFIX)
}

/// The source key a claim record `record` speaks for, `None` when it is not a claim.
pub fn claimed_key(record: &[u8]) -> Option<&[u8]> {
    let rest = record.strip_prefix(RECORD_PREFIX)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    rest[close + 1..].strip_prefix(b":claim:".as_slice())
}

/// `RECORD_PREFIX{tag}suffix`, with `tag` a short text hashed to `slot`.
fn tagged(slot: u16, suffix: &[u8], extra: usize) -> BytesMut {
    let tag = slot_tag(slot);
    let mut out =
        BytesMut::with_capacity(RECORD_PREFIX.len() + tag.len() + 2 + suffix.len() + extra);
    out.put_slice(RECORD_PREFIX);
    out.put_u8(b'{');
    out.put_slice(tag);
    out.put_u8(b'}');
    out.put_slice(suffix);
    out
}

/// A hash tag of at most three letters or digits whose slot is `slot`. Using a table rather
/// than the key's own name as the tag works for every key: a name holding `}` (with no
/// tag of its own) could not be put between braces.
pub fn slot_tag(slot: u16) -> &'static [u8] {
    static TAGS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut tags: Vec<Vec<u8>> = vec![Vec::new(); SLOT_COUNT];
        let mut missing = SLOT_COUNT;
        let mut candidates: Vec<Vec<u8>> = vec![Vec::new()];
        // Shortest first: one, two, then three characters cover every slot.
        while missing > 0 {
            let longer: Vec<Vec<u8>> = candidates
                .iter()
                .flat_map(|c| {
                    ALPHABET.iter().map(move |&b| {
                        let mut next = c.clone();
                        next.push(b);
                        next
                    })
                })
                .collect();
            for tag in &longer {
                let slot = usize::from(key_slot(tag));
                if tags[slot].is_empty() {
                    tags[slot] = tag.clone();
                    missing -= 1;
                }
            }
            candidates = longer;
        }
        tags
    });
    &tags[usize::from(slot) % SLOT_COUNT]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_slot_has_a_short_tag_of_its_own() {
        for slot in 0..SLOT_COUNT as u16 {
            let tag = slot_tag(slot);
            assert!(!tag.is_empty() && tag.len() <= 3, "slot {slot}: {tag:?}");
            assert_eq!(key_slot(tag), slot);
        }
    }

    #[test]
    fn records_of_awkward_names_share_their_slot() {
        for key in [
            b"mybot:chat:chat-1".as_slice(),
            b"a}b",
            b"{}x",
            b"x{y}z",
            b"",
            b"mybot:{ch:25}:r:chat-1",
        ] {
            assert_eq!(key_slot(&claim_key(key)), key_slot(key), "{key:?}");
            assert_eq!(key_slot(&fence_key(key)), key_slot(key), "{key:?}");
            assert!(is_record(&claim_key(key)) && is_record(&fence_key(key)));
            assert_eq!(claimed_key(&claim_key(key)), Some(key));
        }
        assert!(!is_record(b"mybot:chat:1"));
        assert_eq!(claimed_key(&fence_key(b"k")), None);
        assert_eq!(slot_fence(key_slot(b"k")), fence_key(b"k"));
        assert!(is_record(EVERY_KEY_MOVED));
    }

    #[test]
    fn the_scripts_name_the_compacted_field_as_rust_does() {
        let field = format!("'{}'", String::from_utf8_lossy(EVERY_KEY_MOVED));
        assert!(crate::live::claim::SEAL_SCRIPT.contains(&field));
        assert!(crate::live::claim::COMPACT_SCRIPT.contains(&field));
    }

    proptest! {
        #[test]
        fn a_claim_names_its_key_and_its_slot(key in proptest::collection::vec(any::<u8>(), 0..40)) {
            let record = claim_key(&key);
            prop_assert_eq!(key_slot(&record), key_slot(&key));
            prop_assert_eq!(claimed_key(&record), Some(key.as_slice()));
            prop_assert_eq!(key_slot(&fence_key(&key)), key_slot(&key));
        }
    }
}
