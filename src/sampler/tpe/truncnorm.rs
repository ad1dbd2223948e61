//! The standard normal and its truncation, after Optuna's `_truncnorm.py`: `log_ndtr` with an
//! asymptotic series in the far left tail, the log mass of an interval computed in the left tail
//! by symmetry, and inverse-CDF draws solved by Newton's method on `log_ndtr` from Optuna's
//! initial guesses. The Parzen estimators' kernels are these truncated normals.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

pub(super) const LOG_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// Standard normal CDF, accurate in both tails.
fn ndtr(a: f64) -> f64 {
    let x = a / SQRT_2;
    if x.abs() < std::f64::consts::FRAC_1_SQRT_2 {
        0.5 + 0.5 * libm::erf(x)
    } else {
        let y = 0.5 * libm::erfc(x.abs());
        if x > 0.0 {
            1.0 - y
        } else {
            y
        }
    }
}

/// `ln(ndtr(a))`, accurate far into the left tail (an asymptotic series below -20).
fn log_ndtr(a: f64) -> f64 {
    if a > 6.0 {
        return (-ndtr(-a)).ln_1p();
    }
    if a > -20.0 {
        return ndtr(a).ln();
    }
    if a == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    // ln(pdf(a) / -a) + ln(1 - 1/a^2 + 3/a^4 - 15/a^6 + ...)
    let log_lhs = -0.5 * a * a - (-a).ln() - LOG_SQRT_2PI;
    let denom = 1.0 / (a * a);
    let (mut total, mut last) = (1.0f64, 0.0f64);
    let (mut numerator, mut factor, mut sign) = (1.0f64, 1.0f64, 1.0f64);
    let mut i = 0.0;
    while (last - total).abs() > f64::EPSILON {
        i += 1.0;
        last = total;
        sign = -sign;
        factor *= denom;
        numerator *= 2.0 * i - 1.0;
        total += sign * numerator * factor;
    }
    log_lhs + total.ln()
}

/// `ln(ndtr(b) - ndtr(a))` for `a <= b`, computed in the left tail by symmetry.
pub(super) fn log_gauss_mass(a: f64, b: f64) -> f64 {
    if a >= b {
        return f64::NEG_INFINITY;
    }
    let (a, b) = if a > 0.0 { (-b, -a) } else { (a, b) };
    if b <= 0.0 {
        let (la, lb) = (log_ndtr(a), log_ndtr(b));
        lb + (-(la - lb).exp()).ln_1p()
    } else {
        // Central: 1 - left tail - right tail, without cancelling near 1.
        (-ndtr(a) - ndtr(-b)).ln_1p()
    }
}

fn log_add_exp(x: f64, y: f64) -> f64 {
    let (hi, lo) = if x > y { (x, y) } else { (y, x) };
    if hi == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// The `x` with `log_ndtr(x) = y`: Newton's method from Optuna's initial guesses. `log_ndtr`
/// is concave, so the iterates approach the root from below after the first step.
fn ndtri_exp(y: f64) -> f64 {
    if y.is_nan() {
        return f64::NAN;
    }
    if y >= 0.0 {
        return f64::INFINITY;
    }
    if y == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    // Close to 0, solve for -x, whose log_ndtr is ln(1 - exp(y)), and flip back.
    let flipped = y > -1e-2;
    let y = if flipped { (-y.exp_m1()).ln() } else { y };
    if y == f64::NEG_INFINITY {
        return if flipped {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    let mut x = if y < -5.0 {
        -(-2.0 * (y + LOG_SQRT_2PI)).sqrt()
    } else {
        // Logistic approximation of the normal CDF.
        -(3.0f64.sqrt() / std::f64::consts::PI) * (-y).exp_m1().ln()
    };
    for _ in 0..100 {
        let l = log_ndtr(x);
        let log_pdf = -0.5 * x * x - LOG_SQRT_2PI;
        let dx = (l - y) * (l - log_pdf).exp();
        x -= dx;
        if !dx.is_finite() || dx.abs() <= 1e-8 * x.abs() {
            break;
        }
    }
    if flipped {
        -x
    } else {
        x
    }
}

/// Quantile `q` of the standard normal truncated to `[a, b]`.
fn truncnorm_ppf(q: f64, a: f64, b: f64) -> f64 {
    if a >= b || q <= 0.0 {
        return a;
    }
    if q >= 1.0 {
        return b;
    }
    let log_mass = log_gauss_mass(a, b);
    let x = if a >= 0.0 {
        -ndtri_exp(log_add_exp(log_ndtr(-b), log_mass + (-q).ln_1p()))
    } else {
        ndtri_exp(log_add_exp(log_ndtr(a), log_mass + q.ln()))
    };
    if x.is_nan() {
        a
    } else {
        x.clamp(a, b)
    }
}

/// A draw from N(mu, sigma) truncated to `[lo, hi]`, by inversion.
pub(super) fn truncnorm_draw(mu: f64, sigma: f64, lo: f64, hi: f64, rng: &mut ChaCha8Rng) -> f64 {
    let q: f64 = rng.gen();
    let z = truncnorm_ppf(q, (lo - mu) / sigma, (hi - mu) / sigma);
    (mu + sigma * z).clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::testkit::close;

    #[test]
    fn normal_numerics_match_reference_values() {
        // ln Phi(a), from mpmath at 50 digits.
        for (a, want) in [
            (-40.0, -804.608_442_013_753_8),
            (-25.0, -316.639_408_008_020_26),
            (-20.0, -203.917_155_371_097_26),
            (-19.5, -194.016_965_777_497_5),
            (-5.0, -15.064_998_393_988_726),
            (-1.0, -1.841_021_645_009_263_5),
            (0.0, -std::f64::consts::LN_2),
            (3.0, -0.001_350_809_964_748_193_8),
            (7.0, -1.279_812_543_886_654e-12),
            (10.0, -7.619_853_024_160_526e-24),
        ] {
            assert!(
                close(log_ndtr(a), want, 1e-13),
                "log_ndtr({a}) = {}",
                log_ndtr(a)
            );
        }
        for (a, b, want) in [
            (-3.0, -2.0, -3.844_353_426_334_205_6),
            (2.0, 3.0, -3.844_353_426_334_205_6),
            (-1.0, 2.0, -0.200_166_294_324_462_6),
            (-50.0, -49.9, -1_249.841_141_866_805_4),
            (30.0, 31.0, -454.321_243_956_343_25),
            (-1e-3, 1e-3, -7.133_546_798_293_52),
            (-8.0, 8.0, -1.244_192_114_854_357_6e-15),
            (5.0, 5.000_001, -27.234_451_591_028_294),
        ] {
            let got = log_gauss_mass(a, b);
            assert!(
                close(got, want, 1e-9),
                "mass({a}, {b}) = {got}, want {want}"
            );
        }
        for (q, a, b, want) in [
            (0.3, -1.0, 1.0, -0.349_219_932_456_882_17),
            (0.9, -2.0, 0.5, 0.317_561_550_998_501_86),
            (0.5, 3.0, 4.0, 3.198_474_131_761_953_5),
            (0.01, -30.0, -29.0, -29.158_180_440_507_61),
            (0.7, -0.1, 60.0, 0.986_481_880_720_073_3),
            (0.999, -5.0, 5.0, 3.090_147_354_261_751_6),
            (0.25, 20.0, 21.0, 20.014_343_291_876_22),
            (0.5, -40.0, -39.9999, -39.999_949_950_000_094),
        ] {
            let got = truncnorm_ppf(q, a, b);
            assert!(
                close(got, want, 1e-7),
                "ppf({q}, {a}, {b}) = {got}, want {want}"
            );
        }
        assert_eq!(truncnorm_ppf(0.0, -1.0, 2.0), -1.0);
        assert_eq!(truncnorm_ppf(0.4, 1.5, 1.5), 1.5);
    }
}
