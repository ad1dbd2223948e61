//! What starts next: the gate (stop conditions, the budget, the breaker), the line of
//! candidates and the admission round, each decided by `decide` and acted on here; then the
//! store's start, and what a start books.

use super::{Core, Next, Plan, Planned};
use crate::config::Config;
use crate::store::{StartCtx, StartOp, Started};
use crate::study::{Claimed, Dists, Failure, FailureKind, Finish, Params};
use crate::supervisor::admit::Round;
use crate::supervisor::decide::{
    self, Admission, Candidate, Devices, Gate, GateFacts, LineFacts, NoStart, RunState, Stop, Why,
};
use crate::supervisor::error::RunError;
use crate::supervisor::policy;
use crate::supervisor::suggest::Live;
use std::time::Instant;
use tracing::info;

impl Core {
    /// The next trial to run, started in the database: `Next::Run`, or why none can start now.
    pub(in crate::supervisor) async fn next(
        &mut self,
        hint: Option<u32>,
        stopping: bool,
    ) -> Result<Next, RunError> {
        loop {
            let plan = match self.plan(hint, stopping).await? {
                Planned::Start(plan) => plan,
                Planned::No(NoStart::Wait(why)) => {
                    let soon = self.gpu.as_ref().is_some_and(|g| g.holding());
                    return Ok(Next::Wait { soon, why });
                }
                Planned::No(NoStart::Stop(stop)) => return Ok(Next::Done(stop)),
            };
            let queued = self.line.queued_waiting();
            let cfg = self.settings.get();
            let ctx = StartCtx {
                study: &self.study,
                owner: &self.me,
                budget: cfg.study.n_trials,
                tally: &mut self.tally,
                runner: None,
                skip_waiting: Some(&queued),
            };
            let started = self.store.start(&cfg.space, plan.op(), ctx).await?;
            if let Some(next) = self.started(*plan, started) {
                return Ok(next);
            }
        }
    }

    /// Chooses the next trial to start and where, without writing it: `decide::gate`, the
    /// line (drawing a candidate where it is empty), `decide::admit_line`.
    pub(super) async fn plan(
        &mut self,
        hint: Option<u32>,
        stopping: bool,
    ) -> Result<Planned, RunError> {
        self.read_steer(stopping).await?;
        loop {
            let cfg = self.settings.get();
            let new = match self.gate(stopping, &cfg).await? {
                Ok(new) => new,
                Err(no) => return Ok(Planned::No(no)),
            };
            // A new trial's start was refused for a WAITING trial: that one goes first.
            if self.line.take_waiting_first() {
                if let Some(c) = self.choose(false).await? {
                    self.line.push_front(c);
                }
            }
            if self.line.is_empty() {
                match self.choose(new).await? {
                    Some(c) => self.line.push_back(c),
                    None => match decide::after_empty_draw(new, &self.state, self.running) {
                        Some(no) => return Ok(Planned::No(no)),
                        None => continue,
                    },
                }
            }
            let now = Instant::now();
            let round = self.round(now);
            let a = self.admission(round.as_ref(), hint, now, &cfg);
            if let Some(round) = round {
                let new = a.start.as_ref().and_then(|(_, p)| p.as_ref());
                self.write_claims(round.ledger, new);
            }
            let Some((k, placement)) = a.start else {
                if a.look_further {
                    // One candidate further: it may fit where those in line do not.
                    if let Some(c) = self.choose(new).await? {
                        self.line.push_back(c);
                        continue;
                    }
                }
                return Ok(Planned::No(NoStart::Wait(Why::NoRoom)));
            };
            let candidate = self.line.take(k);
            if let (Some(g), Some(head)) = (&mut self.gpu, self.line.head()) {
                g.next_expected = Some(g.model.estimate(head.params()));
            }
            return Ok(Planned::Start(Box::new(Plan {
                candidate,
                k,
                placement,
                beside_head: a.priority && k > 0,
            })));
        }
    }

    /// The study's control state read again for a start, not only at housekeeping's pace:
    /// after `sweepd stop` returns, no trial of ours starts. Not once the study stops anyway.
    async fn read_steer(&mut self, stopping: bool) -> Result<(), RunError> {
        if !stopping && !matches!(self.state, RunState::Halted { .. }) {
            self.steer = self.store.control(&self.study).await?.state;
        }
        Ok(())
    }

    /// `decide::gate`, with what the study spent of its limits (`core::budget`) and the tally
    /// read again where it asks: `Ok(new)`, whether a new sample may start (new samples in line
    /// are dropped when not), or why none starts; a budget that ends the study is kept and
    /// logged.
    async fn gate(
        &mut self,
        stopping: bool,
        cfg: &Config,
    ) -> Result<Result<bool, NoStart>, RunError> {
        let mut refreshed = false;
        loop {
            let spent = self.spent(cfg).await?;
            let gate = decide::gate(&GateFacts {
                stopping,
                state: &self.state,
                limits: cfg.study.limits(),
                spent: &spent,
                ended: self.ended,
                tally: &self.tally,
                refreshed,
                paused: self.paused(Instant::now()).is_some(),
                control: self.steer,
            });
            match gate {
                Gate::Refresh => {
                    self.store
                        .refresh_tally(&self.study, &mut self.tally)
                        .await?;
                    refreshed = true;
                }
                Gate::No(no) => {
                    if let NoStart::Stop(Stop::Ended(e)) = no {
                        self.end(e);
                    }
                    if no == NoStart::Wait(Why::BudgetHeld) {
                        self.line.drop_new();
                    }
                    return Ok(Err(no));
                }
                Gate::Line { new } => {
                    if !new {
                        self.line.drop_new();
                    }
                    return Ok(Ok(new));
                }
            }
        }
    }

    /// `decide::admit_line` on this round, and what the head of the line then asks of the
    /// other daemons (its request for their idle workers' memory, its hold).
    fn admission(
        &mut self,
        round: Option<&Round>,
        hint: Option<u32>,
        now: Instant,
        cfg: &Config,
    ) -> Admission {
        let head = self.line.head().map(|c| c.params());
        let by_others = match (&mut self.gpu, round) {
            (Some(g), Some(r)) => g.passes_by_others(head, r),
            _ => 0,
        };
        let mut facts = LineFacts {
            line: &self.line,
            by_others,
            running: self.running,
            room: cfg
                .study
                .n_trials
                .map(|n| n.saturating_sub(self.tally.finished + self.tally.reserved())),
            hint,
            exhausted: self.state == RunState::Exhausted,
            gpu: None,
            now,
        };
        let a = match (&mut self.gpu, round) {
            (Some(g), Some(r)) => {
                let (capacity, beside, model) = g.for_admission(head);
                let mut estimate = |p: &Params| model.estimate(p);
                facts.gpu = Some(Devices {
                    capacity,
                    headroom: cfg.gpu.headroom,
                    views: &r.views,
                    running: &r.running,
                    idle: &r.idle,
                    beside,
                    max_par: cfg.worker.max_par,
                    caps: cfg.gpu.caps,
                    estimate: &mut estimate,
                });
                decide::admit_line(&mut facts)
            }
            _ => decide::admit_line(&mut facts),
        };
        if let Some(g) = &mut self.gpu {
            g.say_busy(a.head_waits.as_deref());
            if a.head_estimate.is_some() {
                g.next_expected = a.head_estimate.clone();
            }
            let head_started = matches!(a.start, Some((0, _)));
            let passes = (a.head_passes, by_others, self.running);
            g.ask(a.asking, a.hold, head_started, passes);
        }
        a
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
                if matches!(started, Started::Waiting) {
                    self.line.waiting_outside();
                }
                self.line.put_back(k, candidate);
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
            let head = self.line.head().map(|c| c.params());
            g.started_in_line(head, claimed.trial_id, beside_head, k);
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
            if p.admitted < p.estimate.bytes {
                how.push_str(&format!(
                    ", with the {} the card has (more than it can give)",
                    crate::units::format_gib(p.admitted)
                ));
            }
            info!(
                trial = claimed.number,
                gpu = p.device,
                "admitted: expected peak {}{how}",
                p.estimate.why
            );
            let caps = self.settings.get().gpu.caps;
            g.monitor.track(
                claimed.trial_id,
                p.device,
                p.admitted,
                p.estimate.predicted,
                caps,
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
        let cfg = self.settings.get();
        let mut params = claimed.params.clone();
        let (mut dists, mut order) = (Dists::new(), Vec::new());
        for spec in &cfg.space.params {
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

    /// The next candidate: the oldest WAITING trial (retries, `study.enqueue_trial`) before a
    /// new sample (none unless `new`). `None`, the state then `Exhausted`, when the sampler has
    /// nothing left; `None` as it was when a WAITING trial was failed for bad params (look
    /// again), or when there is no WAITING trial and no new sample is wanted.
    pub(super) async fn choose(&mut self, new: bool) -> Result<Option<Candidate>, RunError> {
        // Whatever it proposes, the sampler first learns what other processes did meanwhile.
        self.catch_up().await;
        let cfg = self.settings.get();
        let space = &cfg.space;
        let queued = self.line.queued_waiting();
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
                    self.fail_enqueued(&cfg, &w, why).await?;
                    Ok(None)
                }
            };
        }
        if self.state != RunState::Sampling || !new {
            return Ok(None);
        }
        // New candidates in line are not numbered yet: give each its own seed key, or a
        // seeded sampler would propose the same params twice.
        let key = self.next_key + self.line.queued_new() + self.key_offset;
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
                self.state = RunState::Exhausted;
                Ok(None)
            }
        }
    }

    /// The enqueued trial `w`'s params cannot run here (`why`): it is claimed and FAILed,
    /// without a retry.
    async fn fail_enqueued(
        &mut self,
        cfg: &Config,
        w: &crate::store::Waiting,
        why: String,
    ) -> Result<(), RunError> {
        let start = StartCtx {
            study: &self.study,
            owner: &self.me,
            budget: cfg.study.n_trials,
            tally: &mut self.tally,
            runner: None,
            skip_waiting: None,
        };
        if let Started::Yes(c) = self
            .store
            .start(&cfg.space, StartOp::Claim(w, &w.fixed), start)
            .await?
        {
            let failure = Failure {
                kind: FailureKind::UserError,
                reason: why,
                stderr_tail: None,
                retry: false,
                counts: true,
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
        Ok(())
    }
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
