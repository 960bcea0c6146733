//! Databases other than 0 (`SELECT n`) as key namespaces in the cluster's one keyspace.
//! Pure: names in, names out.
//!
//! # The mapping
//!
//! A key `k` of database `n > 0` is stored as `__db<n>:k` (`n` in decimal, no leading
//! zero): `SELECT 3` then `SET user:1 x` writes `__db3:user:1`. Database 0's keys are
//! stored under their own names, exactly as without `SELECT`.
//!
//! # Why this prefix
//!
//! - **Hash tags keep working.** The prefix holds no `{` or `}`, so the first `{` of
//!   `__db3:{user}:1` is the key's own and the tag is still `user`: keys that share a tag
//!   share a slot in every database (and `{user}` in database 3 lives in the slot of
//!   `{user}` in database 0). An untagged key moves to another slot (`__db3:a` hashes as a
//!   whole), which is harmless because every key position of every command in the
//!   database is prefixed alike, so the slot checks see the names actually stored.
//! - **Recognisable.** An operator reading `KEYS *` on a node sees at once which
//!   database a key belongs to; Redis's own reserved names (`__keyspace@3__`,
//!   `__redis__:`) start with two underscores too.
//! - **No collision in practice.** A prefix ends at its `:`, so no database's prefix is
//!   the start of another's (`__db1:` and `__db12:`). The one way two databases can meet
//!   is a database 0 key that itself starts with `__db<n>:`; such a name is reserved: it
//!   is seen in database `n` and hidden from database 0's listings.
//! - **Cheap.** Six or seven bytes per key; finding a key's database is a prefix check
//!   and at most a few digits parsed.
//!
//! # The in-use marker
//!
//! Database 0's DBSIZE and `INFO keyspace` are the cluster's own counts less the other
//! databases' keys, which only a walk of the keyspace finds. So that a cluster whose clients
//! never leave database 0 keeps O(1) counts, SELECT of a database `n > 0` first writes
//! [`IN_USE_MARKER`]: while it is absent no other database holds a key and the walk is
//! skipped. The marker belongs to no database ([`split`] gives [`NO_DATABASE`]), so no
//! listing shows it and database 0's counts leave it out.

use bytes::{BufMut, Bytes, BytesMut};

/// Redis's default `databases`.
pub const DEFAULT_DATABASES: u32 = 16;

/// The start every database prefix shares.
const MARK: &[u8] = b"__db";

/// The key whose presence says a client selected a database other than 0 since the
/// keyspace was last flushed (see the module doc).
pub const IN_USE_MARKER: &[u8] = b"__db:in-use";

/// What [`split`] gives for [`IN_USE_MARKER`]: no database (`databases` never reaches it).
pub const NO_DATABASE: u32 = u32::MAX;

/// The key prefix of database `db` (`__db<db>:`); empty for database 0, whose keys keep
/// their own names.
pub fn prefix(db: u32) -> Bytes {
    if db == 0 {
        return Bytes::new();
    }
    Bytes::from(format!("__db{db}:"))
}

/// `name` (a key, or a glob pattern: the prefix holds no glob metacharacter, so the
/// pattern matches the same names under it) as stored for the database of `prefix`.
pub fn in_database(prefix: &[u8], name: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(prefix.len() + name.len());
    out.put_slice(prefix);
    out.put_slice(name);
    out.freeze()
}

/// The database a stored key belongs to and its name there, with `databases` databases:
/// `(n, k)` for `__db<n>:k` with `0 < n < databases`, [`NO_DATABASE`] for the in-use
/// marker, `(0, key)` for any other key.
pub fn split(key: &[u8], databases: u32) -> (u32, &[u8]) {
    let Some(rest) = key.strip_prefix(MARK) else {
        return (0, key);
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 && key == IN_USE_MARKER {
        return (NO_DATABASE, key);
    }
    // Canonical decimal only: `__db03:` is no database's prefix.
    if digits == 0 || digits > 10 || rest[0] == b'0' || rest.get(digits) != Some(&b':') {
        return (0, key);
    }
    let number = rest[..digits]
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    match u32::try_from(number) {
        Ok(db) if db < databases => (db, &rest[digits + 1..]),
        _ => (0, key),
    }
}

/// The name a stored key has in database `db`, `None` when it belongs to another.
pub fn name_in(key: &[u8], db: u32, databases: u32) -> Option<&[u8]> {
    match split(key, databases) {
        (of, name) if of == db => Some(name),
        _ => None,
    }
}

/// The SCAN/KEYS pattern that finds every key of any database other than 0 (a superset:
/// [`split`] decides).
pub const OTHER_DATABASES_PATTERN: &[u8] = b"__db*";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::key_slot;
    use proptest::prelude::*;

    #[test]
    fn the_in_use_marker_belongs_to_no_database() {
        assert_eq!(split(IN_USE_MARKER, 16), (NO_DATABASE, IN_USE_MARKER));
        assert_eq!(split(IN_USE_MARKER, u32::MAX), (NO_DATABASE, IN_USE_MARKER));
        for db in [0, 1, 15] {
            assert_eq!(name_in(IN_USE_MARKER, db, 16), None);
        }
        // Only the exact name: a longer one is database 0's, as before.
        assert_eq!(split(b"__db:in-use2", 16), (0, &b"__db:in-use2"[..]));
    }

    #[test]
    fn database_zero_keeps_its_names() {
        assert!(prefix(0).is_empty());
        assert_eq!(split(b"user:1", 16), (0, &b"user:1"[..]));
        assert_eq!(in_database(&prefix(0), b"k"), Bytes::from_static(b"k"));
    }

    #[test]
    fn a_database_prefix_is_recognised_only_in_canonical_form_and_range() {
        assert_eq!(&prefix(3)[..], b"__db3:");
        assert_eq!(split(b"__db3:user:1", 16), (3, &b"user:1"[..]));
        assert_eq!(split(b"__db15:", 16), (15, &b""[..]));
        assert_eq!(split(b"__db16:x", 16), (0, &b"__db16:x"[..]));
        assert_eq!(split(b"__db16:x", 17), (16, &b"x"[..]));
        for other in [
            &b"__db03:x"[..],
            b"__db0:x",
            b"__db:x",
            b"__db3",
            b"__db3x:y",
            b"__db99999999999:x",
            b"_db3:x",
        ] {
            assert_eq!(
                split(other, 1 << 20),
                (0, other),
                "{}",
                other.escape_ascii()
            );
        }
    }

    #[test]
    fn a_key_named_like_another_database_nests() {
        let stored = in_database(&prefix(3), b"__db5:x");
        assert_eq!(split(&stored, 16), (3, &b"__db5:x"[..]));
        assert_eq!(name_in(&stored, 5, 16), None);
        assert_eq!(name_in(&stored, 3, 16), Some(&b"__db5:x"[..]));
    }

    #[test]
    fn the_slot_of_a_tagged_key_is_the_tags_in_every_database() {
        // CRC16 of "user" is the slot of "{user}:1" and of "__db3:{user}:1".
        for db in [1, 3, 15] {
            let stored = in_database(&prefix(db), b"{user}:1");
            assert_eq!(key_slot(&stored), key_slot(b"user"));
        }
        // A `}` before the first `{` does not end a tag: still the key's own.
        let stored = in_database(&prefix(3), b"a}b{t}c");
        assert_eq!(key_slot(&stored), key_slot(b"a}b{t}c"));
    }

    proptest! {
        #[test]
        fn split_inverts_in_database(db in 1u32..1000, key in proptest::collection::vec(any::<u8>(), 0..40)) {
            let stored = in_database(&prefix(db), &key);
            prop_assert_eq!(split(&stored, 1000), (db, &key[..]));
            prop_assert_eq!(name_in(&stored, db, 1000), Some(&key[..]));
        }

        #[test]
        fn a_tag_keeps_its_slot_under_any_prefix(
            db in 1u32..64,
            head in "[^{]{0,8}",
            tag in "[^{}]{1,8}",
            tail in ".{0,8}",
        ) {
            let key = format!("{head}{{{tag}}}{tail}");
            let stored = in_database(&prefix(db), key.as_bytes());
            prop_assert_eq!(key_slot(&stored), key_slot(key.as_bytes()));
        }

        #[test]
        fn names_outside_every_prefix_stay_in_database_zero(key in "[a-z:{}]{0,20}") {
            prop_assert_eq!(split(key.as_bytes(), 16), (0, key.as_bytes()));
        }
    }
}
