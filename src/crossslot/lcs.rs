//! LCS, as Redis 7.0's `lcsCommand` computes it: the same table, the same walk back from
//! the end (so IDX lists the matches last first, as Redis does), the same options.

use bytes::BytesMut;

use super::{LcsOptions, Limits, Outcome, Request, Value};
use crate::protocol::{encode, Proto};
use crate::reply::crossslot as text;

/// One IDX match: the ranges in the first and second string, and its length.
struct Match {
    a: (u32, u32),
    b: (u32, u32),
    len: u32,
}

/// LCS of the two values.
pub(super) fn compute(
    request: &Request,
    options: &LcsOptions,
    values: &[Value],
    proto: Proto,
    limits: &Limits,
) -> Outcome {
    let mut strings = [&[][..], &[][..]];
    for (slot, value) in strings.iter_mut().zip(values) {
        match value {
            Value::Text(text) => *slot = text,
            Value::Missing => {}
            _ => return Outcome::error(text::LCS_NOT_STRING),
        }
    }
    if let Some(error) = request.late_error() {
        return error;
    }
    let [a, b] = strings;
    let bytes = (a.len() + b.len()) as u64;
    if bytes > limits.max_bytes {
        return request.too_large("bytes", bytes, limits.max_bytes);
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells > limits.max_lcs_cells {
        return request.too_large("table cells", cells, limits.max_lcs_cells);
    }
    let table = Table::new(a, b);
    let (common, matches) = table.walk(a, b, options.min_match_len);
    let total = table.at(a.len(), b.len());
    let mut out = BytesMut::new();
    if options.idx {
        encode::map_header(&mut out, proto, 2);
        encode::bulk(&mut out, b"matches");
        encode::array_header(&mut out, matches.len());
        for found in &matches {
            encode::array_header(&mut out, 2 + usize::from(options.with_match_len));
            for (start, end) in [found.a, found.b] {
                encode::array_header(&mut out, 2);
                encode::integer(&mut out, i64::from(start));
                encode::integer(&mut out, i64::from(end));
            }
            if options.with_match_len {
                encode::integer(&mut out, i64::from(found.len));
            }
        }
        encode::bulk(&mut out, b"len");
        encode::integer(&mut out, i64::from(total));
    } else if options.len {
        encode::integer(&mut out, i64::from(total));
    } else {
        encode::bulk(&mut out, &common);
    }
    Outcome::reply(out.freeze())
}

/// The LCS lengths of every pair of prefixes.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn new(a: &[u8], b: &[u8]) -> Table {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * width + j] = if a[i - 1] == b[j - 1] {
                    cells[(i - 1) * width + j - 1] + 1
                } else {
                    cells[(i - 1) * width + j].max(cells[i * width + j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// The common string and the matches, walking back from the end as Redis does
    /// (including where it ends a range: at index 0 of either string, or at a mismatch).
    fn walk(&self, a: &[u8], b: &[u8], min_match_len: u64) -> (Vec<u8>, Vec<Match>) {
        let mut common = Vec::with_capacity(self.at(a.len(), b.len()) as usize);
        let mut matches = Vec::new();
        let unset = a.len() as u32;
        let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0u32, 0u32, 0u32);
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if a[i - 1] == b[j - 1] {
                common.push(a[i - 1]);
                if a_start == unset {
                    (a_start, a_end, b_start, b_end) =
                        (i as u32 - 1, i as u32 - 1, j as u32 - 1, j as u32 - 1);
                } else if a_start == i as u32 && b_start == j as u32 {
                    a_start -= 1;
                    b_start -= 1;
                } else {
                    emit = true;
                }
                if a_start == 0 || b_start == 0 {
                    emit = true;
                }
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                if a_start != unset {
                    emit = true;
                }
            }
            let len = a_end.wrapping_sub(a_start).wrapping_add(1);
            if emit {
                if min_match_len == 0 || u64::from(len) >= min_match_len {
                    matches.push(Match {
                        a: (a_start, a_end),
                        b: (b_start, b_end),
                        len,
                    });
                }
                a_start = unset;
            }
        }
        common.reverse();
        (common, matches)
    }
}

/// The LCS reply for two byte strings, for tests elsewhere in the crate.
#[cfg(test)]
pub(super) fn common(a: &[u8], b: &[u8]) -> bytes::Bytes {
    bytes::Bytes::from(Table::new(a, b).walk(a, b, 0).0)
}
