//! What a trial's outcome is recorded as: completed, pruned, or failed and then retried
//! (a WAITING copy) or final; whether its params are infeasible; what an out-of-memory failure
//! teaches admission and the memory model (a trial that reached its own memory cap, `cap`, is
//! told from a full device, `oom`); whether the study halts because its trials can only fail;
//! and what the finish does to the circuit breaker.

use crate::classify;
use crate::config::RetryConfig;
use crate::study::{Attempts, Failure, FailureKind, Finish};
use crate::supervisor::policy::{self, SameError, Signature};

/// How a trial ended, before the retry policy turns it into a [`Finish`].
#[derive(Debug, Clone, PartialEq)]
pub(in crate::supervisor) enum Outcome {
    /// One value per objective, already checked against the study's objectives.
    Complete(Vec<f64>),
    Pruned,
    Failed {
        kind: FailureKind,
        reason: String,
        tail: Option<String>,
        /// For a user error: its type and where the user's code raised it.
        error: Option<classify::UserError>,
    },
}

/// A trial that ran on a GPU, as its finish is judged.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::supervisor) struct OnDevice {
    /// The device's memory by the latest reading (`None`: no reading).
    pub(in crate::supervisor) total: Option<u64>,
    /// The peak the readings saw (`None`: none).
    pub(in crate::supervisor) peak: Option<u64>,
    /// The estimate it was admitted with (0: none).
    pub(in crate::supervisor) bound: u64,
    /// `[gpu] trial_memory`'s guess with its margin (`MemoryModel::guess`).
    pub(in crate::supervisor) guess: u64,
    /// `[gpu] headroom`.
    pub(in crate::supervisor) headroom: u64,
    /// What its worker was taken to hold outside the allocator.
    pub(in crate::supervisor) context: u64,
    /// What its worker's helper said with its error: the most its allocator reserved, the
    /// allocation that failed, the cap it enforced.
    pub(in crate::supervisor) peak_reserved: Option<u64>,
    pub(in crate::supervisor) requested: Option<u64>,
    pub(in crate::supervisor) worker_cap: Option<u64>,
    /// How long it ran, from when its worker was given it (`None`: unknown): for a cap hit,
    /// what the wrong estimate cost.
    pub(in crate::supervisor) ran: Option<std::time::Duration>,
}

/// What [`finish`] decides from, besides the outcome.
pub(in crate::supervisor) struct FinishFacts<'a> {
    pub(in crate::supervisor) trial_id: i64,
    /// Its earlier failed attempts, by kind.
    pub(in crate::supervisor) attempts: &'a Attempts,
    /// Its worker started it as clean as a new process (`WorkerHealth::clean`).
    pub(in crate::supervisor) fresh_worker: bool,
    /// No other trial of ours, nor of another daemon on the host, ran on its device.
    pub(in crate::supervisor) alone: bool,
    /// `None` off GPUs.
    pub(in crate::supervisor) on_device: Option<OnDevice>,
    pub(in crate::supervisor) retry: &'a RetryConfig,
}

/// What [`finish`] decided.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::supervisor) struct Verdict {
    pub(in crate::supervisor) how: Finish,
    /// Its params do not fit the device: recorded as infeasible (Optuna's `constraints`) and
    /// avoided by later proposals.
    pub(in crate::supervisor) infeasible: bool,
    /// An out-of-memory failure on its device: admission there backs off
    /// (`Capacity::record_oom`).
    pub(in crate::supervisor) oom: bool,
    /// What the memory model raises its estimate near these params from, and the device's
    /// memory (`u64::MAX`: unknown) (`MemoryModel::record_oom`).
    pub(in crate::supervisor) reached: Option<(u64, u64)>,
    /// The study halts: its trials keep failing with the same error. What the run ends with.
    pub(in crate::supervisor) halt: Option<String>,
}

/// Turns an outcome into what is recorded: the retry policy (`policy::retry_allowed`),
/// infeasibility (`policy::infeasible`, weighed against the out-of-memory message's figures by
/// `policy::oom_verdict`) and the same-error stop (`same_error`, which this advances). A
/// failure of the error the study halted for is retried, as are those of the streak that
/// halted it: none of them spends the budget.
pub(in crate::supervisor) fn finish(
    outcome: Outcome,
    f: &FinishFacts,
    same_error: &mut SameError,
) -> Verdict {
    let mut verdict = Verdict {
        how: Finish::Pruned,
        infeasible: false,
        oom: false,
        reached: None,
        halt: None,
    };
    let (kind, mut reason, tail, error) = match outcome {
        Outcome::Complete(v) => {
            verdict.how = Finish::Complete(v);
            return verdict;
        }
        Outcome::Pruned => return verdict,
        Outcome::Failed {
            kind,
            reason,
            tail,
            error,
        } => (kind, reason, tail, error),
    };
    // Out of memory in a fresh process (no fragmentation of its own) with no other trial on
    // the device: these params do not fit this card.
    if let Some(v) = f
        .on_device
        .filter(|_| kind == FailureKind::Oom)
        .and_then(|d| cap_reached(&reason, tail.as_deref(), &d))
    {
        return v.verdict(reason, tail);
    }
    let mut infeasible = policy::infeasible(kind, f.alone, f.fresh_worker)
        .then(|| "out of memory while alone on the device".to_owned());
    let mut others_held = false;
    // An OOM that turned into a device-side assert still says the trial needs more.
    if let Some(d) = f.on_device.filter(|_| policy::oom_like(kind, &reason)) {
        verdict.oom = true;
        // What the message says the trial needed at least, where it says.
        let figures = tail
            .as_deref()
            .and_then(classify::oom_figures)
            .or_else(|| classify::oom_figures(&reason));
        let total = d.total.or(figures.as_ref().and_then(|f| f.total));
        let v = policy::oom_verdict(
            infeasible,
            &policy::OomFacts {
                footprint: figures.as_ref().and_then(|f| f.footprint()),
                demand: figures.as_ref().and_then(|f| f.demand()),
                peak: d.peak,
                total,
                headroom: d.headroom,
                bound: d.bound,
                guess: d.guess,
            },
        );
        infeasible = v.infeasible;
        reason.push_str(&v.notes);
        verdict.reached = v.reached.map(|r| (r, total.unwrap_or(u64::MAX)));
        others_held = v.others_held;
    }
    let signature = Signature::of(kind, &reason, error.as_ref());
    let retry = if let Some(why) = infeasible {
        verdict.infeasible = true;
        reason = format!("{reason} (infeasible: {why})");
        false
    } else if let Some(sig) = &signature {
        if same_error.stopped_for(sig) {
            true
        } else if same_error.failure(f.trial_id, sig, f.retry.stop_after_same_error) {
            verdict.halt = Some(policy::same_error_message(
                same_error.streak.len(),
                &reason,
                sig,
            ));
            true
        } else {
            policy::retry_allowed(kind, f.attempts, f.retry)
        }
    } else {
        // Memory that other processes held is theirs: retried, whatever the trial's attempts.
        others_held || policy::retry_allowed(kind, f.attempts, f.retry)
    };
    verdict.how = Finish::Fail(Failure {
        kind,
        reason,
        stderr_tail: tail,
        retry,
        counts: !others_held,
    });
    verdict
}

/// A trial that reached its own memory cap, as its finish records it.
struct CapReached {
    cap: u64,
    hit: classify::CapHit,
    /// What it needed at least: its worker's context, what its allocator held, the request.
    level: u64,
    total: Option<u64>,
    headroom: u64,
    ran: Option<std::time::Duration>,
}

/// Whether an out-of-memory failure of a trial on a device is its own cap
/// (`classify::cap_hit`, from the message's figures and the worker's), and where it hit. Only
/// a cap the worker says it enforced (`worker_cap`) can be hit: a worker that did not (an older
/// helper, a framework it could not limit) grew into the device, and its OOM is the device's.
fn cap_reached(reason: &str, tail: Option<&str>, d: &OnDevice) -> Option<CapReached> {
    let cap = d.worker_cap?;
    let figures = tail
        .and_then(classify::oom_figures)
        .or_else(|| classify::oom_figures(reason));
    let hit = classify::cap_hit(&classify::CapFacts {
        cap,
        figures: figures.as_ref(),
        peak_reserved: d.peak_reserved,
        requested: d.requested,
    })?;
    Some(CapReached {
        cap,
        hit,
        level: hit.level().saturating_add(d.context),
        total: d.total.or(figures.and_then(|f| f.total)),
        headroom: d.headroom,
        ran: d.ran,
    })
}

impl CapReached {
    /// Re-run with a cap learned from where it hit (the memory model's floor at its level),
    /// spending neither the budget nor a retry, unless that level never fits the device: then
    /// its params are infeasible, as an out-of-memory failure alone on the card would say.
    fn verdict(self, reason: String, tail: Option<String>) -> Verdict {
        use crate::units::format_gib;
        let never = self
            .total
            .filter(|t| policy::never_fits(self.level, *t, self.headroom));
        // The seconds a wrong estimate cost: what the bench sums over capped re-runs.
        let after = self
            .ran
            .map(|d| format!(" after {:.1} s", d.as_secs_f64()))
            .unwrap_or_default();
        let mut reason = format!(
            "reached its memory cap of {}{after}: its allocator held {} and asked for {} more \
             ({reason})",
            format_gib(self.cap),
            format_gib(self.hit.held),
            format_gib(self.hit.requested),
        );
        if let Some(total) = never {
            reason.push_str(&format!(
                " (infeasible: needs at least {} with its worker's context, more than the \
                 device's {} less headroom {})",
                format_gib(self.level),
                format_gib(total),
                format_gib(self.headroom)
            ));
        } else {
            reason.push_str(&format!(
                "; re-run with room for at least {}",
                format_gib(self.level)
            ));
        }
        Verdict {
            how: Finish::Fail(Failure {
                kind: FailureKind::Cap,
                reason,
                stderr_tail: tail,
                retry: never.is_none(),
                counts: false,
            }),
            infeasible: never.is_some(),
            oom: false,
            reached: Some((self.level, self.total.unwrap_or(u64::MAX))),
            halt: None,
        }
    }
}

/// What a finish does to the circuit breaker of its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum BreakerEffect {
    /// A fault that may clear by itself (a device, a driver, the memory others use): counted.
    Failure,
    /// A success (complete or pruned): the breaker and the same-error streak start over.
    Success,
    /// An error in the objective, or an interruption: the same next time, nothing to count.
    None,
}

pub(in crate::supervisor) fn breaker_effect(how: &Finish) -> BreakerEffect {
    match how {
        Finish::Fail(f) if f.kind.may_clear() => BreakerEffect::Failure,
        Finish::Fail(_) => BreakerEffect::None,
        Finish::Complete(_) | Finish::Pruned => BreakerEffect::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::time::Duration;
    use FailureKind::*;

    const G: u64 = 1 << 30;

    fn retry() -> RetryConfig {
        RetryConfig {
            oom: 2,
            cuda_fatal: 1,
            crash: 1,
            breaker_threshold: 3,
            breaker_backoff: Duration::from_secs(60),
            breaker_max_backoff: Duration::from_secs(600),
            oom_admission_factor: 0.75,
            oom_recovery: Duration::from_secs(600),
            stop_after_same_error: 3,
        }
    }

    fn failed(kind: FailureKind, reason: &str) -> Outcome {
        Outcome::Failed {
            kind,
            reason: reason.to_owned(),
            tail: None,
            error: None,
        }
    }

    /// A 24 GiB card, the trial admitted at 8 GiB with 1 GiB of headroom.
    fn card() -> OnDevice {
        OnDevice {
            total: Some(24 * G),
            peak: Some(6 * G),
            bound: 8 * G,
            guess: 0,
            headroom: G,
            context: 0,
            peak_reserved: None,
            requested: None,
            worker_cap: None,
            ran: None,
        }
    }

    struct Case {
        attempts: Attempts,
        fresh: bool,
        alone: bool,
        on_device: Option<OnDevice>,
    }

    impl Case {
        fn on_gpu() -> Case {
            Case {
                attempts: Attempts::new(),
                fresh: true,
                alone: false,
                on_device: Some(card()),
            }
        }

        fn judge(&self, outcome: Outcome) -> Verdict {
            let cfg = retry();
            let facts = FinishFacts {
                trial_id: 1,
                attempts: &self.attempts,
                fresh_worker: self.fresh,
                alone: self.alone,
                on_device: self.on_device,
                retry: &cfg,
            };
            finish(outcome, &facts, &mut SameError::default())
        }
    }

    fn retried(v: &Verdict) -> Option<bool> {
        match &v.how {
            Finish::Fail(f) => Some(f.retry),
            _ => None,
        }
    }

    fn reason(v: &Verdict) -> &str {
        match &v.how {
            Finish::Fail(f) => &f.reason,
            _ => "",
        }
    }

    #[rstest]
    #[case::oom_first(Oom, &[], true)]
    #[case::oom_within_its_limit(Oom, &[(Oom, 1)], true)]
    #[case::oom_past_its_limit(Oom, &[(Oom, 2)], false)]
    #[case::a_crash(Killed, &[], true)]
    #[case::crashes_share_one_limit(Hang, &[(Timeout, 1)], false)]
    #[case::an_interruption_always(Interrupted, &[(Interrupted, 50)], true)]
    #[case::an_error_in_the_objective_never(UserError, &[], false)]
    #[case::a_bad_value_never(BadValue, &[], false)]
    #[case::a_protocol_error_never(Protocol, &[], false)]
    fn a_failure_is_retried_within_its_kinds_limit(
        #[case] kind: FailureKind,
        #[case] earlier: &[(FailureKind, u32)],
        #[case] expected: bool,
    ) {
        let mut c = Case::on_gpu();
        c.attempts = earlier.iter().copied().collect();
        let v = c.judge(failed(kind, "it failed"));
        assert_eq!(retried(&v), Some(expected));
        assert!(!v.infeasible && v.halt.is_none());
    }

    #[test]
    fn a_success_is_recorded_as_it_came() {
        let c = Case::on_gpu();
        let v = c.judge(Outcome::Complete(vec![0.5, 2.0]));
        assert_eq!(v.how, Finish::Complete(vec![0.5, 2.0]));
        assert_eq!(c.judge(Outcome::Pruned).how, Finish::Pruned);
        assert!(!v.oom && v.reached.is_none());
    }

    #[rstest]
    // Alone on the device, in a clean process: these params do not fit the card.
    #[case::alone_and_fresh(true, true, true, Some(false))]
    #[case::beside_other_trials(false, true, false, Some(true))]
    #[case::in_a_worker_that_had_grown(true, false, false, Some(true))]
    fn an_oom_alone_in_a_clean_worker_is_infeasible(
        #[case] alone: bool,
        #[case] fresh: bool,
        #[case] infeasible: bool,
        #[case] retry: Option<bool>,
    ) {
        let mut c = Case::on_gpu();
        (c.alone, c.fresh) = (alone, fresh);
        let v = c.judge(failed(Oom, "CUDA out of memory"));
        assert_eq!(v.infeasible, infeasible);
        assert_eq!(retried(&v), retry);
        assert!(v.oom, "admission backs off on the device");
        assert_eq!(
            reason(&v).ends_with("(infeasible: out of memory while alone on the device)"),
            infeasible
        );
        // The model learns what it reached: the peak the readings saw.
        assert_eq!(v.reached, Some((6 * G, 24 * G)));
    }

    #[test]
    fn an_oom_off_gpus_teaches_admission_nothing() {
        let mut c = Case::on_gpu();
        c.on_device = None;
        let v = c.judge(failed(Oom, "out of memory"));
        assert!(!v.oom && !v.infeasible && v.reached.is_none());
        assert_eq!(retried(&v), Some(true));
    }

    #[test]
    fn an_oom_whose_message_needs_more_than_the_card_is_infeasible_whoever_ran_beside_it() {
        let c = Case::on_gpu();
        let message = "CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total \
                       capacity of 24.00 GiB of which 20.00 GiB is free.";
        let v = c.judge(failed(Oom, message));
        assert!(v.infeasible);
        assert_eq!(retried(&v), Some(false));
        assert!(
            reason(&v).contains("(infeasible: needs at least 30.0 GiB"),
            "{}",
            reason(&v)
        );
        assert_eq!(v.reached, Some((30 * G, 24 * G)));
    }

    #[test]
    fn an_oom_within_what_admission_counted_blames_the_other_processes() {
        let mut c = Case::on_gpu();
        c.alone = true;
        // Its process held 3 GiB and asked for 2: 5 GiB, within the 8 it was admitted with.
        let message = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
                       capacity of 24.00 GiB of which 100.00 MiB is free. Including non-PyTorch \
                       memory, this process has 3.00 GiB memory in use.";
        let v = c.judge(Outcome::Failed {
            kind: Oom,
            reason: "CUDA out of memory".into(),
            tail: Some(message.into()),
            error: None,
        });
        assert!(!v.infeasible, "not these params' fault");
        assert_eq!(retried(&v), Some(true));
        assert_eq!(v.reached, None, "the memory model does not learn from it");
        assert!(
            reason(&v).contains("raise [gpu] headroom"),
            "{}",
            reason(&v)
        );
    }

    /// PyTorch's message for a process whose allocator held `held` GiB and asked for `tried`
    /// more, with `free` GiB free on the 24 GiB device (0.5 GiB of context besides).
    fn torch_oom(held: f64, tried: f64, free: f64) -> Outcome {
        let message = format!(
            "CUDA out of memory. Tried to allocate {tried:.2} GiB. GPU 0 has a total capacity \
             of 24.00 GiB of which {free:.2} GiB is free. Including non-PyTorch memory, this \
             process has {:.2} GiB memory in use. Of the allocated memory {held:.2} GiB is \
             allocated by PyTorch, and 0.00 GiB is reserved by PyTorch but unallocated.",
            held + 0.5
        );
        Outcome::Failed {
            kind: Oom,
            reason: "CUDA out of memory".into(),
            tail: Some(message),
            error: None,
        }
    }

    fn gib(x: f64) -> u64 {
        (x * G as f64) as u64
    }

    /// (kind, retried, counts against its retries, infeasible, admission backs off, what the
    /// model learns in GiB)
    type Judged = (FailureKind, bool, bool, bool, bool, Option<f64>);

    #[rstest]
    // Held 3.5 of its 4 GiB cap and asked for 1 more with 15 GiB free: its own cap. Re-run,
    // spending nothing, and the model learns the level it needed with its 0.5 GiB context.
    #[case::at_its_cap(Some(4.0), 3.5, 1.0, 15.0, &[], (Cap, true, false, false, false, Some(5.0)))]
    #[case::whatever_its_attempts(Some(4.0), 3.5, 1.0, 15.0, &[(Oom, 2), (Cap, 9)], (Cap, true, false, false, false, Some(5.0)))]
    // Within its cap, the device short: the card was full, a device OOM as before caps, and
    // within what it was admitted with, other processes' doing: it spends nothing either.
    #[case::the_device_full(Some(4.0), 2.0, 1.0, 0.5, &[], (Oom, true, false, false, true, None))]
    // Its level never fits the card less headroom: no re-run, its params infeasible.
    #[case::never_fits(Some(23.0), 22.5, 1.0, 0.6, &[], (Cap, false, false, true, false, Some(24.0)))]
    // No cap: out of memory as ever, its own past the 8 GiB it was admitted with.
    #[case::uncapped(None, 9.0, 1.0, 15.0, &[], (Oom, true, true, false, true, Some(10.5)))]
    fn a_trial_that_reaches_its_cap_is_re_run_larger_spending_nothing(
        #[case] cap: Option<f64>,
        #[case] held: f64,
        #[case] tried: f64,
        #[case] free: f64,
        #[case] earlier: &[(FailureKind, u32)],
        #[case] want: Judged,
    ) {
        let mut c = Case::on_gpu();
        c.attempts = earlier.iter().copied().collect();
        c.on_device = Some(OnDevice {
            worker_cap: cap.map(gib),
            context: G / 2,
            peak: None,
            bound: cap.map_or(8 * G, |c| gib(c + 0.5)),
            ..card()
        });
        let v = c.judge(torch_oom(held, tried, free));
        let Finish::Fail(f) = &v.how else {
            panic!("{v:?}")
        };
        let got: Judged = (
            f.kind,
            f.retry,
            f.counts,
            v.infeasible,
            v.oom,
            v.reached.map(|(r, _)| r as f64 / G as f64),
        );
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() < 0.01,
            (a, b) => a == b,
        };
        assert!(
            (got.0, got.1, got.2, got.3, got.4) == (want.0, want.1, want.2, want.3, want.4)
                && close(got.5, want.5),
            "{got:?} != {want:?}: {}",
            f.reason
        );
        if f.kind == Cap {
            assert!(
                f.reason.starts_with("reached its memory cap of "),
                "{}",
                f.reason
            );
            assert_eq!(breaker_effect(&v.how), BreakerEffect::None);
        }
    }

    /// The cost of a wrong estimate under caps is the seconds until the cap is hit: the reason
    /// says them, so that the bench can sum them over the capped re-runs. Before, it said only
    /// the cap and the figures.
    #[test]
    fn a_cap_hit_says_the_seconds_its_attempt_ran_until_the_hit() {
        let mut c = Case::on_gpu();
        c.on_device = Some(OnDevice {
            worker_cap: Some(4 * G),
            context: G / 2,
            ran: Some(Duration::from_millis(3240)),
            ..card()
        });
        let v = c.judge(torch_oom(3.5, 1.0, 15.0));
        let Finish::Fail(f) = &v.how else {
            panic!("{v:?}")
        };
        assert_eq!(f.kind, Cap);
        assert!(
            f.reason
                .starts_with("reached its memory cap of 4.0 GiB after 3.2 s: its allocator held"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn the_workers_own_figures_tell_a_cap_hit_where_the_message_has_none() {
        let mut c = Case::on_gpu();
        c.on_device = Some(OnDevice {
            worker_cap: Some(4 * G),
            peak_reserved: Some(gib(3.5)),
            requested: Some(G),
            ..card()
        });
        let v = c.judge(failed(Oom, "GPU out of memory (XLA RESOURCE_EXHAUSTED)"));
        assert!(matches!(&v.how, Finish::Fail(f) if f.kind == Cap), "{v:?}");
        // The cap the worker says it enforced is the one judged by.
        c.on_device = Some(OnDevice {
            worker_cap: Some(8 * G),
            ..c.on_device.unwrap()
        });
        let v = c.judge(failed(Oom, "GPU out of memory (XLA RESOURCE_EXHAUSTED)"));
        assert!(matches!(&v.how, Finish::Fail(f) if f.kind == Oom), "{v:?}");
    }

    /// sweepd told the worker a cap of 4 GiB, but its helper enforced none (an older helper, or
    /// a framework it cannot limit): the trial grew past 4 GiB into the device, and the device
    /// ran out. Judged by sweepd's cap, that read as a cap hit (`cap`, re-run for free, never
    /// infeasible, the device's admission never backing off), though no cap had stopped it.
    /// Only the cap the worker says it enforced is in the facts now (`worker_cap`, none here).
    #[test]
    fn a_device_oom_of_a_worker_that_enforced_no_cap_is_not_taken_for_a_cap_hit() {
        let mut c = Case::on_gpu();
        c.on_device = Some(OnDevice {
            context: G / 2,
            ..card()
        });
        let v = c.judge(torch_oom(9.0, 1.0, 0.2));
        let Finish::Fail(f) = &v.how else {
            panic!("{v:?}")
        };
        assert_eq!(f.kind, Oom, "{}", f.reason);
        assert!(v.oom);
    }

    /// The card: another job held 22 of 24 GiB, and the OOMs of trials that started
    /// there spent three of a six-trial budget and every retry.
    #[test]
    fn an_oom_that_other_processes_caused_spends_no_budget_and_no_retry() {
        let mut c = Case::on_gpu();
        c.attempts = [(Oom, 2)].into_iter().collect();
        // Its process held 0.5 GiB and asked for 1: within the 8 GiB it was admitted with.
        let v = c.judge(torch_oom(0.0, 1.0, 0.2));
        let Finish::Fail(f) = &v.how else {
            panic!("{v:?}")
        };
        assert_eq!(
            (f.kind, f.retry, f.counts),
            (Oom, true, false),
            "{}",
            f.reason
        );
        assert!(!v.how.spends());
        assert!(f
            .reason
            .contains("other processes held the rest of the card"));
        // One past what it was admitted with is its own, and counts.
        let v = c.judge(torch_oom(9.0, 1.0, 0.2));
        let Finish::Fail(f) = &v.how else {
            panic!("{v:?}")
        };
        assert_eq!(
            (f.kind, f.retry, f.counts),
            (Oom, false, true),
            "{}",
            f.reason
        );
    }

    #[test]
    fn an_oom_turned_device_side_assert_counts_as_an_oom() {
        let c = Case::on_gpu();
        let v = c.judge(failed(CudaFatal, "device-side assert after CUDA OOM"));
        assert!(v.oom);
        let v = c.judge(failed(CudaFatal, "device-side assert triggered"));
        assert!(!v.oom);
    }

    fn user_error(line: u32) -> Outcome {
        Outcome::Failed {
            kind: UserError,
            reason: "TypeError: unsupported operand".into(),
            tail: None,
            error: Some(crate::classify::UserError {
                exc_type: "TypeError".into(),
                at: Some(crate::classify::Frame {
                    file: "train.py".into(),
                    line,
                    function: "objective".into(),
                }),
            }),
        }
    }

    #[test]
    fn the_same_error_three_times_halts_the_study_and_none_of_its_trials_spends_the_budget() {
        let cfg = retry();
        let attempts = Attempts::new();
        let mut same = SameError::default();
        let mut judge = |id: i64, o: Outcome| {
            let facts = FinishFacts {
                trial_id: id,
                attempts: &attempts,
                fresh_worker: true,
                alone: false,
                on_device: None,
                retry: &cfg,
            };
            finish(o, &facts, &mut same)
        };
        // Two in a row: final failures (an error in the objective is not retried).
        for id in 1..=2 {
            let v = judge(id, user_error(20));
            assert_eq!((retried(&v), v.halt.is_some()), (Some(false), false));
        }
        // The third halts the study, retried (so it spends nothing).
        let v = judge(3, user_error(20));
        assert_eq!(retried(&v), Some(true));
        let why = v.halt.expect("halts");
        assert!(
            why.starts_with("stopped: 3 trials in a row failed with the same error"),
            "{why}"
        );
        assert!(why.contains("raised at train.py:20"), "{why}");
        // The same error after it: retried too, without halting again.
        let v = judge(4, user_error(20));
        assert_eq!((retried(&v), v.halt.is_some()), (Some(true), false));
        // Another error is judged as usual.
        let v = judge(5, user_error(21));
        assert_eq!(retried(&v), Some(false));
    }

    #[test]
    fn errors_in_a_row_interrupted_by_another_do_not_halt() {
        let cfg = retry();
        let attempts = Attempts::new();
        let mut same = SameError::default();
        let mut halts = Vec::new();
        for (id, line) in [(1, 20), (2, 20), (3, 21), (4, 20), (5, 20)] {
            let facts = FinishFacts {
                trial_id: id,
                attempts: &attempts,
                fresh_worker: true,
                alone: false,
                on_device: None,
                retry: &cfg,
            };
            halts.push(finish(user_error(line), &facts, &mut same).halt.is_some());
        }
        assert_eq!(halts, [false; 5]);
    }

    #[rstest]
    #[case::an_oom(Oom, BreakerEffect::Failure)]
    #[case::a_cuda_fault(CudaFatal, BreakerEffect::Failure)]
    #[case::a_crash(Killed, BreakerEffect::Failure)]
    #[case::a_hang(Hang, BreakerEffect::Failure)]
    #[case::an_error_in_the_objective(UserError, BreakerEffect::None)]
    #[case::a_bad_value(BadValue, BreakerEffect::None)]
    #[case::an_interruption(Interrupted, BreakerEffect::None)]
    #[case::a_trial_at_its_own_cap(Cap, BreakerEffect::None)]
    #[case::a_protocol_error(Protocol, BreakerEffect::None)]
    fn the_breaker_counts_faults_that_may_clear(
        #[case] kind: FailureKind,
        #[case] expected: BreakerEffect,
    ) {
        let how = Finish::Fail(Failure {
            kind,
            reason: String::new(),
            stderr_tail: None,
            retry: false,
            counts: true,
        });
        assert_eq!(breaker_effect(&how), expected);
        assert_eq!(
            breaker_effect(&Finish::Complete(vec![1.0])),
            BreakerEffect::Success
        );
        assert_eq!(breaker_effect(&Finish::Pruned), BreakerEffect::Success);
    }
}
