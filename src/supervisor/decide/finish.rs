//! What a trial's outcome is recorded as: completed, pruned, or failed and then retried
//! (a WAITING copy) or final; whether its params are infeasible; what an out-of-memory failure
//! teaches admission and the memory model; whether the study halts because its trials can
//! only fail; and what the finish does to the circuit breaker.

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
    let mut infeasible = policy::infeasible(kind, f.alone, f.fresh_worker)
        .then(|| "out of memory while alone on the device".to_owned());
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
        policy::retry_allowed(kind, f.attempts, f.retry)
    };
    verdict.how = Finish::Fail(Failure {
        kind,
        reason,
        stderr_tail: tail,
        retry,
    });
    verdict
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
