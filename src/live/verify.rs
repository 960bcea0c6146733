//! The check of a sample of moves by value, and the hold it puts on the end. Between a
//! move's seal and its finish nothing may change the key on either side: the claim keeps
//! every other mover off the source, and no command writes the target before the move is
//! done. So both sides must then hold the same value, compared by [`DIGEST_SCRIPT`] (the
//! value's elements, not its DUMP, which differs by encoding and server version). A
//! difference means the copy changed a value, or something wrote the source behind the
//! proxies (a client still connected to it directly).
//!
//! Invariants: a check only reads; its outcome never changes a move, which goes on to its
//! finish either way. A difference holds the end: the hold is a field of slot 0's
//! moved-fence on the target ([`HOLD_FIELD`]), written before the checked key's finish, so
//! every proxy's walker sees it before its pass can find the source empty, and none writes
//! the marker or ends its mode until an operator releases it (`POST /migration/resume`).

use std::sync::atomic::Ordering;

use super::counts::{ACCEPTED_FIELD, SHORT_FIELD};
use super::migration::Migration;
use super::mover::{MoveError, MoveSpec, Mover};
use super::names::slot_fence;
use crate::migrate::source::{Endpoint, Reply};

/// The digest script, run on both sides.
pub const DIGEST_SCRIPT: &str = include_str!("digest.lua");

/// Elements (or bytes of a string) a check reads at most: a larger value is left unchecked,
/// so the script stays short on servers that serve clients meanwhile.
pub const DIGEST_LIMIT: u64 = 1024;
/// Bytes of a string a check reads at most.
pub const DIGEST_STRING_LIMIT: u64 = 512 * 1024;

/// Releases the hold on the end in one step, the missing keys of a count check (if that is
/// what held it) added to those accepted. KEYS[1]: slot 0's fence; ARGV: the short,
/// accepted and hold fields.
const RELEASE_SCRIPT: &str = "local short = redis.call('HGET', KEYS[1], ARGV[1])
if short then
  redis.call('HINCRBY', KEYS[1], ARGV[2], short)
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('HDEL', KEYS[1], ARGV[3])
return 1";

/// One walker move in this many is checked (and the first one).
pub const CHECK_EVERY: u64 = 64;

/// The field of slot 0's moved-fence that holds the end, its value the reason. A record
/// name: never a moved key's field, and hidden like the fence itself.
pub const HOLD_FIELD: &[u8] = b"slotbridge:live:hold";

/// A hold on the end as one proxy knows it.
#[derive(Debug, Clone)]
pub(super) struct Hold {
    /// What differed.
    pub(super) why: String,
    /// Whether the target has it (a failed write is tried again at the next end).
    pub(super) written: bool,
}

/// A value as the digest script reads it on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Digest {
    /// The key does not exist.
    Missing,
    /// Larger than the limit: not read.
    Large,
    /// The value's type, its elements' SHA1 and whether it has a TTL.
    Read {
        /// `string`, `hash`, ...
        kind: String,
        /// SHA1 of the elements in canonical order.
        sha1: String,
        /// Whether the key has a TTL.
        volatile: bool,
    },
    /// A counter's number (`GET`), compared by size: the seal keeps the higher.
    Number(Option<i64>),
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Both sides hold the same value.
    Same,
    /// They differ, and how.
    Differs(String),
    /// Not comparable: the key expired, or it is too large to read.
    Unchecked,
}

/// Compares the source's digest with the target's, taken between seal and finish.
pub fn compare(source: &Digest, target: &Digest) -> Check {
    match (source, target) {
        (Digest::Missing | Digest::Large, _) | (_, Digest::Large) => Check::Unchecked,
        (Digest::Number(None), _) => Check::Unchecked,
        (Digest::Number(Some(from)), Digest::Number(Some(to))) if to >= from => Check::Same,
        (Digest::Number(Some(from)), Digest::Number(to)) => Check::Differs(format!(
            "counter {from} on the source, {to:?} on the target"
        )),
        // The target's TTL is the source's plus a move's latency: expired there first.
        (Digest::Read { volatile: true, .. }, Digest::Missing) => Check::Unchecked,
        (Digest::Read { kind, .. }, Digest::Missing) => {
            Check::Differs(format!("a persistent {kind} missing on the target"))
        }
        (source @ Digest::Read { .. }, target @ Digest::Read { .. }) if source == target => {
            Check::Same
        }
        (
            Digest::Read {
                kind: from,
                sha1: a,
                volatile: from_ttl,
            },
            Digest::Read {
                kind: to,
                sha1: b,
                volatile: to_ttl,
            },
        ) => Check::Differs(match (from == to, a == b) {
            (false, _) => format!("a {from} on the source, a {to} on the target"),
            (true, false) => format!("the {from}'s elements differ"),
            (true, true) => format!("a TTL on one side only (source {from_ttl}, target {to_ttl})"),
        }),
        // A counter read one way and its target the other: never asked for.
        _ => Check::Unchecked,
    }
}

/// Reads the digest script's reply.
fn read_digest(reply: &Reply) -> Result<Digest, String> {
    let bad = || format!("digest script answered {reply:?}");
    let Reply::List(items) = reply else {
        return Err(bad());
    };
    let text = |i: usize| -> Option<String> {
        items
            .get(i)?
            .data()
            .map(|d| String::from_utf8_lossy(d).into_owned())
    };
    match (text(0).as_deref(), items.len()) {
        (Some("none"), 1) => Ok(Digest::Missing),
        (Some("large"), 2) => Ok(Digest::Large),
        (Some(kind), 3) => Ok(Digest::Read {
            kind: kind.to_owned(),
            sha1: text(1).ok_or_else(bad)?,
            volatile: items[2].int().ok_or_else(bad)? >= 0,
        }),
        _ => Err(bad()),
    }
}

/// Reads `key`'s digest on `side` (the script by its SHA `sha`, by its text when lost).
async fn digest(side: &Endpoint, sha: &bytes::Bytes, key: &[u8]) -> Result<Digest, String> {
    let limit = DIGEST_LIMIT.to_string();
    let bytes = DIGEST_STRING_LIMIT.to_string();
    let script = (sha, DIGEST_SCRIPT);
    let reply = super::mover::eval(
        side,
        key,
        script,
        &[key],
        &[limit.as_bytes(), bytes.as_bytes()],
    )
    .await?;
    read_digest(&reply)
}

/// A counter's number on `side`.
async fn number(side: &Endpoint, key: &[u8]) -> Result<Digest, String> {
    let reply = side
        .call_key(key, &[b"GET", key])
        .await
        .map_err(|e| e.to_string())?;
    match reply {
        Reply::Nil => Ok(Digest::Number(None)),
        reply => match reply.int() {
            Some(n) => Ok(Digest::Number(Some(n))),
            None => Err(format!("GET answered {reply:?} for a counter")),
        },
    }
}

impl Mover {
    /// Compares `spec`'s value on the source and on the target: only between its seal and
    /// its finish, while this mover's claim is live.
    pub async fn check_value(&self, spec: &MoveSpec) -> Result<Check, MoveError> {
        // The target first: a source that still holds the key after that read had not
        // finished the move before it, so no command had written the target yet.
        let sha = &self.scripts.digest;
        let target = match spec.counter {
            true => number(&self.target, &spec.to).await,
            false => digest(&self.target, sha, &spec.to).await,
        };
        let target = target.map_err(MoveError::Target)?;
        let source = match spec.counter {
            true => number(&self.source, &spec.from).await,
            false => digest(&self.source, sha, &spec.from).await,
        };
        let source = source.map_err(MoveError::Source)?;
        Ok(compare(&source, &target))
    }
}

/// The hold on the end, as the target has it: its reason, or `None`.
async fn read_hold(target: &Endpoint) -> Result<Option<String>, String> {
    let why = record_field(target, HOLD_FIELD).await?;
    Ok(why.map(|why| String::from_utf8_lossy(&why).into_owned()))
}

/// A record field of slot 0's moved-fence on the target (the end's hold, the count
/// check's baseline and accepted shortfall), `None` when it is not set.
pub(super) async fn record_field(
    target: &Endpoint,
    field: &[u8],
) -> Result<Option<bytes::Bytes>, String> {
    let fence = slot_fence(0);
    let what = || String::from_utf8_lossy(field).into_owned();
    let reply = target
        .call_key(&fence, &[b"HGET", &fence, field])
        .await
        .map_err(|e| format!("reading {}: {e}", what()))?;
    match reply {
        Reply::Nil => Ok(None),
        Reply::Data(value) => Ok(Some(value)),
        other => Err(format!("HGET of {} answered {other:?}", what())),
    }
}

/// Writes the hold on the end on the target, `why` its reason.
async fn set_hold(target: &Endpoint, why: &str) -> Result<(), String> {
    let fence = slot_fence(0);
    let call: &[&[u8]] = &[b"HSET", &fence, HOLD_FIELD, why.as_bytes()];
    match target.call_key(&fence, call).await {
        Ok(Reply::Int(_)) => Ok(()),
        Ok(other) => Err(format!("writing the end's hold: {other:?}")),
        Err(e) => Err(format!("writing the end's hold: {e}")),
    }
}

impl Migration {
    /// Whether a batch whose seals wrote `wrote` keys checks one of them: one walker move in
    /// [`CHECK_EVERY`], the first included.
    pub(super) fn check_due(&self, wrote: u64) -> bool {
        let before = self.counters.check_tick.fetch_add(wrote, Ordering::Relaxed);
        wrote > 0 && (before == 0 || before / CHECK_EVERY != (before + wrote) / CHECK_EVERY)
    }

    /// Checks the value of `spec`'s move (sealed, not finished) and counts what it found; a
    /// difference holds the end before the move's finish.
    pub(super) async fn check_sealed(&self, walker: &Mover, spec: &MoveSpec) {
        let check = match walker.check_value(spec).await {
            Ok(check) => check,
            Err(e) => {
                tracing::warn!(error = %e, "live migration: a value check could not read a side");
                return;
            }
        };
        let c = &self.counters;
        match check {
            Check::Unchecked => {}
            Check::Same => {
                c.values_checked.fetch_add(1, Ordering::Relaxed);
            }
            Check::Differs(how) => {
                c.values_checked.fetch_add(1, Ordering::Relaxed);
                c.values_differ.fetch_add(1, Ordering::Relaxed);
                let why = format!(
                    "the value of {} differs from the source's {} after its move: {how}",
                    spec.to.escape_ascii(),
                    spec.from.escape_ascii()
                );
                self.hold_end(why).await;
            }
        }
    }

    /// Holds the end for `why`, on the target for every proxy and here.
    pub(super) async fn hold_end(&self, why: String) {
        tracing::error!(reason = %why, "live migration: the end is held until resumed");
        self.note_error(&why);
        let written = match set_hold(&self.target, &why).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "live migration: the hold is written again later");
                false
            }
        };
        *self.hold() = Some(Hold { why, written });
    }

    /// The hold on the end, read from the target (kept for the status): `Some(reason)` until
    /// an operator releases it, on any proxy. A hold this proxy could not write yet is
    /// written now, and stands meanwhile.
    pub(super) async fn end_hold(&self) -> Result<Option<String>, String> {
        let on_target = read_hold(&self.target).await?;
        let unwritten = match (&on_target, self.hold().clone()) {
            (None, Some(hold)) if !hold.written => Some(hold.why),
            _ => None,
        };
        let held = match unwritten {
            Some(why) => {
                let written = set_hold(&self.target, &why).await.is_ok();
                Some(Hold { why, written })
            }
            None => on_target.map(|why| Hold { why, written: true }),
        };
        let why = held.as_ref().map(|hold| hold.why.clone());
        *self.hold() = held;
        Ok(why)
    }

    /// The hold on the end as this proxy last knew it.
    pub fn end_held(&self) -> Option<String> {
        self.hold().as_ref().map(|hold| hold.why.clone())
    }

    fn hold(&self) -> std::sync::MutexGuard<'_, Option<Hold>> {
        self.end_held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resumes the walker and releases a hold on the end (an operator's call): a count
    /// check's missing keys are accepted from then on.
    pub async fn resume(&self) -> Result<(), String> {
        let fence = slot_fence(0);
        let release: &[&[u8]] = &[
            b"EVAL",
            RELEASE_SCRIPT.as_bytes(),
            b"1",
            &fence,
            SHORT_FIELD,
            ACCEPTED_FIELD,
            HOLD_FIELD,
        ];
        match self.target.call_key(&fence, release).await {
            Ok(Reply::Int(_)) => {}
            Ok(other) => return Err(format!("releasing the end's hold: {other:?}")),
            Err(e) => return Err(format!("releasing the end's hold: {e}")),
        }
        *self.hold() = None;
        self.set_paused(false);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(kind: &str, sha1: &str, volatile: bool) -> Digest {
        Digest::Read {
            kind: kind.into(),
            sha1: sha1.into(),
            volatile,
        }
    }

    #[test]
    fn equal_values_are_the_same_and_any_difference_is_named() {
        let hash = read("hash", "aa", false);
        assert_eq!(compare(&hash, &hash), Check::Same);
        let cases = [
            (read("hash", "bb", false), "elements differ"),
            (read("set", "aa", false), "a hash on the source, a set"),
            (read("hash", "aa", true), "TTL on one side only"),
            (Digest::Missing, "persistent hash missing"),
        ];
        for (target, said) in cases {
            match compare(&hash, &target) {
                Check::Differs(how) => assert!(how.contains(said), "{how}"),
                other => panic!("{target:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_cannot_be_compared_is_left_unchecked() {
        let volatile = read("string", "aa", true);
        for (source, target) in [
            (volatile.clone(), Digest::Missing),
            (Digest::Missing, volatile.clone()),
            (Digest::Large, volatile.clone()),
            (volatile.clone(), Digest::Large),
            (Digest::Number(None), Digest::Number(Some(3))),
        ] {
            assert_eq!(compare(&source, &target), Check::Unchecked, "{source:?}");
        }
    }

    #[test]
    fn a_counter_may_only_be_higher_on_the_target() {
        let n = |n| Digest::Number(Some(n));
        assert_eq!(compare(&n(5), &n(5)), Check::Same);
        assert_eq!(compare(&n(5), &n(9)), Check::Same);
        assert!(matches!(compare(&n(5), &n(4)), Check::Differs(_)));
        assert!(matches!(
            compare(&n(5), &Digest::Number(None)),
            Check::Differs(_)
        ));
    }

    #[test]
    fn the_digest_scripts_replies_are_read() {
        let data = |s: &str| Reply::Data(bytes::Bytes::copy_from_slice(s.as_bytes()));
        let read_one = |items: Vec<Reply>| read_digest(&Reply::List(items));
        assert_eq!(read_one(vec![data("none")]), Ok(Digest::Missing));
        assert_eq!(
            read_one(vec![data("large"), data("zset")]),
            Ok(Digest::Large)
        );
        assert_eq!(
            read_one(vec![data("zset"), data("ab"), Reply::Int(-1)]),
            Ok(read("zset", "ab", false))
        );
        assert_eq!(
            read_one(vec![data("zset"), data("ab"), Reply::Int(5)]),
            Ok(read("zset", "ab", true))
        );
        assert!(read_one(vec![data("zset")]).is_err());
        assert!(read_digest(&Reply::Int(1)).is_err());
    }
}
