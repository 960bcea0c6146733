//! Redis-compatible glob matching, as KEYS and SCAN MATCH apply it (`stringmatchlen`).
//!
//! Byte-wise, case-sensitive. `*` matches any run of bytes, `?` any one byte, `[...]` one
//! byte from a class (`^` negates, `a-z` is a range, reversed ranges are swapped, `\`
//! escapes), `\x` is the byte `x`. Like Redis, an unterminated class ends at the end of the
//! pattern (`[ab` is the class `{a, b}`), a `]` right after `[` closes an empty class, and a
//! lone trailing `\` is a literal backslash. Range bounds compare as C `char`, which is
//! signed on x86-64 builds of Redis, so a range across 0x7F/0x80 behaves as it does there.
//! Matching runs in O(pattern × key) time without recursion, whatever the input.

use super::automaton::{Atom, ByteSet, Nfa};

/// One parsed element of a glob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GlobToken {
    /// This exact byte.
    Byte(u8),
    /// `?`: any one byte.
    AnyByte,
    /// `*`: any run of bytes, the empty one included.
    AnyRun,
    /// `[...]`: one byte of the set (negation already applied).
    Class(ByteSet),
}

impl GlobToken {
    fn matches(&self, byte: u8) -> bool {
        match self {
            GlobToken::Byte(expected) => *expected == byte,
            GlobToken::AnyByte => true,
            GlobToken::AnyRun => true,
            GlobToken::Class(set) => set.contains(byte),
        }
    }
}

/// Parses `pattern` the way Redis reads it while matching.
pub(crate) fn parse(pattern: &[u8]) -> Vec<GlobToken> {
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut at = 0;
    while let Some(&byte) = pattern.get(at) {
        match byte {
            b'*' => {
                if tokens.last() != Some(&GlobToken::AnyRun) {
                    tokens.push(GlobToken::AnyRun);
                }
                at += 1;
            }
            b'?' => {
                tokens.push(GlobToken::AnyByte);
                at += 1;
            }
            b'[' => {
                let (class, next) = parse_class(pattern, at + 1);
                tokens.push(GlobToken::Class(class));
                at = next;
            }
            b'\\' => match pattern.get(at + 1) {
                Some(&escaped) => {
                    tokens.push(GlobToken::Byte(escaped));
                    at += 2;
                }
                None => {
                    tokens.push(GlobToken::Byte(b'\\'));
                    at += 1;
                }
            },
            _ => {
                tokens.push(GlobToken::Byte(byte));
                at += 1;
            }
        }
    }
    tokens
}

/// Parses a class body starting after `[`; returns the set and where the glob resumes.
fn parse_class(pattern: &[u8], mut at: usize) -> (ByteSet, usize) {
    let negate = pattern.get(at) == Some(&b'^');
    if negate {
        at += 1;
    }
    let mut set = ByteSet::default();
    loop {
        let rest = pattern.get(at..).unwrap_or_default();
        match rest {
            [] => break,
            [b'\\', escaped, ..] => {
                set.insert(*escaped);
                at += 2;
            }
            [b']', ..] => {
                at += 1;
                break;
            }
            [first, b'-', last, ..] => {
                insert_signed_range(&mut set, *first, *last);
                at += 3;
            }
            [byte, ..] => {
                set.insert(*byte);
                at += 1;
            }
        }
    }
    (if negate { set.complement() } else { set }, at)
}

/// Redis compares range bounds as C `char`, which is signed on x86-64.
fn insert_signed_range(set: &mut ByteSet, first: u8, last: u8) {
    let (mut low, mut high) = (first as i8, last as i8);
    if low > high {
        std::mem::swap(&mut low, &mut high);
    }
    for value in low..=high {
        set.insert(value as u8);
    }
}

/// True when `key` matches the Redis glob `pattern`.
pub fn glob_match(pattern: &[u8], key: &[u8]) -> bool {
    matches_tokens(&parse(pattern), key)
}

/// Matches parsed tokens; one remembered `*` is enough for exact glob semantics.
pub(crate) fn matches_tokens(tokens: &[GlobToken], key: &[u8]) -> bool {
    let (mut token_at, mut key_at) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while let Some(&byte) = key.get(key_at) {
        match tokens.get(token_at) {
            Some(GlobToken::AnyRun) => {
                last_star = Some((token_at, key_at));
                token_at += 1;
                continue;
            }
            Some(token) if token.matches(byte) => {
                token_at += 1;
                key_at += 1;
                continue;
            }
            _ => {}
        }
        match last_star {
            Some((star_at, star_key_at)) => {
                last_star = Some((star_at, star_key_at + 1));
                token_at = star_at + 1;
                key_at = star_key_at + 1;
            }
            None => return false,
        }
    }
    tokens[token_at.min(tokens.len())..]
        .iter()
        .all(|token| *token == GlobToken::AnyRun)
}

/// The bytes every key matching `tokens` starts with.
pub(crate) fn literal_prefix(tokens: &[GlobToken]) -> Vec<u8> {
    tokens
        .iter()
        .map_while(|token| match token {
            GlobToken::Byte(byte) => Some(*byte),
            _ => None,
        })
        .collect()
}

/// The automaton of `tokens`, for questions about which rules a glob can reach.
pub(crate) fn to_nfa(tokens: &[GlobToken]) -> Nfa {
    let mut nfa = Nfa::default();
    for token in tokens {
        nfa.push(match token {
            GlobToken::Byte(byte) => Atom::Step(ByteSet::single(*byte)),
            GlobToken::AnyByte => Atom::Step(ByteSet::all()),
            GlobToken::AnyRun => Atom::Loop(ByteSet::all()),
            GlobToken::Class(set) => Atom::Step(*set),
        });
    }
    nfa
}

/// Escapes `literal` so that a glob matches exactly it.
pub fn escape_glob(literal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(literal.len());
    for &byte in literal {
        if matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(byte);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expectations taken from the Redis documentation of KEYS and from running the
    /// patterns through `KEYS` on redis-server 7.0.
    #[test]
    fn documented_and_observed_redis_behaviour() {
        let cases: &[(&[u8], &[u8], bool)] = &[
            (b"h?llo", b"hello", true),
            (b"h?llo", b"hallo", true),
            (b"h?llo", b"hllo", false),
            (b"h*llo", b"hllo", true),
            (b"h*llo", b"heeeello", true),
            (b"h[ae]llo", b"hello", true),
            (b"h[ae]llo", b"hillo", false),
            (b"h[^e]llo", b"hallo", true),
            (b"h[^e]llo", b"hello", false),
            (b"h[a-b]llo", b"hbllo", true),
            (b"h[a-b]llo", b"hcllo", false),
            (b"h\\*llo", b"h*llo", true),
            (b"h\\*llo", b"hello", false),
            (b"*", b"", true),
            (b"", b"", true),
            (b"", b"a", false),
            (b"[a", b"a", true),
            (b"[a*", b"a", true),
            (b"[a*", b"ab", false),
            (b"[a-]", b"]", true),
            (b"[a-]", b"^", true),
            (b"[a-]", b"b", false),
            (b"[a-", b"-", true),
            (b"[\\]", b"]", true),
            (b"[]]", b"]", false),
            (b"[^]", b"x", true),
            (b"[\\", b"\\", true),
            (b"\\a", b"a", true),
            (b"[c-a]", b"b", true),
            (b"[-]", b"-", true),
            (b"a[", b"a", false),
            (b"*[", b"a", false),
            (b"mybot:chat:*", b"mybot:chat:a:b", true),
            (b"mybot:chat:*", b"mybot:chats", false),
            (b"a*b*c", b"aXbYbZc", true),
            (b"a*b*c", b"aXbYbZ", false),
        ];
        for (pattern, key, expected) in cases {
            assert_eq!(
                glob_match(pattern, key),
                *expected,
                "pattern {:?} key {:?}",
                pattern.escape_ascii(),
                key.escape_ascii()
            );
        }
    }

    #[test]
    fn escaped_literals_match_only_themselves() {
        let literal = b"a*b?c[d]e\\f";
        let pattern = escape_glob(literal);
        assert!(glob_match(&pattern, literal));
        assert!(!glob_match(&pattern, b"aXb?c[d]e\\f"));
    }

    #[test]
    fn long_hostile_patterns_finish() {
        let pattern = b"*a".repeat(1_000);
        let key = vec![b'a'; 2_000];
        assert!(glob_match(&pattern, &key));
        let mut miss = key.clone();
        miss.push(b'b');
        assert!(!glob_match(&pattern, &miss));
    }
}
