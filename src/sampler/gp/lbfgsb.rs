//! A small box-constrained L-BFGS, standing in for SciPy's L-BFGS-B (`fmin_l_bfgs_b`), which
//! Optuna's GP calls twice: to fit the kernel's hyperparameters (no bounds) and to climb the
//! acquisition function over the continuous params (bounds: the unit box, rescaled).
//!
//! No Rust crate does this job well: `argmin`'s L-BFGS has no bounds, and the L-BFGS-B crates
//! wrap the Fortran or C original (a Fortran toolchain to build) or are young single-author
//! ports. This one is the projected ("active set") variant: variables at a bound whose gradient
//! pushes outward are held there; the others take the two-loop L-BFGS direction, and the step
//! along it stops where the first free variable reaches its bound. SciPy's variant finds a
//! generalized Cauchy point first and minimizes in the subspace it leaves free; on the small,
//! smooth problems here both end at the same points (the tests below check the optima against
//! known ones, and `super::tests` the fitted hyperparameters against Optuna's).
//!
//! SciPy's settings and stopping rules are kept: memory `m = 10`; stop when the projected
//! gradient's largest component is at most `pgtol`, or when an iteration lowers `f` by at most
//! `factr * eps` relative to `max(|f|, 1)`; a line search meeting the strong Wolfe conditions
//! (`c1 = 1e-3`, `c2 = 0.9`, as SciPy's `dcsrch`) within `max_ls` evaluations; the first step of
//! length 1 / |d|, then 1. A point where `f` is not finite (a kernel matrix that lost its
//! positive definiteness) counts as too far, and the search steps back.

use std::collections::VecDeque;

/// SciPy's knobs, with its defaults.
#[derive(Debug, Clone)]
pub(super) struct Options {
    pub(super) m: usize,
    pub(super) factr: f64,
    pub(super) pgtol: f64,
    pub(super) max_iter: usize,
    pub(super) max_ls: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            m: 10,
            factr: 1e7,
            pgtol: 1e-5,
            max_iter: 15000,
            max_ls: 20,
        }
    }
}

/// Where the search ended.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    pub(super) x: Vec<f64>,
    pub(super) f: f64,
    /// Iterations that moved (SciPy's `nit`).
    pub(super) iterations: usize,
    /// Stopped by the gradient or the decrease rule (SciPy's `success`), not by the
    /// iteration limit or a failed line search.
    pub(super) converged: bool,
}

const C1: f64 = 1e-3;
const C2: f64 = 0.9;

/// A point of the line search: its step, value, directional derivative and gradient.
#[derive(Clone)]
struct Probe {
    t: f64,
    f: f64,
    d: f64,
    g: Vec<f64>,
}

/// The box `[lo, hi]` per variable (infinite ends for none).
struct Bounds(Vec<(f64, f64)>);

impl Bounds {
    fn clamp(&self, x: &mut [f64]) {
        for (v, &(lo, hi)) in x.iter_mut().zip(&self.0) {
            *v = v.clamp(lo, hi);
        }
    }

    /// The largest component of the projected gradient `P(x - g) - x`.
    fn pg_norm(&self, x: &[f64], g: &[f64]) -> f64 {
        x.iter()
            .zip(g)
            .zip(&self.0)
            .map(|((&x, &g), &(lo, hi))| ((x - g).clamp(lo, hi) - x).abs())
            .fold(0.0, f64::max)
    }

    /// Whether variable `i` is held at a bound: there, and pushed outward by `g`.
    fn held(&self, i: usize, x: f64, g: f64) -> bool {
        let (lo, hi) = self.0[i];
        (x <= lo && g > 0.0) || (x >= hi && g < 0.0)
    }

    /// The longest step along `d` from `x` that stays in the box.
    fn max_step(&self, x: &[f64], d: &[f64]) -> f64 {
        let mut t = f64::INFINITY;
        for ((&x, &d), &(lo, hi)) in x.iter().zip(d).zip(&self.0) {
            if d > 0.0 {
                t = t.min((hi - x) / d);
            } else if d < 0.0 {
                t = t.min((lo - x) / d);
            }
        }
        t.max(0.0)
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The two-loop recursion: `-H g` over the free variables (`free[i]`), zero elsewhere.
fn direction(g: &[f64], free: &[bool], memory: &VecDeque<(Vec<f64>, Vec<f64>, f64)>) -> Vec<f64> {
    let mut q: Vec<f64> = g
        .iter()
        .zip(free)
        .map(|(&g, &f)| if f { g } else { 0.0 })
        .collect();
    let mut alpha = vec![0.0; memory.len()];
    for (k, (s, y, rho)) in memory.iter().enumerate().rev() {
        alpha[k] = rho * dot(s, &q);
        for (qi, yi) in q.iter_mut().zip(y) {
            *qi -= alpha[k] * yi;
        }
    }
    if let Some((s, y, _)) = memory.back() {
        let gamma = dot(s, y) / dot(y, y);
        q.iter_mut().for_each(|v| *v *= gamma);
    }
    for (k, (s, y, rho)) in memory.iter().enumerate() {
        let beta = rho * dot(y, &q);
        for (qi, si) in q.iter_mut().zip(s) {
            *qi += (alpha[k] - beta) * si;
        }
    }
    q.iter()
        .zip(free)
        .map(|(&v, &f)| if f { -v } else { 0.0 })
        .collect()
}

/// A trial step between `lo` and `hi`: the cubic (or quadratic) interpolation's minimizer,
/// kept a tenth of the interval away from either end, else the middle.
fn interpolate(lo: &Probe, hi: &Probe) -> f64 {
    let (a, b) = (lo.t, hi.t);
    let w = b - a;
    let guess = if hi.f.is_finite() && hi.d.is_finite() {
        let d1 = lo.d + hi.d - 3.0 * (lo.f - hi.f) / (a - b);
        let disc = d1 * d1 - lo.d * hi.d;
        if disc >= 0.0 {
            let d2 = w.signum() * disc.sqrt();
            b - w * (hi.d + d2 - d1) / (hi.d - lo.d + 2.0 * d2)
        } else {
            f64::NAN
        }
    } else if hi.f.is_finite() {
        let denom = 2.0 * (hi.f - lo.f - lo.d * w);
        a - lo.d * w * w / denom
    } else {
        f64::NAN
    };
    let (l, h) = (a.min(b) + 0.1 * w.abs(), a.max(b) - 0.1 * w.abs());
    if guess.is_finite() && guess >= l && guess <= h {
        guess
    } else {
        0.5 * (a + b)
    }
}

/// The strong Wolfe line search along `x + t d` for `t` in (0, `t_max`], from `t0`.
fn line_search(
    eval: &mut dyn FnMut(f64) -> Probe,
    f0: f64,
    d0: f64,
    t0: f64,
    t_max: f64,
    max_evals: usize,
) -> Option<Probe> {
    let armijo = |p: &Probe| p.f.is_finite() && p.f <= f0 + C1 * p.t * d0;
    let mut evals = 0;
    let mut prev = Probe {
        t: 0.0,
        f: f0,
        d: d0,
        g: Vec::new(),
    };
    let mut t = t0;
    let (mut lo, mut hi) = loop {
        if evals >= max_evals {
            return (prev.t > 0.0).then_some(prev);
        }
        let p = eval(t);
        evals += 1;
        if !armijo(&p) || (prev.t > 0.0 && p.f >= prev.f) {
            break (prev, p);
        }
        if p.d.abs() <= -C2 * d0 {
            return Some(p);
        }
        if p.d >= 0.0 {
            break (p, prev);
        }
        if t >= t_max {
            // Still going down at the boundary: stop there.
            return Some(p);
        }
        t = (4.0 * t).min(t_max);
        prev = p;
    };
    // Zoom: `lo` meets Armijo with the lowest value so far; the minimum lies between.
    loop {
        if evals >= max_evals || (hi.t - lo.t).abs() <= 1e-16 * lo.t.abs().max(1.0) {
            return (lo.t > 0.0).then_some(lo);
        }
        let p = eval(interpolate(&lo, &hi));
        evals += 1;
        if !armijo(&p) || p.f >= lo.f {
            hi = p;
        } else {
            if p.d.abs() <= -C2 * d0 {
                return Some(p);
            }
            if p.d * (hi.t - lo.t) >= 0.0 {
                hi = lo;
            }
            lo = p;
        }
    }
}

/// Minimizes `f` (`fg(x, grad)` returns `f(x)` and writes its gradient) from `x0` within
/// `bounds` (`None`: unbounded).
pub(super) fn minimize(
    fg: &mut dyn FnMut(&[f64], &mut [f64]) -> f64,
    x0: &[f64],
    bounds: Option<&[(f64, f64)]>,
    opts: &Options,
) -> Outcome {
    let n = x0.len();
    let bounds = Bounds(bounds.map_or_else(
        || vec![(f64::NEG_INFINITY, f64::INFINITY); n],
        <[(f64, f64)]>::to_vec,
    ));
    let mut x = x0.to_vec();
    bounds.clamp(&mut x);
    let mut g = vec![0.0; n];
    let mut f = fg(&x, &mut g);
    let mut out = Outcome {
        x: x.clone(),
        f,
        iterations: 0,
        converged: false,
    };
    if !f.is_finite() {
        return out;
    }
    let mut memory: VecDeque<(Vec<f64>, Vec<f64>, f64)> = VecDeque::new();
    loop {
        if bounds.pg_norm(&x, &g) <= opts.pgtol {
            out.converged = true;
            break;
        }
        if out.iterations >= opts.max_iter {
            break;
        }
        let free: Vec<bool> = (0..n).map(|i| !bounds.held(i, x[i], g[i])).collect();
        let mut d = direction(&g, &free, &memory);
        // A free variable at its bound cannot move outward either.
        for i in 0..n {
            let (lo, hi) = bounds.0[i];
            if (x[i] <= lo && d[i] < 0.0) || (x[i] >= hi && d[i] > 0.0) {
                d[i] = 0.0;
            }
        }
        // Not a descent direction (or NaN): start again from the steepest descent.
        let descent = |d0: f64| d0 < 0.0;
        let mut d0 = dot(&g, &d);
        if !descent(d0) {
            memory.clear();
            d = direction(&g, &free, &memory);
            d0 = dot(&g, &d);
            if !descent(d0) {
                break;
            }
        }
        let t_max = bounds.max_step(&x, &d);
        if t_max <= 0.0 {
            break;
        }
        let t0 = if memory.is_empty() {
            (1.0 / dot(&d, &d).sqrt()).min(t_max)
        } else {
            1.0f64.min(t_max)
        };
        let mut eval = |t: f64| {
            let mut xt: Vec<f64> = x.iter().zip(&d).map(|(x, d)| x + t * d).collect();
            bounds.clamp(&mut xt);
            let mut gt = vec![0.0; n];
            let ft = fg(&xt, &mut gt);
            Probe {
                t,
                f: ft,
                d: dot(&gt, &d),
                g: gt,
            }
        };
        let Some(p) = line_search(&mut eval, f, d0, t0, t_max, opts.max_ls) else {
            if memory.is_empty() {
                break;
            }
            // SciPy too starts again from the steepest descent once before giving up.
            memory.clear();
            continue;
        };
        let mut xn: Vec<f64> = x.iter().zip(&d).map(|(x, d)| x + p.t * d).collect();
        bounds.clamp(&mut xn);
        let s: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = p.g.iter().zip(&g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > f64::EPSILON * dot(&y, &y) {
            if memory.len() == opts.m {
                memory.pop_front();
            }
            memory.push_back((s, y, 1.0 / sy));
        }
        out.iterations += 1;
        let decrease = f - p.f;
        (x, f, g) = (xn, p.f, p.g);
        if decrease <= opts.factr * f64::EPSILON * f.abs().max(1.0) {
            out.converged = true;
            break;
        }
    }
    out.x = x;
    out.f = f;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rosenbrock(x: &[f64], g: &mut [f64]) -> f64 {
        let (a, b) = (x[0], x[1]);
        g[0] = -2.0 * (1.0 - a) - 400.0 * a * (b - a * a);
        g[1] = 200.0 * (b - a * a);
        (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2)
    }

    fn tight() -> Options {
        Options {
            pgtol: 1e-8,
            factr: 10.0,
            ..Options::default()
        }
    }

    #[test]
    fn finds_the_rosenbrock_minimum() {
        let out = minimize(&mut rosenbrock, &[-1.2, 1.0], None, &tight());
        assert!(out.converged);
        assert!(
            (out.x[0] - 1.0).abs() < 1e-5 && (out.x[1] - 1.0).abs() < 1e-5,
            "{:?}",
            out.x
        );
        assert!(out.iterations < 100, "{}", out.iterations);
    }

    #[test]
    fn stops_on_an_active_bound() {
        // The Rosenbrock valley with a <= 0.5: the minimum is at (0.5, 0.25).
        let b = [(-2.0, 0.5), (-2.0, 2.0)];
        let out = minimize(&mut rosenbrock, &[-1.2, 1.0], Some(&b), &tight());
        assert!(
            (out.x[0] - 0.5).abs() < 1e-9 && (out.x[1] - 0.25).abs() < 1e-5,
            "{:?}",
            out.x
        );
        // A separable quadratic whose minimum lies outside the box on two sides.
        let mut quad = |x: &[f64], g: &mut [f64]| {
            g[0] = 2.0 * (x[0] - 2.0);
            g[1] = 2.0 * (x[1] + 1.0);
            g[2] = 2.0 * (x[2] - 0.3);
            (x[0] - 2.0).powi(2) + (x[1] + 1.0).powi(2) + (x[2] - 0.3).powi(2)
        };
        let b = [(0.0, 1.0); 3];
        let out = minimize(&mut quad, &[0.5, 0.5, 0.9], Some(&b), &tight());
        assert_eq!(&out.x[..2], &[1.0, 0.0]);
        assert!((out.x[2] - 0.3).abs() < 1e-8, "{:?}", out.x);
        assert!(out.converged);
    }

    #[test]
    fn steps_back_from_where_the_function_is_not_finite() {
        // Defined for x > -1 only, the minimum at 0: a long first step lands where it is not.
        let mut f = |x: &[f64], g: &mut [f64]| {
            if x[0] <= -1.0 {
                return f64::INFINITY;
            }
            g[0] = 1.0 - 1.0 / (1.0 + x[0]);
            x[0] - (1.0 + x[0]).ln()
        };
        let out = minimize(&mut f, &[30.0], None, &tight());
        assert!(out.x[0].abs() < 1e-6, "{:?}", out.x);
        // Starting where it is not finite: nothing to do, the start comes back.
        let out = minimize(&mut f, &[-3.0], None, &tight());
        assert_eq!((out.x[0], out.iterations, out.converged), (-3.0, 0, false));
    }

    #[test]
    fn a_loose_gradient_tolerance_stops_early() {
        let loose = Options {
            pgtol: 1e-1,
            ..Options::default()
        };
        let out = minimize(&mut rosenbrock, &[-1.2, 1.0], None, &loose);
        let mut g = [0.0; 2];
        rosenbrock(&out.x, &mut g);
        assert!(
            out.converged && g.iter().all(|g| g.abs() <= 0.1 + 1e-12),
            "{g:?}"
        );
        let full = minimize(&mut rosenbrock, &[-1.2, 1.0], None, &tight());
        assert!(out.iterations <= full.iterations);
    }
}
