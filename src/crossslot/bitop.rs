//! BITOP, as `bitops.c` computes it: the result is as long as the longest input, shorter
//! inputs (and missing keys) read as zero bytes, and an empty result deletes the
//! destination.

use bytes::Bytes;

use super::{write, BitOp, Limits, Outcome, Request, Value};
use crate::protocol::encode;
use crate::reply::crossslot as text;

/// BITOP `op` of the values into `destination`.
pub(super) fn compute(
    request: &Request,
    op: BitOp,
    destination: Option<&Bytes>,
    values: &[Value],
    limits: &Limits,
) -> Outcome {
    let mut inputs = Vec::with_capacity(values.len());
    for value in values {
        inputs.push(match value {
            Value::Text(text) => &text[..],
            Value::Missing => &[][..],
            _ => return Outcome::error(text::WRONGTYPE),
        });
    }
    let bytes: u64 = inputs.iter().map(|input| input.len() as u64).sum();
    if bytes > limits.max_bytes {
        return request.too_large("bytes", bytes, limits.max_bytes);
    }
    let Some(destination) = destination else {
        return Outcome::error(text::SYNTAX);
    };
    let longest = inputs.iter().map(|input| input.len()).max().unwrap_or(0);
    let byte_of = |input: &[u8], at: usize| input.get(at).copied().unwrap_or(0);
    let result: Vec<u8> = (0..longest)
        .map(|at| {
            let first = byte_of(inputs[0], at);
            let rest = inputs[1..].iter().map(|input| byte_of(input, at));
            match op {
                BitOp::And => rest.fold(first, |out, byte| out & byte),
                BitOp::Or => rest.fold(first, |out, byte| out | byte),
                BitOp::Xor => rest.fold(first, |out, byte| out ^ byte),
                BitOp::Not => !first,
            }
        })
        .collect();
    let writes = if result.is_empty() {
        write::delete(destination)
    } else {
        write::set(destination, Bytes::from(result), false)
    };
    Outcome {
        reply: encode::integer_frame(longest as i64),
        writes,
    }
}
