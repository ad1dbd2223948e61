//! `Core`: the study's one decision point, behind the supervisor's lock.
//!
//! Slots ask it what to run next and hand back how their trial ended; nothing else decides a
//! start or writes an outcome, so the budget, the sampler, GPU admission and the circuit
//! breaker never disagree. Choosing (`plan`, `choose`, `admit`) writes nothing; a start or a
//! finish is one store transaction (`next`, `finish`, `finish_then_next`), and its accounting
//! (`finish_begin` decides, `finish_end` books it to the budget, breaker, memory model, pruner
//! and sampler) goes through the pure rules in `policy`. On GPUs the admission round is in
//! `admit`, and a started trial takes the idle workers admission chose for it (`pool`).

use super::admit::{GpuCtl, Placement};
use super::policy::{self, Breaker, SameError, Signature};
use super::pool::Pool;
use super::suggest::{Answer, Live};
use super::RunError;
use crate::classify;
use crate::config::Config;
use crate::gpu::Ledger;
use crate::progress::{Progress, Snapshot, Tracker};
use crate::pruner::Pruner;
use crate::sampler::{Proposal, Sampler};
use crate::store::{
    DaemonId, Feed, ParamRefused, Runner, StartCtx, StartOp, Started, Store, Waiting,
};
use crate::study::rules;
use crate::study::space::external_json;
use crate::study::{
    Claimed, ControlState, Dists, Failure, FailureKind, Finish, Params, Tally, TrialRecord,
    TrialState,
};
use crate::units;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tracing::{info, warn};

/// A trial chosen but not yet admitted: kept until a device has room, so that a large trial
/// is not dropped in favour of small ones.
pub(super) enum Candidate {
    Waiting(Box<Waiting>, Proposal),
    New(Proposal),
}

impl Candidate {
    /// The params it starts with (the static space's): what admission sees of it.
    pub(super) fn params(&self) -> &Params {
        match self {
            Candidate::Waiting(_, p) | Candidate::New(p) => &p.params,
        }
    }
}

/// The study's decision point: what runs next, and the record of how things ended.
pub(super) struct Core {
    pub(super) store: Store,
    pub(super) study: crate::store::Study,
    pub(super) config: Arc<Config>,
    pub(super) sampler: Box<dyn Sampler>,
    pub(super) pruner: Pruner,
    /// The study's trials as the budget counts them, whoever runs them; refreshed from the
    /// database (cheaply: only what changed) in every start's transaction.
    pub(super) tally: Tally,
    /// This daemon, recorded on every trial it starts.
    pub(super) me: DaemonId,
    /// Trials this instance has RUNNING.
    pub(super) running: u64,
    /// Running trials per device, for infeasibility (an OOM alone on a device).
    pub(super) running_on: HashMap<u32, usize>,
    /// The sampler has nothing left to propose (grid exhausted).
    pub(super) exhausted: bool,
    pub(super) started: Instant,
    /// The number the next new trial will most likely get: the seed key of a new proposal,
    /// kept here rather than asked of the database for every trial.
    pub(super) next_key: u64,
    /// Added to every seed key: this host's own range when several hosts sample the study
    /// (see `supervisor::host_key_offset`), else 0.
    pub(super) key_offset: u64,
    /// Candidates in line for admission, with how many trials started ahead of each.
    pub(super) pending: std::collections::VecDeque<(Candidate, u32)>,
    /// A new trial's start was refused for a WAITING trial outside the line
    /// (`Started::Waiting`): the next plan looks for it and puts it at the head of the line.
    pub(super) waiting_first: bool,
    pub(super) gpu: Option<GpuCtl>,
    pub(super) breaker: Breaker,
    /// Params found infeasible (OOM alone on a device), with their distributions: proposals
    /// resembling them are redrawn, whatever the sampler.
    pub(super) infeasible: Vec<(Params, Dists)>,
    /// This instance's running trials by trial id, with the params their objectives define as
    /// they run.
    pub(super) live: HashMap<i64, Live>,
    /// Stops the study when its trials can only fail.
    pub(super) same_error: SameError,
    /// Set when the study must stop with this error (taken by the slot that recorded it).
    pub(super) fatal: Option<RunError>,
    /// The study is stopping for an error: no trial starts any more.
    pub(super) halted: bool,
    /// What the study's owner asked of its daemons (`sweepd pause`, `stop`, `cancel`), as
    /// housekeeping last read it: paused, no trial starts; stopping or cancelling, none starts
    /// and the slots end.
    pub(super) steer: ControlState,
    /// What the terminal's progress display shows, published as it changes.
    pub(super) progress: Tracker,
    /// Idle persistent workers on GPUs, and those handed to trials that start.
    pub(super) pool: Pool,
    /// How far this daemon has read other processes' trials (`learn`).
    pub(super) feed: Feed,
    /// When it last read them.
    pub(super) fed_at: Option<Instant>,
}

/// A start `Core::plan` chose: the candidate (taken out of the line, at index `k`) and where
/// it runs (`None`: no GPUs).
pub(super) struct Plan {
    pub(super) candidate: Candidate,
    pub(super) k: usize,
    pub(super) placement: Option<Placement>,
    /// It starts past the head of the line after the head was passed too often, within the
    /// room the head leaves (`Capacity::backfill_room`).
    pub(super) beside_head: bool,
}

impl Plan {
    /// What the store writes to start it.
    pub(super) fn op(&self) -> StartOp<'_> {
        match &self.candidate {
            Candidate::Waiting(w, p) => StartOp::Claim(w, &p.params),
            Candidate::New(p) => StartOp::New(&p.params),
        }
    }
}

/// What `Core::plan` decided.
pub(super) enum Planned {
    Start(Box<Plan>),
    Wait,
    Done,
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
pub(super) struct Finishing {
    pub(super) trial_id: i64,
    pub(super) number: i64,
    /// Every param the trial had (the static ones and those its objective suggested).
    pub(super) params: Params,
    pub(super) dists: Dists,
    /// `params` as the worker saw them, in the order the trial got them (the log line).
    pub(super) shown: serde_json::Value,
    pub(super) how: Finish,
    pub(super) attrs: Vec<(&'static str, serde_json::Value)>,
    pub(super) device: Option<u32>,
    pub(super) peak: Option<u64>,
    pub(super) constraints: Vec<f64>,
    /// The worker whose success it was (its count of trials done goes up in the finish's
    /// commit).
    pub(super) done_by: Option<i64>,
}

impl Finishing {
    /// Whether it spends the budget: every final outcome but a failure that is retried.
    pub(super) fn spends(&self) -> bool {
        !matches!(&self.how, Finish::Fail(f) if f.retry)
    }
}

/// What a slot is told to do next.
pub(super) enum Next {
    Run(Claimed, Option<u32>),
    /// Nothing to start now, but something may come (a running trial may fail and be retried,
    /// a device may free memory, someone may enqueue a trial): ask again after the next change.
    /// `soon`: our head holds memory back from the other daemons on the host, whose trials'
    /// ends free it without waking us: ask again soon, on a fresh reading.
    Wait {
        soon: bool,
    },
    Done,
}

/// How a trial ended, before the retry policy turns it into a [`Finish`].
pub(super) enum Outcome {
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

impl Core {
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
        self.progress.snapshot(Progress {
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
        })
    }

    pub(super) fn devices(&self) -> Vec<Option<u32>> {
        match &self.gpu {
            Some(g) => g.monitor.devices.iter().map(|d| Some(*d)).collect(),
            None => vec![None],
        }
    }

    /// The next trial to run, started in the database: `Next::Run`, or why none can start now.
    pub(super) async fn next(
        &mut self,
        hint: Option<u32>,
        stopping: bool,
    ) -> Result<Next, RunError> {
        loop {
            let plan = match self.plan(hint, stopping).await? {
                Planned::Start(plan) => plan,
                Planned::Wait => {
                    let soon = self.gpu.as_ref().is_some_and(|g| g.hold.is_some());
                    return Ok(Next::Wait { soon });
                }
                Planned::Done => return Ok(Next::Done),
            };
            let queued = self.queued_waiting();
            let ctx = StartCtx {
                study: &self.study,
                owner: &self.me,
                budget: self.config.study.n_trials,
                tally: &mut self.tally,
                runner: None,
                skip_waiting: Some(&queued),
            };
            let started = self.store.start(&self.config.space, plan.op(), ctx).await?;
            if let Some(next) = self.started(*plan, started) {
                return Ok(next);
            }
        }
    }

    /// Chooses the next trial to start and where, without writing anything: the budget, the
    /// breaker, the line of candidates and GPU admission (see `next`).
    pub(super) async fn plan(
        &mut self,
        hint: Option<u32>,
        stopping: bool,
    ) -> Result<Planned, RunError> {
        // Read at each start, not only at housekeeping's pace: after `sweepd stop` returns,
        // no trial of ours starts.
        if !stopping && !self.halted {
            self.steer = self.store.control(&self.study).await?.state;
        }
        loop {
            if stopping || self.halted || self.steer.ends_daemons() {
                return Ok(Planned::Done);
            }
            if !self.steer.starts_trials() {
                return Ok(Planned::Wait);
            }
            if let Some(t) = self.config.study.timeout {
                if self.started.elapsed() >= t {
                    return Ok(Planned::Done);
                }
            }
            // Whether a new sample may start: not when the running and the WAITING trials
            // hold every start left in the budget.
            let mut new_allowed = true;
            if let Some(n) = self.config.study.n_trials {
                if !self.tally.room_for_new(Some(n)) {
                    // Others (Optuna scripts, other hosts) may have finished or claimed trials
                    // since: look before deciding.
                    self.store
                        .refresh_tally(&self.study, &mut self.tally)
                        .await?;
                    if self.tally.finished >= n {
                        return Ok(Planned::Done);
                    }
                    if !self.tally.room_for_new(Some(n)) {
                        // A new sample kept in line would take a start that belongs to a
                        // WAITING trial (the copy of an attempt that failed or was failed over
                        // spends nothing), leaving it unrun at the end: drop new samples, and
                        // start only WAITING trials.
                        self.pending
                            .retain(|(c, _)| matches!(c, Candidate::Waiting(..)));
                        if !self.tally.room(Some(n)) {
                            return Ok(Planned::Wait);
                        }
                        new_allowed = false;
                    }
                }
            }
            let now = Instant::now();
            if self.breaker.paused(&self.devices(), now).is_some() {
                return Ok(Planned::Wait);
            }
            // A new trial's start was refused for a WAITING trial: that one goes first.
            if std::mem::take(&mut self.waiting_first) {
                if let Some(c) = self.choose(false).await? {
                    self.pending.push_front((c, 0));
                }
            }
            // Candidates in line. One that fits may start before those ahead of it that do
            // not (a small trial past a large one waiting for room), until the head has been
            // passed MAX_PASSES times: then only within the room the head leaves, so it
            // cannot starve (`policy::head_has_priority`).
            if self.pending.is_empty() {
                match self.choose(new_allowed).await? {
                    Some(c) => self.pending.push_back((c, 0)),
                    // No WAITING trial (another process may have claimed it): the next
                    // refresh says whether the start is a new trial's after all.
                    None if !new_allowed => return Ok(Planned::Wait),
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
            let round = self.round(now);
            // The other daemons' starts while the head waited passed it too.
            let by_others = self.passes_by_others(round.as_ref());
            let head_passes = policy::head_passes(self.pending[0].1, by_others, self.running);
            let tries = self.pending.len();
            // Priority lasts until the head starts (`Core::started_beside_head`).
            let beside_head = policy::head_has_priority(head_passes) || self.started_beside_head();
            // What the head is expected at, once per round, for the room it leaves.
            let head_needs = match &mut self.gpu {
                Some(g) if beside_head => Some(g.model.estimate(self.pending[0].0.params()).bytes),
                _ => None,
            };
            let mut chosen: Option<(usize, Option<Placement>)> = None;
            let mut fits: Vec<(usize, Option<Placement>)> = Vec::new();
            let mut head_waits = None;
            // Starts left in the budget: a candidate does not pass enqueued trials in line
            // with the slots they need (`policy::may_pass`).
            let room = self
                .config
                .study
                .n_trials
                .map(|n| n.saturating_sub(self.tally.finished + self.tally.reserved()));
            for k in 0..tries {
                let waiting_ahead = self
                    .pending
                    .iter()
                    .take(k)
                    .filter(|(c, _)| matches!(c, Candidate::Waiting(..)))
                    .count() as u64;
                if !policy::may_pass(waiting_ahead, room) {
                    break;
                }
                let params = self.pending[k].0.params().clone();
                let beside = head_needs.filter(|_| k > 0);
                match self.admit(round.as_ref(), &params, hint, beside, now) {
                    Ok(placement) => {
                        let settled = k == 0 || placement.is_none();
                        fits.push((k, placement));
                        if settled {
                            break;
                        }
                    }
                    Err(decisions) if k == 0 => head_waits = Some(decisions),
                    Err(_) => {}
                }
            }
            let sizes: Vec<(usize, u64)> = fits
                .iter()
                .map(|(k, p)| (*k, p.as_ref().map_or(0, |p| p.estimate.bytes)))
                .collect();
            if let Some(i) = policy::pick(&sizes) {
                chosen = Some(fits.swap_remove(i));
            }
            // Nothing starts: the head may ask the other daemons for their idle memory. It
            // holds what it needs from them while it waits, whatever starts beside it.
            let waits = head_waits.as_deref().filter(|_| chosen.is_none());
            self.ask(round.as_ref(), waits);
            let head_started = chosen.as_ref().is_some_and(|(k, _)| *k == 0);
            let priority = beside_head.then_some(head_passes);
            self.hold_for_head(head_waits.as_deref(), head_started, priority, by_others);
            if let Some(round) = round {
                let new = chosen.as_ref().and_then(|(_, p)| p.as_ref());
                self.write_claims(round.ledger, new);
            }
            let Some((k, placement)) = chosen else {
                if policy::look_further(self.pending.len(), self.exhausted) {
                    // Look one candidate further: it may fit where those in line do not.
                    if let Some(c) = self.choose(new_allowed).await? {
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
                g.next_expected = Some(g.model.estimate(head.params()));
            }
            return Ok(Planned::Start(Box::new(Plan {
                candidate,
                k,
                placement,
                beside_head: beside_head && k > 0,
            })));
        }
    }

    /// Bookkeeping once the store tried to start `plan`: the trial to run, or `None` to plan
    /// again (another process claimed it, or the budget filled up meanwhile).
    pub(super) fn started(&mut self, plan: Plan, started: Started) -> Option<Next> {
        let Plan {
            candidate,
            k,
            placement,
            beside_head,
        } = plan;
        let claimed = match started {
            Started::Yes(c) => c,
            Started::Taken => return None,
            Started::NoRoom | Started::Waiting => {
                // Kept for later, where it stood in line; a WAITING trial goes first.
                self.waiting_first |= matches!(started, Started::Waiting);
                let k = k.min(self.pending.len());
                self.pending.insert(k, (candidate, 0));
                return None;
            }
        };
        let live = self.live_trial(&claimed, candidate);
        self.sampler.observe(claimed.number, &live.observed());
        self.live.insert(claimed.trial_id, live);
        self.next_key = self.next_key.max(claimed.number as u64 + 1);
        self.running += 1;
        let device = placement.as_ref().map(|p| p.device);
        if let Some(g) = &mut self.gpu {
            // Started beside the head it now counts against; or the head itself started.
            match (beside_head, self.pending.front()) {
                (true, Some((head, _))) => {
                    let head = head.params();
                    let beside = match &mut g.beside_head {
                        Some((p, trials)) if p == head => trials,
                        other => &mut other.insert((head.clone(), Default::default())).1,
                    };
                    beside.insert(claimed.trial_id);
                }
                _ if k == 0 => g.beside_head = None,
                _ => {}
            }
        }
        if let (Some(p), Some(g)) = (placement, &self.gpu) {
            let mut how = String::new();
            if p.reclaim.reuse.is_some() {
                how.push_str(", on an idle worker");
            }
            if beside_head {
                how.push_str(
                    ", beside the trial at the head of the line, in what it leaves once the \
                     trials before it end",
                );
            }
            if !p.reclaim.retire.is_empty() {
                how.push_str(&format!(
                    ", after retiring {} idle worker{} for their memory",
                    p.reclaim.retire.len(),
                    if p.reclaim.retire.len() == 1 { "" } else { "s" }
                ));
            }
            info!(
                trial = claimed.number,
                gpu = p.device,
                "admitted: expected peak {}{how}",
                p.estimate.why
            );
            g.monitor.track(
                claimed.trial_id,
                p.device,
                p.estimate.bytes,
                p.estimate.predicted,
            );
            *self.running_on.entry(p.device).or_default() += 1;
            self.pool
                .hand(claimed.trial_id, p.reclaim.reuse, &p.reclaim.retire);
        }
        self.publish();
        Some(Next::Run(claimed, device))
    }

    /// A started trial as its objective will extend it: the static params it started with
    /// (and, claimed from WAITING, those it had besides), the relative values proposed for it,
    /// and what was enqueued for names outside the static space.
    fn live_trial(&self, claimed: &Claimed, candidate: Candidate) -> Live {
        let space = &self.config.space;
        let mut params = claimed.params.clone();
        let (mut dists, mut order) = (Dists::new(), Vec::new());
        for spec in &space.params {
            if claimed.params.contains_key(&spec.name) {
                dists.insert(spec.name.clone(), spec.dist.clone());
                order.push(spec.name.clone());
            }
        }
        let (proposal, enqueued) = match candidate {
            Candidate::New(p) => (p, Default::default()),
            Candidate::Waiting(w, p) => {
                for (name, d, v) in w.extra {
                    dists.insert(name.clone(), d);
                    params.insert(name.clone(), v);
                    order.push(name);
                }
                (p, w.enqueued)
            }
        };
        Live::new(params, dists, order, proposal.relative, enqueued)
    }

    /// The objective of running trial `c` asks for param `name` from `dist` (Optuna's JSON
    /// form, as the worker sent it): its value in external form, written to the trial the
    /// moment it is new, or why not. Optuna's rules (`suggest::Live::answer`, the study's
    /// earlier use of the name), then the sampler.
    pub(super) async fn suggest(
        &mut self,
        c: &Claimed,
        name: &str,
        dist: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        // The rules `check` applies to [params], and Optuna's constructors.
        rules::param_name(name)?;
        let dist = rules::requested(dist)?;
        let Some(live) = self.live.get(&c.trial_id) else {
            return Err("the trial is not running".into());
        };
        let proposed = match live.answer(name, &dist) {
            Answer::Have(v) => {
                let ext = dist.external(&v);
                if let Some(l) = self.live.get_mut(&c.trial_id) {
                    l.asked(name, &dist, &v);
                }
                return Ok(ext);
            }
            Answer::Refuse(why) => return Err(why),
            Answer::New(v) => v,
        };
        let unreadable = |e: crate::store::StoreError| {
            warn!(trial = c.number, "could not record param `{name}`: {e}");
            format!("sweepd could not record the param: {e}")
        };
        if let Some(why) = self
            .store
            .param_conflict(&self.study, name, &dist)
            .await
            .map_err(unreadable)?
        {
            return Err(why);
        }
        let v = match proposed {
            Some(v) => v,
            None => self.sampler.suggest(name, &dist, c.number as u64)?,
        };
        match self
            .store
            .set_param(&self.study, c.trial_id, name, &dist, &v)
            .await
            .map_err(unreadable)?
        {
            Ok(()) => {}
            Err(ParamRefused::Conflict(why)) => return Err(why),
            Err(ParamRefused::NotRunning) => {
                return Err("the trial is no longer running (another process ended it)".into())
            }
        }
        let ext = dist.external(&v);
        if let Some(l) = self.live.get_mut(&c.trial_id) {
            l.asked(name, &dist, &v);
            let observed = l.observed();
            self.sampler.observe(c.number, &observed);
        }
        Ok(ext)
    }

    /// The WAITING trials in line, by trial_id: a start neither looks for them again nor waits
    /// for them (`StartCtx::skip_waiting`).
    fn queued_waiting(&self) -> Vec<i64> {
        self.pending
            .iter()
            .filter_map(|(c, _)| match c {
                Candidate::Waiting(w, _) => Some(w.trial_id),
                Candidate::New(_) => None,
            })
            .collect()
    }

    /// The next candidate: the oldest WAITING trial (retries, `study.enqueue_trial`) before a
    /// new sample (none unless `new`). `None` with `exhausted` set when the sampler has nothing
    /// left; `None` without it when a WAITING trial was failed for bad params (look again), or
    /// when there is no WAITING trial and no new sample is wanted.
    pub(super) async fn choose(&mut self, new: bool) -> Result<Option<Candidate>, RunError> {
        // Whatever it proposes, the sampler first learns what other processes did meanwhile.
        self.catch_up().await;
        let space = &self.config.space;
        let queued = self.queued_waiting();
        // A new trial's start is refused while a WAITING trial outside the line waits
        // (`Started::Waiting`), so the look for one is needed only while the tally, read in
        // the last start's transaction, knows of one.
        let look = self.tally.waiting_ids().any(|id| !queued.contains(&id));
        let found = if look {
            self.store.peek_waiting(&self.study, space, &queued).await?
        } else {
            None
        };
        if let Some(w) = found {
            let params = match &w.problem {
                Some(p) => Err(p.clone()),
                None => self
                    .sampler
                    .propose(space, &w.fixed, w.number as u64)
                    .ok_or_else(|| "the sampler has no values left for this trial".to_owned()),
            };
            return match params {
                Ok(p) => Ok(Some(Candidate::Waiting(Box::new(w), p))),
                Err(why) => {
                    // The enqueued params cannot run here: FAIL that trial, look further.
                    let start = StartCtx {
                        study: &self.study,
                        owner: &self.me,
                        budget: self.config.study.n_trials,
                        tally: &mut self.tally,
                        runner: None,
                        skip_waiting: None,
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
        if self.exhausted || !new {
            return Ok(None);
        }
        // New candidates in line are not numbered yet: give each its own seed key, or a
        // seeded sampler would propose the same params twice.
        let queued_new = self
            .pending
            .iter()
            .filter(|(c, _)| matches!(c, Candidate::New(_)))
            .count() as u64;
        let key = self.next_key + queued_new + self.key_offset;
        let mut proposal = self.sampler.propose(space, &Params::new(), key);
        for attempt in 1..=policy::MAX_REDRAWS {
            match &proposal {
                Some(p)
                    if self.infeasible.iter().any(|(bad, dists)| {
                        policy::resembles(&policy::proposed(p), bad, dists)
                    }) =>
                {
                    // A distinct seed key per redraw keeps seeded runs reproducible.
                    proposal =
                        self.sampler
                            .propose(space, &Params::new(), key + attempt * (1 << 40));
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
    pub(super) async fn report(&mut self, c: &Claimed, step: i64, value: f64) -> bool {
        if let Err(e) = self.store.report(c.trial_id, step, value).await {
            warn!("could not record an intermediate value: {e}");
        }
        self.pruner.report(c.number, step, value)
    }

    /// Turns an outcome into a recorded finish: the retry policy, OOM feedback into admission
    /// and the memory model, the circuit breaker, the sampler and the pruner.
    /// `done_by`: the worker whose success it was, counted in the same commit.
    pub(super) async fn finish(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
        done_by: Option<i64>,
    ) -> Result<Finished, RunError> {
        let f = self.finish_begin(c, device, outcome, fresh_worker, done_by);
        self.finish_written(c, f).await
    }

    /// Writes a decided finish in a commit of its own, then accounts for it.
    pub(super) async fn finish_written(
        &mut self,
        c: &Claimed,
        f: Finishing,
    ) -> Result<Finished, RunError> {
        let written = self
            .store
            .finish_by(&self.study, c.trial_id, &f.how, &f.attrs, f.done_by)
            .await?;
        if written.is_some() {
            self.finish_end(&f).await?;
        } // else someone else finished it: nothing to count twice
        Ok(Finished {
            params: f.shown.clone(),
            how: f.how,
            peak: f.peak,
            next: None,
        })
    }

    /// `finish`, then the slot's next trial started in the same durable commit when one can
    /// start now (`None`: ask `next` as usual). The finish is accounted for before the next is
    /// chosen, so the sampler has learnt from it.
    /// `runner`: the worker that will run the next trial, when the slot already knows (its
    /// kept worker, without GPUs), recorded in the same commit.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_then_next(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
        hint: Option<u32>,
        done_by: Option<i64>,
        runner: Option<Runner>,
    ) -> Result<Finished, RunError> {
        let f = self.finish_begin(c, device, outcome, fresh_worker, done_by);
        // A failure retried creates its copy in the finish's own commit: the next choice must
        // see it (retries run first), so that finish is written alone and `next` chooses.
        if !f.spends() {
            return self.finish_written(c, f).await;
        }
        let counted = self.finish_end(&f).await?;
        let plan = self.plan(hint, false).await?;
        let Planned::Start(plan) = plan else {
            if self
                .store
                .finish_by(&self.study, c.trial_id, &f.how, &f.attrs, f.done_by)
                .await?
                .is_none()
            {
                self.finished_elsewhere(&f, counted);
            }
            return Ok(Finished {
                params: f.shown.clone(),
                how: f.how,
                peak: f.peak,
                next: None,
            });
        };
        let queued = self.queued_waiting();
        let ctx = StartCtx {
            study: &self.study,
            owner: &self.me,
            budget: self.config.study.n_trials,
            tally: &mut self.tally,
            runner: runner.map(|r| (r, plan.placement.as_ref().map(|p| p.device))),
            skip_waiting: Some(&queued),
        };
        let (written, started) = self
            .store
            .finish_and_start(
                &self.study,
                c.trial_id,
                &f.how,
                &f.attrs,
                f.done_by,
                &self.config.space,
                plan.op(),
                ctx,
            )
            .await?;
        if written.is_none() {
            self.finished_elsewhere(&f, counted);
        }
        let next = self.started(*plan, started);
        Ok(Finished {
            params: f.shown.clone(),
            how: f.how,
            peak: f.peak,
            next,
        })
    }

    /// A finish accounted for before it was written found the trial no longer RUNNING: another
    /// process ended it (a host that took over this one's trials), so it spends nothing here;
    /// what the tally `counted` of it is taken back, and the next refresh reads the trial.
    pub(super) fn finished_elsewhere(&mut self, f: &Finishing, counted: bool) {
        warn!(
            trial = f.number,
            "the trial was already ended by another process; its result here is not recorded"
        );
        if counted {
            self.tally.finished_elsewhere(f.trial_id, f.spends());
        }
    }

    /// The decisions of a finish, before anything is written: retry policy, infeasibility, OOM
    /// feedback, the same-error stop. `done_by`: the worker whose success it was.
    pub(super) fn finish_begin(
        &mut self,
        c: &Claimed,
        device: Option<u32>,
        outcome: Outcome,
        fresh_worker: bool,
        done_by: Option<i64>,
    ) -> Finishing {
        self.running = self.running.saturating_sub(1);
        // Every param the trial had: what it started with and what its objective suggested.
        let (params, dists, shown) = match self.live.remove(&c.trial_id) {
            Some(l) => {
                let shown = l.external();
                (l.params, l.dists, shown)
            }
            None => {
                let space = &self.config.space;
                let dists = c
                    .params
                    .keys()
                    .filter_map(|n| Some((n.clone(), space.get(n)?.dist.clone())))
                    .collect();
                let shown = external_json(&c.params, &dists);
                (c.params.clone(), dists, shown)
            }
        };
        // Alone: no other trial of ours on the device, nor of another daemon on this host.
        let others_there = |d: u32| -> usize {
            let ledger = self.gpu.as_ref().and_then(|g| g.ledger.as_ref());
            match ledger.map(Ledger::lock) {
                Some(Ok(l)) => l.others().get(&d).map_or(0, |c| c.running),
                _ => 0,
            }
        };
        let alone = device.is_some_and(|d| {
            self.running_on.get(&d).copied().unwrap_or(0) <= 1 && others_there(d) == 0
        });
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
            attrs.push((
                crate::study::attrs::PEAK_MEMORY_ATTR,
                json!(units::to_mib(p)),
            ));
        }
        let now = Instant::now();
        let mut constraints = Vec::new();
        let how = match outcome {
            Outcome::Complete(v) => Finish::Complete(v),
            Outcome::Pruned => Finish::Pruned,
            Outcome::Failed {
                kind,
                mut reason,
                tail,
                error,
            } => {
                // Infeasible: out of memory in a fresh process (no fragmentation of its own) with
                // no other sweepd trial on the device: these params do not fit this card.
                let mut infeasible = policy::infeasible(kind, alone, fresh_worker)
                    .then(|| "out of memory while alone on the device".to_owned());
                // An OOM that turned into a device-side assert still says the trial needs more.
                if policy::oom_like(kind, &reason) {
                    if let (Some(g), Some(d)) = (&mut self.gpu, device) {
                        g.capacity.record_oom(d, now);
                        // What the message says the trial needed at least, where it says.
                        let figures = tail
                            .as_deref()
                            .and_then(classify::oom_figures)
                            .or_else(|| classify::oom_figures(&reason));
                        let demand = figures.as_ref().and_then(|f| f.demand());
                        let total = g
                            .monitor
                            .views()
                            .0
                            .iter()
                            .find(|v| v.index == d)
                            .map(|v| v.total)
                            .or(figures.as_ref().and_then(|f| f.total));
                        let v = policy::oom_verdict(
                            infeasible,
                            &policy::OomFacts {
                                footprint: figures.as_ref().and_then(|f| f.footprint()),
                                demand,
                                peak,
                                total,
                                headroom: g.capacity.headroom(),
                                bound: memory.as_ref().map_or(0, |m| m.expected_peak),
                                guess: g.model.guess(),
                            },
                        );
                        infeasible = v.infeasible;
                        reason.push_str(&v.notes);
                        if let Some(reached) = v.reached {
                            g.model
                                .record_oom(&params, reached, total.unwrap_or(u64::MAX));
                        }
                    }
                }
                let signature = Signature::of(kind, &reason, error.as_ref());
                let (retry, reason) = if let Some(why) = infeasible {
                    constraints.push(1.0);
                    self.infeasible.push((params.clone(), dists.clone()));
                    attrs.push((crate::study::attrs::CONSTRAINTS_ATTR, json!([1.0])));
                    (false, format!("{reason} (infeasible: {why})"))
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
            params,
            dists,
            shown,
            how,
            attrs,
            device,
            peak,
            constraints,
            done_by,
        }
    }

    /// The accounting of a finish once written (or about to be, in the same commit as the next
    /// start): budget, best value, breaker, memory model, pruner and sampler. (The metrics are
    /// the slot's to update, once the finish is durable.)
    /// Returns whether the tally had the trial open (and so counted the finish).
    pub(super) async fn finish_end(&mut self, f: &Finishing) -> Result<bool, RunError> {
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
        let (state, values) = match &how {
            Finish::Complete(v) => (TrialState::Complete, v.clone()),
            Finish::Pruned => (TrialState::Pruned, Vec::new()),
            Finish::Fail(_) => (TrialState::Fail, Vec::new()),
        };
        let counted = self.tally.finished_own(trial_id, f.spends());
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
            Finish::Complete(v) => self.progress.completed(number, v),
            Finish::Fail(f) => self.progress.failed(f.kind.as_str()),
            Finish::Pruned => {}
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
        if let Some(g) = &mut self.gpu {
            g.model.ended(trial_id);
            let measured = peak.filter(|_| state != TrialState::Fail);
            if let Some(p) = measured {
                g.model.record(params, p);
            }
            g.share_end(&self.config.space, trial_id, params, measured);
        }
        // Its memory is no longer ours to claim: the other daemons may use it now.
        self.refresh_claims();
        self.pruner.finish(number, state == TrialState::Complete);
        self.sampler.tell(&TrialRecord {
            number,
            params: params.clone(),
            state,
            values,
            constraints: f.constraints.clone(),
            distributions: f.dists.clone(),
        });
        Ok(counted)
    }
}
