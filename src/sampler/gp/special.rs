//! The normal distribution's functions the acquisition needs in log space, each with its
//! derivative: `log E[max(0, z + N(0, 1))]` (log expected improvement of a standard normal,
//! Optuna's `standard_logei`), `log Phi(z)` (log probability of feasibility) and the log
//! sigmoid (the smoothed feasibility of a Monte Carlo sample).

use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// `ln sqrt(2 pi)`.
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// `h(z) = 1 + sqrt(pi/2) z erfcx(-z / sqrt 2)` and `h'(z)` for `z <= -25`, by its asymptotic
/// series `sum_k>=1 (-1)^(k+1) (2k-1)!! / z^2k`, which there converges to the last bit (torch's
/// `erfcx` form loses the digits the `1 +` cancels).
fn tail_h(z: f64) -> (f64, f64) {
    let inv2 = 1.0 / (z * z);
    let (mut h, mut dh) = (0.0, 0.0);
    let mut term = inv2; // (2k-1)!! / z^2k with its sign, k = 1
    for k in 1..40 {
        h += term;
        // d/dz z^-2k = -2k z^-2k-1
        dh += term * (-2.0 * k as f64) / z;
        let next = -term * (2 * k + 1) as f64 * inv2;
        if next.abs() < 1e-17 * h.abs() {
            break;
        }
        term = next;
    }
    (h, dh)
}

/// `log E[max(0, z + N(0, 1))]` and its derivative `Phi(z) / ei(z)`, by Optuna's two branches
/// (`z >= -25`: `log(z Phi(z) + phi(z))` as written; below: the tail form).
pub(super) fn standard_logei(z: f64) -> (f64, f64) {
    if z >= -25.0 {
        let cdf = 0.5 * libm::erfc(-FRAC_1_SQRT_2 * z);
        let pdf = (-0.5 * z * z).exp() / (2.0 * PI).sqrt();
        let ei = z * cdf + pdf;
        (ei.ln(), cdf / ei)
    } else {
        let (h, dh) = tail_h(z);
        (-0.5 * z * z - LN_SQRT_2PI + h.ln(), -z + dh / h)
    }
}

/// `log Phi(z)` and its derivative `phi(z) / Phi(z)`.
pub(super) fn log_ndtr(z: f64) -> (f64, f64) {
    if z > -37.0 {
        let cdf = 0.5 * libm::erfc(-FRAC_1_SQRT_2 * z);
        let pdf = (-0.5 * z * z).exp() / (2.0 * PI).sqrt();
        (cdf.ln(), pdf / cdf)
    } else {
        // Phi(z) = phi(z) / -z * (1 - 1/z^2 + 3/z^4 - ...) = phi(z) / -z * s.
        let inv2 = 1.0 / (z * z);
        let (mut s, mut ds) = (1.0, 0.0);
        let mut term = -inv2;
        for k in 1..40 {
            s += term;
            ds += term * (-2.0 * k as f64) / z;
            let next = -term * (2 * k + 1) as f64 * inv2;
            if next.abs() < 1e-17 {
                break;
            }
            term = next;
        }
        let value = -0.5 * z * z - LN_SQRT_2PI - (-z).ln() + s.ln();
        // d/dz: -z - 1/z + s'/s
        (value, -z - 1.0 / z + ds / s)
    }
}

/// `log sigmoid(z)` and its derivative `sigmoid(-z)`.
pub(super) fn log_sigmoid(z: f64) -> (f64, f64) {
    if z >= 0.0 {
        let e = (-z).exp();
        (-e.ln_1p(), e / (1.0 + e))
    } else {
        let e = z.exp();
        (z - e.ln_1p(), 1.0 / (1.0 + e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derivative_ok(f: fn(f64) -> (f64, f64), z: f64) {
        let h = 1e-5 * z.abs().max(1.0);
        let fd = (f(z + h).0 - f(z - h).0) / (2.0 * h);
        let d = f(z).1;
        assert!((fd - d).abs() < 1e-6 * d.abs().max(1.0), "{z}: {fd} vs {d}");
    }

    #[test]
    fn derivatives_are_the_finite_differences_across_branches() {
        for z in [-60.0, -30.0, -24.0, -8.0, -1.0, 0.0, 0.5, 3.0, 10.0] {
            derivative_ok(standard_logei, z);
            derivative_ok(log_sigmoid, z);
        }
        for z in [-60.0, -38.0, -36.0, -10.0, -1.0, 0.0, 2.0, 9.0] {
            derivative_ok(log_ndtr, z);
        }
    }

    #[test]
    fn branches_meet() {
        let (a, b) = (standard_logei(-25.0 + 1e-12), standard_logei(-25.0 - 1e-12));
        assert!(
            (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-6,
            "{a:?} {b:?}"
        );
        let (a, b) = (log_ndtr(-37.0 + 1e-12), log_ndtr(-37.0 - 1e-12));
        assert!(
            (a.0 - b.0).abs() < 1e-12 * a.0.abs() && (a.1 - b.1).abs() < 1e-9,
            "{a:?} {b:?}"
        );
        assert_eq!(log_ndtr(0.0).0, 0.5f64.ln());
        assert_eq!(log_sigmoid(0.0), (-(2.0f64.ln()), 0.5));
    }
}
