//! `Core`: the study's one decision point, behind the supervisor's lock, and the layer that
//! acts on its decisions.
//!
//! Slots ask it what to run next and hand back how their trial ended; nothing else decides a
//! start or writes an outcome, so the budget, the sampler, GPU admission and the circuit
//! breaker never disagree. Each step reads a snapshot of the study (the tally, the line, the
//! devices as last read, the settings in force), asks `decide` what to do, and does it: a
//! start or a finish is one store transaction, its accounting goes to the budget, the breaker,
//! the memory model, the pruner and the sampler.
//!
//! One file per step, each an `impl Core` of its own (they see the fields, which nothing
//! outside `core` does): `start` (what starts next: the gate, the line, the admission round;
//! the store's start, and what it books), `finish` (how a trial ended is recorded, and the
//! next start in the same commit), `running` (a running trial's `suggest` and `report`),
//! `learn` (other processes' trials, read as they change), `budget` (what the study has spent
//! of the limits beside `n_trials`, for the gate; the budget that ended it; the summary and
//! the line of waiting candidates a person is told of).

mod budget;
mod finish;
mod learn;
mod running;
mod start;

use super::admit::GpuCtl;
use super::decide::{self, Line, NoStart, RunState, Stop, Why};
use super::error::RunError;
use super::events::Retirement;
use super::policy::{Breaker, SameError};
use super::pool::{Current, Pool};
use super::settings::Settings;
use super::suggest::Live;
use crate::progress::{Progress, Snapshot, Tracker};
use crate::pruner::Pruner;
use crate::sampler::Sampler;
use crate::store::{Changes, DaemonId, Feed, Store};
use crate::study::budget::{Ended, Spending};
use crate::study::{Claimed, ControlState, Dists, Finish, Params, Tally};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::info;

/// The study's decision point: what runs next, and the record of how things ended.
pub(super) struct Core {
    store: Store,
    study: crate::store::Study,
    /// The config in force (a reload swaps it).
    settings: Settings,
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
    /// Sampling, exhausted, or halted for an error.
    state: RunState,
    /// What the study's owner asked of its daemons (`sweepd pause`, `stop`, `cancel`), as last
    /// read: by housekeeping each pass, and by each start (`Core::plan`).
    steer: ControlState,
    started: Instant,
    /// The number the next new trial will most likely get: the seed key of a new proposal,
    /// kept here rather than asked of the database for every trial.
    next_key: u64,
    /// Added to every seed key: this host's own range when several hosts sample the study
    /// (see `supervisor::open`), else 0.
    key_offset: u64,
    /// Candidates in line for admission.
    line: Line,
    gpu: Option<GpuCtl>,
    breaker: Breaker,
    /// Params found infeasible (OOM alone on a device), with their distributions: proposals
    /// resembling them are redrawn, whatever the sampler.
    infeasible: Vec<(Params, Dists)>,
    /// This instance's running trials by trial id, with the params their objectives define as
    /// they run.
    live: HashMap<i64, Live>,
    /// Stops the study when its trials can only fail.
    same_error: SameError,
    /// What the terminal's progress display shows, published as it changes.
    progress: Tracker,
    /// Idle persistent workers on GPUs, and those handed to trials that start.
    pool: Pool,
    /// How far this daemon has read other processes' trials (`learn`).
    feed: Feed,
    /// When it last read them.
    fed_at: Option<Instant>,
    /// What the finished trials spent of the budgets beside `n_trials` (`budget`).
    spending: Spending,
    /// Which budget ended the study, once one has (`decide::gate`'s `Stop::Ended`).
    ended: Option<Ended>,
}

/// What a core starts from: the study read at start (`supervisor::run`).
pub(super) struct Setup {
    pub(super) store: Store,
    pub(super) study: crate::store::Study,
    pub(super) settings: Settings,
    pub(super) me: DaemonId,
    pub(super) sampler: Box<dyn Sampler>,
    pub(super) pruner: Pruner,
    pub(super) tally: Tally,
    /// The study's control state as read at start (`steer::at_start`).
    pub(super) steer: ControlState,
    pub(super) gpu: Option<GpuCtl>,
    pub(super) progress: Tracker,
    /// The study's next trial number, and this host's seed-key offset.
    pub(super) next_key: u64,
    pub(super) key_offset: u64,
    /// The whole study as read at start, through the feed that brings later changes.
    pub(super) feed: Feed,
    pub(super) history: Changes,
}

/// A start `Core::plan` chose: the candidate (taken out of the line, at place `k`) and where
/// it runs (`None`: no GPUs).
struct Plan {
    candidate: super::decide::Candidate,
    k: usize,
    placement: Option<super::decide::Placement>,
    /// It starts past the head of the line after the head was passed too often, within the
    /// room the head leaves (`Capacity::backfill_room`).
    beside_head: bool,
}

/// What `Core::plan` decided.
enum Planned {
    Start(Box<Plan>),
    No(NoStart),
}

/// A finish as written (not yet synced), for the slot to report once it is durable.
pub(super) struct Finished {
    pub(super) how: Finish,
    /// Every param the trial had, as the worker saw them, for the log line.
    pub(super) params: serde_json::Value,
    /// The trial's measured memory peak, for the metrics.
    pub(super) peak: Option<u64>,
    /// The slot's next trial, started in the same commit.
    pub(super) next: Option<Next>,
}

/// A finish decided by `Core::finish_begin`: what to write, and what its accounting needs.
struct Finishing {
    trial_id: i64,
    number: i64,
    /// Every param the trial had (the static ones and those its objective suggested).
    params: Params,
    dists: Dists,
    /// `params` as the worker saw them, in the order the trial got them (the log line).
    shown: serde_json::Value,
    how: Finish,
    attrs: Vec<(&'static str, serde_json::Value)>,
    device: Option<u32>,
    peak: Option<u64>,
    constraints: Vec<f64>,
    /// The worker whose success it was (its count of trials done goes up in the finish's
    /// commit).
    done_by: Option<i64>,
    /// This finish halted the study (the last of a streak of the same error).
    halts: bool,
}

impl Finishing {
    /// Whether it spends the budget: every final outcome but a failure that is retried.
    fn spends(&self) -> bool {
        !matches!(&self.how, Finish::Fail(f) if f.retry)
    }

    /// What the slot reports, once durable, with `next` started in the same commit.
    fn finished(self, next: Option<Next>) -> Finished {
        Finished {
            params: self.shown,
            how: self.how,
            peak: self.peak,
            next,
        }
    }
}

/// A trial's end, as its slot hands it back.
pub(super) struct Handback<'a> {
    pub(super) claimed: &'a Claimed,
    pub(super) device: Option<u32>,
    pub(super) outcome: super::decide::Outcome,
    /// Its worker started it as clean as a new process (a oneshot worker always does).
    pub(super) fresh_worker: bool,
    /// The worker whose success it was: its count of trials done goes up in the finish's
    /// commit.
    pub(super) done_by: Option<i64>,
    /// What its worker's framework said of its memory with its final message.
    pub(super) framework: Option<crate::process::FrameworkMemory>,
}

/// What a slot is told to do next.
pub(super) enum Next {
    /// Run this trial (on this device).
    Run(Claimed, Option<u32>),
    /// Nothing to start now, but something may come (a running trial may fail and be retried,
    /// a device may free memory, someone may enqueue a trial): ask again after the next change.
    /// `soon`: our head holds memory back from the other daemons on the host, whose trials'
    /// ends free it without waking us: ask again soon, on a fresh reading.
    Wait { soon: bool, why: Why },
    /// The study starts no more trials.
    Done(Stop),
}

impl Core {
    pub(super) fn new(s: Setup) -> Core {
        let mut core = Core {
            store: s.store,
            study: s.study,
            settings: s.settings,
            sampler: s.sampler,
            pruner: s.pruner,
            tally: s.tally,
            me: s.me,
            running: 0,
            running_on: HashMap::new(),
            state: RunState::Sampling,
            steer: s.steer,
            started: Instant::now(),
            next_key: s.next_key,
            key_offset: s.key_offset,
            line: Line::default(),
            gpu: s.gpu,
            breaker: Breaker::default(),
            infeasible: Vec::new(),
            live: HashMap::new(),
            same_error: SameError::default(),
            progress: s.progress,
            pool: Pool::default(),
            feed: s.feed,
            fed_at: Some(Instant::now()),
            spending: Spending::default(),
            ended: None,
        };
        core.learn(s.history, true);
        core
    }

    /// Sends the progress display a fresh snapshot (cheap: it goes nowhere without one).
    pub(super) fn publish(&self) {
        self.snapshot().send();
    }

    /// The progress display's snapshot of now, to be sent later (`Snapshot::send`).
    pub(super) fn snapshot(&self) -> Snapshot {
        let gpus = match &self.gpu {
            Some(g) => g
                .monitor
                .devices
                .iter()
                .map(|d| (*d, self.running_on.get(d).copied().unwrap_or(0)))
                .collect(),
            None => Default::default(),
        };
        let cfg = self.settings.get();
        self.progress.snapshot(Progress {
            started: Some(self.started),
            finished: self.tally.finished,
            budget: cfg.study.n_trials,
            timeout: cfg.study.timeout,
            running: self.running,
            max_par: cfg.worker.max_par,
            gpus,
            paused: self.paused(Instant::now()).is_some(),
            ..Progress::default()
        })
    }

    /// Why the study is paused: every device quarantined by the breaker.
    pub(super) fn paused(&self, now: Instant) -> Option<String> {
        let threshold = self.settings.get().retry.breaker_threshold;
        self.breaker.paused(&self.devices(), now, threshold)
    }

    /// Until when the breaker quarantines `device`.
    pub(super) fn quarantined(&self, device: u32, now: Instant) -> Option<Instant> {
        self.breaker.quarantined(Some(device), now)
    }

    /// `sweepd resume`: every quarantine lifted.
    pub(super) fn release_quarantines(&mut self) {
        self.breaker.release_all();
    }

    fn devices(&self) -> Vec<Option<u32>> {
        match &self.gpu {
            Some(g) => g.monitor.devices.iter().map(|d| Some(*d)).collect(),
            None => vec![None],
        }
    }

    /// The error the study halted with, for the slot that recorded the finish that halted it
    /// (once).
    pub(super) fn take_error(&mut self) -> Option<RunError> {
        match &mut self.state {
            RunState::Halted { error } => error.take().map(RunError::SameError),
            _ => None,
        }
    }

    /// The study's control state as housekeeping read it now.
    pub(super) fn set_steer(&mut self, state: ControlState) {
        self.steer = state;
    }

    /// The study's owner stopped or cancelled it: the run ends for that (`RunSummary.steered`).
    pub(super) fn ended_by_owner(&self) -> bool {
        self.steer.ends_daemons()
    }

    /// Trials this daemon runs now.
    pub(super) fn running(&self) -> u64 {
        self.running
    }

    /// The best values and the front, as the display and the metrics show them.
    pub(super) fn progress(&self) -> &Tracker {
        &self.progress
    }

    pub(super) fn gpu(&self) -> Option<&GpuCtl> {
        self.gpu.as_ref()
    }

    pub(super) fn gpu_mut(&mut self) -> Option<&mut GpuCtl> {
        self.gpu.as_mut()
    }

    /// The idle workers, and those handed to trials that start.
    pub(super) fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// What an admission round decides from (`None` without GPUs), with our idle workers.
    pub(super) fn round(&mut self, now: Instant) -> Option<super::admit::Round> {
        let g = self.gpu.as_mut()?;
        let cfg = self.settings.get();
        // Bold only where the workers keep to their caps: from a worker's first framework on.
        let seen = g.monitor.framework_seen();
        let aim = decide::aim(cfg.gpu.caps, g.model.aim(), seen.as_deref());
        if aim != g.model.aim() {
            info!(
                "estimates aim at the peak: workers enforce their memory caps ({})",
                seen.as_deref().unwrap_or_default()
            );
            g.model.set_aim(aim);
        }
        let idle = self.pool.views(&g.monitor);
        Some(g.round(&cfg.space, &self.live, &self.breaker, idle, now))
    }

    /// Writes our claims to the locked ledger of a round, which releases it.
    pub(super) fn write_claims(
        &mut self,
        locked: Option<crate::gpu::ledger::Locked>,
        new: Option<&super::decide::Placement>,
    ) {
        if let Some(g) = &mut self.gpu {
            let idle = self.pool.views(&g.monitor);
            g.write_claims(locked, &idle, new);
        }
    }

    /// Brings our entry in the host's ledger up to date (trials ended, or claimed their memory,
    /// idle workers gone).
    pub(super) fn refresh_claims(&mut self) {
        if let Some(g) = &mut self.gpu {
            let idle = self.pool.views(&g.monitor);
            g.refresh_claims(&idle);
        }
    }

    /// The idle workers to retire for the other daemons' requests not answered yet.
    pub(super) fn answer_requests(&mut self) -> Vec<(Current, Retirement)> {
        match &mut self.gpu {
            Some(g) => {
                let asked = g.answer_requests();
                self.pool.answer(&asked, &g.monitor)
            }
            None => Vec::new(),
        }
    }

    /// The idle workers to retire now: idle for `timeout`, or dead.
    pub(super) fn expired_workers(
        &mut self,
        now: Instant,
        timeout: Duration,
    ) -> Vec<(Current, Retirement)> {
        self.pool.expired(now, timeout)
    }

    /// The line of waiting candidates as it stands, with the GPU rows of this tick, as the
    /// daemon publishes it for `status` and `trials` (`reasons::line_of`).
    pub(super) fn waiting_line(&self, rows: &[crate::store::GpuRow]) -> crate::study::reason::Line {
        let ids: Vec<Option<i64>> = self
            .line
            .candidates()
            .map(|c| match c {
                super::decide::Candidate::Waiting(w, _) => Some(w.trial_id),
                super::decide::Candidate::New(_) => None,
            })
            .collect();
        let max_par = self.settings.get().worker.max_par;
        let running = self.running as usize;
        let busy = (running >= max_par).then_some((running, max_par));
        let now = Instant::now();
        let held = self.paused(now).and_then(|_| {
            let until = self
                .devices()
                .iter()
                .filter_map(|d| self.breaker.quarantined(*d, now))
                .min()?;
            let wall = chrono::Local::now().naive_local()
                + chrono::Duration::from_std(until - now).ok()?;
            Some(wall.format("%Y-%m-%d %H:%M:%S").to_string())
        });
        super::reasons::line_of(&ids, busy, rows, held)
    }

    /// The line `systemctl status` shows: "running 3/4 on gpu0, 812/5000 done, best 0.388".
    pub(super) fn status_line(&self) -> String {
        let cfg = self.settings.get();
        let on = match &self.gpu {
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
            Some(n) => format!("{}/{n} done", self.tally.finished),
            None => format!("{} done", self.tally.finished),
        };
        let best = self.progress.best_text();
        format!(
            "running {}/{} on {on}, {done}, {best}",
            self.running, cfg.worker.max_par
        )
    }
}
