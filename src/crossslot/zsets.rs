//! ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD, as Redis 7.0's
//! `zunionInterDiffGenericCommand` computes them.
//!
//! Floating point sums depend on their order, so the order is Redis's: for union and
//! intersection the inputs are sorted by size (a stable sort, as glibc's `qsort`), each
//! member's scores are combined input by input, a weight times a score that is NaN (0 times
//! infinity) counts as 0, and a SUM that is NaN (`+inf` plus `-inf`) becomes 0.

use std::cmp::Ordering;

use bytes::{Bytes, BytesMut};

use super::member::Member;
use super::{score, write, Aggregate, Limits, Outcome, Request, SetOp, Shape, Value};
use crate::protocol::{encode, Proto};
use crate::reply::crossslot as text;

/// One input key: its members with scores (a set's at 1), its weight, and its key, since
/// Redis takes an input repeated in the key list as the same object.
struct Source<'a> {
    entries: Vec<(&'a Bytes, f64)>,
    weight: f64,
    key: &'a Bytes,
    /// The entries in member order, made on the first lookup: a binary search over a few
    /// bytes per member costs less than hashing each one.
    by_member: Vec<(Member<'a>, f64)>,
}

impl Source<'_> {
    fn find(&mut self, member: &Bytes) -> Option<f64> {
        if self.by_member.is_empty() {
            self.by_member = self
                .entries
                .iter()
                .map(|&(member, score)| (Member::of(member), score))
                .collect();
            self.by_member.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        let member = Member::of(member);
        let at = self
            .by_member
            .binary_search_by(|(candidate, _)| candidate.cmp(&member))
            .ok()?;
        self.by_member.get(at).map(|(_, score)| *score)
    }
}

fn aggregate(target: &mut f64, value: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += value;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => *target = if value < *target { value } else { *target },
        Aggregate::Max => *target = if value > *target { value } else { *target },
    }
}

fn weighted(weight: f64, score: f64) -> f64 {
    let value = weight * score;
    if value.is_nan() {
        0.0
    } else {
        value
    }
}

/// The inputs after Redis's checks (types, then options) and the proxy's size limit.
fn sources<'a>(
    request: &'a Request,
    values: &'a [Value],
    weights: &[f64],
    limits: &Limits,
) -> Result<Vec<Source<'a>>, Outcome> {
    let one = 1.0;
    let mut sources = Vec::with_capacity(values.len());
    for (at, value) in values.iter().enumerate() {
        let entries: Vec<(&Bytes, f64)> = match value {
            Value::Scored(pairs) => pairs
                .iter()
                .map(|(member, score)| (member, *score))
                .collect(),
            Value::Members(members) => members.iter().map(|member| (member, one)).collect(),
            Value::Missing => Vec::new(),
            _ => return Err(Outcome::error(text::WRONGTYPE)),
        };
        sources.push(Source {
            entries,
            weight: weights.get(at).copied().unwrap_or(1.0),
            key: &request.reads[at].key,
            by_member: Vec::new(),
        });
    }
    if let Some(error) = request.late_error() {
        return Err(error);
    }
    let total: u64 = sources
        .iter()
        .map(|source| source.entries.len() as u64)
        .sum();
    if total > limits.max_members {
        return Err(request.too_large("members", total, limits.max_members));
    }
    Ok(sources)
}

fn union<'a>(sources: &[Source<'a>], how: Aggregate) -> Vec<(&'a Bytes, f64)> {
    let mut entries = Vec::with_capacity(sources.iter().map(|s| s.entries.len()).sum());
    entries.extend(sources.iter().flat_map(|source| {
        let weight = source.weight;
        source
            .entries
            .iter()
            .map(move |&(member, value)| (Member::of(member), weighted(weight, value)))
    }));
    // A stable sort keeps each member's scores in input order, the order Redis adds them in.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut result: Vec<(&Bytes, f64)> = Vec::with_capacity(entries.len());
    let mut last: Option<Member> = None;
    for (member, value) in entries {
        match result.last_mut() {
            Some((_, total)) if last == Some(member) => aggregate(total, value, how),
            _ => {
                result.push((member.text, value));
                last = Some(member);
            }
        }
    }
    result
}

/// The intersection, stopping after `limit` members (0: no limit).
fn inter<'a>(sources: &mut [Source<'a>], how: Aggregate, limit: usize) -> Vec<(&'a Bytes, f64)> {
    let Some((first, rest)) = sources.split_first_mut() else {
        return Vec::new();
    };
    let mut result = Vec::new();
    'members: for &(member, value) in &first.entries {
        let mut total = weighted(first.weight, value);
        for other in rest.iter_mut() {
            let found = if other.key == first.key {
                Some(value)
            } else {
                other.find(member)
            };
            let Some(found) = found else {
                continue 'members;
            };
            aggregate(&mut total, found * other.weight, how);
        }
        result.push((member, total));
        if limit > 0 && result.len() >= limit {
            break;
        }
    }
    result
}

fn diff<'a>(sources: &mut [Source<'a>]) -> Vec<(&'a Bytes, f64)> {
    let Some((first, rest)) = sources.split_first_mut() else {
        return Vec::new();
    };
    first
        .entries
        .iter()
        .copied()
        .filter(|(member, _)| rest.iter_mut().all(|other| other.find(member).is_none()))
        .collect()
}

/// Every Z* algebra command and ZINTERCARD.
pub(super) fn compute(
    request: &Request,
    values: &[Value],
    proto: Proto,
    limits: &Limits,
) -> Outcome {
    let (op, weights, how, with_scores, limit) = match &request.shape {
        Shape::Zsets {
            op,
            weights,
            aggregate,
            with_scores,
        } => (*op, weights.as_slice(), *aggregate, *with_scores, None),
        Shape::ZinterCard { limit } => (SetOp::Inter, &[][..], Aggregate::Sum, false, Some(*limit)),
        _ => return Outcome::error(text::SYNTAX),
    };
    let mut sources = match sources(request, values, weights, limits) {
        Ok(sources) => sources,
        Err(outcome) => return outcome,
    };
    if op != SetOp::Diff {
        sources.sort_by_key(|source| source.entries.len());
    }
    let mut result = match op {
        SetOp::Union => union(&sources, how),
        SetOp::Inter => {
            let stop = limit.map_or(0, |limit| usize::try_from(limit).unwrap_or(usize::MAX));
            inter(&mut sources, how, stop)
        }
        SetOp::Diff => diff(&mut sources),
    };
    if limit.is_some() {
        return Outcome::reply(encode::integer_frame(result.len() as i64));
    }
    result.sort_unstable_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.0.cmp(b.0))
    });
    match &request.destination {
        Some(destination) => store(destination, &result),
        None => Outcome::reply(reply(&result, with_scores, proto)),
    }
}

fn reply(result: &[(&Bytes, f64)], with_scores: bool, proto: Proto) -> Bytes {
    // Beside its text, a member's frame takes at most 16 bytes, and a score's 40 (%.17g).
    let size: usize = result.iter().map(|(member, _)| member.len() + 56).sum();
    let mut out = BytesMut::with_capacity(size + 16);
    let pairs_flat = with_scores && proto == Proto::Resp2;
    encode::array_header(&mut out, result.len() * if pairs_flat { 2 } else { 1 });
    for (member, value) in result {
        if with_scores && proto == Proto::Resp3 {
            encode::array_header(&mut out, 2);
        }
        encode::bulk(&mut out, member);
        if with_scores {
            let text = score::text(*value);
            match proto {
                Proto::Resp2 => encode::bulk(&mut out, text.as_bytes()),
                Proto::Resp3 => {
                    out.extend_from_slice(b",");
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
    }
    out.freeze()
}

fn store(destination: &Bytes, result: &[(&Bytes, f64)]) -> Outcome {
    let args: Vec<Bytes> = result
        .iter()
        .flat_map(|(member, value)| {
            [
                Bytes::copy_from_slice(score::text(*value).as_bytes()),
                (*member).clone(),
            ]
        })
        .collect();
    let chunks: Vec<&[Bytes]> = args.chunks(write::CHUNK_ARGS).collect();
    Outcome {
        reply: encode::integer_frame(result.len() as i64),
        writes: write::replace(destination, b"ZADD", &chunks),
    }
}
