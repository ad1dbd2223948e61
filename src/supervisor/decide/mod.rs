//! The supervisor's decisions, as data. Each function here is given a snapshot (the study's
//! tally and the settings in force, the admission line, the devices as last read with what
//! runs and idles on them, how a trial ended) and says what to do: start this candidate there,
//! wait and why, stop the study and why, retry the trial or fail it, halt the study. No I/O,
//! no clock of its own (the time comes in), no lock: `core` reads the snapshot, calls the
//! decision and performs it against the store, the workers, NVML and the host's ledger. The
//! rules the decisions apply are `policy`'s (retry, breaker, the admission line) and
//! `gpu::admission`'s (a device's room); the decisions are table-tested here.
//!
//! `line`: the candidates waiting for admission. `start`: whether a trial may start now (the stop
//! conditions, what the study's owner asked: `sweepd pause`, `stop`, `cancel`; which budget
//! ends the study) and which, where (`gate`, `after_empty_draw`, `admit_line`). `finish`: what
//! an outcome is
//! recorded as (`finish`). `slot`: a slot's own choices (its worker's fate after a trial, a
//! worker that failed to start, whether its next trial starts in the finish's commit) and an
//! idle worker's end.

use crate::study::budget::Ended;

mod finish;
mod line;
mod slot;
mod start;

pub(super) use finish::{breaker_effect, finish, BreakerEffect, FinishFacts, OnDevice, Outcome};
pub(super) use line::{Candidate, Line};
pub(super) use slot::{
    after_trial, aim, cap_outgrown, idle_expired, start_failed, then, Retry, Then, TrialEnd,
};
pub(super) use start::{
    admit_line, after_empty_draw, gate, Admission, Devices, Gate, GateFacts, LineFacts, Placement,
};

/// A study's run state, as the start decision reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) enum RunState {
    /// Trials start as the budget, the line and the devices allow.
    #[default]
    Sampling,
    /// The sampler has proposed every point of the space: what is in line or WAITING still
    /// starts, nothing new is drawn.
    Exhausted,
    /// The study stops for an error (its trials keep failing the same way): no trial starts
    /// any more. `error`: what the run ends with, until the slot that recorded the finish
    /// takes it.
    Halted { error: Option<String> },
}

/// Why the study starts no more trials.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Stop {
    /// SIGINT/SIGTERM, or another slot's fatal error.
    Shutdown,
    /// The study halted for an error ([`RunState::Halted`]).
    Halted,
    /// The study's owner stopped or cancelled it (`sweepd stop`, `sweepd cancel`).
    ByOwner,
    /// A budget is spent (`study::budget::Ended`): `n_trials` trials have a final outcome,
    /// whoever recorded them; `[study] timeout` has passed since the daemon started; the
    /// study's GPU-hours are spent; its best value stalled for `patience` finished trials.
    Ended(Ended),
    /// The sampler has nothing left, nothing waits and none of our trials runs.
    Exhausted,
}

/// Why no trial starts now, while one may later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// The running trials hold every start left in the budget (and WAITING trials the rest:
    /// new samples in line are dropped, they would take a WAITING trial's start).
    BudgetHeld,
    /// Every device is quarantined by the circuit breaker.
    Paused,
    /// The study's owner paused it (`sweepd pause`), until `sweepd resume`.
    PausedByOwner,
    /// Only a WAITING trial may start, and none was found (another process claimed it): the
    /// next refresh of the tally says whether a new trial may start after all.
    WaitingGone,
    /// The sampler has nothing left; trials of ours still run (one may fail and be retried).
    Draining,
    /// No candidate in line has room on any device.
    NoRoom,
}

/// No start now: wait for a change, or stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum NoStart {
    Wait(Why),
    Stop(Stop),
}
