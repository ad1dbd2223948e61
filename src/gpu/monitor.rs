//! The GPU monitor: what NVML says, attributed to our trials.
//!
//! NVML reports memory per process; sweepd needs it per *trial*, and a trial is a worker's whole
//! process group (a DataLoader child holds memory too). The monitor polls NVML off the async
//! runtime (its FFI blocks), maps every listed pid to its process group, and keeps for each
//! running trial the memory it uses now and its peak, and for each of our idle workers (a
//! persistent worker waiting for its next trial) what it holds, which admission may take back.
//! Admission reads the latest readings from here; `sweepd gpus` reads what the monitor writes
//! to `sweepd_gpus`.
//!
//! It also enforces one invariant the admission rule depends on: a process of a retired worker
//! that NVML still lists is killed (and logged), so no orphan keeps holding memory that sweepd
//! would otherwise count as used forever.

use super::admission::{settled_margin, DeviceView, RunningTrial, CONTEXT_PRIOR};
use super::nvml::{DeviceReading, Gpu};
use super::source::{self, Seen, Source};
use crate::process;
use crate::store::MemorySample;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How many retired worker groups are watched for orphans.
const RETIRED_GROUPS: usize = 1024;
/// Telemetry rows per trial are at least this far apart.
pub const TELEMETRY_EVERY: Duration = Duration::from_secs(2);

/// One trial's memory, as far as NVML shows it.
#[derive(Debug, Clone)]
pub struct TrialMemory {
    pub device: u32,
    /// The worker's process group, once a worker is bound to the trial.
    pub pgid: Option<i32>,
    pub expected_peak: u64,
    /// The memory model's prediction before its margin (0: none yet, the prior's guess).
    pub predicted: u64,
    pub used_now: u64,
    pub peak: u64,
    pub last_sample: Option<Instant>,
    /// When its worker was given it ([`Monitor::bind`]; when it was admitted, until then):
    /// nothing of the trial can have been allocated before, so the time it took to reach its
    /// level counts from here, not from its admission (a worker's start-up is not a ramp).
    pub started: Instant,
    /// When `used_now` last changed, and how many readings have seen it since.
    pub level_since: Instant,
    pub level_readings: u32,
    /// It has held its level long enough to be taken at it ([`settled`]); it grew after that
    /// once, and is not taken at its level again.
    pub settled: bool,
    pub grew_after_settling: bool,
    /// It runs under a memory cap (`[gpu] caps` when it was admitted), and the bytes it was
    /// admitted with, which its cap comes from (`expected_peak` may be lowered since).
    pub capped: bool,
    /// Its worker reported a framework (`ready` or a `memory` message: the helper found one
    /// and set its limit), so it keeps to its cap. A cap sent to a worker that reported none
    /// may be ignored: such a trial is counted as uncapped ([`TrialMemory::held_to_cap`]).
    pub enforced: bool,
    pub admitted: u64,
    /// The cap its worker was given for it (`None`: not sent yet, or no cap), and what its
    /// worker is taken to hold outside the allocator (measured, or the prior).
    pub cap: Option<u64>,
    pub context: u64,
    /// What its framework last said its allocator reserves now and at most in the trial
    /// (`memory` messages): its memory where NVML cannot name its process (`gpu::source`).
    pub reserved: Option<u64>,
    pub peak_reserved: Option<u64>,
}

impl TrialMemory {
    /// Its worker, process group `pgid`, was given it at `now`. No reading has been attributed
    /// to it before (that needs the group), so its level and the time it takes to reach it
    /// start here.
    pub fn bind(&mut self, pgid: i32, now: Instant) {
        self.pgid = Some(pgid);
        self.started = now;
        self.level_since = now;
    }

    /// Whether it is held to its cap: capped, and its worker reported a framework that
    /// enforces it. Only then does admission count it at its cap, and an out-of-memory failure
    /// at its cap teach the model a cap hit.
    pub fn held_to_cap(&self) -> bool {
        self.capped && self.enforced
    }

    /// Whether it may ever be taken at its level: the model has a prediction for it, and it has
    /// not grown after settling once.
    fn may_settle(&self) -> bool {
        !self.grew_after_settling && self.predicted > 0
    }

    /// Whether its level is high enough to be its peak: [`SETTLED_SHARE`] of the prediction.
    fn at_peak_level(&self) -> bool {
        self.used_now as f64 >= SETTLED_SHARE * self.predicted as f64
    }

    /// When it will have held its level as long as it took to reach it.
    fn held_long_enough_at(&self) -> Instant {
        self.level_since + self.level_since.saturating_duration_since(self.started)
    }
}

/// Of the prediction a trial must use to be taken as having reached its peak.
pub const SETTLED_SHARE: f64 = 0.75;

/// Whether a running trial has reached its peak, so that admission may count it at what it uses
/// rather than at its expected peak (the rest of which would otherwise be held back for its whole
/// run): it uses at least [`SETTLED_SHARE`] of the model's prediction (not a context or a data
/// loader alone; never while the model has no prediction for it, [`Monitor::predict_missing`]),
/// at least two readings have seen that level, and it has held it at least as long as it took to
/// reach it. A trial that grows after settling is never taken at its level again.
///
/// Readings decide how soon that is seen: the level is dated by the first reading that shows
/// it, so readings far apart date it late and make the trial hold it longer ([`next_look`]).
pub fn settled(t: &TrialMemory, now: Instant) -> bool {
    t.may_settle() && t.at_peak_level() && t.level_readings >= 2 && now >= t.held_long_enough_at()
}

/// The least time between the readings [`next_look`] asks for (NVML's reads take well under a
/// millisecond; this bounds what a trial's ramp costs in them).
pub const LOOK_GAP_MIN: Duration = Duration::from_millis(20);
/// While a trial ramps up, a reading every this share of the time since its worker was given
/// it: the first reading at its level is then late by at most this share of its ramp, so it
/// settles within about `2 × (1 + LOOK_SHARE)` times its ramp, at a cost of a few readings per
/// trial whatever its length (the gaps grow with it).
pub const LOOK_SHARE: f64 = 0.25;

/// When a reading could next change whether trial `t` is settled, if it could: [`LOOK_SHARE`]
/// of its age from now (within [`LOOK_GAP_MIN`] and `longest`, the poll interval), or sooner,
/// at the moment it will have held its level long enough. `None` for a trial that cannot settle
/// (not yet given to a worker, no prediction, settled already, grown after settling).
///
/// With readings only at the poll interval (a second) and when trials end, a trial of a few
/// seconds was seen at its level late and then held it until it nearly ended: the packing
/// bench's short trials counted at their expected peak almost their whole run. On trials of
/// minutes this costs a handful of readings each.
pub fn next_look(t: &TrialMemory, now: Instant, longest: Duration) -> Option<Instant> {
    if t.pgid.is_none() || t.settled || !t.may_settle() {
        return None;
    }
    let least = LOOK_GAP_MIN.min(longest);
    let age = now.saturating_duration_since(t.started);
    // Still read at that pace at a level that may not be the last (the ramp's last steps):
    // the next level must be dated as closely as the first.
    let pace = now + age.mul_f64(LOOK_SHARE).clamp(least, longest);
    if !t.at_peak_level() {
        return Some(pace);
    }
    // The second reading at the level is part of the rule too.
    Some(t.held_long_enough_at().max(now + least).min(pace))
}

/// Takes a new reading of what a running trial uses. Returns how far it grew beyond what was
/// held back for it, if it had settled and then grew by more than [`settled_margin`]: a trial
/// that allocates late, which admission under-counted while it was settled. `settling` is off
/// once one trial of the study did that.
pub fn observe(t: &mut TrialMemory, used: u64, now: Instant, settling: bool) -> Option<u64> {
    let mut late = None;
    if used != t.used_now {
        if t.settled && used > t.used_now {
            t.grew_after_settling = true;
            let held_back = settled_margin(t.used_now);
            late = Some(used - t.used_now).filter(|g| *g > held_back);
        }
        t.used_now = used;
        t.level_since = now;
        t.level_readings = 0;
    }
    t.level_readings = t.level_readings.saturating_add(1);
    t.settled = settling && settled(t, now);
    t.peak = t.peak.max(t.used_now);
    late
}

/// A trial's peak as the worker's framework saw it, in NVML's terms: what the worker's group
/// held once the trial had ended and the helper had emptied the framework's caches
/// (`held_after`, from NVML), less what the allocator still reserved then (`reserved_after`),
/// is what the process holds outside the allocator (its CUDA context, library workspaces); with
/// the most the allocator reserved during the trial (`peak_reserved`) on top, that is the
/// peak NVML would have shown had a reading come at the right moment. Readings seconds apart
/// miss the peak of a trial that ends between two of them, or catch it mid-ramp, and such a
/// peak would teach the memory model a trial smaller than it was. `None` where the figures
/// contradict each other (the allocator reserving more than NVML shows the group holding) or
/// exceed the device (`total`): they are the worker's word, not a measurement.
pub fn framework_peak(
    held_after: u64,
    reserved_after: u64,
    peak_reserved: u64,
    total: u64,
) -> Option<u64> {
    let outside = held_after.checked_sub(reserved_after)?;
    let peak = outside.checked_add(peak_reserved)?;
    (peak <= total).then_some(peak)
}

/// Readings in a row in which a trial that reported allocator memory has no process NVML lists
/// before a device is taken to be one where NVML cannot name our processes: one reading may
/// have been taken just before the process's first allocation, whose report came after it.
const UNLISTED_READINGS: u32 = 3;

/// Each device's memory source after a reading in which process group `g` uses `groups[(d,
/// g)]` on device `d` (`gpu::source`): a change is said once in the log.
fn judge_sources(st: &mut State, groups: &HashMap<(u32, i32), u64>) {
    for (device, reading) in &st.readings {
        let Ok(reading) = reading else { continue };
        let unlisted = st.trials.values().any(|t| {
            t.device == *device
                && t.reserved.is_some_and(|r| r > 0)
                && t.pgid.is_some_and(|g| !groups.contains_key(&(*device, g)))
        });
        let streak = st.unlisted.entry(*device).or_default();
        *streak = if unlisted {
            streak.saturating_add(1)
        } else {
            0
        };
        let seen = Seen {
            no_memory_per_process: reading.no_memory_per_process,
            reported_but_unlisted: *streak >= UNLISTED_READINGS,
        };
        let was = st.sources.get(device).copied().unwrap_or_default();
        let now = source::source(was, seen);
        if now != was {
            info!(gpu = device, "{now}");
            st.sources.insert(*device, now);
        }
    }
}

#[derive(Default)]
struct State {
    /// The latest reading of each device we use (or why it failed).
    readings: Vec<(u32, Result<DeviceReading, String>)>,
    /// When `readings` were taken.
    read_at: Option<Instant>,
    trials: HashMap<i64, TrialMemory>,
    /// Idle workers' process groups: their device and what they hold there.
    idle: HashMap<i32, (u32, u64)>,
    retired: VecDeque<i32>,
    /// A trial of this study grew after it had settled ([`observe`]): none is taken as settled
    /// again.
    settling_off: bool,
    /// What each process group listed in `readings` uses, by (device, group): the other
    /// daemons' trials are counted against the same reading as the free memory (`gpu::ledger`).
    groups: HashMap<(u32, i32), u64>,
    /// Where each device's memory per trial comes from (`gpu::source`; absent: NVML's).
    sources: HashMap<u32, Source>,
    /// Readings in a row in which a trial of ours reported memory NVML listed no process for,
    /// by device.
    unlisted: HashMap<u32, u32>,
    /// The latest context a worker of ours was measured at: a new worker's, until its own.
    context_seen: Option<u64>,
    /// The framework the first worker of ours that reported one named (`None`: none yet).
    framework_seen: Option<String>,
}

/// The readings as the capacity model takes them, our running trials, and the devices whose
/// reading failed.
fn views_of(st: &State) -> (Vec<DeviceView>, Vec<RunningTrial>, Vec<(u32, String)>) {
    let mut views = Vec::new();
    let mut errors = Vec::new();
    for (device, r) in &st.readings {
        match r {
            Ok(r) => views.push(DeviceView {
                index: *device,
                total: r.total,
                free: r.free,
                ..DeviceView::default()
            }),
            Err(e) => errors.push((*device, e.clone())),
        }
    }
    let running = st
        .trials
        .iter()
        .map(|(id, t)| RunningTrial {
            trial_id: *id,
            device: t.device,
            pgid: t.pgid,
            expected_peak: t.expected_peak,
            used_now: t.used_now,
            settled: t.settled,
            capped: t.held_to_cap(),
        })
        .collect();
    (views, running, errors)
}

/// Shared between the supervisor's slots and the polling task.
pub struct Monitor {
    gpu: Arc<Gpu>,
    pub devices: Vec<u32>,
    state: Mutex<State>,
    /// Woken when a trial is given to a worker or a prediction, for the task that reads the
    /// GPUs while trials ramp up (`supervisor::housekeeping::watch_settling`).
    look_sooner: tokio::sync::Notify,
}

/// What a poll found that someone must act on or record.
#[derive(Debug, Default)]
pub struct PollReport {
    pub samples: Vec<MemorySample>,
    /// Running trials this reading found settled that were not before: admission may count
    /// them at what they use from now on.
    pub settled: usize,
    /// Orphans killed: (pid, device, bytes held).
    pub orphans: Vec<(u32, u32, u64)>,
}

impl Monitor {
    pub fn new(gpu: Arc<Gpu>, devices: Vec<u32>) -> Monitor {
        Monitor {
            gpu,
            devices,
            state: Mutex::new(State::default()),
            look_sooner: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every device once and updates the trials' memory. Runs NVML off the runtime.
    pub async fn poll(&self) -> PollReport {
        let gpu = self.gpu.clone();
        let devices = self.devices.clone();
        let results = tokio::task::spawn_blocking(move || gpu.read_all(&devices))
            .await
            .unwrap_or_default();
        let now = Instant::now();
        // pid → process group, read once per poll.
        let mut pgrp: HashMap<u32, Option<i32>> = HashMap::new();
        let mut st = self.lock();
        st.readings = self
            .devices
            .iter()
            .zip(results)
            .map(|(d, r)| (*d, r.map_err(|e| e.to_string())))
            .collect();
        st.read_at = Some(now);
        let mut report = PollReport::default();
        // What each process group uses on each device: our trials' and idle workers' usage,
        // and the other daemons' trials' (`gpu::ledger`), all from this one reading.
        let mut groups: HashMap<(u32, i32), u64> = HashMap::new();
        let trial_groups: HashSet<(u32, i32)> = st
            .trials
            .values()
            .filter_map(|t| Some((t.device, t.pgid?)))
            .collect();
        for (device, reading) in &st.readings {
            let Ok(reading) = reading else { continue };
            for p in &reading.processes {
                let g = *pgrp
                    .entry(p.pid)
                    .or_insert_with(|| process::proc_stat(p.pid as i32).map(|s| s.pgrp));
                let Some(g) = g else { continue };
                // Readings come from the driver (or a fake one): never trusted to add up.
                let u = groups.entry((*device, g)).or_default();
                *u = u.saturating_add(p.used);
                let ours = trial_groups.contains(&(*device, g))
                    || st.idle.get(&g).is_some_and(|(d, _)| d == device);
                if !ours && st.retired.contains(&g) {
                    report.orphans.push((p.pid, *device, p.used));
                }
            }
        }
        judge_sources(&mut st, &groups);
        let usage = |device: u32, g: i32| groups.get(&(device, g)).copied().unwrap_or(0);
        let sources = st.sources.clone();
        let by_nvml = |device: u32| sources.get(&device).is_none_or(|s| *s == Source::Processes);
        for (g, (device, held)) in st.idle.iter_mut() {
            // Where NVML cannot name our processes, what the framework said it holds stays.
            if by_nvml(*device) {
                *held = usage(*device, *g);
            }
        }
        let settling = !st.settling_off;
        let mut late = None;
        for (id, t) in st.trials.iter_mut() {
            let Some(g) = t.pgid else { continue };
            let was = t.used_now;
            let was_settled = t.settled;
            let used = if by_nvml(t.device) {
                usage(t.device, g)
            } else {
                source::by_framework(t.context, t.reserved).unwrap_or(0)
            };
            if let Some(grew) = observe(t, used, now, settling) {
                late.get_or_insert((*id, was, grew));
            }
            if let Some(p) = source::by_framework(t.context, t.peak_reserved) {
                if !by_nvml(t.device) {
                    t.peak = t.peak.max(p);
                }
            }
            report.settled += usize::from(t.settled && !was_settled);
            if t.used_now > 0 && t.last_sample.is_none_or(|s| now - s >= TELEMETRY_EVERY) {
                t.last_sample = Some(now);
                report.samples.push(MemorySample {
                    trial_id: *id,
                    device: t.device,
                    used: t.used_now,
                });
            }
        }
        st.groups = groups;
        if let Some((trial_id, was, grew)) = late.filter(|_| settling) {
            // The rule's one blind spot is a trial that grows late in its run (an evaluation
            // pass with larger batches): once a trial of this study has done it, its trials are
            // taken to do it, and every running trial counts at its expected peak again.
            st.settling_off = true;
            for t in st.trials.values_mut() {
                t.settled = false;
            }
            warn!(
                trial_id,
                was,
                grew,
                "a trial grew after it had held its level as long as it took to reach it: \
                 from now on running trials count at their expected peak until they end"
            );
        }
        drop(st);
        for (pid, device, bytes) in &report.orphans {
            warn!(
                pid,
                device, bytes, "killing a process of a retired worker that still holds GPU memory"
            );
            process::kill_pid(*pid);
        }
        report
    }

    /// A trial was admitted on `device`: count its expected peak (the bytes it was admitted
    /// with; `predicted`, the model's prediction before the margin) from now on; `capped`, it
    /// will run under a memory cap.
    pub fn track(
        &self,
        trial_id: i64,
        device: u32,
        expected_peak: u64,
        predicted: u64,
        capped: bool,
    ) {
        let now = Instant::now();
        let mut st = self.lock();
        let context = st.context_seen.unwrap_or(CONTEXT_PRIOR);
        st.trials.insert(
            trial_id,
            TrialMemory {
                device,
                pgid: None,
                expected_peak,
                predicted,
                used_now: 0,
                peak: 0,
                last_sample: None,
                started: now,
                level_since: now,
                level_readings: 0,
                settled: false,
                grew_after_settling: false,
                capped,
                enforced: false,
                admitted: expected_peak,
                cap: None,
                context,
                reserved: None,
                peak_reserved: None,
            },
        );
    }

    /// The bytes trial `trial_id` was admitted with (`None`: not ours, or ended).
    pub fn admitted(&self, trial_id: i64) -> Option<u64> {
        self.lock().trials.get(&trial_id).map(|t| t.admitted)
    }

    /// Whether trial `trial_id` runs under a memory cap.
    pub fn capped(&self, trial_id: i64) -> bool {
        self.lock().trials.get(&trial_id).is_some_and(|t| t.capped)
    }

    /// Trial `trial_id` runs under `cap`, on a worker taken to hold `context` outside its
    /// allocator.
    pub fn set_cap(&self, trial_id: i64, cap: u64, context: u64) {
        if let Some(t) = self.lock().trials.get_mut(&trial_id) {
            t.cap = Some(cap);
            t.context = context;
        }
    }

    /// The cap trial `trial_id` runs under and the context it was taken at, where it has one.
    pub fn cap_of(&self, trial_id: i64) -> Option<(u64, u64)> {
        let st = self.lock();
        let t = st.trials.get(&trial_id)?;
        Some((t.cap?, t.context))
    }

    /// What trial `trial_id`'s framework says its allocator reserves now and at most (a
    /// `memory` message), and its process's context where it says.
    pub fn framework(
        &self,
        trial_id: i64,
        reserved: Option<u64>,
        peak_reserved: Option<u64>,
        context: Option<u64>,
    ) {
        let mut st = self.lock();
        if let Some(c) = context {
            st.context_seen = Some(c);
        }
        if let Some(t) = st.trials.get_mut(&trial_id) {
            t.reserved = reserved.or(t.reserved);
            t.peak_reserved = peak_reserved.max(t.peak_reserved).max(reserved);
            if let Some(c) = context {
                t.context = c;
            }
        }
    }

    /// The worker of process group `pgid` reported `framework` (in `ready` or a `memory`
    /// message): the trials it runs keep to their caps ([`TrialMemory::held_to_cap`]), and
    /// the first report is the study's ([`Monitor::framework_seen`]). Said again when the
    /// worker is given a trial ([`Monitor::bind`] alone does not know its worker's framework).
    pub fn framework_reported(&self, pgid: i32, framework: &str) {
        let mut st = self.lock();
        if st.framework_seen.is_none() {
            st.framework_seen = Some(framework.to_owned());
        }
        for t in st.trials.values_mut().filter(|t| t.pgid == Some(pgid)) {
            t.enforced = true;
        }
    }

    /// The framework the first worker of ours that reported one named.
    pub fn framework_seen(&self) -> Option<String> {
        self.lock().framework_seen.clone()
    }

    /// A worker of ours was measured holding `context` outside its allocator: new workers are
    /// taken at it until they are measured themselves.
    pub fn context_seen(&self, context: u64) {
        self.lock().context_seen = Some(context);
    }

    /// What a new worker is taken to hold outside its allocator until it is measured.
    pub fn context_guess(&self) -> u64 {
        self.lock().context_seen.unwrap_or(CONTEXT_PRIOR)
    }

    /// Where `device`'s memory per trial comes from.
    pub fn source(&self, device: u32) -> Source {
        self.lock()
            .sources
            .get(&device)
            .copied()
            .unwrap_or_default()
    }

    /// Gives the running trials admitted before the memory model could predict them
    /// (`predicted` 0: admitted at the prior's guess, or at the largest peak measured) the
    /// prediction `predict` makes now (0: still none). [`settled`] compares a trial's level
    /// with its prediction, so without one such a trial counted at the prior's bound for its
    /// whole run, though the model fitted a moment after it started could tell that it uses a
    /// fraction of it.
    pub fn predict_missing(&self, mut predict: impl FnMut(i64) -> u64) {
        let mut given = false;
        for (id, t) in self.lock().trials.iter_mut() {
            if t.predicted == 0 {
                t.predicted = predict(*id);
                given |= t.predicted > 0;
            }
        }
        if given {
            self.look_sooner.notify_one();
        }
    }

    /// The worker running the trial is known: attribute its group's memory to the trial.
    pub fn bind(&self, trial_id: i64, pgid: i32) {
        if let Some(t) = self.lock().trials.get_mut(&trial_id) {
            t.bind(pgid, Instant::now());
        }
        self.look_sooner.notify_one();
    }

    /// The earliest [`next_look`] over the running trials: when a reading may let one of them
    /// be counted at what it uses.
    pub fn next_look(&self, now: Instant, longest: Duration) -> Option<Instant> {
        let st = self.lock();
        if st.settling_off {
            return None;
        }
        st.trials
            .values()
            .filter_map(|t| next_look(t, now, longest))
            .min()
    }

    /// Waits until a trial is given to a worker ([`Monitor::bind`]) or a prediction
    /// ([`Monitor::predict_missing`]): [`Monitor::next_look`] may be sooner than it was.
    pub async fn look_sooner(&self) {
        self.look_sooner.notified().await
    }

    /// The trial's peak as its framework saw it ([`framework_peak`], from the worker's
    /// figures and `held_after`, a reading of its group once the trial ended): raises the
    /// measured peak where the readings missed it. Returns the peak it raised it to.
    pub fn raise_peak(
        &self,
        trial_id: i64,
        held_after: u64,
        reserved_after: u64,
        peak_reserved: u64,
    ) -> Option<u64> {
        let mut st = self.lock();
        let device = st.trials.get(&trial_id)?.device;
        let total = st.readings.iter().find_map(|(d, r)| match r {
            Ok(r) if *d == device => Some(r.total),
            _ => None,
        })?;
        let peak = framework_peak(held_after, reserved_after, peak_reserved, total)?;
        let t = st.trials.get_mut(&trial_id)?;
        (peak > t.peak).then(|| {
            t.peak = peak;
            peak
        })
    }

    /// The trial ended: stop counting it. Returns what was measured.
    pub fn untrack(&self, trial_id: i64) -> Option<TrialMemory> {
        self.lock().trials.remove(&trial_id)
    }

    /// A persistent worker waits idle on `device`: what its group holds there (`held`, as just
    /// measured) is counted as ours to take back, and updated by every reading, until it runs a
    /// trial again ([`Monitor::busy`]) or is retired.
    pub fn idle(&self, pgid: i32, device: u32, held: u64) {
        self.lock().idle.insert(pgid, (device, held));
    }

    /// An idle worker's group runs a trial again (or is about to be retired).
    pub fn busy(&self, pgid: i32) {
        self.lock().idle.remove(&pgid);
    }

    /// What an idle worker's group holds, as of the latest reading (`None`: not idle).
    pub fn idle_held(&self, pgid: i32) -> Option<u64> {
        self.lock().idle.get(&pgid).map(|(_, held)| *held)
    }

    /// How old the latest reading is (`None`: no reading yet).
    pub fn reading_age(&self, now: Instant) -> Option<Duration> {
        self.lock()
            .read_at
            .map(|t| now.saturating_duration_since(t))
    }

    /// A worker group ended: any of its processes NVML still lists from now on is an orphan.
    pub fn retired(&self, pgid: i32) {
        let mut st = self.lock();
        st.idle.remove(&pgid);
        st.retired.push_back(pgid);
        if st.retired.len() > RETIRED_GROUPS {
            st.retired.pop_front();
        }
    }

    /// The readings as the capacity model takes them, and the devices whose reading failed.
    pub fn views(&self) -> (Vec<DeviceView>, Vec<RunningTrial>, Vec<(u32, String)>) {
        views_of(&self.lock())
    }

    /// [`Monitor::views`], with what each process group uses in the same readings, by (device,
    /// group).
    #[allow(clippy::type_complexity)]
    pub fn views_and_groups(
        &self,
    ) -> (
        Vec<DeviceView>,
        Vec<RunningTrial>,
        Vec<(u32, String)>,
        HashMap<(u32, i32), u64>,
    ) {
        let st = self.lock();
        let (views, running, errors) = views_of(&st);
        (views, running, errors, st.groups.clone())
    }

    /// The latest readings, for `sweepd_gpus`.
    pub fn readings(&self) -> Vec<(u32, Result<DeviceReading, String>)> {
        self.lock().readings.clone()
    }

    /// Memory NVML lists for processes of group `pgid` on `device` in the latest reading
    /// (`None`: that device could not be read).
    pub fn group_used(&self, pgid: i32, device: u32) -> Option<u64> {
        let st = self.lock();
        let read = st.readings.iter().any(|(d, r)| *d == device && r.is_ok());
        read.then(|| st.groups.get(&(device, pgid)).copied().unwrap_or(0))
    }

    /// Pids NVML lists on `device` among `pids` (fresh reading): memory not yet released.
    pub async fn still_listed(&self, device: u32, pids: &[u32]) -> Result<Vec<u32>, String> {
        let gpu = self.gpu.clone();
        let reading = tokio::task::spawn_blocking(move || gpu.read(device))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(reading
            .processes
            .iter()
            .map(|p| p.pid)
            .filter(|p| pids.contains(p))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn the_framework_peak_is_what_the_group_holds_outside_the_allocator_plus_its_peak() {
        // (held after, reserved after, peak reserved, device total) -> peak
        let cases = [
            // A 0.5 GiB context, caches emptied, 6 GiB reserved at the peak.
            ((G / 2, 0, 6 * G, 24 * G), Some(6 * G + G / 2)),
            // Fragments the allocator could not give back count once, not twice.
            ((G, G / 2, 6 * G, 24 * G), Some(6 * G + G / 2)),
            // The allocator says it reserves more than NVML shows the whole group holding.
            ((G / 2, G, 6 * G, 24 * G), None),
            // More than the device has: not a measurement.
            ((G / 2, 0, 30 * G, 24 * G), None),
            ((u64::MAX, 0, u64::MAX, u64::MAX), None),
        ];
        for ((held, reserved, peak, total), want) in cases {
            assert_eq!(
                framework_peak(held, reserved, peak, total),
                want,
                "{held} {reserved} {peak} {total}"
            );
        }
    }

    /// A trial admitted at `t0`, predicted at 10 GiB, using `used` since `since` seconds after
    /// admission, seen by `readings` readings at that level.
    fn trial(t0: Instant, used: u64, since: u64, readings: u32) -> TrialMemory {
        TrialMemory {
            device: 0,
            pgid: Some(1),
            expected_peak: 12 * G,
            predicted: 10 * G,
            used_now: used,
            peak: used,
            last_sample: None,
            started: t0,
            level_since: t0 + Duration::from_secs(since),
            level_readings: readings,
            settled: false,
            grew_after_settling: false,
            capped: false,
            enforced: false,
            admitted: 0,
            cap: None,
            context: 0,
            reserved: None,
            peak_reserved: None,
        }
    }

    #[test]
    fn a_trial_settles_once_it_has_held_its_level_as_long_as_it_took_to_reach_it() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Reached 9 GiB 4 s in: settled from 8 s in, not before.
        let t = trial(t0, 9 * G, 4, 3);
        assert!(!settled(&t, at(7)));
        assert!(settled(&t, at(8)));
        // One reading at the level is not enough.
        assert!(!settled(&trial(t0, 9 * G, 4, 1), at(100)));
        // A context or a data loader alone (under 3/4 of the prediction) is not the peak: a
        // trial that allocates late is not taken at what it holds before.
        assert!(!settled(&trial(t0, 7 * G, 0, 50), at(100)));
        // Without a prediction (the model's first trials) nothing settles.
        let guessed = TrialMemory {
            predicted: 0,
            ..trial(t0, 9 * G, 0, 50)
        };
        assert!(!settled(&guessed, at(100)));
        // A trial that grew after settling once is not taken at its level again.
        let grew = TrialMemory {
            grew_after_settling: true,
            ..trial(t0, 11 * G, 4, 50)
        };
        assert!(!settled(&grew, at(100)));
    }

    #[test]
    fn a_worker_start_up_is_not_counted_as_the_trial_ramping_up() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Admitted at 0, its new worker ready and given it 5 s later, at its level 200 ms
        // after that: settled from 5.4 s, where counting from the admission made it hold its
        // level until 10.4 s.
        let mut t = TrialMemory {
            pgid: None,
            ..trial(t0, 0, 0, 0)
        };
        t.bind(7, ms(5000));
        observe(&mut t, 9 * G, ms(5200), true);
        observe(&mut t, 9 * G, ms(5399), true);
        assert!(!t.settled);
        observe(&mut t, 9 * G, ms(5400), true);
        assert!(t.settled);
    }

    #[test]
    fn the_next_look_is_when_a_reading_could_settle_a_trial() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let poll = Duration::from_secs(1);
        let ramping = trial(t0, 2 * G, 0, 1);
        let at_level = TrialMemory {
            level_since: ms(400),
            ..trial(t0, 9 * G, 0, 1)
        };
        let cases: [(&str, TrialMemory, u64, Option<u64>); 10] = [
            // Ramping up: a quarter of its age from now, at least 20 ms, at most the poll.
            ("just given to its worker", ramping.clone(), 0, Some(20)),
            ("ramping for 400 ms", ramping.clone(), 400, Some(500)),
            (
                "ramping for a minute",
                ramping.clone(),
                60_000,
                Some(61_000),
            ),
            // At its level since 400 ms: held long enough at 800 ms, read at the ramp's pace
            // until then (the level may not be its last).
            ("at its level", at_level.clone(), 500, Some(625)),
            ("at its level for a while", at_level.clone(), 700, Some(800)),
            ("held long enough already", at_level.clone(), 900, Some(920)),
            (
                "no worker yet",
                TrialMemory {
                    pgid: None,
                    ..ramping.clone()
                },
                0,
                None,
            ),
            (
                "no prediction",
                TrialMemory {
                    predicted: 0,
                    ..ramping.clone()
                },
                0,
                None,
            ),
            (
                "settled",
                TrialMemory {
                    settled: true,
                    ..at_level.clone()
                },
                900,
                None,
            ),
            (
                "grown after settling",
                TrialMemory {
                    grew_after_settling: true,
                    ..at_level.clone()
                },
                900,
                None,
            ),
        ];
        for (case, t, now, want) in cases {
            assert_eq!(next_look(&t, ms(now), poll), want.map(ms), "{case}");
        }
    }

    #[test]
    fn readings_at_the_next_look_settle_a_trial_soon_after_it_has_held_its_peak_as_long_as_its_ramp(
    ) {
        // A trial that allocates in 5 steps over its ramp, read only when `next_look` asks:
        // settled no sooner than twice its ramp (the rule), and no later than the bound the
        // readings' spacing gives, whether the ramp takes 200 ms or a minute.
        let poll = Duration::from_secs(1);
        for ramp_ms in [200u64, 3_000, 60_000] {
            let t0 = Instant::now();
            let ramp = Duration::from_millis(ramp_ms);
            let used = |at: Instant| {
                let step = (at - t0).as_secs_f64() / ramp.as_secs_f64() * 5.0;
                (step.floor().min(5.0) as u64 + 1) * 2 * G
            };
            let mut t = TrialMemory {
                pgid: None,
                predicted: 11 * G,
                ..trial(t0, 0, 0, 0)
            };
            t.bind(1, t0);
            let mut now = t0;
            let mut readings = 0;
            while !t.settled {
                now = next_look(&t, now, poll).expect("a trial that can settle");
                observe(&mut t, used(now), now, true);
                readings += 1;
                // A few dozen while the gaps grow, then at most the poll's pace.
                let most = 40 + 3 * ramp.as_millis() / poll.as_millis();
                assert!(readings < most, "ramp {ramp_ms} ms: {readings} readings");
            }
            let took = now - t0;
            let latest = ramp.mul_f64(2.0 * (1.0 + LOOK_SHARE)) + poll.min(ramp) / 2;
            assert!(
                took >= 2 * ramp,
                "ramp {ramp_ms} ms: settled after {took:?}"
            );
            assert!(took <= latest, "ramp {ramp_ms} ms: settled after {took:?}");
        }
    }

    #[test]
    fn a_settled_trial_that_grows_late_is_reported_and_settling_can_be_off() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = trial(t0, 9 * G, 4, 3);
        assert_eq!(observe(&mut t, 9 * G, at(8), true), None);
        assert!(t.settled);
        // Allocator noise within what was held back is no late growth.
        let noise = 9 * G / 100;
        assert_eq!(observe(&mut t, 9 * G + noise, at(9), true), None);
        assert!(!t.settled && t.grew_after_settling);
        // An evaluation pass that takes 2 GiB more after the trial had settled.
        let mut t = trial(t0, 9 * G, 4, 3);
        observe(&mut t, 9 * G, at(8), true);
        assert_eq!(observe(&mut t, 11 * G, at(20), true), Some(2 * G));
        assert_eq!(t.peak, 11 * G);
        // With settling off (a trial of the study grew late) nothing settles.
        let mut t = trial(t0, 9 * G, 4, 3);
        assert_eq!(observe(&mut t, 9 * G, at(100), false), None);
        assert!(!t.settled);
    }

    /// Issue 41: a cap holds only where the worker's framework enforces it. A trial admitted
    /// under caps whose worker reported no framework (a raw worker, `gpu_sim_worker.py`) is
    /// counted as uncapped, at its level once settled; once its worker reports one, at its cap.
    /// Before, every trial admitted under caps counted at its cap, and the model aimed at the
    /// peak for workers that ignore it.
    #[rstest::rstest]
    #[case::caps_off(false, false, false)]
    #[case::caps_off_with_a_framework(false, true, false)]
    #[case::no_framework_reported(true, false, false)]
    #[case::a_framework_reported(true, true, true)]
    fn a_trial_is_held_to_its_cap_only_where_its_worker_reported_a_framework(
        #[case] capped: bool,
        #[case] enforced: bool,
        #[case] held: bool,
    ) {
        let t = TrialMemory {
            capped,
            enforced,
            ..trial(Instant::now(), 9 * G, 4, 3)
        };
        assert_eq!(t.held_to_cap(), held);
        let mut st = State::default();
        st.trials.insert(7, t);
        assert_eq!(views_of(&st).1[0].capped, held);
    }
}
