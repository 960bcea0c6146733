//! Reading a move's arguments as Redis 7.0 reads them, with its errors and its order of
//! checks: what a move does, from where to where.

use bytes::Bytes;

use crate::protocol::parse_i64;
use crate::reply::{self, crossslot as text};

/// One end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// LEFT: the head.
    Left,
    /// RIGHT: the tail.
    Right,
}

impl End {
    fn parse(arg: &[u8]) -> Option<End> {
        if arg.eq_ignore_ascii_case(b"left") {
            Some(End::Left)
        } else if arg.eq_ignore_ascii_case(b"right") {
            Some(End::Right)
        } else {
            None
        }
    }

    /// LINDEX's index of this end.
    pub(super) fn index(self) -> &'static [u8] {
        match self {
            End::Left => b"0",
            End::Right => b"-1",
        }
    }
}

/// What a move does, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveKind {
    /// RENAME (`nx: false`) or RENAMENX.
    Rename {
        /// RENAMENX: leave an existing destination alone and answer 0.
        nx: bool,
    },
    /// COPY, with or without REPLACE (DB 0 only).
    Copy {
        /// REPLACE: an existing destination is overwritten.
        replace: bool,
    },
    /// SMOVE of one member.
    Smove {
        /// The member.
        member: Bytes,
    },
    /// LMOVE, or RPOPLPUSH (RIGHT to LEFT), and their blocking forms BLMOVE and
    /// BRPOPLPUSH.
    Lmove {
        /// The end of the source it pops.
        from: End,
        /// The end of the destination it pushes.
        to: End,
        /// The blocking forms' timeout, as the client sent it (the source's node reads it).
        timeout: Option<Bytes>,
    },
}

/// A move across slots, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRequest {
    /// The command's name, upper case.
    pub name: &'static str,
    /// What it does.
    pub kind: MoveKind,
    /// The key it reads (and, but for COPY, removes from).
    pub source: Bytes,
    /// The key it writes.
    pub destination: Bytes,
}

/// Parses a move's arguments (the command name first) as Redis 7.0 does, with its errors
/// (the complete reply frame). `None`: not a command this module moves.
pub fn parse_move(args: &[Bytes]) -> Option<Result<MoveRequest, Bytes>> {
    let lower = args.first()?.to_ascii_lowercase();
    let (name, arity): (&'static str, usize) = match lower.as_slice() {
        b"rename" => ("RENAME", 3),
        b"renamenx" => ("RENAMENX", 3),
        b"copy" => ("COPY", 3),
        b"smove" => ("SMOVE", 4),
        b"lmove" => ("LMOVE", 5),
        b"rpoplpush" => ("RPOPLPUSH", 3),
        b"blmove" => ("BLMOVE", 6),
        b"brpoplpush" => ("BRPOPLPUSH", 4),
        _ => return None,
    };
    let exact = name != "COPY";
    if args.len() < arity || (exact && args.len() != arity) {
        return Some(Err(reply::wrong_arity(&name.to_ascii_lowercase())));
    }
    let kind = match name {
        "RENAME" => MoveKind::Rename { nx: false },
        "RENAMENX" => MoveKind::Rename { nx: true },
        "COPY" => match copy_options(&args[3..]) {
            Ok(replace) => MoveKind::Copy { replace },
            Err(error) => return Some(Err(reply::error(error))),
        },
        "SMOVE" => MoveKind::Smove {
            member: args[3].clone(),
        },
        "LMOVE" | "BLMOVE" => match (End::parse(&args[3]), End::parse(&args[4])) {
            (Some(from), Some(to)) => MoveKind::Lmove {
                from,
                to,
                timeout: args.get(5).cloned(),
            },
            _ => return Some(Err(reply::error(text::SYNTAX))),
        },
        _ => MoveKind::Lmove {
            from: End::Right,
            to: End::Left,
            timeout: args.get(3).cloned(),
        },
    };
    Some(Ok(MoveRequest {
        name,
        kind,
        source: args[1].clone(),
        destination: args[2].clone(),
    }))
}

/// COPY's options after the two keys, as `copyCommand` reads them on a cluster node:
/// whether REPLACE is given, or the error text.
fn copy_options(options: &[Bytes]) -> Result<bool, &'static str> {
    /// Redis's default `databases`; a cluster node keeps it but uses database 0 only.
    const DATABASES: i64 = 16;
    let mut replace = false;
    let mut other_db = false;
    let mut i = 0;
    while i < options.len() {
        let option = &options[i];
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if option.eq_ignore_ascii_case(b"db") && i + 1 < options.len() {
            let db = parse_i64(&options[i + 1]).ok_or(text::NOT_INTEGER)?;
            if !(0..DATABASES).contains(&db) {
                return Err(text::DB_OUT_OF_RANGE);
            }
            other_db |= db != 0;
            i += 1;
        } else {
            return Err(text::SYNTAX);
        }
        i += 1;
    }
    if other_db {
        return Err(text::COPY_OTHER_DB);
    }
    Ok(replace)
}
