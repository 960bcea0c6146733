//! The source keys this process knows are moved: their claim answered gone or a move of
//! them finished. The source never gets a key back during a migration (nothing but a move
//! writes it, and a move only deletes), so "gone" stays true and a command on such a key
//! skips the claim's round trip.
//!
//! Bounded: past [`GoneKeys::CAPACITY`] names nothing more is remembered, and commands on
//! other keys pay the claim's round trip (correct, only slower). A hand-written set because
//! it is a striped `HashSet` and nothing more: striping keeps sessions on other threads
//! from waiting on one lock.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

const STRIPES: usize = 16;

/// A set of source key names known moved, shared by every session.
pub struct GoneKeys {
    stripes: [Mutex<HashSet<Bytes>>; STRIPES],
    hasher: RandomState,
    len: AtomicUsize,
}

impl Default for GoneKeys {
    fn default() -> Self {
        GoneKeys {
            stripes: std::array::from_fn(|_| Mutex::default()),
            hasher: RandomState::new(),
            len: AtomicUsize::new(0),
        }
    }
}

impl GoneKeys {
    /// Most names remembered: about 100 MB of names of 60 bytes at most.
    pub const CAPACITY: usize = 1_000_000;

    fn stripe(&self, key: &[u8]) -> &Mutex<HashSet<Bytes>> {
        &self.stripes[self.hasher.hash_one(key) as usize % STRIPES]
    }

    /// Whether `key` is known moved.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.stripe(key)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    /// Remembers `key` as moved, while there is room.
    pub fn insert(&self, key: &Bytes) {
        if self.len.load(Ordering::Relaxed) >= Self::CAPACITY {
            return;
        }
        let added = self
            .stripe(key)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone());
        if added {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets every name (the migration is over: nothing is consulted any more).
    pub fn clear(&self) {
        for stripe in &self.stripes {
            stripe.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.len.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_what_it_is_told_and_forgets_on_clear() {
        let gone = GoneKeys::default();
        assert!(!gone.contains(b"a"));
        gone.insert(&Bytes::from_static(b"a"));
        gone.insert(&Bytes::from_static(b"a"));
        assert!(gone.contains(b"a") && !gone.contains(b"b"));
        assert_eq!(gone.len.load(Ordering::Relaxed), 1, "a name counts once");
        gone.clear();
        assert!(!gone.contains(b"a"));
    }
}
