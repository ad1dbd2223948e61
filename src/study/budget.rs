//! Budgets a person thinks in, beside the number of trials: the study's time limit, GPU-hours
//! spent, and a stall (the best value has not improved for a while), with the one decision
//! of which of them ends the study ([`ended`]) and the words that say so ([`Ended`]'s
//! `Display`, the daemon's log line and the notification's message).
//!
//! The stall rule ([`stall`]) is deliberately simple, as Keras' `EarlyStopping` is: over the
//! finished trials in the order they finished, the best value counts as improved when a trial
//! beats the best that last counted by more than `min_delta` of it (relative), and the study
//! has stalled once `patience` finished trials in a row brought no such improvement. Optuna's
//! Terminator estimates, from a Gaussian process fitted to the trials, how much better the
//! best could still get and stops when that is below the noise of the objective's own
//! evaluation (the variance of cross-validation scores the objective must report); it costs a
//! GP fit per trial and needs those scores. This rule needs neither, and says in two numbers
//! what it will do.

use super::trial::Direction;
use crate::units::{format_duration, format_elapsed};
use std::fmt;
use std::time::Duration;

/// `[study] patience` and `min_delta`: stop when `patience` finished trials in a row did not
/// improve the best value by more than `min_delta` of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Patience {
    /// At least 1.
    pub patience: u32,
    /// Relative, at least 0 (0: any strict improvement counts).
    pub min_delta: f64,
}

/// What the stall rule found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// The best value that last counted as an improvement (`None`: no feasible COMPLETE trial
    /// yet).
    pub best: Option<f64>,
    /// Finished trials since it did (none are counted before the first feasible COMPLETE
    /// trial: a study has no best to improve until then).
    pub since: u32,
    /// `since` reached `patience`.
    pub stalled: bool,
}

/// The stall rule over the finished trials' values in the order they finished (`None`: a
/// trial without a value, PRUNED or FAILed, or one that breaks its constraints, which improves
/// nothing; a NaN improves nothing either).
pub fn stall(values: &[Option<f64>], direction: Direction, rule: Patience) -> Stall {
    let mut best: Option<f64> = None;
    let mut since = 0u32;
    for v in values {
        match (best, v) {
            (None, Some(v)) if !v.is_nan() => best = Some(*v),
            (None, _) => {}
            (Some(b), Some(v)) if improves(*v, b, direction, rule.min_delta) => {
                best = Some(*v);
                since = 0;
            }
            (Some(_), _) => since = since.saturating_add(1),
        }
    }
    Stall {
        best,
        since,
        stalled: best.is_some() && since >= rule.patience,
    }
}

/// Whether `v` beats `best` by more than `min_delta` of `best` (relative; any strict
/// improvement of a best of 0).
fn improves(v: f64, best: f64, direction: Direction, min_delta: f64) -> bool {
    direction.better(v, best) && (v - best).abs() > min_delta * best.abs()
}

/// The GPU-seconds a finished trial spent: its running time times the share of its GPU it
/// held, its measured peak over the device's memory (at most all of it; a whole GPU where
/// either is unknown, so that a budget is never overspent for want of a reading).
pub fn gpu_seconds(ran_s: f64, peak: Option<u64>, total: Option<u64>) -> f64 {
    let share = match (peak, total) {
        (Some(p), Some(t)) if t > 0 => (p as f64 / t as f64).min(1.0),
        _ => 1.0,
    };
    ran_s.max(0.0) * share
}

/// What the last read of a study's finished trials found, for a daemon that asks before each
/// start: read again only when the count of finished trials moved.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Spending {
    /// The count of finished trials at the last read (`None`: never read).
    read_at: Option<u64>,
    gpu_seconds: f64,
    /// The finished trials' values in the order they finished, by trial id.
    values: Vec<(i64, Option<f64>)>,
    /// The daemon's own finishes not yet in the last read: its count moves before their rows
    /// are written (a finish and the next start are one commit), and the next start is decided
    /// with them.
    own: Vec<(i64, Option<f64>)>,
}

impl Spending {
    /// Whether the finished trials must be read again, `finished` of them counted now.
    pub fn stale(&self, finished: u64) -> bool {
        self.read_at != Some(finished)
    }

    /// What a read found; the own finishes it holds are no longer pending.
    pub fn read(&mut self, finished: u64, gpu_seconds: f64, values: Vec<(i64, Option<f64>)>) {
        self.own
            .retain(|(id, _)| !values.iter().any(|(read, _)| read == id));
        self.read_at = Some(finished);
        self.gpu_seconds = gpu_seconds;
        self.values = values;
    }

    /// A finish of the daemon's own, before a read finds its row.
    pub fn own(&mut self, trial_id: i64, value: Option<f64>) {
        self.own.push((trial_id, value));
    }

    pub fn gpu_seconds(&self) -> f64 {
        self.gpu_seconds
    }

    /// The values the stall rule reads: the last read's, then the own finishes after it.
    pub fn values(&self) -> Vec<Option<f64>> {
        self.values
            .iter()
            .chain(&self.own)
            .map(|(_, v)| *v)
            .collect()
    }
}

/// The limits of a study, as its config sets them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub n_trials: Option<u64>,
    /// From the daemon's start.
    pub timeout: Option<Duration>,
    pub gpu_hours: Option<f64>,
    pub patience: Option<Patience>,
}

/// What a study has spent of them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    /// Trials that spend the budget (the tally's `finished`).
    pub finished: u64,
    /// Since the daemon started.
    pub ran: Duration,
    /// Trial-seconds times the share of a GPU each held, every host's and every run's.
    pub gpu_seconds: f64,
    /// The stall rule's finding, where `patience` is set.
    pub stall: Option<Stall>,
}

/// Why a study ended, in the order [`ended`] looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ended {
    Trials {
        finished: u64,
        n_trials: u64,
    },
    Timeout {
        timeout: Duration,
        ran: Duration,
        finished: u64,
    },
    GpuHours {
        spent: f64,
        budget: f64,
    },
    Stalled {
        best: f64,
        rule: Patience,
    },
}

/// Which budget, if any, ends the study now: no new trial starts (running ones finish).
pub fn ended(limits: &Limits, spent: &Spent) -> Option<Ended> {
    if let Some(n) = limits.n_trials.filter(|n| spent.finished >= *n) {
        return Some(Ended::Trials {
            finished: spent.finished,
            n_trials: n,
        });
    }
    if let Some(t) = limits.timeout.filter(|t| spent.ran >= *t) {
        return Some(Ended::Timeout {
            timeout: t,
            ran: spent.ran,
            finished: spent.finished,
        });
    }
    if let Some(h) = limits.gpu_hours.filter(|h| spent.gpu_seconds >= h * 3600.0) {
        return Some(Ended::GpuHours {
            spent: spent.gpu_seconds / 3600.0,
            budget: h,
        });
    }
    match (limits.patience, spent.stall) {
        (
            Some(rule),
            Some(Stall {
                best: Some(best),
                stalled: true,
                ..
            }),
        ) => Some(Ended::Stalled { best, rule }),
        _ => None,
    }
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Trials { finished, n_trials } => write!(
                f,
                "study done: {finished}/{n_trials} trials finished ([study] n_trials)"
            ),
            Ended::Timeout {
                timeout,
                ran,
                finished,
            } => write!(
                f,
                "study ended: its time limit is reached ([study] timeout = \"{}\", the daemon ran \
                 {}); {finished} trials finished, no new trial starts",
                format_duration(*timeout),
                format_elapsed(*ran)
            ),
            Ended::GpuHours { spent, budget } => write!(
                f,
                "study ended: {spent:.2} of its {budget} GPU-hours spent ([study] gpu_hours); \
                 no new trial starts"
            ),
            Ended::Stalled { best, rule } => write!(
                f,
                "study ended: the best value ({best}) has not improved by more than {} in the \
                 last {} finished trials ([study] patience, min_delta); no new trial starts",
                percent(rule.min_delta),
                rule.patience
            ),
        }
    }
}

/// A relative delta as a percentage without needless digits: 0.01 → "1%", 0.005 → "0.5%".
fn percent(x: f64) -> String {
    let p = format!("{:.4}", x * 100.0);
    let p = p.trim_end_matches('0').trim_end_matches('.');
    format!("{p}%")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const MIN: Direction = Direction::Minimize;
    const MAX: Direction = Direction::Maximize;

    fn rule(patience: u32, min_delta: f64) -> Patience {
        Patience {
            patience,
            min_delta,
        }
    }

    /// Values in finishing order (NAN stands for a NaN, `None` for a PRUNED or FAILed trial) →
    /// (best that counted, trials since, stalled).
    #[rstest]
    #[case::improving_every_time(MIN, &[Some(5.0), Some(4.0), Some(3.0)], rule(2, 0.0), (Some(3.0), 0, false))]
    #[case::flat_for_patience(MIN, &[Some(5.0), Some(6.0), Some(7.0)], rule(2, 0.0), (Some(5.0), 2, true))]
    #[case::one_short_of_patience(MIN, &[Some(5.0), Some(6.0)], rule(2, 0.0), (Some(5.0), 1, false))]
    // 4.99 beats 5 by 0.2%, not by 1%: no improvement; 4.9 does (2%).
    #[case::below_min_delta(MIN, &[Some(5.0), Some(4.99), Some(4.99)], rule(2, 0.01), (Some(5.0), 2, true))]
    #[case::above_min_delta_resets(MIN, &[Some(5.0), Some(4.99), Some(4.9)], rule(2, 0.01), (Some(4.9), 0, false))]
    // Small steps that add up count once they beat the best that last counted by min_delta.
    #[case::creeping_steps_add_up(MIN, &[Some(100.0), Some(99.5), Some(99.0), Some(98.9)], rule(9, 0.01), (Some(98.9), 0, false))]
    #[case::maximize(MAX, &[Some(0.5), Some(0.9), Some(0.8), Some(0.85)], rule(2, 0.0), (Some(0.9), 2, true))]
    // Pruned and failed trials improve nothing and count.
    #[case::pruned_count(MIN, &[Some(1.0), None, None], rule(2, 0.0), (Some(1.0), 2, true))]
    // Nothing counts before the first COMPLETE trial: there is no best to improve.
    #[case::nothing_before_a_best(MIN, &[None, None, None, Some(3.0)], rule(2, 0.0), (Some(3.0), 0, false))]
    #[case::no_complete_trial(MIN, &[None, None, None], rule(1, 0.0), (None, 0, false))]
    #[case::nan_improves_nothing(MIN, &[Some(f64::NAN), Some(2.0), Some(f64::NAN)], rule(1, 0.0), (Some(2.0), 1, true))]
    // A best of 0: any strict improvement counts, whatever min_delta.
    #[case::best_of_zero(MAX, &[Some(0.0), Some(1e-9)], rule(1, 0.5), (Some(1e-9), 0, false))]
    #[case::negative_best(MIN, &[Some(-10.0), Some(-10.05), Some(-10.2)], rule(1, 0.01), (Some(-10.2), 0, false))]
    fn the_stall_rule(
        #[case] direction: Direction,
        #[case] values: &[Option<f64>],
        #[case] r: Patience,
        #[case] expect: (Option<f64>, u32, bool),
    ) {
        let s = stall(values, direction, r);
        assert_eq!((s.best, s.since, s.stalled), expect);
    }

    const GIB: u64 = 1 << 30;

    #[rstest]
    #[case::a_quarter(3600.0, Some(20 * GIB), Some(80 * GIB), 900.0)]
    #[case::peak_past_the_card(100.0, Some(90 * GIB), Some(80 * GIB), 100.0)]
    #[case::no_peak_a_whole_gpu(100.0, None, Some(80 * GIB), 100.0)]
    #[case::no_size_a_whole_gpu(100.0, Some(GIB), None, 100.0)]
    #[case::a_clock_gone_back(-5.0, Some(GIB), Some(2 * GIB), 0.0)]
    fn a_trial_spends_its_time_times_its_share_of_the_gpu(
        #[case] ran_s: f64,
        #[case] peak: Option<u64>,
        #[case] total: Option<u64>,
        #[case] expect: f64,
    ) {
        assert_eq!(gpu_seconds(ran_s, peak, total), expect);
    }

    #[test]
    fn an_own_finish_counts_until_a_read_holds_it_and_only_once() {
        let mut s = Spending::default();
        assert!(s.stale(0));
        s.read(1, 10.0, vec![(1, Some(5.0))]);
        assert!(!s.stale(1));
        // Our finish of trial 2 counts at once, before its row is read.
        s.own(2, Some(6.0));
        assert!(s.stale(2));
        assert_eq!(s.values(), [Some(5.0), Some(6.0)]);
        // A read before its row was written keeps it; one after drops the copy.
        s.read(2, 10.0, vec![(1, Some(5.0))]);
        assert_eq!(s.values(), [Some(5.0), Some(6.0)]);
        s.read(3, 20.0, vec![(1, Some(5.0)), (2, Some(6.0)), (3, None)]);
        assert_eq!(s.values(), [Some(5.0), Some(6.0), None]);
        assert_eq!(s.gpu_seconds(), 20.0);
    }

    #[test]
    fn a_study_that_stalls_stops_and_one_that_improves_does_not() {
        let r = rule(5, 0.01);
        let limits = Limits {
            patience: Some(r),
            ..Limits::default()
        };
        let stalls: Vec<Option<f64>> = (0..20).map(|i| Some(1.0 + (i % 3) as f64)).collect();
        let improves: Vec<Option<f64>> = (0..20).map(|i| Some(100.0 * 0.9f64.powi(i))).collect();
        let spent = |values: &[Option<f64>]| Spent {
            stall: Some(stall(values, MIN, r)),
            ..Spent::default()
        };
        assert_eq!(
            ended(&limits, &spent(&stalls)),
            Some(Ended::Stalled { best: 1.0, rule: r })
        );
        assert_eq!(ended(&limits, &spent(&improves)), None);
    }

    #[rstest]
    #[case::nothing_spent(Spent::default(), None)]
    #[case::trials(Spent { finished: 10, ..Spent::default() }, Some("study done: 10/10 trials finished ([study] n_trials)"))]
    #[case::timeout(
        Spent { ran: Duration::from_secs(7201), finished: 4, ..Spent::default() },
        Some("study ended: its time limit is reached ([study] timeout = \"2h\", the daemon ran 2h00m); 4 trials finished, no new trial starts")
    )]
    #[case::gpu_hours(
        Spent { gpu_seconds: 1.5 * 3600.0, ..Spent::default() },
        Some("study ended: 1.50 of its 1.5 GPU-hours spent ([study] gpu_hours); no new trial starts")
    )]
    #[case::gpu_hours_short(Spent { gpu_seconds: 5399.0, ..Spent::default() }, None)]
    // Trials first: the budget a study was given in trials is what a person reads first.
    #[case::trials_before_time(
        Spent { finished: 10, ran: Duration::from_secs(9000), ..Spent::default() },
        Some("study done: 10/10 trials finished ([study] n_trials)")
    )]
    #[case::stalled(
        Spent { stall: Some(Stall { best: Some(0.25), since: 8, stalled: true }), ..Spent::default() },
        Some("study ended: the best value (0.25) has not improved by more than 0.5% in the last 8 finished trials ([study] patience, min_delta); no new trial starts")
    )]
    fn which_budget_ends_the_study_and_what_the_log_says(
        #[case] spent: Spent,
        #[case] said: Option<&str>,
    ) {
        let limits = Limits {
            n_trials: Some(10),
            timeout: Some(Duration::from_secs(7200)),
            gpu_hours: Some(1.5),
            patience: Some(rule(8, 0.005)),
        };
        assert_eq!(
            ended(&limits, &spent).map(|e| e.to_string()).as_deref(),
            said
        );
    }
}
