//! The objective's values, warped before the GP sees them: a loss whose bad trials are orders of
//! magnitude worse than its good ones (Rosenbrock's valley, a diverged run's loss) leaves a GP
//! on standardized values with all its good trials squeezed near one number, so it cannot tell
//! them apart. A power transform fitted to the values, as HEBO does (Cowen-Rivers et al. 2022),
//! spreads them back out where it matters and leaves well-shaped values nearly as they are.
//!
//! The values (losses, lower is better) are standardized, then transformed by Yeo-Johnson's
//! power transform with the λ that maximizes the normal log likelihood of the result
//! (`-n/2 log var(ψ(z, λ)) + (λ - 1) Σ sign(z) log(1 + |z|)`), over [`LAMBDA_LOW`, `LAMBDA_HIGH`]:
//! a grid of step [`GRID_STEP`], then golden-section search around the grid's best point.
//! The transform is increasing, so the order of the trials is kept. The decision and its
//! figures: `docs/decisions.md`, "The GP learns from power-transformed values".

/// λ's range (0: a log of the upper tail; 1: no change).
pub(super) const LAMBDA_LOW: f64 = -2.0;
pub(super) const LAMBDA_HIGH: f64 = 2.0;
/// The grid's step before the golden-section search.
const GRID_STEP: f64 = 0.1;
/// Where the golden-section search stops.
const LAMBDA_TOL: f64 = 1e-4;

/// Yeo-Johnson's ψ(z, λ).
pub(super) fn yeo_johnson(z: f64, lambda: f64) -> f64 {
    if z >= 0.0 {
        if lambda.abs() < 1e-12 {
            z.ln_1p()
        } else {
            ((1.0 + z).powf(lambda) - 1.0) / lambda
        }
    } else if (lambda - 2.0).abs() < 1e-12 {
        -(-z).ln_1p()
    } else {
        -((1.0 - z).powf(2.0 - lambda) - 1.0) / (2.0 - lambda)
    }
}

/// Mean and (population) variance.
fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    (mean, v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n)
}

/// The log likelihood of λ for standardized values `z` (constants dropped).
pub(super) fn log_likelihood(z: &[f64], lambda: f64) -> f64 {
    let t: Vec<f64> = z.iter().map(|&x| yeo_johnson(x, lambda)).collect();
    let (_, var) = mean_var(&t);
    let jacobian: f64 = z.iter().map(|x| x.signum() * x.abs().ln_1p()).sum();
    -0.5 * z.len() as f64 * var.ln() + (lambda - 1.0) * jacobian
}

/// The λ of highest likelihood for standardized values `z` (see the module docs).
pub(super) fn fit_lambda(z: &[f64]) -> f64 {
    let ll = |l: f64| log_likelihood(z, l);
    let steps = ((LAMBDA_HIGH - LAMBDA_LOW) / GRID_STEP).round() as usize;
    let grid = |i: usize| LAMBDA_LOW + GRID_STEP * i as f64;
    let best = (0..=steps)
        .map(|i| (i, ll(grid(i))))
        .filter(|(_, v)| v.is_finite())
        .fold(None, |b: Option<(usize, f64)>, c| match b {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(c),
        });
    let Some((i, _)) = best else {
        return 1.0;
    };
    // Golden-section search over the grid point's neighbours.
    let (mut a, mut b) = (grid(i.saturating_sub(1)), grid((i + 1).min(steps)));
    let r = (5f64.sqrt() - 1.0) / 2.0;
    let (mut c, mut d) = (b - r * (b - a), a + r * (b - a));
    let (mut fc, mut fd) = (ll(c), ll(d));
    while b - a > LAMBDA_TOL {
        if fc >= fd {
            (b, d, fd) = (d, c, fc);
            c = b - r * (b - a);
            fc = ll(c);
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + r * (b - a);
            fd = ll(d);
        }
    }
    let l = (a + b) / 2.0;
    if ll(l) >= ll(grid(i)) {
        l
    } else {
        grid(i)
    }
}

/// Losses (finite; lower is better) as the GP learns them: standardized, then transformed by
/// the fitted Yeo-Johnson. Values all equal are returned standardized (all 0).
pub(super) fn warp(losses: &[f64]) -> Vec<f64> {
    let (mean, var) = mean_var(losses);
    let sd = var.sqrt();
    if !sd.is_finite() || sd <= 0.0 {
        return vec![0.0; losses.len()];
    }
    let z: Vec<f64> = losses.iter().map(|x| (x - mean) / sd).collect();
    let lambda = fit_lambda(&z);
    z.iter().map(|&x| yeo_johnson(x, lambda)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Deterministic samples: normal quantiles of an even spread of probabilities.
    fn normal_quantiles(n: usize) -> Vec<f64> {
        // Inverse of the normal CDF by bisection on erf-free Φ (Abramowitz-Stegun 26.2.17).
        let phi = |x: f64| {
            let t = 1.0 / (1.0 + 0.2316419 * x.abs());
            let poly = t
                * (0.319381530
                    + t * (-0.356563782
                        + t * (1.781477937 + t * (-1.821255978 + t * 1.330274429))));
            let p = 1.0 - (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly;
            if x >= 0.0 {
                p
            } else {
                1.0 - p
            }
        };
        (0..n)
            .map(|i| {
                let p = (i as f64 + 0.5) / n as f64;
                let (mut lo, mut hi) = (-10.0, 10.0);
                for _ in 0..100 {
                    let mid = (lo + hi) / 2.0;
                    if phi(mid) < p {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                (lo + hi) / 2.0
            })
            .collect()
    }

    fn skewness(v: &[f64]) -> f64 {
        let (m, var) = mean_var(v);
        v.iter()
            .map(|x| ((x - m) / var.sqrt()).powi(3))
            .sum::<f64>()
            / v.len() as f64
    }

    #[rstest]
    #[case::zero_positive(1.5, 0.0, 1.5f64.ln_1p())]
    #[case::one_is_the_identity(-0.7, 1.0, -0.7)]
    #[case::one_is_the_identity_above(2.5, 1.0, 2.5)]
    #[case::two_negative(-1.5, 2.0, -(1.5f64.ln_1p()))]
    #[case::half(3.0, 0.5, (2.0 - 1.0) / 0.5)]
    #[case::minus_one_negative(-1.0, -1.0, -((2f64).powf(3.0) - 1.0) / 3.0)]
    fn yeo_johnson_is_the_published_transform(
        #[case] z: f64,
        #[case] lambda: f64,
        #[case] want: f64,
    ) {
        assert!((yeo_johnson(z, lambda) - want).abs() < 1e-12);
    }

    #[test]
    fn normal_values_are_left_about_as_they_are() {
        let z = normal_quantiles(100);
        let lambda = fit_lambda(&z);
        assert!((lambda - 1.0).abs() < 0.1, "lambda {lambda}");
        for (a, b) in warp(&z).iter().zip(&z) {
            assert!((a - b).abs() < 0.1 * (1.0 + b.abs()), "{a} from {b}");
        }
    }

    #[rstest]
    #[case::log_normal(1.0)]
    #[case::heavier(2.0)]
    fn a_heavy_upper_tail_is_drawn_in_and_the_order_kept(#[case] sigma: f64) {
        // Losses exp(sigma * normal): bad trials orders of magnitude worse than good ones.
        let losses: Vec<f64> = normal_quantiles(60)
            .iter()
            .map(|x| (sigma * x).exp())
            .collect();
        let (m, var) = mean_var(&losses);
        let z: Vec<f64> = losses.iter().map(|x| (x - m) / var.sqrt()).collect();
        let lambda = fit_lambda(&z);
        assert!(lambda < 0.5, "lambda {lambda}");
        let w = warp(&losses);
        assert!(
            skewness(&w).abs() < skewness(&z).abs() / 3.0,
            "skewness {} from {}",
            skewness(&w),
            skewness(&z)
        );
        // Increasing: the order of the trials is the order of their values.
        assert!(w.windows(2).all(|p| p[0] < p[1]));
    }

    #[test]
    fn the_fitted_lambda_is_the_likeliest_on_a_fine_grid() {
        let losses: Vec<f64> = normal_quantiles(40)
            .iter()
            .map(|x| x * x * x + 0.3 * x)
            .collect();
        let (m, var) = mean_var(&losses);
        let z: Vec<f64> = losses.iter().map(|x| (x - m) / var.sqrt()).collect();
        let lambda = fit_lambda(&z);
        let best_on_grid = (0..=4000)
            .map(|i| log_likelihood(&z, LAMBDA_LOW + 0.001 * i as f64))
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(log_likelihood(&z, lambda) >= best_on_grid - 1e-6);
        assert!((LAMBDA_LOW..=LAMBDA_HIGH).contains(&lambda));
    }

    #[test]
    fn equal_values_give_zeros_not_nan() {
        assert_eq!(warp(&[3.0, 3.0, 3.0]), vec![0.0; 3]);
    }
}
