//! A slot: one of the `max_par` tasks that run trials. It loops: ask the `Core` for a trial,
//! make sure a worker is ready on the trial's device, run it (`trial`), hand back how it ended
//! (its next trial started in the same commit when one can), report it once durable, then
//! keep, recycle or replace the worker as `policy` says.
//!
//! Without GPUs a slot keeps its persistent worker for its lifetime. On GPUs it owns one only
//! while a trial runs: a worker kept after its trial goes back to the `Core`'s pool of idle
//! workers (in the finish's own lock, so that the next admission can reuse it), and the slot's
//! next trial comes with the idle workers admission chose for it: the one to run on, and those
//! to retire first because the trial was admitted into their memory (`pool`).

use super::core::{Finished, Next, Outcome};
use super::housekeeping::read_gpus;
use super::policy::{self, Fate, WorkerHealth};
use super::pool;
use super::trial::run_trial;
use super::workers::{retire, start_oneshot, start_persistent};
use super::{RunError, Shared, MAX_START_FAILURES};
use crate::config::WorkerMode;
use crate::process::Worker;
use crate::store::Runner;
use crate::study::{Claimed, FailureKind, Finish};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// How soon a waiting slot looks again, on a fresh NVML reading, while the head of our line
/// holds memory back from the other daemons on the host (`gpu::ledger`): the memory it waits
/// for is freed by their trials, whose ends do not wake our slots.
const HOLD_RECHECK: Duration = Duration::from_millis(100);

/// A slot's current worker and what it knows of it.
pub(super) struct Current {
    pub(super) worker: Worker,
    pub(super) device: Option<u32>,
    pub(super) health: WorkerHealth,
}

/// One parallel slot: owns at most one worker at a time.
pub(super) async fn run_slot(slot: usize, sh: Arc<Shared>) -> Result<(), RunError> {
    let mut current: Option<Current> = None;
    let mut start_failures = 0u32;
    // A trial started in the commit that finished the previous one, not run yet, and the
    // worker that commit recorded as its runner (the slot's kept worker, without GPUs).
    let mut carried: Option<(Claimed, Option<u32>, Option<i64>)> = None;
    // On GPUs: the device of the worker this slot last put back in the pool, where its next
    // trial would find it idle.
    let mut last_device: Option<u32> = None;
    let result: Result<(), RunError> = async {
        loop {
            if sh.shutdown.is_cancelled() || slot >= sh.cfg().worker.max_par {
                if let Some((claimed, device, _)) = carried.take() {
                    let out = Outcome::Failed {
                        kind: FailureKind::Interrupted,
                        reason: "interrupted: sweepd stopped before the trial ran".into(),
                        tail: None,
                        error: None,
                    };
                    record_finish(&sh, &claimed, device, out, Duration::ZERO, false, None).await?;
                }
                return Ok(());
            }
            let persistent = sh.cfg().worker.mode == WorkerMode::Persistent;
            // Persistent workers on GPUs live in the core's pool between trials.
            let pooled = persistent && sh.monitor.is_some();
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
            let hint = if pooled {
                last_device
            } else {
                current.as_ref().and_then(|c| c.device)
            };
            // Listening before asking: a trial that ends while the core says "wait" still
            // wakes this slot.
            let changed = sh.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut runner_written = None;
            let next = match carried.take() {
                Some((claimed, device, runner)) => {
                    runner_written = runner;
                    Next::Run(claimed, device)
                }
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
                Next::Wait { soon } => {
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
                                read_gpus(&sh).await;
                            }
                        }
                        _ = sh.shutdown.cancelled() => {}
                    }
                    continue;
                }
                Next::Run(c, d) => (c, d),
            };
            // Its number is seen from here on (the worker, the log): it must be durable.
            sh.store.sync().await?;
            if pooled {
                let handoff = sh.core.lock().await.pool.take(claimed.trial_id);
                // Admitted into the memory of these idle workers: it is freed before the trial
                // starts (retire waits until NVML no longer lists them).
                for c in handoff.retire {
                    let why = format!("idle; its memory was needed for trial {}", claimed.number);
                    retire(&sh, c.worker, c.device, &why).await?;
                }
                if let Some(c) = handoff.reuse {
                    if pool::alive(&c) {
                        if let Some(m) = &sh.monitor {
                            m.busy(c.worker.pid as i32);
                        }
                        current = Some(c);
                    } else {
                        retire(&sh, c.worker, c.device, "exited while idle").await?;
                    }
                }
            }
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
                        record_finish(&sh, &claimed, device, out, Duration::ZERO, false, None)
                            .await?;
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
            let (outcome, fate, oneshot, framework) = if persistent {
                let c = current
                    .as_mut()
                    .expect("a persistent slot has a worker here");
                let written = runner_written == Some(c.worker.id);
                bind(&sh, &claimed, &c.worker, device, written).await?;
                let (o, f, fw) = run_trial(&sh, &mut c.worker, &claimed, None).await;
                (o, f, None, fw)
            } else {
                match start_oneshot(slot, &sh, &claimed, device).await {
                    Ok(Some((mut w, result_file))) => {
                        bind(&sh, &claimed, &w, device, false).await?;
                        // The process exits with its trial: no reading of what it holds after.
                        let (o, f, _) = run_trial(&sh, &mut w, &claimed, Some(&result_file)).await;
                        let _ = std::fs::remove_file(&result_file);
                        (o, f, Some(w), None)
                    }
                    // The study stopped while the start waited out a shortage.
                    Ok(None) => {
                        let out = Outcome::Failed {
                            kind: FailureKind::Interrupted,
                            reason: "interrupted: sweepd stopped before the trial ran".into(),
                            tail: None,
                            error: None,
                        };
                        record_finish(&sh, &claimed, device, out, Duration::ZERO, false, None)
                            .await?;
                        return Ok(());
                    }
                    Err(e) => {
                        let out = Outcome::Failed {
                            kind: FailureKind::Interrupted,
                            reason: e.to_string(),
                            tail: None,
                            error: None,
                        };
                        record_finish(&sh, &claimed, device, out, Duration::ZERO, false, None)
                            .await?;
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
            let success = matches!(&outcome, Outcome::Complete(..) | Outcome::Pruned);
            // Oneshot workers are always fresh.
            let fresh = current.as_ref().is_none_or(|c| c.health.clean());
            // The worker's fate is decided before the finish is written, so that a worker kept
            // on a GPU is idle in the pool by the time the next admission runs.
            let mut kept = None;
            let mut replaced = None;
            if oneshot.is_none() {
                let mut c = current.take().expect("persistent worker");
                c.health.trials_run += 1;
                if success {
                    c.health.successes += 1;
                }
                if let (Some(m), Some(d), Fate::Keep) = (&sh.monitor, c.device, &fate) {
                    // A fresh reading of every device, taken before the finish: the trial's
                    // memory is free now (its worker emptied its caches before reporting), and
                    // the slot's next trial, admitted in the finish's own commit, must see it
                    // free. From an older reading it saw the trial still at its peak, waited
                    // for the next one, and meanwhile the card showed another daemon room this
                    // study had only stepped away from.
                    super::housekeeping::read_gpus(&sh).await;
                    // What the process holds between trials: the growth baseline, and how clean
                    // it is when the next trial starts.
                    c.health.idle = m.group_used(c.worker.pid as i32, d);
                    if let (Some(held), Some(fw)) = (c.health.idle, framework) {
                        if let Some(peak) =
                            m.raise_peak(claimed.trial_id, held, fw.reserved, fw.peak_reserved)
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
                    Fate::Replace(why) => replaced = Some((c, why)),
                    Fate::Keep => kept = Some(c),
                }
            }
            let worker_id = kept
                .as_ref()
                .or(replaced.as_ref().map(|(c, _)| c))
                .map(|c| c.worker.id);
            let to_pool = if pooled { kept.take() } else { None };
            if to_pool.is_some() {
                last_device = device;
            }
            // The next trial starts in the same commit, unless this slot is ending; without
            // GPUs on the worker kept here, which that commit records as its runner.
            let then = (!sh.shutdown.is_cancelled() && slot < sh.cfg().worker.max_par)
                .then_some(if persistent { device } else { None });
            let runner = match (&kept, &sh.monitor) {
                (Some(c), None) if then.is_some() => Some(Runner {
                    worker_id: c.worker.id,
                    pid: c.worker.pid,
                }),
                _ => None,
            };
            // A success counts for its worker in the finish's own commit.
            let done_by = worker_id.filter(|_| success);
            let (_, next) = finish_and_next(
                &sh,
                &claimed,
                device,
                outcome,
                trial_started.elapsed(),
                fresh,
                then,
                to_pool,
                done_by,
                runner,
            )
            .await?;
            if let Some(Next::Run(c, d)) = next {
                carried = Some((c, d, runner.map(|r| r.worker_id)));
            }
            if let Some(w) = oneshot {
                retire(&sh, w, device, "oneshot trial done").await?;
                continue;
            }
            if let Some((c, why)) = replaced {
                retire(&sh, c.worker, c.device, &why).await?;
            }
            current = kept;
        }
    }
    .await;
    if let Some(c) = current.take() {
        retire(&sh, c.worker, c.device, "study stopped").await?;
    }
    result
}

pub(super) async fn backoff(sh: &Shared, failures: u32) {
    let wait = Duration::from_millis(500 * 2u64.pow(failures.min(6)));
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = sh.shutdown.cancelled() => {}
    }
}

/// Records which worker runs the trial (unless its start's commit `written` it already), and
/// lets the monitor attribute its memory.
pub(super) async fn bind(
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
    }
    Ok(())
}

/// Records how a trial ended, and logs it once it is durable.
pub(super) async fn record_finish(
    sh: &Shared,
    claimed: &Claimed,
    device: Option<u32>,
    outcome: Outcome,
    duration: Duration,
    fresh_worker: bool,
    idle: Option<Current>,
) -> Result<Finish, RunError> {
    let (how, _) = finish_and_next(
        sh,
        claimed,
        device,
        outcome,
        duration,
        fresh_worker,
        None,
        idle,
        None,
        None,
    )
    .await?;
    Ok(how)
}

/// `record_finish`, and with `then = Some(hint)` the slot's next trial started in the same
/// commit where one can start now (see `Core::finish_then_next`). `idle`: the worker that ran
/// the trial, kept, which waits in the pool from now on (GPUs). `done_by`: the worker whose
/// success it was; `runner`: the worker that runs the next trial (see `Core::finish_then_next`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn finish_and_next(
    sh: &Shared,
    claimed: &Claimed,
    device: Option<u32>,
    outcome: Outcome,
    duration: Duration,
    fresh_worker: bool,
    then: Option<Option<u32>>,
    idle: Option<Current>,
    done_by: Option<i64>,
    runner: Option<Runner>,
) -> Result<(Finish, Option<Next>), RunError> {
    // A worker kept on a GPU: the slot read every device after its trial, before this finish.
    let read_before = idle.as_ref().is_some_and(|c| c.device.is_some());
    let (finished, fatal, mut report) = {
        let mut core = sh.core.lock().await;
        if let Some(c) = idle {
            if let (Some(m), Some(d)) = (&sh.monitor, c.device) {
                m.idle(c.worker.pid as i32, d, c.health.idle.unwrap_or(0));
            }
            core.pool.put(c, Instant::now());
        }
        let finished = match then {
            Some(hint) => {
                core.finish_then_next(
                    claimed,
                    device,
                    outcome,
                    fresh_worker,
                    hint,
                    done_by,
                    runner,
                )
                .await?
            }
            None => {
                core.finish(claimed, device, outcome, fresh_worker, done_by)
                    .await?
            }
        };
        // Taken now, sent once durable: waiting for the lock again to send it would wait for
        // the other slots' whole turns (a start's round trips to the database), while this
        // slot's worker waits for its next trial.
        (finished, core.fatal.take(), core.snapshot())
    };
    // Reported (log line, metrics, the display) only once durable; the sync is shared with
    // other slots' commits and runs outside the core's lock.
    sh.store.sync().await?;
    // The trial's memory is free now (its worker emptied its caches before reporting): read
    // the devices at once, so that a trial waiting for that memory is admitted now rather
    // than at the next poll. Where the slot read them just before the finish, that reading
    // is the one the waiting slots woken below count from.
    if !read_before {
        super::housekeeping::read_gpus(sh).await;
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
    sh.metrics.trial_ended(duration, peak, failure);
    let front = report.front_len();
    let bests = std::mem::take(&mut report.bests);
    if report.send() {
        sh.metrics.set_best(&bests, front);
    }
    let what = match &how {
        Finish::Complete(v) if v.len() == 1 => format!("COMPLETE value={}", v[0]),
        Finish::Complete(v) => format!("COMPLETE values={}", super::trial::values_text(v)),
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
