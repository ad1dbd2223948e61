//! Stopping one running trial from outside its conversation: a trial another process ended
//! (`sweepd kill`, optuna-dashboard's fail, an Optuna script's `tell`), or every running trial
//! of a study cancelled by `sweepd cancel`. Housekeeping finds them and says why (`stop`); the
//! trial's conversation (`trial`) waits on its [`Stop`], kills its worker's group when it fires
//! and ends the trial with that reason. A trial ended elsewhere is final already, so the slot's
//! finish then writes nothing (the store's finish is conditional on RUNNING) and the slot moves
//! on; a cancelled one is still RUNNING, so it is recorded FAIL `interrupted` and re-enqueued.
//!
//! [`stop_reason`] is the pure rule of what a trial ended elsewhere is told, table-tested.

use crate::store::EndedElsewhere;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The running trials of this daemon that can be stopped, by trial id.
#[derive(Default)]
pub(super) struct Stops {
    trials: Mutex<HashMap<i64, Stop>>,
}

/// One trial's stop: fired once, with its reason.
#[derive(Clone, Default)]
pub(super) struct Stop {
    token: CancellationToken,
    why: Arc<Mutex<Option<String>>>,
}

impl Stop {
    /// Waits until the trial is stopped; returns why.
    pub(super) async fn stopped(&self) -> String {
        self.token.cancelled().await;
        self.why
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

impl Stops {
    /// The stop of a trial that starts running now.
    pub(super) fn watch(&self, trial_id: i64) -> Stop {
        let stop = Stop::default();
        self.map().insert(trial_id, stop.clone());
        stop
    }

    /// The trial's conversation is over: nothing stops it any more.
    pub(super) fn forget(&self, trial_id: i64) {
        self.map().remove(&trial_id);
    }

    /// The trials that may be stopped now.
    pub(super) fn running(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.map().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Stops the trial, if its conversation still runs and nothing stopped it yet; returns
    /// whether this call stopped it.
    pub(super) fn stop(&self, trial_id: i64, why: String) -> bool {
        let map = self.map();
        let Some(stop) = map.get(&trial_id) else {
            return false;
        };
        if stop.token.is_cancelled() {
            return false;
        }
        *stop.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        stop.token.cancel();
        true
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Stop>> {
        self.trials.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a trial that another process ended is told, in the log and as its interrupted reason.
pub(super) fn stop_reason(e: &EndedElsewhere) -> String {
    match (&e.state, &e.killed_by) {
        (None, _) => "the trial is no longer in the database (its study deleted?): its worker \
                      was stopped"
            .to_owned(),
        (Some(state), Some(by)) => {
            format!("the trial was ended by hand (`sweepd kill` by {by}, now {state}): its worker was stopped")
        }
        (Some(state), None) => format!(
            "the trial was ended by another process (now {state}: optuna-dashboard, an Optuna \
             script's tell, another host): its worker was stopped"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::TrialState;
    use rstest::rstest;

    fn ended(state: Option<TrialState>, by: Option<&str>) -> EndedElsewhere {
        EndedElsewhere {
            trial_id: 1,
            state,
            killed_by: by.map(str::to_owned),
        }
    }

    #[rstest]
    #[case::killed_by_hand(
        ended(Some(TrialState::Pruned), Some("ana@node1")),
        "the trial was ended by hand (`sweepd kill` by ana@node1, now PRUNED): its worker was stopped"
    )]
    #[case::failed_from_the_dashboard(
        ended(Some(TrialState::Fail), None),
        "the trial was ended by another process (now FAIL: optuna-dashboard, an Optuna script's \
         tell, another host): its worker was stopped"
    )]
    #[case::gone(
        ended(None, None),
        "the trial is no longer in the database (its study deleted?): its worker was stopped"
    )]
    fn a_trial_ended_elsewhere_is_told_who_ended_it(#[case] e: EndedElsewhere, #[case] want: &str) {
        assert_eq!(stop_reason(&e), want);
    }

    #[tokio::test]
    async fn a_trial_is_stopped_once_and_only_while_its_conversation_runs() {
        let stops = Stops::default();
        assert!(!stops.stop(7, "no such trial".into()));
        let stop = stops.watch(7);
        assert_eq!(stops.running(), [7]);
        assert!(stops.stop(7, "first".into()));
        assert!(!stops.stop(7, "second".into()));
        assert_eq!(stop.stopped().await, "first");
        stops.forget(7);
        assert!(stops.running().is_empty());
        assert!(!stops.stop(7, "after".into()));
    }
}
