//! `[study] gpu_hours`, `patience` and `min_delta`: the budgets beside `n_trials` and
//! `timeout`, and what they need of the rest of the file (GPUs to count the hours of, one
//! objective to have a best value).

use super::super::raw::RawStudy;
use super::super::{Devices, GpuConfig, StudyConfig};
use super::{float_value, Validator};
use crate::study::budget::Patience;

/// The most `[study] gpu_hours`: a million GPU-hours, past any one study.
pub(crate) const MAX_GPU_HOURS: f64 = 1e6;
/// The most `[study] patience`.
pub(crate) const MAX_PATIENCE: i64 = 1_000_000;
/// The most `[study] min_delta`: a relative improvement of 100 times the best value.
pub(crate) const MAX_MIN_DELTA: f64 = 100.0;

impl Validator<'_> {
    /// `gpu_hours`, and `patience` with its `min_delta`.
    pub(crate) fn budgets(&mut self, raw: &RawStudy) -> (Option<f64>, Option<Patience>) {
        let gpu_hours = raw.gpu_hours.as_ref().and_then(|h| {
            match float_value(h.get_ref()) {
                Ok(x) if x > 0.0 && x <= MAX_GPU_HOURS => return Some(x),
                Ok(x) => self.at(
                    h,
                    "study.gpu_hours",
                    format!("must be greater than 0 and at most {MAX_GPU_HOURS} (got {x})"),
                ),
                Err(message) => self.at(h, "study.gpu_hours", message),
            }
            None
        });
        let min_delta = raw.min_delta.as_ref().and_then(|d| {
            match float_value(d.get_ref()) {
                Ok(x) if (0.0..=MAX_MIN_DELTA).contains(&x) => return Some(x),
                Ok(x) => self.at(
                    d,
                    "study.min_delta",
                    format!(
                        "must be between 0 and {MAX_MIN_DELTA} (got {x}): it is relative, \
                         0.01 is an improvement of 1% of the best value"
                    ),
                ),
                Err(message) => self.at(d, "study.min_delta", message),
            }
            None
        });
        let patience = match (&raw.patience, &raw.min_delta) {
            (Some(p), _) => {
                let n: u32 = self.int(Some(p), "study.patience", 1..=MAX_PATIENCE, 0);
                (n > 0).then_some(Patience {
                    patience: n,
                    min_delta: min_delta.unwrap_or(0.0),
                })
            }
            (None, Some(d)) => {
                self.at(
                    d,
                    "study.min_delta",
                    "needs `patience`: the number of finished trials without such an \
                     improvement after which the study stops",
                );
                None
            }
            (None, None) => None,
        };
        (gpu_hours, patience)
    }

    /// What the budgets need of the other tables: GPU-hours need GPUs, a stall needs one best
    /// value (one objective).
    pub(crate) fn budgets_fit(
        &mut self,
        study: &StudyConfig,
        gpu: &GpuConfig,
        raw: Option<&RawStudy>,
    ) {
        let Some(raw) = raw else {
            return;
        };
        if let Some(h) = raw.gpu_hours.as_ref().filter(|_| study.gpu_hours.is_some()) {
            if gpu.devices == Devices::None {
                self.at(
                    h,
                    "study.gpu_hours",
                    "counts the GPU time trials hold, and this study runs CPU-only: add a [gpu] \
                     table (devices = \"all\"), or limit it with `n_trials` or `timeout`",
                );
            }
        }
        if let Some(p) = raw.patience.as_ref().filter(|_| study.is_multi_objective()) {
            self.at(
                p,
                "study.patience",
                format!(
                    "needs one objective (the study has {}): with several there is no one best \
                     value to improve, but a Pareto front",
                    study.directions.len()
                ),
            );
        }
    }
}
