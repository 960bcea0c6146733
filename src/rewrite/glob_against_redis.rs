//! The glob matcher checked against a real redis-server: for many generated patterns,
//! `KEYS pattern` must return exactly the keys [`super::glob::glob_match`] accepts.

use std::collections::BTreeSet;

use super::glob::glob_match;
use crate::test_support::RedisServer;

/// A small deterministic generator; the test needs variety, not statistical quality.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick(&mut self, from: &[u8]) -> u8 {
        from[(self.next() % from.len() as u64) as usize]
    }
}

#[test]
fn keys_on_redis_server_agrees_with_glob_match() {
    let server = RedisServer::start();
    let mut conn = server.connect();

    let key_bytes = b"ab-]^\\[:\x01\x80\xff";
    let pattern_bytes = b"ab-]^\\[*?:\x01\x80\xff";
    let mut random = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut keys = BTreeSet::new();
    while keys.len() < 300 {
        let len = (random.next() % 5) as usize;
        keys.insert(
            (0..len)
                .map(|_| random.pick(key_bytes))
                .collect::<Vec<u8>>(),
        );
    }
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .query(&mut conn)
            .expect("SET");
    }
    let mut patterns: Vec<Vec<u8>> = vec![
        b"[\x01-\xff]".to_vec(),
        b"[\xff-a]".to_vec(),
        b"[a-]".to_vec(),
    ];
    for _ in 0..400 {
        let len = 1 + (random.next() % 6) as usize;
        patterns.push((0..len).map(|_| random.pick(pattern_bytes)).collect());
    }
    for pattern in &patterns {
        let found: BTreeSet<Vec<u8>> = redis::cmd("KEYS")
            .arg(pattern)
            .query::<Vec<Vec<u8>>>(&mut conn)
            .expect("KEYS")
            .into_iter()
            .collect();
        let expected: BTreeSet<Vec<u8>> = keys
            .iter()
            .filter(|key| glob_match(pattern, key))
            .cloned()
            .collect();
        assert_eq!(
            found,
            expected,
            "pattern {:?}",
            pattern.escape_ascii().to_string()
        );
    }
}
