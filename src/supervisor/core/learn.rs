//! The `Core` learning the trials other processes write: other hosts' daemons on PostgreSQL, an
//! Optuna script beside the daemon on either engine, a previous instance of this daemon.
//!
//! A daemon learns its own trials as it writes them (`Core::finish_end`); everyone else's it
//! reads from the database through `store::feed`: the whole study once at start, then only what
//! changed since the last read. `Core::catch_up` reads it before the sampler proposes a new
//! trial (`Core::choose`) and on the housekeeping tick, so the pruner and the display keep up
//! while every slot runs a long trial; at most once per [`CATCH_UP_EVERY`], so that a study of
//! short trials does not pay a read per trial. What changed goes where this daemon's own
//! outcomes go: the sampler (`tell` for final trials, `observe` for running ones, which TPE's
//! constant liar then counts), the pruner (a final trial's curve), the infeasible params (a
//! violated constraint), the memory model (a measured peak) and the progress tracker (the best
//! value or Pareto front that the display, the status line and the metrics show).

use super::Core;
use crate::store::Changes;
use crate::study::TrialState;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Where its lines are logged: the name `SWEEPD_LOG` filters on (`docs/troubleshooting.md`),
/// kept from when this file was `supervisor::learn`.
const LOG: &str = "sweepd::supervisor::learn";

/// The most often `Core::catch_up` reads the database. A proposal then knows every trial that
/// finished more than this long ago, wherever it ran; a few hundred milliseconds are nothing
/// beside trials that take seconds to hours, and bound the reads of a study of very short
/// trials to a few per second per daemon.
pub(in crate::supervisor) const CATCH_UP_EVERY: Duration = Duration::from_millis(250);

/// What one `learn` took in.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) struct Learnt {
    /// Final trials told to the sampler and the pruner.
    pub(in crate::supervisor) told: usize,
    /// Running trials observed (constant liars).
    pub(in crate::supervisor) observed: usize,
    /// COMPLETE trials that may have changed the best value or the front.
    pub(in crate::supervisor) completed: usize,
}

impl Core {
    /// Learns what other processes changed since the last read, unless that read was less
    /// than [`CATCH_UP_EVERY`] ago. A failed read is logged and left for the next one (the
    /// feed is where it was): the sampler goes on with what it knows.
    pub(in crate::supervisor) async fn catch_up(&mut self) -> Learnt {
        let now = Instant::now();
        if self
            .fed_at
            .is_some_and(|t| now.duration_since(t) < CATCH_UP_EVERY)
        {
            return Learnt::default();
        }
        // While the database cannot be reached, no trial starts and nothing is to be learnt:
        // waiting for it here would hold the core's lock for the outage (the housekeeping pass).
        if self.store.outage().borrow().since.is_some() {
            return Learnt::default();
        }
        self.fed_at = Some(now);
        let read = self
            .store
            .changes(
                &self.study,
                &self.me,
                &mut self.feed,
                self.pruner.uses_curves(),
            )
            .await;
        match read {
            Ok(changes) => {
                let rows = changes.rows;
                let learnt = self.learn(changes, false);
                if learnt != Learnt::default() {
                    debug!(
                        target: LOG,
                        told = learnt.told,
                        observed = learnt.observed,
                        rows,
                        "learnt trials of other processes"
                    );
                    self.publish();
                }
                learnt
            }
            Err(e) => {
                warn!(target: LOG, "could not read other processes' trials (trying again shortly; the sampler goes on with what it knows): {e}");
                Learnt::default()
            }
        }
    }

    /// Takes in what a read of the feed found. `at_start`: the first read, of the whole study,
    /// when the run starts; the progress tracker and the memory model are then filled from
    /// the database by their own reads (`supervisor::open`, `Store::peaks`), and the seed
    /// key from the study's next number.
    pub(super) fn learn(&mut self, changes: Changes, at_start: bool) -> Learnt {
        let mut learnt = Learnt::default();
        for changed in changes.trials {
            let record = &changed.record;
            if !at_start {
                // The numbers others took are not ours to expect.
                self.next_key = self.next_key.max(record.number.max(0) as u64 + 1);
            }
            match record.state {
                TrialState::Running => {
                    self.sampler.observe(record.number, &record.params);
                    learnt.observed += 1;
                    continue;
                }
                // A WAITING trial is not a liar until a process claims it (Optuna's constant
                // liar counts RUNNING trials alone); the start's read still observes them, so
                // that the grid skips points already enqueued.
                TrialState::Waiting => {
                    if at_start {
                        self.sampler.observe(record.number, &record.params);
                    }
                    continue;
                }
                _ => {}
            }
            // Infeasible: a constraint > 0 (a NaN one is not, as TPE and the start always read it).
            let feasible = !record.constraints.iter().any(|c| *c > 0.0);
            // Proposals that resemble it are drawn again only when it ran out of memory (the
            // listed mark), as for this daemon's own trials: an objective's constraints are the
            // samplers' to learn, near their boundary too.
            if changed.listed_infeasible {
                self.infeasible
                    .push((record.params.clone(), record.distributions.clone()));
            }
            let completed = record.state == TrialState::Complete;
            self.pruner.load(record.number, completed, &changed.curve);
            if !at_start {
                if let (Some(g), Some(peak)) = (&mut self.gpu, changed.peak) {
                    g.model.record(&record.params, peak);
                }
                if completed && feasible {
                    self.progress.completed(record.number, &record.values);
                    learnt.completed += 1;
                }
            }
            self.sampler.tell(record);
            learnt.told += 1;
        }
        learnt
    }
}
