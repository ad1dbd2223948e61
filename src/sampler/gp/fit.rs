//! The Gaussian process regressor (Optuna's `_gp/gp.py` and `_gp/prior.py`): its
//! hyperparameters fitted by maximizing the marginal log likelihood plus a log prior, and its
//! posterior mean and variance at a point, with their gradients.
//!
//! The fit minimizes, over `raw = (log ils_1..d, log scale, log(noise - min_noise))`,
//! `loss = -log p(y | X) - log prior`, where (constants dropped, `C = K + noise I = L L^T`)
//! `log p(y | X) = -sum log L_ii - y^T C^{-1} y / 2` and
//! `log prior = -sum_j (0.1 / ils_j + 0.1 ils_j) + (log scale - scale)
//! + (0.1 log noise - 30 noise)` (Gamma(2, 1) on the scale, Gamma(1.1, 30) on the noise), from
//! Optuna's start (all ones) with L-BFGS, `gtol = 1e-2`. The gradient is analytic:
//! `d log p / d theta = tr((a a^T - C^{-1}) dC/d theta) / 2` with `a = C^{-1} y`. With
//! `deterministic`, the noise stays at its minimum, 1e-6.
//!
//! Unlike Optuna, each fit starts from the defaults rather than from the previous fit's
//! hyperparameters, so that a proposal depends on the trials and not on which proposals this
//! process made before (a restarted daemon proposes what the first would have). When the fit
//! fails to move from a point where the loss is finite, Optuna's fallback applies: the default
//! hyperparameters as they are.

use super::kernel::{matern52, matern52_deriv, sq_diff, Hyper, Kernel};
use super::lbfgsb::{self, Options};
use super::linalg::{dot, Matrix};

/// Optuna's `DEFAULT_MINIMUM_NOISE_VAR`.
pub(super) const MINIMUM_NOISE: f64 = 1e-6;
/// Optuna's `gtol` for the fit.
const FIT_GTOL: f64 = 1e-2;

/// Training data: normalized params (one row per trial) and standardized values.
#[derive(Debug, Clone)]
pub(super) struct Data {
    pub(super) x: Vec<Vec<f64>>,
    pub(super) y: Vec<f64>,
    pub(super) is_cat: Vec<bool>,
}

impl Data {
    fn dim(&self) -> usize {
        self.is_cat.len()
    }
}

/// The loss of the fit and its gradient, with the pairwise squared differences computed once.
pub(super) struct Loss<'a> {
    data: &'a Data,
    /// `sqd[p * d + j]` for the pair `p` of `(a, b)`, `a < b`, in row order.
    sqd: Vec<f64>,
    deterministic: bool,
}

impl<'a> Loss<'a> {
    pub(super) fn new(data: &'a Data, deterministic: bool) -> Loss<'a> {
        let (n, d) = (data.x.len(), data.dim());
        let mut sqd = Vec::with_capacity(n * n.saturating_sub(1) / 2 * d);
        for a in 0..n {
            for b in a + 1..n {
                for j in 0..d {
                    sqd.push(sq_diff(data.x[a][j], data.x[b][j], data.is_cat[j]));
                }
            }
        }
        Loss {
            data,
            sqd,
            deterministic,
        }
    }

    /// The hyperparameters of a raw point.
    pub(super) fn hyper(&self, raw: &[f64]) -> Hyper {
        let d = self.data.dim();
        Hyper {
            ils: raw[..d].iter().map(|r| r.exp()).collect(),
            scale: raw[d].exp(),
            noise: if self.deterministic {
                MINIMUM_NOISE
            } else {
                raw[d + 1].exp() + MINIMUM_NOISE
            },
        }
    }

    /// The loss at `raw` and its gradient into `grad`; infinite where the kernel matrix is not
    /// positive definite.
    pub(super) fn eval(&self, raw: &[f64], grad: &mut [f64]) -> f64 {
        let (n, d) = (self.data.x.len(), self.data.dim());
        let h = self.hyper(raw);
        // The kernel matrix with the noise, and m'(d2) of each pair.
        let mut c = Matrix::zeros(n);
        let mut mderiv = Vec::with_capacity(self.sqd.len() / d.max(1));
        let mut p = 0;
        for a in 0..n {
            c.set(a, a, h.scale + h.noise);
            for b in a + 1..n {
                let d2: f64 = (0..d).map(|j| h.ils[j] * self.sqd[p * d + j]).sum();
                let k = h.scale * matern52(d2);
                c.set(a, b, k);
                c.set(b, a, k);
                mderiv.push(matern52_deriv(d2));
                p += 1;
            }
        }
        let Some(l) = c.cholesky() else {
            return f64::INFINITY;
        };
        let mut alpha = self.data.y.clone();
        l.cho_solve(&mut alpha);
        let logdet_half: f64 = (0..n).map(|i| l.at(i, i).ln()).sum();
        let mll = -logdet_half - 0.5 * dot(&self.data.y, &alpha);
        let prior = -h.ils.iter().map(|l| 0.1 / l + 0.1 * l).sum::<f64>()
            + (h.scale.ln() - h.scale)
            + (0.1 * h.noise.ln() - 30.0 * h.noise);
        // Q = a a^T - C^{-1}: d mll / d theta = sum_ab Q_ab dC_ab / 2.
        let cinv = l.cho_inverse();
        let q = |a: usize, b: usize| alpha[a] * alpha[b] - cinv.at(a, b);
        let mut g_ils = vec![0.0; d];
        let mut g_scale = 0.0;
        let mut trace = 0.0;
        let mut p = 0;
        for a in 0..n {
            let qaa = q(a, a);
            trace += qaa;
            g_scale += 0.5 * qaa * h.scale;
            for b in a + 1..n {
                let qab = q(a, b);
                // Both (a, b) and (b, a): the halves add up to one.
                g_scale += qab * c.at(a, b);
                let w = qab * h.scale * mderiv[p];
                for (g, s) in g_ils.iter_mut().zip(&self.sqd[p * d..(p + 1) * d]) {
                    *g += w * s;
                }
                p += 1;
            }
        }
        for j in 0..d {
            // d/d raw_j = ils_j d/d ils_j, minus the prior's.
            let dmll = g_ils[j] * h.ils[j];
            let dprior = 0.1 / h.ils[j] - 0.1 * h.ils[j];
            grad[j] = -(dmll + dprior);
        }
        grad[d] = -(g_scale + (1.0 - h.scale));
        grad[d + 1] = if self.deterministic {
            0.0
        } else {
            let e = raw[d + 1].exp();
            -(0.5 * trace * e + e * (0.1 / h.noise - 30.0))
        };
        -mll - prior
    }
}

/// The raw point of hyperparameters (the inverse of [`Loss::hyper`]).
pub(super) fn raw_of(h: &Hyper) -> Vec<f64> {
    let mut raw: Vec<f64> = h.ils.iter().map(|l| l.ln()).collect();
    raw.push(h.scale.ln());
    raw.push((h.noise - 0.99 * MINIMUM_NOISE).ln());
    raw
}

/// A GP with its hyperparameters and the factor of its kernel matrix.
#[derive(Debug, Clone)]
pub(super) struct Gp {
    pub(super) x: Vec<Vec<f64>>,
    pub(super) is_cat: Vec<bool>,
    pub(super) hyper: Hyper,
    /// Cholesky factor of `K + noise I`.
    chol: Matrix,
    /// `(K + noise I)^{-1} y`.
    alpha: Vec<f64>,
}

/// `k(x, X_i)` for every training point, and `dm/d(d2)` of each times `2 scale`, from which
/// any weighted sum of the `dk/dx` is built ([`Gp::weighted_grad`]).
pub(super) struct Cross {
    pub(super) k: Vec<f64>,
    coef: Vec<f64>,
}

impl Gp {
    /// The GP at these hyperparameters; `None` when the kernel matrix is not positive definite.
    pub(super) fn new(data: &Data, hyper: Hyper) -> Option<Gp> {
        let n = data.x.len();
        let kern = Kernel::new(&hyper, &data.is_cat);
        let mut c = Matrix::zeros(n);
        for a in 0..n {
            for b in 0..=a {
                let k = kern.value(&data.x[a], &data.x[b]);
                c.set(a, b, k);
                c.set(b, a, k);
            }
            c.set(a, a, c.at(a, a) + hyper.noise);
        }
        let chol = c.cholesky()?;
        let mut alpha = data.y.clone();
        chol.cho_solve(&mut alpha);
        Some(Gp {
            x: data.x.clone(),
            is_cat: data.is_cat.clone(),
            hyper,
            chol,
            alpha,
        })
    }

    /// Optuna's `fit_kernel_params` from its default start; `None` only for data that no
    /// kernel matrix fits (not finite).
    pub(super) fn fit(data: &Data, deterministic: bool) -> Option<Gp> {
        let dim = data.dim();
        let loss = Loss::new(data, deterministic);
        let start = raw_of(&Hyper::default_for(dim));
        let opts = Options {
            pgtol: FIT_GTOL,
            ..Options::default()
        };
        let out = lbfgsb::minimize(&mut |r, g| loss.eval(r, g), &start, None, &opts);
        let fitted = (out.f.is_finite() && (out.converged || out.iterations > 0))
            .then(|| Gp::new(data, loss.hyper(&out.x)))
            .flatten();
        // Optuna's last resort: the defaults (noise 1 even for a deterministic objective),
        // whose kernel matrix is positive definite for any finite data.
        fitted.or_else(|| Gp::new(data, Hyper::default_for(dim)))
    }

    pub(super) fn kernel(&self) -> Kernel<'_> {
        Kernel::new(&self.hyper, &self.is_cat)
    }

    pub(super) fn cross(&self, x: &[f64]) -> Cross {
        let kern = self.kernel();
        let mut k = Vec::with_capacity(self.x.len());
        let mut coef = Vec::with_capacity(self.x.len());
        for xi in &self.x {
            let d2 = kern.d2(x, xi);
            k.push(self.hyper.scale * matern52(d2));
            coef.push(2.0 * self.hyper.scale * matern52_deriv(d2));
        }
        Cross { k, coef }
    }

    /// `sum_i w_i dk(x, X_i)/dx` added to `out`.
    pub(super) fn weighted_grad(&self, x: &[f64], cross: &Cross, w: &[f64], out: &mut [f64]) {
        for (i, xi) in self.x.iter().enumerate() {
            let c = w[i] * cross.coef[i];
            if c == 0.0 {
                continue;
            }
            for j in 0..x.len() {
                if !self.is_cat[j] {
                    out[j] += c * self.hyper.ils[j] * (x[j] - xi[j]);
                }
            }
        }
    }

    /// `(K + noise I)^{-1} b`.
    pub(super) fn solve(&self, b: &mut [f64]) {
        self.chol.cho_solve(b);
    }

    /// The posterior mean and variance at `x` (the variance clamped at 0, as Optuna's).
    pub(super) fn posterior(&self, x: &[f64]) -> (f64, f64) {
        self.posterior_cross(x).0
    }

    /// [`Gp::posterior`] with `x`'s [`Cross`].
    pub(super) fn posterior_cross(&self, x: &[f64]) -> ((f64, f64), Cross) {
        let cross = self.cross(x);
        (self.posterior_of(&cross).0, cross)
    }

    /// The posterior from `x`'s [`Cross`], and `L^{-1} k` (for its gradient).
    fn posterior_of(&self, cross: &Cross) -> ((f64, f64), Vec<f64>) {
        let mean = dot(&cross.k, &self.alpha);
        let mut v = cross.k.clone();
        self.chol.solve_lower(&mut v);
        let var = (self.hyper.scale - dot(&v, &v)).max(0.0);
        ((mean, var), v)
    }

    /// The posterior mean and variance at `x` with their gradients, and `x`'s [`Cross`].
    pub(super) fn posterior_grad(&self, x: &[f64]) -> Posterior {
        let d = x.len();
        let cross = self.cross(x);
        let ((mean, var), mut v) = self.posterior_of(&cross);
        let mut dmean = vec![0.0; d];
        self.weighted_grad(x, &cross, &self.alpha, &mut dmean);
        let mut dvar = vec![0.0; d];
        if var > 0.0 {
            // d var = -2 (C^{-1} k) . dk
            self.chol.solve_upper_t(&mut v);
            v.iter_mut().for_each(|w| *w *= -2.0);
            self.weighted_grad(x, &cross, &v, &mut dvar);
        }
        Posterior {
            mean,
            var,
            dmean,
            dvar,
            cross,
        }
    }

    /// The joint posterior at several points: the means and the covariance matrix (its
    /// diagonal clamped at 0).
    pub(super) fn joint(&self, xs: &[Vec<f64>]) -> (Vec<f64>, Matrix) {
        let r = xs.len();
        let kern = self.kernel();
        let mut means = Vec::with_capacity(r);
        let mut vs = Vec::with_capacity(r);
        for x in xs {
            let cross = self.cross(x);
            means.push(dot(&cross.k, &self.alpha));
            let mut v = cross.k;
            self.chol.solve_lower(&mut v);
            vs.push(v);
        }
        let mut cov = Matrix::zeros(r);
        for a in 0..r {
            for b in 0..r {
                let mut c = kern.value(&xs[a], &xs[b]) - dot(&vs[a], &vs[b]);
                if a == b {
                    c = c.max(0.0);
                }
                cov.set(a, b, c);
            }
        }
        (means, cov)
    }
}

/// [`Gp::posterior_grad`]'s answer.
pub(super) struct Posterior {
    pub(super) mean: f64,
    pub(super) var: f64,
    pub(super) dmean: Vec<f64>,
    pub(super) dvar: Vec<f64>,
    pub(super) cross: Cross,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Data {
        let x: Vec<Vec<f64>> = (0..9)
            .map(|i| {
                let t = i as f64 / 8.0;
                vec![t, (i % 3) as f64, (t * 7.0).sin() * 0.5 + 0.5]
            })
            .collect();
        let y: Vec<f64> = x
            .iter()
            .map(|r| (r[0] * 5.0).sin() + 0.3 * r[1] - r[2])
            .collect();
        Data {
            x,
            y,
            is_cat: vec![false, true, false],
        }
    }

    #[test]
    fn loss_gradient_is_the_finite_difference() {
        let d = data();
        for det in [false, true] {
            let loss = Loss::new(&d, det);
            let raw = [0.3, -0.5, 1.1, 0.2, -2.0];
            let mut g = [0.0; 5];
            loss.eval(&raw, &mut g);
            for k in 0..5 {
                let (mut p, mut m) = (raw, raw);
                p[k] += 1e-6;
                m[k] -= 1e-6;
                let mut tmp = [0.0; 5];
                let fd = (loss.eval(&p, &mut tmp) - loss.eval(&m, &mut tmp)) / 2e-6;
                assert!(
                    (fd - g[k]).abs() < 1e-6 * fd.abs().max(1.0),
                    "{det} {k}: {fd} vs {}",
                    g[k]
                );
            }
        }
    }

    #[test]
    fn posterior_gradients_are_the_finite_differences() {
        let gp = Gp::fit(&data(), false).unwrap();
        let x = [0.37, 2.0, 0.61];
        let p = gp.posterior_grad(&x);
        assert_eq!((p.mean, p.var), gp.posterior(&x));
        for j in [0, 2] {
            let (mut a, mut b) = (x, x);
            a[j] += 1e-6;
            b[j] -= 1e-6;
            let (pa, pb) = (gp.posterior(&a), gp.posterior(&b));
            let fm = (pa.0 - pb.0) / 2e-6;
            let fv = (pa.1 - pb.1) / 2e-6;
            assert!((fm - p.dmean[j]).abs() < 1e-6, "{j}: {fm} {}", p.dmean[j]);
            assert!((fv - p.dvar[j]).abs() < 1e-6, "{j}: {fv} {}", p.dvar[j]);
        }
        // At a training point the variance is about the noise, and the mean about its value.
        let d = data();
        let (m, v) = gp.posterior(&d.x[4]);
        assert!(v < 0.05 && (m - d.y[4]).abs() < 0.2, "{m} {v}");
        // The joint posterior's diagonal is the marginal one.
        let (means, cov) = gp.joint(&[x.to_vec(), d.x[4].clone()]);
        assert!((means[0] - p.mean).abs() < 1e-12 && (cov.at(0, 0) - p.var).abs() < 1e-12);
    }

    #[test]
    fn the_fit_lowers_the_loss_and_a_repeated_row_without_noise_still_fits() {
        let d = data();
        let loss = Loss::new(&d, false);
        let mut g = [0.0; 5];
        let start = loss.eval(&raw_of(&Hyper::default_for(3)), &mut g);
        let gp = Gp::fit(&d, false).unwrap();
        let end = loss.eval(&raw_of(&gp.hyper), &mut g);
        assert!(end < start - 1.0, "{start} -> {end}");
        let mut twice = d.clone();
        twice.x.push(d.x[0].clone());
        twice.y.push(d.y[0]);
        let gp = Gp::fit(&twice, true).unwrap();
        assert!(gp.posterior(&d.x[0]).0.is_finite());
    }
}
