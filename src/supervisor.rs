//! The supervisor: the async loop that turns a validated config into a finished study.
//!
//! One task per parallel slot (`max_par` of them) owns at most one worker process at a time and
//! loops: ask the [`Core`] for a trial, make sure a worker is ready on the trial's device, run
//! the trial, hand back how it ended, then keep, recycle or replace the worker. The `Core` is the
//! one place that decides what runs next (budget, sampler, GPU admission, circuit breaker) and
//! the only writer of trial outcomes, so they never disagree. A housekeeping task polls the GPUs,
//! takes requests (`sweepd resume`), keeps the daemon's row current, puts back sweepd's triggers
//! when an Optuna migration dropped them, and stops the daemon when its study is deleted from the
//! database (`optuna.delete_study`): running trials are then killed at once, without grace.
//!
//! A `CancellationToken` threaded through every task carries SIGINT/SIGTERM: slots stop asking
//! for trials, give running ones `shutdown_grace`, then kill their groups; every trial
//! interrupted that way is FAILed and re-enqueued, so no work is silently lost. A second
//! token (`kill_now`, a second signal) ends the grace and the polite waits at once: the groups
//! are SIGKILLed, and the trials still recorded and re-enqueued the same way.
//!
//! The `Core` also publishes a [`Progress`] snapshot for the terminal's live display
//! (`progress`) whenever a trial starts or ends.

use crate::classify;
use crate::clock;
use crate::config::{Config, Devices, Overrides, WorkerMode};
use crate::gpu::{Capacity, Decision, Gpu, MemoryModel, Monitor};
use crate::metrics::Metrics;
use crate::process::{self, Event, Message, SpawnSpec, Worker};
use crate::progress::{Progress, Tracker};
use crate::pruner::Pruner;
use crate::sampler::{self, Sampler};
use crate::store::{
    self, DaemonId, DaemonLockError, GpuRow, Holder, Runner, StartCtx, StartOp, Started, Store,
    StoreError, Waiting,
};
use crate::study::{
    Claimed, Counts, DaemonCommand, DaemonState, Failure, FailureKind, Finish, Params, Tally,
    TrialRecord, TrialState, WorkerState,
};
use crate::units;
use policy::{Breaker, Fate, SameError, Signature, WorkerHealth};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

mod policy;

/// Consecutive failures of a slot's worker to start before the run gives up.
const MAX_START_FAILURES: u32 = 3;
/// How long a oneshot worker may take to exit after it reported its result.
const ONESHOT_EXIT_GRACE: Duration = Duration::from_secs(30);
/// Grace between SIGTERM and SIGKILL when sweepd kills a worker group.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long a retired worker's memory may take to disappear from NVML before sweepd says so.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Sampler(String),
    #[error("worker command {argv:?} could not be started: {source}")]
    Spawn {
        argv: Vec<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("workers keep failing to start ({MAX_START_FAILURES} times in a row); last: {reason}\n--- last stderr lines ---\n{stderr}")]
    WorkerStart { reason: String, stderr: String },
    #[error("{0}")]
    Gpu(String),
    #[error("{0}")]
    Locked(String),
    /// `[metrics] listen` could not be bound.
    #[error("[metrics] listen = {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A slot task panicked: a bug in sweepd, not in the study.
    #[error("a slot task panicked (a bug in sweepd; please report it): {0}")]
    Panicked(String),
    /// The study's trials keep failing with the same error in the objective.
    #[error("{0}")]
    SameError(String),
    #[error("study `{name}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopped, and its workers killed", path.display())]
    StudyDeleted { name: String, path: PathBuf },
}

impl RunError {
    /// The error a slot task that panicked (or was cancelled) ends the run with.
    fn from_slot_panic(e: tokio::task::JoinError) -> RunError {
        let what = match e.try_into_panic() {
            Ok(payload) => payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned()),
            Err(e) => e.to_string(),
        };
        RunError::Panicked(what)
    }
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub counts: Counts,
    pub interrupted: bool,
}

/// The GPU side of the decision: readings, admission and the memory model.
struct GpuCtl {
    monitor: Arc<Monitor>,
    capacity: Capacity,
    model: MemoryModel,
    /// The estimate for the trial at the head of the admission line, for `sweepd gpus`.
    next_expected: Option<u64>,
    /// Devices whose readings are failing (logged once, when they start failing).
    failing: std::collections::HashSet<u32>,
}

/// A trial chosen but not yet admitted: kept until a device has room, so that a large trial
/// is not dropped in favour of small ones.
enum Candidate {
    Waiting(Waiting, Params),
    New(Params),
}

impl Candidate {
    fn params(&self) -> &Params {
        match self {
            Candidate::Waiting(_, p) | Candidate::New(p) => p,
        }
    }
}

/// The study's decision point: what runs next, and the record of how things ended.
struct Core {
    store: Store,
    study: crate::store::Study,
    config: Arc<Config>,
    sampler: Box<dyn Sampler>,
    pruner: Pruner,
    /// The study's trials as the budget counts them, whoever runs them; refreshed from the
    /// database (cheaply: only what changed) in every start's transaction.
    tally: Tally,
    /// This daemon, recorded on every trial it starts.
    me: DaemonId,
    /// Trials this instance has RUNNING.
    running: u64,
    /// Running trials per device, for infeasibility (an OOM alone on a device).
    running_on: HashMap<u32, usize>,
    /// The sampler has nothing left to propose (grid exhausted).
    exhausted: bool,
    started: Instant,
    /// The number the next new trial will most likely get: the seed key of a new proposal,
    /// kept here rather than asked of the database for every trial.
    next_key: u64,
    /// Candidates in line for admission, with how many trials started ahead of each.
    pending: std::collections::VecDeque<(Candidate, u32)>,
    gpu: Option<GpuCtl>,
    breaker: Breaker,
    /// The best value so far, for the status line.
    best: Option<f64>,
    /// Params found infeasible (OOM alone on a device): proposals resembling them are redrawn,
    /// whatever the sampler.
    infeasible: Vec<Params>,
    /// Stops the study when its trials can only fail.
    same_error: SameError,
    /// Set when the study must stop with this error (taken by the slot that recorded it).
    fatal: Option<RunError>,
    /// The study is stopping for an error: no trial starts any more.
    halted: bool,
    /// What the terminal's progress display shows, published as it changes.
    progress: Tracker,
}

/// A start `Core::plan` chose: the candidate (taken out of the line, at index `k`) and where
/// it runs.
struct Plan {
    candidate: Candidate,
    k: usize,
    device: Option<u32>,
    expected: Option<u64>,
}

impl Plan {
    /// What the store writes to start it.
    fn op(&self) -> StartOp<'_> {
        match &self.candidate {
            Candidate::Waiting(w, params) => StartOp::Claim(w, params),
            Candidate::New(params) => StartOp::New(params),
        }
    }
}

/// What `Core::plan` decided.
enum Planned {
    Start(Plan),
    Wait,
    Done,
}

/// A finish as written (not yet synced), for the slot to report once it is durable.
struct Finished {
    how: Finish,
    /// The trial's measured memory peak, for the metrics.
    peak: Option<u64>,
    /// The slot's next trial, started in the same commit.
    next: Option<Next>,
}

/// A finish decided by `Core::finish_begin`: what to write, and what its accounting needs.
struct Finishing {
    trial_id: i64,
    number: i64,
    params: Params,
    how: Finish,
    attrs: Vec<(&'static str, serde_json::Value)>,
    device: Option<u32>,
    peak: Option<u64>,
    constraints: Vec<f64>,
}

impl Finishing {
    /// Whether it spends the budget: every final outcome but a failure that is retried.
    fn spends(&self) -> bool {
        !matches!(&self.how, Finish::Fail(f) if f.retry)
    }
}

/// What a slot is told to do next.
enum Next {
    Run(Claimed, Option<u32>),
    /// Nothing to start now, but something may come (a running trial may fail and be retried,
    /// a device may free memory, someone may enqueue a trial): ask again after the next change.
    Wait,
    Done,
}

/// How a trial ended, before the retry policy turns it into a [`Finish`].
enum Outcome {
    Complete(f64),
    Pruned,
    Failed {
        kind: FailureKind,
        reason: String,
        tail: Option<String>,
        /// For a user error: its type and where the user's code raised it.
        error: Option<classify::UserError>,
    },
}

impl Core {
    /// Sends the progress display a fresh snapshot (cheap: it goes nowhere without one).
    fn publish(&self) {
        let gpus = match &self.gpu {
            Some(g) => g
                .monitor
                .devices
                .iter()
                .map(|d| (*d, self.running_on.get(d).copied().unwrap_or(0)))
                .collect(),
            None => Default::default(),
        };
        self.progress.publish(Progress {
            started: Some(self.started),
            finished: self.tally.finished,
            budget: self.config.study.n_trials,
            timeout: self.config.study.timeout,
            running: self.running,
            max_par: self.config.worker.max_par,
            gpus,
            paused: self
                .breaker
                .paused(&self.devices(), Instant::now())
                .is_some(),
            ..Progress::default()
        });
    }

    fn devices(&self) -> Vec<Option<u32>> {
        match &self.gpu {
            Some(g) => g.monitor.devices.iter().map(|d| Some(*d)).collect(),
            None => vec![None],
        }
    }

    /// The next trial to run, started in the database: `Next::Run`, or why none can start now.
    async fn next(&mut self, hint: Option<u32>, stopping: bool) -> Result<Next, RunError> {
        loop {
            let plan = match self.plan(hint, stopping).await? {
                Planned::Start(plan) => plan,
                Planned::Wait => return Ok(Next::Wait),
                Planned::Done => return Ok(Next::Done),
            };
            let ctx = StartCtx {
                study: &self.study,
                owner: &self.me,
                budget: self.config.study.n_trials,
                tally: &mut self.tally,
            };
            let started = self.store.start(&self.config.space, plan.op(), ctx).await?;
            if let Some(next) = self.started(plan, started) {
                return Ok(next);
            }
        }
    }

    /// Chooses the next trial to start and where, without writing anything: the budget, the
    /// breaker, the line of candidates and GPU admission (see `next`).
    async fn plan(&mut self, hint: Option<u32>, stopping: bool) -> Result<Planned, RunError> {
        loop {
            if stopping || self.halted {
                return Ok(Planned::Done);
            }
            if let Some(t) = self.config.study.timeout {
                if self.started.elapsed() >= t {
                    return Ok(Planned::Done);
                }
            }
            if let Some(n) = self.config.study.n_trials {
                if !self.tally.room(Some(n)) {
                    // Others (Optuna scripts) may have finished trials since: look before
                    // deciding between done and waiting for the running ones.
                    self.store
                        .refresh_tally(&self.study, &mut self.tally)
                        .await?;
                    if self.tally.finished >= n {
                        return Ok(Planned::Done);
                    }
                    if !self.tally.room(Some(n)) {
                        return Ok(Planned::Wait);
                    }
                }
            }
            let now = Instant::now();
            if self.breaker.paused(&self.devices(), now).is_some() {
                return Ok(Planned::Wait);
            }
            // Candidates in line. One that fits may start before those ahead of it that do
            // not (a small trial past a large one waiting for room), until the head has been
            // passed MAX_PASSES times: then only the head may start, so it cannot starve.
            if self.pending.is_empty() {
                match self.choose().await? {
                    Some(c) => self.pending.push_back((c, 0)),
                    None if self.exhausted => {
                        return Ok(if self.running > 0 {
                            Planned::Wait
                        } else {
                            Planned::Done
                        });
                    }
                    None => continue,
                }
            }
            let head_passes = self.pending[0].1;
            let tries = policy::admissible(head_passes, self.pending.len());
            let mut chosen = None;
            for k in 0..tries {
                let params = self.pending[k].0.params().clone();
                if let Ok(placement) = self.admit(&params, hint, now) {
                    chosen = Some((k, placement));
                    break;
                }
            }
            let Some((k, placement)) = chosen else {
                if policy::look_further(head_passes, self.pending.len(), self.exhausted) {
                    // Look one candidate further: it may fit where those in line do not.
                    if let Some(c) = self.choose().await? {
                        self.pending.push_back((c, 0));
                        continue;
                    }
                }
                return Ok(Planned::Wait);
            };
            let (candidate, _) = self.pending.remove(k).expect("admitted index");
            if k > 0 {
                self.pending[0].1 += 1;
            }
            if let (Some(g), Some((head, _))) = (&mut self.gpu, self.pending.front()) {
                g.next_expected = Some(g.model.expected(head.params()));
            }
            let (device, expected) = match placement {
                Some((d, e)) => (Some(d), Some(e)),
                None => (None, None),
            };
            return Ok(Planned::Start(Plan {
                candidate,
                k,
                device,
                expected,
            }));
        }
    }

    /// Bookkeeping once the store tried to start `plan`: the trial to run, or `None` to plan
    /// again (another process claimed it, or the budget filled up meanwhile).
    fn started(&mut self, plan: Plan, started: Started) -> Option<Next> {
        let Plan {
            candidate,
            k,
            device,
            expected,
        } = plan;
        let claimed = match started {
            Started::Yes(c) => c,
            Started::Taken => return None,
            Started::NoRoom => {
                // Kept for later, where it stood in line.
                let k = k.min(self.pending.len());
                self.pending.insert(k, (candidate, 0));
                return None;
            }
        };
        self.sampler.observe(claimed.number, &claimed.params);
        self.next_key = self.next_key.max(claimed.number as u64 + 1);
        self.running += 1;
        if let (Some(d), Some(g), Some(e)) = (device, &self.gpu, expected) {
            info!(
                trial = claimed.number,
                gpu = d,
                "admitted: expected peak {}",
                g.model.explain(&claimed.params)
            );
            g.monitor.track(claimed.trial_id, d, e);
            *self.running_on.entry(d).or_default() += 1;
        }
        self.publish();
        Some(Next::Run(claimed, device))
    }

    /// Where a trial with `params` may start now: `Ok(None)` without GPUs, `Ok(Some((device,
    /// expected peak)))` when a device has room, or why each device waits.
    fn admit(
        &mut self,
        params: &Params,
        hint: Option<u32>,
        now: Instant,
    ) -> Result<Option<(u32, u64)>, Vec<Decision>> {
        let Some(g) = &mut self.gpu else {
            return Ok(None);
        };
        let e = g.model.expected(params);
        let (views, running, errors) = g.monitor.views();
        // Said once when a device's readings fail, not on every poll.
        for (device, why) in &errors {
            if g.failing.insert(*device) {
                warn!(
                    device,
                    "no admission on this device: NVML reading failed: {why}"
                );
            }
        }
        g.failing.retain(|d| errors.iter().any(|(e, _)| e == d));
        let usable: Vec<_> = views
            .into_iter()
            .filter(|v| self.breaker.quarantined(Some(v.index), now).is_none())
            .collect();
        if self
            .pending
            .front()
            .is_some_and(|(head, _)| head.params() == params)
        {
            g.next_expected = Some(e);
        }
        // The slot's own device first: its worker need not move.
        let on_hint = hint
            .and_then(|h| usable.iter().find(|v| v.index == h))
            .map(|v| g.capacity.decide(v, &running, e, now))
            .filter(|d| d.admitted)
            .map(|d| d.device);
        match on_hint {
            Some(d) => Ok(Some((d, e))),
            None => g
                .capacity
                .place(&usable, &running, e, now)
                .map(|d| Some((d, e))),
        }
    }

    /// The next candidate: the oldest WAITING trial (retries, `study.enqueue_trial`) before a
    /// new sample. `None` with `exhausted` set when the sampler has nothing left; `None`
    /// without it when a WAITING trial was failed for bad params (look again).
    async fn choose(&mut self) -> Result<Option<Candidate>, RunError> {
        let space = &self.config.space;
        let queued: Vec<i64> = self
            .pending
            .iter()
            .filter_map(|(c, _)| match c {
                Candidate::Waiting(w, _) => Some(w.trial_id),
                Candidate::New(_) => None,
            })
            .collect();
        if let Some(w) = self.store.peek_waiting(&self.study, space, &queued).await? {
            let complete = space.params.iter().all(|p| w.fixed.contains_key(&p.name));
            let params = match &w.problem {
                Some(p) => Err(p.clone()),
                None if complete => Ok(w.fixed.clone()),
                None => self
                    .sampler
                    .sample(space, &w.fixed, w.number as u64)
                    .ok_or_else(|| "the sampler has no values left for this trial".to_owned()),
            };
            return match params {
                Ok(p) => Ok(Some(Candidate::Waiting(w, p))),
                Err(why) => {
                    // The enqueued params cannot run here: FAIL that trial, look further.
                    let start = StartCtx {
                        study: &self.study,
                        owner: &self.me,
                        budget: self.config.study.n_trials,
                        tally: &mut self.tally,
                    };
                    if let Started::Yes(c) = self
                        .store
                        .start(space, StartOp::Claim(&w, &w.fixed), start)
                        .await?
                    {
                        let failure = Failure {
                            kind: FailureKind::UserError,
                            reason: why,
                            stderr_tail: None,
                            retry: false,
                        };
                        if self
                            .store
                            .finish(&self.study, c.trial_id, &Finish::Fail(failure), &[])
                            .await?
                            .is_some()
                        {
                            self.tally.finished_own(c.trial_id, true);
                            self.progress.failed(FailureKind::UserError.as_str());
                        }
                    }
                    Ok(None)
                }
            };
        }
        if self.exhausted {
            return Ok(None);
        }
        // New candidates in line are not numbered yet: give each its own seed key, or a
        // seeded sampler would propose the same params twice.
        let queued_new = self
            .pending
            .iter()
            .filter(|(c, _)| matches!(c, Candidate::New(_)))
            .count() as u64;
        let key = self.next_key + queued_new;
        let mut proposal = self.sampler.sample(space, &Params::new(), key);
        for attempt in 1..=policy::MAX_REDRAWS {
            match &proposal {
                Some(p)
                    if self
                        .infeasible
                        .iter()
                        .any(|bad| policy::resembles(space, p, bad)) =>
                {
                    // A distinct seed key per redraw keeps seeded runs reproducible.
                    proposal =
                        self.sampler
                            .sample(space, &Params::new(), key + attempt * (1 << 40));
                }
                _ => break,
            }
        }
        match proposal {
            Some(p) => Ok(Some(Candidate::New(p))),
            None => {
                info!("the sampler has proposed every point of the search space");
                self.exhausted = true;
                Ok(None)
            }
        }
    }

    /// An intermediate value: recorded, and answered with the pruner's decision.
    async fn report(&mut self, c: &Claimed, step: i64, value: f64) -> bool {
        if let Err(e) = self.store.report(c.trial_id, step, value).await {
            warn!("could not record an intermediate value: {e}");
        }
        self.pruner.report(c.number, step, value)
    }

    /// Turns an outcome into a recorded finish: the retry policy, OOM feedback into admission
    /// and the memory model, the circuit breaker, the sampler and the pruner.
    async fn finish(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
    ) -> Result<Finished, RunError> {
        let f = self.finish_begin(c, device, outcome, fresh_worker);
        self.finish_written(c, f).await
    }

    /// Writes a decided finish in a commit of its own, then accounts for it.
    async fn finish_written(&mut self, c: &Claimed, f: Finishing) -> Result<Finished, RunError> {
        let written = self
            .store
            .finish(&self.study, c.trial_id, &f.how, &f.attrs)
            .await?;
        if written.is_some() {
            self.finish_end(&f).await?;
        } // else someone else finished it: nothing to count twice
        Ok(Finished {
            how: f.how,
            peak: f.peak,
            next: None,
        })
    }

    /// `finish`, then the slot's next trial started in the same durable commit when one can
    /// start now (`None`: ask `next` as usual). The finish is accounted for before the next is
    /// chosen, so the sampler has learnt from it.
    async fn finish_then_next(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
        hint: Option<u32>,
    ) -> Result<Finished, RunError> {
        let f = self.finish_begin(c, device, outcome, fresh_worker);
        // A failure retried creates its copy in the finish's own commit: the next choice must
        // see it (retries run first), so that finish is written alone and `next` chooses.
        if !f.spends() {
            return self.finish_written(c, f).await;
        }
        self.finish_end(&f).await?;
        let plan = self.plan(hint, false).await?;
        let Planned::Start(plan) = plan else {
            if self
                .store
                .finish(&self.study, c.trial_id, &f.how, &f.attrs)
                .await?
                .is_none()
            {
                self.finished_elsewhere(&f);
            }
            return Ok(Finished {
                how: f.how,
                peak: f.peak,
                next: None,
            });
        };
        let ctx = StartCtx {
            study: &self.study,
            owner: &self.me,
            budget: self.config.study.n_trials,
            tally: &mut self.tally,
        };
        let (written, started) = self
            .store
            .finish_and_start(
                &self.study,
                c.trial_id,
                &f.how,
                &f.attrs,
                &self.config.space,
                plan.op(),
                ctx,
            )
            .await?;
        if written.is_none() {
            self.finished_elsewhere(&f);
        }
        let next = self.started(plan, started);
        Ok(Finished {
            how: f.how,
            peak: f.peak,
            next,
        })
    }

    /// A finish accounted for before it was written found the trial no longer RUNNING: another
    /// process ended it (a host that took over this one's trials), so it spends nothing here.
    fn finished_elsewhere(&mut self, f: &Finishing) {
        warn!(
            trial = f.number,
            "the trial was already ended by another process; its result here is not recorded"
        );
        if f.spends() {
            self.tally.unspend();
        }
    }

    /// The decisions of a finish, before anything is written: retry policy, infeasibility, OOM
    /// feedback, the same-error stop.
    fn finish_begin(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
    ) -> Finishing {
        self.running = self.running.saturating_sub(1);
        let alone = device.is_some_and(|d| self.running_on.get(&d).copied().unwrap_or(0) <= 1);
        if let Some(d) = device {
            if let Some(n) = self.running_on.get_mut(&d) {
                *n = n.saturating_sub(1);
            }
        }
        let memory = match (&self.gpu, device) {
            (Some(g), Some(_)) => g.monitor.untrack(c.trial_id),
            _ => None,
        };
        let peak = memory.as_ref().map(|m| m.peak).filter(|p| *p > 0);
        let mut attrs: Vec<(&'static str, serde_json::Value)> = Vec::new();
        if let Some(p) = peak {
            attrs.push(("sweepd:peak_memory_mib", json!(units::to_mib(p))));
        }
        let now = Instant::now();
        let mut constraints = Vec::new();
        let how = match outcome {
            Outcome::Complete(v) => Finish::Complete(v),
            Outcome::Pruned => Finish::Pruned,
            Outcome::Failed {
                kind,
                reason,
                tail,
                error,
            } => {
                // Infeasible: out of memory in a fresh process (no fragmentation of its own) with
                // no other sweepd trial on the device: these params do not fit this card.
                let infeasible = policy::infeasible(kind, alone, fresh_worker);
                // An OOM that turned into a device-side assert still says the trial needs more.
                if policy::oom_like(kind, &reason) {
                    if let (Some(g), Some(d)) = (&mut self.gpu, device) {
                        g.capacity.record_oom(d, now);
                        let total = g
                            .monitor
                            .views()
                            .0
                            .iter()
                            .find(|v| v.index == d)
                            .map_or(u64::MAX, |v| v.total);
                        g.model.record_oom(&c.params, peak.unwrap_or(0), total);
                    }
                }
                let signature = Signature::of(kind, &reason, error.as_ref());
                let (retry, reason) = if infeasible {
                    constraints.push(1.0);
                    self.infeasible.push(c.params.clone());
                    attrs.push(("constraints", json!([1.0])));
                    (
                        false,
                        format!("{reason} (infeasible: out of memory while alone on the device)"),
                    )
                } else if let Some(sig) = &signature {
                    if self.same_error.stopped_for(sig) {
                        (true, reason)
                    } else if self.same_error.failure(c.trial_id, sig) {
                        self.halted = true;
                        self.fatal = Some(RunError::SameError(policy::same_error_message(
                            self.same_error.streak.len(),
                            &reason,
                            sig,
                        )));
                        (true, reason)
                    } else {
                        (
                            policy::retry_allowed(kind, &c.attempts, &self.config.retry),
                            reason,
                        )
                    }
                } else {
                    (
                        policy::retry_allowed(kind, &c.attempts, &self.config.retry),
                        reason,
                    )
                };
                Finish::Fail(Failure {
                    kind,
                    reason,
                    stderr_tail: tail,
                    retry,
                })
            }
        };
        Finishing {
            trial_id: c.trial_id,
            number: c.number,
            params: c.params.clone(),
            how,
            attrs,
            device,
            peak,
            constraints,
        }
    }

    /// The accounting of a finish once written (or about to be, in the same commit as the next
    /// start): budget, best value, breaker, memory model, pruner and sampler. (The metrics are
    /// the slot's to update, once the finish is durable.)
    async fn finish_end(&mut self, f: &Finishing) -> Result<(), RunError> {
        let Finishing {
            trial_id,
            number,
            params,
            how,
            device,
            peak,
            ..
        } = f;
        let (trial_id, number, device, peak) = (*trial_id, *number, *device, *peak);
        let now = Instant::now();
        let (state, value) = match &how {
            Finish::Complete(v) => (TrialState::Complete, Some(*v)),
            Finish::Pruned => (TrialState::Pruned, None),
            Finish::Fail(_) => (TrialState::Fail, None),
        };
        self.tally.finished_own(trial_id, f.spends());
        if self.fatal.is_some() {
            // The earlier trials of the streak were recorded as final failures: re-enqueue
            // them too, so that none of the streak spends the budget.
            let earlier: Vec<i64> = self
                .same_error
                .streak
                .iter()
                .copied()
                .filter(|id| *id != trial_id)
                .collect();
            for id in earlier {
                if self.store.requeue_failed(&self.study, id).await?.is_some() {
                    self.tally.unspend();
                }
            }
        }
        match &how {
            Finish::Complete(v) => self.progress.completed(number, *v),
            Finish::Fail(f) => self.progress.failed(f.kind.as_str()),
            Finish::Pruned => {}
        }
        if let Some(v) = value.filter(|_| state == TrialState::Complete) {
            if self
                .best
                .is_none_or(|b| self.config.study.direction.better(v, b))
            {
                self.best = Some(v);
            }
        }
        match &how {
            // The breaker is for faults that may clear by themselves (a device, a driver, the
            // memory others use); an error in the objective is the same error next time.
            Finish::Fail(f) if f.kind.may_clear() => {
                if let Some(wait) = self.breaker.failure(device, now) {
                    let on = device.map_or("the CPU".into(), |d| format!("gpu{d}"));
                    warn!(
                        "circuit breaker: {} consecutive failures on {on}; quarantined for {}",
                        self.config.retry.breaker_threshold,
                        units::format_duration(wait)
                    );
                    let _ = self
                        .store
                        .event(
                            None,
                            Some(trial_id),
                            "quarantined",
                            &format!("{on} for {wait:?}"),
                        )
                        .await;
                    if let Some(why) = self.breaker.paused(&self.devices(), now) {
                        warn!("{why}");
                    }
                }
            }
            Finish::Fail(_) => {}
            _ => {
                self.breaker.success(device);
                self.same_error.success();
            }
        }
        if let (Some(g), Some(p)) = (&mut self.gpu, peak) {
            if state != TrialState::Fail {
                g.model.record(params, p);
            }
        }
        self.pruner.finish(number, state == TrialState::Complete);
        self.sampler.tell(&TrialRecord {
            number,
            params: params.clone(),
            state,
            value,
            constraints: f.constraints.clone(),
        });
        Ok(())
    }
}

/// Everything the slot tasks share.
struct Shared {
    /// The config in force; SIGHUP swaps in a new one with the keys that may change live.
    config: std::sync::RwLock<Arc<Config>>,
    store: Store,
    study: crate::store::Study,
    /// The decision point, behind a lock: slots ask it one at a time.
    core: Mutex<Core>,
    /// Woken whenever a trial ends or readings change, so waiting slots look again.
    changed: Notify,
    /// SIGINT/SIGTERM, or a fatal error in one slot: stop starting trials.
    shutdown: CancellationToken,
    /// A second SIGINT/SIGTERM: no more grace, kill the workers' groups now.
    kill_now: CancellationToken,
    /// The study was deleted from the database: kill running trials now, no grace (their rows
    /// are gone, there is nothing left to record).
    abandon: CancellationToken,
    /// The GPU monitor, when sweepd schedules on GPUs.
    monitor: Option<Arc<Monitor>>,
    host: String,
    python_dir: Option<PathBuf>,
    me: DaemonId,
    metrics: Arc<Metrics>,
    /// `--par` from the command line, which reloads keep.
    par_override: Option<usize>,
}

impl Shared {
    fn cfg(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Runs the study until its budget is spent, the sampler is exhausted or `shutdown` fires.
/// What the outside world can tell a running daemon.
#[derive(Clone, Default)]
pub struct Control {
    /// SIGINT/SIGTERM: stop starting trials, give running ones the grace, exit.
    pub shutdown: CancellationToken,
    /// A second SIGINT/SIGTERM (after `shutdown`): end the grace at once, SIGKILL the workers'
    /// groups, and still record every running trial as interrupted and re-enqueue it.
    pub kill_now: CancellationToken,
    /// Where the supervisor publishes progress for the terminal's display.
    pub progress: watch::Sender<Progress>,
    /// SIGHUP: re-read the config file and apply what can change while running.
    pub reload: Arc<Notify>,
    /// `--par`: overrides `[worker] max_par`, also in configs reloaded later.
    pub par_override: Option<usize>,
}

/// A daemon whose heartbeat (written every second) is older than this is gone: `status` says
/// so, and `run` on another host takes its row over.
pub const DAEMON_GONE_AFTER: Duration = Duration::from_secs(60);

/// Whether a daemon row's heartbeat is recent enough for its daemon to be running.
pub fn heartbeat_fresh(heartbeat_at: &str) -> bool {
    store::time::age(heartbeat_at).is_some_and(|age| age < DAEMON_GONE_AFTER)
}

/// The single-instance rule: whether the daemon holding the study's row still runs, so that
/// `me` must not take it. A stopped one does not; on this host it runs while its pid does with
/// the recorded start time (a reused pid is another process); from another host, while its
/// heartbeat is fresh.
pub fn daemon_alive(holder: &Holder, me: &DaemonId) -> bool {
    let h = &holder.id;
    holder.state != DaemonState::Stopped
        && if h.host == me.host {
            h.pid != me.pid
                && process::proc_stat(h.pid as i32)
                    .is_some_and(|s| Some(s.start_time) == h.pid_start)
        } else {
            heartbeat_fresh(&holder.heartbeat_at)
        }
}

/// Runs the study until its budget is spent, the sampler is exhausted or shutdown is asked.
pub async fn run(config: Config, control: Control) -> Result<RunSummary, RunError> {
    let config = Arc::new(config);
    let store = Store::open(&config.storage.path).await?;
    if crate::store::world_readable(&config.storage.path) {
        // sweepd creates the file 0640; this one was made by someone else (or an older sweepd).
        warn!(
            "database {} is readable by every user on this machine, and it holds the stderr tails of failed trials: `chmod o-rwx` it and its -wal and -shm files",
            config.storage.path.display()
        );
    }
    let study = store
        .ensure_study(&config.study.name, config.study.direction)
        .await?;
    let me = DaemonId {
        pid: std::process::id(),
        pid_start: process::proc_stat(std::process::id() as i32).map(|s| s.start_time),
        host: hostname(),
    };
    store
        .lock_daemon(&study, &me, |holder| daemon_alive(holder, &me))
        .await
        .map_err(|e| match e {
            DaemonLockError::Store(s) => RunError::Store(s),
            held => RunError::Locked(held.to_string()),
        })?;
    let result = run_locked(config, store.clone(), study.clone(), me.clone(), control).await;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    // However the run ended (housekeeping noticed, or a write failed on the missing rows),
    // a study deleted under us is said as such, not as the error it caused.
    if store.study_deleted(&study).await.unwrap_or(false) {
        // The delete's triggers took the study's sweepd rows; what we wrote while stopping
        // (worker exits, events) goes too.
        if let Err(e) = store.purge_orphans().await {
            warn!("could not delete the deleted study's worker rows: {e}");
        }
        return Err(RunError::StudyDeleted {
            name: study.name.clone(),
            path: store.path().to_owned(),
        });
    }
    let _ = store
        .daemon_state(&study, &me, DaemonState::Stopped, None)
        .await;
    result
}

/// Stops the daemon at once when its study was deleted from the database: running trials
/// are killed (their rows are gone), and `run` exits with [`RunError::StudyDeleted`].
fn study_deleted_under_us(sh: &Shared) {
    if sh.abandon.is_cancelled() {
        return;
    }
    error!(
        "study `{}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopping",
        sh.study.name,
        sh.store.path().display()
    );
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(
        "study deleted from the database; stopping",
    )]);
    sh.abandon.cancel();
    sh.shutdown.cancel();
}

async fn run_locked(
    config: Arc<Config>,
    store: Store,
    study: crate::store::Study,
    me: DaemonId,
    control: Control,
) -> Result<RunSummary, RunError> {
    let shutdown = control.shutdown.clone();
    reap_previous_instance(&store, &study).await?;
    let mut stale = Vec::new();
    for (trial_id, owner) in store.sweepd_running(&study).await? {
        // This daemon holds the study's lock: every other sweepd daemon that ran it is gone.
        // RUNNING trials that no sweepd started (an Optuna script's) are left to their owner.
        if owner.as_ref() != Some(&me) {
            let reason =
                "interrupted: the sweepd instance running this trial stopped (killed or crashed)";
            stale.extend(store.interrupt(&study, trial_id, reason).await?);
        }
    }
    if !stale.is_empty() {
        store.sync().await?;
        warn!(trials = ?stale, "marked trials left RUNNING by a previous instance as FAIL and re-enqueued them");
    }
    let monitor = open_gpus(&config).await?;
    let mut sampler = sampler::build(
        config.study.sampler,
        &config.space,
        config.sampler.seed.or(config.study.seed),
        config.study.direction,
        &config.sampler,
    )
    .map_err(RunError::Sampler)?;
    let mut model = MemoryModel::new(&config.space, config.gpu.trial_memory);
    let mut infeasible = Vec::new();
    for record in store.history(&study).await? {
        if record.constraints.iter().any(|c| *c > 0.0) {
            infeasible.push(record.params.clone());
        }
        match record.state {
            TrialState::Running | TrialState::Waiting => {
                sampler.observe(record.number, &record.params)
            }
            _ => sampler.tell(&record),
        }
    }
    for (params, peak) in store.peaks(&study).await? {
        model.record(&params, peak);
    }
    let mut pruner = Pruner::new(config.pruner.clone(), config.study.direction);
    for (number, completed, values) in store.intermediate_history(&study).await? {
        pruner.load(number, completed, &values);
    }
    let counts = store.counts(&study).await?;
    let mut tally = Tally::default();
    store.refresh_tally(&study, &mut tally).await?;
    info!(
        study = %study.name,
        db = %config.storage.path.display(),
        finished = tally.finished,
        budget = config.study.n_trials,
        max_par = config.worker.max_par,
        gpus = monitor.as_ref().map(|m| tracing::field::debug(m.devices.clone())),
        "study started"
    );
    let metrics = Arc::new(Metrics::new());
    metrics.set_counts(&counts);
    let gpu = monitor.as_ref().map(|m| GpuCtl {
        monitor: m.clone(),
        capacity: Capacity::new(
            config.gpu.headroom,
            config.gpu.max_par_per_device,
            config.retry.oom_admission_factor,
            config.retry.oom_recovery,
        ),
        model,
        next_expected: None,
        failing: Default::default(),
    });
    let shared = Arc::new(Shared {
        core: Mutex::new(Core {
            store: store.clone(),
            study: study.clone(),
            config: config.clone(),
            sampler,
            pruner,
            tally,
            me: me.clone(),
            running: 0,
            running_on: HashMap::new(),
            exhausted: false,
            started: Instant::now(),
            pending: Default::default(),
            next_key: store.next_number(&study).await? as u64,
            gpu,
            breaker: Breaker {
                cfg: config.retry.clone(),
                devices: HashMap::new(),
            },
            best: store.best(&study).await?.and_then(|b| b.value.as_f64()),
            infeasible,
            same_error: SameError::new(config.retry.stop_after_same_error),
            fatal: None,
            halted: false,
            progress: Tracker::new(
                control.progress.clone(),
                config.study.direction,
                store
                    .best(&study)
                    .await?
                    .and_then(|b| Some((b.number, b.value.as_f64()?))),
                counts.finished(),
            ),
        }),
        config: std::sync::RwLock::new(config.clone()),
        store: store.clone(),
        study: study.clone(),
        changed: Notify::new(),
        shutdown,
        kill_now: control.kill_now.clone(),
        abandon: CancellationToken::new(),
        monitor,
        host: me.host.clone(),
        python_dir: python_dir(),
        me,
        metrics: metrics.clone(),
        par_override: control.par_override,
    });
    let slots_done = CancellationToken::new();
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Metrics { addr, source })?;
        info!(%addr, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(
            listener,
            metrics.clone(),
            slots_done.clone(),
        ));
    }
    let housekeeping = tokio::spawn(housekeep(shared.clone(), slots_done.clone()));
    // The database is migrated and NVML read: systemd may consider us started.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    // Slot tasks by index: SIGHUP may raise max_par (start the missing ones) or lower it
    // (slots past it end after their trial).
    let mut slots = tokio::task::JoinSet::new();
    let mut live = std::collections::HashSet::new();
    let spawn_missing = |slots: &mut tokio::task::JoinSet<(usize, Result<(), RunError>)>,
                         live: &mut std::collections::HashSet<usize>| {
        for slot in 0..shared.cfg().worker.max_par {
            if live.insert(slot) {
                let sh = shared.clone();
                slots.spawn(async move { (slot, run_slot(slot, sh).await) });
            }
        }
    };
    spawn_missing(&mut slots, &mut live);
    let mut first_error = None;
    loop {
        let joined = tokio::select! {
            j = slots.join_next() => match j {
                Some(j) => j,
                None => break,
            },
            _ = control.reload.notified() => {
                reload(&shared).await;
                if !shared.shutdown.is_cancelled() {
                    spawn_missing(&mut slots, &mut live);
                }
                continue;
            }
        };
        match joined {
            Ok((slot, Ok(()))) => {
                live.remove(&slot);
            }
            Ok((slot, Err(e))) => {
                live.remove(&slot);
                if matches!(e, RunError::Store(_))
                    && shared
                        .store
                        .study_deleted(&shared.study)
                        .await
                        .unwrap_or(false)
                {
                    // A write failed because the study's rows are gone: say that instead.
                    study_deleted_under_us(&shared);
                } else {
                    error!("{e}");
                }
                // One slot's fatal error stops the others gracefully.
                shared.shutdown.cancel();
                first_error.get_or_insert(e);
            }
            Err(e) => {
                let e = RunError::from_slot_panic(e);
                error!("{e}");
                shared.shutdown.cancel();
                first_error.get_or_insert(e);
            }
        }
    }
    slots_done.cancel();
    let _ = housekeeping.await;
    if let Some(e) = first_error {
        return Err(e);
    }
    let counts = store.counts(&study).await?;
    let interrupted = shared.shutdown.is_cancelled();
    info!(
        complete = counts.complete,
        pruned = counts.pruned,
        fail = counts.fail,
        waiting = counts.waiting,
        interrupted,
        "study stopped"
    );
    Ok(RunSummary {
        counts,
        interrupted,
    })
}

/// Loads NVML and reads the devices once, when the config schedules on GPUs.
async fn open_gpus(config: &Config) -> Result<Option<Arc<Monitor>>, RunError> {
    if matches!(config.gpu.devices, Devices::None) {
        return Ok(None);
    }
    if config.gpu.gpus_per_trial != 1 {
        return Err(RunError::Gpu(
            "gpus_per_trial > 1 is not supported yet: set it to 1 (multi-GPU trials are on the roadmap)".into(),
        ));
    }
    let lib = config.gpu.nvml_lib.clone();
    let gpu = tokio::task::spawn_blocking(move || Gpu::open(lib.as_deref()))
        .await
        .map_err(|e| RunError::Gpu(e.to_string()))?
        .map_err(|e| RunError::Gpu(e.to_string()))?;
    let count = gpu
        .device_count()
        .map_err(|e| RunError::Gpu(e.to_string()))?;
    let devices: Vec<u32> = match &config.gpu.devices {
        Devices::All => (0..count).collect(),
        Devices::List(l) => {
            if let Some(bad) = l.iter().find(|d| **d >= count) {
                return Err(RunError::Gpu(format!(
                    "[gpu] devices names device {bad}, but NVML sees {count} device(s) (0..{})",
                    count.saturating_sub(1)
                )));
            }
            l.clone()
        }
        Devices::None => unreachable!("handled above"),
    };
    if devices.is_empty() {
        return Err(RunError::Gpu(
            "NVML sees no GPU; use [gpu] devices = \"none\" to run CPU-only".into(),
        ));
    }
    let monitor = Arc::new(Monitor::new(Arc::new(gpu), devices));
    monitor.poll().await;
    Ok(Some(monitor))
}

/// SIGHUP: re-reads the config file. An invalid file is rejected and the running config kept;
/// of a valid one, the keys that can change safely are applied and the others reported.
async fn reload(sh: &Shared) {
    let old = sh.cfg();
    // The command line (--par, PAR=N) wins over the file, across reloads too.
    let overrides = Overrides {
        max_par: sh.par_override,
    };
    let new = match Config::load_with(&old.path, &overrides) {
        Ok(c) => c,
        Err(e) => {
            error!("reload rejected, keeping the running config:\n{e}");
            return;
        }
    };
    let needs_restart = old.reload_diff(&new);
    let applied = Arc::new(old.apply_live(&new));
    if applied == old {
        info!("reload: nothing that can change live has changed");
    } else {
        info!(
            max_par = applied.worker.max_par,
            n_trials = applied.study.n_trials,
            "reload: applied the new config"
        );
    }
    if !needs_restart.is_empty() {
        warn!(
            "reload: these keys changed but need a restart to take effect: {}",
            needs_restart.join(", ")
        );
    }
    {
        let mut core = sh.core.lock().await;
        core.config = applied.clone();
        core.breaker.cfg = applied.retry.clone();
        core.same_error.limit = applied.retry.stop_after_same_error;
        if let Some(g) = &mut core.gpu {
            g.capacity.set_headroom(applied.gpu.headroom);
        }
    }
    *sh.config.write().unwrap_or_else(|p| p.into_inner()) = applied;
    sh.changed.notify_waiters();
}

/// Kills worker groups that an earlier instance started and left behind (kill -9 of the
/// daemon), identified by pid *and* start time so that a reused pid is never touched.
async fn reap_previous_instance(
    store: &Store,
    study: &crate::store::Study,
) -> Result<(), StoreError> {
    for (worker_id, pid, start) in store.unfinished_workers(study).await? {
        if let (Some(pid), Some(start)) = (pid, start) {
            if process::kill_stale_group(pid as i32, start as u64) {
                warn!(
                    worker_id,
                    pid, "killed a worker left running by a previous instance"
                );
                store
                    .event(Some(worker_id), None, "killed_stale", &format!("pid {pid}"))
                    .await?;
            }
        }
        store.worker_exited(worker_id, None, None).await?;
    }
    Ok(())
}

/// Every second (or GPU poll interval): read the GPUs, take requests, keep the daemon row
/// current; wake waiting slots when anything may have changed.
async fn housekeep(sh: Arc<Shared>, done: CancellationToken) {
    let every = if sh.monitor.is_some() {
        sh.cfg().gpu.poll_interval
    } else {
        Duration::from_secs(1)
    };
    let mut tick = 0u64;
    loop {
        match sh.store.study_deleted(&sh.study).await {
            Ok(true) => {
                study_deleted_under_us(&sh);
                done.cancelled().await;
                return;
            }
            Ok(false) => {}
            Err(e) => warn!("could not check that the study still exists: {e}"),
        }
        match sh.store.ensure_mirror().await {
            Ok(true) => info!(
                "sweepd's triggers on Optuna's tables were missing (a table rebuilt by an Optuna migration?): re-created them and refilled sweepd_trials"
            ),
            Ok(false) => {}
            Err(e) => warn!("could not check sweepd's triggers on Optuna's tables: {e}"),
        }
        if let Some(m) = &sh.monitor {
            let report = m.poll().await;
            if let Err(e) = sh.store.write_samples(&report.samples).await {
                warn!("could not store memory samples: {e}");
            }
            for (pid, device, bytes) in &report.orphans {
                let _ = sh
                    .store
                    .event(
                        None,
                        None,
                        "orphan_killed",
                        &format!("pid {pid} held {bytes} bytes on gpu{device}"),
                    )
                    .await;
            }
            let rows = gpu_rows(&sh, m).await;
            sh.metrics.set_gpus(&rows);
            if let Err(e) = sh.store.write_gpus(&sh.study, &rows).await {
                warn!("could not store GPU readings: {e}");
            }
        }
        match sh.store.take_commands(&sh.study).await {
            Ok(cmds) => {
                for cmd in cmds {
                    match cmd {
                        Ok(DaemonCommand::Resume) => {
                            sh.core.lock().await.breaker.release_all();
                            info!("resumed by `sweepd resume`: quarantines lifted");
                        }
                        Err(unknown) => warn!("{unknown} ignored"),
                    }
                }
            }
            Err(e) => warn!("could not read commands: {e}"),
        }
        let (paused, status) = {
            let core = sh.core.lock().await;
            if core.gpu.is_none() {
                sh.metrics.set_running(None, core.running as usize);
            }
            core.publish();
            (
                core.breaker.paused(&core.devices(), Instant::now()),
                status_line(&sh.cfg(), &core),
            )
        };
        let state = if paused.is_some() {
            DaemonState::Paused
        } else {
            DaemonState::Running
        };
        if let Err(e) = sh
            .store
            .daemon_state(&sh.study, &sh.me, state, paused.as_deref())
            .await
        {
            warn!("could not update the daemon row: {e}");
        }
        // The watchdog is fed only by a loop that just got the core lock and the database:
        // a wedged supervisor stops feeding it and systemd restarts us.
        let status = paused.as_deref().map_or(status, |p| format!("PAUSED: {p}"));
        let _ = sd_notify::notify(&[
            sd_notify::NotifyState::Status(&status),
            sd_notify::NotifyState::Watchdog,
        ]);
        if sh.cfg().metrics.listen.is_some() && tick % 10 == 0 {
            if let Ok(c) = sh.store.counts(&sh.study).await {
                sh.metrics.set_counts(&c);
            }
        }
        tick += 1;
        sh.changed.notify_waiters();
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = done.cancelled() => return,
        }
    }
}

/// The line `systemctl status` shows: "running 3/4 on gpu0, 812/5000 done, best 0.388".
fn status_line(cfg: &Config, core: &Core) -> String {
    let on = match &core.gpu {
        Some(g) => g
            .monitor
            .devices
            .iter()
            .map(|d| format!("gpu{d}"))
            .collect::<Vec<_>>()
            .join(","),
        None => "cpu".into(),
    };
    let done = match cfg.study.n_trials {
        Some(n) => format!("{}/{n} done", core.tally.finished),
        None => format!("{} done", core.tally.finished),
    };
    let best = core
        .best
        .map_or("no result yet".into(), |b| format!("best {b:.6}"));
    format!(
        "running {}/{} on {on}, {done}, {best}",
        core.running, cfg.worker.max_par
    )
}

/// The rows `sweepd gpus` shows: the latest readings with the admission decisions.
async fn gpu_rows(sh: &Shared, m: &Monitor) -> Vec<GpuRow> {
    let core = sh.core.lock().await;
    let Some(g) = &core.gpu else {
        return Vec::new();
    };
    let (views, running, _) = m.views();
    let expected = g.next_expected.unwrap_or(sh.cfg().gpu.trial_memory);
    let now = Instant::now();
    m.readings()
        .into_iter()
        .map(|(device, r)| {
            let on_device = running.iter().filter(|t| t.device == device).count();
            match r {
                Ok(r) => {
                    let view = views.iter().find(|v| v.index == device);
                    let decision = view.map(|v| g.capacity.decide(v, &running, expected, now));
                    let quarantine = core.breaker.quarantined(Some(device), now);
                    let wait = match (quarantine, &decision) {
                        (Some(u), _) => Some(format!(
                            "quarantined by the circuit breaker for {}s more",
                            (u - now).as_secs()
                        )),
                        (None, Some(d)) => d.wait.as_ref().map(|w| w.to_string()),
                        _ => None,
                    };
                    GpuRow {
                        device,
                        name: Some(r.name.clone()),
                        total: Some(r.total),
                        free: Some(r.free),
                        used: Some(r.used),
                        util_gpu: r.util_gpu,
                        util_mem: r.util_mem,
                        running: on_device,
                        par_estimate: decision.as_ref().map(|d| d.par_estimate),
                        expected_peak: Some(expected),
                        wait,
                        error: None,
                        updated_at: String::new(),
                    }
                }
                Err(e) => GpuRow {
                    device,
                    running: on_device,
                    wait: Some("no admission until NVML readings return".into()),
                    error: Some(e),
                    ..GpuRow::default()
                },
            }
        })
        .collect()
}

/// A slot's current worker and what it knows of it.
struct Current {
    worker: Worker,
    device: Option<u32>,
    health: WorkerHealth,
}

/// One parallel slot: owns at most one worker at a time.
async fn run_slot(slot: usize, sh: Arc<Shared>) -> Result<(), RunError> {
    let mut current: Option<Current> = None;
    let mut start_failures = 0u32;
    // A trial started in the commit that finished the previous one, not run yet.
    let mut carried: Option<(Claimed, Option<u32>)> = None;
    let result: Result<(), RunError> = async {
        loop {
            if sh.shutdown.is_cancelled() || slot >= sh.cfg().worker.max_par {
                if let Some((claimed, device)) = carried.take() {
                    let out = Outcome::Failed {
                        kind: FailureKind::Interrupted,
                        reason: "interrupted: sweepd stopped before the trial ran".into(),
                        tail: None,
                        error: None,
                    };
                    record_finish(&sh, &claimed, device, out, Duration::ZERO, false).await?;
                }
                return Ok(());
            }
            let persistent = sh.cfg().worker.mode == WorkerMode::Persistent;
            if current
                .as_ref()
                .is_some_and(|c| c.worker.exit_status().is_some())
            {
                let c = current.take().expect("checked");
                retire(&sh, c.worker, c.device, "exited while idle").await?;
            }
            // CPU-only persistent workers start before a trial is claimed: a worker that cannot
            // start must not leave trials behind. On GPUs the device is known only after admission.
            if persistent && sh.monitor.is_none() && current.is_none() && carried.is_none() {
                match start_persistent(slot, &sh, None).await? {
                    Ok(w) => {
                        start_failures = 0;
                        current = Some(Current {
                            worker: w,
                            device: None,
                            health: WorkerHealth::default(),
                        });
                    }
                    Err(_) if sh.shutdown.is_cancelled() => return Ok(()),
                    Err((reason, stderr)) => {
                        start_failures += 1;
                        if start_failures >= MAX_START_FAILURES {
                            return Err(RunError::WorkerStart { reason, stderr });
                        }
                        backoff(&sh, start_failures).await;
                        continue;
                    }
                }
            }
            let hint = current.as_ref().and_then(|c| c.device);
            let next = match carried.take() {
                Some((claimed, device)) => Next::Run(claimed, device),
                None => {
                    sh.core
                        .lock()
                        .await
                        .next(hint, sh.shutdown.is_cancelled())
                        .await?
                }
            };
            let (claimed, device) = match next {
                Next::Done => return Ok(()),
                Next::Wait => {
                    tokio::select! {
                        _ = sh.changed.notified() => {}
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = sh.shutdown.cancelled() => {}
                    }
                    continue;
                }
                Next::Run(c, d) => (c, d),
            };
            // Its number is seen from here on (the worker, the log): it must be durable.
            sh.store.sync().await?;
            if persistent && current.as_ref().is_some_and(|c| c.device != device) {
                let c = current.take().expect("checked");
                retire(&sh, c.worker, c.device, "moved to another device").await?;
            }
            if persistent && current.is_none() {
                match start_persistent(slot, &sh, device).await? {
                    Ok(w) => {
                        start_failures = 0;
                        current = Some(Current {
                            worker: w,
                            device,
                            health: WorkerHealth::default(),
                        });
                    }
                    Err((reason, stderr)) => {
                        let out = Outcome::Failed {
                            kind: FailureKind::Interrupted,
                            reason: format!("interrupted: its worker failed to start: {reason}"),
                            tail: Some(stderr.clone()),
                            error: None,
                        };
                        record_finish(&sh, &claimed, device, out, Duration::ZERO, false).await?;
                        if sh.shutdown.is_cancelled() {
                            return Ok(());
                        }
                        start_failures += 1;
                        if start_failures >= MAX_START_FAILURES {
                            return Err(RunError::WorkerStart { reason, stderr });
                        }
                        backoff(&sh, start_failures).await;
                        continue;
                    }
                }
            }
            let trial_started = Instant::now();
            let (outcome, fate, oneshot) = if persistent {
                let c = current
                    .as_mut()
                    .expect("a persistent slot has a worker here");
                bind(&sh, &claimed, &c.worker, device).await?;
                let (o, f) = run_trial(&sh, &mut c.worker, &claimed, None).await;
                (o, f, None)
            } else {
                match start_oneshot(slot, &sh, &claimed, device).await {
                    Ok((mut w, result_file)) => {
                        bind(&sh, &claimed, &w, device).await?;
                        let (o, f) = run_trial(&sh, &mut w, &claimed, Some(&result_file)).await;
                        let _ = std::fs::remove_file(&result_file);
                        (o, f, Some(w))
                    }
                    Err(e) => {
                        let out = Outcome::Failed {
                            kind: FailureKind::Interrupted,
                            reason: e.to_string(),
                            tail: None,
                            error: None,
                        };
                        record_finish(&sh, &claimed, device, out, Duration::ZERO, false).await?;
                        return Err(e);
                    }
                }
            };
            let oom = matches!(
                &outcome,
                Outcome::Failed {
                    kind: FailureKind::Oom,
                    ..
                }
            );
            // Oneshot workers are always fresh.
            let fresh = current.as_ref().is_none_or(|c| c.health.clean());
            // The next trial starts in the same commit, unless this slot is ending.
            let then = (!sh.shutdown.is_cancelled() && slot < sh.cfg().worker.max_par)
                .then_some(if persistent { device } else { None });
            let (how, next) = finish_and_next(
                &sh,
                &claimed,
                device,
                outcome,
                trial_started.elapsed(),
                fresh,
                then,
            )
            .await?;
            if let Some(Next::Run(c, d)) = next {
                carried = Some((c, d));
            }
            if let Some(w) = oneshot {
                retire(&sh, w, device, "oneshot trial done").await?;
                continue;
            }
            let mut c = current.take().expect("persistent worker");
            c.health.trials_run += 1;
            let success = matches!(how, Finish::Complete(_) | Finish::Pruned);
            if success {
                c.health.successes += 1;
                sh.store.worker_trial_done(c.worker.id).await?;
            }
            if let (Some(m), Some(d), Fate::Keep) = (&sh.monitor, c.device, &fate) {
                // What the process holds between trials: the growth baseline, and how clean
                // it is when the next trial starts.
                c.health.idle = m.group_usage(c.worker.pid as i32, d).await;
                if success && c.health.baseline.is_none() {
                    c.health.baseline = c.health.idle;
                }
            }
            let fate = match fate {
                Fate::Keep if oom => policy::after_oom(&c.health),
                Fate::Keep if success => {
                    let cfg = sh.cfg();
                    policy::recycle(
                        &c.health,
                        cfg.worker.recycle_after,
                        cfg.worker.recycle_on_growth,
                    )
                }
                other => other,
            };
            match fate {
                Fate::Replace(why) => retire(&sh, c.worker, c.device, &why).await?,
                Fate::Keep => current = Some(c),
            }
        }
    }
    .await;
    if let Some(c) = current.take() {
        retire(&sh, c.worker, c.device, "study stopped").await?;
    }
    result
}

async fn backoff(sh: &Shared, failures: u32) {
    let wait = Duration::from_millis(500 * 2u64.pow(failures.min(6)));
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = sh.shutdown.cancelled() => {}
    }
}

/// Records which worker runs the trial, and lets the monitor attribute its memory.
async fn bind(sh: &Shared, c: &Claimed, w: &Worker, device: Option<u32>) -> Result<(), RunError> {
    let runner = Runner {
        worker_id: w.id,
        pid: w.pid,
    };
    sh.store.set_runner(c.trial_id, runner, device).await?;
    if let Some(m) = &sh.monitor {
        m.bind(c.trial_id, w.pid as i32);
    }
    Ok(())
}

/// Records how a trial ended, and logs it once it is durable.
async fn record_finish(
    sh: &Shared,
    claimed: &Claimed,
    device: Option<u32>,
    outcome: Outcome,
    duration: Duration,
    fresh_worker: bool,
) -> Result<Finish, RunError> {
    let (how, _) =
        finish_and_next(sh, claimed, device, outcome, duration, fresh_worker, None).await?;
    Ok(how)
}

/// `record_finish`, and with `then = Some(hint)` the slot's next trial started in the same
/// commit where one can start now (see `Core::finish_then_next`).
async fn finish_and_next(
    sh: &Shared,
    claimed: &Claimed,
    device: Option<u32>,
    outcome: Outcome,
    duration: Duration,
    fresh_worker: bool,
    then: Option<Option<u32>>,
) -> Result<(Finish, Option<Next>), RunError> {
    let (finished, fatal) = {
        let mut core = sh.core.lock().await;
        let finished = match then {
            Some(hint) => {
                core.finish_then_next(claimed, device, outcome, fresh_worker, hint)
                    .await?
            }
            None => core.finish(claimed, device, outcome, fresh_worker).await?,
        };
        (finished, core.fatal.take())
    };
    // Reported (log line, metrics, the display) only once durable; the sync is shared with
    // other slots' commits and runs outside the core's lock.
    sh.store.sync().await?;
    let Finished { how, peak, next } = finished;
    let failure = match &how {
        Finish::Fail(f) => Some(f.kind.as_str()),
        _ => None,
    };
    sh.metrics.trial_ended(duration, peak, failure);
    sh.core.lock().await.publish();
    let what = match &how {
        Finish::Complete(v) => format!("COMPLETE value={v}"),
        Finish::Pruned => "PRUNED".to_owned(),
        Finish::Fail(f) => format!(
            "FAIL {}: {}{}",
            f.kind,
            f.reason,
            if sh.abandon.is_cancelled() {
                " (not recorded: the study is gone)"
            } else if f.retry {
                " (re-enqueued)"
            } else {
                ""
            }
        ),
    };
    // `gpu` only where there is one (an Option field is left out when None); the params in
    // the form Optuna shows them, so a line says what was tried, not just how it went.
    info!(
        trial = claimed.number,
        gpu = device,
        params = %sh.cfg().space.external_json(&claimed.params),
        "{what}"
    );
    sh.changed.notify_waiters();
    match fatal {
        Some(e) => Err(e),
        None => Ok((how, next)),
    }
}

/// Environment common to every worker: protocol variables, the helper on PYTHONPATH, the
/// device, the allocator settings, then the user's `[worker.env]`, which wins.
fn worker_env(
    cfg: &Config,
    python_dir: Option<&std::path::Path>,
    worker_id: i64,
    device: Option<u32>,
) -> Vec<(String, String)> {
    let mode = match cfg.worker.mode {
        WorkerMode::Persistent => "persistent",
        WorkerMode::Oneshot => "oneshot",
    };
    let mut env = vec![
        ("SWEEPD_MODE".to_owned(), mode.to_owned()),
        ("SWEEPD_WORKER_ID".to_owned(), worker_id.to_string()),
        ("SWEEPD_STUDY".to_owned(), cfg.study.name.clone()),
        ("SWEEPD_PROTOCOL".to_owned(), "1".to_owned()),
        // Workers' prints reach the log as they happen, not when a buffer fills.
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
    ];
    if let Some(dir) = python_dir {
        let mut path = dir.to_string_lossy().into_owned();
        if let Ok(old) = std::env::var("PYTHONPATH") {
            if !old.is_empty() {
                path = format!("{path}:{old}");
            }
        }
        env.push(("PYTHONPATH".to_owned(), path));
    }
    if let Some(d) = device {
        // NVML numbers devices in PCI bus order; CUDA must number them the same way.
        env.push(("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()));
        env.push(("CUDA_VISIBLE_DEVICES".to_owned(), d.to_string()));
    }
    env.extend(cfg.worker.allocator.env());
    for (k, v) in &cfg.worker.env {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// Registers and spawns a worker process.
async fn spawn_worker(
    slot: usize,
    sh: &Shared,
    device: Option<u32>,
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
) -> Result<Worker, RunError> {
    // One snapshot of the config for the whole spawn: a SIGHUP meanwhile must not give the
    // worker half of one config and half of the next.
    let cfg = sh.cfg();
    let id = sh.store.worker_created(&sh.study, slot, &sh.host).await?;
    let mut argv = cfg.worker.command.clone();
    argv.extend(extra_args);
    let mut env = worker_env(&cfg, sh.python_dir.as_deref(), id, device);
    env.extend(extra_env);
    let spec = SpawnSpec {
        argv: argv.clone(),
        env,
        cwd: cfg.worker.cwd.clone(),
        log_path: process::log_path(&cfg.worker.log_dir, id),
        log_max_bytes: cfg.worker.log_max_bytes,
        log_max_total: cfg.worker.log_max_total,
    };
    let w = match Worker::spawn(id, &spec) {
        Ok(w) => w,
        Err(source) => {
            sh.store.worker_exited(id, None, None).await?;
            sh.store
                .event(Some(id), None, "spawn_failed", &source.to_string())
                .await?;
            return Err(RunError::Spawn { argv, source });
        }
    };
    let start = process::proc_stat(w.pid as i32).map(|s| s.start_time);
    sh.store
        .worker_spawned(id, w.pid, start, &w.log_path)
        .await?;
    sh.store
        .event(
            Some(id),
            None,
            "spawned",
            &format!(
                "pid {} slot {slot} on {}",
                w.pid,
                device.map_or("cpu".into(), |d| format!("gpu{d}"))
            ),
        )
        .await?;
    Ok(w)
}

/// Starts a persistent worker and waits for its `ready`. The inner `Err` is a start failure
/// (reason, stderr tail) the slot may retry.
async fn start_persistent(
    slot: usize,
    sh: &Shared,
    device: Option<u32>,
) -> Result<Result<Worker, (String, String)>, RunError> {
    let mut w = spawn_worker(slot, sh, device, Vec::new(), Vec::new()).await?;
    let deadline = tokio::time::sleep(sh.cfg().worker.startup_timeout);
    tokio::pin!(deadline);
    let failure = loop {
        tokio::select! {
            ev = w.next_event() => match ev {
                Event::Msg(Message::Ready) => {
                    sh.store.worker_state(w.id, WorkerState::Ready).await?;
                    sh.store.event(Some(w.id), None, "ready", "").await?;
                    return Ok(Ok(w));
                }
                Event::Msg(_) => continue,
                Event::Garbage(why) => break format!("sent garbage before `ready`: {why}"),
                Event::Closed => break "closed its protocol channel before `ready`".to_owned(),
                Event::Exited(status) => break format!("exited before `ready` ({})", process::describe_exit(status)),
            },
            _ = &mut deadline => break format!(
                "sent no `ready` within startup_timeout ({})",
                units::format_duration(sh.cfg().worker.startup_timeout)
            ),
            _ = sh.shutdown.cancelled() => break "the study is stopping".to_owned(),
        }
    };
    warn!(worker = w.id, "worker failed to start: {failure}");
    let stderr = w.stderr_tail();
    retire(sh, w, device, &failure).await?;
    Ok(Err((failure, stderr)))
}

/// Spawns a oneshot worker for one trial: params as `--name=value` and as JSON in env.
async fn start_oneshot(
    slot: usize,
    sh: &Shared,
    c: &Claimed,
    device: Option<u32>,
) -> Result<(Worker, PathBuf), RunError> {
    let params = sh.cfg().space.external_json(&c.params);
    let args = params
        .as_object()
        .expect("params render as an object")
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("--{k}={s}"),
            other => format!("--{k}={other}"),
        })
        .collect();
    let results = sh.cfg().worker.log_dir.join("results");
    process::create_private_dir(&results).map_err(|source| RunError::Spawn {
        argv: sh.cfg().worker.command.clone(),
        source,
    })?;
    let result_file = results.join(format!("trial-{}.result", c.trial_id));
    let _ = std::fs::remove_file(&result_file);
    let env = vec![
        ("SWEEPD_TRIAL_ID".to_owned(), c.trial_id.to_string()),
        ("SWEEPD_TRIAL_NUMBER".to_owned(), c.number.to_string()),
        ("SWEEPD_PARAMS".to_owned(), params.to_string()),
        (
            "SWEEPD_RESULT_FILE".to_owned(),
            result_file.to_string_lossy().into_owned(),
        ),
    ];
    let w = spawn_worker(slot, sh, device, args, env).await?;
    Ok((w, result_file))
}

/// Ends a worker for good: asks it to exit, kills its group if it does not, and on a GPU waits
/// until NVML no longer lists any of its processes (the verified context reset) before the
/// slot may start another worker there.
async fn retire(
    sh: &Shared,
    mut w: Worker,
    device: Option<u32>,
    why: &str,
) -> Result<(), RunError> {
    let pgid = w.pid as i32;
    let mut pids: Vec<u32> = process::group_members_off_runtime(pgid)
        .await
        .into_iter()
        .map(|p| p as u32)
        .collect();
    if !pids.contains(&w.pid) {
        pids.push(w.pid);
    }
    if w.exit_status().is_none() && !sh.kill_now.is_cancelled() {
        let _ = w.send(&json!({"type": "shutdown"})).await;
        tokio::select! {
            _ = w.wait_for_exit(Duration::from_secs(5)) => {}
            _ = sh.kill_now.cancelled() => {}
        }
    }
    let survivors = kill_group(sh, &mut w).await;
    if !survivors.is_empty() {
        // After a second Ctrl-C nothing was given time to exit: no warning, only the record.
        let detail = if sh.kill_now.is_cancelled() {
            format!("stopped at once: SIGKILLed {survivors:?}")
        } else {
            warn!(
                worker = w.id,
                ?survivors,
                "killed processes of the worker's group that outlived it"
            );
            format!("survivors {survivors:?}")
        };
        sh.store.event(Some(w.id), None, "killed", &detail).await?;
    }
    if let (Some(m), Some(d)) = (&sh.monitor, device) {
        m.retired(pgid);
        let start = Instant::now();
        loop {
            match m.still_listed(d, &pids).await {
                Ok(left) if left.is_empty() => break,
                // Stopping now: nothing will start on this device again, so no wait for the
                // release; what NVML still lists of the group is killed without a word.
                Ok(left) if sh.kill_now.is_cancelled() => {
                    for p in &left {
                        process::kill_pid(*p);
                    }
                    break;
                }
                Err(_) if sh.kill_now.is_cancelled() => break,
                Ok(left) if start.elapsed() >= RELEASE_WAIT => {
                    warn!(
                        worker = w.id,
                        gpu = d,
                        ?left,
                        "NVML still lists processes of a retired worker; killing them"
                    );
                    for p in &left {
                        process::kill_pid(*p);
                    }
                    sh.store
                        .event(
                            Some(w.id),
                            None,
                            "release_timeout",
                            &format!("gpu{d} pids {left:?}"),
                        )
                        .await?;
                    break;
                }
                Err(e) if start.elapsed() >= RELEASE_WAIT => {
                    warn!(gpu = d, "cannot verify the memory release: {e}");
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    let (code, signal) = w
        .exit_status()
        .map(process::code_and_signal)
        .unwrap_or((None, None));
    if why != "study stopped" && why != "oneshot trial done" {
        sh.metrics.worker_restarted();
    }
    w.mark(&format!("worker {} retired: {why}", w.id)).await;
    sh.store.worker_exited(w.id, code, signal).await?;
    sh.store.event(Some(w.id), None, "exited", why).await?;
    Ok(())
}

/// Kills `w`'s group with the usual grace between SIGTERM and SIGKILL, unless sweepd is asked
/// to stop now (before or during the grace): then SIGKILL at once.
async fn kill_group(sh: &Shared, w: &mut Worker) -> Vec<i32> {
    if sh.kill_now.is_cancelled() {
        return w.kill_group_now().await;
    }
    tokio::select! {
        survivors = w.kill_group(KILL_GRACE) => return survivors,
        _ = sh.kill_now.cancelled() => {}
    }
    w.kill_group_now().await
}

/// Runs one claimed trial on `w` and decides how it ended. `result_file` is set in oneshot
/// mode, where the process exiting is the normal end of the trial.
async fn run_trial(
    sh: &Shared,
    w: &mut Worker,
    c: &Claimed,
    result_file: Option<&PathBuf>,
) -> (Outcome, Fate) {
    // One snapshot for the trial: its limits do not change halfway through by a SIGHUP.
    let cfg = sh.cfg();
    let params = cfg.space.external_json(&c.params);
    w.reset_tail();
    w.mark(&format!(
        "trial {} (trial_id {}) start: {params}",
        c.number, c.trial_id
    ))
    .await;
    let failed = |kind: FailureKind, reason: String, tail: Option<String>| Outcome::Failed {
        kind,
        reason,
        tail: tail.filter(|t| !t.is_empty()),
        error: None,
    };
    let judged = |v: classify::Verdict, tail: String| Outcome::Failed {
        kind: v.kind,
        reason: v.reason,
        tail: Some(tail).filter(|t| !t.is_empty()),
        error: v.error,
    };
    if result_file.is_none() {
        let msg =
            json!({"type": "trial", "trial_id": c.trial_id, "number": c.number, "params": params});
        if let Err(e) = w.send(&msg).await {
            let why = format!("could not send the trial to the worker: {e}");
            return (
                failed(FailureKind::WorkerDied, why.clone(), Some(w.stderr_tail())),
                Fate::Replace(why),
            );
        }
    }
    let started = Instant::now();
    let far = Duration::from_secs(86400 * 365);
    let timeout = tokio::time::sleep(cfg.worker.trial_timeout.unwrap_or(far));
    tokio::pin!(timeout);
    let heartbeat_limit = cfg.worker.heartbeat_timeout.unwrap_or(far);
    let heartbeat = tokio::time::sleep(heartbeat_limit);
    tokio::pin!(heartbeat);
    let grace = tokio::time::sleep(far);
    tokio::pin!(grace);
    let mut stopping = false;
    // Oneshot: how the trial ended, known before the process has exited.
    let mut outcome: Option<Outcome> = None;
    // The last error report, for classifying a process that then died.
    let mut last_report: Option<(String, String, String)> = None;
    let (result, fate) = loop {
        tokio::select! {
            ev = w.next_event() => {
                heartbeat.as_mut().reset(clock::deadline(heartbeat_limit));
                match ev {
                Event::Msg(Message::Report { trial_id, step, value }) if trial_id == c.trial_id => {
                    let prune = sh.core.lock().await.report(c, step, value).await;
                    let answer = json!({"type": "prune", "trial_id": trial_id, "step": step, "prune": prune});
                    let _ = w.send(&answer).await;
                }
                Event::Msg(Message::Result { trial_id, value }) if trial_id == c.trial_id => {
                    let o = match value {
                        Ok(v) if v.is_nan() => failed(FailureKind::BadValue, "the objective returned NaN".into(), None),
                        Ok(v) => Outcome::Complete(v),
                        Err(text) => failed(FailureKind::BadValue, format!("the objective returned a non-number: {text}"), None),
                    };
                    if result_file.is_none() { break (o, Fate::Keep); }
                    outcome = Some(o);
                    timeout.as_mut().reset(clock::deadline(ONESHOT_EXIT_GRACE));
                }
                Event::Msg(Message::Pruned { trial_id }) if trial_id == c.trial_id => {
                    if result_file.is_none() { break (Outcome::Pruned, Fate::Keep); }
                    outcome = Some(Outcome::Pruned);
                }
                Event::Msg(Message::Error { trial_id, exc_type, message, traceback }) if trial_id == c.trial_id => {
                    let verdict = classify::classify_report(&classify::Report {
                        exc_type: &exc_type, message: &message, traceback: &traceback,
                    });
                    let tail = if traceback.is_empty() { w.stderr_tail() } else { process::clip(&traceback, 8000) };
                    let poisons = verdict.kind.poisons_context();
                    let kind = verdict.kind;
                    let o = judged(verdict, tail);
                    last_report = Some((exc_type, message, traceback));
                    if result_file.is_some() {
                        outcome = Some(o);
                    } else if poisons {
                        // The CUDA context is unusable: the process must go, now.
                        w.kill_group(KILL_GRACE).await;
                        break (o, Fate::Replace(format!("{}: its CUDA context is unusable", kind.as_str())));
                    } else {
                        break (o, Fate::Keep);
                    }
                }
                Event::Msg(Message::Report { trial_id, .. } | Message::Result { trial_id, .. }
                    | Message::Pruned { trial_id } | Message::Error { trial_id, .. }) => {
                    let why = format!("worker sent a message for trial_id {trial_id} while running trial_id {}", c.trial_id);
                    w.kill_group(KILL_GRACE).await;
                    break (failed(FailureKind::Protocol, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
                }
                Event::Msg(_) => {}
                // A persistent worker without its channel can never deliver this trial's
                // outcome: it is as good as dead, whatever its process does (a oneshot worker
                // may not use the channel at all; its exit ends the trial).
                Event::Closed if result_file.is_none() => {
                    let why = "the worker closed its protocol channel during the trial and kept running".to_owned();
                    w.kill_group(KILL_GRACE).await;
                    break (failed(FailureKind::WorkerDied, format!("{why}; its process group was killed"), Some(w.stderr_tail())), Fate::Replace(why));
                }
                Event::Closed => {}
                Event::Garbage(what) => {
                    let why = format!("worker sent garbage on the protocol channel: {what}");
                    w.kill_group(KILL_GRACE).await;
                    break (failed(FailureKind::Protocol, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
                }
                Event::Exited(status) => {
                    let how = process::describe_exit(status);
                    let fate = Fate::Replace(format!("worker {how}"));
                    if let Some(o) = outcome.take() {
                        break (o, fate);
                    }
                    if let Some(file) = result_file {
                        match read_result_file(file) {
                            Some(o) if status.success() => break (o, fate),
                            None if status.success() => {
                                let why = "worker exited 0 without writing a result to SWEEPD_RESULT_FILE".to_owned();
                                break (failed(FailureKind::WorkerDied, why, Some(w.stderr_tail())), fate);
                            }
                            _ => {}
                        }
                    }
                    let (code, signal) = process::code_and_signal(status);
                    let tail = w.stderr_tail();
                    let report = last_report.as_ref().map(|(t, m, tb)| classify::Report {
                        exc_type: t, message: m, traceback: tb,
                    });
                    let verdict = classify::classify_exit(
                        &classify::Exit { code, signal, signalled_by_us: false },
                        &tail,
                        report.as_ref(),
                    );
                    break (judged(verdict, tail), fate);
                }
            }}
            _ = &mut timeout => {
                if let Some(o) = outcome.take() {
                    w.kill_group(KILL_GRACE).await;
                    break (o, Fate::Replace("oneshot worker did not exit after its result".into()));
                }
                let limit = cfg.worker.trial_timeout.unwrap_or(far);
                let why = format!("trial exceeded trial_timeout ({})", units::format_duration(limit));
                w.kill_group(KILL_GRACE).await;
                break (failed(FailureKind::Timeout, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
            }
            _ = &mut heartbeat, if outcome.is_none() => {
                let why = format!(
                    "hang: no protocol traffic for heartbeat_timeout ({})",
                    units::format_duration(heartbeat_limit)
                );
                w.kill_group(KILL_GRACE).await;
                break (failed(FailureKind::Hang, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
            }
            _ = sh.shutdown.cancelled(), if !stopping => {
                stopping = true;
                // A deleted study (cancelled before `shutdown`) gets no grace: the next turn
                // of the loop kills the trial.
                if !sh.abandon.is_cancelled() {
                    info!(trial = c.number, "shutting down: giving the running trial {}", units::format_duration(cfg.worker.shutdown_grace));
                    grace.as_mut().reset(clock::deadline(cfg.worker.shutdown_grace));
                }
            }
            _ = sh.abandon.cancelled() => {
                let why = "interrupted: the study was deleted from the database".to_owned();
                w.kill_group(KILL_GRACE).await;
                break (failed(FailureKind::Interrupted, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
            }
            _ = &mut grace => {
                let why = "interrupted: sweepd was stopped and the trial did not finish within shutdown_grace".to_owned();
                kill_group(sh, w).await;
                break (failed(FailureKind::Interrupted, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
            }
            _ = sh.kill_now.cancelled() => {
                w.kill_group_now().await;
                // A oneshot trial that already reported keeps its result.
                if let Some(o) = outcome.take() {
                    break (o, Fate::Replace("sweepd was stopped at once".into()));
                }
                let why = "interrupted: sweepd was stopped at once (a second Ctrl-C or SIGTERM) before the trial finished".to_owned();
                break (failed(FailureKind::Interrupted, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
            }
        }
    };
    let end = match &result {
        Outcome::Complete(v) => format!("COMPLETE {v}"),
        Outcome::Pruned => "PRUNED".into(),
        Outcome::Failed { kind, reason, .. } => format!("FAIL {}: {reason}", kind.as_str()),
    };
    w.mark(&format!(
        "trial {} end after {:.2}s: {end}",
        c.number,
        started.elapsed().as_secs_f64()
    ))
    .await;
    if let Outcome::Failed { kind, reason, .. } = &result {
        let _ = sh
            .store
            .event(
                Some(w.id),
                Some(c.trial_id),
                "trial_failed",
                &format!("{}: {reason}", kind.as_str()),
            )
            .await;
    }
    (result, fate)
}

/// A oneshot result file: a bare number or `{"value": x}`. `None` when absent or empty.
fn read_result_file(path: &PathBuf) -> Option<Outcome> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => m.get("value").cloned().unwrap_or_default(),
        Ok(v) => v,
        Err(_) => serde_json::Value::String(text.to_owned()),
    };
    let parsed = match &value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let bad = |reason: String| Outcome::Failed {
        kind: FailureKind::BadValue,
        reason,
        tail: None,
        error: None,
    };
    Some(match parsed {
        Some(v) if !v.is_nan() => Outcome::Complete(v),
        Some(_) => bad("the result file holds NaN".into()),
        None => bad(format!(
            "the result file holds a non-number: {}",
            process::clip(text, 200)
        )),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Where `sweepd_worker.py` lives, put on the workers' PYTHONPATH so scripts need no install:
/// `$SWEEPD_PYTHON_DIR`, else `<prefix>/share/sweepd/python` beside an installed binary, else
/// the source tree this binary was built from.
pub fn python_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("SWEEPD_PYTHON_DIR").map(PathBuf::from),
        std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("share/sweepd/python"))),
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python"
        ))),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("sweepd_worker.py").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_slot_is_reported_as_a_panic_not_a_sampler_error() {
        let e = tokio::spawn(async { panic!("index out of bounds") })
            .await
            .unwrap_err();
        let e = RunError::from_slot_panic(e);
        assert!(matches!(e, RunError::Panicked(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "a slot task panicked (a bug in sweepd; please report it): index out of bounds"
        );
    }

    #[test]
    fn a_workers_environment_comes_from_one_config() {
        let text = r#"
[study]
name = "env"
[storage]
url = "sqlite://s.db"
[worker]
command = ["python3", "w.py"]
[worker.env]
PYTORCH_CUDA_ALLOC_CONF = "mine"
EXTRA = "1"
[params.x]
type = "float"
low = 0.0
high = 1.0
"#;
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::parse(text, &dir.path().join("supervisor.toml")).unwrap();
        let env: HashMap<String, String> =
            worker_env(&cfg, Some(std::path::Path::new("/opt/py")), 7, Some(2))
                .into_iter()
                .collect();
        assert_eq!(env["SWEEPD_WORKER_ID"], "7");
        assert_eq!(env["SWEEPD_STUDY"], "env");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "2");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert!(env["PYTHONPATH"].starts_with("/opt/py"));
        // The user's [worker.env] wins over the allocator preset, once.
        assert_eq!(env["PYTORCH_CUDA_ALLOC_CONF"], "mine");
        assert_eq!(env["EXTRA"], "1");
        let cpu = worker_env(&cfg, None, 7, None);
        assert!(cpu.iter().all(|(k, _)| k != "CUDA_VISIBLE_DEVICES"));
        assert_eq!(
            cpu.iter()
                .filter(|(k, _)| k == "PYTORCH_CUDA_ALLOC_CONF")
                .count(),
            1
        );
    }
}
