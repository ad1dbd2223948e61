//! The acquisition function (Optuna's `_gp/acqf.py`, the single-objective ones), its value and
//! its gradient with respect to the point, on standardized values that are maximized:
//!
//! - no running trials: `LogEI`, the log expected improvement over the best feasible value
//!   (`threshold`), plus with constraints the log probability that each constraint's GP is
//!   above its threshold (`LogCEI` = `LogEI` + sum of `LogPI`); with no feasible trial yet the
//!   improvement term is 0 and only feasibility counts;
//! - running trials (`qLogEI`, `qLogCEI`, Optuna 5's way of keeping concurrent proposals
//!   apart): each GP is conditioned on fantasies of the running trials' values, drawn once from
//!   its joint posterior with fixed quasi-random normal base samples (128), so the function is
//!   deterministic and smooth. Per sample, the utility of the batch (the running trials and the
//!   candidate) is its best member's: `log max(y - threshold, 1e-12)` plus each constraint's
//!   `log sigmoid((c - threshold_c) / 0.01)`; the acquisition is the log mean of its exp over
//!   the samples. A candidate next to a running trial whose fantasy already did well adds
//!   little, so proposals spread.
//!
//! The gradients are written out (Optuna lets torch's autograd find them), including through
//! the conditioning on the fantasies; where Optuna's operations have a kink (a variance clamped
//! at 0, a utility clamped at its floor, a tie in the batch's maximum) they follow torch's
//! convention (0; 0; shared evenly).

use super::fit::{Cross, Gp, Posterior};
use super::linalg::{dot, Matrix};
use super::special::{log_ndtr, log_sigmoid, standard_logei};

/// Optuna's `stabilizing_noise`, added to every posterior variance.
const STABILIZING_NOISE: f64 = 1e-12;
/// The floor of a sample's improvement (Optuna's `_EPS`).
const EPS: f64 = 1e-12;
/// The temperature of a constraint sample's smoothed feasibility (Optuna's `qLogPI` `tau`).
const TAU: f64 = 1e-2;
/// Optuna's `n_qmc_samples` for the batch acquisition.
pub(super) const QMC_SAMPLES: usize = 128;

/// The running trials' points with, per GP (the objective's, then each constraint's), the
/// base samples (`QMC_SAMPLES` rows of `running + 1` standard normals).
pub(super) type RunningTrials<'a> = (&'a [Vec<f64>], Vec<Vec<Vec<f64>>>);

/// One GP conditioned on the running trials' fantasies (Optuna's `ConditionalGPRegressor`).
struct Conditioned {
    /// The running trials' points.
    running: Vec<Vec<f64>>,
    /// Each sample's fantasy values at the running trials (samples x running).
    fantasy: Vec<Vec<f64>>,
    /// Each sample's base normal for the candidate.
    z: Vec<f64>,
    /// The factor of the running trials' posterior covariance (plus the stabilizing noise).
    chol: Matrix,
    /// `Crr^{-1} (fantasy_s - mean_r)`, one row per sample.
    w: Vec<Vec<f64>>,
    /// `(K + noise I)^{-1} k(X, R_j)`, one row per running trial.
    vr: Vec<Vec<f64>>,
}

impl Conditioned {
    /// `base`: one row of `running + 1` standard normals per sample, the last one for the
    /// candidate.
    /// `None` when the running trials' covariance has no factor even with a jitter of 1e-4.
    fn new(gp: &Gp, running: &[Vec<f64>], base: &[Vec<f64>]) -> Option<Conditioned> {
        let r = running.len();
        let (mean, cov) = gp.joint(running);
        // Optuna adds the stabilizing noise and lets a failed factorization raise; here the
        // jitter grows (two running trials at one point make the covariance singular).
        let chol = (0..9).find_map(|k| {
            let jitter = STABILIZING_NOISE * 10f64.powi(k);
            let mut c = cov.clone();
            for i in 0..r {
                c.set(i, i, c.at(i, i) + jitter);
            }
            c.cholesky()
        })?;
        let mut fantasy = Vec::with_capacity(base.len());
        let mut w = Vec::with_capacity(base.len());
        let mut z = Vec::with_capacity(base.len());
        for b in base {
            // fantasy = mean + L b[..r]; w = C^{-1} L b = L^{-T} b.
            let f: Vec<f64> = (0..r)
                .map(|i| mean[i] + (0..=i).map(|k| chol.at(i, k) * b[k]).sum::<f64>())
                .collect();
            let mut wi = b[..r].to_vec();
            chol.solve_upper_t(&mut wi);
            fantasy.push(f);
            w.push(wi);
            z.push(b[r]);
        }
        let kern = gp.kernel();
        let vr = running
            .iter()
            .map(|xr| {
                let mut v: Vec<f64> = gp.x.iter().map(|xi| kern.value(xr, xi)).collect();
                gp.solve(&mut v);
                v
            })
            .collect();
        Some(Conditioned {
            running: running.to_vec(),
            fantasy,
            z,
            chol,
            w,
            vr,
        })
    }

    /// The candidate's sample values at `x`, and with `grads` their gradients (one row per
    /// sample).
    fn samples(&self, gp: &Gp, x: &[f64], grads: Option<&mut Vec<Vec<f64>>>) -> Vec<f64> {
        let (d, r) = (x.len(), self.running.len());
        // The gradient's parts only when asked for: the first candidates are many.
        let post: Result<Posterior, ((f64, f64), Cross)> = match grads {
            Some(_) => Ok(gp.posterior_grad(x)),
            None => Err(gp.posterior_cross(x)),
        };
        let (mean, var, k) = match &post {
            Ok(p) => (p.mean, p.var, &p.cross.k),
            Err(((m, v), c)) => (*m, *v, &c.k),
        };
        let kern = gp.kernel();
        // The posterior cross-covariance with the running trials.
        let c: Vec<f64> = (0..r)
            .map(|j| kern.value(x, &self.running[j]) - dot(k, &self.vr[j]))
            .collect();
        let mut u = c.clone();
        self.chol.solve_lower(&mut u);
        let cc = var + STABILIZING_NOISE - dot(&u, &u);
        let sd = cc.max(0.0).sqrt();
        let shift: Vec<f64> = self.w.iter().map(|w| dot(&c, w)).collect();
        let values: Vec<f64> = (0..self.z.len())
            .map(|s| mean + shift[s] + sd * self.z[s])
            .collect();
        let (Some(out), Ok(p)) = (grads, &post) else {
            return values;
        };
        {
            // dc_j = dk(x, R_j) - sum_i vr_ji dk(x, X_i)
            let mut dc = vec![vec![0.0; d]; r];
            for ((dcj, xr), vr) in dc.iter_mut().zip(&self.running).zip(&self.vr) {
                kern.grad(x, xr, dcj);
                let neg: Vec<f64> = vr.iter().map(|v| -v).collect();
                gp.weighted_grad(x, &p.cross, &neg, dcj);
            }
            let mut dsd = vec![0.0; d];
            if cc > 0.0 {
                // d cc = d var - 2 (Crr^{-1} c) . dc
                let mut ci = u.clone();
                self.chol.solve_upper_t(&mut ci);
                for (l, v) in dsd.iter_mut().enumerate() {
                    let dcc = p.dvar[l] - 2.0 * (0..r).map(|j| ci[j] * dc[j][l]).sum::<f64>();
                    *v = dcc / (2.0 * sd);
                }
            }
            out.clear();
            for s in 0..self.z.len() {
                let g: Vec<f64> = (0..d)
                    .map(|l| {
                        p.dmean[l]
                            + (0..r).map(|j| self.w[s][j] * dc[j][l]).sum::<f64>()
                            + self.z[s] * dsd[l]
                    })
                    .collect();
                out.push(g);
            }
        }
        values
    }
}

/// A sample's log utility: `log max(y - t, eps)` for the objective, or the smoothed
/// feasibility of a constraint, with its derivative in `y`.
fn objective_utility(y: f64, threshold: f64) -> (f64, f64) {
    if threshold == f64::NEG_INFINITY {
        return (0.0, 0.0);
    }
    let gap = y - threshold;
    if gap > EPS {
        (gap.ln(), 1.0 / gap)
    } else {
        (EPS.ln(), 0.0)
    }
}

fn constraint_utility(y: f64, threshold: f64) -> (f64, f64) {
    let (v, d) = log_sigmoid((y - threshold) / TAU);
    (v, d / TAU)
}

/// What the running trials bring: each GP conditioned on them, and per sample the best
/// utility among them (with how many tie for it).
struct Batch {
    /// The objective's, then each constraint's.
    conditioned: Vec<Conditioned>,
    best_running: Vec<(f64, usize)>,
}

/// The acquisition function of one proposal.
pub(super) struct Acquisition {
    objective: Gp,
    threshold: f64,
    /// Each constraint's GP and threshold.
    constraints: Vec<(Gp, f64)>,
    batch: Option<Batch>,
    /// The objective GP's length scales (the optimizer's preconditioning).
    pub(super) length_scales: Vec<f64>,
}

impl Acquisition {
    /// `threshold`: the best feasible standardized value (`-inf`: none feasible).
    pub(super) fn new(
        objective: Gp,
        threshold: f64,
        constraints: Vec<(Gp, f64)>,
        running: Option<RunningTrials<'_>>,
    ) -> Acquisition {
        let length_scales = objective.hyper.length_scales();
        // Without a factor of the running trials' covariance, they are left out.
        let batch = running
            .filter(|(r, _)| !r.is_empty())
            .and_then(|(r, bases)| {
                let gps = std::iter::once(&objective).chain(constraints.iter().map(|(g, _)| g));
                let conditioned: Vec<Conditioned> = gps
                    .zip(&bases)
                    .map(|(gp, base)| Conditioned::new(gp, r, base))
                    .collect::<Option<_>>()?;
                let n_samples = conditioned[0].z.len();
                let best_running = (0..n_samples)
                    .map(|s| {
                        let mut best = (f64::NEG_INFINITY, 0);
                        for j in 0..r.len() {
                            let mut u =
                                objective_utility(conditioned[0].fantasy[s][j], threshold).0;
                            for (c, (_, t)) in conditioned[1..].iter().zip(&constraints) {
                                u += constraint_utility(c.fantasy[s][j], *t).0;
                            }
                            if u > best.0 {
                                best = (u, 1);
                            } else if u == best.0 {
                                best.1 += 1;
                            }
                        }
                        best
                    })
                    .collect();
                Some(Batch {
                    conditioned,
                    best_running,
                })
            });
        Acquisition {
            objective,
            threshold,
            constraints,
            batch,
            length_scales,
        }
    }

    pub(super) fn value(&self, x: &[f64]) -> f64 {
        self.eval(x, None)
    }

    /// The value at `x` and its gradient into `grad`.
    pub(super) fn value_grad(&self, x: &[f64], grad: &mut [f64]) -> f64 {
        self.eval(x, Some(grad))
    }

    fn eval(&self, x: &[f64], grad: Option<&mut [f64]>) -> f64 {
        match &self.batch {
            None => self.analytic(x, grad),
            Some(b) => self.monte_carlo(b, x, grad),
        }
    }

    /// `LogEI` (+ the constraints' `LogPI`).
    fn analytic(&self, x: &[f64], mut grad: Option<&mut [f64]>) -> f64 {
        if let Some(g) = grad.as_deref_mut() {
            g.iter_mut().for_each(|v| *v = 0.0);
        }
        let mut total = 0.0;
        if self.threshold != f64::NEG_INFINITY {
            total += log_term(
                &self.objective,
                x,
                self.threshold,
                grad.as_deref_mut(),
                true,
            );
        }
        for (gp, t) in &self.constraints {
            total += log_term(gp, x, *t, grad.as_deref_mut(), false);
        }
        total
    }

    /// `qLogEI` (+ the constraints' `qLogPI`, summed per sample).
    fn monte_carlo(&self, b: &Batch, x: &[f64], grad: Option<&mut [f64]>) -> f64 {
        let want = grad.is_some();
        let mut sample_grads = Vec::new();
        let n_samples = b.best_running.len();
        let mut u = vec![0.0; n_samples];
        let mut du = vec![vec![0.0; x.len()]; if want { n_samples } else { 0 }];
        let gps = std::iter::once((&self.objective, self.threshold, true))
            .chain(self.constraints.iter().map(|(g, t)| (g, *t, false)));
        for (c, (gp, t, objective)) in b.conditioned.iter().zip(gps) {
            let ys = c.samples(gp, x, want.then_some(&mut sample_grads));
            for s in 0..n_samples {
                let (v, dv) = if objective {
                    objective_utility(ys[s], t)
                } else {
                    constraint_utility(ys[s], t)
                };
                u[s] += v;
                if want && dv != 0.0 {
                    for (a, g) in du[s].iter_mut().zip(&sample_grads[s]) {
                        *a += dv * g;
                    }
                }
            }
        }
        // Per sample, the batch's best; then the log mean of the exps.
        let best: Vec<f64> = (0..n_samples)
            .map(|s| u[s].max(b.best_running[s].0))
            .collect();
        let top = best.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = best.iter().map(|v| (v - top).exp()).sum();
        let value = top + sum.ln() - (n_samples as f64).ln();
        if let Some(g) = grad {
            g.iter_mut().for_each(|v| *v = 0.0);
            for s in 0..n_samples {
                let (run, ties) = b.best_running[s];
                let share = if u[s] > run {
                    1.0
                } else if u[s] == run {
                    1.0 / (ties + 1) as f64
                } else {
                    continue;
                };
                let weight = share * (best[s] - top).exp() / sum;
                for (gv, d) in g.iter_mut().zip(&du[s]) {
                    *gv += weight * d;
                }
            }
        }
        value
    }
}

/// `LogEI` (`ei`) or `LogPI` of one GP at `x`, its gradient added to `grad`.
fn log_term(gp: &Gp, x: &[f64], threshold: f64, grad: Option<&mut [f64]>, ei: bool) -> f64 {
    let Some(g) = grad else {
        let (mean, var) = gp.posterior(x);
        let sigma = (var + STABILIZING_NOISE).sqrt();
        let z = (mean - threshold) / sigma;
        return if ei {
            standard_logei(z).0 + sigma.ln()
        } else {
            log_ndtr(z).0
        };
    };
    let p = gp.posterior_grad(x);
    let sigma = (p.var + STABILIZING_NOISE).sqrt();
    let z = (p.mean - threshold) / sigma;
    let (v, dz) = if ei { standard_logei(z) } else { log_ndtr(z) };
    for ((gl, dm), dv) in g.iter_mut().zip(&p.dmean).zip(&p.dvar) {
        let dsigma = dv / (2.0 * sigma);
        let dzl = (dm - z * dsigma) / sigma;
        *gl += dz * dzl + if ei { dsigma / sigma } else { 0.0 };
    }
    if ei {
        v + sigma.ln()
    } else {
        v
    }
}
