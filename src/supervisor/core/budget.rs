//! What the study has spent of its limits beside `n_trials` (`study::budget`: `timeout`,
//! `gpu_hours`, the stall rule), read for `decide::gate` before each start; the budget that
//! ended the study, logged once; and where the study stands, as the `summary` and `finished`
//! notifications say it.
//!
//! GPU-hours and the stall are read from the database (`Store::final_trials`: every host's and
//! every run's finished trials), only when the count of finished trials moved since the last
//! read and only where the config sets either, so that a study without them pays nothing and
//! one with them pays a read per finished trial, not per start. Our own finishes count for the
//! stall before their rows are read (`Core::spending_own`, in `finish`).

use super::Core;
use crate::config::Config;
use crate::notify::Summary;
use crate::study::budget::{self, Ended, Spent};
use crate::supervisor::decide::RunState;
use crate::supervisor::error::RunError;
use tracing::info;

impl Core {
    /// What the study has spent of its limits, the finished trials read again if needed.
    pub(super) async fn spent(&mut self, cfg: &Config) -> Result<Spent, RunError> {
        let study = &cfg.study;
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

    /// The budget `decide::gate` said ends the study: kept, and logged the first time.
    pub(super) fn end(&mut self, e: Ended) {
        if self.ended.is_none() {
            info!("{e}");
            self.ended = Some(e);
        }
    }

    /// Which budget ended the study, once one has.
    pub(in crate::supervisor) fn ended(&self) -> Option<Ended> {
        self.ended
    }

    /// The sampler has proposed every point of the space.
    pub(in crate::supervisor) fn exhausted(&self) -> bool {
        self.state == RunState::Exhausted
    }

    /// Where the study stands, as the `summary` and `finished` notifications say it.
    pub(in crate::supervisor) fn summary(&self) -> Summary {
        let best = self.progress.best();
        let cfg = self.settings.get();
        Summary {
            finished: self.tally.finished,
            n_trials: cfg.study.n_trials,
            running: self.running,
            best_value: best.map(|b| b.1),
            best_trial: best.map(|b| b.0),
            gpu_hours: cfg
                .study
                .gpu_hours
                .map(|_| self.spending.gpu_seconds() / 3600.0),
        }
    }
}
