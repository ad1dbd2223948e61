//! The budget's count of a study's trials, whoever runs them.

use super::trial::TrialState;
use std::collections::HashMap;

/// The study's trials as the budget counts them, whoever runs them (this daemon, an Optuna
/// script, another host), kept current by reading only what can have changed: a final trial
/// never changes again, so a refresh (the store's `refresh_tally`) reads the trials created
/// since the last one ([`Tally::seen`]) and those that were not final then ([`Tally::open`]),
/// and hands each to [`Tally::apply`].
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// The highest trial_id of the study read so far.
    seen: i64,
    /// Trials with an outcome that spends the budget: COMPLETE, PRUNED, FAIL without a retry.
    pub finished: u64,
    /// Trials not final yet, by trial_id.
    open: HashMap<i64, OpenTrial>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OpenTrial {
    running: bool,
    /// Run by a sweepd daemon (this one or another): it will spend the budget unless it fails
    /// and is retried. A RUNNING trial of an Optuna script is not counted: sweepd cannot tell a
    /// live one from one whose process died.
    sweepd: bool,
}

impl Tally {
    /// The highest trial_id read so far: a refresh reads the trials above it.
    pub fn seen(&self) -> i64 {
        self.seen
    }

    /// The trials that were not final when last read: a refresh reads them again.
    pub fn open(&self) -> Vec<i64> {
        self.open.keys().copied().collect()
    }

    /// RUNNING trials of sweepd daemons: starts already reserved against the budget.
    pub fn reserved(&self) -> u64 {
        self.open.values().filter(|t| t.running && t.sweepd).count() as u64
    }

    /// The WAITING trials, by trial_id.
    pub fn waiting_ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.open
            .iter()
            .filter(|(_, t)| !t.running)
            .map(|(id, _)| *id)
    }

    /// WAITING trials: retry copies and enqueued trials, each of which a start will claim.
    pub fn waiting(&self) -> u64 {
        self.open.values().filter(|t| !t.running).count() as u64
    }

    /// Whether another trial may start under a budget of `n_trials` (a WAITING one claimed:
    /// see [`Tally::room_for_new`] for a new one).
    pub fn room(&self, n_trials: Option<u64>) -> bool {
        n_trials.is_none_or(|n| self.finished + self.reserved() < n)
    }

    /// Whether a *new* trial may start under a budget of `n_trials`: the WAITING trials hold
    /// starts of their own. Otherwise a new trial could take the last start while the WAITING
    /// copy of an attempt that failed (or was failed over from a dead host) still waits, and
    /// the budget would end with that copy never run.
    pub fn room_for_new(&self, n_trials: Option<u64>) -> bool {
        n_trials.is_none_or(|n| self.finished + self.reserved() + self.waiting() < n)
    }

    /// This daemon started the new trial `trial_id`, in the transaction that refreshed the
    /// tally (so no other trial can have been created between: the tally has seen everything
    /// up to it).
    pub fn started_new(&mut self, trial_id: i64) {
        self.seen = self.seen.max(trial_id);
        self.started(trial_id);
    }

    /// This daemon started `trial_id` (a WAITING trial it claimed).
    pub fn started(&mut self, trial_id: i64) {
        self.open.insert(
            trial_id,
            OpenTrial {
                running: true,
                sweepd: true,
            },
        );
    }

    /// A final failure counted before was re-enqueued after all: it no longer spends the budget.
    pub fn unspend(&mut self) {
        self.finished = self.finished.saturating_sub(1);
    }

    /// This daemon finished `trial_id`; `spends` unless it failed and was retried. Returns
    /// whether the tally still had the trial open (and so counted this finish).
    pub fn finished_own(&mut self, trial_id: i64, spends: bool) -> bool {
        let open = self.open.remove(&trial_id).is_some();
        if open && spends {
            self.finished += 1;
        }
        open
    }

    /// A finish counted by [`Tally::finished_own`] (which had the trial open) found the trial
    /// already ended by another process (a host that failed this one over, Optuna's
    /// `fail_stale_trials`): the count is taken back and the trial read again at the next
    /// refresh, which counts it as that process ended it.
    pub fn finished_elsewhere(&mut self, trial_id: i64, spends: bool) {
        if spends {
            self.finished = self.finished.saturating_sub(1);
        }
        self.started(trial_id);
    }

    /// What a refresh read of one trial: its state (`None`: deleted, or a state this version
    /// does not know), whether it is a FAIL with a retry copy, whether a sweepd daemon runs it.
    pub fn apply(&mut self, trial_id: i64, state: Option<TrialState>, retried: bool, sweepd: bool) {
        match state {
            Some(s) if !s.is_final() => {
                let running = s == TrialState::Running;
                self.open.insert(trial_id, OpenTrial { running, sweepd });
            }
            Some(final_state) => {
                // Final trials count once: when first seen, or when an open one becomes final.
                let unseen = self.open.remove(&trial_id).is_some() || trial_id > self.seen;
                if unseen && !(final_state == TrialState::Fail && retried) {
                    self.finished += 1;
                }
            }
            None => {
                self.open.remove(&trial_id);
            }
        }
        self.seen = self.seen.max(trial_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_final_trials_once_and_reserves_sweepd_running_ones() {
        let mut t = Tally::default();
        // An Optuna script's RUNNING trial reserves nothing; sweepd's does.
        t.apply(1, Some(TrialState::Running), false, false);
        t.apply(2, Some(TrialState::Running), false, true);
        t.apply(3, Some(TrialState::Waiting), false, false);
        assert_eq!((t.finished, t.reserved()), (0, 1));
        assert!(t.room(Some(2)));
        assert!(!t.room(Some(1)));
        assert!(t.room(None));
        // Seen final on a later refresh: counted once, and no longer open.
        t.apply(1, Some(TrialState::Complete), false, false);
        t.apply(1, Some(TrialState::Complete), false, false);
        assert_eq!(t.finished, 1);
        // A FAIL with a retry copy spends nothing; one without does.
        t.apply(2, Some(TrialState::Fail), true, true);
        assert_eq!((t.finished, t.reserved()), (1, 0));
        t.apply(3, Some(TrialState::Fail), false, false);
        assert_eq!(t.finished, 2);
        // Our own start and finish, and a finish seen again later, count once.
        t.started_new(10);
        assert_eq!(t.reserved(), 1);
        assert!(t.finished_own(10, true));
        assert!(!t.finished_own(10, true));
        assert_eq!((t.finished, t.reserved()), (3, 0));
        // A deleted open trial leaves nothing behind.
        t.apply(11, Some(TrialState::Waiting), false, false);
        t.apply(11, None, false, false);
        assert!(t.open().is_empty());
        assert_eq!(t.seen(), 11);
    }

    /// Regression (the flaky `three_hosts_one_killed…` test): a surviving host failed over a
    /// dead host's running trial (FAIL with a WAITING copy, spending nothing) while the
    /// survivors' running trials held every other start; when one of those finished, a new
    /// sample took the start that freed up and the study ended with the copy never run.
    #[test]
    fn a_waiting_copy_holds_its_start_against_new_trials() {
        let mut t = Tally::default();
        for id in 1..=3 {
            t.started_new(id);
        }
        // Budget 3, all of it running: trial 3 was a dead host's, failed over to copy 4.
        t.apply(3, Some(TrialState::Fail), true, true);
        t.apply(4, Some(TrialState::Waiting), false, false);
        assert!(t.finished_own(1, true));
        assert_eq!((t.finished, t.reserved(), t.waiting()), (1, 1, 1));
        // One start is left: the copy's, not a new trial's.
        assert!(t.room(Some(3)));
        assert!(!t.room_for_new(Some(3)));
        // Claimed, it runs like any other; a new trial fits only a larger budget.
        t.started(4);
        assert_eq!(t.waiting(), 0);
        assert!(!t.room(Some(3)));
        assert!(!t.room_for_new(Some(3)));
        assert!(t.room_for_new(Some(4)));
    }

    /// Regression: a host cut off from the database finished a trial that another host had
    /// failed over meanwhile (FAIL with a retry copy: it spends nothing). A refresh had
    /// already read that FAIL and dropped the trial, so the finish counted nothing, but it
    /// was taken back all the same: one final trial too many ran.
    #[test]
    fn a_finish_found_ended_elsewhere_takes_back_only_what_it_counted() {
        let mut t = Tally::default();
        t.started_new(1);
        t.started_new(2);
        // Trial 1: counted by our finish, then found failed over: not spent, read again.
        assert!(t.finished_own(1, true));
        t.finished_elsewhere(1, true);
        t.apply(1, Some(TrialState::Fail), true, true);
        // Trial 2: a refresh saw it failed over before our finish counted anything.
        t.apply(2, Some(TrialState::Fail), true, true);
        assert!(!t.finished_own(2, true));
        assert_eq!((t.finished, t.reserved()), (0, 0));
        // Ended elsewhere in a way that spends (Optuna's fail_stale_trials, no retry copy):
        // counted once, by the refresh.
        t.started_new(3);
        assert!(t.finished_own(3, true));
        t.finished_elsewhere(3, true);
        t.apply(3, Some(TrialState::Fail), false, true);
        assert_eq!((t.finished, t.reserved()), (1, 0));
    }
}
