//! The REASON `status` and `trials` show for each WAITING or RUNNING trial (Slurm's column):
//! what the live daemons published of their lines (`Store::lines`: the head waiting for GPU
//! memory or a slot, the others for those ahead, the breaker's hold), and for a RUNNING trial
//! what its rows say (how long, on which GPU, its last step). A stopped daemon's line is not
//! read: nothing waits in it any more.

use crate::store::{time, DaemonView, HostView, Store, StoreError, Study, TrialView};
use crate::study::reason::{Line, Reason};
use crate::study::DaemonState;
use crate::supervisor;
use std::time::Duration;

/// The lines of the daemons that run now.
pub(super) struct Reasons {
    lines: Vec<Line>,
}

/// How old a daemon's heartbeat may be before it counts as gone (`status`'s rule).
pub(super) fn gone_after(store: &Store, config: Option<&crate::config::Config>) -> Duration {
    if store.engine() == crate::store::Engine::Postgres {
        config.map_or(crate::config::DEFAULT_HOST_TIMEOUT, |c| {
            c.storage.host_timeout
        })
    } else {
        supervisor::DAEMON_GONE_AFTER
    }
}

/// Whether `d` runs: not stopped or gone, and its heartbeat fresh.
pub(super) fn runs(d: &DaemonView, gone_after: Duration) -> bool {
    !matches!(d.state, DaemonState::Stopped | DaemonState::Gone)
        && supervisor::heartbeat_fresh(d.age_s, gone_after)
}

impl Reasons {
    pub(super) async fn read(
        store: &Store,
        study: &Study,
        hosts: &[HostView],
        gone_after: Duration,
    ) -> Result<Reasons, StoreError> {
        let live: Vec<&str> = hosts
            .iter()
            .filter(|h| runs(&h.daemon, gone_after))
            .map(|h| h.daemon.host.as_str())
            .collect();
        let lines = store
            .lines(study)
            .await?
            .into_iter()
            .filter(|(host, _)| live.contains(&host.as_str()))
            .map(|(_, l)| l)
            .collect();
        Ok(Reasons { lines })
    }

    /// The phrase for `t`, where it waits or runs.
    pub(super) fn of(&self, t: &TrialView) -> Option<String> {
        match t.state.as_str() {
            "RUNNING" => {
                let elapsed_s = t
                    .datetime_start
                    .as_deref()
                    .and_then(time::age)
                    .map_or(0, |a| a.as_secs());
                Some(
                    Reason::Running {
                        elapsed_s,
                        device: t.gpu,
                        step: t.step,
                    }
                    .phrase(),
                )
            }
            "WAITING" => {
                let reasons: Vec<Reason> = self
                    .lines
                    .iter()
                    .flat_map(|l| l.reasons_of(t.trial_id))
                    .collect();
                (!reasons.is_empty()).then(|| Reason::phrases(&reasons))
            }
            _ => None,
        }
    }

    /// The numbered trials the lines name, head of each line first, at most `n`.
    pub(super) fn trial_ids(&self, n: usize) -> Vec<i64> {
        let mut ids: Vec<i64> = Vec::new();
        for q in self.lines.iter().flat_map(|l| &l.queued) {
            if let Some(id) = q.trial_id.filter(|id| !ids.contains(id)) {
                ids.push(id);
            }
        }
        ids.truncate(n);
        ids
    }

    /// Fills in `reason` on each trial that has one.
    pub(super) fn fill(&self, trials: &mut [TrialView]) {
        for t in trials {
            t.reason = self.of(t);
        }
    }

    /// Candidates a daemon holds that are not numbered trials yet (new samples waiting for
    /// room), each with its phrase.
    pub(super) fn unnumbered(&self) -> Vec<String> {
        self.lines
            .iter()
            .flat_map(|l| {
                l.queued
                    .iter()
                    .filter(|q| q.trial_id.is_none())
                    .map(|q| Reason::phrases(&l.reasons_of_queued(q)))
            })
            .collect()
    }
}
