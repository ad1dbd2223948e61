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

/// Python's `repr` of a float: the shortest digits that read back to it (what Rust prints
/// too), in scientific form when the decimal exponent is below -4 or past 15, else positional
/// with at least one digit after the point.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
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
