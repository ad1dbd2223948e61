//! The `Core` asking which budget ends the study (`study::budget::ended`: `n_trials`,
//! `timeout`, `gpu_hours`, the stall rule) before it plans a start, and remembering the first
//! answer, which the log and the `finished` notification say.
//!
//! GPU-hours and the stall are read from the database (`Store::final_trials`: every host's and
//! every run's finished trials), only when the count of finished trials moved since the last
//! read and only where the config sets either, so that a study without them pays nothing and
//! one with them pays a read per finished trial, not per start.

use super::core::Core;
use super::RunError;
use crate::notify::Summary;
use crate::study::budget::{self, Ended, Spent};
use tracing::info;

impl Core {
    /// Which budget ends the study now, if one does; the first time, it is logged and kept
    /// (`Core::ended`).
    pub(super) async fn budget_ended(&mut self) -> Result<Option<Ended>, RunError> {
        if let Some(e) = &self.ended {
            return Ok(Some(e.clone()));
        }
        let spent = self.spent().await?;
        let ended = budget::ended(&self.config.study.limits(), &spent);
        if let Some(e) = &ended {
            self.record_end(e.clone());
        }
        Ok(ended)
    }

    /// Keeps why the study ended and logs it, once.
    pub(super) fn record_end(&mut self, e: Ended) {
        if self.ended.is_none() {
            info!("{e}");
            self.ended = Some(e);
        }
    }

    /// A finish of ours that spends the budget, with its first value (COMPLETE): the stall
    /// rule counts it from now, before the read that finds its row.
    pub(super) fn spending_own(&mut self, trial_id: i64, value: Option<f64>) {
        if self.config.study.patience.is_some() {
            self.spending.own(trial_id, value);
        }
    }

    /// What the study has spent of its limits, the finished trials read again if needed.
    pub(super) async fn spent(&mut self) -> Result<Spent, RunError> {
        let study = &self.config.study;
        let needs_read = study.gpu_hours.is_some() || study.patience.is_some();
        let finished = self.tally.finished;
        if needs_read && self.spending.stale(finished) {
            let trials = self.store.final_trials(&self.study).await?;
            let gpus = if study.gpu_hours.is_some() {
                self.store.gpus(&self.study).await?
            } else {
                Vec::new()
            };
            let (gpu_seconds, values) = crate::store::spent(&trials, |host, device| {
                gpus.iter()
                    .find(|g| g.device == device && host.is_none_or(|h| g.host == h))
                    .and_then(|g| g.total)
            });
            self.spending.read(finished, gpu_seconds, values);
        }
        let direction = study.directions[0];
        Ok(Spent {
            finished,
            ran: self.started.elapsed(),
            gpu_seconds: self.spending.gpu_seconds(),
            stall: study
                .patience
                .map(|p| budget::stall(&self.spending.values(), direction, p)),
        })
    }

    /// Where the study stands, as the `summary` and `finished` notifications say it.
    pub(super) fn summary(&self) -> Summary {
        let best = self.progress.best();
        Summary {
            finished: self.tally.finished,
            n_trials: self.config.study.n_trials,
            running: self.running,
            best_value: best.map(|b| b.1),
            best_trial: best.map(|b| b.0),
            gpu_hours: self
                .config
                .study
                .gpu_hours
                .map(|_| self.spending.gpu_seconds() / 3600.0),
        }
    }
}
