//! Doubles as Redis 7.0 reads and writes them: `string2d` (C's `strtod`, refusing leading
//! space, trailing bytes, overflow, underflow to zero and NaN) and `%.17g`, the text Redis
//! 7.0 replies for every score (RESP2 bulk string and RESP3 double alike).

/// Reads `text` as Redis's `string2d` does; `None` where Redis refuses it.
pub fn parse(text: &[u8]) -> Option<f64> {
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

/// A score's text as Redis 7.0 replies it: `inf`, `-inf`, or C's `%.17g`.
pub fn format(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Most scores are whole numbers, which `%.17g` prints as integers below 1e17; the exact
    // formatting below costs about thirty times as much.
    if value.fract() == 0.0 && value.abs() < 1e17 {
        return (value as i64).to_string();
    }
    printf_17g(value)
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
