//! Strict decimal integers, as Redis's `string2ll` reads count and length lines.
//!
//! Redis rejects what `strtoll` would accept: an empty string, a `+` sign, leading zeros
//! (`01`, `-0`), any non-digit, and more than 20 characters. Matching it exactly matters
//! because the proxy must refuse the same requests a Redis server refuses.

/// Longest accepted text: Redis's `LONG_STR_SIZE` (21) minus one.
const MAX_DIGITS_WITH_SIGN: usize = 20;

/// Parses `text` as Redis's `string2ll` does; `None` when Redis would say "not a number".
pub(crate) fn parse_i64(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > MAX_DIGITS_WITH_SIGN {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    // A leading zero is only valid as the whole text "0", handled above.
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        // i64::MIN's magnitude does not fit in i64, so negate through i128.
        i64::try_from(-i128::from(magnitude)).ok()
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_i64;

    #[test]
    fn accepts_plain_decimals_and_extremes() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"7"), Some(7));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn rejects_what_string2ll_rejects() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b"00",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"123456789012345678901",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
