//! Optuna's GP kernel: Matérn 5/2 with automatic relevance determination (one inverse squared
//! length scale per param), times a kernel scale, on normalized params; categorical params
//! count as 0 or 1 apart (the Hamming distance), whatever their two choices.
//!
//! `k(a, b) = scale * m(d2)`, `d2 = sum_j ils_j * sqd_j(a, b)`,
//! `m(d2) = exp(-sqrt(5 d2)) * (5/3 d2 + sqrt(5 d2) + 1)` (Optuna's `Matern52Kernel`), with
//! `sqd_j = (a_j - b_j)^2` for a numerical param and `[a_j != b_j]` for a categorical one.

/// The kernel's hyperparameters and the observation noise: what a fit finds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hyper {
    /// Inverse squared length scales, one per param.
    pub(super) ils: Vec<f64>,
    pub(super) scale: f64,
    /// The noise variance added to the kernel matrix's diagonal.
    pub(super) noise: f64,
}

impl Hyper {
    /// Optuna's start: every one of them 1.
    pub(super) fn default_for(dim: usize) -> Hyper {
        Hyper {
            ils: vec![1.0; dim],
            scale: 1.0,
            noise: 1.0,
        }
    }

    /// Each param's length scale, `1 / sqrt(ils)`: the optimizer's preconditioning.
    pub(super) fn length_scales(&self) -> Vec<f64> {
        self.ils.iter().map(|l| 1.0 / l.sqrt()).collect()
    }
}

/// `m(d2)`.
pub(super) fn matern52(d2: f64) -> f64 {
    let s = (5.0 * d2).sqrt();
    (-s).exp() * (5.0 / 3.0 * d2 + s + 1.0)
}

/// `dm/d(d2)`, finite at `d2 = 0` (where autograd through `sqrt` would not be: Optuna writes
/// this derivative out for the same reason).
pub(super) fn matern52_deriv(d2: f64) -> f64 {
    let s = (5.0 * d2).sqrt();
    -5.0 / 6.0 * (s + 1.0) * (-s).exp()
}

/// The squared difference of one param: numerical, or categorical (0 or 1).
pub(super) fn sq_diff(a: f64, b: f64, categorical: bool) -> f64 {
    if categorical {
        if a != b {
            1.0
        } else {
            0.0
        }
    } else {
        (a - b) * (a - b)
    }
}

/// The kernel at given hyperparameters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kernel<'a> {
    pub(super) ils: &'a [f64],
    pub(super) scale: f64,
    pub(super) is_cat: &'a [bool],
}

impl<'a> Kernel<'a> {
    pub(super) fn new(h: &'a Hyper, is_cat: &'a [bool]) -> Kernel<'a> {
        Kernel {
            ils: &h.ils,
            scale: h.scale,
            is_cat,
        }
    }

    /// The weighted squared distance `d2`.
    pub(super) fn d2(&self, a: &[f64], b: &[f64]) -> f64 {
        let mut d2 = 0.0;
        for j in 0..a.len() {
            d2 += self.ils[j] * sq_diff(a[j], b[j], self.is_cat[j]);
        }
        d2
    }

    pub(super) fn value(&self, a: &[f64], b: &[f64]) -> f64 {
        self.scale * matern52(self.d2(a, b))
    }

    /// `k(a, b)`, and `w * dk/da` added to `grad` (nothing in categorical params, whose
    /// distance is a step).
    pub(super) fn value_grad(&self, a: &[f64], b: &[f64], w: f64, grad: &mut [f64]) -> f64 {
        let d2 = self.d2(a, b);
        let c = w * self.scale * matern52_deriv(d2) * 2.0;
        for j in 0..a.len() {
            if !self.is_cat[j] {
                grad[j] += c * self.ils[j] * (a[j] - b[j]);
            }
        }
        self.scale * matern52(d2)
    }

    /// `dk/da` alone.
    pub(super) fn grad(&self, a: &[f64], b: &[f64], grad: &mut [f64]) {
        grad.iter_mut().for_each(|g| *g = 0.0);
        self.value_grad(a, b, 1.0, grad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matern_is_one_at_zero_and_its_derivative_is_finite_there() {
        assert_eq!(matern52(0.0), 1.0);
        assert_eq!(matern52_deriv(0.0), -5.0 / 6.0);
        for d2 in [1e-3, 0.3, 2.0, 30.0] {
            let h = 1e-6 * d2;
            let fd = (matern52(d2 + h) - matern52(d2 - h)) / (2.0 * h);
            assert!((fd - matern52_deriv(d2)).abs() < 1e-6, "{d2}: {fd}");
        }
    }

    #[test]
    fn gradient_is_the_finite_difference_and_skips_categories() {
        let h = Hyper {
            ils: vec![0.7, 2.0, 1.3],
            scale: 1.4,
            noise: 0.0,
        };
        let cat = [false, true, false];
        let k = Kernel::new(&h, &cat);
        let (a, b) = ([0.2, 1.0, 0.9], [0.5, 2.0, 0.1]);
        let mut g = [0.0; 3];
        k.grad(&a, &b, &mut g);
        assert_eq!(g[1], 0.0);
        for j in [0, 2] {
            let (mut p, mut m) = (a, a);
            p[j] += 1e-6;
            m[j] -= 1e-6;
            let fd = (k.value(&p, &b) - k.value(&m, &b)) / 2e-6;
            assert!((fd - g[j]).abs() < 1e-8, "{j}: {fd} vs {}", g[j]);
        }
        // A categorical param counts 0 or 1 however far apart its choices' indices are.
        assert_eq!(k.value(&a, &[0.2, 3.0, 0.9]), k.value(&a, &[0.2, 2.0, 0.9]));
    }
}
