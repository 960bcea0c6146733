//! SUNION, SINTER, SDIFF, their STORE forms and SINTERCARD, as `t_set.c` computes them.

use bytes::{Bytes, BytesMut};

use super::member::Member;
use super::{write, Limits, Outcome, Request, SetOp, Value};
use crate::protocol::{encode, parse_i64, Proto};
use crate::reply::crossslot as text;

/// Redis's `set-max-intset-entries` default: a result of at most this many integers is an
/// intset, which Redis replies in numeric order.
const INTSET_MAX_ENTRIES: usize = 512;

/// The members of each key, after the type and size checks; `Err` is the reply.
fn inputs<'a>(
    request: &Request,
    values: &'a [Value],
    limits: &Limits,
) -> Result<Vec<&'a [Bytes]>, Outcome> {
    let mut inputs = Vec::with_capacity(values.len());
    let mut total = 0u64;
    for value in values {
        inputs.push(match value {
            Value::Members(members) => members.as_slice(),
            Value::Missing => &[][..],
            _ => return Err(Outcome::error(text::WRONGTYPE)),
        });
        total += inputs.last().map_or(0, |members| members.len() as u64);
    }
    if total > limits.max_members {
        return Err(request.too_large("members", total, limits.max_members));
    }
    Ok(inputs)
}

/// The algebra over the inputs, each member once, in byte order. Sorted slices and binary
/// search rather than hash sets: the result is sorted for the reply anyway, and comparing
/// the few bytes of a member costs less than hashing it.
fn algebra<'a>(op: SetOp, inputs: &[&'a [Bytes]]) -> Vec<Member<'a>> {
    let Some((first, rest)) = inputs.split_first() else {
        return Vec::new();
    };
    let sorted = |inputs: &[&'a [Bytes]]| {
        let mut members = Vec::with_capacity(inputs.iter().map(|m| m.len()).sum());
        members.extend(inputs.iter().flat_map(|m| m.iter()).map(Member::of));
        members.sort_unstable();
        members.dedup();
        members
    };
    match op {
        SetOp::Union => sorted(inputs),
        SetOp::Inter => {
            let others: Vec<Vec<Member>> = rest.iter().map(|m| sorted(&[m])).collect();
            let mut result = sorted(&[first]);
            result.retain(|member| others.iter().all(|set| set.binary_search(member).is_ok()));
            result
        }
        SetOp::Diff => {
            let others = sorted(rest);
            let mut result = sorted(&[first]);
            result.retain(|member| others.binary_search(member).is_err());
            result
        }
    }
}

/// Orders a result (in byte order) as Redis replies it where its order is fixed: a small
/// all-integer result is an intset, in numeric order; otherwise (Redis's hash order) in
/// byte order, as it is.
fn order(members: &mut [Member]) {
    if members.len() > INTSET_MAX_ENTRIES {
        return;
    }
    let numbers: Option<Vec<i64>> = members
        .iter()
        .map(|member| parse_i64(member.text))
        .collect();
    if let Some(numbers) = numbers {
        let mut pairs: Vec<(i64, Member)> =
            numbers.into_iter().zip(members.iter().copied()).collect();
        pairs.sort_unstable_by_key(|(number, _)| *number);
        for (slot, (_, member)) in members.iter_mut().zip(pairs) {
            *slot = member;
        }
    }
}

/// SUNION, SINTER, SDIFF and their STORE forms.
pub(super) fn compute(
    request: &Request,
    op: SetOp,
    values: &[Value],
    proto: Proto,
    limits: &Limits,
) -> Outcome {
    let inputs = match inputs(request, values, limits) {
        Ok(inputs) => inputs,
        Err(outcome) => return outcome,
    };
    let mut result = algebra(op, &inputs);
    order(&mut result);
    if let Some(destination) = &request.destination {
        let members: Vec<Bytes> = result
            .into_iter()
            .map(|member| member.text.clone())
            .collect();
        let chunks: Vec<&[Bytes]> = members.chunks(write::CHUNK_ARGS).collect();
        return Outcome {
            reply: encode::integer_frame(members.len() as i64),
            writes: write::replace(destination, b"SADD", &chunks),
        };
    }
    // A bulk string's header and ending take at most 16 bytes beside its text.
    let size: usize = result.iter().map(|member| member.text.len() + 16).sum();
    let mut out = BytesMut::with_capacity(size + 16);
    encode::set_header(&mut out, proto, result.len());
    for member in result {
        encode::bulk(&mut out, member.text);
    }
    Outcome::reply(out.freeze())
}

/// SINTERCARD.
pub(super) fn inter_card(
    request: &Request,
    limit: u64,
    values: &[Value],
    limits: &Limits,
) -> Outcome {
    let inputs = match inputs(request, values, limits) {
        Ok(inputs) => inputs,
        Err(outcome) => return outcome,
    };
    let count = algebra(SetOp::Inter, &inputs).len() as u64;
    let count = if limit > 0 { count.min(limit) } else { count };
    Outcome::reply(encode::integer_frame(
        i64::try_from(count).unwrap_or(i64::MAX),
    ))
}
