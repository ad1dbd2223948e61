//! JSON text as Python's `json.dumps` writes it, which is what Optuna stores.
//!
//! Optuna writes `trial_params.distribution_json` and `trial_user_attributes.value_json` with
//! `json.dumps` (separators `", "` and `": "`, `ensure_ascii`, floats as `repr` writes them:
//! `1e-05`, `0.0001`, `1e+16`, `100.0`), and the distribution's attributes in its own key
//! order. serde_json's compact text means the same to every JSON reader, but a study written
//! by sweepd should hold the very text Optuna writes for the same call, so that a row-by-row
//! comparison (or a tool that compares the text) finds no difference.

use serde_json::Value;
use std::fmt::Write;

/// `json.dumps(value)` as Python writes it. Non-finite floats cannot be in a `Value`.
pub fn dumps(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                out.push_str(&float_repr(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, v);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, k);
                out.push_str(": ");
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// A string with `ensure_ascii`: everything outside printable ASCII as `\uXXXX` (surrogate
/// pairs past the BMP), and the short escapes Python uses.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='\u{7e}' | '\u{7f}' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr` of a float: the shortest digits that read back to it ([`repr_digits`]), in
/// scientific form when the decimal exponent is below -4 or past 15, else positional with at
/// least one digit after the point.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let (digits, exp) = repr_digits(x);
    let sign = if x.is_sign_negative() { "-" } else { "" };
    // The value is 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    let n = digits.len() as i32;
    if !(-4 < decpt && decpt <= 16) {
        let rest = &digits[1..];
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{}{dot}{rest}e{esign}{:02}", &digits[..1], exp.abs());
    }
    if decpt <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt < n {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{sign}{int}.{frac}")
    } else {
        format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
    }
}

/// The significant digits of Python's `repr(x)` for a finite `x` (`"0"` for zero) and the
/// decimal exponent of the first: `("25", -1)` for 0.25. Python and Rust's `{:e}` both give
/// the shortest digits that read back to `x`; where two such are equally near it (its exact
/// value ends in a 5 just past them), Rust takes the larger and Python the even one.
pub(crate) fn repr_digits(x: f64) -> (String, i32) {
    // `{:e}` gives the shortest round-trip digits: "1.2345e-7".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    tie_to_even(x.abs(), &digits, exp).unwrap_or((digits, exp))
}

/// Python's choice where Rust's shortest `digits` (first at 10^`exp`) is one of two equally
/// near `x`, when it is not Rust's. `x` = m × 2^e with m odd is m × 5^-e × 10^e exactly, and
/// only for -26 <= e <= -2 can that end in a 5 one digit past its shortest round-trip digits
/// (below, it has more than 18 significant digits; above, the two candidates are further
/// from `x` than half its spacing).
fn tie_to_even(x: f64, digits: &str, exp: i32) -> Option<(String, i32)> {
    let bits = x.to_bits();
    let (biased, fraction) = ((bits >> 52) & 0x7ff, bits & ((1 << 52) - 1));
    let (mut m, mut e) = match biased {
        0 => (fraction, -1074),
        _ => (fraction | (1 << 52), biased as i32 - 1075),
    };
    if m == 0 {
        return None;
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    e += zeros as i32;
    if !(-26..=-1).contains(&e) {
        return None;
    }
    let exact = (u128::from(m) * 5u128.pow(e.unsigned_abs())).to_string();
    let n = digits.len();
    let first = exact.len() as i32 - 1 + e;
    if exact.len() != n + 1 || !exact.ends_with('5') || first != exp {
        return None;
    }
    let head = &exact[..n];
    let (even, exp) = if (head.as_bytes()[n - 1] - b'0') % 2 == 0 {
        (head.to_owned(), exp)
    } else {
        increment(head, exp)
    };
    let even = even.trim_end_matches('0').to_owned();
    let reads_back = format!("0.{even}e{}", exp + 1).parse::<f64>() == Ok(x);
    (even != digits && reads_back).then_some((even, exp))
}

/// Decimal digits plus one in the last place, with the exponent of the first digit.
fn increment(digits: &str, exp: i32) -> (String, i32) {
    let mut out: Vec<u8> = digits.bytes().collect();
    for d in out.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return (String::from_utf8(out).expect("digits"), exp);
        }
    }
    out.insert(0, b'1');
    (String::from_utf8(out).expect("digits"), exp + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_are_written_as_python_repr_writes_them() {
        // Each pair checked against CPython 3.11's repr().
        let cases = [
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1.5e-7, "1.5e-07"),
            (-2.5e300, "-2.5e+300"),
            (123.456, "123.456"),
            (0.003162277660168379, "0.003162277660168379"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            // Two shortest texts equally near: Python takes the even one, Rust the larger.
            (f64::from_bits(0x4303a2ec926d5872), "690895188765454.2"),
            (f64::from_bits(0x431bd80536a80bdf), "1959335318651639.8"),
            (f64::from_bits(0x42dce88973722928), "127140256139428.62"),
            (f64::from_bits(0x42e8577af9bc36e4), "214112035266999.12"),
            (f64::from_bits(0x431e5bb779dd2d63), "2136273220750168.8"),
            (f64::from_bits(0xc303a2ec926d5872), "-690895188765454.2"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:e}");
            assert_eq!(want.parse::<f64>().unwrap().to_bits(), x.to_bits());
        }
    }

    #[test]
    fn dumps_matches_optunas_distribution_json() {
        // The text Optuna 5.0's distribution_to_json writes for the same distributions.
        let float = json!({"name": "FloatDistribution",
            "attributes": {"step": null, "low": 1e-5, "high": 0.1, "log": true}});
        assert_eq!(
            dumps(&float),
            r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#
        );
        let cat = json!({"name": "CategoricalDistribution",
            "attributes": {"choices": ["a", null, 1.5, true, 1, "é\n\u{1F600}"]}});
        assert_eq!(
            dumps(&cat),
            r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["a", null, 1.5, true, 1, "\u00e9\n\ud83d\ude00"]}}"#
        );
        assert_eq!(dumps(&json!({})), "{}");
        assert_eq!(
            dumps(&json!([[], {"a": [1, 2.0]}])),
            r#"[[], {"a": [1, 2.0]}]"#
        );
    }
}
