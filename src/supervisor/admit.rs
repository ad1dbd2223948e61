//! The GPU side of the core (`GpuCtl`): what an admission decision is made from, and what it
//! leaves behind for the other daemons on the host.
//!
//! An admission round (`GpuCtl::round`) gathers the latest NVML readings (devices whose
//! reading failed or that are quarantined left out), what our idle workers hold (`pool`: ours
//! to take back) and what the other daemons on this host have yet to claim (the host's ledger,
//! locked from reading theirs until ours are written by `GpuCtl::write_claims`, so that two
//! daemons never decide on the same free memory). The decision itself is `decide::admit_line`'s
//! (with `gpu::admission`'s rules); this file gathers what it decides from, keeps the ledger
//! current (our claims, our head's request and hold), and shares our measured peaks with the
//! other studies of our memory group.

use super::decide::Placement;
use super::policy::{self, Breaker};
use super::suggest::Live;
use crate::gpu::admission::{DeviceView, RunningTrial};
use crate::gpu::ledger::{self, Claims, Held, Owner, Request};
use crate::gpu::peak_log::Shared;
use crate::gpu::{Capacity, Estimate, IdleWorker, Ledger, MemoryModel, Monitor, PeakLog};
use crate::study::{Params, SearchSpace};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    failing: std::collections::HashSet<u32>,
    /// The host's ledger, shared with the other daemons on it (`None`: it could not be opened,
    /// and this daemon counts only its own trials).
    pub(super) ledger: Option<Ledger>,
    /// The ledger failed (said once, until it works again).
    ledger_failing: bool,
    /// The peaks measured by the other studies on this host of our `[gpu] memory_group`
    /// (`gpu::peak_log`): our measured trials go out through it, theirs come in before each
    /// round. `None`: not shared (no group, no ledger, or it failed, said once).
    peak_log: Option<PeakLog>,
    /// Our running trials whose settled level went out through `peak_log` (their end then
    /// goes out too, peak or not).
    levels_shared: BTreeSet<i64>,
    /// The other studies' running trials settled at a level, by `peak_log`'s key: measured at
    /// that level, as our own settled trials are, until their peak or their end comes in, or
    /// the daemon that runs them (the third field, where its line names it) is gone.
    neighbour_levels: BTreeMap<i64, (Params, u64, Option<Owner>)>,
    /// What our waiting trial asks the other daemons' idle workers for (written to the ledger).
    asking: Option<Request>,
    /// What the other daemons ask of our idle workers, as of the latest reading of the
    /// ledger (housekeeping answers them, `GpuCtl::answer_requests`).
    asked: ledger::Answers,
    /// Trials we started per device, written to the ledger: the other daemons count them as
    /// passing their waiting trials.
    started: BTreeMap<u32, u64>,
    /// The head of our line as first seen waiting, and how many trials the other daemons had
    /// started then: those they start after pass it (`GpuCtl::passes_by_others`).
    head_watch: Option<(Params, u64)>,
    /// What our head, passed too often, holds back from the other daemons (written to the
    /// ledger; the others honour it as a claim until it starts).
    hold: Option<Holding>,
    /// The other daemons' holds we honour (pid, since), each said once in the log.
    honoured: BTreeSet<(u32, u64)>,
    /// The head of our line, passed too often, and our trials started beside it since
    /// (`Capacity::backfill_room`): they count against the room it leaves until it starts, and
    /// it keeps its priority until then (`GpuCtl::beside`).
    beside_head: Option<(Params, BTreeSet<i64>)>,
}

impl GpuCtl {
    /// The GPU side of a daemon that schedules on `monitor`'s devices, sharing the host's
    /// `ledger` and its memory group's `peak_log` where it has them.
    pub(super) fn new(
        monitor: Arc<Monitor>,
        capacity: Capacity,
        model: MemoryModel,
        ledger: Option<Ledger>,
        peak_log: Option<PeakLog>,
    ) -> GpuCtl {
        GpuCtl {
            monitor,
            capacity,
            model,
            next_expected: None,
            failing: Default::default(),
            ledger,
            ledger_failing: false,
            peak_log,
            levels_shared: Default::default(),
            neighbour_levels: Default::default(),
            asking: None,
            asked: Default::default(),
            started: Default::default(),
            head_watch: None,
            hold: None,
            honoured: Default::default(),
            beside_head: None,
        }
    }

    /// The file of peaks shared with our memory group, where there is one.
    pub(super) fn peak_log(&self) -> Option<&PeakLog> {
        self.peak_log.as_ref()
    }

    /// Whether our head holds memory back from the other daemons on the host, whose trials'
    /// ends free it without waking our slots (`Next::Wait::soon`).
    pub(super) fn holding(&self) -> bool {
        self.hold.is_some()
    }

    /// The other daemons' requests for our idle workers' memory, as the ledger now shows them.
    pub(super) fn take_requests(&mut self, requests: Vec<Request>) {
        self.asked.take(requests);
    }

    /// How many trials the other daemons on the host run on `device` (0 without a ledger, or
    /// where it cannot be read).
    pub(super) fn others_running(&self, device: u32) -> usize {
        match self.ledger.as_ref().map(Ledger::lock) {
            Some(Ok(l)) => l.others().get(&device).map_or(0, |c| c.running),
            _ => 0,
        }
    }

    /// Our trial `trial` started from place `k` in line: `beside` `head`, the head of our line,
    /// while it had priority (it then counts against the room the head leaves); or, from the
    /// head (`k` 0), the trials started beside it count no more.
    pub(super) fn started_in_line(
        &mut self,
        head: Option<&Params>,
        trial: i64,
        beside: bool,
        k: usize,
    ) {
        match (beside, head) {
            (true, Some(head)) => {
                let trials = match &mut self.beside_head {
                    Some((p, trials)) if p == head => trials,
                    other => &mut other.insert((head.clone(), Default::default())).1,
                };
                trials.insert(trial);
            }
            _ if k == 0 => self.beside_head = None,
            _ => {}
        }
    }

    /// What is still to free per device for the other daemons' requests not answered yet,
    /// against our latest reading; they count as answered from now on.
    pub(super) fn answer_requests(&mut self) -> BTreeMap<u32, u64> {
        let (views, _, _) = self.monitor.views();
        self.asked
            .answer(|d| views.iter().find(|v| v.index == d).map(|v| v.free))
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

impl GpuCtl {
    /// What an admission round decides from: the devices as last read, those whose reading
    /// failed or that the `breaker` quarantines left out, with our `idle` workers' memory and
    /// the other daemons' claims; the ledger stays locked until `write_claims`. The memory model
    /// first takes in the levels our settled running trials (`live`) and the other studies of
    /// our memory group run at.
    pub(super) fn round(
        &mut self,
        space: &SearchSpace,
        live: &HashMap<i64, Live>,
        breaker: &Breaker,
        idle: Vec<IdleWorker>,
        now: Instant,
    ) -> Round {
        self.learn_from_neighbours(space);
        let (mut views, running, errors, groups) = self.monitor.views_and_groups();
        // Trials admitted before the model could predict them settle once it can.
        let model = &mut self.model;
        self.monitor.predict_missing(|id| {
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
                self.neighbour_levels
                    .iter()
                    .map(|(key, (params, level, _))| (*key, params, *level)),
            ),
        );
        for (trial, params, level) in settled {
            self.share_level(space, trial, params, level);
        }
        // Said once when a device's readings fail, not on every poll.
        for (device, why) in &errors {
            if self.failing.insert(*device) {
                warn!(
                    device,
                    "no admission on this device: NVML reading failed: {why}"
                );
            }
        }
        self.failing.retain(|d| errors.iter().any(|(e, _)| e == d));
        views.retain(|v| breaker.quarantined(Some(v.index), now).is_none());
        for v in &mut views {
            for w in idle.iter().filter(|w| w.device == v.index) {
                v.idle = v.idle.saturating_add(w.memory);
                v.idle_workers += 1;
            }
        }
        let mut others_started = None;
        if let Some(l) = &self.ledger {
            l.know_totals(views.iter().map(|v| (v.index, v.total)));
        }
        let ledger = match self.ledger.as_ref().map(Ledger::lock) {
            None => None,
            Some(Ok(locked)) => {
                self.ledger_failing = false;
                Some(locked)
            }
            Some(Err(e)) => {
                if !self.ledger_failing {
                    self.ledger_failing = true;
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
            self.honour_holds(l, &mut views);
            self.asked.take(l.requests());
        }
        Round {
            views,
            running,
            idle,
            ledger,
            others_started,
        }
    }

    /// The other daemons' holds older than ours on a device: memory their starved trials wait
    /// for, which we leave free (see `gpu::ledger`), counted as theirs in `views`.
    fn honour_holds(&mut self, l: &ledger::Locked, views: &mut [DeviceView]) {
        let mut honoured = BTreeSet::new();
        for h in l.holds() {
            let mine = self
                .hold
                .filter(|m| m.device == h.device)
                .map(|m| (m.since_ms, l.me()));
            if let Some(v) = views.iter_mut().find(|v| v.index == h.device) {
                if h.before(mine) {
                    v.others = v.others.saturating_add(h.bytes);
                    v.held = v.held.saturating_add(h.bytes);
                    let key = (h.since.1.pid, h.since.0);
                    if !self.honoured.contains(&key) {
                        info!(
                            gpu = h.device,
                            "leaving {} free for a trial of the sweepd daemon with pid {} on this host, which others have passed too often",
                            crate::units::format_gib(h.bytes),
                            h.since.1.pid
                        );
                    }
                    honoured.insert(key);
                }
            }
        }
        self.honoured = honoured;
    }

    /// How many trials the other daemons on this host started since `head`, the head of our
    /// line, was first seen waiting: they passed it as much as the trials behind it in our own
    /// line that started first (0 without a ledger, or for a new head).
    pub(super) fn passes_by_others(&mut self, head: Option<&Params>, round: &Round) -> u32 {
        let (Some(head), Some(now)) = (head, round.others_started) else {
            return 0;
        };
        match &self.head_watch {
            Some((params, then)) if params == head => {
                u32::try_from(now.saturating_sub(*then)).unwrap_or(u32::MAX)
            }
            _ => {
                self.head_watch = Some((head.clone(), now));
                0
            }
        }
    }

    /// What an admission decision reads of the GPU side, and the memory model it asks for
    /// estimates: admission's rule; our trials started beside `head`, the head of our line,
    /// while it had priority (`None`: none since it became the head), with which a head keeps
    /// its priority until it starts (a study the other daemons starved, `policy::starved`,
    /// runs trials again once some start beside its head, and its head must not lose the
    /// priority, and its hold, to them); the model.
    pub(super) fn for_admission(
        &mut self,
        head: Option<&Params>,
    ) -> (&Capacity, Option<&BTreeSet<i64>>, &mut MemoryModel) {
        let beside = head.and_then(|h| {
            self.beside_head
                .as_ref()
                .filter(|(p, _)| p == h)
                .map(|(_, t)| t)
        });
        (&self.capacity, beside, &mut self.model)
    }

    /// What the head of our line asks of the other daemons after a round (`decide::Admission`):
    /// their idle workers' memory (`asking`), and to leave `hold` (device, bytes) free for it
    /// (it was passed `passes` times in all, `by_others` of them by their starts, while we run
    /// `running` trials); a head that `started` is watched no more.
    pub(super) fn ask(
        &mut self,
        asking: Option<Request>,
        hold: Option<(u32, u64)>,
        started: bool,
        (passes, by_others, running): (u32, u32, u64),
    ) {
        self.asking = asking;
        if started {
            self.head_watch = None;
        }
        let Some((device, bytes)) = hold else {
            self.hold = None;
            return;
        };
        if self.hold.is_none() {
            let passed = if policy::starved(by_others, running) {
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
                crate::units::format_gib(bytes)
            );
        }
        // The same head keeps its place among the holds when its estimate moves.
        let since_ms = match self.hold {
            Some(h) if h.device == device => h.since_ms,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        self.hold = Some(Holding {
            device,
            bytes,
            since_ms,
        });
    }

    /// What our running trials have yet to claim per device, how many run there, what our
    /// `idle` workers hold there, what our waiting trial asks for, how many trials we started
    /// there and what our head holds.
    fn my_claims(&self, idle: &[IdleWorker]) -> Claims {
        let mut mine = Claims::new();
        for t in self.monitor.views().1 {
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
        if let Some(r) = self.asking {
            let c = mine.entry(r.device).or_default();
            c.want = r.want;
            c.seen = r.seen;
        }
        for (device, n) in &self.started {
            mine.entry(*device).or_default().started = *n;
        }
        if let Some(h) = self.hold {
            let c = mine.entry(h.device).or_default();
            c.hold = h.bytes;
            c.hold_since = h.since_ms;
        }
        mine
    }

    /// Writes our claims to the `locked` ledger (with `new`, a trial just admitted and not yet
    /// tracked; `idle`: our idle workers), which releases it.
    pub(super) fn write_claims(
        &mut self,
        locked: Option<ledger::Locked>,
        idle: &[IdleWorker],
        new: Option<&Placement>,
    ) {
        let Some(locked) = locked else { return };
        if let Some(p) = new {
            *self.started.entry(p.device).or_default() += 1;
        }
        let mut mine = self.my_claims(idle);
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
            if !self.ledger_failing {
                self.ledger_failing = true;
                warn!("could not write the GPU ledger shared with other daemons: {e}");
            }
        }
    }

    /// Brings our entry in the ledger up to date (trials ended, or claimed their memory).
    pub(super) fn refresh_claims(&mut self, idle: &[IdleWorker]) {
        let locked = match self.ledger.as_ref().map(Ledger::lock) {
            Some(Ok(l)) => Some(l),
            _ => None,
        };
        self.write_claims(locked, idle, None);
    }
}
