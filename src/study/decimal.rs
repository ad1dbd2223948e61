//! Python's `decimal` arithmetic, as much of it as Optuna's `FloatDistribution` uses: its
//! constructor lowers a stepped float's `high` to the last step with 28-digit decimals
//! (`_adjust_discrete_uniform_high`), and raises `decimal.InvalidOperation` where the range
//! holds 10^28 steps or more. It runs every time Optuna reads a `distribution_json`, so a
//! distribution it raises on makes the whole study unreadable: sweepd computes the same thing,
//! digit for digit, to refuse those and to lower `high` as Optuna would.
//!
//! Numbers are exact decimals (digits and an exponent); each operation is exact and then
//! rounded to 28 significant digits, half to even, as Python's default context does.

use super::pyjson::repr_digits;
use std::cmp::Ordering;

/// Python's default context precision.
const PREC: usize = 28;

/// A decimal: `digits` (least significant first, no leading zeros; empty is zero) times
/// 10^`exp`.
#[derive(Debug, Clone, PartialEq)]
struct Dec {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// `(high - low) / step` has 10^28 steps or more: Python's `%` raises
/// `decimal.InvalidOperation` (DivisionImpossible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManySteps;

/// Optuna's `_adjust_discrete_uniform_high(low, high, step)`: `high` itself when `step` divides
/// `high - low` (in decimals of the floats' shortest texts, as `Decimal(str(x))` reads them),
/// else the last step below it, `float((r // step) * step + low)`.
pub fn adjust_discrete_high(low: f64, high: f64, step: f64) -> Result<f64, TooManySteps> {
    let (low_d, step_d) = (Dec::from_f64(low), Dec::from_f64(step));
    let range = Dec::from_f64(high).add(&low_d.negated()).rounded();
    let (q, r) = divmod(&range, &step_d)?;
    if r.is_zero() {
        return Ok(high);
    }
    Ok(q.mul(&step_d).rounded().add(&low_d).rounded().to_f64())
}

impl Dec {
    fn from_f64(x: f64) -> Dec {
        // `Decimal(str(x))`: the digits of Python's `repr`.
        let (text, exp) = repr_digits(x);
        let digits: Vec<u8> = text.bytes().rev().map(|b| b - b'0').collect();
        let exp = i64::from(exp) - (digits.len() as i64 - 1);
        Dec {
            neg: x.is_sign_negative(),
            digits: trimmed(digits),
            exp,
        }
        .normalized()
    }

    fn to_f64(&self) -> f64 {
        if self.is_zero() {
            return 0.0;
        }
        let digits: String = self
            .digits
            .iter()
            .rev()
            .map(|d| char::from(b'0' + d))
            .collect();
        let sign = if self.neg { "-" } else { "" };
        format!("{sign}{digits}e{}", self.exp)
            .parse()
            .expect("a decimal's text is a float")
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    fn negated(&self) -> Dec {
        Dec {
            neg: !self.neg,
            ..self.clone()
        }
    }

    /// Trailing zeros moved into the exponent (the value is unchanged).
    fn normalized(mut self) -> Dec {
        let zeros = self.digits.iter().take_while(|d| **d == 0).count();
        self.digits.drain(..zeros);
        self.exp += zeros as i64;
        self
    }

    /// The exponent of the most significant digit (Python's `adjusted()`).
    fn adjusted(&self) -> i64 {
        self.exp + self.digits.len() as i64 - 1
    }

    /// Exact sum.
    fn add(&self, other: &Dec) -> Dec {
        let exp = self.exp.min(other.exp);
        let a = shifted(&self.digits, (self.exp - exp) as usize);
        let b = shifted(&other.digits, (other.exp - exp) as usize);
        let (neg, digits) = if self.neg == other.neg {
            (self.neg, mag_add(&a, &b))
        } else {
            match mag_cmp(&a, &b) {
                Ordering::Less => (other.neg, mag_sub(&b, &a)),
                _ => (self.neg, mag_sub(&a, &b)),
            }
        };
        Dec { neg, digits, exp }.normalized()
    }

    /// Exact product.
    fn mul(&self, other: &Dec) -> Dec {
        let mut out = vec![0u32; self.digits.len() + other.digits.len()];
        for (i, a) in self.digits.iter().enumerate() {
            for (j, b) in other.digits.iter().enumerate() {
                out[i + j] += u32::from(*a) * u32::from(*b);
            }
        }
        let mut digits = Vec::with_capacity(out.len() + 1);
        let mut carry = 0u32;
        for d in out {
            let v = d + carry;
            digits.push((v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            digits.push((carry % 10) as u8);
            carry /= 10;
        }
        Dec {
            neg: self.neg != other.neg,
            digits: trimmed(digits),
            exp: self.exp + other.exp,
        }
        .normalized()
    }

    /// Rounded to [`PREC`] significant digits, half to even.
    fn rounded(self) -> Dec {
        if self.digits.len() <= PREC {
            return self;
        }
        let k = self.digits.len() - PREC;
        let (dropped, kept) = self.digits.split_at(k);
        let top = dropped[k - 1];
        let rest_zero = dropped[..k - 1].iter().all(|d| *d == 0);
        let up = top > 5 || (top == 5 && (!rest_zero || kept[0] % 2 == 1));
        let mut digits = kept.to_vec();
        if up {
            digits = mag_add(&digits, &[1]);
        }
        Dec {
            neg: self.neg,
            digits,
            exp: self.exp + k as i64,
        }
        .normalized()
    }
}

/// Python's `divmod(a, b)` on decimals: the quotient truncated toward zero and the remainder
/// with `a`'s sign; [`TooManySteps`] where the quotient has more than [`PREC`] digits.
fn divmod(a: &Dec, b: &Dec) -> Result<(Dec, Dec), TooManySteps> {
    let zero = Dec {
        neg: false,
        digits: Vec::new(),
        exp: 0,
    };
    if a.is_zero() || b.is_zero() {
        return Ok((zero, a.clone()));
    }
    // At least 10^(expdiff - 1): past PREC + 1 the quotient is too long, without dividing.
    if a.adjusted() - b.adjusted() > PREC as i64 + 1 {
        return Err(TooManySteps);
    }
    let exp = a.exp.min(b.exp);
    let num = shifted(&a.digits, (a.exp - exp) as usize);
    let den = shifted(&b.digits, (b.exp - exp) as usize);
    let mut q = Vec::with_capacity(num.len());
    let mut r: Vec<u8> = Vec::new();
    for d in num.iter().rev() {
        r.insert(0, *d);
        r = trimmed(r);
        let mut digit = 0u8;
        while mag_cmp(&r, &den) != Ordering::Less {
            r = mag_sub(&r, &den);
            digit += 1;
        }
        q.push(digit);
    }
    q.reverse();
    let q = trimmed(q);
    if q.len() > PREC {
        return Err(TooManySteps);
    }
    let quotient = Dec {
        neg: a.neg != b.neg,
        digits: q,
        exp: 0,
    }
    .normalized();
    let remainder = Dec {
        neg: a.neg,
        digits: r,
        exp,
    }
    .normalized();
    Ok((quotient, remainder))
}

fn trimmed(mut digits: Vec<u8>) -> Vec<u8> {
    while digits.last() == Some(&0) {
        digits.pop();
    }
    digits
}

/// `digits` times 10^`k`.
fn shifted(digits: &[u8], k: usize) -> Vec<u8> {
    if digits.is_empty() {
        return Vec::new();
    }
    let mut out = vec![0; k];
    out.extend_from_slice(digits);
    out
}

fn mag_cmp(a: &[u8], b: &[u8]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn mag_add(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let v = a.get(i).unwrap_or(&0) + b.get(i).unwrap_or(&0) + carry;
        out.push(v % 10);
        carry = v / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    trimmed(out)
}

/// `a - b` for `a >= b`.
fn mag_sub(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0i8;
    for (i, &x) in a.iter().enumerate() {
        let mut v = x as i8 - *b.get(i).unwrap_or(&0) as i8 - borrow;
        borrow = 0;
        if v < 0 {
            v += 10;
            borrow = 1;
        }
        out.push(v as u8);
    }
    trimmed(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Optuna 5.0's `_adjust_discrete_uniform_high(low, high, step)`, run in the test venv on
    /// these cases and a seeded random draw (`repr` of the result, or the exception).
    const OPTUNA: &[(f64, f64, f64, &str)] = &[
        (0.0, 1.0, 1e-30, "InvalidOperation"),
        (0.0, 1.0, 1e-28, "InvalidOperation"),
        (0.0, 1.0, 1.0000000000000001e-28, "1.0"),
        (0.0, 0.9999999999999999, 1e-28, "0.9999999999999999"),
        (0.0, 1.0, 0.3, "0.9"),
        (0.1, 0.30000000000000004, 0.1, "0.3"),
        (-2.0, 2.0, 1e-09, "2.0"),
        (1e-20, 1e+20, 1.0, "1e+20"),
        (0.0, 1e+300, 1e-300, "InvalidOperation"),
        (-1.7e+308, 1.7e+308, 1e+300, "1.7e+308"),
        (0.0, 1.0, 0.25, "1.0"),
        (0.0, 1.0, 0.4, "0.8"),
        (5e-324, 1.0, 0.1, "1.0"),
        (-1e-05, 1e-05, 3e-06, "8e-06"),
        (1.0, 1.0, 0.5, "1.0"),
        (0.0, 123456789.123, 0.001, "123456789.123"),
        (
            1000000000000000.0,
            1000000000000007.0,
            2.0,
            "1000000000000006.0",
        ),
        (0.0, 1e-300, 1e-310, "1e-300"),
        (-0.0, 1.0, 0.7, "0.7"),
        (0.1, 0.7, 0.2, "0.7"),
        (3.0, 10.0, 2.5, "8.0"),
        (0.0, 1e+16, 3.0, "1e+16"),
        (2.0, 9.99, 0.01, "9.99"),
        (0.0, 1.0, 9.999999999999999e-29, "InvalidOperation"),
    ];

    #[test]
    fn lowers_high_and_refuses_as_optunas_decimals_do() {
        for &(low, high, step, want) in OPTUNA.iter().chain(RANDOM) {
            let got = match adjust_discrete_high(low, high, step) {
                Ok(h) => crate::study::pyjson::float_repr(h),
                Err(TooManySteps) => "InvalidOperation".into(),
            };
            assert_eq!(got, want, "({low:e}, {high:e}, {step:e})");
        }
    }

    #[test]
    fn rounds_to_28_digits_half_to_even() {
        let d = |digits: &str, exp: i64| Dec {
            neg: false,
            digits: digits.bytes().rev().map(|b| b - b'0').collect(),
            exp,
        };
        let nines = "9".repeat(29);
        assert_eq!(d(&nines, 0).rounded(), d("1", 29));
        let tie_even = format!("{}25", "1".repeat(27));
        assert_eq!(
            d(&tie_even, 0).rounded(),
            d(&format!("{}2", "1".repeat(27)), 1)
        );
        let tie_odd = format!("{}35", "1".repeat(27));
        assert_eq!(
            d(&tie_odd, 0).rounded(),
            d(&format!("{}4", "1".repeat(27)), 1)
        );
        let above = format!("{}251", "1".repeat(27));
        assert_eq!(
            d(&above, 0).rounded(),
            d(&format!("{}3", "1".repeat(27)), 2)
        );
    }

    /// A seeded random draw of bounds and steps over 60 orders of magnitude (the same
    /// script).
    #[rustfmt::skip]
    const RANDOM: &[(f64, f64, f64, &str)] = &[
        (-903427152746.3754, 8.957307212181e-10, 2.7e-24, "InvalidOperation"),
        (-1.3300000000000001e-25, 1e+27, 8.1857397331227e-15, "InvalidOperation"),
        (-5.5e+30, 6.537e-27, 1700000.0, "-1300000.0"),
        (-1.6172191285706957e-12, -9.0683e-16, 1.4182737929346877e-23, "-9.068300095351714e-16"),
        (14240880.0, 3.64e+22, 8.05e-07, "InvalidOperation"),
        (-8807977.0, 36.079994636357, 3.71705659246417e+19, "-8807977.0"),
        (-4.0046600000000003e-07, 559999999999999.94, 3995017.6290874938, "559999998150287.8"),
        (-3.1304862008325304e+26, 2.18e-12, 2.3866e-24, "InvalidOperation"),
        (-3.158883876802843e+18, -0.0009220000000000001, 1.1615150531e+18, "-8.35853770602843e+17"),
        (3.905907325473185e-09, 59400000.00000001, 8.12808008e+23, "3.905907325473185e-09"),
        (4.6231866930000005e-27, 3.94, 155892461435.436, "4.6231866930000005e-27"),
        (8.812971332919999e-29, 4.33255588797e-12, 2.218390869661537e-20, "4.3325558797144795e-12"),
        (-5.635844504e-27, 4.767267591896e-22, 8.336324523601228e-05, "-5.635844504e-27"),
        (-444320.0, -6.672674350562e-25, 1.389566978218486e+22, "-444320.0"),
        (4.1279341899300006e-13, 76838565000000.0, 8.340299999999999e-21, "InvalidOperation"),
        (3e-16, 66.2187, 4.3613999999999996e-14, "66.2187"),
        (-7.49016975008046e+30, 6.91819246e-05, 2.4e+30, "-2.9016975008046e+29"),
        (-2.0386073888870002e-05, 0.7990660201159046, 3.6954363669599995e-25, "0.7990660201159046"),
        (-0.067539362446, -6.187809e-27, 900000000.0, "-0.067539362446"),
        (-3.0000000000000003e+30, -6975000.0, 7.486647547476e-26, "InvalidOperation"),
        (-271700000.0, 2.6881915706799997e-21, 6.978738529692299e-23, "InvalidOperation"),
        (-0.32, -7.956247665e-21, 4.70486e+17, "-0.32"),
        (-9538.085579095037, -7.067949222018186e-07, 9.45915017155663e+28, "-9538.085579095037"),
        (9.57e-11, 690895188765454.2, 8.165170873259999e-07, "690895188765454.2"),
        (-5.544144878895225e+19, 5.39405e+17, 6230225000.0, "5.39404998616375e+17"),
        (-5.212246504674e+21, 6.066521e+17, 1.0, "6.066521e+17"),
        (-6.12710107974e-14, 5.802282732638497e-29, 0.061713148559700004, "-6.12710107974e-14"),
        (-8.388999999999999e-07, -5.984003549e-17, 1.0, "-8.388999999999999e-07"),
        (8.1839839597, 2.8629999999999997e+21, 2.229285e+28, "8.1839839597"),
        (7.7802200881424, 2.7200000000000003e+20, 8.923306907960001e+21, "7.7802200881424"),
        (-6.8229e+16, -0.197, 6.9769859923702e-29, "InvalidOperation"),
        (8749400000000.0, 3.117163799133047e+21, 100000.0, "3.117163799133047e+21"),
        (5.987000000000001e-30, 4989.9, 0.009730988, "4989.894950592"),
        (-5.744404153083763e-14, 7e+22, 5.273595688700001e-15, "InvalidOperation"),
        (8.20034112631e-27, 8.871e-15, 8.367802705653275e+26, "8.20034112631e-27"),
        (6.364992487186765e-23, 0.0006542793649095458, 962.5902641891599, "6.364992487186765e-23"),
        (-6e+19, 5.98341e+19, 5.3e-22, "InvalidOperation"),
        (-876489.4258084574, 1109.0, 1.2059227e+26, "-876489.4258084574"),
        (-100.0, -4.462e-18, 7.88e+18, "-100.0"),
        (-0.03487727252762336, 24322945.0, 0.00163123091054771, "24322944.99974887"),
        (883.0022550770015, 7.51953288e+26, 1.1902759999999998e+29, "883.0022550770015"),
        (-1.0494355653026001e+23, -2.1527124283e-23, 3.4231089414118005e-26, "InvalidOperation"),
        (-7.553e+20, -5.746204008000001e-26, 4.32239765576e+30, "-7.553e+20"),
        (-0.5608, -4.9377999999999996e-21, 7.698660000000001e-05, "-2.960559999992716e-05"),
        (-1369563640047221.8, 6648890000000.0, 3.2176770000000005e-05, "6648890000000.0"),
        (-3.6294886332499996e-08, -3.24040628164258e-29, 0.04063027503801, "-3.6294886332499996e-08"),
        (3.48677132e-10, 921.5, 5.7670000000000005e+28, "3.48677132e-10"),
        (-4.7000000000000005e-25, 5.5799486e+27, 7.4088888138865e+18, "5.579948598979184e+27"),
        (-7.012641051918437e-05, 8.228276320000001e+24, 107759.1329, "8.228276320000001e+24"),
        (-4.41875e-25, 0.00790570424, 9.66e+30, "-4.41875e-25"),
        (-4.788962299999999e+21, -4.7110000000000003e-26, 0.9769073376185929, "-0.827582"),
        (-7415504002.093423, 0.000853338568, 5231000000000000.0, "-7415504002.093423"),
        (-4.7620899999999997e-20, 8.64493777e-18, 5189.9651, "-4.7620899999999997e-20"),
        (-3.0000000000000003e-13, 1.77e-05, 9e-14, "1.77e-05"),
        (-50.478722964533, 1130800000000000.0, 3.1664064256727996e-24, "InvalidOperation"),
        (-99968530848.0, -384.4339, 3.1459e-16, "-384.4339"),
    ];
}
