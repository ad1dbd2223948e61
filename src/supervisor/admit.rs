//! GPU admission, the `Core`'s: which device a candidate may start on now, and with which of
//! our idle workers.
//!
//! An admission round (`Core::round`) decides from the latest NVML readings (devices whose
//! reading failed or that are quarantined left out), what our idle workers hold (`pool`: ours to
//! take back) and what the other daemons on this host have yet to claim (the host's ledger,
//! locked from reading theirs until ours are written by `Core::write_claims`, so that two
//! daemons never decide on the same free memory). `Core::admit` asks the memory model for the
//! candidate's estimate and `gpu::Capacity` for a device with room and the idle workers the
//! trial reuses or retires. The rules are `gpu::admission`'s; this file gathers what they
//! decide from and keeps the ledger current.

use super::core::Core;
use crate::gpu::admission::{DeviceView, RunningTrial, Wait};
use crate::gpu::ledger::{self, Claims, Held, Owner, Request};
use crate::gpu::peak_log::Shared;
use crate::gpu::{
    Capacity, Decision, Estimate, IdleWorker, Ledger, MemoryModel, Monitor, PeakLog, Reclaim,
};
use crate::study::{Params, SearchSpace};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;
use tracing::{error, info, warn};

/// The GPU side of the decision: readings, admission and the memory model.
pub(super) struct GpuCtl {
    pub(super) monitor: Arc<Monitor>,
    pub(super) capacity: Capacity,
    pub(super) model: MemoryModel,
    /// The estimate for the trial at the head of the admission line, for `sweepd gpus`.
    pub(super) next_expected: Option<Estimate>,
    /// Devices whose readings are failing (logged once, when they start failing).
    pub(super) failing: std::collections::HashSet<u32>,
    /// The host's ledger, shared with the other daemons on it (`None`: it could not be opened,
    /// and this daemon counts only its own trials).
    pub(super) ledger: Option<Ledger>,
    /// The ledger failed (said once, until it works again).
    pub(super) ledger_failing: bool,
    /// The peaks measured by the other studies on this host of our `[gpu] memory_group`
    /// (`gpu::peak_log`): our measured trials go out through it, theirs come in before each
    /// round. `None`: not shared (no group, no ledger, or it failed, said once).
    pub(super) peak_log: Option<PeakLog>,
    /// Our running trials whose settled level went out through `peak_log` (their end then
    /// goes out too, peak or not).
    pub(super) levels_shared: BTreeSet<i64>,
    /// The other studies' running trials settled at a level, by `peak_log`'s key: measured at
    /// that level, as our own settled trials are, until their peak or their end comes in, or
    /// the daemon that runs them (the third field, where its line names it) is gone.
    pub(super) neighbour_levels: BTreeMap<i64, (Params, u64, Option<Owner>)>,
    /// What our waiting trial asks the other daemons' idle workers for (written to the ledger).
    pub(super) asking: Option<Request>,
    /// What the other daemons ask of our idle workers, as of the latest reading of the
    /// ledger (housekeeping answers them, `GpuCtl::answer_requests`).
    pub(super) asked: ledger::Answers,
    /// Trials we started per device, written to the ledger: the other daemons count them as
    /// passing their waiting trials.
    pub(super) started: BTreeMap<u32, u64>,
    /// The head of our line as first seen waiting, and how many trials the other daemons had
    /// started then: those they start after pass it (`Core::passes_by_others`).
    pub(super) head_watch: Option<(Params, u64)>,
    /// What our head, passed too often, holds back from the other daemons (written to the
    /// ledger; the others honour it as a claim until it starts).
    pub(super) hold: Option<Holding>,
    /// The other daemons' holds we honour (pid, since), each said once in the log.
    pub(super) honoured: BTreeSet<(u32, u64)>,
    /// The head of our line, passed too often, and our trials started beside it since
    /// (`Capacity::backfill_room`): they count against the room it leaves until it starts, and
    /// it keeps its priority until then (`Core::started_beside_head`).
    pub(super) beside_head: Option<(Params, BTreeSet<i64>)>,
}

impl GpuCtl {
    /// What is still to free per device for the other daemons' requests not answered yet,
    /// against our latest reading; they count as answered from now on.
    pub(super) fn answer_requests(&mut self) -> BTreeMap<u32, u64> {
        let (views, _, _) = self.monitor.views();
        self.asked
            .answer(|d| views.iter().find(|v| v.index == d).map(|v| v.free))
    }

    /// Our trials started beside `head`, the head of our line, while it had priority (`None`:
    /// none since it became the head).
    pub(super) fn beside(&self, head: &Params) -> Option<&BTreeSet<i64>> {
        self.beside_head
            .as_ref()
            .filter(|(p, _)| p == head)
            .map(|(_, trials)| trials)
    }

    /// Takes in what the other studies of our group appended since the last call: their
    /// measured peaks, and their running trials' settled levels until those end. Returns how
    /// many of their trials ended with a peak in what came in, and how many now run at a level.
    pub(super) fn learn_from_neighbours(&mut self, space: &SearchSpace) -> (usize, usize) {
        let Some(log) = &mut self.peak_log else {
            return (0, 0);
        };
        let read = match log.read_new(space) {
            Ok(read) => read,
            Err(e) => {
                self.peak_log_failed(&e);
                return (0, 0);
            }
        };
        if read.bad > 0 {
            warn!(
                file = %log.path().display(),
                "{} lines of the shared peaks did not read back through this study's params; skipped",
                read.bad
            );
        }
        let mut ended = 0;
        for trial in read.trials {
            match trial {
                Shared::Peak { key, params, peak } => {
                    if let Some(key) = key {
                        self.neighbour_levels.remove(&key);
                    }
                    self.model.record(&params, peak);
                    ended += 1;
                }
                Shared::Level {
                    key,
                    params,
                    level,
                    by,
                } => {
                    self.neighbour_levels.insert(key, (params, level, by));
                }
                Shared::Ended { key } => {
                    self.neighbour_levels.remove(&key);
                }
            }
        }
        // A daemon killed or crashed never wrote its trials' ends.
        let before = self.neighbour_levels.len();
        self.neighbour_levels
            .retain(|_, (_, _, by)| by.is_none_or(|o| o.alive()));
        let gone = before - self.neighbour_levels.len();
        if gone > 0 {
            info!(
                "{gone} running trials of the other studies of this memory_group no longer count \
                 at their level: the daemon that ran them is gone"
            );
        }
        (ended, self.neighbour_levels.len())
    }

    /// Shares the level our running trial `trial` has settled at, once.
    pub(super) fn share_level(
        &mut self,
        space: &SearchSpace,
        trial: i64,
        params: &Params,
        level: u64,
    ) {
        let Some(log) = &self.peak_log else { return };
        if self.levels_shared.insert(trial) {
            if let Err(e) = log.level(space, trial, params, level) {
                self.peak_log_failed(&e);
            }
        }
    }

    /// Shares how our trial `trial` ended: its measured peak, or (where its level went out)
    /// that it ended without one.
    pub(super) fn share_end(
        &mut self,
        space: &SearchSpace,
        trial: i64,
        params: &Params,
        peak: Option<u64>,
    ) {
        let leveled = self.levels_shared.remove(&trial);
        let Some(log) = &self.peak_log else { return };
        let written = match peak {
            Some(peak) => log.peak(space, trial, params, peak),
            None if leveled => log.ended(trial),
            None => Ok(()),
        };
        if let Err(e) = written {
            self.peak_log_failed(&e);
        }
    }

    fn peak_log_failed(&mut self, e: &std::io::Error) {
        if let Some(log) = self.peak_log.take() {
            warn!(
                file = %log.path().display(),
                "peaks no longer shared with the other studies of this memory_group on this host: {e}"
            );
        }
    }
}

/// Our head's hold on a device: the bytes it needs there, since when (milliseconds since the
/// epoch, the order the daemons honour holds in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holding {
    pub(super) device: u32,
    pub(super) bytes: u64,
    pub(super) since_ms: u64,
}

/// Where a trial admitted on a GPU runs: its device, its estimate, and what it does with our
/// idle workers there.
pub(super) struct Placement {
    pub(super) device: u32,
    pub(super) estimate: Estimate,
    pub(super) reclaim: Reclaim,
}

/// What one admission round decides from: the usable devices as last read, with our idle
/// workers' memory and the other daemons' claims added; our running trials; our idle workers;
/// and the ledger, locked until our claims (with the trial admitted, if any) are written.
pub(super) struct Round {
    pub(super) views: Vec<DeviceView>,
    pub(super) running: Vec<RunningTrial>,
    pub(super) idle: Vec<IdleWorker>,
    pub(super) ledger: Option<ledger::Locked>,
    /// How many trials the other daemons have started, on every device (`None`: no ledger).
    pub(super) others_started: Option<u64>,
}

impl Core {
    /// What an admission round decides from (`None` without GPUs): the devices as last read,
    /// those whose reading failed or that are quarantined left out, with our idle workers'
    /// memory and the other daemons' claims; the ledger stays locked until `write_claims`.
    pub(super) fn round(&mut self, now: Instant) -> Option<Round> {
        let g = self.gpu.as_mut()?;
        g.learn_from_neighbours(&self.settings.get().space);
        let (mut views, running, errors, groups) = g.monitor.views_and_groups();
        // Trials admitted before the model could predict them settle once it can.
        let (live, model) = (&self.live, &mut g.model);
        g.monitor.predict_missing(|id| {
            live.get(&id)
                .map_or(0, |l| model.estimate(&l.params).predicted)
        });
        // And the model learns from those that have settled before they end (none once the
        // study's trials are no longer taken at their level), and from the other studies' of
        // our memory group.
        let settled: Vec<(i64, &Params, u64)> = running
            .iter()
            .filter(|t| t.settled)
            .filter_map(|t| {
                live.get(&t.trial_id)
                    .map(|l| (t.trial_id, &l.params, t.used_now))
            })
            .collect();
        model.running(
            settled.iter().copied().chain(
                g.neighbour_levels
                    .iter()
                    .map(|(key, (params, level, _))| (*key, params, *level)),
            ),
        );
        for (trial, params, level) in settled {
            g.share_level(&self.settings.get().space, trial, params, level);
        }
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
        views.retain(|v| self.breaker.quarantined(Some(v.index), now).is_none());
        let idle = self.pool.views(&g.monitor);
        for v in &mut views {
            for w in idle.iter().filter(|w| w.device == v.index) {
                v.idle = v.idle.saturating_add(w.memory);
                v.idle_workers += 1;
            }
        }
        let mut others_started = None;
        if let Some(l) = &g.ledger {
            l.know_totals(views.iter().map(|v| (v.index, v.total)));
        }
        let ledger = match g.ledger.as_ref().map(Ledger::lock) {
            None => None,
            Some(Ok(locked)) => {
                g.ledger_failing = false;
                Some(locked)
            }
            Some(Err(e)) => {
                if !g.ledger_failing {
                    g.ledger_failing = true;
                    error!("the GPU ledger shared with other daemons cannot be read ({e}); admitting as if this daemon were alone on its GPUs until it can");
                }
                None
            }
        };
        if let Some(l) = &ledger {
            let others = l.others();
            others_started = Some(others.values().map(|c| c.started).sum());
            for v in &mut views {
                if let Some(c) = others.get(&v.index) {
                    // Against the reading `free` comes from, not the one each daemon wrote by.
                    let used = |g: i32| groups.get(&(v.index, g)).copied().unwrap_or(0);
                    v.others = c.against(used);
                    v.others_used = c.used_by(used);
                    v.others_running = c.running;
                    v.others_idle = c.idle;
                }
            }
            // The other daemons' holds older than ours on a device: memory their starved
            // trials wait for, which we leave free (see `gpu::ledger`).
            let mut honoured = BTreeSet::new();
            for h in l.holds() {
                let mine = g
                    .hold
                    .filter(|m| m.device == h.device)
                    .map(|m| (m.since_ms, l.me()));
                if let Some(v) = views.iter_mut().find(|v| v.index == h.device) {
                    if h.before(mine) {
                        v.others = v.others.saturating_add(h.bytes);
                        v.held = v.held.saturating_add(h.bytes);
                        let key = (h.since.1.pid, h.since.0);
                        if !g.honoured.contains(&key) {
                            info!(
                                gpu = h.device,
                                "leaving {} free for a trial of the sweepd daemon with pid {} on this host, which others have passed too often",
                                crate::gpu::fmt_gib(h.bytes),
                                h.since.1.pid
                            );
                        }
                        honoured.insert(key);
                    }
                }
            }
            g.honoured = honoured;
            g.asked.take(l.requests());
        }
        Some(Round {
            views,
            running,
            idle,
            ledger,
            others_started,
        })
    }

    /// Where a trial with `params` may start now: `Ok(None)` without GPUs, `Ok(Some(placement))`
    /// when a device has room, or why each device waits. `beside_head`: the trial would start
    /// past the head of the line, which has priority and is expected at these bytes, so a
    /// device takes it only within the room the head leaves there (`Capacity::backfill_room`).
    pub(super) fn admit(
        &mut self,
        round: Option<&Round>,
        params: &Params,
        hint: Option<u32>,
        beside_head: Option<u64>,
        now: Instant,
    ) -> Result<Option<Placement>, Vec<Decision>> {
        let (Some(g), Some(round)) = (&mut self.gpu, round) else {
            return Ok(None);
        };
        let estimate = g.model.estimate(params);
        let e = estimate.bytes;
        let head = self.pending.front().map(|(head, _)| head.params());
        if head == Some(params) {
            g.next_expected = Some(estimate.clone());
        }
        let mut decisions: Vec<Decision> = round
            .views
            .iter()
            .map(|v| g.capacity.decide(v, &round.running, e, now))
            .collect();
        if let (Some(head), Some(needs)) = (head, beside_head) {
            let beside = g.beside(head);
            for (d, v) in decisions.iter_mut().zip(&round.views) {
                let backfilled = |id| beside.is_some_and(|t| t.contains(&id));
                d.admitted &= e
                    <= g.capacity
                        .backfill_room(v, &round.running, needs, backfilled, now);
            }
        }
        // The slot's own device first (its worker waits idle there), then one with an idle
        // worker (no worker to start), then the most room left.
        let Some(pick) = decisions.iter().filter(|d| d.admitted).max_by_key(|d| {
            let has_idle = round.idle.iter().any(|w| w.device == d.device);
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
        let view = round
            .views
            .iter()
            .find(|v| v.index == device)
            .expect("decided from these views");
        let mut reclaim = g
            .capacity
            .reclaim(view, &round.running, e, &round.idle, now);
        // A trial that starts a worker keeps our workers within max_par: the least recently
        // used idle one goes, wherever it is.
        if reclaim.reuse.is_none() {
            let live =
                (self.running as usize + round.idle.len()).saturating_sub(reclaim.retire.len());
            if live >= self.settings.get().worker.max_par {
                if let Some(w) = round
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

    /// How many trials the other daemons on this host started since the head of our line was
    /// first seen waiting: they passed it as much as the trials behind it in our own line that
    /// started first (0 without GPUs or a ledger, or for a new head).
    pub(super) fn passes_by_others(&mut self, round: Option<&Round>) -> u32 {
        let (Some(g), Some((head, _))) = (&mut self.gpu, self.pending.front()) else {
            return 0;
        };
        let Some(now) = round.and_then(|r| r.others_started) else {
            return 0;
        };
        match &g.head_watch {
            Some((params, then)) if params == head.params() => {
                u32::try_from(now.saturating_sub(*then)).unwrap_or(u32::MAX)
            }
            _ => {
                g.head_watch = Some((head.params().clone(), now));
                0
            }
        }
    }

    /// Whether trials of ours started beside the head of our line, which then keeps its
    /// priority until it starts: a study the other daemons starved (`policy::starved`) runs
    /// trials again once some start beside its head, and its head must not lose the priority,
    /// and its hold, to them.
    pub(super) fn started_beside_head(&self) -> bool {
        match (&self.gpu, self.pending.front()) {
            (Some(g), Some((head, _))) => g.beside(head.params()).is_some(),
            _ => false,
        }
    }

    /// Our hold after a round: the head waited for memory (`waits`: why on each device) with
    /// priority (`priority`: after being passed that many times in all, `policy::head_passes`;
    /// `by_others` of them by the other daemons), so it asks the other daemons to leave what it
    /// needs free on the device closest to fitting it; otherwise none, and a head that started
    /// is watched no more.
    pub(super) fn hold_for_head(
        &mut self,
        waits: Option<&[Decision]>,
        started: bool,
        priority: Option<u32>,
        by_others: u32,
    ) {
        let running = self.running;
        let Some(g) = &mut self.gpu else { return };
        if started {
            g.head_watch = None;
        }
        let wanted = waits
            .filter(|_| priority.is_some())
            .and_then(|d| {
                // Only memory the others can leave free: a device where our own trials fill
                // max_par_per_device waits for them, not for the others.
                d.iter()
                    .filter(|d| matches!(d.wait, Some(Wait::Memory { .. })))
                    .max_by_key(|d| (d.usable, Reverse(d.device)))
            })
            .zip(self.pending.front())
            .map(|(d, (c, _))| (d.device, g.model.expected(c.params())));
        let (Some((device, bytes)), Some(passes)) = (wanted, priority) else {
            g.hold = None;
            return;
        };
        if g.hold.is_none() {
            let passed = if super::policy::starved(by_others, running) {
                format!(
                    "passed by {by_others} {} of other daemons while this study runs none",
                    if by_others == 1 { "trial" } else { "trials" }
                )
            } else {
                format!("passed by {passes} trials")
            };
            info!(
                gpu = device,
                "the trial at the head of the line, {passed}, asks the other daemons on this host to leave {} free for it",
                crate::gpu::fmt_gib(bytes)
            );
        }
        // The same head keeps its place among the holds when its estimate moves.
        let since_ms = match g.hold {
            Some(h) if h.device == device => h.since_ms,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        g.hold = Some(Holding {
            device,
            bytes,
            since_ms,
        });
    }

    /// What our running trials have yet to claim per device, how many run there, what our
    /// idle workers hold there, what our waiting trial asks for, how many trials we started
    /// there and what our head holds.
    fn my_claims(g: &GpuCtl, idle: &[IdleWorker]) -> Claims {
        let (monitor, asking) = (&g.monitor, g.asking);
        let mut mine = Claims::new();
        for t in monitor.views().1 {
            let c = mine.entry(t.device).or_default();
            c.unclaimed = c.unclaimed.saturating_add(t.unclaimed());
            c.running += 1;
            c.trials.get_or_insert_with(Vec::new).push(Held {
                pgid: t.pgid.unwrap_or(0),
                bound: t.used_now.saturating_add(t.unclaimed()),
            });
        }
        for w in idle {
            let c = mine.entry(w.device).or_default();
            c.idle = c.idle.saturating_add(w.memory);
        }
        if let Some(r) = asking {
            let c = mine.entry(r.device).or_default();
            c.want = r.want;
            c.seen = r.seen;
        }
        for (device, n) in &g.started {
            mine.entry(*device).or_default().started = *n;
        }
        if let Some(h) = g.hold {
            let c = mine.entry(h.device).or_default();
            c.hold = h.bytes;
            c.hold_since = h.since_ms;
        }
        mine
    }

    /// Our waiting trial's request for the other daemons' idle memory, from the decisions that
    /// made the head of the line wait (`None`: it was admitted, or asks for nothing), written
    /// to the ledger with our claims until the next admission round decides again.
    pub(super) fn ask(&mut self, round: Option<&Round>, head: Option<&[Decision]>) {
        let Some(g) = &mut self.gpu else { return };
        g.asking = match (round, head) {
            (Some(r), Some(d)) => g.capacity.request(&r.views, d),
            _ => None,
        };
    }

    /// Writes our claims to the locked ledger (with `new`, a trial just admitted and not yet
    /// tracked), which releases it.
    pub(super) fn write_claims(&mut self, locked: Option<ledger::Locked>, new: Option<&Placement>) {
        let (Some(locked), Some(g)) = (locked, &mut self.gpu) else {
            return;
        };
        let idle = self.pool.views(&g.monitor);
        if let Some(p) = new {
            *g.started.entry(p.device).or_default() += 1;
        }
        let mut mine = Self::my_claims(g, &idle);
        if let Some(p) = new {
            let c = mine.entry(p.device).or_default();
            c.unclaimed = c.unclaimed.saturating_add(p.estimate.bytes);
            c.running += 1;
            c.trials.get_or_insert_with(Vec::new).push(Held {
                pgid: 0,
                bound: p.estimate.bytes,
            });
        }
        if let Err(e) = locked.write(&mine) {
            if !g.ledger_failing {
                g.ledger_failing = true;
                warn!("could not write the GPU ledger shared with other daemons: {e}");
            }
        }
    }

    /// Brings our entry in the ledger up to date (trials ended, or claimed their memory).
    pub(super) fn refresh_claims(&mut self) {
        let ledger = self.gpu.as_ref().and_then(|g| g.ledger.as_ref());
        let locked = match ledger.map(Ledger::lock) {
            Some(Ok(l)) => Some(l),
            _ => None,
        };
        self.write_claims(locked, None);
    }
}
