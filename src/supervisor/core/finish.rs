//! How a trial ended, recorded: `decide::finish` says what it is recorded as, this writes it
//! (alone, or with the slot's next trial in the same commit) and books it to the budget, the
//! breaker, the memory model, the pruner and the sampler.

use super::{Core, Finished, Finishing, Handback, Planned};
use crate::store::{Runner, StartCtx};
use crate::study::space::external_json;
use crate::study::{attrs, constraint_values, FailureKind, Finish, TrialRecord, TrialState};
use crate::supervisor::decide::{self, BreakerEffect, FinishFacts, OnDevice, RunState, Then};
use crate::supervisor::error::RunError;
use crate::supervisor::events::WorkerEvent;
use crate::units;
use serde_json::json;
use std::time::Instant;
use tracing::warn;

impl Core {
    /// Records how a trial ended: the retry policy, OOM feedback into admission and the memory
    /// model, the circuit breaker, the sampler and the pruner; `then`, the slot's next trial
    /// started in the same durable commit where one can start now (`Finished::next`; `None`:
    /// ask `next` as usual).
    pub(in crate::supervisor) async fn finish(
        &mut self,
        h: Handback<'_>,
        then: Then,
    ) -> Result<Finished, RunError> {
        let trial_id = h.claimed.trial_id;
        let f = self.finish_begin(h);
        match then {
            // A failure retried creates its copy in the finish's own commit: the next choice
            // must see it (retries run first), so that finish is written alone and `next`
            // chooses.
            Then::Next { hint, runner } if f.spends() => {
                self.finish_then_next(trial_id, f, hint, runner).await
            }
            _ => self.finish_alone(trial_id, f).await,
        }
    }

    /// Writes a decided finish in a commit of its own, then accounts for it.
    async fn finish_alone(&mut self, trial_id: i64, f: Finishing) -> Result<Finished, RunError> {
        let written = self
            .store
            .finish_by(&self.study, trial_id, &f.how, &f.attrs, f.done_by)
            .await?;
        if written.is_some() {
            self.finish_end(&f).await?;
        } // else someone else finished it: nothing to count twice
        Ok(f.finished(None))
    }

    /// The finish, accounted for before the next trial is chosen (so that the sampler has
    /// learnt from it), then written with that trial's start in one commit. `runner`: the
    /// worker that will run the next trial, when the slot already knows (its kept worker,
    /// without GPUs), recorded in the same commit.
    async fn finish_then_next(
        &mut self,
        trial_id: i64,
        f: Finishing,
        hint: Option<u32>,
        runner: Option<Runner>,
    ) -> Result<Finished, RunError> {
        let counted = self.finish_end(&f).await?;
        let Planned::Start(plan) = self.plan(hint, false).await? else {
            if self
                .store
                .finish_by(&self.study, trial_id, &f.how, &f.attrs, f.done_by)
                .await?
                .is_none()
            {
                self.finished_elsewhere(&f, counted);
            }
            return Ok(f.finished(None));
        };
        let queued = self.line.queued_waiting();
        let cfg = self.settings.get();
        let ctx = StartCtx {
            study: &self.study,
            owner: &self.me,
            budget: cfg.study.n_trials,
            tally: &mut self.tally,
            runner: runner.map(|r| (r, plan.placement.as_ref().map(|p| p.device))),
            skip_waiting: Some(&queued),
        };
        let (written, started) = self
            .store
            .finish_and_start(
                &self.study,
                trial_id,
                &f.how,
                &f.attrs,
                f.done_by,
                &cfg.space,
                plan.op(),
                ctx,
            )
            .await?;
        if written.is_none() {
            self.finished_elsewhere(&f, counted);
        }
        let next = self.started(*plan, started);
        Ok(f.finished(next))
    }

    /// A finish accounted for before it was written found the trial no longer RUNNING: another
    /// process ended it (a host that took over this one's trials), so it spends nothing here;
    /// what the tally `counted` of it is taken back, and the next refresh reads the trial.
    fn finished_elsewhere(&mut self, f: &Finishing, counted: bool) {
        warn!(
            trial = f.number,
            "the trial was already ended by another process; its result here is not recorded"
        );
        if counted {
            self.tally.finished_elsewhere(f.trial_id, f.spends());
        }
    }

    /// The facts of a finish, read before anything is written (the trial's params, whether it
    /// ran alone on its device, what the readings saw of it), and `decide::finish`'s verdict
    /// on them, applied to admission, the memory model, the infeasible params and the run
    /// state.
    fn finish_begin(&mut self, h: Handback) -> Finishing {
        let Handback {
            claimed: c,
            device,
            outcome,
            fresh_worker,
            done_by,
            framework,
        } = h;
        let cfg = self.settings.get();
        self.running = self.running.saturating_sub(1);
        // Every param the trial had: what it started with and what its objective suggested.
        let (params, dists, shown, keyed) = match self.live.remove(&c.trial_id) {
            Some(l) => {
                let shown = l.external();
                (l.params, l.dists, shown, l.constraints)
            }
            None => {
                let dists = c
                    .params
                    .keys()
                    .filter_map(|n| Some((n.clone(), cfg.space.get(n)?.dist.clone())))
                    .collect();
                let shown = external_json(&c.params, &dists);
                (c.params.clone(), dists, shown, Default::default())
            }
        };
        // Alone: no other trial of ours on the device, nor of another daemon on this host.
        let alone = device.is_some_and(|d| {
            self.running_on.get(&d).copied().unwrap_or(0) <= 1
                && self.gpu.as_ref().map_or(0, |g| g.others_running(d)) == 0
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
            attrs.push((attrs::PEAK_MEMORY_ATTR, json!(units::to_mib(p))));
        }
        let cap = memory.as_ref().and_then(|m| m.cap);
        if let Some(c) = cap {
            attrs.push((attrs::MEMORY_CAP_ATTR, json!(units::to_mib(c))));
        }
        let on_device = match (&self.gpu, device) {
            (Some(g), Some(d)) => Some(OnDevice {
                total: g
                    .monitor
                    .views()
                    .0
                    .iter()
                    .find(|v| v.index == d)
                    .map(|v| v.total),
                peak,
                bound: memory.as_ref().map_or(0, |m| m.expected_peak),
                guess: g.model.guess(),
                headroom: cfg.gpu.headroom,
                context: memory.as_ref().map_or(0, |m| m.context),
                peak_reserved: framework.map(|f| f.peak_reserved),
                requested: framework.and_then(|f| f.requested),
                worker_cap: framework.and_then(|f| f.cap),
                ran: memory.as_ref().map(|m| m.started.elapsed()),
            }),
            _ => None,
        };
        let facts = FinishFacts {
            trial_id: c.trial_id,
            attempts: &c.attempts,
            fresh_worker,
            alone,
            on_device,
            retry: &cfg.retry,
        };
        let verdict = decide::finish(outcome, &facts, &mut self.same_error);
        if let (Some(g), Some(d)) = (&mut self.gpu, device) {
            if verdict.oom {
                g.capacity.record_oom(d, Instant::now());
            }
            let cap_hit = matches!(&verdict.how, Finish::Fail(f) if f.kind == FailureKind::Cap);
            // A cap hit teaches the re-run's growth only where its worker enforced the cap.
            let admitted = memory
                .as_ref()
                .filter(|m| cap_hit && m.held_to_cap())
                .map(|m| m.admitted);
            match (verdict.reached, admitted) {
                (Some((level, total)), Some(admitted)) => {
                    g.model.record_cap(&params, level, admitted, total)
                }
                (Some((reached, total)), None) => g.model.record_oom(&params, reached, total),
                (None, _) => {}
            }
        }
        // What its objective set, then sweepd's out-of-memory mark (in Optuna's list form):
        // the order the store reads them back in.
        let mut listed = Vec::new();
        if verdict.infeasible {
            listed.push(1.0);
            self.infeasible.push((params.clone(), dists.clone()));
            attrs.push((attrs::CONSTRAINTS_ATTR, json!([1.0])));
        }
        let constraints = constraint_values(&keyed, &listed);
        let halts = verdict.halt.is_some();
        if let Some(why) = verdict.halt {
            self.state = RunState::Halted { error: Some(why) };
        }
        Finishing {
            trial_id: c.trial_id,
            number: c.number,
            params,
            dists,
            shown,
            how: verdict.how,
            attrs,
            device,
            peak,
            constraints,
            done_by,
            halts,
        }
    }

    /// A finish of ours that spends the budget, with its first value (COMPLETE): the stall
    /// rule counts it from now, before the read that finds its row (`core::budget`).
    fn spending_own(&mut self, trial_id: i64, value: Option<f64>) {
        if self.settings.get().study.patience.is_some() {
            self.spending.own(trial_id, value);
        }
    }

    /// The accounting of a finish once written (or about to be, in the same commit as the next
    /// start): budget, best value, breaker, memory model, pruner and sampler. (The metrics are
    /// the slot's to update, once the finish is durable.)
    /// Returns whether the tally had the trial open (and so counted the finish).
    async fn finish_end(&mut self, f: &Finishing) -> Result<bool, RunError> {
        let (trial_id, number, device) = (f.trial_id, f.number, f.device);
        let (state, values) = match &f.how {
            Finish::Complete(v) => (TrialState::Complete, v.clone()),
            Finish::Pruned => (TrialState::Pruned, Vec::new()),
            Finish::Fail(_) => (TrialState::Fail, Vec::new()),
        };
        // Only a feasible trial can be the best (Optuna's `best_trial`), as in `learn`; the
        // stall rule reads no value from the others (`store::spent`'s rule for what it reads).
        let feasible = !f.constraints.iter().any(|c| *c > 0.0);
        let counted = self.tally.finished_own(trial_id, f.spends());
        if f.spends() {
            self.spending_own(trial_id, values.first().copied().filter(|_| feasible));
        }
        if f.halts {
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
        match &f.how {
            Finish::Complete(v) if feasible => self.progress.completed(number, v),
            Finish::Complete(_) => {}
            Finish::Fail(f) => self.progress.failed(f.kind.as_str()),
            Finish::Pruned => {}
        }
        match decide::breaker_effect(&f.how) {
            BreakerEffect::Failure => self.breaker_failure(device, trial_id).await,
            BreakerEffect::Success => {
                self.breaker.success(device);
                self.same_error.success();
            }
            BreakerEffect::None => {}
        }
        if let Some(g) = &mut self.gpu {
            g.model.ended(trial_id);
            let measured = f.peak.filter(|_| state != TrialState::Fail);
            if let Some(p) = measured {
                g.model.record(&f.params, p);
            }
            g.share_end(&self.settings.get().space, trial_id, &f.params, measured);
        }
        // Its memory is no longer ours to claim: the other daemons may use it now.
        self.refresh_claims();
        self.pruner.finish(number, state == TrialState::Complete);
        self.sampler.tell(&TrialRecord {
            number,
            params: f.params.clone(),
            state,
            values,
            constraints: f.constraints.clone(),
            distributions: f.dists.clone(),
        });
        Ok(counted)
    }

    /// A failure that may clear by itself, counted by the breaker of its device; a quarantine
    /// it starts is said and recorded.
    async fn breaker_failure(&mut self, device: Option<u32>, trial_id: i64) {
        let retry = self.settings.get().retry.clone();
        let now = Instant::now();
        let Some(wait) = self.breaker.failure(device, now, &retry) else {
            return;
        };
        let on = device.map_or("the CPU".into(), |d| format!("gpu{d}"));
        warn!(
            "circuit breaker: {} consecutive failures on {on}; quarantined for {}",
            retry.breaker_threshold,
            units::format_duration(wait)
        );
        let _ = WorkerEvent::Quarantined { on, wait }
            .record(&self.store, None, Some(trial_id))
            .await;
        if let Some(why) = self.paused(now) {
            warn!("{why}");
        }
    }
}
