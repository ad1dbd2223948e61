//! A slot: one of the `max_par` tasks that run trials. It loops: ask the `Core` for a trial,
//! make sure a worker is ready on the trial's device, run it (`trial`), hand back how it ended
//! (its next trial started in the same commit when one can), report it once durable, then
//! keep, recycle or replace the worker as `decide::after_trial` says.
//!
//! Without GPUs a slot keeps its persistent worker for its lifetime. On GPUs it owns one only
//! while a trial runs: a worker kept after its trial goes back to the `Core`'s pool of idle
//! workers (in the finish's own lock, so that the next admission can reuse it), and the slot's
//! next trial comes with the idle workers admission chose for it: the one to run on, and those
//! to retire first because the trial was admitted into their memory (`pool`).
//!
//! What a slot holds between two turns of its loop is one [`Hand`].

use super::checkpoint;
use super::core::{Finished, Handback, Next};
use super::decide::{self, Outcome, Retry, Then, TrialEnd};
use super::error::RunError;
use super::events::Retirement;
use super::policy::Fate;
use super::pool::{self, Current};
use super::shared::Shared;
use super::trial::{run_trial, values_text};
use super::workers::{retire, start_oneshot, start_persistent};
use crate::config::WorkerMode;
use crate::process::{FrameworkMemory, Worker};
use crate::store::Runner;
use crate::study::{Claimed, FailureKind, Finish};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, trace};

/// How soon a waiting slot looks again, on a fresh NVML reading, while the head of our line
/// holds memory back from the other daemons on the host (`gpu::ledger`): the memory it waits
/// for is freed by their trials, whose ends do not wake our slots.
const HOLD_RECHECK: Duration = Duration::from_millis(100);

/// What a slot holds between two turns of its loop.
#[derive(Default)]
enum Hand {
    /// Nothing: the next turn asks the core for a trial.
    #[default]
    Empty,
    /// Its persistent worker (without GPUs), ready for the next trial.
    Ready(Current),
    /// A trial started in the commit that recorded the slot's previous one, not run yet; on
    /// `worker`, the slot's kept worker that the commit recorded as its runner, where there is
    /// one (without GPUs).
    Carrying {
        trial: Claimed,
        device: Option<u32>,
        worker: Option<Current>,
    },
}

impl Hand {
    fn worker(&self) -> Option<&Current> {
        match self {
            Hand::Ready(c) => Some(c),
            Hand::Carrying { worker, .. } => worker.as_ref(),
            Hand::Empty => None,
        }
    }

    fn take_worker(&mut self) -> Option<Current> {
        match std::mem::take(self) {
            Hand::Ready(c) => Some(c),
            Hand::Carrying {
                trial,
                device,
                worker,
            } => {
                *self = Hand::Carrying {
                    trial,
                    device,
                    worker: None,
                };
                worker
            }
            Hand::Empty => None,
        }
    }
}

/// A trial to run now, and on what.
struct Turn {
    claimed: Claimed,
    device: Option<u32>,
    /// Its worker (persistent mode), and whether the start's commit recorded it as the trial's
    /// runner already.
    worker: Option<Current>,
    runner_written: bool,
}

/// How a trial ran.
struct Ran {
    outcome: Outcome,
    fate: Fate,
    /// The oneshot worker that ran it (it exits with its trial).
    oneshot: Option<Worker>,
    /// What the worker's framework said of the trial's memory.
    framework: Option<FrameworkMemory>,
}

/// What a turn of the loop comes to before its trial runs.
enum Step<T> {
    Go(T),
    /// Another turn.
    Again,
    /// The slot ends.
    End,
}

/// One parallel slot: owns at most one worker at a time.
struct Slot {
    index: usize,
    sh: Arc<Shared>,
    hand: Hand,
    /// Worker starts that failed in a row.
    start_failures: u32,
    /// On GPUs: the device of the worker this slot last put back in the pool, where its next
    /// trial would find it idle.
    last_device: Option<u32>,
}

/// Runs slot `index` until the study stops for it.
pub(super) async fn run_slot(index: usize, sh: Arc<Shared>) -> Result<(), RunError> {
    let mut slot = Slot {
        index,
        sh,
        hand: Hand::Empty,
        start_failures: 0,
        last_device: None,
    };
    let result = slot.run().await;
    if let Some(c) = slot.hand.take_worker() {
        retire(&slot.sh, c.worker, c.device, &Retirement::StudyStopped).await?;
    }
    result
}

impl Slot {
    fn persistent(&self) -> bool {
        self.sh.cfg().worker.mode == WorkerMode::Persistent
    }

    /// Persistent workers on GPUs live in the core's pool between trials.
    fn pooled(&self) -> bool {
        self.persistent() && self.sh.monitor.is_some()
    }

    /// Shutdown, or `max_par` lowered below this slot.
    fn ending(&self) -> bool {
        self.sh.shutdown.is_cancelled() || self.index >= self.sh.cfg().worker.max_par
    }

    async fn run(&mut self) -> Result<(), RunError> {
        loop {
            if self.ending() {
                if let Hand::Carrying { trial, device, .. } = &self.hand {
                    let out = interrupted("interrupted: sweepd stopped before the trial ran");
                    record_finish(&self.sh, trial, *device, out).await?;
                }
                return Ok(());
            }
            if self
                .hand
                .worker()
                .is_some_and(|c| c.worker.exit_status().is_some())
            {
                let c = self.hand.take_worker().expect("checked");
                retire(&self.sh, c.worker, c.device, &Retirement::ExitedWhileIdle).await?;
            }
            // CPU-only persistent workers start before a trial is claimed: a worker that cannot
            // start must not leave trials behind. On GPUs the device is known only after admission.
            if self.persistent() && self.sh.monitor.is_none() && matches!(self.hand, Hand::Empty) {
                match start_persistent(self.index, &self.sh, None, None).await? {
                    Ok(w) => {
                        self.start_failures = 0;
                        self.hand = Hand::Ready(Current::new(w, None));
                    }
                    Err(_) if self.start_failed().await => continue,
                    Err(_) if self.sh.shutdown.is_cancelled() => return Ok(()),
                    Err((reason, stderr)) => return Err(self.gave_up(reason, stderr)),
                }
            }
            let mut turn = match self.obtain().await? {
                Step::Go(turn) => turn,
                Step::Again => continue,
                Step::End => return Ok(()),
            };
            let played = self.play(&mut turn).await;
            let (ran, took) = match played {
                Ok(Step::Go(ran)) => ran,
                other => {
                    // Its worker stays the slot's (retired with the study if the slot ends).
                    if let Some(c) = turn.worker.take() {
                        self.hand = Hand::Ready(c);
                    }
                    match other? {
                        Step::Again => continue,
                        _ => return Ok(()),
                    }
                }
            };
            self.hand_back(turn, ran, took).await?;
        }
    }

    /// A worker failed to start (again): whether to try again, after the backoff (`false`: the
    /// study is stopping, or it failed `MAX_START_FAILURES` times in a row: see `gave_up`).
    async fn start_failed(&mut self) -> bool {
        let stopping = self.sh.shutdown.is_cancelled();
        if !stopping {
            self.start_failures += 1;
        }
        match decide::start_failed(self.start_failures, stopping) {
            Retry::Stop | Retry::GiveUp => false,
            Retry::After(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.sh.shutdown.cancelled() => {}
                }
                true
            }
        }
    }

    fn gave_up(&self, reason: String, stderr: String) -> RunError {
        RunError::WorkerStart {
            tries: self.start_failures,
            reason,
            stderr,
        }
    }

    /// The trial to run: the one carried from the last finish's commit, else the core's next;
    /// while it says wait, the slot waits for a change (or, holding memory back from the other
    /// daemons, for a fresh reading soon).
    async fn obtain(&mut self) -> Result<Step<Turn>, RunError> {
        let sh = self.sh.clone();
        let hint = if self.pooled() {
            self.last_device
        } else {
            self.hand.worker().and_then(|c| c.device)
        };
        // Listening before asking: a trial that ends while the core says "wait" still wakes
        // this slot.
        let changed = sh.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let next = match std::mem::take(&mut self.hand) {
            Hand::Carrying {
                trial,
                device,
                worker,
            } => {
                let runner_written = worker.is_some();
                return Ok(Step::Go(Turn {
                    claimed: trial,
                    device,
                    worker,
                    runner_written,
                }));
            }
            hand => {
                self.hand = hand;
                let stopping = sh.shutdown.is_cancelled();
                sh.core.lock().await.next(hint, stopping).await?
            }
        };
        match next {
            Next::Done(why) => {
                debug!(slot = self.index, ?why, "slot ends");
                Ok(Step::End)
            }
            Next::Wait { soon, why } => {
                trace!(slot = self.index, ?why, "no trial starts now");
                let again = if soon {
                    HOLD_RECHECK
                } else {
                    Duration::from_secs(1)
                };
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tokio::time::sleep(again) => {
                        if soon && sh.monitor.as_ref().is_some_and(|m| {
                            m.reading_age(Instant::now()).is_none_or(|a| a >= HOLD_RECHECK)
                        }) {
                            sh.read_gpus().await;
                        }
                    }
                    _ = sh.shutdown.cancelled() => {}
                }
                Ok(Step::Again)
            }
            Next::Run(claimed, device) => {
                let worker = self.hand.take_worker();
                Ok(Step::Go(Turn {
                    claimed,
                    device,
                    worker,
                    runner_written: false,
                }))
            }
        }
    }

    /// Readies the trial's worker (`equip`), then runs the trial on it (`run_turn`): how it
    /// ran, and how long it took.
    async fn play(&mut self, turn: &mut Turn) -> Result<Step<(Ran, Duration)>, RunError> {
        match self.equip(turn).await? {
            Step::Go(()) => {}
            Step::Again => return Ok(Step::Again),
            Step::End => return Ok(Step::End),
        }
        let started = Instant::now();
        Ok(match self.run_turn(turn).await? {
            Some(ran) => Step::Go((ran, started.elapsed())),
            None => Step::End,
        })
    }

    /// Makes the trial's worker ready (persistent mode): the trial's number is made durable
    /// first; on GPUs the idle workers admission chose are taken (those it was admitted into
    /// retired, the one to reuse kept), a worker on another device retired, and one started
    /// where none is left. A worker that fails to start interrupts the trial (re-enqueued):
    /// `Again`, or the study is stopping.
    async fn equip(&mut self, turn: &mut Turn) -> Result<Step<()>, RunError> {
        let sh = self.sh.clone();
        // Its number is seen from here on (the worker, the log): it must be durable.
        sh.store.sync().await?;
        if self.pooled() {
            let handoff = sh.core.lock().await.pool().take(turn.claimed.trial_id);
            // Admitted into the memory of these idle workers: it is freed before the trial
            // starts (retire waits until NVML no longer lists them).
            for c in handoff.retire {
                let why = Retirement::MemoryNeeded {
                    trial: turn.claimed.number,
                };
                retire(&sh, c.worker, c.device, &why).await?;
            }
            if let Some(c) = handoff.reuse {
                if pool::alive(&c) {
                    if let Some(m) = &sh.monitor {
                        m.busy(c.worker.pid as i32);
                    }
                    turn.worker = Some(c);
                } else {
                    retire(&sh, c.worker, c.device, &Retirement::ExitedWhileIdle).await?;
                }
            }
        }
        if !self.persistent() {
            return Ok(Step::Go(()));
        }
        if let Some(c) = turn.worker.take_if(|c| c.device != turn.device) {
            retire(&sh, c.worker, c.device, &Retirement::MovedDevice).await?;
        }
        let id = turn.claimed.trial_id;
        if let Some(c) = turn.worker.take_if(|c| {
            let cap = memory_cap(&sh, id, turn.device, c.worker.memory.context);
            let framework = c.worker.memory.framework.as_deref();
            decide::cap_outgrown(framework, c.worker.spawn_cap, cap.map(|(c, _)| c))
        }) {
            let why = "its framework read a smaller memory cap at its start".to_owned();
            retire(&sh, c.worker, c.device, &Retirement::Replaced(why)).await?;
        }
        if turn.worker.is_some() {
            return Ok(Step::Go(()));
        }
        turn.runner_written = false;
        let cap = memory_cap(&sh, id, turn.device, None);
        match start_persistent(self.index, &sh, turn.device, cap).await? {
            Ok(w) => {
                self.start_failures = 0;
                turn.worker = Some(Current::new(w, turn.device));
                Ok(Step::Go(()))
            }
            Err((reason, stderr)) => {
                let out = Outcome::Failed {
                    kind: FailureKind::Interrupted,
                    reason: format!("interrupted: its worker failed to start: {reason}"),
                    tail: Some(stderr.clone()),
                    error: None,
                };
                record_finish(&sh, &turn.claimed, turn.device, out).await?;
                if self.start_failed().await {
                    Ok(Step::Again)
                } else if sh.shutdown.is_cancelled() {
                    Ok(Step::End)
                } else {
                    Err(self.gave_up(reason, stderr))
                }
            }
        }
    }

    /// Runs the trial on its persistent worker, or on a oneshot worker started for it. A
    /// oneshot worker that cannot start interrupts the trial (`None`: the study is stopping).
    async fn run_turn(&mut self, turn: &mut Turn) -> Result<Option<Ran>, RunError> {
        let sh = self.sh.clone();
        let (claimed, device) = (&turn.claimed, turn.device);
        if let Some(c) = turn.worker.as_mut() {
            bind(&sh, claimed, &c.worker, device, turn.runner_written).await?;
            let cap = memory_cap(&sh, claimed.trial_id, device, c.worker.memory.context);
            let cap = cap.map(|(c, _)| c);
            let (outcome, fate, framework) =
                run_trial(&sh, &mut c.worker, claimed, None, cap).await;
            let ran = Ran {
                outcome,
                fate,
                oneshot: None,
                framework,
            };
            return Ok(Some(ran));
        }
        let cap = memory_cap(&sh, claimed.trial_id, device, None);
        match start_oneshot(self.index, &sh, claimed, device, cap).await {
            Ok(Some((mut w, result_file))) => {
                bind(&sh, claimed, &w, device, false).await?;
                let (outcome, fate, framework) =
                    run_trial(&sh, &mut w, claimed, Some(&result_file), None).await;
                let _ = std::fs::remove_file(&result_file);
                let ran = Ran {
                    outcome,
                    fate,
                    oneshot: Some(w),
                    framework,
                };
                Ok(Some(ran))
            }
            // The study stopped while the start waited out a shortage.
            Ok(None) => {
                let out = interrupted("interrupted: sweepd stopped before the trial ran");
                record_finish(&sh, claimed, device, out).await?;
                Ok(None)
            }
            Err(e) => {
                record_finish(&sh, claimed, device, interrupted(&e.to_string())).await?;
                Err(e)
            }
        }
    }

    /// Hands the trial's end back to the core (its next trial started in the same commit where
    /// one can), deciding its worker's fate first so that a worker kept on a GPU is idle in
    /// the pool by the time the next admission runs; then retires what goes.
    async fn hand_back(&mut self, turn: Turn, ran: Ran, took: Duration) -> Result<(), RunError> {
        let sh = self.sh.clone();
        let Turn {
            claimed,
            device,
            worker,
            ..
        } = turn;
        let end = match &ran.outcome {
            Outcome::Complete(..) | Outcome::Pruned => TrialEnd::Success,
            Outcome::Failed {
                kind: FailureKind::Oom,
                ..
            } => TrialEnd::Oom,
            Outcome::Failed { .. } => TrialEnd::Other,
        };
        let success = end == TrialEnd::Success;
        // Oneshot workers are always fresh.
        let fresh = worker.as_ref().is_none_or(|c| c.health.clean());
        let (mut kept, mut replaced) = (None, None);
        if let Some(mut c) = worker {
            self.after_trial(&mut c, &claimed, success, &ran).await;
            match decide::after_trial(ran.fate, end, &c.health, &sh.cfg().worker) {
                Fate::Replace(why) => replaced = Some((c, why)),
                Fate::Keep => kept = Some(c),
            }
        }
        let worker_id = kept
            .as_ref()
            .or(replaced.as_ref().map(|(c, _)| c))
            .map(|c| c.worker.id);
        let to_pool = if self.pooled() { kept.take() } else { None };
        if to_pool.is_some() {
            self.last_device = device;
        }
        // The next trial starts in the same commit, unless this slot is ending; without
        // GPUs on the worker kept here, which that commit records as its runner.
        let runner = kept
            .as_ref()
            .filter(|_| sh.monitor.is_none())
            .map(|c| Runner {
                worker_id: c.worker.id,
                pid: c.worker.pid,
            });
        let max_par = sh.cfg().worker.max_par;
        let persistent = self.persistent();
        let stopping = sh.shutdown.is_cancelled();
        let then = decide::then(stopping, self.index, max_par, persistent, device, runner);
        let handback = Handback {
            claimed: &claimed,
            device,
            outcome: ran.outcome,
            fresh_worker: fresh,
            // A success counts for its worker in the finish's own commit.
            done_by: worker_id.filter(|_| success),
            framework: ran.framework,
        };
        let (_, next) = finish_and_next(&sh, handback, took, to_pool, then).await?;
        // A worker kept here is the runner that commit recorded for the next trial.
        self.hand = match (next, kept) {
            (Some(Next::Run(trial, device)), worker) => Hand::Carrying {
                trial,
                device,
                worker,
            },
            (_, Some(c)) => Hand::Ready(c),
            (_, None) => Hand::Empty,
        };
        if let Some(w) = ran.oneshot {
            retire(&sh, w, device, &Retirement::OneshotDone).await?;
        }
        if let Some((c, why)) = replaced {
            retire(&sh, c.worker, c.device, &Retirement::Replaced(why)).await?;
        }
        Ok(())
    }

    /// A persistent worker's health after its trial: the trial counted, and on a GPU what it
    /// holds now, read afresh (the growth baseline, and how clean the next trial starts).
    async fn after_trial(&self, c: &mut Current, claimed: &Claimed, success: bool, ran: &Ran) {
        c.health.trials_run += 1;
        if success {
            c.health.successes += 1;
        }
        let (Some(m), Some(d), Fate::Keep) = (&self.sh.monitor, c.device, &ran.fate) else {
            return;
        };
        // A fresh reading of every device, taken before the finish: the trial's memory is free
        // now (its worker emptied its caches before reporting), and the slot's next trial,
        // admitted in the finish's own commit, must see it free. From an older reading it saw
        // the trial still at its peak, waited for the next one, and meanwhile the card showed
        // another daemon room this study had only stepped away from.
        self.sh.read_gpus().await;
        c.health.idle = m.group_used(c.worker.pid as i32, d);
        if m.source(d) != crate::gpu::source::Source::Processes {
            // NVML cannot name it: what it holds is its context and what its allocator kept.
            let context = c.worker.memory.context.unwrap_or_else(|| m.context_guess());
            c.health.idle = ran.framework.map(|fw| context.saturating_add(fw.reserved));
        }
        if let (Some(held), Some(fw)) = (c.health.idle, ran.framework) {
            if let Some(peak) = m.raise_peak(claimed.trial_id, held, fw.reserved, fw.peak_reserved)
            {
                debug!(
                    trial = claimed.number,
                    "peak {} by the framework's figures (NVML's readings missed it)",
                    crate::units::format_gib(peak)
                );
            }
        }
        if success && c.health.baseline.is_none() {
            c.health.baseline = c.health.idle;
        }
    }
}

/// The memory cap of trial `trial_id` on `device` (`gpu::admission::memory_cap`), its worker
/// taken to hold `context` outside its allocator (else what the latest worker was measured at,
/// else the prior), recorded with the monitor; with the device's total. `None` without GPUs,
/// or with `[gpu] caps` off when the trial was admitted.
fn memory_cap(
    sh: &Shared,
    trial_id: i64,
    device: Option<u32>,
    context: Option<u64>,
) -> Option<(u64, Option<u64>)> {
    let (m, d) = (sh.monitor.as_ref()?, device?);
    if !m.capped(trial_id) {
        return None;
    }
    let admitted = m.admitted(trial_id)?;
    let context = context.unwrap_or_else(|| m.context_guess());
    let cap = crate::gpu::admission::memory_cap(admitted, context);
    m.set_cap(trial_id, cap, context);
    let total = m
        .readings()
        .into_iter()
        .find(|(i, _)| *i == d)
        .and_then(|(_, r)| r.ok())
        .map(|r| r.total);
    Some((cap, total))
}

/// A trial interrupted before it ran: `reason`.
fn interrupted(reason: &str) -> Outcome {
    Outcome::Failed {
        kind: FailureKind::Interrupted,
        reason: reason.to_owned(),
        tail: None,
        error: None,
    }
}

/// Records which worker runs the trial (unless its start's commit `written` it already), and
/// lets the monitor attribute its memory (and hold it to its cap where its worker reported a
/// framework).
async fn bind(
    sh: &Shared,
    c: &Claimed,
    w: &Worker,
    device: Option<u32>,
    written: bool,
) -> Result<(), RunError> {
    if !written {
        let runner = Runner {
            worker_id: w.id,
            pid: w.pid,
        };
        sh.store.set_runner(c.trial_id, runner, device).await?;
    }
    if let Some(m) = &sh.monitor {
        m.bind(c.trial_id, w.pid as i32);
        // A worker that reported its framework before this trial keeps it to its cap.
        if let Some(f) = &w.memory.framework {
            m.framework_reported(w.pid as i32, f);
        }
    }
    Ok(())
}

/// Records how a trial that did not run ended (its worker did not start, the study stopped),
/// and logs it once it is durable.
async fn record_finish(
    sh: &Shared,
    claimed: &Claimed,
    device: Option<u32>,
    outcome: Outcome,
) -> Result<Finish, RunError> {
    let handback = Handback {
        claimed,
        device,
        outcome,
        fresh_worker: false,
        done_by: None,
        framework: None,
    };
    let (how, _) = finish_and_next(sh, handback, Duration::ZERO, None, Then::Stop).await?;
    Ok(how)
}

/// Records how a trial ended (`then`: with the slot's next trial started in the same commit,
/// see `Core::finish`), reports it once durable (the log line, the metrics, the display),
/// and wakes the waiting slots. `idle`: the worker that ran it, kept, which waits in the pool
/// from now on (GPUs); `took`: how long it ran.
async fn finish_and_next(
    sh: &Shared,
    handback: Handback<'_>,
    took: Duration,
    idle: Option<Current>,
    then: Then,
) -> Result<(Finish, Option<Next>), RunError> {
    let (claimed, device) = (handback.claimed, handback.device);
    // A worker kept on a GPU: the slot read every device after its trial, before this finish.
    let read_before = idle.as_ref().is_some_and(|c| c.device.is_some());
    let (finished, fatal, mut report) = {
        let mut core = sh.core.lock().await;
        if let Some(c) = idle {
            if let (Some(m), Some(d)) = (&sh.monitor, c.device) {
                m.idle(c.worker.pid as i32, d, c.health.idle.unwrap_or(0));
            }
            core.pool().put(c, Instant::now());
        }
        let finished = core.finish(handback, then).await?;
        // Taken now, sent once durable: waiting for the lock again to send it would wait for
        // the other slots' whole turns (a start's round trips to the database), while this
        // slot's worker waits for its next trial.
        (finished, core.take_error(), core.snapshot())
    };
    // Reported (log line, metrics, the display) only once durable; the sync is shared with
    // other slots' commits and runs outside the core's lock.
    sh.store.sync().await?;
    // The trial's memory is free now (its worker emptied its caches before reporting): read
    // the devices at once, so that a trial waiting for that memory is admitted now rather
    // than at the next poll. Where the slot read them just before the finish, that reading
    // is the one the waiting slots woken below count from.
    if !read_before {
        sh.read_gpus().await;
    }
    let Finished {
        how,
        peak,
        next,
        params,
    } = finished;
    let failure = match &how {
        Finish::Fail(f) => Some(f.kind.as_str()),
        _ => None,
    };
    sh.metrics.trial_ended(took, peak, failure);
    if !sh.abandon.is_cancelled() {
        checkpoint::release(&sh.cfg(), claimed, &how);
    }
    let front = report.front_len();
    let bests = std::mem::take(&mut report.bests);
    if report.send() {
        sh.metrics.set_best(&bests, front);
    }
    let what = match &how {
        Finish::Complete(v) if v.len() == 1 => format!("COMPLETE value={}", v[0]),
        Finish::Complete(v) => format!("COMPLETE values={}", values_text(v)),
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
        params = %params,
        "{what}"
    );
    sh.changed.notify_waiters();
    match fatal {
        Some(e) => Err(e),
        None => Ok((how, next)),
    }
}
