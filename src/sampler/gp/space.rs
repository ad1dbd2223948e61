//! The search space as the GP sees it (Optuna's `_gp/search_space.py`): every param mapped to
//! one coordinate. A numerical param is scaled to [0, 1] (in log space for a log one), over its
//! range widened by half a step on each side when it has a step (ints always do), so that each
//! grid value owns an equal share; a categorical param is its choice's index, which only the
//! kernel's 0-or-1 distance reads. A coordinate is *continuous* (a float without a step) or
//! *discrete* (a grid of values: ints, stepped floats, categoricals), which the acquisition's
//! optimizer searches differently.
//!
//! Beyond Optuna: a stepped float with `log` and a log int with a step above 1, which Optuna
//! refuses to build, are mapped on the linear grid (as the random sampler draws them); a
//! stepped float's value maps back to its grid point exactly rather than only clipped; a grid
//! is never materialised, so a huge int range costs nothing.

use super::qmc;
use crate::study::space::{last_grid_index, last_int_index};
use crate::study::{Distribution, ParamValue, Params};

/// One coordinate.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Dim {
    Categorical {
        n: usize,
    },
    Numeric {
        low: f64,
        /// The last grid value for a stepped param (Optuna lowers `high` to it).
        high: f64,
        /// 0 for a continuous float.
        step: f64,
        log: bool,
        int: bool,
        /// The scaled range's ends (logs for a log param).
        lo: f64,
        hi: f64,
        /// The grid's last index (0 for a continuous float).
        last: u64,
    },
}

impl Dim {
    pub(super) fn new(dist: &Distribution) -> Dim {
        let numeric = |low: f64, high: f64, step: f64, log: bool, int: bool, last: u64| {
            let (mut lo, mut hi) = (low - 0.5 * step, high + 0.5 * step);
            if log {
                (lo, hi) = (lo.ln(), hi.ln());
            }
            Dim::Numeric {
                low,
                high,
                step,
                log,
                int,
                lo,
                hi,
                last,
            }
        };
        match *dist {
            Distribution::Categorical { ref choices } => Dim::Categorical { n: choices.len() },
            Distribution::Float {
                low,
                high,
                step: None,
                log,
            } => numeric(low, high, 0.0, log, false, 0),
            Distribution::Float {
                low,
                high,
                step: Some(s),
                ..
            } => {
                let last = last_grid_index(low, high, s);
                numeric(low, low + last as f64 * s, s, false, false, last)
            }
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => {
                let last = last_int_index(low, high, step);
                let high = low as f64 + last as f64 * step as f64;
                numeric(low as f64, high, step as f64, log && step == 1, true, last)
            }
        }
    }

    pub(super) fn is_categorical(&self) -> bool {
        matches!(self, Dim::Categorical { .. })
    }

    pub(super) fn is_continuous(&self) -> bool {
        matches!(self, Dim::Numeric { step, .. } if *step == 0.0)
    }

    /// A value of the param (a number; a categorical's index) as its coordinate.
    pub(super) fn normalize(&self, v: f64) -> f64 {
        match *self {
            Dim::Categorical { .. } => v,
            Dim::Numeric { log, lo, hi, .. } => {
                let v = if log { v.ln() } else { v };
                if hi == lo {
                    0.5
                } else {
                    (v - lo) / (hi - lo)
                }
            }
        }
    }

    /// A coordinate as a value (Optuna's `_unnormalize_one_param`), not yet clipped or rounded.
    fn unnormalize_raw(&self, x: f64) -> f64 {
        match *self {
            Dim::Categorical { .. } => x,
            Dim::Numeric { log, lo, hi, .. } => {
                let v = x * (hi - lo) + lo;
                if log {
                    v.exp()
                } else {
                    v
                }
            }
        }
    }

    /// The number of grid values (`None`: continuous).
    pub(super) fn grid_len(&self) -> Option<u64> {
        match *self {
            Dim::Categorical { n } => Some(n as u64),
            Dim::Numeric { step, last, .. } if step > 0.0 => Some(last.saturating_add(1)),
            Dim::Numeric { .. } => None,
        }
    }

    /// Grid value `k`'s coordinate.
    pub(super) fn grid(&self, k: u64) -> f64 {
        match *self {
            Dim::Categorical { .. } => k as f64,
            Dim::Numeric { low, step, .. } => self.normalize(low + k as f64 * step),
        }
    }

    /// The grid index whose coordinate is nearest to `x` (the left one on a tie, as Optuna's
    /// `find_nearest_index`).
    pub(super) fn nearest(&self, x: f64) -> u64 {
        let last = self.grid_len().unwrap_or(1).saturating_sub(1);
        let guess = match *self {
            Dim::Categorical { .. } => x.round(),
            Dim::Numeric { low, step, .. } => ((self.unnormalize_raw(x) - low) / step).floor(),
        };
        let k = if guess.is_nan() {
            0
        } else {
            guess.clamp(0.0, last as f64) as u64
        };
        // The candidates either side of the guess.
        let mut best = k;
        for c in [k.saturating_sub(1), k + 1]
            .into_iter()
            .filter(|&c| c <= last)
        {
            let (dc, db) = ((x - self.grid(c)).abs(), (x - self.grid(best)).abs());
            if dc < db || (dc == db && c < best) {
                best = c;
            }
        }
        best
    }

    /// `x` moved to the nearest grid value's coordinate (Optuna's
    /// `_round_one_normalized_param`; the categorical's `floor(u * n)` of a uniform `u` is the
    /// caller's).
    pub(super) fn round(&self, x: f64) -> f64 {
        match *self {
            Dim::Numeric {
                low, high, step, ..
            } if step > 0.0 => {
                let v = self.unnormalize_raw(x);
                let v = (((v - low + 0.5 * step) / step).floor() * step + low).clamp(low, high);
                self.normalize(v)
            }
            _ => x,
        }
    }

    /// A coordinate back as the param's value, in its distribution.
    pub(super) fn value(&self, x: f64) -> ParamValue {
        match *self {
            Dim::Categorical { n } => ParamValue::Choice((x.round().max(0.0) as usize).min(n - 1)),
            Dim::Numeric {
                low,
                high,
                step,
                int,
                ..
            } => {
                let v = self.unnormalize_raw(x).clamp(low, high);
                if int {
                    // On the grid: `low + k * step`, as the int's value must be.
                    let k = ((v - low) / step).round();
                    ParamValue::Int((low + k * step) as i64)
                } else if step > 0.0 {
                    let k = ((v - low) / step).round();
                    ParamValue::Float((low + k * step).clamp(low, high))
                } else {
                    ParamValue::Float(v)
                }
            }
        }
    }
}

/// The GP's search space: named params, each one coordinate, in name order.
#[derive(Debug, Clone)]
pub(super) struct Space {
    pub(super) names: Vec<String>,
    pub(super) dists: Vec<Distribution>,
    pub(super) dims: Vec<Dim>,
}

impl Space {
    pub(super) fn new(params: Vec<(String, Distribution)>) -> Space {
        let dims = params.iter().map(|(_, d)| Dim::new(d)).collect();
        let (names, dists) = params.into_iter().unzip();
        Space { names, dists, dims }
    }

    pub(super) fn dim(&self) -> usize {
        self.dims.len()
    }

    pub(super) fn is_categorical(&self) -> Vec<bool> {
        self.dims.iter().map(Dim::is_categorical).collect()
    }

    /// A trial's params as coordinates; `None` when one is missing or not in its distribution.
    pub(super) fn normalize(&self, params: &Params) -> Option<Vec<f64>> {
        self.names
            .iter()
            .zip(&self.dists)
            .zip(&self.dims)
            .map(|((name, dist), dim)| {
                let v = params.get(name)?;
                if !dist.contains(v) {
                    return None;
                }
                Some(dim.normalize(dist.to_internal(v)))
            })
            .collect()
    }

    /// Coordinates back as params.
    pub(super) fn values(&self, x: &[f64]) -> Vec<(String, Distribution, ParamValue)> {
        self.names
            .iter()
            .zip(&self.dists)
            .zip(&self.dims)
            .zip(x)
            .map(|(((n, d), dim), &x)| (n.clone(), d.clone(), dim.value(x)))
            .collect()
    }

    /// `n` quasi-random points of the space (Optuna's `sample_normalized_params`): scrambled
    /// Sobol points, categoricals as `floor(u * choices)`, grids rounded.
    pub(super) fn sample(&self, n: usize, seed: u32) -> Vec<Vec<f64>> {
        let mut pts = qmc::uniform(n, self.dim(), seed);
        for p in &mut pts {
            for (x, dim) in p.iter_mut().zip(&self.dims) {
                *x = match *dim {
                    Dim::Categorical { n } => (*x * n as f64).floor().min(n as f64 - 1.0),
                    _ => dim.round(*x),
                };
            }
        }
        pts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::test_util::{cat, float, int};

    #[test]
    fn a_grid_owns_equal_shares_of_the_unit_interval() {
        let d = Dim::new(&int(0, 3, 1, false));
        // [-0.5, 3.5]: 0 -> 0.125, 3 -> 0.875.
        assert_eq!(d.normalize(0.0), 0.125);
        assert_eq!(d.normalize(3.0), 0.875);
        assert_eq!(d.grid_len(), Some(4));
        assert_eq!(d.nearest(0.49), 1);
        assert_eq!(d.nearest(0.51), 2);
        assert_eq!(d.nearest(-3.0), 0);
        assert_eq!(d.nearest(7.0), 3);
        assert_eq!(d.round(0.26), 0.375);
        assert_eq!(d.value(0.99), ParamValue::Int(3));
        // A stepped float whose high is off the grid ends at its last grid value.
        let f = Dim::new(&float(0.0, 1.0, Some(0.4), false));
        assert_eq!(f.grid_len(), Some(3));
        assert_eq!(f.value(1.0), ParamValue::Float(0.8));
        assert_eq!(f.value(0.45), ParamValue::Float(0.4));
        // Log ints: in log space over [low - 1/2, high + 1/2].
        let l = Dim::new(&int(1, 1000, 1, true));
        let want = (1.0f64.ln() - 0.5f64.ln()) / (1000.5f64.ln() - 0.5f64.ln());
        assert!((l.normalize(1.0) - want).abs() < 1e-15);
        assert_eq!(l.value(l.normalize(137.0)), ParamValue::Int(137));
        // A huge range costs nothing.
        let h = Dim::new(&int(0, 1 << 50, 1, false));
        assert_eq!(h.grid_len(), Some((1 << 50) + 1));
        assert_eq!(h.nearest(h.grid(123_456_789)), 123_456_789);
    }

    #[test]
    fn what_refuses_to_be_a_log_grid_is_a_linear_one() {
        let f = Dim::new(&float(1.0, 2.0, Some(0.5), true));
        assert!(matches!(f, Dim::Numeric { log: false, .. }));
        let i = Dim::new(&int(1, 9, 2, true));
        assert!(matches!(i, Dim::Numeric { log: false, .. }));
        assert_eq!(i.value(1.0), ParamValue::Int(9));
    }

    #[test]
    fn samples_are_in_the_space() {
        let space = Space::new(vec![
            ("c".into(), cat(3)),
            ("f".into(), float(0.0, 1.0, None, false)),
            ("i".into(), int(2, 11, 3, false)),
        ]);
        let pts = space.sample(256, 3);
        let mut counts = [0; 3];
        for p in &pts {
            counts[p[0] as usize] += 1;
            let v = space.values(p);
            for (_, d, v) in &v {
                assert!(d.contains(v), "{v:?}");
            }
            assert_eq!(
                space
                    .normalize(&v.iter().map(|(n, _, v)| (n.clone(), v.clone())).collect())
                    .unwrap()[2],
                p[2]
            );
        }
        assert!(counts.iter().all(|&c| c > 70), "{counts:?}");
    }
}
