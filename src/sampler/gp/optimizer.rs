//! The acquisition's optimizer (Optuna's `_gp/optim_mixed.py`): 2048 quasi-random points of
//! the space; the best of them, the given warm starts (the best trial) and up to 8 more drawn
//! by a roulette weighted by `exp(acqf - max)` start a local search each; the best point any
//! search ends at is the proposal.
//!
//! A local search alternates, until nothing moves: L-BFGS-B over the continuous params
//! (preconditioned: in units of the objective GP's length scales, the box [0, 1/l]; `pgtol`
//! 1e-2, 200 iterations), then each discrete param on its own: every other value when it has
//! at most 16 (and for a categorical), else Brent's line search over the grid's piecewise
//! linear interpolation (SciPy's `minimize_scalar(method="brent")`), ending on the nearest grid
//! value. It stops when a pass over every param changed nothing since that param last did.
//!
//! Params pinned by the caller (a trial's enqueued values) keep their coordinate throughout.

use super::acquisition::Acquisition;
use super::lbfgsb::{self, Options};
use super::space::{Dim, Space};
use rand::Rng;

/// Optuna's `n_preliminary_samples`.
const PRELIMINARY: usize = 2048;
/// Optuna's `n_local_search`.
const LOCAL_SEARCHES: usize = 10;
/// Optuna's `tol`.
const TOL: f64 = 1e-4;
/// Optuna's limit of alternations per local search.
const MAX_ROUNDS: usize = 100;
/// A discrete param with at most this many values is searched exhaustively.
const EXHAUSTIVE: u64 = 16;

/// The acquisition over the space, with the coordinates that move.
pub(super) struct Problem<'a> {
    pub(super) acqf: &'a Acquisition,
    pub(super) space: &'a Space,
    /// A pinned coordinate's value, per param (`None`: free).
    pub(super) pinned: &'a [Option<f64>],
}

impl Problem<'_> {
    fn continuous(&self) -> Vec<usize> {
        (0..self.space.dim())
            .filter(|&i| self.pinned[i].is_none() && self.space.dims[i].is_continuous())
            .collect()
    }

    fn discrete(&self) -> Vec<usize> {
        (0..self.space.dim())
            .filter(|&i| self.pinned[i].is_none() && !self.space.dims[i].is_continuous())
            .collect()
    }
}

/// The best point found and its acquisition value. `seed` picks the quasi-random points; `rng`
/// draws the roulette.
pub(super) fn optimize(
    p: &Problem<'_>,
    warm: &[Vec<f64>],
    seed: u32,
    rng: &mut impl Rng,
) -> (Vec<f64>, f64) {
    let mut xs = p.space.sample(PRELIMINARY, seed);
    for x in &mut xs {
        for (c, pin) in x.iter_mut().zip(p.pinned) {
            if let Some(v) = pin {
                *c = *v;
            }
        }
    }
    let f: Vec<f64> = xs.iter().map(|x| p.acqf.value(x)).collect();
    let max_i = argmax(&f);
    let mut starts = vec![max_i];
    // The roulette: exp(f - max), the best left out; without replacement.
    let mut weights: Vec<f64> = f
        .iter()
        .map(|v| {
            let w = (v - f[max_i]).exp();
            if w.is_finite() {
                w
            } else {
                0.0
            }
        })
        .collect();
    weights[max_i] = 0.0;
    let extra = LOCAL_SEARCHES
        .saturating_sub(warm.len() + 1)
        .min(weights.iter().filter(|w| **w > 0.0).count());
    for _ in 0..extra {
        let total: f64 = weights.iter().sum();
        let mut u = rng.gen::<f64>() * total;
        let mut pick = weights.iter().rposition(|w| *w > 0.0).unwrap_or(0);
        for (i, w) in weights.iter().enumerate() {
            if *w > 0.0 && u < *w {
                pick = i;
                break;
            }
            u -= w;
        }
        starts.push(pick);
        weights[pick] = 0.0;
    }
    let mut inits: Vec<(Vec<f64>, f64)> = starts.iter().map(|&i| (xs[i].clone(), f[i])).collect();
    for w in warm {
        inits.push((w.clone(), p.acqf.value(w)));
    }
    let (cont, disc) = (p.continuous(), p.discrete());
    let mut best: Option<(Vec<f64>, f64)> = None;
    for (x, fx) in inits {
        let (x, fx) = local_search(p, &cont, &disc, x, fx);
        if best.as_ref().is_none_or(|b| fx > b.1) {
            best = Some((x, fx));
        }
    }
    best.expect("at least the best preliminary point")
}

/// The first index of the largest value (NaN never wins; all NaN: 0).
fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] || v[best].is_nan() {
            best = i;
        }
    }
    best
}

fn local_search(
    p: &Problem<'_>,
    cont: &[usize],
    disc: &[usize],
    mut x: Vec<f64>,
    mut fx: f64,
) -> (Vec<f64>, f64) {
    // The last param that moved: `None` for the continuous ones.
    let mut last: Option<usize> = None;
    for _ in 0..MAX_ROUNDS {
        if gradient_ascent(p, cont, &mut x, &mut fx) {
            last = None;
        }
        for &i in disc {
            if last == Some(i) {
                return (x, fx);
            }
            if discrete_search(p, i, &mut x, &mut fx) {
                last = Some(i);
            }
        }
        if last.is_none() {
            break;
        }
    }
    (x, fx)
}

/// L-BFGS-B over the continuous params, in units of their length scales; whether it improved.
fn gradient_ascent(p: &Problem<'_>, cont: &[usize], x: &mut [f64], fx: &mut f64) -> bool {
    if cont.is_empty() {
        return false;
    }
    let l: Vec<f64> = cont.iter().map(|&i| p.acqf.length_scales[i]).collect();
    let z0: Vec<f64> = cont.iter().zip(&l).map(|(&i, l)| x[i] / l).collect();
    let bounds: Vec<(f64, f64)> = l.iter().map(|l| (0.0, 1.0 / l)).collect();
    let base = x.to_vec();
    let mut full = vec![0.0; x.len()];
    let mut neg = |z: &[f64], g: &mut [f64]| {
        let mut xt = base.clone();
        for ((&i, &zi), l) in cont.iter().zip(z).zip(&l) {
            xt[i] = zi * l;
        }
        let v = p.acqf.value_grad(&xt, &mut full);
        for ((gi, &i), l) in g.iter_mut().zip(cont).zip(&l) {
            *gi = -full[i] * l;
        }
        if v.is_nan() {
            f64::INFINITY
        } else {
            -v
        }
    };
    let opts = Options {
        pgtol: TOL.sqrt(),
        max_iter: 200,
        ..Options::default()
    };
    let out = lbfgsb::minimize(&mut neg, &z0, Some(&bounds), &opts);
    let f = -out.f;
    if out.iterations > 0 && f > *fx {
        for ((&i, &zi), l) in cont.iter().zip(&out.x).zip(&l) {
            x[i] = zi * l;
        }
        *fx = f;
        true
    } else {
        false
    }
}

/// One discrete param searched with the others held; whether it improved.
fn discrete_search(p: &Problem<'_>, i: usize, x: &mut [f64], fx: &mut f64) -> bool {
    let dim = &p.space.dims[i];
    let Some(len) = dim.grid_len() else {
        return false;
    };
    if len <= 1 {
        return false;
    }
    let mut eval = |k: u64| {
        let mut xt = x.to_vec();
        xt[i] = dim.grid(k);
        p.acqf.value(&xt)
    };
    let current = dim.nearest(x[i]);
    let (k, f) = if dim.is_categorical() || len <= EXHAUSTIVE {
        // Every other value; the first best wins.
        let mut best: Option<(u64, f64)> = None;
        for k in (0..len).filter(|&k| dim.grid(k) != x[i]) {
            let f = eval(k);
            if best.is_none_or(|b| f > b.1) {
                best = Some((k, f));
            }
        }
        match best {
            Some(b) => b,
            None => return false,
        }
    } else {
        line_search(dim, len, current, *fx, &mut eval)
    };
    if k != current && f > *fx {
        x[i] = dim.grid(k);
        *fx = f;
        true
    } else {
        false
    }
}

/// Optuna's `_discrete_line_search`: Brent's method on the grid's linear interpolation of
/// `-acqf`, from the bracket (below the grid, the current value, above the grid), then the
/// nearest grid value. Returns it and its value.
fn line_search(
    dim: &Dim,
    len: u64,
    current: u64,
    f_current: f64,
    eval: &mut dyn FnMut(u64) -> f64,
) -> (u64, f64) {
    let last = len - 1;
    let mut cache: std::collections::HashMap<u64, f64> = std::collections::HashMap::new();
    cache.insert(current, -f_current);
    let mut neg = |k: u64| *cache.entry(k).or_insert_with(|| -eval(k));
    let (g0, gl) = (dim.grid(0), dim.grid(last));
    let mut interp = |v: f64| {
        if !(v >= g0 && v <= gl) {
            return f64::INFINITY;
        }
        // The first grid value at or above v (numpy's searchsorted), kept in [1, last].
        let mut right = dim.nearest(v);
        if dim.grid(right) < v {
            right += 1;
        }
        while right > 1 && dim.grid(right - 1) >= v {
            right -= 1;
        }
        let right = right.clamp(1, last);
        let left = right - 1;
        let (fl, fr) = (neg(left), neg(right));
        let (a, b) = (dim.grid(left), dim.grid(right));
        let wl = (b - v) / (b - a);
        wl * fl + (1.0 - wl) * fr
    };
    let min_step = (dim.grid(1) - g0).min(gl - dim.grid(last - 1));
    let x = if f_current.is_finite() {
        brent(
            &mut interp,
            g0 - 1e-12,
            dim.grid(current),
            gl + 1e-12,
            -f_current,
            min_step / 4.0,
        )
    } else {
        dim.grid(current)
    };
    let k = dim.nearest(x);
    let f = -neg(k);
    (k, f)
}

/// SciPy's `Brent.optimize` from a valid bracket `a < b < c` (`f(b)` below both ends), relative
/// tolerance `tol`, 500 iterations at most.
fn brent(f: &mut dyn FnMut(f64) -> f64, xa: f64, xb: f64, xc: f64, fb: f64, tol: f64) -> f64 {
    const MINTOL: f64 = 1e-11;
    const CG: f64 = 0.381_966_0;
    let (mut x, mut w, mut v) = (xb, xb, xb);
    let (mut fx, mut fw, mut fv) = (fb, fb, fb);
    let (mut a, mut b) = if xa < xc { (xa, xc) } else { (xc, xa) };
    let mut deltax: f64 = 0.0;
    let mut rat: f64 = 0.0;
    for _ in 0..500 {
        let tol1 = tol * x.abs() + MINTOL;
        let tol2 = 2.0 * tol1;
        let xmid = 0.5 * (a + b);
        if (x - xmid).abs() < tol2 - 0.5 * (b - a) {
            break;
        }
        if deltax.abs() <= tol1 {
            deltax = if x >= xmid { a - x } else { b - x };
            rat = CG * deltax;
        } else {
            let tmp1 = (x - w) * (fx - fv);
            let mut tmp2 = (x - v) * (fx - fw);
            let mut p = (x - v) * tmp2 - (x - w) * tmp1;
            tmp2 = 2.0 * (tmp2 - tmp1);
            if tmp2 > 0.0 {
                p = -p;
            }
            tmp2 = tmp2.abs();
            let dx_temp = deltax;
            deltax = rat;
            if p > tmp2 * (a - x) && p < tmp2 * (b - x) && p.abs() < (0.5 * tmp2 * dx_temp).abs() {
                rat = p / tmp2;
                let u = x + rat;
                if (u - a) < tol2 || (b - u) < tol2 {
                    rat = if xmid - x >= 0.0 { tol1 } else { -tol1 };
                }
            } else {
                deltax = if x >= xmid { a - x } else { b - x };
                rat = CG * deltax;
            }
        }
        let u = if rat.abs() < tol1 {
            if rat >= 0.0 {
                x + tol1
            } else {
                x - tol1
            }
        } else {
            x + rat
        };
        let fu = f(u);
        if fu > fx {
            if u < x {
                a = u;
            } else {
                b = u;
            }
            if fu <= fw || w == x {
                (v, w, fv, fw) = (w, u, fw, fu);
            } else if fu <= fv || v == x || v == w {
                (v, fv) = (u, fu);
            }
        } else {
            if u >= x {
                a = x;
            } else {
                b = x;
            }
            (v, w, x) = (w, x, u);
            (fv, fw, fx) = (fw, fx, fu);
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brent_finds_a_parabola_minimum_from_a_bracket() {
        let mut calls = 0;
        let mut f = |x: f64| {
            calls += 1;
            (x - 0.37).powi(2)
        };
        let x = brent(&mut f, -1.0, 0.0, 2.0, 0.37f64.powi(2), 1e-8);
        assert!((x - 0.37).abs() < 1e-6, "{x}");
        assert!(calls < 50, "{calls}");
    }

    #[test]
    fn argmax_takes_the_first_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[f64::NAN, 2.0, 1.0]), 1);
        assert_eq!(argmax(&[f64::NEG_INFINITY; 3]), 0);
    }
}
