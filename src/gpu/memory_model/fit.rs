//! The regression behind [`super::MemoryModel`]: the normal equations of the measured trials,
//! the choice of the params that earn their place in the fit and of the products of those that
//! drive memory, the ridge fit with its leave-one-out errors, and the linear algebra under them.
//!
//! Split from the model so that each holds in one's head: the model says what a trial is to the
//! regression and turns a fit into an estimate with its words; this file fits.

use super::tuning::{
    BASE_SHARE, DRIVES, MAX_ERRORS, MAX_PAIRED, MIN_SELECT, NEIGHBOURS, PAIR_FROM, RIDGE,
    RIDGE_FIXED, SPREAD,
};
use std::collections::VecDeque;
use std::ops::Range;

/// What a trial is to the regression: one value per feature.
pub(super) type Features = Vec<f64>;

/// A measured trial, as the regression takes it in: its features and its peak.
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) x: Features,
    pub(super) peak: u64,
    /// A trial still running, whose peak is the level it has settled at
    /// (`MemoryModel::running`): its id, until it ends and its measured peak replaces it.
    pub(super) running: Option<i64>,
}

/// The fitted model: the regression's coefficients (log-bytes above `base` per feature unit),
/// and each measured trial's features with its residual, for the local correction.
#[derive(Debug, Clone)]
pub(super) struct Fit {
    /// Bytes every trial holds ([`BASE_SHARE`] of the smallest peak measured).
    pub(super) base: f64,
    pub(super) beta: Vec<f64>,
    pub(super) intercept: f64,
    pub(super) residuals: Vec<(Features, f64)>,
    /// Each feature's smallest and largest value among the measured trials: a feature they
    /// never varied says nothing of what it does to memory (its coefficient is 0 for want of
    /// data, not because it has no effect).
    pub(super) lo: Vec<f64>,
    pub(super) hi: Vec<f64>,
    /// The most recently measured trials' leave-one-out errors (`ln(peak)` − the prediction
    /// without them): (index into `residuals`, error, distance to the nearest other trial).
    pub(super) loo: Vec<(usize, f64, f64)>,
    /// Those errors divided by `SPREAD + distance`, sorted.
    pub(super) scores: Vec<f64>,
    /// The features' means, the Cholesky factor of `XᵀX + λI` (centred features) and λ: for
    /// [`Fit::unexplored`].
    pub(super) mean: Vec<f64>,
    pub(super) chol: Vec<f64>,
    pub(super) lambda: f64,
    /// The columns of the params that earn their place in the fit ([`ridge`]); the others
    /// are 0 in every trial's features as the fit sees them.
    pub(super) keep: Vec<bool>,
    /// The pairs of columns whose products follow a trial's own features ([`pair_drivers`]).
    pub(super) pairs: Vec<(usize, usize)>,
    /// The columns with a coefficient, and each measured trial's features on them (in the
    /// order of `residuals`): [`Fit::distance`] runs over these alone. With 30 params of which
    /// 2 drive memory, most columns have none, and the distances to every measured trial (for
    /// the local correction of each estimate and of each leave-one-out error) were most of what
    /// a fit and its estimates cost.
    active: Vec<usize>,
    compact: Vec<Features>,
}

impl Fit {
    /// A trial's features as this fit sees them: its own, then the products of the fit's pairs.
    pub(super) fn expand(&self, x: &[f64]) -> Features {
        with_pairs(x, &self.pairs)
    }

    fn linear(&self, x: &[f64]) -> f64 {
        self.intercept + x.iter().zip(&self.beta).map(|(a, b)| a * b).sum::<f64>()
    }

    /// The regression, corrected by the residuals of the trials nearest in what their params do
    /// to memory: what a log-linear fit misses (a context added to a product, a branch with
    /// another slope) is learnt locally as trials come.
    pub(super) fn predict(&self, x: &[f64]) -> f64 {
        self.linear(x) + self.correction(x, None).0
    }

    /// The local correction at `x` from the residuals of its nearest measured trials (leaving
    /// out the one at index `skip`), and the distance to the nearest of them.
    fn correction(&self, x: &[f64], skip: Option<usize>) -> (f64, f64) {
        let mut near: Vec<(f64, f64)> = Vec::with_capacity(NEIGHBOURS + 1);
        let cx = self.compact(x);
        for (i, (_, r)) in self.residuals.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            let d = self.distance_to(i, &cx);
            if near.len() < NEIGHBOURS || d < near[near.len() - 1].0 {
                let pos = near.partition_point(|(e, _)| *e <= d);
                near.insert(pos, (d, *r));
                near.truncate(NEIGHBOURS);
            }
        }
        let nearest = near.first().map_or(f64::INFINITY, |n| n.0);
        let (mut sum, mut weight) = (0.0, 0.0);
        for (d, r) in near {
            let w = 1.0 / (d + 0.01);
            sum += w * r;
            weight += w;
        }
        (if weight > 0.0 { sum / weight } else { 0.0 }, nearest)
    }

    /// How much of `x` the measured trials never varied: `λ · xcᵀ (XᵀX + λI)⁻¹ xc` (`xc` centred
    /// on their mean), near 0 for a trial within what they varied and the squared length of the
    /// rest where they did not (a depth of 8 when every measured trial had 1 or 2), in feature
    /// units; the ridge's own word for how little its coefficients there are known.
    fn unexplored(&self, x: &[f64]) -> f64 {
        self.unexplored_in(x, self.mean.len())
    }

    /// [`Fit::unexplored`] in the directions of the trial's own features only: its pairs are
    /// functions of them.
    pub(super) fn unexplored_own(&self, x: &[f64]) -> f64 {
        self.unexplored_in(x, self.mean.len() - self.pairs.len())
    }

    /// [`Fit::unexplored`] in the first `cols` features, as if the fit had no others: the pairs
    /// come last, and the leading rows of a Cholesky factor are the factor of the leading block
    /// alone.
    fn unexplored_in(&self, x: &[f64], cols: usize) -> f64 {
        // A feature they never varied is a value never measured: `MemoryModel::novel` meets it
        // with the prior.
        let xc: Features = (0..cols)
            .map(|i| {
                if self.hi[i] - self.lo[i] < 1e-9 {
                    0.0
                } else {
                    x[i] - self.mean[i]
                }
            })
            .collect();
        self.lambda * forward_norm(&self.chol, &xc, self.mean.len(), &kept(&self.keep))
    }

    /// How far `x` is from the nearest measured trial (infinite with none).
    pub(super) fn nearest(&self, x: &[f64]) -> f64 {
        let cx = self.compact(x);
        (0..self.residuals.len())
            .map(|i| self.distance_to(i, &cx))
            .fold(f64::INFINITY, f64::min)
    }

    /// `x` on the columns with a coefficient, for [`Fit::distance_to`].
    pub(super) fn compact(&self, x: &[f64]) -> Features {
        self.active.iter().map(|&j| x[j]).collect()
    }

    /// [`Fit::distance`] from measured trial `i` (of `residuals`) to a trial whose features are
    /// `cx` ([`Fit::compact`]), without compacting the measured trial's again.
    pub(super) fn distance_to(&self, i: usize, cx: &[f64]) -> f64 {
        self.compact_distance(&self.compact[i], cx)
    }

    /// How far apart two trials are in what their params do to memory: the predicted
    /// log-peak difference, feature by feature (root of the sum of squares).
    pub(super) fn distance(&self, a: &[f64], b: &[f64]) -> f64 {
        self.compact_distance(&self.compact(a), &self.compact(b))
    }

    /// [`Fit::distance`] between two trials' features on the columns with a coefficient: the
    /// others add 0 to the sum.
    fn compact_distance(&self, a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .zip(&self.active)
            .map(|((x, y), &j)| (self.beta[j] * (x - y)).powi(2))
            .sum::<f64>()
            .sqrt()
    }
}

/// Ridge regression of `ln(peak − base)` on the `keep` columns (those of the params that earn
/// their place, [`select`]), the intercept unpenalized (features and target centred), solved by
/// Cholesky on the normal equations; then each recently measured trial's leave-one-out error.
pub(super) fn ridge(
    data: &VecDeque<Measured>,
    normal: &Normal,
    keep: Vec<bool>,
    pairs: Vec<(usize, usize)>,
) -> Fit {
    let (beta, chol) = normal.solve(&keep);
    let n = data.len() as f64;
    let d = normal.mean.len();
    let xs: Vec<Features> = data
        .iter()
        .map(|m| mask(&with_pairs(&m.x, &pairs), &keep))
        .collect();
    let mean = mask(&normal.mean, &keep);
    let intercept = normal.ymean - beta.iter().zip(&mean).map(|(w, m)| w * m).sum::<f64>();
    let mut lo = vec![f64::INFINITY; d];
    let mut hi = vec![f64::NEG_INFINITY; d];
    for x in &xs {
        for (j, v) in x.iter().enumerate() {
            lo[j] = lo[j].min(*v);
            hi[j] = hi[j].max(*v);
        }
    }
    let mut fit = Fit {
        base: normal.base,
        beta,
        intercept,
        residuals: Vec::new(),
        lo,
        hi,
        loo: Vec::new(),
        scores: Vec::new(),
        mean,
        chol,
        lambda: normal.lambda,
        keep,
        pairs,
        active: Vec::new(),
        compact: Vec::new(),
    };
    fit.active = (0..fit.beta.len())
        .filter(|&j| fit.beta[j] != 0.0)
        .collect();
    fit.compact = xs.iter().map(|x| fit.compact(x)).collect();
    fit.residuals = xs
        .into_iter()
        .zip(&normal.y)
        .map(|(x, y)| {
            let r = y - fit.linear(&x);
            (x, r)
        })
        .collect();
    let first = data.len().saturating_sub(MAX_ERRORS);
    let lone = lone(data);
    fit.loo = (first..data.len())
        .filter(|i| !lone[*i])
        .map(|i| {
            let (x, r) = &fit.residuals[i];
            // `chol` is the Cholesky factor L of XᵀX + λI: the leverage of trial i is
            // |L⁻¹ xcᵢ|² + 1/n, and its residual left out of the linear fit is rᵢ / (1 − leverage).
            let h = (fit.unexplored(x) / fit.lambda + 1.0 / n).min(0.99);
            let (correction, nearest) = fit.correction(x, Some(i));
            (i, r / (1.0 - h) - correction, nearest)
        })
        .collect();
    fit.scores = fit
        .loo
        .iter()
        .map(|(_, e, d)| e / (SPREAD + d.min(1e6)))
        .collect();
    fit.scores.sort_by(f64::total_cmp);
    fit
}

/// The normal equations of the measured trials, centred, on every feature: what each fit on
/// some of the params solves, built once for all of them ([`select`] tries many).
pub(super) struct Normal {
    base: f64,
    /// Each trial's features, centred.
    xc: Vec<Features>,
    /// Each trial's target, `ln(peak − base)`, and their mean.
    y: Vec<f64>,
    ymean: f64,
    mean: Features,
    /// `XcᵀXc` (d × d, row-major) and `Xcᵀyc`.
    gram: Vec<f64>,
    xty: Vec<f64>,
    lambda: f64,
}

impl Normal {
    pub(super) fn new(data: &VecDeque<Measured>, pairs: &[(usize, usize)]) -> Normal {
        Normal::on(data, pairs, None)
    }

    /// [`Normal::new`] with `XcᵀXc` and `Xcᵀyc` only where every column is in `keep` (0
    /// elsewhere), all a fit on those columns reads ([`ridge`]): with the columns chosen once
    /// for a tenth more trials, most refits are on a few of many columns.
    pub(super) fn on(
        data: &VecDeque<Measured>,
        pairs: &[(usize, usize)],
        keep: Option<&[bool]>,
    ) -> Normal {
        let n = data.len() as f64;
        let xs: Vec<Features> = data.iter().map(|m| with_pairs(&m.x, pairs)).collect();
        let d = xs[0].len();
        let base = BASE_SHARE * data.iter().map(|m| m.peak).min().unwrap_or(0) as f64;
        let y: Vec<f64> = data
            .iter()
            .map(|m| (m.peak as f64 - base).max(1.0).ln())
            .collect();
        let ymean = y.iter().sum::<f64>() / n;
        let mut mean = vec![0.0; d];
        for x in &xs {
            for (a, x) in mean.iter_mut().zip(x) {
                *a += x / n;
            }
        }
        let xc: Vec<Features> = xs
            .iter()
            .map(|x| x.iter().zip(&mean).map(|(x, mu)| x - mu).collect())
            .collect();
        let cols: Vec<usize> = (0..d).filter(|&i| keep.is_none_or(|k| k[i])).collect();
        let mut gram = vec![0.0; d * d];
        let mut xty = vec![0.0; d];
        for (x, y) in xc.iter().zip(&y) {
            let yc = y - ymean;
            for (a, &i) in cols.iter().enumerate() {
                xty[i] += x[i] * yc;
                for &j in &cols[..=a] {
                    gram[i * d + j] += x[i] * x[j];
                }
            }
        }
        for i in 0..d {
            for j in 0..i {
                gram[j * d + i] = gram[i * d + j];
            }
        }
        Normal {
            base,
            xc,
            y,
            ymean,
            mean,
            gram,
            xty,
            lambda: RIDGE_FIXED + RIDGE * n,
        }
    }

    /// The coefficients of the fit on the `keep` columns (0 on the others), and the Cholesky
    /// factor of its `XᵀX + λI`.
    fn solve(&self, keep: &[bool]) -> (Vec<f64>, Vec<f64>) {
        let d = keep.len();
        let mut a = vec![0.0; d * d];
        for i in 0..d {
            for j in 0..d {
                if keep[i] && keep[j] {
                    a[i * d + j] = self.gram[i * d + j];
                }
            }
            a[i * d + i] += self.lambda;
        }
        let b = mask(&self.xty, keep);
        let beta = cholesky_solve(&mut a, &b, keep);
        (beta, a)
    }

    /// The fit's error on the recently measured trials, each left out (PRESS: the sum of their
    /// squared leave-one-out residuals), for the fit on the `keep` columns.
    fn press(&self, keep: &[bool]) -> f64 {
        let (beta, chol) = self.solve(keep);
        let n = self.y.len();
        let d = keep.len();
        let cols = kept(keep);
        (n.saturating_sub(MAX_ERRORS)..n)
            .map(|i| {
                let x = mask(&self.xc[i], keep);
                let r =
                    self.y[i] - self.ymean - x.iter().zip(&beta).map(|(a, b)| a * b).sum::<f64>();
                let h = (forward_norm(&chol, &x, d, &cols) + 1.0 / n as f64).min(0.99);
                (r / (1.0 - h)).powi(2)
            })
            .sum()
    }
}

/// The params that earn their place in the fit, as the columns kept: backward elimination on
/// the leave-one-out error, from every param, dropping while some param whose coefficients are
/// below [`DRIVES`] predicts the recently measured trials no worse without it, the one whose
/// removal predicts them best first. Not before [`MIN_SELECT`] trials per param are measured.
///
/// A param of no effect on memory then has no coefficient at all, rather than the small one a
/// dozen noisy trials give it, which made trials of the same config that differ only in it look
/// apart (the peaks of one did not bound the others) and left its unexplored directions in the
/// margin ([`Fit::unexplored`]). A param that drives memory predicts the trials better with it,
/// and stays.
pub(super) fn select(normal: &Normal, groups: &[Range<usize>]) -> Vec<bool> {
    let mut keep = vec![true; normal.mean.len()];
    if normal.y.len() < MIN_SELECT.saturating_mul(groups.len()) {
        return keep;
    }
    let mut error = normal.press(&keep);
    let mut kept: Vec<&Range<usize>> = groups.iter().collect();
    while kept.len() > 1 {
        let (beta, _) = normal.solve(&keep);
        let mut best: Option<(usize, f64, Vec<bool>)> = None;
        for (k, cols) in kept.iter().enumerate() {
            if largest(&beta[(*cols).clone()]) >= DRIVES {
                continue;
            }
            let mut without = keep.clone();
            without[(*cols).clone()].fill(false);
            let e = normal.press(&without);
            if e <= error && best.as_ref().is_none_or(|b| e < b.1) {
                best = Some((k, e, without));
            }
        }
        let Some((k, e, without)) = best else { break };
        kept.remove(k);
        keep = without;
        error = e;
    }
    keep
}

/// The fit's pairs: from [`PAIR_FROM`] measured trials per param on, the product of every two
/// features ([`MemoryModel::picks`]) of the params that drive memory (each numeric one with
/// itself too; a param of no effect takes part in none, as its products would be noise), kept
/// only if the recently measured trials are predicted better with them (the leave-one-out
/// error). Returns the normal equations, the columns kept and the pairs.
///
/// A network's peak is a sum of products (weights and optimizer state ∝ width² × depth, about
/// 3 times as much with Adam; activations ∝ batch × width × depth; on top of a context), which
/// is not linear in the params' log sizes: in log-peak it curves, and a linear fit extrapolates
/// the slope of the term that rules among the trials measured to where the other rules. Pairs
/// make the fit quadratic in them.
pub(super) fn pair_drivers(
    data: &VecDeque<Measured>,
    normal: Normal,
    groups: &[Range<usize>],
    picks: &[(usize, usize)],
    keep: Vec<bool>,
) -> (Normal, Vec<bool>, Vec<(usize, usize)>) {
    if data.len() < PAIR_FROM.saturating_mul(groups.len()) {
        return (normal, keep, Vec::new());
    }
    let (beta, _) = normal.solve(&keep);
    // The drivers, the strongest first, their features up to `MAX_PAIRED`.
    let mut drivers: Vec<(f64, usize)> = groups
        .iter()
        .enumerate()
        .map(|(p, cols)| (own_effect(&beta, cols), p))
        .filter(|(effect, _)| *effect >= DRIVES)
        .collect();
    drivers.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    for (_, p) in drivers {
        let its: Vec<(usize, usize)> = picks.iter().filter(|q| q.1 == p).copied().collect();
        if chosen.len() + its.len() <= MAX_PAIRED {
            chosen.extend(its);
        }
    }
    let pairs: Vec<(usize, usize)> = chosen
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            // A categorical's choices with each other are 0, or the choice itself.
            let numeric = chosen.iter().filter(|q| q.1 == a.1).count() == 1;
            chosen[i..]
                .iter()
                .enumerate()
                .filter(move |(k, b)| if *k == 0 { numeric } else { b.1 != a.1 })
                .map(move |(_, b)| (a.0, b.0))
        })
        .collect();
    if pairs.is_empty() {
        return (normal, keep, Vec::new());
    }
    let wide = Normal::new(data, &pairs);
    let mut with = keep.clone();
    with.resize(keep.len() + pairs.len(), true);
    if wide.press(&with) < normal.press(&keep) {
        drop_passengers(data, wide, with, pairs, groups)
    } else {
        (normal, keep, Vec::new())
    }
}

/// The params kept only for what the linear fit could not curve, once the pairs curve it:
/// backward elimination on the leave-one-out error of the fit with its pairs, each param left
/// out with its pairs while the recently measured trials are predicted no worse without it,
/// the one whose removal predicts them best first.
///
/// In the linear fit a param of no effect picks up the curvature the drivers leave there: a
/// log-scaled one's linear feature (most of its values near 0, a few near 1) fits a few
/// trials' residuals, its coefficient passes [`DRIVES`], and [`select`] never leaves it out. On
/// the unit tests' width × depth workload (100 seeds, 60 trials) the estimates named the
/// learning rate among the params that drive memory in 89% of the estimates with 8 to 19 trials
/// measured and 69% from 40 on, and it widened the bound by its errors; with this, 16% and 2%.
/// No [`DRIVES`] gate here: with the pairs in the fit, what a param of no effect would fit is
/// noise, and leaving it out kept estimates above the peak more often, not less (300 seeds: 6 → 0 of 8400 below the peak from 12 trials measured on that
/// workload, 110 → 92 of 12000 from 20 on the 7-param one; medians 1.11 → 1.09 and 1.28 → 1.22).
fn drop_passengers(
    data: &VecDeque<Measured>,
    normal: Normal,
    mut keep: Vec<bool>,
    pairs: Vec<(usize, usize)>,
    groups: &[Range<usize>],
) -> (Normal, Vec<bool>, Vec<(usize, usize)>) {
    let width = groups.last().map_or(0, |g| g.end);
    // A param left out with its pairs: their columns masked, as in `select`.
    let without = |keep: &[bool], cols: &Range<usize>| {
        let mut out = keep.to_vec();
        out[cols.clone()].fill(false);
        for (k, (a, b)) in pairs.iter().enumerate() {
            if cols.contains(a) || cols.contains(b) {
                out[width + k] = false;
            }
        }
        out
    };
    let mut error = normal.press(&keep);
    let mut dropped = false;
    loop {
        let best = groups
            .iter()
            .filter(|cols| keep[(*cols).clone()].iter().any(|k| *k))
            .map(|cols| {
                let fewer = without(&keep, cols);
                (normal.press(&fewer), fewer)
            })
            .filter(|(e, _)| *e <= error)
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((e, fewer)) = best else { break };
        (error, keep, dropped) = (e, fewer, true);
    }
    if !dropped {
        return (normal, keep, pairs);
    }
    // The fit carries only the pairs left.
    let left: Vec<(usize, usize)> = pairs
        .iter()
        .enumerate()
        .filter(|(k, _)| keep[width + k])
        .map(|(_, q)| *q)
        .collect();
    let mut kept = keep[..width].to_vec();
    kept.resize(width + left.len(), true);
    (Normal::new(data, &left), kept, left)
}

/// `x` with the product of each of `pairs` of its features appended.
fn with_pairs(x: &[f64], pairs: &[(usize, usize)]) -> Features {
    let mut out = Vec::with_capacity(x.len() + pairs.len());
    out.extend_from_slice(x);
    out.extend(pairs.iter().map(|&(a, b)| x[a] * x[b]));
    out
}

/// The largest of `beta` in absolute value: a param's effect on log-peak across its range, from
/// its coefficients.
fn largest(beta: &[f64]) -> f64 {
    beta.iter().fold(0.0f64, |a, b| a.max(b.abs()))
}

/// A param's effect from the coefficients of its columns `cols`, leaving out the last, which
/// says only whether a trial has the param.
pub(super) fn own_effect(beta: &[f64], cols: &Range<usize>) -> f64 {
    largest(&beta[cols.start..cols.end - 1])
}

/// `|L⁻¹ x|²` for the Cholesky factor `L` (d × d, row-major, lower), or for its leading
/// `x.len()` rows and columns where `x` is shorter; `cols`, ascending: the columns where `x`
/// may not be 0 and `L` is not diagonal (those of a fit, [`Normal::solve`]). Elsewhere `L⁻¹ x`
/// is 0 and adds nothing, so they are skipped.
fn forward_norm(chol: &[f64], x: &[f64], d: usize, cols: &[usize]) -> f64 {
    let mut z = vec![0.0; x.len()];
    let mut norm = 0.0;
    for (a, &i) in cols.iter().take_while(|&&i| i < x.len()).enumerate() {
        let s = x[i]
            - cols[..a]
                .iter()
                .map(|&k| chol[i * d + k] * z[k])
                .sum::<f64>();
        z[i] = s / chol[i * d + i];
        norm += z[i] * z[i];
    }
    norm
}

/// The columns kept, ascending.
fn kept(keep: &[bool]) -> Vec<usize> {
    (0..keep.len()).filter(|&i| keep[i]).collect()
}

/// `x` with the columns not kept at 0.
fn mask(x: &[f64], keep: &[bool]) -> Features {
    x.iter()
        .zip(keep)
        .map(|(v, k)| if *k { *v } else { 0.0 })
        .collect()
}

/// The trials that alone have their value of some feature (the one trial of a categorical
/// choice, say): left out, the fit has never seen that value and predicts it as the others, so
/// its leave-one-out error is the error of a value never measured, which [`MemoryModel::novel`]
/// meets with the prior, not the model's error on trials like those it has measured. Counted
/// among the errors, one such trial (a first large trial among small ones: a 2.5 GiB and a
/// 6.8 GiB mode) made the margin +275% for every trial near it, and the next large trial
/// waited for a bound of the whole card.
fn lone(data: &VecDeque<Measured>) -> Vec<bool> {
    let n = data.len();
    let mut out = vec![false; n];
    let Some(first) = data.front() else {
        return out;
    };
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9;
    for j in 0..first.x.len() {
        let v = first.x[j];
        let differ: Vec<usize> = (1..n).filter(|&i| !same(data[i].x[j], v)).collect();
        match differ.len() {
            // One trial has another value than all the rest.
            1 => out[differ[0]] = true,
            // All but the first have another value: the first is alone if they share theirs.
            k if k + 1 == n && k > 1 => {
                let w = data[differ[0]].x[j];
                if differ.iter().all(|&i| same(data[i].x[j], w)) {
                    out[0] = true;
                }
            }
            _ => {}
        }
    }
    out
}

/// Solves `A x = b` for a symmetric positive definite `A` (d × d, row-major, overwritten).
/// `keep`: the columns of a fit ([`Normal::solve`]), `d` of them in all. Off them `A` is
/// diagonal and `b` is 0, so the factor is diagonal there and `x` is 0, and only its diagonal
/// is computed: with 30 params of which a few are in the fit, the rest was most of the work,
/// for the same result (what is skipped only ever subtracts 0).
fn cholesky_solve(a: &mut [f64], b: &[f64], keep: &[bool]) -> Vec<f64> {
    let d = keep.len();
    for j in (0..d).filter(|&j| !keep[j]) {
        a[j * d + j] = a[j * d + j].max(1e-12).sqrt();
    }
    let cols = kept(keep);
    for (c, &j) in cols.iter().enumerate() {
        let mut s = a[j * d + j];
        for &k in &cols[..c] {
            s -= a[j * d + k] * a[j * d + k];
        }
        let diag = s.max(1e-12).sqrt();
        a[j * d + j] = diag;
        for &i in &cols[c + 1..] {
            let mut s = a[i * d + j];
            for &k in &cols[..c] {
                s -= a[i * d + k] * a[j * d + k];
            }
            a[i * d + j] = s / diag;
        }
    }
    let mut y = vec![0.0; d];
    for (c, &i) in cols.iter().enumerate() {
        let mut s = b[i];
        for &k in &cols[..c] {
            s -= a[i * d + k] * y[k];
        }
        y[i] = s / a[i * d + i];
    }
    let mut x = vec![0.0; d];
    for (c, &i) in cols.iter().enumerate().rev() {
        let mut s = y[i];
        for &k in &cols[c + 1..] {
            s -= a[k * d + i] * x[k];
        }
        x[i] = s / a[i * d + i];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A fit of 4 features of which 2 are kept (the others say nothing of the peak) computes
    /// on those 2 alone: the same coefficients, factor, leave-one-out errors and distances to
    /// the bit as computed on all 4. A scheduler that estimates differently once it is made
    /// faster would be a new model, judged by the packing bench, not a faster one.
    #[test]
    fn a_fit_computed_on_its_own_columns_alone_is_the_fit_computed_on_every_column() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let data: VecDeque<Measured> = (0..40)
            .map(|_| {
                let x: Features = (0..4).map(|_| rng.gen_range(0.0..1.0)).collect();
                let gib = 1.0 + 6.0 * x[0] * x[0] + 2.0 * x[2] + 0.02 * rng.gen_range(-1.0..1.0);
                Measured {
                    x,
                    peak: (gib * (1u64 << 30) as f64) as u64,
                    running: None,
                }
            })
            .collect();
        let keep = vec![true, false, true, false];
        let every = ridge(&data, &Normal::new(&data, &[]), keep.clone(), vec![]);
        let own = ridge(&data, &Normal::on(&data, &[], Some(&keep)), keep, vec![]);
        assert_eq!(every.beta, own.beta);
        assert_eq!(every.chol, own.chol);
        assert_eq!(every.scores, own.scores);
        assert_eq!(own.active.len(), 2, "{:?}", own.active);
        for _ in 0..20 {
            let x: Features = (0..4).map(|_| rng.gen_range(0.0..1.0)).collect();
            let cx = own.compact(&x);
            for (i, (xi, _)) in own.residuals.iter().enumerate() {
                let on_every_column = (xi.iter().zip(&x).zip(&own.beta))
                    .map(|((a, b), w)| (w * (a - b)).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert_eq!(on_every_column, own.distance_to(i, &cx));
                assert_eq!(on_every_column, own.distance(xi, &x));
            }
            assert_eq!(every.predict(&x), own.predict(&x));
            assert_eq!(every.unexplored(&x), own.unexplored(&x));
            // Off the fit's columns, what is skipped is 0: on every column, as before, the same.
            let xc = mask(&x, &own.keep);
            assert_eq!(
                forward_norm(&own.chol, &xc, 4, &[0, 2]),
                forward_norm(&own.chol, &xc, 4, &[0, 1, 2, 3])
            );
        }
    }

    #[test]
    fn a_system_diagonal_off_the_fits_columns_is_solved_on_them_alone_as_on_every_column() {
        let lambda = 0.1;
        let a = vec![
            4.0, 0.0, 2.0, 0.0, //
            0.0, lambda, 0.0, 0.0, //
            2.0, 0.0, 3.0, 0.0, //
            0.0, 0.0, 0.0, lambda,
        ];
        let b = [2.0, 0.0, 3.0, 0.0];
        let (mut on_fit, mut on_every) = (a.clone(), a);
        let x = cholesky_solve(&mut on_fit, &b, &[true, false, true, false]);
        assert_eq!(x, cholesky_solve(&mut on_every, &b, &[true; 4]));
        assert_eq!(on_fit, on_every);
        assert!(
            (x[0] - 0.0).abs() < 1e-12 && (x[2] - 1.0).abs() < 1e-12,
            "{x:?}"
        );
    }

    #[test]
    fn cholesky_solves_a_small_system() {
        let mut a = vec![4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&mut a, &[2.0, 3.0], &[true, true]);
        assert!(
            (x[0] - 0.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12,
            "{x:?}"
        );
    }
}
