//! The REASON `status` and `trials` show for each WAITING or RUNNING trial (Slurm's column):
//! what the live daemons published of their lines (`Store::lines`: the head waiting for GPU
//! memory or a slot, the others for those ahead, the breaker's hold), and for a RUNNING trial
//! what its rows say (how long, on which GPU, its last step), and for a WAITING retry copy
//! which retry it is, after which failure, of how many `[retry]` allows (where a config says;
//! with no daemon running too). A paused study's (`sweepd pause`, read from its control row,
//! daemon or none) WAITING trials say `paused` first. A stopped daemon's line is not read:
//! nothing waits in it any more.

use crate::config::Config;
use crate::store::{time, DaemonView, HostView, RetryCopy, Store, StoreError, Study, TrialView};
use crate::study::reason::{Line, Reason};
use crate::study::{ControlState, DaemonState};
use crate::supervisor;
use std::time::Duration;

/// The lines of the daemons that run now, and the study's WAITING retry copies. A file only
/// Optuna has written (no sweepd tables, no daemon ever ran it) has none: `Default`.
#[derive(Default)]
pub(super) struct Reasons {
    lines: Vec<Line>,
    /// The WAITING retry copies by trial id, oldest first, each with its retry's reason.
    retries: Vec<(i64, Reason)>,
    /// Its owner paused the study: no trial starts until `sweepd resume`.
    paused: bool,
}

/// The reason of a retry copy: its attempt of the kind it failed by, of `config`'s limit for
/// that kind where a config is given (`None`: the failure it follows is not recorded).
fn retry_reason(copy: &RetryCopy, config: Option<&Config>) -> Option<Reason> {
    let after = copy.after?;
    let of = config.and_then(|c| c.retry.limit(after));
    Some(Reason::retry(&copy.attempts, after, of))
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
    /// Reads them from a database sweepd has run (`Store::has_sweepd_tables`).
    pub(super) async fn read(
        store: &Store,
        study: &Study,
        hosts: &[HostView],
        gone_after: Duration,
        config: Option<&Config>,
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
        let retries = store
            .retry_copies(study)
            .await?
            .iter()
            .filter_map(|c| Some((c.trial_id, retry_reason(c, config)?)))
            .collect();
        let paused = store.control(study).await?.state == ControlState::Paused;
        Ok(Reasons {
            lines,
            retries,
            paused,
        })
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
                // Why it waits first (the owner's pause before all), then which retry it is.
                let mut reasons: Vec<Reason> =
                    self.paused.then_some(Reason::Paused).into_iter().collect();
                reasons.extend(
                    self.lines
                        .iter()
                        .flat_map(|l| l.reasons_of(t.trial_id))
                        .filter(|r| !(self.paused && *r == Reason::Paused))
                        .chain(
                            self.retries
                                .iter()
                                .filter(|(id, _)| *id == t.trial_id)
                                .map(|(_, r)| r.clone()),
                        ),
                );
                (!reasons.is_empty()).then(|| Reason::phrases(&reasons))
            }
            _ => None,
        }
    }

    /// The numbered trials the lines name, head of each line first, then the retry copies the
    /// lines do not name, oldest first; at most `n`.
    pub(super) fn trial_ids(&self, n: usize) -> Vec<i64> {
        let mut ids: Vec<i64> = Vec::new();
        let lined = self
            .lines
            .iter()
            .flat_map(|l| &l.queued)
            .map(|q| q.trial_id);
        let retried = self.retries.iter().map(|(id, _)| Some(*id));
        for id in lined.chain(retried).flatten() {
            if !ids.contains(&id) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::reason::Queued;
    use crate::study::FailureKind;

    fn waiting(trial_id: i64) -> TrialView {
        TrialView {
            trial_id,
            number: trial_id - 1,
            state: "WAITING".into(),
            value: serde_json::Value::Null,
            ..TrialView::default()
        }
    }

    fn copy(trial_id: i64, after: Option<FailureKind>) -> RetryCopy {
        RetryCopy {
            trial_id,
            attempts: [(FailureKind::Oom, 2)].into_iter().collect(),
            after,
        }
    }

    #[test]
    fn a_retry_copy_says_why_it_waits_then_which_retry_it_is() {
        let retries = [copy(7, Some(FailureKind::Oom)), copy(9, None)]
            .iter()
            .filter_map(|c| Some((c.trial_id, retry_reason(c, None)?)))
            .collect();
        let reasons = Reasons {
            lines: vec![Line {
                study: Some(Reason::Breaker {
                    until: "2026-03-01 14:05:00".into(),
                }),
                queued: vec![Queued {
                    trial_id: Some(5),
                    reason: Reason::Queued { ahead: 1 },
                }],
            }],
            retries,
            paused: false,
        };
        assert_eq!(
            reasons.of(&waiting(7)).as_deref(),
            Some("held by the breaker until 14:05; retry 2 after oom")
        );
        // A copy whose failure is not recorded is not phrased as a retry.
        assert_eq!(
            reasons.of(&waiting(9)).as_deref(),
            Some("held by the breaker until 14:05")
        );
        // The lines' trials first, then the retry copies.
        assert_eq!(reasons.trial_ids(10), vec![5, 7]);
        assert_eq!(reasons.trial_ids(1), vec![5]);
    }

    #[test]
    fn a_paused_study_s_waiting_trials_said_nothing_of_the_pause() {
        let with_daemon = Line {
            study: Some(Reason::Paused),
            queued: vec![Queued {
                trial_id: Some(5),
                reason: Reason::Queued { ahead: 1 },
            }],
        };
        let retries = [copy(7, Some(FailureKind::Oom))]
            .iter()
            .filter_map(|c| Some((c.trial_id, retry_reason(c, None)?)))
            .collect();
        let reasons = Reasons {
            lines: vec![with_daemon],
            retries,
            paused: true,
        };
        // Once, first, whether a daemon's line says it too or not.
        assert_eq!(
            reasons.of(&waiting(5)).as_deref(),
            Some("paused; waiting: 1 candidate ahead in line")
        );
        assert_eq!(
            reasons.of(&waiting(7)).as_deref(),
            Some("paused; retry 2 after oom")
        );
        assert_eq!(reasons.of(&waiting(8)).as_deref(), Some("paused"));
        let running = TrialView {
            state: "RUNNING".into(),
            ..waiting(8)
        };
        assert!(!reasons.of(&running).unwrap().contains("paused"));
    }
}
