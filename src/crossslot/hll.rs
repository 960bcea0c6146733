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
    sparse_runs(registers, |index, run, value| {
        for slot in &mut max[index..index + run] {
            *slot = (*slot).max(value);
        }
    })
}

/// Walks sparse `registers` as `hllMerge` does, calling `each(index, run, value)` for every
/// run of non-zero registers (`index + run` is within the registers); `Err` for a corrupt
/// value.
fn sparse_runs(
    registers: &[u8],
    mut each: impl FnMut(usize, usize, u8),
) -> Result<(), &'static str> {
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
            each(index, run, value);
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
    estimate_from(&histogram_of(registers))
}

/// How many registers hold each value.
fn histogram_of(registers: &[u8; REGISTERS]) -> [u32; 64] {
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
    histogram
}

/// `hllCount`'s estimator over the histogram of register values.
fn estimate_from(histogram: &[u32; 64]) -> u64 {
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
    check_size(request, values, limits)?;
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

/// The refusal when the values exceed the proxy's byte limit.
fn check_size(request: &Request, values: &[Value], limits: &Limits) -> Result<(), Outcome> {
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
    Ok(())
}

/// Sparse registers at most this many bytes in all are counted from their non-zero
/// registers alone (at most four per byte), sorted, instead of through 16384 registers.
const SMALL_SPARSE_BYTES: usize = 256;

/// The histogram of the union's registers when every value is missing or a small sparse
/// HyperLogLog (`None`: count through the registers). `Err` is the reply, for a corrupt
/// value, in the order the registers' union meets it.
fn small_sparse_histogram(values: &[Value]) -> Option<Result<[u32; 64], Outcome>> {
    let mut bytes = 0;
    for value in values {
        match value {
            Value::Missing => {}
            Value::Text(text) if matches!(header(text), Ok(h) if h.encoding == SPARSE) => {
                bytes += text.len() - HEADER;
            }
            _ => return None,
        }
    }
    if bytes > SMALL_SPARSE_BYTES {
        return None;
    }
    // (index << 8 | value) of each non-zero register of each value.
    let mut set: Vec<u32> = Vec::with_capacity(4 * bytes);
    for value in values {
        let Value::Text(text) = value else { continue };
        let walked = sparse_runs(&text[HEADER..], |index, run, value| {
            set.extend((index..index + run).map(|i| (i as u32) << 8 | u32::from(value)));
        });
        if let Err(error) = walked {
            return Some(Err(Outcome::error(error)));
        }
    }
    // Sorted, each register's greatest value is the last of its index.
    set.sort_unstable();
    let mut histogram = [0u32; 64];
    let mut distinct = 0;
    for (at, &entry) in set.iter().enumerate() {
        if set.get(at + 1).is_some_and(|next| next >> 8 == entry >> 8) {
            continue;
        }
        histogram[(entry & 0x3f) as usize] += 1;
        distinct += 1;
    }
    histogram[0] = (REGISTERS - distinct) as u32;
    Some(Ok(histogram))
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
    if let Err(outcome) = check_size(request, values, limits) {
        return outcome;
    }
    match small_sparse_histogram(values) {
        Some(Ok(histogram)) => {
            let estimate = i64::try_from(estimate_from(&histogram)).unwrap_or(i64::MAX);
            return Outcome::reply(encode::integer_frame(estimate));
        }
        Some(Err(outcome)) => return outcome,
        None => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sparse HyperLogLog whose registers are zero but `set` (ascending indexes, values
    /// 1 to 32).
    fn sparse(set: &[(usize, u8)]) -> Bytes {
        let mut out = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        let zeros = |out: &mut Vec<u8>, mut count: usize| {
            while count > 0 {
                let run = count.min(REGISTERS);
                out.extend_from_slice(&[0x40 | ((run - 1) >> 8) as u8, ((run - 1) & 0xff) as u8]);
                count -= run;
            }
        };
        let mut next = 0;
        for &(index, value) in set {
            zeros(&mut out, index - next);
            out.push(0x80 | ((value - 1) << 2));
            next = index + 1;
        }
        zeros(&mut out, REGISTERS - next);
        Bytes::from(out)
    }

    #[test]
    fn small_sparse_values_count_as_their_registers_do() {
        let a = sparse(&[(0, 3), (5, 1), (700, 32), (16383, 2)]);
        let b = sparse(&[(5, 4), (700, 1), (9000, 7)]);
        let values = [
            Value::Text(a.clone()),
            Value::Missing,
            Value::Text(b.clone()),
        ];
        let Some(Ok(histogram)) = small_sparse_histogram(&values) else {
            panic!("small sparse values are counted from their registers");
        };
        let mut max = [0u8; REGISTERS];
        for value in [&a, &b] {
            merge_into(&mut max, value, SPARSE).expect("valid");
        }
        assert_eq!(histogram, histogram_of(&max));
        assert_eq!(histogram[0], REGISTERS as u32 - 5);
        let Some(Ok(none)) = small_sparse_histogram(&[Value::Missing]) else {
            panic!("a missing key is an empty HyperLogLog");
        };
        assert_eq!(none, histogram_of(&[0; REGISTERS]));
    }

    #[test]
    fn dense_or_large_values_count_through_the_registers() {
        let mut dense = b"HYLL\x00\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        dense.resize(DENSE_SIZE, 0);
        let values = [Value::Text(Bytes::from(dense)), Value::Missing];
        assert!(small_sparse_histogram(&values).is_none());
        let many: Vec<(usize, u8)> = (0..400).map(|i| (i * 40, 1)).collect();
        assert!(small_sparse_histogram(&[Value::Text(sparse(&many))]).is_none());
    }
}
