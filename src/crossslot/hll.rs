//! PFCOUNT of several keys and PFMERGE, as Redis 7.0's `hyperloglog.c`: the string format
//! (a 16-byte `HYLL` header, then 16384 6-bit registers, dense or sparse), the union as
//! the greatest value per register, and `hllCount`'s estimator (Ertl's, with `hllTau` and
//! `hllSigma`), so the count is Redis's to the unit.

use bytes::{BufMut, Bytes, BytesMut};

use super::{write, Limits, Outcome, Request, Value};
use crate::protocol::encode;
use crate::reply::crossslot as text;

const REGISTERS: usize = 1 << 14;
const HEADER: usize = 16;
const REGISTER_BITS: usize = 6;
const DENSE_SIZE: usize = HEADER + (REGISTERS * REGISTER_BITS).div_ceil(8);
/// `HLL_Q`: the hash bits left after the register index.
const Q: usize = 64 - 14;
const DENSE: u8 = 0;
const SPARSE: u8 = 1;

/// A decoded HyperLogLog header: encoding and cached cardinality.
struct Header {
    encoding: u8,
    card: [u8; 8],
}

/// Checks `value` as `isHLLObjectOrReply` does; the header when it is a HyperLogLog.
fn header(value: &[u8]) -> Result<Header, &'static str> {
    if value.len() < HEADER || &value[..4] != b"HYLL" || value[4] > SPARSE {
        return Err(text::NOT_HLL);
    }
    if value[4] == DENSE && value.len() != DENSE_SIZE {
        return Err(text::NOT_HLL);
    }
    let mut card = [0u8; 8];
    card.copy_from_slice(&value[8..16]);
    Ok(Header {
        encoding: value[4],
        card,
    })
}

/// Raises `max` to `value`'s registers, as `hllMerge`; `Err` for a corrupt sparse value.
fn merge_into(max: &mut [u8; REGISTERS], value: &[u8], encoding: u8) -> Result<(), &'static str> {
    let registers = &value[HEADER..];
    if encoding == DENSE {
        // Four 6-bit registers in every three bytes, least significant bits first.
        for (group, slots) in registers.chunks_exact(3).zip(max.chunks_exact_mut(4)) {
            let bits =
                u32::from(group[0]) | (u32::from(group[1]) << 8) | (u32::from(group[2]) << 16);
            for (k, slot) in slots.iter_mut().enumerate() {
                *slot = (*slot).max(((bits >> (REGISTER_BITS * k)) & 0x3f) as u8);
            }
        }
        return Ok(());
    }
    let mut index = 0usize;
    let mut at = 0usize;
    while at < registers.len() {
        let op = registers[at];
        if op & 0xc0 == 0 {
            // ZERO: 00xxxxxx, a run of up to 64 zero registers.
            index += usize::from(op & 0x3f) + 1;
            at += 1;
        } else if op & 0xc0 == 0x40 {
            // XZERO: 01xxxxxx yyyyyyyy, a run of up to 16384 zero registers.
            let low = registers.get(at + 1).copied().unwrap_or(0);
            index += ((usize::from(op & 0x3f) << 8) | usize::from(low)) + 1;
            at += 2;
        } else {
            // VAL: 1vvvvvxx, a run of up to 4 registers of value 1 to 32.
            let run = usize::from(op & 0x3) + 1;
            let value = ((op >> 2) & 0x1f) + 1;
            if index + run > REGISTERS {
                // Redis 7.0.15 as shipped with the fix for CVE-2025-32023 refuses this; the
                // original release stopped reading here and took the value if the count was
                // exact by then.
                return Err(text::CORRUPT_HLL);
            }
            for slot in &mut max[index..index + run] {
                *slot = (*slot).max(value);
            }
            index += run;
            at += 1;
        }
    }
    if index == REGISTERS {
        Ok(())
    } else {
        Err(text::CORRUPT_HLL)
    }
}

/// The dense registers of `max`.
fn dense_registers(max: &[u8; REGISTERS], out: &mut BytesMut) {
    let mut packed = vec![0u8; DENSE_SIZE - HEADER + 1];
    for (index, &value) in max.iter().enumerate() {
        let byte = index * REGISTER_BITS / 8;
        let shift = index * REGISTER_BITS % 8;
        let bits = u16::from(value & 0x3f) << shift;
        packed[byte] |= bits as u8;
        packed[byte + 1] |= (bits >> 8) as u8;
    }
    out.put_slice(&packed[..DENSE_SIZE - HEADER]);
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

/// `hllCount` over raw registers.
fn estimate(registers: &[u8; REGISTERS]) -> u64 {
    let mut histogram = [0u32; 64];
    // A union of small (sparse) values is mostly zero registers: count those eight at once.
    for chunk in registers.chunks_exact(8) {
        if chunk == [0u8; 8] {
            histogram[0] += 8;
            continue;
        }
        for &register in chunk {
            histogram[usize::from(register & 0x3f)] += 1;
        }
    }
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histogram[Q + 1])) / m);
    for j in (1..=Q).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
    (ALPHA_INF * m * m / z).round() as u64
}

/// Raises `max` to the union of the values' registers; the first value's header. `Err` is
/// the reply. (`max` is the caller's: 16 KiB, not moved around.)
fn union(
    request: &Request,
    values: &[Value],
    limits: &Limits,
    max: &mut [u8; REGISTERS],
) -> Result<Option<Header>, Outcome> {
    let bytes: u64 = values
        .iter()
        .map(|value| match value {
            Value::Text(text) => text.len() as u64,
            _ => 0,
        })
        .sum();
    if bytes > limits.max_bytes {
        return Err(request.too_large("bytes", bytes, limits.max_bytes));
    }
    let mut first = None;
    for (at, value) in values.iter().enumerate() {
        let text = match value {
            Value::Missing => continue,
            Value::Text(text) => text,
            _ => return Err(Outcome::error(text::WRONGTYPE)),
        };
        let header = header(text).map_err(Outcome::error)?;
        merge_into(max, text, header.encoding).map_err(Outcome::error)?;
        if at == 0 {
            first = Some(header);
        }
    }
    Ok(first)
}

/// PFCOUNT.
pub(super) fn count(request: &Request, values: &[Value], limits: &Limits) -> Outcome {
    if let [Value::Text(text)] = values {
        // One key: Redis replies its cached cardinality while that is valid, unread.
        match header(text) {
            Err(error) => return Outcome::error(error),
            Ok(header) if header.card[7] & 0x80 == 0 => {
                let cached = i64::try_from(u64::from_le_bytes(header.card)).unwrap_or(i64::MAX);
                return Outcome::reply(encode::integer_frame(cached));
            }
            Ok(_) => {}
        }
    }
    let mut max = [0u8; REGISTERS];
    match union(request, values, limits, &mut max) {
        Ok(_) => {
            let estimate = i64::try_from(estimate(&max)).unwrap_or(i64::MAX);
            Outcome::reply(encode::integer_frame(estimate))
        }
        Err(outcome) => outcome,
    }
}

/// PFMERGE: the destination (the first value) and the sources, stored dense.
pub(super) fn merge(
    request: &Request,
    destination: Option<&Bytes>,
    values: &[Value],
    limits: &Limits,
) -> Outcome {
    let mut max = [0u8; REGISTERS];
    let header = match union(request, values, limits, &mut max) {
        Ok(union) => union,
        Err(outcome) => return outcome,
    };
    let Some(destination) = destination else {
        return Outcome::error(text::SYNTAX);
    };
    let mut out = BytesMut::with_capacity(DENSE_SIZE);
    out.put_slice(b"HYLL");
    out.put_slice(&[DENSE, 0, 0, 0]);
    // Redis keeps the destination's cached cardinality bytes and marks them stale.
    let mut card = header.map_or([0; 8], |header| header.card);
    card[7] |= 0x80;
    out.put_slice(&card);
    dense_registers(&max, &mut out);
    Outcome {
        reply: Bytes::from_static(b"+OK\r\n"),
        writes: write::set(destination, out.freeze(), true),
    }
}

#[cfg(test)]
pub(super) fn registers_of(value: &[u8]) -> Option<Vec<u8>> {
    let header = header(value).ok()?;
    let mut max = [0u8; REGISTERS];
    merge_into(&mut max, value, header.encoding).ok()?;
    Some(max.to_vec())
}
