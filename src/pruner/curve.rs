//! One running trial's intermediate values as every pruner reads them: the first value of each
//! step, the best so far, its last step, and how many successive-halving rungs it recorded.

use crate::study::Direction;
use std::collections::BTreeMap;

/// One running trial's history.
#[derive(Debug, Clone)]
pub(super) struct Running {
    /// step -> value, first report of a step wins (Optuna's `intermediate_values`).
    pub(super) values: BTreeMap<i64, f64>,
    /// Best non-NaN value over all steps so far, NaN while there is none: what
    /// `_get_best_intermediate_result_over_steps` (`np.nanmin` / `np.nanmax`) would return.
    pub(super) best: f64,
    /// Successive halving: how many rungs this trial has recorded a value at
    /// (`_get_current_rung`).
    pub(super) rung: usize,
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
    pub(super) fn record(&mut self, step: i64, value: f64, direction: Direction) {
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
    pub(super) fn last(&self) -> Option<(i64, f64)> {
        self.values.last_key_value().map(|(s, v)| (*s, *v))
    }

    /// The largest step reported before `step` (-1 if none): `second_last_step` in Optuna's
    /// `_is_first_in_interval_step`, where `step` is the last step.
    pub(super) fn second_last_step(&self, step: i64) -> i64 {
        self.values
            .range(..step)
            .next_back()
            .map_or(-1, |(s, _)| *s)
    }
}

/// Inserts a non-NaN `value` into ascending `sorted`.
pub(super) fn insert_sorted(sorted: &mut Vec<f64>, value: f64) {
    let at = sorted.partition_point(|x| *x <= value);
    sorted.insert(at, value);
}
