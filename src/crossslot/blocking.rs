//! Multi-key pops across slots: BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX and BZMPOP whose
//! keys span slots, and their non-blocking forms LMPOP and ZMPOP (`cross_slot.blocking`).
//! Pure: what to send to which key's master and what the replies mean; the planner
//! (`dispatch::crossslot::blocking`) does the IO.
//!
//! # Design
//!
//! One Redis checks the keys in order, pops from the first that holds data, and
//! otherwise blocks the client until a push to any key. Across masters:
//!
//! 1. **Probe**: the length of every key (`LLEN` / `ZCARD`), all at once, each on its
//!    master. The first key in order whose answer is an error (WRONGTYPE) or not 0
//!    decides: an error is the reply, as Redis's own check in key order gives it.
//! 2. **Pop** that one key with the non-blocking form (`LPOP`, `RPOP`, `LMPOP 1 key`,
//!    `ZPOPMIN`, `ZPOPMAX`, `ZMPOP 1 key`), which is atomic on its master. Its reply,
//!    reshaped where the blocking form's reply differs (`BLPOP`'s `[key, element]`,
//!    `BZPOPMIN`'s `[key, member, score]`), is the client's. Empty (another client took
//!    the data since the probe): back to 1.
//! 3. LMPOP and ZMPOP stop at 1 when a probe finds every key empty: the null array is
//!    their reply, as Redis's. A pop that found its key emptied since the probe probes
//!    again, so the null is only given when one probe saw every key empty.
//! 4. **Wait** when every key is empty, on connections of the client's own:
//!    - lists: `BLMOVE key key LEFT LEFT t` for every key at once, `t` what is left of the
//!      timeout. It returns as soon as the key has an element and leaves the list as it
//!      was (the element goes back where it was taken, in one step on the node), so the
//!      wait takes nothing. The first wait to answer ends them all (their connections are
//!      closed, which ends the command on the node) and it is back to 1.
//!    - sorted sets: Redis has no blocking command that waits on a sorted set without
//!      taking from it. A consuming wait per key (`BZPOPMIN` on each) would take from
//!      several keys when pushes come together, and what it took would have to be put
//!      back, out of sight of other readers for a moment and lost if the proxy died
//!      between; so the proxy polls instead: the probe is repeated every
//!      [`POLL_MIN`]..[`POLL_MAX`] (doubling while nothing comes). Between probes it waits
//!      with `BLMOVE key key LEFT LEFT interval` on the first key, a wait that takes
//!      nothing and that `CLIENT UNBLOCK` reaches. The cost: an element pushed to a sorted
//!      set reaches a client blocked this way up to [`POLL_MAX`] later, and a few small
//!      commands per interval per blocked client.
//!
//! # Guarantee
//!
//! No element is popped twice or lost: the only commands that take anything are the
//! atomic non-blocking pops of step 2, one per round, and their reply goes to the client
//! (a client that is gone before a pop's reply loses it as it would on one Redis). The
//! waits take nothing. Weaker than one Redis: the probe is not one snapshot of every key
//! (like a split MGET), and a client blocked through the proxy does not keep its place in
//! Redis's first-come order among clients blocked on the same key: the element goes to
//! whoever pops first once it is there. The timeout is Redis's (seconds as a float, 0 for
//! ever); its end answers a null array. `CLIENT UNBLOCK` through the proxy reaches the
//! wait running now and notes it, so a poll's wait that answers null because of it (its
//! `TIMEOUT` form) ends the pop with the null, and `-UNBLOCKED` (its `ERROR` form) is
//! passed on. Between two waits the client is not shown blocked for a moment (a probe
//! runs), and an unblock then finds nothing, as for a client not blocked.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, parse_i64, Proto};
use crate::reply::{self, crossslot as text};

use super::moves::request_frame;

/// The first wait between two probes of sorted sets, doubled after each empty probe.
pub const POLL_MIN: Duration = Duration::from_millis(10);
/// The longest wait between two probes of sorted sets: how late at most a blocked client
/// may see an element pushed to one of its sorted sets.
pub const POLL_MAX: Duration = Duration::from_millis(100);

/// The type of the keys a pop waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// BLPOP, BRPOP, BLMPOP.
    List,
    /// BZPOPMIN, BZPOPMAX, BZMPOP.
    SortedSet,
}

/// The non-blocking pop one round runs on the key that has data.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pop {
    /// `LPOP key` / `RPOP key` (`name`), replied as `[key, element]`.
    List(&'static [u8]),
    /// `ZPOPMIN key` / `ZPOPMAX key`, replied as `[key, member, score]`.
    SortedSet(&'static [u8]),
    /// `LMPOP` / `ZMPOP` with `1 key` and the client's trailing arguments (end, COUNT),
    /// whose reply is the blocking form's.
    Multi(&'static [u8], Vec<Bytes>),
}

/// A parsed multi-key pop across slots: a blocking one, or LMPOP / ZMPOP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingPop {
    /// The keys, in the client's order.
    pub keys: Vec<Bytes>,
    /// What the keys hold.
    pub holds: Holds,
    /// Whether the client waits when every key is empty: false for LMPOP and ZMPOP.
    pub blocks: bool,
    /// How long the client may wait; `None`: for ever (a timeout of 0), or no wait at all
    /// when the pop does not block.
    pub timeout: Option<Duration>,
    pop: Pop,
}

/// What a probe round found, the first key in order deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// Key number `n` has data: pop it.
    Ready(usize),
    /// The reply for the client (WRONGTYPE, or another error the node gave).
    Reply(Bytes),
    /// Every key is empty: wait.
    Empty,
}

/// What a wait's answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// Something may have arrived (or changed type): probe again.
    Probe,
    /// The client's reply: its timeout ended, it was unblocked, or the node failed.
    Reply(Bytes),
}

/// Parses a multi-key pop of `args` (`args[0]` the command's name), blocking or LMPOP /
/// ZMPOP; `None` when it is not one; `Err` is the reply Redis gives to such arguments
/// before it looks at a key.
pub fn parse_blocking_pop(args: &[Bytes]) -> Option<Result<BlockingPop, Bytes>> {
    let name = args.first()?.to_ascii_lowercase();
    let (holds, pop) = match name.as_slice() {
        b"blpop" => (Holds::List, Pop::List(b"LPOP")),
        b"brpop" => (Holds::List, Pop::List(b"RPOP")),
        b"bzpopmin" => (Holds::SortedSet, Pop::SortedSet(b"ZPOPMIN")),
        b"bzpopmax" => (Holds::SortedSet, Pop::SortedSet(b"ZPOPMAX")),
        b"blmpop" => return Some(parse_multi(args, Holds::List, b"LMPOP", LIST_ENDS, true)),
        b"bzmpop" => {
            return Some(parse_multi(
                args,
                Holds::SortedSet,
                b"ZMPOP",
                ZSET_ENDS,
                true,
            ))
        }
        b"lmpop" => return Some(parse_multi(args, Holds::List, b"LMPOP", LIST_ENDS, false)),
        b"zmpop" => {
            return Some(parse_multi(
                args,
                Holds::SortedSet,
                b"ZMPOP",
                ZSET_ENDS,
                false,
            ))
        }
        _ => return None,
    };
    Some(match args {
        [_, keys @ .., timeout] if !keys.is_empty() => {
            parse_timeout(timeout).map(|timeout| BlockingPop {
                keys: keys.to_vec(),
                holds,
                blocks: true,
                timeout,
                pop,
            })
        }
        _ => Err(reply::wrong_arity(&String::from_utf8_lossy(&name))),
    })
}

/// The ends BLMPOP and BZMPOP pop from.
const LIST_ENDS: [&[u8]; 2] = [b"left", b"right"];
const ZSET_ENDS: [&[u8]; 2] = [b"min", b"max"];

/// `BLMPOP timeout numkeys key... LEFT|RIGHT [COUNT n]` and `BZMPOP ... MIN|MAX ...`
/// (`blocks`), or `LMPOP numkeys key...` and `ZMPOP numkeys key...`, checked in Redis's
/// order: numkeys, the end, the options, then the timeout.
fn parse_multi(
    args: &[Bytes],
    holds: Holds,
    pop: &'static [u8],
    ends: [&[u8]; 2],
    blocks: bool,
) -> Result<BlockingPop, Bytes> {
    let error = |text: &str| reply::error(text);
    let numkeys_at = if blocks { 2 } else { 1 };
    let numkeys = args
        .get(numkeys_at)
        .and_then(|n| parse_i64(n))
        .filter(|n| *n > 0)
        .ok_or_else(|| error(text::NUMKEYS_POSITIVE))?;
    let end_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(numkeys_at + 1))
        .filter(|at| *at < args.len())
        .ok_or_else(|| error(text::SYNTAX))?;
    let end = &args[end_at];
    if !ends.iter().any(|e| end.eq_ignore_ascii_case(e)) {
        return Err(error(text::SYNTAX));
    }
    match &args[end_at + 1..] {
        [] => {}
        [count, n] if count.eq_ignore_ascii_case(b"count") => {
            if parse_i64(n).is_none_or(|n| n <= 0) {
                return Err(error(COUNT_POSITIVE));
            }
        }
        _ => return Err(error(text::SYNTAX)),
    }
    let timeout = match blocks {
        true => parse_timeout(&args[1])?,
        false => None,
    };
    Ok(BlockingPop {
        keys: args[numkeys_at + 1..end_at].to_vec(),
        holds,
        blocks,
        timeout,
        pop: Pop::Multi(pop, args[end_at..].to_vec()),
    })
}

/// LMPOP's and ZMPOP's COUNT below 1 or not an integer.
const COUNT_POSITIVE: &str = "ERR count should be greater than 0";
/// A timeout that is not a number.
const TIMEOUT_NOT_FLOAT: &str = "ERR timeout is not a float or out of range";

/// The timeout in seconds as Redis 7.0 reads it: a float, rounded up to whole
/// milliseconds, 0 (also a negative fraction of a millisecond) for ever. A value beyond
/// what a 64-bit count of milliseconds holds (`inf`, `1e18`) is "negative" there, as its
/// conversion on x86-64 gives the least integer. Hexadecimal floats (`0x1.8p-1`) are read
/// as strtold reads them.
fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, Bytes> {
    let seconds = std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.is_empty() && !s.starts_with(char::is_whitespace))
        .and_then(|s| s.parse::<f64>().ok().or_else(|| super::score::parse(arg)))
        .filter(|s| !s.is_nan())
        .ok_or_else(|| reply::error(TIMEOUT_NOT_FLOAT))?;
    let millis = (seconds * 1000.0).ceil();
    if !(0.0..I64_LIMIT).contains(&millis) {
        return Err(reply::error(reply::connection::TIMEOUT_NEGATIVE));
    }
    Ok((millis > 0.0).then(|| Duration::from_millis(millis as u64)))
}

/// 2^63: the first value a signed 64-bit integer does not hold.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

impl BlockingPop {
    /// The probe of key `key`: its length, or WRONGTYPE.
    pub fn probe(&self, key: &Bytes) -> Bytes {
        let name: &[u8] = match self.holds {
            Holds::List => b"LLEN",
            Holds::SortedSet => b"ZCARD",
        };
        request_frame(&[Bytes::from_static(name), key.clone()])
    }

    /// The first key in order the probe replies (one per key) decide for.
    pub fn probed(&self, replies: &[Bytes]) -> Probed {
        for (n, reply) in replies.iter().enumerate() {
            match reply.first() {
                Some(b'-' | b'!') => return Probed::Reply(reply.clone()),
                Some(b':') if reply.starts_with(b":0\r\n") => {}
                Some(b':') => return Probed::Ready(n),
                _ => return Probed::Reply(reply::error(text::UNEXPECTED_PROBE)),
            }
        }
        Probed::Empty
    }

    /// The non-blocking pop of key number `n`.
    pub fn pop(&self, n: usize) -> Bytes {
        let key = self.keys[n].clone();
        match &self.pop {
            Pop::List(name) | Pop::SortedSet(name) => {
                request_frame(&[Bytes::from_static(name), key])
            }
            Pop::Multi(name, tail) => {
                let mut args = vec![Bytes::from_static(name), Bytes::from_static(b"1"), key];
                args.extend(tail.iter().cloned());
                request_frame(&args)
            }
        }
    }

    /// The client's reply from the pop of key number `n` (sent in the client's protocol);
    /// `None` when it popped nothing (the key was emptied since the probe).
    pub fn popped(&self, n: usize, reply: &Bytes) -> Option<Bytes> {
        if is_null(reply) {
            return None;
        }
        // An error (the key changed type since the probe, a node's refusal) is the reply:
        // taken for an empty key, it would have the client probe and pop again at once.
        if matches!(reply.first(), Some(b'-' | b'!')) {
            return Some(reply.clone());
        }
        let key = &self.keys[n];
        match &self.pop {
            Pop::Multi(..) => Some(reply.clone()),
            Pop::List(_) if reply.first() == Some(&b'$') => {
                let mut out = BytesMut::with_capacity(reply.len() + key.len() + 16);
                encode::array_header(&mut out, 2);
                encode::bulk(&mut out, key);
                out.extend_from_slice(reply);
                Some(out.freeze())
            }
            // `[member, score]`, empty when the key was emptied since the probe.
            Pop::SortedSet(_) => {
                let rest = reply.strip_prefix(b"*2\r\n")?;
                let mut out = BytesMut::with_capacity(reply.len() + key.len() + 16);
                encode::array_header(&mut out, 3);
                encode::bulk(&mut out, key);
                out.extend_from_slice(rest);
                Some(out.freeze())
            }
            Pop::List(_) => Some(reply.clone()),
        }
    }

    /// The wait on key `key` for at most `seconds` (`None`: no end): takes nothing.
    pub fn wait(key: &Bytes, seconds: Option<f64>) -> Bytes {
        let timeout = seconds.map_or_else(|| "0".to_string(), |s| format!("{:.3}", s.max(0.001)));
        request_frame(&[
            Bytes::from_static(b"BLMOVE"),
            key.clone(),
            key.clone(),
            Bytes::from_static(b"LEFT"),
            Bytes::from_static(b"LEFT"),
            Bytes::from(timeout),
        ])
    }

    /// What a wait's `reply` means; `unblocked` when a `CLIENT UNBLOCK` was sent for the
    /// client meanwhile. A null ends a list wait, which runs for the client's timeout
    /// (or for ever); a sorted-set poll's wait (`poll`) ends with a null at the end of its
    /// interval too, and only the unblock makes it the client's reply.
    pub fn waited(reply: &Bytes, unblocked: bool, poll: bool, proto: Proto) -> Waited {
        if is_null(reply) {
            return match (poll, unblocked) {
                (true, false) => Waited::Probe,
                _ => Waited::Reply(timed_out(proto)),
            };
        }
        match reply.first() {
            Some(b'-' | b'!') if !reply.starts_with(b"-WRONGTYPE") => Waited::Reply(reply.clone()),
            // An element (left in place), or a key that is not a list: what it holds
            // now is the probe's to find.
            _ => Waited::Probe,
        }
    }
}

/// What is left until `deadline` (`None`: no end) for the next wait: `Some(None)` for
/// ever, `Some(Some(left))`, or `None` once less than a millisecond is left (the timeout
/// has ended).
pub fn time_left(deadline: Option<std::time::Instant>) -> Option<Option<Duration>> {
    let Some(deadline) = deadline else {
        return Some(None);
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    (left >= Duration::from_millis(1)).then_some(Some(left))
}

/// The null a blocking pop answers when its timeout ends, and LMPOP or ZMPOP when every
/// key is empty: a null array.
pub fn timed_out(proto: Proto) -> Bytes {
    let mut out = BytesMut::with_capacity(4);
    encode::null_array(&mut out, proto);
    out.freeze()
}

/// Whether `reply` is a null (RESP2 null bulk or array, RESP3 null).
fn is_null(reply: &[u8]) -> bool {
    matches!(reply, b"$-1\r\n" | b"*-1\r\n" | b"_\r\n")
}

#[cfg(test)]
#[path = "blocking_tests.rs"]
mod tests;
