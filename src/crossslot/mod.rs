//! Cross-slot commands computed in the proxy: given a command's arguments and what each of
//! its keys holds, the exact reply Redis 7.0 gives (RESP2 and RESP3, byte for byte) and,
//! for the STORE forms, the writes that replace the destination whole. Pure: no IO.
//!
//! # How a planner uses it
//!
//! 1. [`parse`] the arguments. An `Err` is the reply (a syntax or arity error Redis gives
//!    before it looks at any key): send it and stop.
//! 2. For each [`Read`] of [`Request::reads`] (in order; a key may repeat), send
//!    [`Read::command`] (framed by [`Read::frame_into`]) to the key's master, pipelined,
//!    and hand the raw reply frame to [`Read::value`]; where that is `WRONGTYPE` and
//!    [`Read::as_set`] gives a read, read the key again with it (a set is a valid input of
//!    a scored command). Each key's read is one
//!    command, consistent in itself; the keys together are not one snapshot (like a split
//!    `MGET`). An `Err` from `value` is a reply to forward as it is (the node refused the
//!    read).
//! 3. [`compute`] with the values in the same order. [`Outcome::reply`] is the client's reply.
//! 4. When [`Outcome::writes`] is not empty (STORE forms, BITOP, PFMERGE), send those
//!    commands in order on one connection to the master of [`Request::destination`]; they
//!    are one `MULTI`...`EXEC` (or one command), so the destination is replaced whole or
//!    not at all. Reply [`Outcome::reply`] only when the last write's reply is not an error
//!    (and `EXEC`'s is not null); otherwise reply that error.
//!
//! ZRANGESTORE and the GEO stores are computed by the source's own master instead: see
//! [`SourceStore`].
//!
//! Moves (RENAME, RENAMENX, SMOVE, LMOVE, RPOPLPUSH, COPY) compute nothing: [`moves`] is
//! the order of their steps over the two masters and the reply each step leads to.
//! Multi-key pops (BLPOP, BZPOPMIN, BLMPOP..., and LMPOP, ZMPOP) neither: [`blocking`] says
//! how they probe, pop and (the blocking ones) wait. XREAD over several slots neither:
//! [`streams`] says how it probes and waits.
//!
//! Limits: [`Limits`] bounds what is computed in memory; above it the reply is an error
//! naming the limit and nothing is written. The planner should also bound what it reads
//! (`SCARD`/`ZCARD`/`STRLEN` first) so that an oversized key is never fetched whole.
//!
//! Known differences from Redis: the members of a SUNION/SINTER/SDIFF reply come in byte
//! order, except a result of at most 512 integers, which comes in numeric order as Redis's
//! intset does; Redis's other orders follow its per-process hash seed, so no client can
//! rely on them. PFMERGE always stores the dense encoding (Redis keeps a sparse destination
//! sparse when no input is dense): the registers, the header and so every PFCOUNT are the
//! same, only the size differs. A STORE's result is written with its scores as `%.17g`,
//! which reads back to the same double, so the stored sorted set equals Redis's own.

mod bitop;
pub mod blocking;
mod hll;
mod lcs;
mod member;
pub mod moves;
mod parse;
mod read;
pub mod score;
mod sets;
mod source_store;
pub mod streams;
mod write;
mod zsets;

use bytes::Bytes;

pub use parse::parse;
pub use read::{Read, ReadKind, Value};
pub use source_store::{parse_source_store, SourceStore};

use crate::protocol::Proto;

/// What the proxy computes in memory for one command at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Members read over all the keys of a set or sorted-set command. Default 100,000: a
    /// sorted set member costs ~100 bytes here (member, score, map entry), so ~10 MB per
    /// command, while app-level collections that are combined across keys are far smaller.
    pub max_members: u64,
    /// Bytes read over all the keys of LCS, BITOP, PFCOUNT and PFMERGE. Default 16 MiB:
    /// a HyperLogLog is 12 KiB, and a BITOP over bitmaps of 16 M bits each stays possible.
    pub max_bytes: u64,
    /// Cells of LCS's table (`(len(a) + 1) * (len(b) + 1)`, 4 bytes each). Default 4 M
    /// (16 MiB, two strings of 2 KiB): Redis's own limit is 512 MB, too much for a proxy.
    pub max_lcs_cells: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_members: 100_000,
            max_bytes: 16 * 1024 * 1024,
            max_lcs_cells: 4 * 1024 * 1024,
        }
    }
}

/// Set algebra, for sets and sorted sets alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    /// SUNION, ZUNION.
    Union,
    /// SINTER, ZINTER.
    Inter,
    /// SDIFF, ZDIFF: the first key's members that no other key holds.
    Diff,
}

/// How ZUNION/ZINTER combine one member's scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// The sum (`+inf` plus `-inf` is 0, as Redis has it).
    Sum,
    /// The least.
    Min,
    /// The greatest.
    Max,
}

/// BITOP's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOp {
    /// AND.
    And,
    /// OR.
    Or,
    /// XOR.
    Xor,
    /// NOT (one source key).
    Not,
}

/// What LCS replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LcsOptions {
    /// LEN: the length only.
    pub len: bool,
    /// IDX: the matching ranges and the length.
    pub idx: bool,
    /// MINMATCHLEN: ranges shorter than this are left out of IDX.
    pub min_match_len: u64,
    /// WITHMATCHLEN: each IDX range carries its length.
    pub with_match_len: bool,
}

/// A parsed command, by the shape of its computation.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// SUNION, SINTER, SDIFF and their STORE forms.
    Sets {
        /// The algebra.
        op: SetOp,
    },
    /// SINTERCARD: the intersection's size, counting stops at `limit` (0: no limit).
    SetInterCard {
        /// LIMIT.
        limit: u64,
    },
    /// ZUNION, ZINTER, ZDIFF and their STORE forms.
    Zsets {
        /// The algebra.
        op: SetOp,
        /// One weight per input key (all 1 without WEIGHTS).
        weights: Vec<f64>,
        /// AGGREGATE.
        aggregate: Aggregate,
        /// WITHSCORES.
        with_scores: bool,
    },
    /// ZINTERCARD: the intersection's size, counting stops at `limit` (0: no limit).
    ZinterCard {
        /// LIMIT.
        limit: u64,
    },
    /// LCS of the two keys.
    Lcs(LcsOptions),
    /// BITOP into the destination.
    Bitop(BitOp),
    /// PFCOUNT: the cardinality of the union of the HyperLogLogs.
    PfCount,
    /// PFMERGE into the destination (which is also the first input).
    PfMerge,
}

/// A cross-slot command ready to be computed once its keys are read.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The command's name, lower case, as Redis names it in errors.
    pub name: &'static str,
    /// The computation.
    pub shape: Shape,
    /// The keys to read, in the order [`compute`] takes their values.
    pub reads: Vec<Read>,
    /// The key a STORE form, BITOP or PFMERGE writes.
    pub destination: Option<Bytes>,
    /// An error Redis gives only after it has checked the keys' types (an option error of
    /// ZUNION/ZINTER/ZDIFF or LCS): a WRONGTYPE comes first.
    after_type_check: Option<String>,
}

/// The result of a computation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The complete reply frame for the client.
    pub reply: Bytes,
    /// Commands for the destination's master, in order, one atomic unit; empty for reads
    /// and errors.
    pub writes: Vec<Vec<Bytes>>,
}

impl Outcome {
    fn reply(reply: Bytes) -> Outcome {
        Outcome {
            reply,
            writes: Vec::new(),
        }
    }

    fn error(text: &str) -> Outcome {
        Outcome::reply(crate::reply::error(text))
    }
}

/// Computes `request`'s reply (and writes) from `values`, one per [`Request::reads`] entry.
pub fn compute(request: &Request, values: &[Value], proto: Proto, limits: &Limits) -> Outcome {
    if values.len() != request.reads.len() {
        // A planner bug, not a client's: say so rather than compute something wrong.
        return Outcome::error("ERR proxy: cross-slot command computed with missing reads");
    }
    let destination = request.destination.as_ref();
    match &request.shape {
        Shape::Sets { op } => sets::compute(request, *op, values, proto, limits),
        Shape::SetInterCard { limit } => sets::inter_card(request, *limit, values, limits),
        Shape::Zsets { .. } | Shape::ZinterCard { .. } => {
            zsets::compute(request, values, proto, limits)
        }
        Shape::Lcs(options) => lcs::compute(request, options, values, proto, limits),
        Shape::Bitop(op) => bitop::compute(request, *op, destination, values, limits),
        Shape::PfCount => hll::count(request, values, limits),
        Shape::PfMerge => hll::merge(request, destination, values, limits),
    }
}

impl Request {
    /// The error Redis gives after its type checks, if any.
    fn late_error(&self) -> Option<Outcome> {
        self.after_type_check.as_deref().map(Outcome::error)
    }

    /// The refusal when the inputs exceed `limit`.
    fn too_large(&self, what: &str, size: u64, limit: u64) -> Outcome {
        Outcome::error(&crate::reply::crossslot::too_large(
            &self.name.to_ascii_uppercase(),
            what,
            size,
            limit,
        ))
    }
}

#[cfg(test)]
mod tests;
