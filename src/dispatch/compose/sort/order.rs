//! SORT's pure steps as Redis 7.0 takes them: what a BY or GET pattern names for an
//! element, the order by weights (strtod's numbers, strcoll's bytes) and LIMIT's range.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::protocol::parse_i64;
use crate::reply;

use super::SortRequest;

/// What to look up for one element under a pattern.
pub(super) enum Lookup {
    /// `#`: the element itself.
    Element,
    /// A string key.
    Key(Vec<u8>),
    /// A hash field (`pattern->field`).
    Field(Vec<u8>, Vec<u8>),
    /// A pattern without `*`: never anything.
    Nothing,
}

/// What `pattern` names for `element`, as Redis's `lookupKeyByPattern`: `#` is the element,
/// the first `*` is replaced by it, and `->field` after the `*` names a hash field.
pub(super) fn lookup(pattern: &[u8], element: &[u8]) -> Lookup {
    if pattern == b"#" {
        return Lookup::Element;
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Lookup::Nothing;
    };
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&at| at + 2 < after.len());
    let (postfix, field) = match arrow {
        Some(at) => (&after[..at], Some(&after[at + 2..])),
        None => (after, None),
    };
    let key = [&pattern[..star], element, postfix].concat();
    match field {
        Some(field) => Lookup::Field(key, field.to_vec()),
        None => Lookup::Key(key),
    }
}

/// The elements in Redis's order for a BY pattern: numeric by weight (a missing weight is
/// 0; equal weights by the elements' bytes), or with ALPHA by the weights' bytes (missing
/// ones first; the C locale's `strcoll`, which stops at a NUL, unless storing).
pub(super) fn order_by_weights(
    sort: &SortRequest,
    elements: Vec<Bytes>,
    weights: Vec<Option<Bytes>>,
) -> Result<Vec<Bytes>, Bytes> {
    let mut rows: Vec<(Bytes, f64, Option<Bytes>)> = Vec::with_capacity(elements.len());
    for (element, weight) in elements.into_iter().zip(weights) {
        let score = match (&weight, sort.alpha) {
            (Some(weight), false) => strtod_whole(weight).ok_or_else(|| {
                reply::error("ERR One or more scores can't be converted into double")
            })?,
            _ => 0.0,
        };
        rows.push((element, score, weight));
    }
    let storing = sort.store.is_some();
    rows.sort_by(|a, b| {
        let order = if sort.alpha {
            match (&a.2, &b.2) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) if storing => x.cmp(y),
                (Some(x), Some(y)) => until_nul(x).cmp(until_nul(y)),
            }
        } else {
            a.1.partial_cmp(&b.1)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.0.cmp(&b.0))
        };
        if sort.desc {
            order.reverse()
        } else {
            order
        }
    });
    Ok(rows.into_iter().map(|row| row.0).collect())
}

fn until_nul(text: &[u8]) -> &[u8] {
    text.split(|&b| b == 0).next().unwrap_or_default()
}

/// The slice `LIMIT offset count` selects of `len` sorted elements (Redis 7.0's clamping).
pub(super) fn limit_range(limit: Option<&(Bytes, Bytes)>, len: usize) -> (usize, usize) {
    let (offset, count) = limit
        .and_then(|(offset, count)| Some((parse_i64(offset)?, parse_i64(count)?)))
        .unwrap_or((0, -1));
    let len = len as i64;
    let mut start = offset.clamp(0, len);
    let count = count.clamp(-1, len);
    let mut end = if count < 0 {
        len - 1
    } else {
        start + count - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);
    if end < start {
        return (0, 0);
    }
    (start as usize, end as usize + 1)
}

/// A weight as Redis's numeric SORT reads it with `strtod`: the whole text must be a
/// number (white space only before it), not NaN and within range; the empty text is 0.
fn strtod_whole(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(text).ok()?;
    let number = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, unsigned) = match number.as_bytes().first()? {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let lower = unsigned.to_ascii_lowercase();
    let magnitude = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if let Some(hex) = lower.strip_prefix("0x") {
        parse_hex(hex)?
    } else {
        // Rust's grammar is strtod's decimal one, but for the words handled above.
        if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return None;
        }
        let value: f64 = unsigned.parse().ok()?;
        let has_nonzero_digit = unsigned
            .split(['e', 'E'])
            .next()
            .is_some_and(|mantissa| mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)));
        // strtod reports ERANGE on overflow and underflow; Redis refuses both.
        if value.is_infinite() || (has_nonzero_digit && (value == 0.0 || value.is_subnormal())) {
            return None;
        }
        value
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// A hexadecimal float after its `0x` (digits, an optional fraction, an optional binary
/// exponent `p`), as strtod reads it.
fn parse_hex(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.split_once('p') {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for digit in whole.chars() {
        value = value * 16.0 + f64::from(digit.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for digit in fraction.chars() {
        value += f64::from(digit.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    let value = value * 2f64.powi(exponent);
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn patterns_name_keys_and_fields_as_redis_does() {
        let key = |pattern: &str| match lookup(pattern.as_bytes(), b"7") {
            Lookup::Key(key) => format!("key {}", String::from_utf8(key).unwrap()),
            Lookup::Field(key, field) => format!(
                "field {} {}",
                String::from_utf8(key).unwrap(),
                String::from_utf8(field).unwrap()
            ),
            Lookup::Element => "element".into(),
            Lookup::Nothing => "nothing".into(),
        };
        assert_eq!(key("#"), "element");
        assert_eq!(key("w_*"), "key w_7");
        assert_eq!(key("{t}w_*_x"), "key {t}w_7_x");
        assert_eq!(key("h_*->f"), "field h_7 f");
        assert_eq!(key("h_*->"), "key h_7->");
        assert_eq!(key("h->x_*"), "key h->x_7");
        assert_eq!(key("a*b*"), "key a7b*");
        assert_eq!(key("const"), "nothing");
    }

    #[test]
    fn weights_parse_as_strtod_does() {
        for (text, want) in [
            ("", Some(0.0)),
            ("3", Some(3.0)),
            ("-2.5", Some(-2.5)),
            ("  7", Some(7.0)),
            ("+1e3", Some(1000.0)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("inf", Some(f64::INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("0x1A", Some(26.0)),
            ("0x1.8p1", Some(3.0)),
            ("0e5", Some(0.0)),
            ("nan", None),
            ("7 ", None),
            ("   ", None),
            ("abc", None),
            ("1e400", None),
            ("1e-400", None),
            ("0x", None),
            ("1,5", None),
        ] {
            assert_eq!(strtod_whole(text.as_bytes()), want, "{text:?}");
        }
    }

    #[test]
    fn limit_clamps_as_redis_7_0() {
        let range = |offset: &str, count: &str, len| {
            let limit = (
                Bytes::from(offset.to_owned()),
                Bytes::from(count.to_owned()),
            );
            limit_range(Some(&limit), len)
        };
        assert_eq!(limit_range(None, 5), (0, 5));
        assert_eq!(range("1", "2", 5), (1, 3));
        assert_eq!(range("-3", "2", 5), (0, 2));
        assert_eq!(range("3", "-1", 5), (3, 5));
        assert_eq!(range("3", "100", 5), (3, 5));
        assert_eq!(range("5", "1", 5), (0, 0));
        assert_eq!(range("0", "0", 5), (0, 0));
        assert_eq!(range("0", "1", 0), (0, 0));
    }

    #[test]
    fn numeric_order_breaks_ties_by_element_and_alpha_puts_missing_first() {
        let sort = |line: &str, weights: &[Option<&str>]| {
            let request = SortRequest::parse(&args(line), false).unwrap();
            let elements: Vec<Bytes> = ["b", "a", "c"].iter().map(|e| Bytes::from(*e)).collect();
            let weights = weights
                .iter()
                .map(|w| w.map(|w| Bytes::from(w.to_owned())))
                .collect();
            let sorted = order_by_weights(&request, elements, weights).unwrap();
            sorted
                .iter()
                .map(|e| std::str::from_utf8(e).unwrap().to_owned())
                .collect::<Vec<_>>()
                .join("")
        };
        assert_eq!(
            sort("SORT l BY w_*", &[Some("1"), Some("1"), Some("0")]),
            "cab"
        );
        assert_eq!(
            sort("SORT l BY w_* DESC", &[Some("1"), Some("1"), None]),
            "bac"
        );
        assert_eq!(
            sort("SORT l BY w_* ALPHA", &[Some("y"), None, Some("x")]),
            "acb"
        );
        let request = SortRequest::parse(&args("SORT l BY w_*"), false).unwrap();
        let refused = order_by_weights(
            &request,
            vec![Bytes::from("a")],
            vec![Some(Bytes::from("x"))],
        );
        assert_eq!(
            refused.unwrap_err(),
            reply::error("ERR One or more scores can't be converted into double")
        );
    }
}
