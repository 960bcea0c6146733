//! A fast hasher for command-name maps. The keys are the command table's own names (a
//! fixed set the proxy builds at start-up); clients only look names up, they cannot insert,
//! so SipHash's flooding protection buys nothing on this per-command path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a 64 over the bytes written.
#[derive(Debug, Clone, Copy)]
pub struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A map keyed by command names.
pub type NameMap<K, V> = HashMap<K, V, BuildHasherDefault<NameHasher>>;

/// A command name of up to 16 bytes, folded to lower case and packed into one integer,
/// so the per-request lookup hashes and compares one word instead of a byte slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackedName(u128);

impl PackedName {
    /// `name` folded and packed; `None` past 16 bytes or with a NUL byte (the padding is
    /// NUL, so `get\0` must not pack like `get`).
    pub fn of(name: &[u8]) -> Option<PackedName> {
        let mut bytes = [0u8; 16];
        if name.len() > bytes.len() {
            return None;
        }
        for (d, &s) in bytes.iter_mut().zip(name) {
            if s == 0 {
                return None;
            }
            *d = s.to_ascii_lowercase();
        }
        Some(PackedName(u128::from_le_bytes(bytes)))
    }
}

/// Hashes a [`PackedName`] with one multiply: its keys are the table's own names.
#[derive(Debug, Clone, Copy, Default)]
pub struct PackedHasher(u64);

impl Hasher for PackedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached for `PackedName` (it writes one u128); kept correct for any key.
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, n: u128) {
        let folded = (n as u64) ^ ((n >> 64) as u64).rotate_left(32);
        let mixed = folded.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // hashbrown takes the bucket from the low bits and the tag from the top seven.
        self.0 = mixed ^ (mixed >> 29);
    }
}

/// A map keyed by packed command names.
pub type PackedMap<V> = HashMap<PackedName, V, BuildHasherDefault<PackedHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_64_reference_vectors() {
        // Published FNV-1a 64 test vectors.
        let hash = |data: &[u8]| {
            let mut h = NameHasher::default();
            h.write(data);
            h.finish()
        };
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn packing_folds_case_and_refuses_what_it_cannot_hold() {
        assert_eq!(PackedName::of(b"GeT"), PackedName::of(b"get"));
        assert_ne!(PackedName::of(b"get"), PackedName::of(b"gets"));
        assert_eq!(PackedName::of(b"get\0"), None);
        assert!(PackedName::of(&[b'x'; 16]).is_some());
        assert_eq!(PackedName::of(&[b'x'; 17]), None);
        let mut map: PackedMap<usize> = PackedMap::default();
        map.insert(PackedName::of(b"get").unwrap(), 1);
        map.insert(PackedName::of(b"object|encoding").unwrap(), 2);
        assert_eq!(map.get(&PackedName::of(b"GET").unwrap()), Some(&1));
        assert_eq!(
            map.get(&PackedName::of(b"OBJECT|Encoding").unwrap()),
            Some(&2)
        );
        assert_eq!(map.get(&PackedName::of(b"set").unwrap()), None);
    }

    #[test]
    fn maps_find_their_keys() {
        let mut map: NameMap<Box<[u8]>, usize> = NameMap::default();
        map.insert(b"get".as_slice().into(), 1);
        map.insert(b"object|encoding".as_slice().into(), 2);
        assert_eq!(map.get(b"get".as_slice()), Some(&1));
        assert_eq!(map.get(b"object|encoding".as_slice()), Some(&2));
        assert_eq!(map.get(b"set".as_slice()), None);
    }
}
