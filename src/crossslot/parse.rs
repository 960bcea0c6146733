//! Reading a cross-slot command's arguments as Redis 7.0 reads them, with its error texts
//! and its order of checks: errors Redis gives before looking at any key are returned at
//! once; those it gives after its type checks travel in the [`Request`].

use bytes::Bytes;

use super::{Aggregate, BitOp, LcsOptions, Read, ReadKind, Request, SetOp, Shape};
use crate::protocol::parse_i64;
use crate::reply::crossslot as text;

type Parsed = Result<Request, Bytes>;

/// Parses `args` (the command name first). `Err` is the complete error reply; a command
/// this module does not compute is `ERR unknown command`.
pub fn parse(args: &[Bytes]) -> Parsed {
    let Some(name) = args.first() else {
        return Err(crate::reply::error(text::SYNTAX));
    };
    // The longest name below has 11 letters; a longer one folds to none of them.
    let mut folded = [0u8; 12];
    let lower = match folded.get_mut(..name.len()) {
        Some(lower) => {
            lower.copy_from_slice(name);
            lower.make_ascii_lowercase();
            &lower[..]
        }
        None => &[],
    };
    let name: &'static str = match lower {
        b"sunion" => "sunion",
        b"sinter" => "sinter",
        b"sdiff" => "sdiff",
        b"sunionstore" => "sunionstore",
        b"sinterstore" => "sinterstore",
        b"sdiffstore" => "sdiffstore",
        b"sintercard" => "sintercard",
        b"zunion" => "zunion",
        b"zinter" => "zinter",
        b"zdiff" => "zdiff",
        b"zunionstore" => "zunionstore",
        b"zinterstore" => "zinterstore",
        b"zdiffstore" => "zdiffstore",
        b"zintercard" => "zintercard",
        b"lcs" => "lcs",
        b"bitop" => "bitop",
        b"pfcount" => "pfcount",
        b"pfmerge" => "pfmerge",
        _ => return Err(crate::reply::unknown_command(args)),
    };
    let min_args = match name {
        "sunion" | "sinter" | "sdiff" | "pfcount" | "pfmerge" => 2,
        "zunionstore" | "zinterstore" | "zdiffstore" | "bitop" => 4,
        _ => 3,
    };
    if args.len() < min_args {
        return Err(crate::reply::wrong_arity(name));
    }
    match name {
        "sunion" | "sinter" | "sdiff" => Ok(sets(name, None, &args[1..])),
        "sunionstore" | "sinterstore" | "sdiffstore" => {
            Ok(sets(name, Some(args[1].clone()), &args[2..]))
        }
        "sintercard" => set_inter_card(args),
        "zunion" | "zinter" | "zdiff" | "zintercard" => zsets(name, args, 1),
        "zunionstore" | "zinterstore" | "zdiffstore" => zsets(name, args, 2),
        "lcs" => Ok(lcs(args)),
        "bitop" => bitop(args),
        "pfcount" => Ok(request(
            name,
            Shape::PfCount,
            None,
            &args[1..],
            ReadKind::Text,
        )),
        _ => Ok(request(
            name,
            Shape::PfMerge,
            Some(args[1].clone()),
            &args[1..],
            ReadKind::Text,
        )),
    }
}

fn request(
    name: &'static str,
    shape: Shape,
    destination: Option<Bytes>,
    keys: &[Bytes],
    kind: ReadKind,
) -> Request {
    Request {
        name,
        shape,
        reads: keys
            .iter()
            .map(|key| Read {
                key: key.clone(),
                kind,
            })
            .collect(),
        destination,
        after_type_check: None,
    }
}

fn op_of(name: &str) -> SetOp {
    if name.contains("union") {
        SetOp::Union
    } else if name.contains("inter") {
        SetOp::Inter
    } else {
        SetOp::Diff
    }
}

fn sets(name: &'static str, destination: Option<Bytes>, keys: &[Bytes]) -> Request {
    let shape = Shape::Sets { op: op_of(name) };
    request(name, shape, destination, keys, ReadKind::Members)
}

fn error(text: &str) -> Bytes {
    crate::reply::error(text)
}

/// LIMIT as `getPositiveLongFromObjectOrReply` reads it.
fn limit(arg: &[u8]) -> Option<u64> {
    parse_i64(arg).and_then(|n| u64::try_from(n).ok())
}

fn set_inter_card(args: &[Bytes]) -> Parsed {
    let numkeys = parse_i64(&args[1])
        .filter(|n| *n >= 1)
        .ok_or_else(|| error(text::NUMKEYS_POSITIVE))?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > args.len() - 2 {
        return Err(error(text::NUMKEYS_TOO_MANY));
    }
    let mut at = 2 + numkeys;
    let mut count_limit = 0;
    while at < args.len() {
        if args[at].eq_ignore_ascii_case(b"limit") && at + 1 < args.len() {
            count_limit = limit(&args[at + 1]).ok_or_else(|| error(text::LIMIT_NEGATIVE))?;
            at += 2;
        } else {
            return Err(error(text::SYNTAX));
        }
    }
    let shape = Shape::SetInterCard { limit: count_limit };
    let keys = &args[2..2 + numkeys];
    Ok(request("sintercard", shape, None, keys, ReadKind::Members))
}

/// The Z* algebra; `numkeys_at` is where numkeys is (1, or 2 after a destination).
fn zsets(name: &'static str, args: &[Bytes], numkeys_at: usize) -> Parsed {
    let numkeys = parse_i64(&args[numkeys_at]).ok_or_else(|| error(text::NOT_INTEGER))?;
    if numkeys < 1 {
        return Err(error(&text::at_least_one_key(name)));
    }
    let first_key = numkeys_at + 1;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > args.len() - first_key {
        return Err(error(text::SYNTAX));
    }
    let op = op_of(name);
    let store = numkeys_at == 2;
    let card_only = name == "zintercard";
    let mut options = ZsetOptions {
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        with_scores: false,
        limit: 0,
    };
    let late = options
        .read(&args[first_key + numkeys..], op, store, card_only)
        .err();
    let shape = if card_only {
        Shape::ZinterCard {
            limit: options.limit,
        }
    } else {
        Shape::Zsets {
            op,
            weights: options.weights,
            aggregate: options.aggregate,
            with_scores: options.with_scores,
        }
    };
    let destination = store.then(|| args[1].clone());
    let keys = &args[first_key..first_key + numkeys];
    let mut request = request(name, shape, destination, keys, ReadKind::Scored);
    request.after_type_check = late.map(str::to_owned);
    Ok(request)
}

struct ZsetOptions {
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
    limit: u64,
}

impl ZsetOptions {
    /// The options after the keys, in `zunionInterDiffGenericCommand`'s order of tests.
    fn read(
        &mut self,
        mut rest: &[Bytes],
        op: SetOp,
        store: bool,
        card_only: bool,
    ) -> Result<(), &'static str> {
        let algebra = op != SetOp::Diff && !card_only;
        while let Some(option) = rest.first() {
            let is = |name: &[u8]| option.eq_ignore_ascii_case(name);
            if algebra && rest.len() > self.weights.len() && is(b"weights") {
                for (weight, arg) in self.weights.iter_mut().zip(&rest[1..]) {
                    *weight = super::score::parse(arg).ok_or(text::WEIGHT_NOT_FLOAT)?;
                }
                rest = &rest[1 + self.weights.len()..];
            } else if algebra && rest.len() >= 2 && is(b"aggregate") {
                let value = rest[1].to_ascii_lowercase();
                self.aggregate = match value.as_slice() {
                    b"sum" => Aggregate::Sum,
                    b"min" => Aggregate::Min,
                    b"max" => Aggregate::Max,
                    _ => return Err(text::SYNTAX),
                };
                rest = &rest[2..];
            } else if !store && !card_only && is(b"withscores") {
                self.with_scores = true;
                rest = &rest[1..];
            } else if card_only && rest.len() >= 2 && is(b"limit") {
                self.limit = limit(&rest[1]).ok_or(text::LIMIT_NEGATIVE)?;
                rest = &rest[2..];
            } else {
                return Err(text::SYNTAX);
            }
        }
        Ok(())
    }
}

fn lcs(args: &[Bytes]) -> Request {
    let mut options = LcsOptions {
        len: false,
        idx: false,
        min_match_len: 0,
        with_match_len: false,
    };
    let late = lcs_options(&args[3..], &mut options).err();
    let mut request = request(
        "lcs",
        Shape::Lcs(options),
        None,
        &args[1..3],
        ReadKind::Text,
    );
    request.after_type_check = late.map(str::to_owned);
    request
}

fn lcs_options(mut rest: &[Bytes], options: &mut LcsOptions) -> Result<(), &'static str> {
    while let Some(option) = rest.first() {
        let is = |name: &[u8]| option.eq_ignore_ascii_case(name);
        if is(b"idx") {
            options.idx = true;
        } else if is(b"len") {
            options.len = true;
        } else if is(b"withmatchlen") {
            options.with_match_len = true;
        } else if is(b"minmatchlen") && rest.len() > 1 {
            let value = parse_i64(&rest[1]).ok_or(text::NOT_INTEGER)?;
            options.min_match_len = u64::try_from(value).unwrap_or(0);
            rest = &rest[1..];
        } else {
            return Err(text::SYNTAX);
        }
        rest = &rest[1..];
    }
    if options.len && options.idx {
        return Err(text::LCS_LEN_AND_IDX);
    }
    Ok(())
}

fn bitop(args: &[Bytes]) -> Parsed {
    let op = match args[1].to_ascii_lowercase().as_slice() {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return Err(error(text::SYNTAX)),
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(error(text::BITOP_NOT_ONE_KEY));
    }
    let destination = Some(args[2].clone());
    Ok(request(
        "bitop",
        Shape::Bitop(op),
        destination,
        &args[3..],
        ReadKind::Text,
    ))
}
