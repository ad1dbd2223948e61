//! Optuna's `MedianPruner` (`PercentilePruner(50.0, ..., n_min_trials=1)`,
//! `optuna/pruners/_percentile.py`): a trial whose best value so far is worse than the median of
//! what the completed trials reported at its last step is pruned. The completed trials' values
//! are kept per step, sorted, so a report costs a few O(log n) lookups, never a re-read.

use super::curve::{insert_sorted, Running};
use crate::study::Direction;
use std::collections::HashMap;

/// Optuna's `PercentilePruner` state, at the 50th percentile.
#[derive(Debug, Clone)]
pub(super) struct Median {
    pub(super) n_startup_trials: usize,
    pub(super) n_warmup_steps: i64,
    pub(super) interval_steps: i64,
    /// Number of COMPLETE trials (with or without intermediate values).
    pub(super) n_completed: usize,
    /// step -> the values COMPLETE trials reported at exactly that step.
    pub(super) by_step: HashMap<i64, StepValues>,
}

/// The values completed trials reported at one step.
#[derive(Debug, Clone, Default)]
pub(super) struct StepValues {
    /// How many completed trials reported this step, NaN values included (`n_min_trials` counts
    /// them: `len(intermediate_values)` in `_get_percentile_intermediate_result_over_trials`).
    pub(super) count: usize,
    /// The non-NaN values, sorted ascending (`np.nanpercentile` drops NaN).
    pub(super) sorted: Vec<f64>,
}

impl StepValues {
    fn insert(&mut self, value: f64) {
        self.count += 1;
        if !value.is_nan() {
            insert_sorted(&mut self.sorted, value);
        }
    }
}

impl Median {
    pub(super) fn new(n_startup_trials: usize, n_warmup_steps: i64, interval_steps: i64) -> Median {
        Median {
            n_startup_trials,
            n_warmup_steps: n_warmup_steps.max(0),
            interval_steps: interval_steps.max(1),
            n_completed: 0,
            by_step: HashMap::new(),
        }
    }

    /// A trial completed with this curve (pruned and failed trials' curves do not count).
    pub(super) fn completed(&mut self, trial: Option<&Running>) {
        self.n_completed += 1;
        for (step, value) in trial.iter().flat_map(|t| t.values.iter()) {
            self.by_step.entry(*step).or_default().insert(*value);
        }
    }
}

/// `PercentilePruner.prune` at the 50th percentile with `n_min_trials = 1`.
pub(super) fn median_prune(m: &Median, trial: &Running, direction: Direction) -> bool {
    let n_trials = m.n_completed;
    if n_trials == 0 || n_trials < m.n_startup_trials {
        return false;
    }
    let Some((step, _)) = trial.last() else {
        return false;
    };
    if step < m.n_warmup_steps {
        return false;
    }
    if !is_first_in_interval_step(
        step,
        trial.second_last_step(step),
        m.n_warmup_steps,
        m.interval_steps,
    ) {
        return false;
    }
    let best = trial.best;
    if best.is_nan() {
        return true;
    }
    let p = percentile_over_trials(m.by_step.get(&step), direction, 50.0, 1);
    if p.is_nan() {
        return false;
    }
    match direction {
        Direction::Maximize => best < p,
        Direction::Minimize => best > p,
    }
}

/// Optuna's `_is_first_in_interval_step`: whether `step` is the first step reported in its
/// interval window `[n_warmup_steps + k * interval_steps, n_warmup_steps + (k + 1) *
/// interval_steps)`, so that a check missed at a window's start happens at the first report after.
fn is_first_in_interval_step(
    step: i64,
    second_last_step: i64,
    n_warmup_steps: i64,
    interval_steps: i64,
) -> bool {
    let nearest_lower_pruning_step =
        (step - n_warmup_steps).div_euclid(interval_steps) * interval_steps + n_warmup_steps;
    second_last_step < nearest_lower_pruning_step
}

/// Optuna's `_get_percentile_intermediate_result_over_trials`: the `percentile` of the values
/// completed trials reported at exactly this step (`np.nanpercentile`), NaN if fewer than
/// `n_min_trials` reported it.
fn percentile_over_trials(
    at_step: Option<&StepValues>,
    direction: Direction,
    percentile: f64,
    n_min_trials: usize,
) -> f64 {
    let (count, sorted) = at_step.map_or((0, &[][..]), |s| (s.count, &s.sorted[..]));
    if count < n_min_trials {
        return f64::NAN;
    }
    let percentile = match direction {
        Direction::Maximize => 100.0 - percentile,
        Direction::Minimize => percentile,
    };
    nanpercentile_sorted(sorted, percentile)
}

/// `np.nanpercentile(values, q)` with the default `method="linear"`, given the non-NaN values
/// sorted ascending; NaN when there are none. Computed as NumPy does (`_compute_virtual_index`,
/// `_get_indexes`, `_lerp`) so the result is the same to the bit.
pub(super) fn nanpercentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let quantile = q / 100.0;
    // _compute_virtual_index(n, quantiles, alpha, beta) with the "linear" method's alpha = beta = 1.
    const ALPHA: f64 = 1.0;
    const BETA: f64 = 1.0;
    let virtual_index = n as f64 * quantile + (ALPHA + quantile * (1.0 - ALPHA - BETA)) - 1.0;
    // _get_indexes
    let (previous, next) = if virtual_index >= (n - 1) as f64 {
        (n - 1, n - 1)
    } else if virtual_index < 0.0 {
        (0, 0)
    } else {
        let previous = virtual_index.floor();
        (previous as usize, previous as usize + 1)
    };
    // _get_gamma: the fractional part. (Where the indexes were clipped both ends are the same
    // element, and the interpolation gives it back whatever gamma is.)
    let gamma = virtual_index - virtual_index.floor();
    lerp(sorted[previous], sorted[next], gamma)
}

/// NumPy's `_lerp`: interpolates from `b` backwards when `t >= 0.5`, for accuracy.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff_b_a = b - a;
    if t >= 0.5 {
        b - diff_b_a * (1.0 - t)
    } else {
        a + diff_b_a * t
    }
}
