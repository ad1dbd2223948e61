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
use crate::study::{Params, Tally};
use crate::supervisor::policy;
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What [`gate`] decides from.
pub(in crate::supervisor) struct GateFacts<'a> {
    /// Shutdown was asked (or another slot failed).
    pub(in crate::supervisor) stopping: bool,
    pub(in crate::supervisor) state: &'a RunState,
    /// Since the daemon started, and `[study] timeout`.
    pub(in crate::supervisor) elapsed: Duration,
    pub(in crate::supervisor) timeout: Option<Duration>,
    /// `[study] n_trials`, and the study's trials as last read.
    pub(in crate::supervisor) n_trials: Option<u64>,
    pub(in crate::supervisor) tally: &'a Tally,
    /// The tally was read from the database for this decision.
    pub(in crate::supervisor) refreshed: bool,
    /// Every device is quarantined by the breaker.
    pub(in crate::supervisor) paused: bool,
}

/// What [`gate`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Whether a start is considered at all: not once the study stops (shutdown, halted, its
/// timeout, its budget spent by whoever spent it), not while the running trials hold every
/// start left or every device is quarantined.
pub(in crate::supervisor) fn gate(f: &GateFacts) -> Gate {
    if f.stopping {
        return Gate::No(NoStart::Stop(Stop::Shutdown));
    }
    if matches!(f.state, RunState::Halted { .. }) {
        return Gate::No(NoStart::Stop(Stop::Halted));
    }
    if f.timeout.is_some_and(|t| f.elapsed >= t) {
        return Gate::No(NoStart::Stop(Stop::Timeout));
    }
    let mut new = true;
    if let Some(n) = f.n_trials {
        if !f.tally.room_for_new(Some(n)) {
            if !f.refreshed {
                return Gate::Refresh;
            }
            if f.tally.finished >= n {
                return Gate::No(NoStart::Stop(Stop::BudgetSpent));
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
    pub(in crate::supervisor) reclaim: Reclaim,
}

/// The GPU side of an admission snapshot: the usable devices as last read (our idle workers'
/// memory and the other daemons' claims added), our running trials and idle workers, and
/// what the memory model expects of a candidate.
pub(in crate::supervisor) struct Devices<'a> {
    pub(in crate::supervisor) capacity: &'a Capacity,
    pub(in crate::supervisor) views: &'a [DeviceView],
    pub(in crate::supervisor) running: &'a [RunningTrial],
    pub(in crate::supervisor) idle: &'a [IdleWorker],
    /// Our trials started beside the head of the line while it had priority (`None`: none
    /// since it became the head).
    pub(in crate::supervisor) beside: Option<&'a BTreeSet<i64>>,
    /// `[worker] max_par`: our workers, busy and idle, stay within it.
    pub(in crate::supervisor) max_par: usize,
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
        .map(|v| cap.decide(v, g.running, e, now))
        .collect();
    if let Some(needs) = beside_head {
        for (d, v) in decisions.iter_mut().zip(g.views) {
            let backfilled = |id| g.beside.is_some_and(|t| t.contains(&id));
            d.admitted &= e <= cap.backfill_room(v, g.running, needs, backfilled, now);
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
    let view = g
        .views
        .iter()
        .find(|v| v.index == device)
        .expect("decided from these views");
    let mut reclaim = cap.reclaim(view, g.running, e, g.idle, now);
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
        reclaim,
    }))
}
