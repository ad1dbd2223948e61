//! Optuna's `SuccessiveHalvingPruner` (`optuna/pruners/_successive_halving.py`) with a fixed
//! `min_resource`: `[pruner] type = "asha"` is one, and each Hyperband bracket is another.
//!
//! Rung `k` completes at step `min_resource * reduction_factor^(min_early_stopping_rate + k)`.
//! A trial whose last step reached it records its last value there (Optuna's
//! `completed_rung_{k}` system attribute) and goes on only if that value is in the top
//! `1/reduction_factor` of every value recorded at the rung so far, its own included (the best
//! one while there are fewer than `reduction_factor`), and only once more than
//! `bootstrap_count` values are there. Stragglers are never waited for. The recorded values
//! are kept per rung, sorted, so a report adds one O(n) sorted insertion per rung it reaches.

use super::curve::{insert_sorted, Running};
use crate::study::Direction;

/// One successive halving's settings and the values recorded at its rungs.
#[derive(Debug, Clone)]
pub(super) struct Sha {
    pub(super) min_resource: i64,
    pub(super) reduction_factor: u32,
    pub(super) min_early_stopping_rate: u32,
    pub(super) bootstrap_count: usize,
    /// rung -> the values trials recorded at that rung (of trials in any state), sorted
    /// ascending. Never NaN: a NaN value is pruned before it is recorded.
    pub(super) rungs: Vec<Vec<f64>>,
}

impl Sha {
    /// Out-of-range settings, which Optuna rejects with a `ValueError` and config validation
    /// rejects too, are clamped to the nearest valid value rather than panicking:
    /// `min_resource >= 1`, `reduction_factor >= 2`.
    pub(super) fn new(
        min_resource: i64,
        reduction_factor: u32,
        min_early_stopping_rate: u32,
        bootstrap_count: usize,
    ) -> Sha {
        Sha {
            min_resource: min_resource.max(1),
            reduction_factor: reduction_factor.max(2),
            min_early_stopping_rate,
            bootstrap_count,
            rungs: Vec::new(),
        }
    }

    /// The step at which rung `rung` completes: `rung_promotion_step` in
    /// `SuccessiveHalvingPruner.prune`. `None` when it overflows i64: no step reaches it.
    pub(super) fn rung_resource(&self, rung: usize) -> Option<i64> {
        let exponent = u32::try_from(rung)
            .ok()?
            .checked_add(self.min_early_stopping_rate)?;
        i64::from(self.reduction_factor)
            .checked_pow(exponent)?
            .checked_mul(self.min_resource)
    }

    /// `SuccessiveHalvingPruner.prune`: walks up from the trial's current rung, recording its
    /// last value at every rung whose resource its last step has reached, while it is promotable
    /// there.
    pub(super) fn prune(&mut self, trial: &mut Running, direction: Direction) -> bool {
        let Some((step, value)) = trial.last() else {
            return false;
        };
        loop {
            let rung = trial.rung;
            match self.rung_resource(rung) {
                Some(rung_promotion_step) if step >= rung_promotion_step => {}
                _ => return false,
            }
            if value.is_nan() {
                return true;
            }
            // set_trial_system_attr(completed_rung_{rung}, value): competing values are every
            // value recorded at this rung so far, this trial's included.
            if self.rungs.len() <= rung {
                self.rungs.resize_with(rung + 1, Vec::new);
            }
            let competing = &mut self.rungs[rung];
            insert_sorted(competing, value);
            trial.rung += 1;
            if competing.len() <= self.bootstrap_count {
                return true;
            }
            if !is_promotable_to_next_rung(value, competing, self.reduction_factor, direction) {
                return true;
            }
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
