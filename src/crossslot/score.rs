//! Doubles as Redis 7.0 reads and writes them: `string2d` (C's `strtod`, refusing leading
//! space, trailing bytes, overflow, underflow to zero and NaN) and `%.17g`, the text Redis
//! 7.0 replies for every score (RESP2 bulk string and RESP3 double alike).

use crate::protocol::{encode, parse_i64};

/// Integers below this magnitude are exact doubles: strtod reads them to the same value.
const EXACT_INTEGERS: u64 = 1 << 53;

/// Reads `text` as Redis's `string2d` does; `None` where Redis refuses it.
pub fn parse(text: &[u8]) -> Option<f64> {
    // Most scores are whole numbers, which Redis prints as plain integers: read those
    // without the float parser. `-0`, leading zeros and signs go the long way.
    if let Some(n) = parse_i64(text).filter(|n| n.unsigned_abs() < EXACT_INTEGERS) {
        return Some(n as f64);
    }
    let text = std::str::from_utf8(text).ok()?;
    let first = *text.as_bytes().first()?;
    if first.is_ascii_whitespace() || first == 0x0b {
        return None;
    }
    let unsigned = text.trim_start_matches(['+', '-']);
    if text.len() - unsigned.len() > 1 {
        return None;
    }
    let negative = text.starts_with('-');
    let value = if unsigned.len() > 2 && unsigned[..2].eq_ignore_ascii_case("0x") {
        hex(&unsigned[2..])?
    } else {
        decimal(unsigned)?
    };
    Some(if negative { -value } else { value })
}

/// An unsigned decimal or `inf`/`infinity`, as strtod reads it.
fn decimal(text: &str) -> Option<f64> {
    if text.eq_ignore_ascii_case("inf") || text.eq_ignore_ascii_case("infinity") {
        return Some(f64::INFINITY);
    }
    // Rust also reads "nan" and signs strtod has already taken: only digits, one point and
    // one exponent go to it.
    let valid = text
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'.')
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !valid {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    // strtod's ERANGE: overflow to infinity, or a non-zero number that underflows to zero.
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if value.is_infinite() || (value == 0.0 && nonzero) {
        return None;
    }
    Some(value)
}

/// The digits after `0x`: `h[.h][p[+-]d]`, as C99 strtod reads a hexadecimal float.
fn hex(text: &str) -> Option<f64> {
    let (digits, exponent) = match text.find(['p', 'P']) {
        Some(at) => (&text[..at], text[at + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for digit in whole.chars().chain(fraction.chars()) {
        value = value * 16.0 + f64::from(digit.to_digit(16)?);
    }
    let scale = exponent.checked_sub(4 * i32::try_from(fraction.len()).ok()?)?;
    let value = value * 2f64.powi(scale);
    (value.is_finite() && (value != 0.0 || !digits.bytes().any(|b| b != b'0' && b != b'.')))
        .then_some(value)
}

/// A score's text as Redis 7.0 replies it: `inf`, `-inf`, or C's `%.17g`; on the stack,
/// as a reply writes one per member.
pub fn text(value: f64) -> ScoreText {
    if value.is_infinite() {
        return ScoreText::of(if value > 0.0 { "inf" } else { "-inf" });
    }
    if value.is_nan() {
        return ScoreText::of("nan");
    }
    if value == 0.0 {
        return ScoreText::of(if value.is_sign_negative() { "-0" } else { "0" });
    }
    // Most scores are whole numbers, which `%.17g` prints as integers below 1e17; the exact
    // formatting below costs about thirty times as much.
    if value.fract() == 0.0 && value.abs() < 1e17 {
        return ScoreText::whole(value as i64);
    }
    ScoreText::of(&printf_17g(value))
}

/// A score's text, at the end of a buffer: `%.17g` takes at most 24 bytes
/// (`-1.2345678901234567e+300`).
pub struct ScoreText {
    bytes: [u8; SCORE_TEXT_MAX],
    start: usize,
}

const SCORE_TEXT_MAX: usize = 32;

impl ScoreText {
    /// The text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    fn of(text: &str) -> ScoreText {
        let mut bytes = [0u8; SCORE_TEXT_MAX];
        let start = SCORE_TEXT_MAX - text.len().min(SCORE_TEXT_MAX);
        bytes[start..].copy_from_slice(&text.as_bytes()[..SCORE_TEXT_MAX - start]);
        ScoreText { bytes, start }
    }

    /// `n`'s digits, written from the end, as `%.17g` prints a whole number below 1e17.
    fn whole(n: i64) -> ScoreText {
        let mut bytes = [0u8; SCORE_TEXT_MAX];
        let mut start = encode::digits_before(&mut bytes, SCORE_TEXT_MAX, n.unsigned_abs());
        if n < 0 {
            start -= 1;
            bytes[start] = b'-';
        }
        ScoreText { bytes, start }
    }
}

/// C's `%.17g` of a finite, non-zero `value`.
fn printf_17g(value: f64) -> String {
    // 17 significant digits; the exponent of that rounding picks the style.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..17).contains(&exponent) {
        let decimals = usize::try_from(16 - exponent).unwrap_or(0);
        strip_zeros(&format!("{value:.decimals$}")).to_owned()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            strip_zeros(mantissa),
            exponent.unsigned_abs()
        )
    }
}

/// `%g` drops trailing zeros of the fraction, and the point when nothing follows it.
fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(value: f64) -> String {
        String::from_utf8_lossy(text(value).as_bytes()).into_owned()
    }

    #[test]
    fn formats_as_c_printf_17g() {
        let cases = [
            (0.1, "0.10000000000000001"),
            (1.0, "1"),
            (-0.0, "-0"),
            (1e300, "1.0000000000000001e+300"),
            (5e-324, "4.9406564584124654e-324"),
            (12345678901234567890.0, "1.2345678901234567e+19"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (2.5, "2.5"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (value, text) in cases {
            assert_eq!(format(value), text, "{value:e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn whole_numbers_print_as_printf_does(n in -99_999_999_999_999_999i64..100_000_000_000_000_000) {
            let value = n as f64;
            proptest::prop_assume!(value != 0.0);
            proptest::prop_assert_eq!(format(value), printf_17g(value));
        }
    }

    #[test]
    fn whole_numbers_read_as_the_float_parser_reads_them() {
        for text in [
            "1",
            "-7",
            "9007199254740991",
            "-9007199254740991",
            "10",
            "42",
        ] {
            assert_eq!(
                parse(text.as_bytes()).map(f64::to_bits),
                text.parse::<f64>().ok().map(f64::to_bits),
                "{text}"
            );
        }
        assert_eq!(parse(b"9007199254740993"), Some(9007199254740992.0));
        assert_eq!(parse(b"007"), Some(7.0));
        assert_eq!(parse(b"+3"), Some(3.0));
    }

    #[test]
    fn parses_as_redis_string2d() {
        assert_eq!(parse(b"1.5"), Some(1.5));
        assert_eq!(parse(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse(b"+Infinity"), Some(f64::INFINITY));
        assert_eq!(parse(b"0x10"), Some(16.0));
        assert_eq!(parse(b"0x1.8p1"), Some(3.0));
        assert_eq!(parse(b".5"), Some(0.5));
        assert_eq!(parse(b"-0"), Some(-0.0));
        assert_eq!(parse(b"1e-320"), Some(1e-320));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"nan",
            b"1e400",
            b"1e-400",
            b"x",
            b"--1",
            b"1e",
            b"0x",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
