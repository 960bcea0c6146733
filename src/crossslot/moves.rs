//! Moves across slots: RENAME, RENAMENX, SMOVE, LMOVE, RPOPLPUSH, BLMOVE and BRPOPLPUSH
//! (`cross_slot.moves`), and COPY (`cross_slot.stores`), when the source and the
//! destination live in different slots. Pure: a [`Mover`] says which command goes to which
//! key's master next and turns each reply into the next step, the last one being the
//! client's reply; the planner does the IO.
//!
//! One Redis runs each of these commands atomically. Across two masters no order of steps
//! is both atomic and safe against a failure between them, so every command here copies
//! first and removes from the source last: a failure or a concurrent writer in the middle
//! can leave the data in both places (a duplicate), never in neither (a loss).
//!
//! # Steps, and what a failure or a concurrent writer in the middle leaves
//!
//! - **RENAME, RENAMENX**: `WATCH src` on a connection of its own; `DUMP` and `PTTL` of src
//!   in one script; `RESTORE dst ttl payload` (`REPLACE` for RENAME) on dst's master;
//!   `MULTI DEL src EXEC` on the watching connection. Before RESTORE nothing changed and
//!   the error is the reply. After it dst holds src's value and TTL; src is deleted only
//!   if nothing wrote it since the WATCH, else it keeps what that writer made (a duplicate
//!   of the old value) and the reply is still `OK` / 1. An error at the DEL is the reply,
//!   src kept.
//! - **COPY**: `DUMP`/`PTTL` of src, `RESTORE dst` (`REPLACE` with REPLACE): dst replaced
//!   whole or not at all, src untouched.
//! - **SMOVE**: the type of src and `SISMEMBER` in one script; `SADD dst member` (or
//!   `TYPE dst` when not a member, for WRONGTYPE); `SREM src member`. The reply is SREM's,
//!   as Redis's is 1 only when the member left the source: if another client took the
//!   member from src in between, the reply is 0 and dst keeps the member (a duplicate).
//! - **LMOVE, RPOPLPUSH**: the type of src and the element at its end in one script; the
//!   push on dst; one script pops src's end only if it still holds that element. If the
//!   end changed in between (another client popped or pushed there), src keeps the
//!   element too (a duplicate) and the reply is still the element pushed to dst. Two
//!   clients moving from the same end at once can both get the element.
//! - **BLMOVE, BRPOPLPUSH**: `BLMOVE src src from from timeout` on a connection of its own
//!   waits until src has an element and leaves it as it was; then as LMOVE; if another
//!   client took the element in between, it waits again for what is left of the timeout.
//!   The wait takes nothing, so a client blocked through the proxy does not keep its place
//!   in Redis's first-come order among clients blocked on the same key.
//!
//! Replies and errors are Redis 7.0's: `ERR no such key`, WRONGTYPE in Redis's order of
//! checks (SMOVE and LMOVE check the source first, and a missing source answers 0 or
//! null whatever the destination holds), BUSYKEY of RESTORE answered as RENAMENX's and
//! COPY's 0. The helper commands go out in RESP2 and the reply is built in the client's
//! protocol. Keyspace notifications are those of the steps (`restore`, `del`, `sadd`,
//! `srem`, `lpush`, `rpop`...), not `rename_from`/`rename_to` or `lmove`.

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, Elements, Proto, ReplyView};
use crate::reply::{self, crossslot as text};

mod parse;

pub use parse::{parse_move, End, MoveKind, MoveRequest};

/// `KEYS[1]`'s serialized value and its TTL in ms, or nil when it does not exist, or the
/// payload's size when it exceeds `ARGV[1]` bytes (so an oversized value never leaves
/// its node).
const DUMP_SCRIPT: &str = "local payload = redis.call('DUMP', KEYS[1]) \
    if not payload then return nil end \
    if #payload > tonumber(ARGV[1]) then return #payload end \
    return {payload, redis.call('PTTL', KEYS[1])}";

/// -1 when `KEYS[1]` does not exist, -2 when it is not a set, else whether `ARGV[1]` is a
/// member.
const SMOVE_PEEK: &str = "local t = redis.call('TYPE', KEYS[1])['ok'] \
    if t == 'none' then return -1 end \
    if t ~= 'set' then return -2 end \
    return redis.call('SISMEMBER', KEYS[1], ARGV[1])";

/// -1 when `KEYS[1]` does not exist, -2 when it is not a list, else the element at index
/// `ARGV[1]` (0 or -1) in an array of one.
const LIST_PEEK: &str = "local t = redis.call('TYPE', KEYS[1])['ok'] \
    if t == 'none' then return -1 end \
    if t ~= 'list' then return -2 end \
    return {redis.call('LINDEX', KEYS[1], ARGV[1])}";

/// Pops `KEYS[1]` with `ARGV[3]` (LPOP or RPOP) only when the element at index `ARGV[1]`
/// is still `ARGV[2]`; 1 when it popped.
const LIST_POP_IF_SAME: &str = "if redis.call('TYPE', KEYS[1])['ok'] == 'list' \
    and redis.call('LINDEX', KEYS[1], ARGV[1]) == ARGV[2] then \
    redis.call(ARGV[3], KEYS[1]) return 1 end \
    return 0";

/// Whose master a step's command goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The source key's.
    Source,
    /// The destination key's.
    Destination,
}

/// What the planner does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Send the command (RESP2) to the master of `Side`'s key, with redirects and
    /// retries, and hand its reply to [`Mover::step`].
    Send(Side, Vec<Bytes>),
    /// `WATCH source` on a connection of its own to the source's master; hand WATCH's
    /// reply to [`Mover::step`].
    WatchSource,
    /// Run the commands as one MULTI/EXEC on the connection that watched the source; hand
    /// EXEC's reply to [`Mover::step`].
    ExecWatched(Vec<Vec<Bytes>>),
    /// Run the command (a BLMOVE of the source onto itself, which leaves it as it is) on
    /// a connection of its own to the source's master, in the client's protocol: it
    /// waits until the source has an element. Its last argument is the client's timeout,
    /// which the planner lowers to what is left of it when it waits again (and answers
    /// the null of a timeout, [`encode::null_array`]'s, itself once none is left). Hand
    /// its reply to [`Mover::step`].
    Block(Vec<Bytes>),
    /// The client's reply: the move is over.
    Reply(Bytes),
}

/// Where a move is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// WATCH sent (RENAME, RENAMENX).
    Watching,
    /// Waiting for the source to have an element (BLMOVE, BRPOPLPUSH).
    Waiting,
    /// The source read.
    Reading,
    /// The copy sent to the destination; what it copied (an SMOVE member found or not,
    /// an LMOVE element, nothing for a dump).
    Writing(Option<Bytes>),
    /// The source's removal sent; the reply when it succeeds.
    Removing(Bytes),
    /// The reply was given.
    Done,
}

/// One move across slots, step by step (see the module docs).
#[derive(Debug, Clone)]
pub struct Mover {
    request: MoveRequest,
    proto: Proto,
    /// The largest DUMP payload moved, in bytes (`cross_slot.max_bytes`).
    max_bytes: u64,
    phase: Phase,
}

impl Mover {
    /// A move of `request` for a client speaking `proto`.
    pub fn new(request: MoveRequest, proto: Proto, max_bytes: u64) -> Mover {
        Mover {
            request,
            proto,
            max_bytes,
            phase: Phase::Done,
        }
    }

    /// The request being moved.
    pub fn request(&self) -> &MoveRequest {
        &self.request
    }

    /// The first step.
    pub fn start(&mut self) -> Next {
        match &self.request.kind {
            MoveKind::Rename { .. } => {
                self.phase = Phase::Watching;
                Next::WatchSource
            }
            MoveKind::Lmove {
                timeout: Some(_), ..
            } => self.wait(),
            _ => self.read(),
        }
    }

    /// Waits for the source to have an element: `BLMOVE source source from from timeout`
    /// pops an end and pushes the element back on the same end, so the list is as it was,
    /// and answers as BLMOVE does before it moves anything (the timeout's errors,
    /// WRONGTYPE, the null of a timeout).
    fn wait(&mut self) -> Next {
        let MoveKind::Lmove {
            from,
            timeout: Some(timeout),
            ..
        } = &self.request.kind
        else {
            return self.unexpected();
        };
        let end = Bytes::from_static(match from {
            End::Left => b"LEFT",
            End::Right => b"RIGHT",
        });
        let source = self.request.source.clone();
        let command = vec![
            Bytes::from_static(b"BLMOVE"),
            source.clone(),
            source,
            end.clone(),
            end,
            timeout.clone(),
        ];
        self.phase = Phase::Waiting;
        Next::Block(command)
    }

    /// The step after `reply`, the reply to the last step.
    pub fn step(&mut self, reply: &[u8]) -> Next {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let next = match phase {
            Phase::Watching if is_error(reply) => self.answer(Bytes::copy_from_slice(reply)),
            Phase::Watching => self.read(),
            // An element: the source has one now, move it as LMOVE does. Else an error or
            // the null of a timeout, BLMOVE's own reply.
            Phase::Waiting if reply.first() == Some(&b'$') && reply != b"$-1\r\n" => self.read(),
            Phase::Waiting => self.answer(Bytes::copy_from_slice(reply)),
            Phase::Reading => self.after_read(reply),
            Phase::Writing(copied) => self.after_write(reply, copied),
            Phase::Removing(success) => self.after_remove(reply, success),
            Phase::Done => Next::Reply(reply::error(text::MOVE_UNEXPECTED)),
        };
        if let Next::Reply(_) = next {
            self.phase = Phase::Done;
        }
        next
    }

    fn read(&mut self) -> Next {
        self.phase = Phase::Reading;
        let source = self.request.source.clone();
        let command = match &self.request.kind {
            MoveKind::Rename { .. } | MoveKind::Copy { .. } => {
                let limit = Bytes::from(self.max_bytes.to_string());
                script(DUMP_SCRIPT, source, vec![limit])
            }
            MoveKind::Smove { member } => script(SMOVE_PEEK, source, vec![member.clone()]),
            MoveKind::Lmove { from, .. } => {
                script(LIST_PEEK, source, vec![Bytes::from_static(from.index())])
            }
        };
        Next::Send(Side::Source, command)
    }

    fn after_read(&mut self, reply: &[u8]) -> Next {
        if is_error(reply) {
            return self.answer(Bytes::copy_from_slice(reply));
        }
        let Some(read) = ReadReply::of(reply) else {
            return self.unexpected();
        };
        let destination = self.request.destination.clone();
        match (&self.request.kind, read) {
            (MoveKind::Rename { .. }, ReadReply::Null) => self.error(text::NO_SUCH_KEY),
            (MoveKind::Copy { .. }, ReadReply::Null) => self.answer(encode::integer_frame(0)),
            (MoveKind::Rename { .. } | MoveKind::Copy { .. }, ReadReply::Int(size)) => {
                let size = u64::try_from(size).unwrap_or_default();
                self.error(&text::too_large(
                    self.request.name,
                    "bytes",
                    size,
                    self.max_bytes,
                ))
            }
            (MoveKind::Rename { .. } | MoveKind::Copy { .. }, ReadReply::List(dump)) => {
                let replace = match self.request.kind {
                    MoveKind::Rename { nx } => !nx,
                    MoveKind::Copy { replace } => replace,
                    _ => false,
                };
                match restore(destination, dump, replace) {
                    Some(command) => self.send(Side::Destination, command, None),
                    None => self.unexpected(),
                }
            }
            // Another client took the element the wait saw: wait again.
            (
                MoveKind::Lmove {
                    timeout: Some(_), ..
                },
                ReadReply::Int(-1),
            ) => self.wait(),
            (MoveKind::Smove { .. } | MoveKind::Lmove { .. }, ReadReply::Int(-1)) => {
                self.answer(self.missing_source())
            }
            (MoveKind::Smove { .. } | MoveKind::Lmove { .. }, ReadReply::Int(-2)) => {
                self.error(text::WRONGTYPE)
            }
            (MoveKind::Smove { member }, ReadReply::Int(found)) => {
                let member = member.clone();
                let command = if found == 1 {
                    vec![Bytes::from_static(b"SADD"), destination, member.clone()]
                } else {
                    vec![Bytes::from_static(b"TYPE"), destination]
                };
                self.send(Side::Destination, command, (found == 1).then_some(member))
            }
            (MoveKind::Lmove { to, .. }, ReadReply::List(mut items)) => {
                let Some(element) = items.next().as_ref().and_then(ReplyView::text) else {
                    return self.unexpected();
                };
                let push: &'static [u8] = match to {
                    End::Left => b"LPUSH",
                    End::Right => b"RPUSH",
                };
                let element = Bytes::copy_from_slice(element);
                let command = vec![Bytes::from_static(push), destination, element.clone()];
                self.send(Side::Destination, command, Some(element))
            }
            _ => self.unexpected(),
        }
    }

    fn after_write(&mut self, reply: &[u8], copied: Option<Bytes>) -> Next {
        let source = self.request.source.clone();
        match &self.request.kind {
            MoveKind::Rename { nx } if reply.starts_with(b"+OK") => {
                self.phase = Phase::Removing(if *nx {
                    encode::integer_frame(1)
                } else {
                    Bytes::from_static(b"+OK\r\n")
                });
                Next::ExecWatched(vec![vec![Bytes::from_static(b"DEL"), source]])
            }
            MoveKind::Rename { .. } | MoveKind::Copy { .. } if reply.starts_with(b"-BUSYKEY") => {
                self.answer(encode::integer_frame(0))
            }
            MoveKind::Copy { .. } if reply.starts_with(b"+OK") => {
                self.answer(encode::integer_frame(1))
            }
            _ if is_error(reply) => self.answer(Bytes::copy_from_slice(reply)),
            MoveKind::Smove { member } => match copied {
                Some(_) => {
                    let command = vec![Bytes::from_static(b"SREM"), source, member.clone()];
                    // SREM's own count is the reply (see `after_remove`).
                    self.phase = Phase::Removing(Bytes::new());
                    Next::Send(Side::Source, command)
                }
                None if matches!(reply, b"+set\r\n" | b"+none\r\n") => {
                    self.answer(encode::integer_frame(0))
                }
                None => self.error(text::WRONGTYPE),
            },
            MoveKind::Lmove { from, .. } => {
                let Some(element) = copied else {
                    return self.unexpected();
                };
                let (index, pop): (&'static [u8], &'static [u8]) = match from {
                    End::Left => (b"0", b"LPOP"),
                    End::Right => (b"-1", b"RPOP"),
                };
                let args = vec![
                    Bytes::from_static(index),
                    element.clone(),
                    Bytes::from_static(pop),
                ];
                let command = script(LIST_POP_IF_SAME, source, args);
                self.phase = Phase::Removing(encode::bulk_frame(&element));
                Next::Send(Side::Source, command)
            }
            _ => self.unexpected(),
        }
    }

    fn after_remove(&mut self, reply: &[u8], success: Bytes) -> Next {
        if is_error(reply) {
            return self.answer(Bytes::copy_from_slice(reply));
        }
        match &self.request.kind {
            // SREM's count is SMOVE's reply: 1 only when the member left the source.
            MoveKind::Smove { .. } => self.answer(Bytes::copy_from_slice(reply)),
            // Removed, or kept because it changed (EXEC's null, the pop script's 0): the
            // copy is made either way.
            _ => self.answer(success),
        }
    }

    /// The reply when the source does not exist: SMOVE's 0, LMOVE's null.
    fn missing_source(&self) -> Bytes {
        match self.request.kind {
            MoveKind::Lmove { .. } => encode::null_frame(self.proto),
            _ => encode::integer_frame(0),
        }
    }

    fn send(&mut self, side: Side, command: Vec<Bytes>, copied: Option<Bytes>) -> Next {
        self.phase = Phase::Writing(copied);
        Next::Send(side, command)
    }

    fn answer(&mut self, reply: Bytes) -> Next {
        self.phase = Phase::Done;
        Next::Reply(reply)
    }

    fn error(&mut self, text: &str) -> Next {
        self.answer(reply::error(text))
    }

    fn unexpected(&mut self) -> Next {
        self.error(text::MOVE_UNEXPECTED)
    }
}

/// What a move's read step answered, as the move tells its answers apart.
enum ReadReply<'a> {
    Null,
    /// An integer, or a boolean as 0 or 1.
    Int(i64),
    /// An array (or set, or push): its elements.
    List(Elements<'a>),
    Other,
}

impl<'a> ReadReply<'a> {
    /// `None` when `reply` is not one whole frame.
    fn of(reply: &'a [u8]) -> Option<ReadReply<'a>> {
        let view = ReplyView::parse(reply).ok()?;
        Some(match view {
            ReplyView::Null => ReadReply::Null,
            ReplyView::Aggregate(..) => match view.elements() {
                Some(elements) => ReadReply::List(elements),
                None => ReadReply::Other,
            },
            _ => ReadReply::int(&view).map_or(ReadReply::Other, ReadReply::Int),
        })
    }

    fn int(view: &ReplyView<'_>) -> Option<i64> {
        match *view {
            ReplyView::Int(n) => Some(n),
            ReplyView::Boolean(b) => Some(i64::from(b)),
            _ => None,
        }
    }
}

/// `RESTORE destination ttl payload [REPLACE]` from a DUMP script's `[payload, pttl]`. A
/// key without a TTL (-1) is restored without one; a TTL of 0 ms left becomes 1 ms, as
/// RESTORE reads 0 as none.
fn restore(destination: Bytes, mut dump: Elements<'_>, replace: bool) -> Option<Vec<Bytes>> {
    let (Some(payload), Some(pttl), None) = (dump.next(), dump.next(), dump.next()) else {
        return None;
    };
    let (Some(payload), Some(pttl)) = (payload.text(), ReadReply::int(&pttl)) else {
        return None;
    };
    let ttl = if pttl < 0 { 0 } else { pttl.max(1) };
    let mut command = vec![
        Bytes::from_static(b"RESTORE"),
        destination,
        Bytes::from(ttl.to_string()),
        Bytes::copy_from_slice(payload),
    ];
    if replace {
        command.push(Bytes::from_static(b"REPLACE"));
    }
    Some(command)
}

/// `EVAL body 1 key args...`.
fn script(body: &'static str, key: Bytes, args: Vec<Bytes>) -> Vec<Bytes> {
    let mut command = vec![
        Bytes::from_static(b"EVAL"),
        Bytes::from_static(body.as_bytes()),
        Bytes::from_static(b"1"),
        key,
    ];
    command.extend(args);
    command
}

/// Whether `frame` is an error reply (RESP2 or RESP3).
fn is_error(frame: &[u8]) -> bool {
    matches!(frame.first(), Some(b'-' | b'!'))
}

/// `args` as one RESP request.
pub fn request_frame(args: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(args.iter().map(|a| a.len() + 16).sum::<usize>() + 16);
    encode::array_header(&mut out, args.len());
    for arg in args {
        encode::bulk(&mut out, arg);
    }
    out.freeze()
}

#[cfg(test)]
#[path = "moves_tests.rs"]
mod tests;
