//! A slot's own choices: what happens to its worker after a trial, what a worker that failed
//! to start leads to, and whether its next trial is started in the commit that records its
//! trial's finish.

use crate::config::WorkerConfig;
use crate::store::Runner;
use crate::supervisor::policy::{self, Fate, WorkerHealth};
use std::time::Duration;

/// Worker starts that fail in a row before the run gives up: a missing import is not fixed by
/// trying again.
pub(in crate::supervisor) const MAX_START_FAILURES: u32 = 3;

/// How a trial ended, for the worker that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum TrialEnd {
    /// Complete or pruned.
    Success,
    /// An out-of-memory exception.
    Oom,
    Other,
}

/// A persistent worker's fate after its trial: what the trial's conversation said (`fate`:
/// replaced when it died or cannot be trusted), else, after an OOM, kept only if its memory
/// came back (`policy::after_oom`), after a success recycled after its count or its growth
/// (`policy::recycle`). `health` counts the trial just run.
pub(in crate::supervisor) fn after_trial(
    fate: Fate,
    end: TrialEnd,
    health: &WorkerHealth,
    cfg: &WorkerConfig,
) -> Fate {
    match (fate, end) {
        (Fate::Keep, TrialEnd::Oom) => policy::after_oom(health),
        (Fate::Keep, TrialEnd::Success) => {
            policy::recycle(health, cfg.recycle_after, cfg.recycle_on_growth)
        }
        (fate, _) => fate,
    }
}

/// What a slot does after its worker failed to start `failures` times in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum Retry {
    /// The study is stopping: the slot ends.
    Stop,
    /// The run ends with the last failure ([`MAX_START_FAILURES`] in a row).
    GiveUp,
    /// Tries again after this wait, doubled at each failure (at most 32 s).
    After(Duration),
}

pub(in crate::supervisor) fn start_failed(failures: u32, stopping: bool) -> Retry {
    if stopping {
        Retry::Stop
    } else if failures >= MAX_START_FAILURES {
        Retry::GiveUp
    } else {
        Retry::After(Duration::from_millis(500 * 2u64.pow(failures.min(6))))
    }
}

/// What the commit that records a trial's finish also does.
#[derive(Debug, Clone, Copy)]
pub(in crate::supervisor) enum Then {
    /// Nothing more: the slot ends after it (shutdown, or `max_par` lowered below it), or the
    /// trial never ran.
    Stop,
    /// Starts the slot's next trial where one can start now. `hint`: the device it would
    /// rather run on (its worker's); `runner`: the worker kept here without GPUs, which that
    /// commit records as the next trial's.
    Next {
        hint: Option<u32>,
        runner: Option<Runner>,
    },
}

/// Whether slot `slot` asks for its next trial in the finish's commit: unless it is ending
/// (`stopping`, or `max_par` lowered below it). A persistent worker prefers its `device`; the
/// worker `kept` without GPUs runs the next trial.
pub(in crate::supervisor) fn then(
    stopping: bool,
    slot: usize,
    max_par: usize,
    persistent: bool,
    device: Option<u32>,
    kept: Option<Runner>,
) -> Then {
    if stopping || slot >= max_par {
        return Then::Stop;
    }
    Then::Next {
        hint: if persistent { device } else { None },
        runner: kept,
    }
}
