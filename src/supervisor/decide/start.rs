//! Whether a trial may start now, which one and where.
//!
//! Three steps, each a decision the core performs before asking the next: [`gate`] (the stop
//! conditions, the budget, the breaker), [`after_empty_draw`] (the line was empty and drawing
//! found nothing) and [`admit_line`] (which candidate in line starts, on which device, with
//! which of our idle workers, and what the head of the line asks of the other daemons while
//! it waits).

use super::line::Line;
use super::{NoStart, RunState, Stop, Why};
use crate::gpu::admission::{DeviceView, RunningTrial, Wait};
use crate::gpu::ledger::Request;
use crate::gpu::{Capacity, Decision, Estimate, IdleWorker, Reclaim};
use crate::study::budget::{self, Ended, Limits, Spent};
use crate::study::{ControlState, Params, Tally};
use crate::supervisor::policy;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::Instant;

/// What [`gate`] decides from.
pub(in crate::supervisor) struct GateFacts<'a> {
    /// Shutdown was asked (or another slot failed).
    pub(in crate::supervisor) stopping: bool,
    pub(in crate::supervisor) state: &'a RunState,
    /// The study's limits in force (`n_trials`, `timeout`, `gpu_hours`, `patience`), and what
    /// it has spent of those beside `n_trials` (since the daemon started, GPU-hours, the
    /// stall rule's finding).
    pub(in crate::supervisor) limits: Limits,
    pub(in crate::supervisor) spent: &'a Spent,
    /// The budget that already ended the study: it stays ended (a trial that finishes after
    /// the stall stop does not revive it).
    pub(in crate::supervisor) ended: Option<Ended>,
    /// The study's trials as last read.
    pub(in crate::supervisor) tally: &'a Tally,
    /// The tally was read from the database for this decision.
    pub(in crate::supervisor) refreshed: bool,
    /// Every device is quarantined by the breaker.
    pub(in crate::supervisor) paused: bool,
    /// What the study's owner asked of its daemons (`sweepd pause`, `stop`, `cancel`,
    /// `resume`), as read for this decision.
    pub(in crate::supervisor) control: ControlState,
}

/// What [`gate`] says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::supervisor) enum Gate {
    No(NoStart),
    /// The tally as last read has no start left for a new trial, but others (Optuna scripts,
    /// other hosts) may have finished or claimed trials since: read it, then decide again.
    Refresh,
    /// On to the line. `new`: a new sample may start; else only WAITING trials (and new
    /// samples in line are dropped: they would take a WAITING trial's start).
    Line {
        new: bool,
    },
}

/// Whether a start is considered at all: not once the study stops (shutdown, halted, stopped
/// or cancelled by its owner, a budget spent by whoever spent it: its timeout, GPU-hours, the
/// stall rule, then `n_trials` on a fresh tally, each said as `study::budget::Ended`), not
/// while the running trials hold every start left, every device is quarantined or its owner
/// paused it (a paused study still stops at a spent budget, as the breaker's pause).
pub(in crate::supervisor) fn gate(f: &GateFacts) -> Gate {
    if f.stopping {
        return Gate::No(NoStart::Stop(Stop::Shutdown));
    }
    if matches!(f.state, RunState::Halted { .. }) {
        return Gate::No(NoStart::Stop(Stop::Halted));
    }
    if f.control.ends_daemons() {
        return Gate::No(NoStart::Stop(Stop::ByOwner));
    }
    if let Some(e) = f.ended {
        return Gate::No(NoStart::Stop(Stop::Ended(e)));
    }
    // The limits beside `n_trials`; `n_trials` is decided on a fresh tally, below.
    let beside = Limits {
        n_trials: None,
        ..f.limits
    };
    if let Some(e) = budget::ended(&beside, f.spent) {
        return Gate::No(NoStart::Stop(Stop::Ended(e)));
    }
    let mut new = true;
    if let Some(n) = f.limits.n_trials {
        if !f.tally.room_for_new(Some(n)) {
            if !f.refreshed {
                return Gate::Refresh;
            }
            if f.tally.finished >= n {
                let finished = f.tally.finished;
                let e = Ended::Trials {
                    finished,
                    n_trials: n,
                };
                return Gate::No(NoStart::Stop(Stop::Ended(e)));
            }
            if !f.tally.room_for_new(Some(n)) {
                // A new sample would take a start that belongs to a WAITING trial (the copy of
                // an attempt that failed or was failed over spends nothing), leaving it unrun
                // at the end.
                if !f.tally.room(Some(n)) {
                    return Gate::No(NoStart::Wait(Why::BudgetHeld));
                }
                new = false;
            }
        }
    }
    if f.paused {
        return Gate::No(NoStart::Wait(Why::Paused));
    }
    if !f.control.starts_trials() {
        return Gate::No(NoStart::Wait(Why::PausedByOwner));
    }
    Gate::Line { new }
}

/// The line was empty and a draw (`new`: a WAITING trial, else a new sample) found nothing:
/// wait, stop, or (`None`) decide again from the gate (a WAITING trial was failed for params
/// that cannot run here: the next one may).
pub(in crate::supervisor) fn after_empty_draw(
    new: bool,
    state: &RunState,
    running: u64,
) -> Option<NoStart> {
    if !new {
        return Some(NoStart::Wait(Why::WaitingGone));
    }
    if *state == RunState::Exhausted {
        return Some(if running > 0 {
            NoStart::Wait(Why::Draining)
        } else {
            NoStart::Stop(Stop::Exhausted)
        });
    }
    None
}

/// Where a trial admitted on a GPU runs: its device, its estimate, and what it does with our
/// idle workers there.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::supervisor) struct Placement {
    pub(in crate::supervisor) device: u32,
    pub(in crate::supervisor) estimate: Estimate,
    /// The bytes it is admitted with, its cap's and its claim's: its estimate, or under caps
    /// on an empty card that cannot give it that, what the card has (`Decision::grant`).
    pub(in crate::supervisor) admitted: u64,
    pub(in crate::supervisor) reclaim: Reclaim,
}

/// The GPU side of an admission snapshot: the usable devices as last read (our idle workers'
/// memory and the other daemons' claims added), our running trials and idle workers, and
/// what the memory model expects of a candidate.
pub(in crate::supervisor) struct Devices<'a> {
    pub(in crate::supervisor) capacity: &'a Capacity,
    /// `[gpu] headroom`, in force now.
    pub(in crate::supervisor) headroom: u64,
    pub(in crate::supervisor) views: &'a [DeviceView],
    pub(in crate::supervisor) running: &'a [RunningTrial],
    pub(in crate::supervisor) idle: &'a [IdleWorker],
    /// Our trials started beside the head of the line while it had priority (`None`: none
    /// since it became the head).
    pub(in crate::supervisor) beside: Option<&'a BTreeSet<i64>>,
    /// `[worker] max_par`: our workers, busy and idle, stay within it.
    pub(in crate::supervisor) max_par: usize,
    /// `[gpu] caps`: trials run under memory caps.
    pub(in crate::supervisor) caps: bool,
    /// The memory model's estimate of a trial with these params (`MemoryModel::estimate`).
    pub(in crate::supervisor) estimate: &'a mut dyn FnMut(&Params) -> Estimate,
}

/// What [`admit_line`] decides from.
pub(in crate::supervisor) struct LineFacts<'a> {
    pub(in crate::supervisor) line: &'a Line,
    /// Trials the other daemons on the host started since the head began to wait.
    pub(in crate::supervisor) by_others: u32,
    /// Our trials running now.
    pub(in crate::supervisor) running: u64,
    /// Starts left in the budget (`None`: no trial budget).
    pub(in crate::supervisor) room: Option<u64>,
    /// The device of the slot's idle worker, which it prefers.
    pub(in crate::supervisor) hint: Option<u32>,
    pub(in crate::supervisor) exhausted: bool,
    /// `None` without GPUs: every candidate fits.
    pub(in crate::supervisor) gpu: Option<Devices<'a>>,
    pub(in crate::supervisor) now: Instant,
}

/// What [`admit_line`] decided.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::supervisor) struct Admission {
    /// The candidate that starts (its place in line) and where (`None`: no GPUs).
    pub(in crate::supervisor) start: Option<(usize, Option<Placement>)>,
    /// Why the head waits on each device, when it did not fit.
    pub(in crate::supervisor) head_waits: Option<Vec<Decision>>,
    /// How often the head has been passed, counting the other daemons' starts
    /// (`policy::head_passes`).
    pub(in crate::supervisor) head_passes: u32,
    /// The head has priority: passed too often, or trials started beside it already; a trial
    /// behind it starts only within the room it leaves (`Capacity::backfill_room`).
    pub(in crate::supervisor) priority: bool,
    /// The head's estimate (GPUs), for `sweepd gpus`.
    pub(in crate::supervisor) head_estimate: Option<Estimate>,
    /// Nothing starts and the head could start if the other daemons retired idle workers: what
    /// it asks them for (written to the host's ledger).
    pub(in crate::supervisor) asking: Option<Request>,
    /// The head, with priority, waits for memory: the device and bytes it asks the other
    /// daemons to leave free (its hold), whatever starts beside it.
    pub(in crate::supervisor) hold: Option<(u32, u64)>,
    /// Nothing starts: draw one more candidate, it may fit where those in line do not
    /// (`policy::look_further`).
    pub(in crate::supervisor) look_further: bool,
}

/// Which candidate in line starts now, and where. One that fits may start before those ahead
/// of it that do not (a small trial past a large one waiting for room), until the head has
/// been passed `policy::MAX_PASSES` times: then only within the room the head leaves, so it
/// cannot starve (`policy::head_has_priority`). A candidate does not pass enqueued trials
/// with the starts of the budget they need (`policy::may_pass`). Of those that fit, the head,
/// else the largest (`policy::pick`).
pub(in crate::supervisor) fn admit_line(f: &mut LineFacts) -> Admission {
    let head_passes = policy::head_passes(f.line.head_passed(), f.by_others, f.running);
    // Priority lasts until the head starts.
    let started_beside = f.gpu.as_ref().is_some_and(|g| g.beside.is_some());
    let priority = policy::head_has_priority(head_passes) || started_beside;
    let line = f.line;
    let head = line.head().map(|c| c.params());
    let head_estimate = match (&mut f.gpu, head) {
        (Some(g), Some(h)) => Some((g.estimate)(h)),
        _ => None,
    };
    // What the head is expected at, for the room it leaves.
    let head_needs = head_estimate.as_ref().filter(|_| priority).map(|e| e.bytes);
    let mut fits: Vec<(usize, Option<Placement>)> = Vec::new();
    let mut head_waits = None;
    let mut waiting_ahead = 0u64;
    for (k, c) in line.candidates().enumerate() {
        if !policy::may_pass(waiting_ahead, f.room) {
            break;
        }
        waiting_ahead += u64::from(c.is_waiting());
        let beside = head_needs.filter(|_| k > 0);
        match place(f, c.params(), beside) {
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
    let start = policy::pick(&sizes).map(|i| fits.swap_remove(i));
    // Nothing starts: the head may ask the other daemons for their idle memory. It holds what
    // it needs from them while it waits, whatever starts beside it.
    let asking = match (&f.gpu, &head_waits) {
        (Some(g), Some(waits)) if start.is_none() => g.capacity.request(g.views, waits),
        _ => None,
    };
    let hold = head_waits
        .as_deref()
        .filter(|_| priority)
        .and_then(|d| {
            // Only memory the others can leave free: a device where our own trials fill
            // max_par_per_device waits for them, not for the others.
            d.iter()
                .filter(|d| matches!(d.wait, Some(Wait::Memory { .. })))
                .max_by_key(|d| (d.usable, Reverse(d.device)))
        })
        .zip(head_estimate.as_ref())
        .map(|(d, e)| (d.device, e.bytes));
    let look_further = start.is_none() && policy::look_further(line.len(), f.exhausted);
    Admission {
        start,
        head_waits,
        head_passes,
        priority,
        head_estimate,
        asking,
        hold,
        look_further,
    }
}

/// Where a candidate with `params` may start now: `Ok(None)` without GPUs, `Ok(Some(placement))`
/// when a device has room, or why each device waits. `beside_head`: it would start past the
/// head of the line, which has priority and is expected at these bytes, so a device takes it
/// only within the room the head leaves there (`Capacity::backfill_room`).
fn place(
    f: &mut LineFacts,
    params: &Params,
    beside_head: Option<u64>,
) -> Result<Option<Placement>, Vec<Decision>> {
    let (hint, running, now) = (f.hint, f.running, f.now);
    let Some(g) = &mut f.gpu else {
        return Ok(None);
    };
    let cap = g.capacity;
    let estimate = (g.estimate)(params);
    let e = estimate.bytes;
    let mut decisions: Vec<Decision> = g
        .views
        .iter()
        .map(|v| cap.decide(v, g.running, e, g.headroom, now))
        .collect();
    if let Some(needs) = beside_head {
        for (d, v) in decisions.iter_mut().zip(g.views) {
            let backfilled = |id| g.beside.is_some_and(|t| t.contains(&id));
            let room = cap.backfill_room(v, g.running, needs, backfilled, g.headroom, now);
            d.admitted &= e <= room;
        }
    }
    // The slot's own device first (its worker waits idle there), then one with an idle
    // worker (no worker to start), then the most room left.
    let Some(pick) = decisions.iter().filter(|d| d.admitted).max_by_key(|d| {
        let has_idle = g.idle.iter().any(|w| w.device == d.device);
        // Signed: a device admitting its first trial may have less room than needed.
        let room_after = i128::from(d.usable) - i128::from(e);
        (
            hint == Some(d.device),
            has_idle,
            room_after,
            Reverse(d.par_now),
            Reverse(d.device),
        )
    }) else {
        return Err(decisions);
    };
    let device = pick.device;
    let admitted = if g.caps { pick.grant(e) } else { e };
    let view = g
        .views
        .iter()
        .find(|v| v.index == device)
        .expect("decided from these views");
    let mut reclaim = cap.reclaim(view, g.running, e, g.idle, g.headroom, now);
    // A trial that starts a worker keeps our workers within max_par: the least recently used
    // idle one goes, wherever it is.
    if reclaim.reuse.is_none() {
        let live = (running as usize + g.idle.len()).saturating_sub(reclaim.retire.len());
        if live >= g.max_par {
            if let Some(w) = g
                .idle
                .iter()
                .filter(|w| !reclaim.retire.contains(&w.id))
                .min_by_key(|w| (w.since, w.id))
            {
                reclaim.retire.push(w.id);
            }
        }
    }
    Ok(Some(Placement {
        device,
        estimate,
        admitted,
        reclaim,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::budget::{Patience, Stall};
    use crate::study::{ParamValue, TrialState};
    use crate::supervisor::decide::line::tests::{new, waiting};
    use crate::supervisor::decide::Candidate;
    use rstest::rstest;
    use std::time::Duration;

    const G: u64 = 1 << 30;

    /// A tally read from trials (id, state, a FAIL with a retry copy, run by a sweepd daemon),
    /// whoever wrote them.
    fn tally(trials: &[(i64, TrialState, bool, bool)]) -> Tally {
        let mut t = Tally::default();
        for &(id, state, retried, sweepd) in trials {
            t.apply(id, Some(state), retried, sweepd);
        }
        t
    }

    use TrialState::{Complete, Fail, Pruned, Running, Waiting as Enqueued};

    fn done(n: i64) -> Vec<(i64, TrialState, bool, bool)> {
        (1..=n).map(|id| (id, Complete, false, false)).collect()
    }

    fn with(
        mut a: Vec<(i64, TrialState, bool, bool)>,
        b: &[(TrialState, bool, bool)],
    ) -> Vec<(i64, TrialState, bool, bool)> {
        for &(s, r, w) in b {
            let id = a.len() as i64 + 1;
            a.push((id, s, r, w));
        }
        a
    }

    fn gate_with(
        n_trials: Option<u64>,
        trials: Vec<(i64, TrialState, bool, bool)>,
        refreshed: bool,
    ) -> Gate {
        let t = tally(&trials);
        gate(&GateFacts {
            stopping: false,
            state: &RunState::Sampling,
            limits: Limits {
                n_trials,
                ..Limits::default()
            },
            spent: &spent(t.finished, 10),
            ended: None,
            tally: &t,
            refreshed,
            paused: false,
            control: ControlState::Running,
        })
    }

    /// What a study has spent: `finished` trials, `ran_s` seconds since the daemon started.
    fn spent(finished: u64, ran_s: u64) -> Spent {
        Spent {
            finished,
            ran: Duration::from_secs(ran_s),
            ..Spent::default()
        }
    }

    /// `n_trials` trials finished: the study ends, `finished` of them counted.
    const fn trials_spent(finished: u64, n_trials: u64) -> Gate {
        stop(Stop::Ended(Ended::Trials { finished, n_trials }))
    }

    /// The timeout of `timeout_s` reached after `ran_s`, one trial finished.
    const fn timed_out(timeout_s: u64, ran_s: u64) -> Gate {
        stop(Stop::Ended(Ended::Timeout {
            timeout: Duration::from_secs(timeout_s),
            ran: Duration::from_secs(ran_s),
            finished: 1,
        }))
    }

    const fn wait(why: Why) -> Gate {
        Gate::No(NoStart::Wait(why))
    }

    const fn stop(stop: Stop) -> Gate {
        Gate::No(NoStart::Stop(stop))
    }

    const NEW: Gate = Gate::Line { new: true };
    const ONLY_WAITING: Gate = Gate::Line { new: false };

    #[rstest]
    #[case::no_budget(None, done(50), false, NEW)]
    #[case::room_left(Some(5), done(3), false, NEW)]
    // Others (an Optuna script, another host) may have finished or claimed trials since the
    // tally was read: a start that looks impossible reads it again first.
    #[case::looks_spent_read_again(Some(3), done(3), false, Gate::Refresh)]
    #[case::spent_by_other_writers(Some(3), done(3), true, trials_spent(3, 3))]
    #[case::overspent_by_other_writers(Some(3), done(5), true, trials_spent(5, 3))]
    // A sweepd daemon's RUNNING trial (here or on another host) holds a start of the budget.
    #[case::last_start_held_by_a_running_trial(Some(3), with(done(2), &[(Running, false, true)]), true, wait(Why::BudgetHeld))]
    // An Optuna script's RUNNING trial does not: sweepd cannot tell a live one from a dead one.
    #[case::a_scripts_running_trial_holds_none(Some(3), with(done(2), &[(Running, false, false)]), false, NEW)]
    // A WAITING trial (a retry copy, an enqueued one) holds its start: no new sample takes it.
    #[case::last_start_held_by_an_enqueued_trial(Some(3), with(done(2), &[(Enqueued, false, false)]), true, ONLY_WAITING)]
    #[case::enqueued_trials_beyond_the_budget(Some(3), with(done(2), &[(Enqueued, false, false), (Enqueued, false, false)]), true, ONLY_WAITING)]
    // A failure with a retry copy spends nothing; pruned and final failures do.
    #[case::a_retried_failure_spends_nothing(Some(3), with(done(1), &[(Fail, true, true), (Pruned, false, true)]), false, NEW)]
    #[case::a_final_failure_spends(Some(3), with(done(1), &[(Fail, false, true), (Pruned, false, true)]), true, trials_spent(3, 3))]
    fn the_budget_counts_every_writers_trials_exactly(
        #[case] n_trials: Option<u64>,
        #[case] trials: Vec<(i64, TrialState, bool, bool)>,
        #[case] refreshed: bool,
        #[case] expected: Gate,
    ) {
        assert_eq!(gate_with(n_trials, trials, refreshed), expected);
    }

    #[rstest]
    #[case::running(false, RunState::Sampling, 100, None, false, NEW)]
    #[case::shutdown(true, RunState::Sampling, 0, None, false, stop(Stop::Shutdown))]
    #[case::shutdown_wins_over_a_halt(true, RunState::Halted { error: None }, 0, None, false, stop(Stop::Shutdown))]
    #[case::halted(false, RunState::Halted { error: None }, 0, None, false, stop(Stop::Halted))]
    #[case::an_exhausted_sampler_still_runs_what_waits(
        false,
        RunState::Exhausted,
        0,
        None,
        false,
        NEW
    )]
    #[case::timeout_not_yet(false, RunState::Sampling, 59, Some(60), false, NEW)]
    #[case::timeout(false, RunState::Sampling, 60, Some(60), false, timed_out(60, 60))]
    #[case::paused(false, RunState::Sampling, 0, None, true, wait(Why::Paused))]
    #[case::a_timeout_stops_a_paused_study(
        false,
        RunState::Sampling,
        61,
        Some(60),
        true,
        timed_out(60, 61)
    )]
    fn a_study_stops_on_shutdown_a_halt_or_its_timeout_and_waits_while_paused(
        #[case] stopping: bool,
        #[case] state: RunState,
        #[case] elapsed_s: u64,
        #[case] timeout_s: Option<u64>,
        #[case] paused: bool,
        #[case] expected: Gate,
    ) {
        let t = tally(&done(1));
        let got = gate(&GateFacts {
            stopping,
            state: &state,
            limits: Limits {
                n_trials: Some(10),
                timeout: timeout_s.map(Duration::from_secs),
                ..Limits::default()
            },
            spent: &spent(t.finished, elapsed_s),
            ended: None,
            tally: &t,
            refreshed: false,
            paused,
            control: ControlState::Running,
        });
        assert_eq!(got, expected);
    }

    #[test]
    fn a_spent_budget_stops_a_paused_study() {
        let t = tally(&done(3));
        let got = gate(&GateFacts {
            stopping: false,
            state: &RunState::Sampling,
            limits: Limits {
                n_trials: Some(3),
                ..Limits::default()
            },
            spent: &spent(t.finished, 0),
            ended: None,
            tally: &t,
            refreshed: true,
            paused: true,
            control: ControlState::Running,
        });
        assert_eq!(got, trials_spent(3, 3));
    }

    const STALL: Patience = Patience {
        patience: 5,
        min_delta: 0.01,
    };

    /// The budgets beside `n_trials` end the study where `gate` looks first: GPU-hours spent,
    /// the stall rule's finding, a budget that already ended it (which stays ended).
    #[rstest]
    #[case::gpu_hours_left(Some(2.0), 7199.0, None, None, NEW)]
    #[case::gpu_hours_spent(Some(2.0), 7200.0, None, None, stop(Stop::Ended(Ended::GpuHours { spent: 2.0, budget: 2.0 })))]
    #[case::improving(None, 0.0, Some(Stall { best: Some(0.5), since: 4, stalled: false }), None, NEW)]
    #[case::stalled(None, 0.0, Some(Stall { best: Some(0.5), since: 5, stalled: true }), None, stop(Stop::Ended(Ended::Stalled { best: 0.5, rule: STALL })))]
    // A stall before any COMPLETE trial has no best to name: it does not end the study.
    #[case::no_best_yet(None, 0.0, Some(Stall { best: None, since: 0, stalled: true }), None, NEW)]
    // A trial that finished after the stall stop improved the best: the study stays ended.
    #[case::ended_stays_ended(None, 0.0, Some(Stall { best: Some(0.1), since: 0, stalled: false }), Some(Ended::Stalled { best: 0.5, rule: STALL }), stop(Stop::Ended(Ended::Stalled { best: 0.5, rule: STALL })))]
    fn gpu_hours_and_the_stall_end_the_study_and_it_stays_ended(
        #[case] gpu_hours: Option<f64>,
        #[case] gpu_seconds: f64,
        #[case] stall: Option<Stall>,
        #[case] ended: Option<Ended>,
        #[case] expected: Gate,
    ) {
        let t = tally(&done(1));
        let spent = Spent {
            gpu_seconds,
            stall,
            ..spent(t.finished, 0)
        };
        let got = gate(&GateFacts {
            stopping: false,
            state: &RunState::Sampling,
            limits: Limits {
                n_trials: Some(10),
                gpu_hours,
                patience: stall.map(|_| STALL),
                ..Limits::default()
            },
            spent: &spent,
            ended,
            tally: &t,
            refreshed: false,
            paused: false,
            control: ControlState::Running,
        });
        assert_eq!(got, expected);
    }

    use ControlState::{Cancelling, Paused, Running as Resumed, Stopping};

    /// `sweepd pause`, `stop`, `cancel` and `resume` at the gate: (shutdown, run state,
    /// seconds since start, `[study] timeout`, trials done of 10, the owner's control state).
    #[rstest]
    #[case::resumed(false, RunState::Sampling, 0, None, 1, Resumed, NEW)]
    #[case::paused_by_its_owner(
        false,
        RunState::Sampling,
        0,
        None,
        1,
        Paused,
        wait(Why::PausedByOwner)
    )]
    #[case::stopped_by_its_owner(
        false,
        RunState::Sampling,
        0,
        None,
        1,
        Stopping,
        stop(Stop::ByOwner)
    )]
    #[case::cancelled_by_its_owner(
        false,
        RunState::Sampling,
        0,
        None,
        1,
        Cancelling,
        stop(Stop::ByOwner)
    )]
    // A stop or cancel ends even a study whose WAITING trials are still to run.
    #[case::stopped_while_trials_wait(
        false,
        RunState::Exhausted,
        0,
        None,
        1,
        Stopping,
        stop(Stop::ByOwner)
    )]
    #[case::shutdown_wins_over_the_owners_stop(
        true,
        RunState::Sampling,
        0,
        None,
        1,
        Stopping,
        stop(Stop::Shutdown)
    )]
    #[case::a_halt_wins_over_the_owners_stop(false, RunState::Halted { error: None }, 0, None, 1, Cancelling, stop(Stop::Halted))]
    #[case::the_owners_stop_wins_over_a_timeout(
        false,
        RunState::Sampling,
        61,
        Some(60),
        1,
        Stopping,
        stop(Stop::ByOwner)
    )]
    // Paused by hand as by the breaker: the study still ends when it has nothing left to do.
    #[case::a_timeout_stops_a_study_its_owner_paused(
        false,
        RunState::Sampling,
        61,
        Some(60),
        1,
        Paused,
        timed_out(60, 61)
    )]
    #[case::a_spent_budget_stops_a_study_its_owner_paused(
        false,
        RunState::Sampling,
        0,
        None,
        10,
        Paused,
        trials_spent(10, 10)
    )]
    fn the_owners_pause_stop_and_cancel_hold_or_end_the_study(
        #[case] stopping: bool,
        #[case] state: RunState,
        #[case] elapsed_s: u64,
        #[case] timeout_s: Option<u64>,
        #[case] done_trials: i64,
        #[case] control: ControlState,
        #[case] expected: Gate,
    ) {
        let t = tally(&done(done_trials));
        let got = gate(&GateFacts {
            stopping,
            state: &state,
            limits: Limits {
                n_trials: Some(10),
                timeout: timeout_s.map(Duration::from_secs),
                ..Limits::default()
            },
            spent: &spent(t.finished, elapsed_s),
            ended: None,
            tally: &t,
            refreshed: true,
            paused: false,
            control,
        });
        assert_eq!(got, expected);
    }

    #[rstest]
    #[case::only_an_enqueued_trial_may_start_and_none_is_left(
        false,
        RunState::Sampling,
        2,
        Some(NoStart::Wait(Why::WaitingGone))
    )]
    #[case::exhausted_while_trials_run(
        true,
        RunState::Exhausted,
        2,
        Some(NoStart::Wait(Why::Draining))
    )]
    #[case::exhausted_and_nothing_runs(
        true,
        RunState::Exhausted,
        0,
        Some(NoStart::Stop(Stop::Exhausted))
    )]
    // A WAITING trial failed for params that cannot run here: the next may.
    #[case::look_again(true, RunState::Sampling, 0, None)]
    fn an_empty_draw_waits_stops_or_looks_again(
        #[case] new: bool,
        #[case] state: RunState,
        #[case] running: u64,
        #[case] expected: Option<NoStart>,
    ) {
        assert_eq!(after_empty_draw(new, &state, running), expected);
    }

    // ---------------------------------------------------------------------------------------
    // The admission line.

    /// A 24 GiB card with `free` bytes free.
    fn card(index: u32, free: u64) -> DeviceView {
        DeviceView {
            index,
            total: 24 * G,
            free,
            ..Default::default()
        }
    }

    /// A trial of ours on `device` that settled at `used` bytes.
    fn running(trial_id: i64, device: u32, used: u64) -> RunningTrial {
        RunningTrial {
            trial_id,
            device,
            pgid: Some(100 + trial_id as i32),
            expected_peak: used,
            used_now: used,
            settled: true,
            capped: false,
        }
    }

    fn idle(id: i64, device: u32, memory: u64, since: Instant) -> IdleWorker {
        IdleWorker {
            id,
            device,
            memory,
            since,
        }
    }

    /// A line of candidates whose param `x` is their expected peak in GiB, the head passed
    /// `passed` times.
    fn line(xs: &[i64], passed: u32) -> Line {
        let mut l = Line::default();
        for &x in xs {
            l.push_back(new(x));
        }
        for _ in 0..passed {
            l.push_back(new(1));
            l.take(l.len() - 1);
        }
        l
    }

    /// The snapshot an admission decides from, with a headroom of 1 GiB and `max_par` 8.
    struct Snap {
        line: Line,
        views: Vec<DeviceView>,
        running: Vec<RunningTrial>,
        idle: Vec<IdleWorker>,
        beside: Option<BTreeSet<i64>>,
        by_others: u32,
        room: Option<u64>,
        max_par: usize,
        gpu: bool,
        caps: bool,
    }

    impl Snap {
        fn new(xs: &[i64], views: Vec<DeviceView>) -> Snap {
            Snap {
                line: line(xs, 0),
                views,
                running: Vec::new(),
                idle: Vec::new(),
                beside: None,
                by_others: 0,
                room: None,
                max_par: 8,
                gpu: true,
                caps: true,
            }
        }

        fn decide(&self, now: Instant) -> Admission {
            let capacity = Capacity::new(16, 0.5, Duration::from_secs(600));
            // The memory model's estimate: `x` GiB.
            let mut estimate = |p: &Params| {
                let ParamValue::Int(x) = p["x"] else {
                    unreachable!()
                };
                Estimate {
                    bytes: x as u64 * G,
                    predicted: x as u64 * G,
                    why: format!("{x} GiB"),
                }
            };
            let mut f = LineFacts {
                line: &self.line,
                by_others: self.by_others,
                running: self.running.len() as u64,
                room: self.room,
                hint: None,
                exhausted: false,
                gpu: self.gpu.then(|| Devices {
                    capacity: &capacity,
                    headroom: G,
                    views: &self.views,
                    running: &self.running,
                    idle: &self.idle,
                    beside: self.beside.as_ref(),
                    max_par: self.max_par,
                    caps: self.caps,
                    estimate: &mut estimate,
                }),
                now,
            };
            admit_line(&mut f)
        }
    }

    /// Which place in line starts, and on which device.
    fn started(a: &Admission) -> Option<(usize, Option<u32>)> {
        a.start
            .as_ref()
            .map(|(k, p)| (*k, p.as_ref().map(|p| p.device)))
    }

    /// The cards: another job holds 22 of 24 GiB and 11 of 12 GiB. Nothing of ours
    /// runs, yet nothing starts: the head waits and says why on each card; a trial within
    /// what is left would start.
    #[test]
    fn a_busy_card_is_waited_for_not_tried() {
        let twelve = DeviceView {
            total: 12 * G,
            ..card(1, G)
        };
        let s = Snap::new(&[4], vec![card(0, 2 * G), twelve]);
        let a = s.decide(Instant::now());
        assert_eq!(started(&a), None);
        let waits: Vec<String> = a
            .head_waits
            .expect("the head waits")
            .iter()
            .map(|d| d.wait.as_ref().unwrap().to_string())
            .collect();
        assert!(waits[0].ends_with("other processes hold 22.0 GiB here: waiting for them"));
        assert!(waits[1].ends_with("other processes hold 11.0 GiB here: waiting for them"));
        let s = Snap::new(&[1], vec![card(0, 2 * G + G / 2)]);
        assert_eq!(started(&s.decide(Instant::now())), Some((0, Some(0))));
    }

    /// An empty card takes a trial whose estimate is more than it has: under caps the trial
    /// runs in what the card gives, so that its cap is one the card can honour.
    #[rstest]
    #[case::capped(true, 23)]
    #[case::uncapped(false, 40)]
    fn an_empty_card_admits_a_trial_too_large_for_it_with_what_it_has(
        #[case] caps: bool,
        #[case] admitted: u64,
    ) {
        let mut s = Snap::new(&[40], vec![card(0, 24 * G)]);
        s.caps = caps;
        let a = s.decide(Instant::now());
        let (k, p) = a.start.expect("always one on an empty card");
        let p = p.unwrap();
        assert_eq!((k, p.estimate.bytes, p.admitted), (0, 40 * G, admitted * G));
        // Where it fits, its estimate either way.
        let mut s = Snap::new(&[4], vec![card(0, 24 * G)]);
        s.caps = caps;
        let (_, p) = s.decide(Instant::now()).start.unwrap();
        assert_eq!(p.unwrap().admitted, 4 * G);
    }

    #[rstest]
    // 9 GiB usable (10 free, 1 of headroom) beside one trial of ours.
    #[case::the_head_fits(&[4, 2], Some((0, Some(0))), false)]
    #[case::a_small_trial_passes_a_head_that_waits_for_room(&[16, 2], Some((1, Some(0))), true)]
    #[case::of_those_behind_the_largest_that_fits(&[16, 2, 6, 8, 12], Some((3, Some(0))), true)]
    #[case::nothing_fits(&[16, 12], None, true)]
    fn a_candidate_starts_where_it_fits_the_head_first(
        #[case] xs: &[i64],
        #[case] expected: Option<(usize, Option<u32>)>,
        #[case] head_waits: bool,
    ) {
        let mut s = Snap::new(xs, vec![card(0, 10 * G)]);
        s.running = vec![running(1, 0, 4 * G)];
        let a = s.decide(Instant::now());
        assert_eq!(started(&a), expected);
        assert_eq!(a.head_waits.is_some(), head_waits);
        assert!(!a.priority);
        assert_eq!(a.head_estimate.map(|e| e.bytes), Some(xs[0] as u64 * G));
        assert_eq!(
            a.look_further,
            expected.is_none(),
            "none fits: draw one more"
        );
    }

    #[test]
    fn without_gpus_the_head_starts() {
        let mut s = Snap::new(&[16, 2], Vec::new());
        s.gpu = false;
        let a = s.decide(Instant::now());
        assert_eq!(started(&a), Some((0, None)));
        assert_eq!(a.head_estimate, None);
    }

    #[rstest]
    // Passed 15 times, the head has no priority yet: a trial behind it starts in the room.
    #[case::passed_fifteen_times(15, 0, 1, &[12, 2], Some((1, Some(0))), None, 15)]
    // Passed 16 times, one behind it starts only within what the head leaves once the trials
    // running now end: 10 free + 4 used by ours − 1 headroom − 12 for the head = 1 GiB.
    #[case::passed_sixteen_times(16, 0, 1, &[12, 2], None, Some((0, 12)), 16)]
    #[case::within_what_the_head_leaves(16, 0, 1, &[12, 1], Some((1, Some(0))), Some((0, 12)), 16)]
    // Others' starts pass it too.
    #[case::passed_by_the_other_daemons(10, 6, 1, &[12, 2], None, Some((0, 12)), 16)]
    // A study that runs nothing is starved by the first start of another daemon.
    #[case::starved_outright(0, 1, 0, &[30, 2], None, Some((0, 30)), 16)]
    #[case::not_starved_without_their_starts(0, 0, 0, &[30, 2], Some((1, Some(0))), None, 0)]
    fn a_head_passed_too_often_gets_priority_and_holds_its_memory(
        #[case] passed: u32,
        #[case] by_others: u32,
        #[case] ours_running: usize,
        #[case] xs: &[i64],
        #[case] expected: Option<(usize, Option<u32>)>,
        #[case] hold: Option<(u32, u64)>,
        #[case] head_passes: u32,
    ) {
        let mut s = Snap::new(xs, vec![card(0, 10 * G)]);
        // Another daemon runs a trial there (no "always one" for an empty card).
        s.views[0].others_running = 1;
        s.line = line(xs, passed);
        s.by_others = by_others;
        s.running = (0..ours_running)
            .map(|i| running(i as i64 + 1, 0, 4 * G))
            .collect();
        let a = s.decide(Instant::now());
        assert_eq!(started(&a), expected);
        assert_eq!(a.hold, hold.map(|(d, gib)| (d, gib * G)));
        assert_eq!(a.priority, hold.is_some());
        assert_eq!(a.head_passes, head_passes);
    }

    #[test]
    fn a_head_with_trials_beside_it_keeps_its_priority_until_it_starts() {
        let mut s = Snap::new(&[12, 1], vec![card(0, 10 * G)]);
        s.running = vec![running(1, 0, 4 * G), running(2, 0, G)];
        // Trial 2 started beside the head: it counts against the room the head leaves.
        s.beside = Some([2].into());
        let a = s.decide(Instant::now());
        assert!(a.priority, "kept without being passed again");
        // 10 free + 5 used − 1 − 12 for the head − 1 (trial 2) = 1 GiB.
        assert_eq!(started(&a), Some((1, Some(0))));
        s.running[1].used_now = 2 * G;
        s.running[1].expected_peak = 2 * G;
        s.views[0].free = 9 * G;
        assert_eq!(started(&s.decide(Instant::now())), None, "trial 2 grew");
    }

    #[rstest]
    #[case::room_for_both(Some(2), Some((1, Some(0))))]
    #[case::the_last_start_is_the_enqueued_trials(Some(1), None)]
    #[case::no_budget(None, Some((1, Some(0))))]
    fn a_candidate_does_not_pass_an_enqueued_trial_with_its_start(
        #[case] room: Option<u64>,
        #[case] expected: Option<(usize, Option<u32>)>,
    ) {
        let mut s = Snap::new(&[], vec![card(0, 10 * G)]);
        s.line.push_back(waiting(7, 16));
        s.line.push_back(new(2));
        s.running = vec![running(1, 0, 4 * G)];
        s.room = room;
        assert_eq!(started(&s.decide(Instant::now())), expected);
    }

    #[test]
    fn an_admitted_trial_reuses_an_idle_worker_there_and_retires_one_to_stay_within_max_par() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        // Card 1 is full (a trial of ours runs there) but for what our idle worker 8 holds;
        // card 0 has room.
        let mut s = Snap::new(&[4], vec![card(0, 20 * G), card(1, 0)]);
        s.running = vec![running(1, 1, 20 * G)];
        s.views[1].idle = 2 * G;
        s.views[1].idle_workers = 1;
        s.idle = vec![idle(8, 1, 2 * G, t0)];
        s.max_par = 2;
        let a = s.decide(later);
        let (k, p) = a.start.clone().unwrap();
        let p = p.unwrap();
        assert_eq!((k, p.device), (0, 0));
        // No idle worker on card 0 to reuse: the trial starts one, and with max_par 2 (one
        // running, one idle) the idle worker on card 1 goes.
        assert_eq!(p.reclaim.reuse, None);
        assert_eq!(p.reclaim.retire, [8]);
        // With max_par 3 it stays.
        s.max_par = 3;
        let p = s.decide(later).start.unwrap().1.unwrap();
        assert!(p.reclaim.retire.is_empty());
        // An idle worker on the card it fits: it runs there, on that worker.
        let mut s = Snap::new(&[4], vec![card(0, 20 * G)]);
        s.views[0].idle = 2 * G;
        s.views[0].idle_workers = 1;
        s.idle = vec![idle(8, 0, 2 * G, t0)];
        let p = s.decide(later).start.unwrap().1.unwrap();
        assert_eq!((p.reclaim.reuse, p.reclaim.retire.len()), (Some(8), 0));
    }

    #[test]
    fn a_head_that_waits_asks_the_other_daemons_for_what_their_idle_workers_hold() {
        let mut s = Snap::new(&[16], vec![card(0, 10 * G)]);
        s.running = vec![running(1, 0, 4 * G)];
        s.views[0].others_idle = 8 * G;
        let a = s.decide(Instant::now());
        assert_eq!(started(&a), None);
        let asked = a.asking.expect("a request");
        // It lacks 16 − 9 GiB.
        assert_eq!((asked.device, asked.want), (0, 7 * G));
        // Their idle workers hold too little: nothing to ask.
        s.views[0].others_idle = 6 * G;
        assert_eq!(s.decide(Instant::now()).asking, None);
    }

    #[test]
    fn a_waiting_candidate_in_line_is_not_a_new_one() {
        let l = {
            let mut l = Line::default();
            l.push_back(waiting(3, 1));
            l
        };
        assert!(l.head().is_some_and(Candidate::is_waiting));
    }
}
