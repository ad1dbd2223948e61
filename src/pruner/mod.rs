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
//! - [`PrunerKind::Hyperband`] is Optuna's `HyperbandPruner` (`optuna/pruners/_hyperband.py`):
//!   one successive halving per bracket, a trial's bracket chosen from the study's name and its
//!   number; checked against Optuna's own decisions (`optuna_hyperband_golden.py` beside this
//!   file writes them).
//!
//! Optuna re-reads every trial from storage on each `should_prune`. Here the pruner keeps indexes
//! built as trials report and finish instead, so a report never re-reads history: the median
//! pruner keeps, per step, the sorted values the completed trials reported at that step (`median`);
//! successive halving keeps, per rung, the sorted values recorded there (Optuna's
//! `completed_rung_{k}` system attributes; `sha`), Hyperband one such per bracket
//! (`hyperband`); `curve` is a running trial's history, which all of them read.
//!
//! As in Optuna's `Trial.report`, a negative step is rejected (ignored, never prunes) and a step
//! the trial already reported keeps its first value; the decision is then taken again on the
//! trial's unchanged history, as a repeated `should_prune()` would be. The decision always looks
//! at the trial's *last* step, the largest it reported (Optuna's `FrozenTrial.last_step`).
//!
//! Pure logic: no I/O, no clock, no randomness.

use crate::study::Direction;
use curve::Running;
use hyperband::Hyperband;
use median::{median_prune, Median};
use sha::Sha;
use std::collections::{HashMap, HashSet};

mod curve;
#[cfg(test)]
mod golden;
mod hyperband;
mod median;
mod sha;
#[cfg(test)]
mod tests;

/// Which pruner, with its settings: the validated `[pruner]` table. Median follows Optuna's
/// MedianPruner (defaults 5 startup trials, 0 warmup steps, interval 1); Asha is asynchronous
/// successive halving (Optuna's SuccessiveHalvingPruner): rungs at
/// `min_resource * reduction_factor^(min_early_stopping_rate + k)`, the top
/// `1/reduction_factor` of the trials that reached a rung are promoted, stragglers never waited
/// for; Hyperband is Optuna's HyperbandPruner, several such side by side.
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
    Asha(Sha),
    Hyperband(Hyperband),
}

impl Pruner {
    /// A pruner for the study named `study_name` (Hyperband's brackets depend on the name, as
    /// Optuna's), in `direction`.
    ///
    /// Out-of-range settings, which Optuna rejects with a `ValueError` and config validation
    /// rejects too, are clamped to the nearest valid value rather than panicking:
    /// `n_warmup_steps >= 0`, `interval_steps >= 1`, `min_resource >= 1`,
    /// `reduction_factor >= 2`.
    pub fn new(kind: PrunerKind, direction: Direction, study_name: &str) -> Pruner {
        let algo = match kind {
            PrunerKind::None => Algo::None,
            PrunerKind::Median {
                n_startup_trials,
                n_warmup_steps,
                interval_steps,
            } => Algo::Median(Median::new(
                n_startup_trials,
                n_warmup_steps,
                interval_steps,
            )),
            PrunerKind::Asha {
                min_resource,
                reduction_factor,
                min_early_stopping_rate,
            } => Algo::Asha(Sha::new(
                min_resource,
                reduction_factor,
                min_early_stopping_rate,
                0,
            )),
            PrunerKind::Hyperband {
                min_resource,
                max_resource,
                reduction_factor,
                bootstrap_count,
            } => Algo::Hyperband(Hyperband::new(
                min_resource,
                max_resource,
                reduction_factor,
                bootstrap_count,
                study_name,
            )),
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
            Algo::Asha(a) => a.prune(trial, direction),
            Algo::Hyperband(h) => h.prune(trial_number, trial, direction),
        }
    }

    /// A trial finished (COMPLETE: `completed = true`; PRUNED/FAIL: false): median uses only
    /// completed trials' curves, Hyperband's `max_resource = "auto"` their last steps.
    ///
    /// A second finish of the same trial is ignored.
    pub fn finish(&mut self, trial_number: i64, completed: bool) {
        if matches!(self.algo, Algo::None) || !self.finished.insert(trial_number) {
            return;
        }
        let trial = self.running.remove(&trial_number);
        match &mut self.algo {
            Algo::None => {}
            Algo::Median(m) if completed => m.completed(trial.as_ref()),
            Algo::Hyperband(h) if completed => h.completed(trial.as_ref()),
            // What a trial recorded at its rungs stays, whatever its state (Optuna keeps the
            // system attrs of pruned and failed trials, and they keep competing).
            Algo::Median(_) | Algo::Asha(_) | Algo::Hyperband(_) => {}
        }
    }

    /// Loads history on start: a finished trial's intermediate values (from the database).
    ///
    /// For successive halving and Hyperband, the rung records (which the database does not give
    /// here) are rebuilt by replaying the trial's reports in step order against what is loaded
    /// so far, so load trials in the order they ran (trial number). This is exact whenever no
    /// single report crossed two rungs, as then a trial's records do not depend on the
    /// promotion decisions; Hyperband's `max_resource = "auto"` is then settled at the first
    /// report replayed after a COMPLETE trial, as it was when the reports came in that order.
    pub fn load(&mut self, trial_number: i64, completed: bool, values: &[(i64, f64)]) {
        if matches!(self.algo, Algo::None) || self.finished.contains(&trial_number) {
            return;
        }
        let mut ordered: Vec<(i64, f64)> =
            values.iter().copied().filter(|(s, _)| *s >= 0).collect();
        // Stable: of two values for one step, the first given wins, as in `report`.
        ordered.sort_by_key(|(s, _)| *s);
        match self.algo {
            Algo::Asha(_) | Algo::Hyperband(_) => {
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

    /// Hyperband: `max_resource` (as given, or as settled from the first COMPLETE trials) and
    /// the number of brackets, once the brackets are made; `None` for the other pruners and
    /// before.
    pub fn hyperband_brackets(&self) -> Option<(i64, usize)> {
        match &self.algo {
            Algo::Hyperband(h) => h.brackets.as_ref().map(|b| (b.max_resource, b.sha.len())),
            _ => None,
        }
    }

    /// Hyperband: the bracket of trial `trial_number`, once the brackets are made; `None` for
    /// the other pruners and before.
    pub fn bracket(&self, trial_number: i64) -> Option<usize> {
        match &self.algo {
            Algo::Hyperband(h) => h.bracket(trial_number),
            _ => None,
        }
    }
}
