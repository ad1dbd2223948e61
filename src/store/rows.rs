//! What a trial's start and finish write, built once for both write paths: the statements of
//! `trials` (SQLite, and PostgreSQL's rare cases) and the one call of `step` (PostgreSQL). The
//! types that say what a start is, who starts it and how it ended live here too, below both.

use super::daemon::DaemonId;
use super::once::Commit;
use super::Study;
use crate::study::attrs::{GPU_ATTR, OWNER_ATTR, WORKER_ID_ATTR, WORKER_PID_ATTR};
use crate::study::{
    Attempts, Claimed, Distribution, Finish, ParamValue, Params, RetryOf, SearchSpace, Tally,
};
use serde_json::{json, Value};

/// One param row of a start: name, internal value, `distribution_json`.
pub(super) type ParamRow = (String, f64, String);

/// A finish to write: the trial, how it ended (only COMPLETE goes through `sweepd_step`), its
/// system attributes, and the worker whose success it was.
pub(super) struct FinishWrite<'a> {
    pub(super) trial_id: i64,
    pub(super) how: &'a Finish,
    pub(super) attrs: &'a [(&'a str, Value)],
    pub(super) done_by: Option<i64>,
}

/// What starting a trial needs besides the trial: who starts it, and the budget it is checked
/// against.
pub struct StartCtx<'a> {
    pub study: &'a Study,
    pub owner: &'a DaemonId,
    pub budget: Option<u64>,
    pub tally: &'a mut Tally,
    /// The worker (and GPU) that will run the trial, when already known: recorded in the
    /// start's own commit instead of a `set_runner` commit of its own.
    pub runner: Option<(Runner, Option<u32>)>,
    /// A new trial waits for any WAITING trial of the study but these (the caller's own line
    /// of candidates): the start is refused with [`Started::Waiting`], decided in the start's
    /// own transaction from the tally it reads, so that WAITING trials go first without a look
    /// for them before every start. `None`: no such condition.
    pub skip_waiting: Option<&'a [i64]>,
}

/// The write that starts a trial: a new one with sampled params, or a WAITING one claimed with
/// its complete params.
#[derive(Debug, Clone, Copy)]
pub enum StartOp<'a> {
    New(&'a Params),
    Claim(&'a Waiting, &'a Params),
}

impl StartOp<'_> {
    /// The trial it starts, once the store has given it its row.
    fn claimed(self, trial_id: i64, number: i64) -> Claimed {
        let (params, attempts, retry_of) = match self {
            StartOp::New(params) => (params.clone(), Attempts::new(), None),
            StartOp::Claim(w, params) => (params.clone(), w.attempts.clone(), w.retry_of.clone()),
        };
        Claimed {
            trial_id,
            number,
            params,
            attempts,
            retry_of,
        }
    }
}

/// A start as its transaction decided it, and as `once!` records it: with the
/// [`StartOp`], enough to tell the caller what [`Started`].
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) enum StartRec {
    Yes { trial_id: i64, number: i64 },
    Taken,
    NoRoom,
    Waiting,
}

impl StartRec {
    pub(super) fn started(self, op: StartOp<'_>) -> Started {
        match self {
            StartRec::Yes { trial_id, number } => Started::Yes(op.claimed(trial_id, number)),
            StartRec::Taken => Started::Taken,
            StartRec::NoRoom => Started::NoRoom,
            StartRec::Waiting => Started::Waiting,
        }
    }

    /// Only a start that happened is committed.
    pub(super) fn commit(self) -> Commit<StartRec> {
        match self {
            StartRec::Yes { .. } => Commit::Yes(self),
            _ => Commit::No(self),
        }
    }
}

/// How an attempt to start a trial ended.
#[derive(Debug)]
pub enum Started {
    /// The trial is RUNNING for this daemon.
    Yes(Claimed),
    /// Another process claimed the WAITING trial first.
    Taken,
    /// The budget is spent, or reserved by trials running now (the tally says which).
    NoRoom,
    /// A new trial, refused because a WAITING trial outside [`StartCtx::skip_waiting`] waits:
    /// it goes first.
    Waiting,
}

/// A WAITING trial looked at, not yet claimed.
#[derive(Debug, Clone, Default)]
pub struct Waiting {
    pub trial_id: i64,
    pub number: i64,
    /// The params it already has, in this study's space.
    pub fixed: Params,
    /// Params it already has outside the static space (a retry copy of a trial whose objective
    /// suggested them), each with its own distribution: its objective gets these values back.
    pub extra: Vec<(String, Distribution, ParamValue)>,
    /// Enqueued values (Optuna's `fixed_params`) of names outside the static space, in external
    /// form: the objective gets them when it suggests the name.
    pub enqueued: serde_json::Map<String, Value>,
    /// Names that already have a `trial_params` row.
    pub(super) present: Vec<String>,
    pub problem: Option<String>,
    /// Earlier failed attempts of these params by failure kind (`sweepd:attempts`).
    pub attempts: Attempts,
    /// The attempts it replaces (`failed_trial`, `retry_history`), where it is a retry copy.
    pub retry_of: Option<RetryOf>,
}

/// Who runs a claimed trial; written as `sweepd:` system attributes.
#[derive(Debug, Clone, Copy)]
pub struct Runner {
    pub worker_id: i64,
    pub pid: u32,
}

/// System attributes as the JSON texts that are stored.
pub(super) fn attr_texts<'a>(attrs: &[(&'a str, Value)]) -> Vec<(&'a str, String)> {
    attrs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// The system attributes and param rows a start writes: the owner (and the runner, when
/// known), and the params in the order the space defines them (as `trials` shows them), less
/// those a claimed WAITING trial already has.
pub(super) fn start_rows_of(
    space: &SearchSpace,
    op: StartOp<'_>,
    owner: &DaemonId,
    runner: Option<(Runner, Option<u32>)>,
) -> (Vec<(&'static str, String)>, Vec<ParamRow>) {
    let mut attrs: Vec<(&'static str, String)> = vec![(OWNER_ATTR, owner.json().to_string())];
    if let Some((runner, gpu)) = runner {
        attrs.extend(runner_attrs(runner, gpu));
    }
    let (params, skip) = match op {
        StartOp::New(params) => (params, &[][..]),
        StartOp::Claim(w, params) => (params, &w.present[..]),
    };
    let rows = space
        .params
        .iter()
        .filter(|spec| !skip.contains(&spec.name))
        .filter_map(|spec| Some(param_row(&spec.name, &spec.dist, params.get(&spec.name)?)))
        .collect();
    (attrs, rows)
}

/// A param as Optuna stores it: name, internal value, `distribution_json`.
pub(super) fn param_row(name: &str, dist: &Distribution, v: &ParamValue) -> ParamRow {
    (name.to_owned(), dist.to_internal(v), dist.optuna_json())
}

/// The system attributes naming the worker that runs a trial and its GPU, as JSON texts.
pub(super) fn runner_attrs(runner: Runner, gpu: Option<u32>) -> Vec<(&'static str, String)> {
    let mut attrs = vec![
        (WORKER_ID_ATTR, json!(runner.worker_id).to_string()),
        (WORKER_PID_ATTR, json!(runner.pid).to_string()),
    ];
    if let Some(gpu) = gpu {
        attrs.push((GPU_ATTR, json!(gpu).to_string()));
    }
    attrs
}
