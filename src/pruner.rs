//! Pruners: decide from a running trial's intermediate reports whether it should stop early.
//!
//! A worker calls `trial.report(step, value)` then `trial.should_prune()`; sweepd answers both
//! with one [`Pruner::report`]. Each pruner follows Optuna's implementation so that a study run by
//! sweepd prunes as the same study run by Optuna would:
//!
//! - [`PrunerKind::Median`] is Optuna's `MedianPruner`, i.e. `PercentilePruner(50.0, ...,
//!   n_min_trials=1)` (`optuna/pruners/_percentile.py`).
//! - [`PrunerKind::Asha`] is Optuna's `SuccessiveHalvingPruner` with `bootstrap_count=0` and a
//!   fixed `min_resource` (`optuna/pruners/_successive_halving.py`).
//!
//! Optuna re-reads every trial from storage on each `should_prune`. Here the pruner keeps indexes
//! built as trials report and finish instead, so a report never re-reads history: the median
//! pruner keeps, per step, the sorted values the completed trials reported at that step; ASHA
//! keeps, per rung, the sorted values recorded there (Optuna's `completed_rung_{k}` system
//! attributes). A median report costs a few O(log n) lookups; an ASHA report adds one O(n) sorted
//! insertion per rung it reaches.
//!
//! As in Optuna's `Trial.report`, a negative step is rejected (ignored, never prunes) and a step
//! the trial already reported keeps its first value; the decision is then taken again on the
//! trial's unchanged history, as a repeated `should_prune()` would be. The decision always looks
//! at the trial's *last* step, the largest it reported (Optuna's `FrozenTrial.last_step`).
//!
//! Pure logic: no I/O, no clock, no randomness.

use crate::study::Direction;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Which pruner, with its settings: the validated `[pruner]` table. Median follows Optuna's
/// MedianPruner (defaults 5 startup trials, 0 warmup steps, interval 1); Asha is asynchronous
/// successive halving (Optuna's SuccessiveHalvingPruner): rungs at
/// `min_resource * reduction_factor^(min_early_stopping_rate + k)`, the top
/// `1/reduction_factor` of the trials that reached a rung are promoted, stragglers never waited for.
pub use crate::config::PrunerConfig as PrunerKind;

/// Decides whether running trials should stop, from their intermediate reports and from the
/// curves of the trials that finished before.
#[derive(Debug, Clone)]
pub struct Pruner {
    direction: Direction,
    algo: Algo,
    /// Trials reporting now: their intermediate values so far.
    running: HashMap<i64, Running>,
    /// Trials already finished (or loaded): later reports or finishes for them are ignored.
    finished: HashSet<i64>,
}

#[derive(Debug, Clone)]
enum Algo {
    None,
    Median(Median),
    Asha(Asha),
}

/// One running trial's history.
#[derive(Debug, Clone)]
struct Running {
    /// step -> value, first report of a step wins (Optuna's `intermediate_values`).
    values: BTreeMap<i64, f64>,
    /// Best non-NaN value over all steps so far, NaN while there is none: what
    /// `_get_best_intermediate_result_over_steps` (`np.nanmin` / `np.nanmax`) would return.
    best: f64,
    /// ASHA: how many rungs this trial has recorded a value at (`_get_current_rung`).
    rung: usize,
}

impl Default for Running {
    fn default() -> Running {
        Running {
            values: BTreeMap::new(),
            best: f64::NAN,
            rung: 0,
        }
    }
}

impl Running {
    /// Records `value` at `step` unless the step was reported already (Optuna ignores those).
    fn record(&mut self, step: i64, value: f64, direction: Direction) {
        if self.values.contains_key(&step) {
            return;
        }
        self.values.insert(step, value);
        let better = match direction {
            Direction::Minimize => value < self.best,
            Direction::Maximize => value > self.best,
        };
        if !value.is_nan() && (self.best.is_nan() || better) {
            self.best = value;
        }
    }

    /// `FrozenTrial.last_step` and the value reported there.
    fn last(&self) -> Option<(i64, f64)> {
        self.values.last_key_value().map(|(s, v)| (*s, *v))
    }

    /// The largest step reported before `step` (-1 if none): `second_last_step` in Optuna's
    /// `_is_first_in_interval_step`, where `step` is the last step.
    fn second_last_step(&self, step: i64) -> i64 {
        self.values
            .range(..step)
            .next_back()
            .map_or(-1, |(s, _)| *s)
    }
}

/// Optuna's `PercentilePruner` state, at the 50th percentile.
#[derive(Debug, Clone)]
struct Median {
    n_startup_trials: usize,
    n_warmup_steps: i64,
    interval_steps: i64,
    /// Number of COMPLETE trials (with or without intermediate values).
    n_completed: usize,
    /// step -> the values COMPLETE trials reported at exactly that step.
    by_step: HashMap<i64, StepValues>,
}

/// The values completed trials reported at one step.
#[derive(Debug, Clone, Default)]
struct StepValues {
    /// How many completed trials reported this step, NaN values included (`n_min_trials` counts
    /// them: `len(intermediate_values)` in `_get_percentile_intermediate_result_over_trials`).
    count: usize,
    /// The non-NaN values, sorted ascending (`np.nanpercentile` drops NaN).
    sorted: Vec<f64>,
}

impl StepValues {
    fn insert(&mut self, value: f64) {
        self.count += 1;
        if !value.is_nan() {
            insert_sorted(&mut self.sorted, value);
        }
    }
}

/// Optuna's `SuccessiveHalvingPruner` state.
#[derive(Debug, Clone)]
struct Asha {
    min_resource: i64,
    reduction_factor: u32,
    min_early_stopping_rate: u32,
    /// rung -> the values trials recorded at that rung (Optuna's `completed_rung_{k}` system
    /// attrs, of trials in any state), sorted ascending. Never NaN: a NaN value is pruned before
    /// it is recorded.
    rungs: Vec<Vec<f64>>,
}

impl Asha {
    /// The step at which rung `rung` completes: `rung_promotion_step` in
    /// `SuccessiveHalvingPruner.prune`. `None` when it overflows i64: no step reaches it.
    fn rung_resource(&self, rung: usize) -> Option<i64> {
        let exponent = u32::try_from(rung)
            .ok()?
            .checked_add(self.min_early_stopping_rate)?;
        i64::from(self.reduction_factor)
            .checked_pow(exponent)?
            .checked_mul(self.min_resource)
    }
}

impl Pruner {
    /// A pruner for a study in `direction`.
    ///
    /// Out-of-range settings, which Optuna rejects with a `ValueError` and config validation is
    /// expected to reject too, are clamped to the nearest valid value rather than panicking:
    /// `n_warmup_steps >= 0`, `interval_steps >= 1`, `min_resource >= 1`,
    /// `reduction_factor >= 2`.
    pub fn new(kind: PrunerKind, direction: Direction) -> Pruner {
        let algo = match kind {
            PrunerKind::None => Algo::None,
            PrunerKind::Median {
                n_startup_trials,
                n_warmup_steps,
                interval_steps,
            } => Algo::Median(Median {
                n_startup_trials,
                n_warmup_steps: n_warmup_steps.max(0),
                interval_steps: interval_steps.max(1),
                n_completed: 0,
                by_step: HashMap::new(),
            }),
            PrunerKind::Asha {
                min_resource,
                reduction_factor,
                min_early_stopping_rate,
            } => Algo::Asha(Asha {
                min_resource: min_resource.max(1),
                reduction_factor: reduction_factor.max(2),
                min_early_stopping_rate,
                rungs: Vec::new(),
            }),
        };
        Pruner {
            direction,
            algo,
            running: HashMap::new(),
            finished: HashSet::new(),
        }
    }

    /// Whether it learns from curves at all (`false`: no pruner): a daemon then need not read
    /// other processes' intermediate values.
    pub fn uses_curves(&self) -> bool {
        !matches!(self.algo, Algo::None)
    }

    /// A trial reported `value` at `step`. Returns whether it should stop now. Records the value.
    ///
    /// Reports for a trial already finished, and negative steps, are ignored and return false.
    pub fn report(&mut self, trial_number: i64, step: i64, value: f64) -> bool {
        if matches!(self.algo, Algo::None) || step < 0 || self.finished.contains(&trial_number) {
            return false;
        }
        let direction = self.direction;
        let trial = self.running.entry(trial_number).or_default();
        trial.record(step, value, direction);
        match &mut self.algo {
            Algo::None => false,
            Algo::Median(m) => median_prune(m, trial, direction),
            Algo::Asha(a) => asha_prune(a, trial, direction),
        }
    }

    /// A trial finished (COMPLETE: `completed = true`; PRUNED/FAIL: false) — median uses only completed trials' curves.
    ///
    /// A second finish of the same trial is ignored.
    pub fn finish(&mut self, trial_number: i64, completed: bool) {
        if matches!(self.algo, Algo::None) || !self.finished.insert(trial_number) {
            return;
        }
        let trial = self.running.remove(&trial_number);
        match &mut self.algo {
            Algo::None => {}
            Algo::Median(m) => {
                if completed {
                    m.n_completed += 1;
                    for (step, value) in trial.iter().flat_map(|t| t.values.iter()) {
                        m.by_step.entry(*step).or_default().insert(*value);
                    }
                }
            }
            // What a trial recorded at its rungs stays, whatever its state (Optuna keeps the
            // system attrs of pruned and failed trials, and they keep competing).
            Algo::Asha(_) => {}
        }
    }

    /// Loads history on start: a finished trial's intermediate values (from the database).
    ///
    /// For ASHA, the rung records (which the database does not give here) are rebuilt by replaying
    /// the trial's reports in step order against what is loaded so far, so load trials in the
    /// order they ran (trial number). This is exact whenever no single report crossed two rungs,
    /// as then a trial's records do not depend on the promotion decisions.
    pub fn load(&mut self, trial_number: i64, completed: bool, values: &[(i64, f64)]) {
        if matches!(self.algo, Algo::None) || self.finished.contains(&trial_number) {
            return;
        }
        let mut ordered: Vec<(i64, f64)> =
            values.iter().copied().filter(|(s, _)| *s >= 0).collect();
        // Stable: of two values for one step, the first given wins, as in `report`.
        ordered.sort_by_key(|(s, _)| *s);
        match self.algo {
            Algo::Asha(_) => {
                for (step, value) in ordered {
                    self.report(trial_number, step, value);
                }
            }
            _ => {
                let direction = self.direction;
                let trial = self.running.entry(trial_number).or_default();
                for (step, value) in ordered {
                    trial.record(step, value, direction);
                }
            }
        }
        self.finish(trial_number, completed);
    }
}

/// `PercentilePruner.prune` at the 50th percentile with `n_min_trials = 1`.
fn median_prune(m: &Median, trial: &Running, direction: Direction) -> bool {
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
fn nanpercentile_sorted(sorted: &[f64], q: f64) -> f64 {
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

/// `SuccessiveHalvingPruner.prune` (with `bootstrap_count = 0`): walks up from the trial's
/// current rung, recording its last value at every rung whose resource its last step has reached,
/// while it is promotable there.
fn asha_prune(a: &mut Asha, trial: &mut Running, direction: Direction) -> bool {
    let Some((step, value)) = trial.last() else {
        return false;
    };
    loop {
        let rung = trial.rung;
        match a.rung_resource(rung) {
            Some(rung_promotion_step) if step >= rung_promotion_step => {}
            _ => return false,
        }
        if value.is_nan() {
            return true;
        }
        // set_trial_system_attr(completed_rung_{rung}, value): competing values are every
        // value recorded at this rung so far, this trial's included.
        if a.rungs.len() <= rung {
            a.rungs.resize_with(rung + 1, Vec::new);
        }
        let competing = &mut a.rungs[rung];
        insert_sorted(competing, value);
        trial.rung += 1;
        if !is_promotable_to_next_rung(value, competing, a.reduction_factor, direction) {
            return true;
        }
    }
}

/// Optuna's `_is_trial_promotable_to_next_rung`, on the competing values sorted ascending (they
/// include `value`): in the top `len / reduction_factor`, or the best one while there are fewer
/// than `reduction_factor` of them.
fn is_promotable_to_next_rung(
    value: f64,
    competing_sorted: &[f64],
    reduction_factor: u32,
    direction: Direction,
) -> bool {
    let promotable_idx = (competing_sorted.len() / reduction_factor as usize).max(1) - 1;
    match direction {
        Direction::Maximize => {
            value >= competing_sorted[competing_sorted.len() - 1 - promotable_idx]
        }
        Direction::Minimize => value <= competing_sorted[promotable_idx],
    }
}

/// Inserts a non-NaN `value` into ascending `sorted`.
fn insert_sorted(sorted: &mut Vec<f64>, value: f64) {
    let at = sorted.partition_point(|x| *x <= value);
    sorted.insert(at, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median(n_startup_trials: usize, n_warmup_steps: i64, interval_steps: i64) -> PrunerKind {
        PrunerKind::Median {
            n_startup_trials,
            n_warmup_steps,
            interval_steps,
        }
    }

    fn asha(min_resource: i64, reduction_factor: u32, mesr: u32) -> PrunerKind {
        PrunerKind::Asha {
            min_resource,
            reduction_factor,
            min_early_stopping_rate: mesr,
        }
    }

    /// Runs and completes trials `0..values.len()`, trial `i` reporting `values[i]` at every step
    /// in `0..steps`.
    fn complete(p: &mut Pruner, values: &[f64], steps: i64) {
        for (i, v) in values.iter().enumerate() {
            for s in 0..steps {
                p.report(i as i64, s, *v);
            }
            p.finish(i as i64, true);
        }
    }

    #[test]
    fn none_never_prunes() {
        let mut p = Pruner::new(PrunerKind::None, Direction::Minimize);
        for t in 0..10 {
            p.load(t, true, &[(0, 0.0), (1, 0.0)]);
        }
        assert!(!p.report(100, 0, f64::NAN));
        assert!(!p.report(100, 1, 1e9));
        p.finish(100, false);
        assert!(p.running.is_empty() && p.finished.is_empty());
    }

    #[test]
    fn median_waits_for_startup_trials() {
        let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize);
        complete(&mut p, &[1.0, 1.0, 1.0, 1.0], 3);
        // Four completed: a terrible value is not pruned.
        assert!(!p.report(10, 0, 100.0));
        // Pruned and failed trials do not count.
        p.finish(10, false);
        assert!(!p.report(11, 0, 100.0));
        p.finish(11, false);
        assert!(!p.report(12, 0, 100.0));
        // The fifth completion enables pruning.
        p.load(4, true, &[(0, 1.0), (1, 1.0), (2, 1.0)]);
        assert!(p.report(12, 1, 100.0));
    }

    #[test]
    fn median_prunes_worse_than_median_keeps_better() {
        let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize);
        complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 3);
        // Median at every step is 3.0.
        assert!(p.report(10, 0, 3.5));
        assert!(!p.report(11, 0, 2.5));
        // Equal to the median is not pruned (strict `>`).
        assert!(!p.report(12, 0, 3.0));
        // Optuna compares the trial's best so far: a bad step after a good one is not pruned.
        assert!(!p.report(11, 1, 10.0));
        // A step no completed trial reported has no median: no pruning.
        assert!(!p.report(13, 7, 100.0));
    }

    #[test]
    fn median_uses_value_at_exact_step_and_interpolates() {
        let mut p = Pruner::new(median(1, 0, 1), Direction::Minimize);
        // Step 2 has 1.0 and 2.0 (median 1.5); trial 2 never reported step 2.
        p.load(0, true, &[(0, 9.0), (2, 1.0)]);
        p.load(1, true, &[(0, 9.0), (2, 2.0)]);
        p.load(2, true, &[(0, 9.0), (1, 0.0)]);
        assert!(p.report(10, 2, 1.6));
        assert!(!p.report(11, 2, 1.5));
        // A NaN value of a completed trial counts as a report but not in the percentile.
        p.load(3, true, &[(3, f64::NAN), (4, f64::NAN)]);
        p.load(4, true, &[(3, 5.0)]);
        assert!(p.report(12, 3, 5.5));
        assert!(!p.report(13, 3, 5.0));
        // Only NaN at a step: nanpercentile is NaN, no pruning.
        assert!(!p.report(14, 4, 1e9));
    }

    #[test]
    fn median_respects_warmup() {
        let mut p = Pruner::new(median(5, 3, 1), Direction::Minimize);
        complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 6);
        assert!(!p.report(10, 0, 9.0));
        assert!(!p.report(10, 1, 9.0));
        assert!(!p.report(10, 2, 9.0));
        assert!(p.report(10, 3, 9.0));
    }

    #[test]
    fn median_respects_interval() {
        // warmup 1, interval 3: checks in windows [1,4), [4,7), ... at the first report in each.
        let mut p = Pruner::new(median(5, 1, 3), Direction::Minimize);
        complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 12);
        let decisions: Vec<bool> = (0..9).map(|s| p.report(10, s, 9.0)).collect();
        assert_eq!(
            decisions,
            [false, true, false, false, true, false, false, true, false]
        );
        // A window's start missed: the check happens at the first report inside the window.
        let mut p = Pruner::new(median(5, 1, 3), Direction::Minimize);
        complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 12);
        assert!(!p.report(11, 0, 9.0)); // warmup
        assert!(p.report(11, 2, 9.0)); // first in [1,4)
        assert!(!p.report(11, 3, 9.0)); // still [1,4)
        assert!(p.report(11, 5, 9.0)); // first in [4,7)
        assert!(p.report(11, 9, 9.0)); // first in [7,10)
        assert!(p.report(11, 9, 1.0)); // a repeated step: ignored, same history, same answer
        assert!(p.report(11, 10, 9.0)); // first in [10,13)
    }

    #[test]
    fn median_interval_check_on_repeated_step() {
        let mut p = Pruner::new(median(1, 0, 2), Direction::Minimize);
        p.load(0, true, &[(0, 1.0), (1, 1.0), (2, 1.0)]);
        assert!(p.report(10, 0, 5.0));
        assert!(!p.report(10, 1, 5.0));
        // A duplicate report of step 1 is ignored and decided on the same history.
        assert!(!p.report(10, 1, 0.0));
        assert_eq!(p.running[&10].values[&1], 5.0);
        assert!(p.report(10, 2, 5.0));
    }

    #[test]
    fn median_maximize_flips() {
        let mut p = Pruner::new(median(5, 0, 1), Direction::Maximize);
        complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 2);
        assert!(p.report(10, 0, 2.5));
        assert!(!p.report(11, 0, 3.5));
        assert!(!p.report(12, 0, 3.0));
        // Best so far is the max: a later low value is not pruned.
        assert!(!p.report(11, 1, 0.0));
    }

    #[test]
    fn median_prunes_nan() {
        let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize);
        complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 2);
        assert!(p.report(10, 0, f64::NAN));
        // NaN is skipped by nanmin: a trial with a good earlier value is judged by it.
        assert!(!p.report(11, 0, 1.0));
        assert!(!p.report(11, 1, f64::NAN));
        // But before startup or during warmup a NaN is not pruned (Optuna checks those first).
        let mut p = Pruner::new(median(5, 2, 1), Direction::Minimize);
        assert!(!p.report(99, 5, f64::NAN));
        complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 3);
        assert!(!p.report(10, 1, f64::NAN));
    }

    #[test]
    fn median_only_completed_curves_count() {
        let mut p = Pruner::new(median(1, 0, 1), Direction::Minimize);
        p.load(0, true, &[(0, 10.0)]);
        // Pruned and failed trials with low values do not lower the median.
        p.load(1, false, &[(0, 0.0)]);
        assert!(!p.report(2, 0, 0.5));
        p.finish(2, false);
        assert!(!p.report(3, 0, 9.0));
        assert!(p.report(4, 0, 11.0));
        // Nor does a running trial's curve.
        assert_eq!(p.by_step_len(0), 1);
        // Reports after a finish are ignored.
        assert!(!p.report(1, 1, 1e9));
        p.finish(0, true);
        assert_eq!(p.n_completed(), 1);
    }

    #[test]
    fn median_counts_completed_trials_without_reports() {
        let mut p = Pruner::new(median(2, 0, 1), Direction::Minimize);
        p.load(0, true, &[(0, 1.0)]);
        assert!(!p.report(5, 0, 9.0));
        p.finish(1, true);
        assert!(p.report(6, 0, 9.0));
    }

    #[test]
    fn numpy_percentile() {
        assert_eq!(nanpercentile_sorted(&[3.0], 50.0), 3.0);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0], 50.0), 1.5);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0], 50.0), 2.0);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 50.0), 3.0);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 25.0), 1.75);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 100.0), 8.0);
        assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 0.0), 1.0);
        assert!(nanpercentile_sorted(&[], 50.0).is_nan());
    }

    #[test]
    fn asha_rung_resources() {
        let p = Pruner::new(asha(1, 3, 0), Direction::Minimize);
        let Algo::Asha(a) = &p.algo else { panic!() };
        let r: Vec<Option<i64>> = (0..5).map(|k| a.rung_resource(k)).collect();
        assert_eq!(r, [Some(1), Some(3), Some(9), Some(27), Some(81)]);
        let p = Pruner::new(asha(2, 4, 1), Direction::Minimize);
        let Algo::Asha(a) = &p.algo else { panic!() };
        let r: Vec<Option<i64>> = (0..3).map(|k| a.rung_resource(k)).collect();
        assert_eq!(r, [Some(8), Some(32), Some(128)]);
        assert_eq!(a.rung_resource(100), None);
    }

    #[test]
    fn asha_first_trial_promoted_at_every_rung() {
        let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize);
        for s in 0..30 {
            assert!(!p.report(0, s, 100.0 + s as f64));
        }
        assert_eq!(p.running[&0].rung, 4); // rungs at 1, 3, 9, 27
        assert_eq!(p.rung_values(0), [101.0]);
        assert_eq!(p.rung_values(1), [103.0]);
        assert_eq!(p.rung_values(3), [127.0]);
    }

    /// Trials 0, 1, 2 reach rung 0 (step 1 for min_resource 1) with 1, 2, 3.
    fn asha_with_1_2_3(direction: Direction) -> Pruner {
        let mut p = Pruner::new(asha(1, 3, 0), direction);
        assert!(!p.report(0, 0, 9.0)); // below rung 0: no decision
        for (t, v) in [1.0, 2.0, 3.0].into_iter().enumerate() {
            p.report(t as i64, 1, v);
            p.finish(t as i64, false);
        }
        p
    }

    #[test]
    fn asha_first_values_at_a_rung() {
        // With fewer than reduction_factor values, a trial must be the best one so far.
        let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize);
        assert!(!p.report(0, 1, 1.0));
        assert!(p.report(1, 1, 2.0)); // [1, 2]: index 0
        assert!(p.report(2, 1, 3.0)); // [1, 2, 3]: index 3/3-1 = 0
        assert!(!p.report(3, 1, 0.5)); // [0.5, 1, 2, 3]: index 0
    }

    #[test]
    fn asha_worse_than_top_third_pruned() {
        let mut p = asha_with_1_2_3(Direction::Minimize);
        // [1, 2, 2.5, 3]: promotable index 4/3-1 = 0, 2.5 > 1.
        assert!(p.report(3, 1, 2.5));
        assert_eq!(p.rung_values(0), [1.0, 2.0, 2.5, 3.0]); // recorded though pruned
    }

    #[test]
    fn asha_best_promoted() {
        let mut p = asha_with_1_2_3(Direction::Minimize);
        // [0.5, 1, 2, 3]: 0.5 <= 0.5.
        assert!(!p.report(3, 1, 0.5));
        assert_eq!(p.running[&3].rung, 1);
    }

    #[test]
    fn asha_promotable_index_grows_with_rung_size() {
        let mut p = asha_with_1_2_3(Direction::Minimize);
        p.report(3, 1, 2.5);
        p.report(4, 1, 0.5);
        // Six values [0.5, 1, 1.5, 2, 2.5, 3]: index 1, 1.5 > 1: pruned.
        assert!(p.report(5, 1, 1.5));
        // Seven values [0.5, 1, 1, 1.5, 2, 2.5, 3]: index 1, a tie at the cut-off is promoted.
        assert!(!p.report(6, 1, 1.0));
    }

    #[test]
    fn asha_is_asynchronous() {
        let mut p = Pruner::new(asha(1, 2, 0), Direction::Minimize);
        // Trial 0 reaches rung 0 and rung 1 alone: promoted both times without waiting.
        assert!(!p.report(0, 1, 5.0));
        assert!(!p.report(0, 2, 5.0));
        // Trial 1 is still below rung 0: it influences nothing.
        assert!(!p.report(1, 0, 0.0));
        assert_eq!(p.rung_values(0), [5.0]);
        // Trial 2 at rung 0 competes only with trial 0's record, not with trial 1's 0.0.
        assert!(!p.report(2, 1, 4.0));
        // A trial only recorded at rung 0 does not compete at rung 1.
        assert!(!p.report(0, 4, 5.0)); // rung 2 (step 4): trial 0 alone there.
        assert_eq!(p.rung_values(1), [5.0]);
        assert_eq!(p.rung_values(2), [5.0]);
        // A late report of an earlier step leaves the last step (1) as it was: no new rung.
        assert!(!p.report(2, 0, 100.0));
        assert!(!p.report(2, 1, 100.0)); // a repeated step: ignored
        assert_eq!(p.rung_values(0), [4.0, 5.0]);
    }

    #[test]
    fn asha_report_crossing_several_rungs_uses_last_value() {
        let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize);
        assert!(!p.report(0, 1, 1.0));
        assert!(!p.report(0, 3, 1.0));
        assert!(!p.report(0, 9, 1.0));
        // Trial 1 jumps straight to step 10: records 2.0 at rung 0 ([1,2], idx 0: pruned there).
        assert!(p.report(1, 10, 2.0));
        assert_eq!(p.rung_values(0), [1.0, 2.0]);
        assert_eq!(p.rung_values(1), [1.0]);
        // Trial 2 jumps with a better value: promoted through rungs 0, 1, 2.
        assert!(!p.report(2, 10, 0.5));
        assert_eq!(p.rung_values(2), [0.5, 1.0]);
    }

    #[test]
    fn asha_nan_pruned_at_rung_only() {
        let mut p = Pruner::new(asha(2, 2, 0), Direction::Minimize);
        assert!(!p.report(0, 1, f64::NAN));
        assert!(p.report(0, 2, f64::NAN));
        assert!(p.rung_values(0).is_empty());
    }

    #[test]
    fn asha_maximize() {
        let mut p = asha_with_1_2_3(Direction::Maximize);
        // Under maximize 1, 2, 3 arrived worst first: 2 and 3 were each the best so far.
        // [1, 2, 2.5, 3]: the best one is needed, 2.5 < 3.
        assert!(p.report(3, 1, 2.5));
        assert!(!p.report(4, 1, 3.5));
        // Under maximize, 0.5 is the worst.
        let mut p = asha_with_1_2_3(Direction::Maximize);
        assert!(p.report(3, 1, 0.5));
        let mut p = Pruner::new(asha(1, 3, 0), Direction::Maximize);
        assert!(!p.report(0, 1, 1.0));
        assert!(!p.report(1, 1, 2.0));
        assert!(p.report(2, 1, 1.5));
    }

    #[test]
    fn asha_load_replays_history() {
        let mut a = Pruner::new(asha(1, 3, 0), Direction::Minimize);
        a.load(0, true, &[(3, 1.0), (1, 1.0), (9, 1.0), (0, 7.0)]);
        a.load(1, false, &[(0, 5.0), (1, 2.0)]);
        a.load(2, false, &[(1, 3.0)]);
        assert_eq!(a.rung_values(0), [1.0, 2.0, 3.0]);
        assert_eq!(a.rung_values(1), [1.0]);
        assert_eq!(a.rung_values(2), [1.0]);
        assert!(a.running.is_empty());
        // Loaded trials are finished: reports for them are ignored.
        assert!(!a.report(1, 3, 0.0));
        assert!(a.report(3, 1, 2.5));
        assert!(!a.report(4, 1, 0.5));
    }

    impl Pruner {
        fn rung_values(&self, rung: usize) -> Vec<f64> {
            match &self.algo {
                Algo::Asha(a) => a.rungs.get(rung).cloned().unwrap_or_default(),
                _ => panic!("not asha"),
            }
        }

        fn by_step_len(&self, step: i64) -> usize {
            match &self.algo {
                Algo::Median(m) => m.by_step.get(&step).map_or(0, |s| s.count),
                _ => panic!("not median"),
            }
        }

        fn n_completed(&self) -> usize {
            match &self.algo {
                Algo::Median(m) => m.n_completed,
                _ => panic!("not median"),
            }
        }
    }
}
