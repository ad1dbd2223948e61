//! What the supervisor's tasks share (`Shared`): the config in force, the store and the study,
//! the core behind its lock, the GPU monitor, the tokens that stop the run, the metrics, the
//! notifier; and the
//! few things every task does with them (a GPU reading, the study deleted under us).

use super::core::Core;
use super::error::RunError;
use super::events::WorkerEvent;
use super::host::{self, Here};
use super::settings::Settings;
use super::stops::Stops;
use crate::config::Config;
use crate::gpu::Monitor;
use crate::metrics::Metrics;
use crate::store::{DaemonId, Instance, Store};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

/// Everything the slot tasks share.
pub(super) struct Shared {
    /// The config in force, the one copy the core reads too; SIGHUP swaps in a new one with
    /// the keys that may change live.
    pub(super) settings: Settings,
    pub(super) store: Store,
    pub(super) study: crate::store::Study,
    /// The decision point, behind a lock: slots ask it one at a time.
    pub(super) core: Mutex<Core>,
    /// Woken whenever a trial ends or readings change, so waiting slots look again.
    pub(super) changed: Notify,
    /// SIGINT/SIGTERM, or a fatal error in one slot: stop starting trials.
    pub(super) shutdown: CancellationToken,
    /// A second SIGINT/SIGTERM: no more grace, kill the workers' groups now.
    pub(super) kill_now: CancellationToken,
    /// The study was deleted from the database: kill running trials now, no grace (their rows
    /// are gone, there is nothing left to record).
    pub(super) abandon: CancellationToken,
    /// The GPU monitor, when sweepd schedules on GPUs.
    pub(super) monitor: Option<Arc<Monitor>>,
    pub(super) host: String,
    pub(super) python_dir: Option<PathBuf>,
    pub(super) me: DaemonId,
    /// What our pids are relative to (`host::this_instance`), recorded in our daemon row.
    pub(super) instance: Instance,
    /// An error a task other than a slot ends the run with (our host id taken by a live daemon
    /// elsewhere): it wins over what the slots then fail with.
    pub(super) ended_by: std::sync::Mutex<Option<RunError>>,
    pub(super) metrics: Arc<Metrics>,
    /// `[notify]`: sending queues, never waits.
    pub(super) notifier: crate::notify::Notifier,
    /// Our running trials, each stoppable from housekeeping (ended elsewhere, cancelled).
    pub(super) stops: Stops,
    /// `--par` from the command line, which reloads keep.
    pub(super) par_override: Option<usize>,
    /// The progress the core publishes once a finish is durable (`Snapshot::send`): read
    /// without the core's lock, which a slot's turn holds across its database round trips.
    pub(super) progress: tokio::sync::watch::Receiver<crate::progress::Progress>,
}

impl Shared {
    /// The config in force now.
    pub(super) fn cfg(&self) -> Arc<Config> {
        self.settings.get()
    }

    /// One objective: the best value of the study's feasible COMPLETE trials as last
    /// published (this daemon's own, once durable, and those it learnt of), for
    /// `trial.study.best_value` in a worker.
    pub(super) fn best_value(&self) -> Option<f64> {
        self.progress.borrow().best.map(|(_, v)| v)
    }

    /// This daemon, as the single-instance rule compares a row's daemon with it.
    pub(super) fn here(&self) -> Here<'_> {
        host::here(&self.me, &self.instance, &self.store, &self.cfg())
    }

    /// Reads the GPUs now and records what the reading found (memory samples, orphans
    /// killed): every housekeeping pass, at once when a trial ends or a worker is retired,
    /// and while trials ramp up. Returns how many running trials it found newly settled.
    pub(super) async fn read_gpus(&self) -> usize {
        let Some(m) = &self.monitor else { return 0 };
        let report = m.poll().await;
        if let Err(e) = self.store.write_samples(&report.samples).await {
            warn!("could not store memory samples: {e}");
        }
        for &(pid, device, bytes) in &report.orphans {
            let orphan = WorkerEvent::OrphanKilled { pid, device, bytes };
            let _ = orphan.record(&self.store, None, None).await;
        }
        report.settled
    }

    /// Stops the daemon at once when its study was deleted from the database: running trials
    /// are killed (their rows are gone), and `run` exits with [`RunError::StudyDeleted`].
    pub(super) fn study_deleted_under_us(&self) {
        if self.abandon.is_cancelled() {
            return;
        }
        error!(
            "study `{}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopping",
            self.study.name,
            self.store.path().display()
        );
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(
            "study deleted from the database; stopping",
        )]);
        self.abandon.cancel();
        self.shutdown.cancel();
    }
}
