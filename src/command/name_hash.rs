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
    fn maps_find_their_keys() {
        let mut map: NameMap<Box<[u8]>, usize> = NameMap::default();
        map.insert(b"get".as_slice().into(), 1);
        map.insert(b"object|encoding".as_slice().into(), 2);
        assert_eq!(map.get(b"get".as_slice()), Some(&1));
        assert_eq!(map.get(b"object|encoding".as_slice()), Some(&2));
        assert_eq!(map.get(b"set".as_slice()), None);
    }
}
