//! Admission: whether a device takes one more trial now. This replaces a hand-tuned `PAR=3`
//! with a decision measured per device.
//!
//! Pure logic, no I/O: the supervisor reads NVML and hands the readings in, with the current
//! [`Instant`], so that every rule here is testable with explicit times.
//!
//! [`Capacity`] is the admission rule: a device takes a trial of `expected_peak` bytes (from
//! [`super::MemoryModel`]) when
//! `(free + idle − headroom − unclaimed − others) × oom_factor ≥ expected_peak`,
//! where `idle` is what our idle workers there hold (ours to take back by retiring them),
//! `unclaimed` is what our trials already running there have yet to allocate (a trial
//! that has not allocated yet counts at its whole expected peak; one that has settled at its
//! peak, `super::monitor::settled`, only at allocator noise), `others` is the same for the
//! other daemons on this host (from [`super::ledger`]), and at most `max_par_per_device` of our
//! trials run on it. A device with no trial of ours or of another daemon, and nothing else on
//! it beyond `headroom` ([`DeviceView::foreign`]), takes one whatever its estimate: an estimate
//! too large for the card must not stall the sweep (under a cap, it runs in what the card
//! gives: [`Decision::grant`]). Memory that other processes hold is not ours to try: a card
//! they fill waits for them, with the reason in [`Wait::Memory`].
//!
//! Caps ([`memory_cap`]): each trial's framework allocator is held to the bytes it was
//! admitted with, less what its worker holds outside the allocator (its context): a trial that
//! outgrows its estimate fails at its cap rather than take its neighbours' memory. A capped
//! trial (one whose worker reported a framework that enforces its cap) counts at its cap until
//! it ends, settled or not: it may grow to it, and a neighbour must never be given that memory;
//! an uncapped one counts at its level once settled ([`RunningTrial::unclaimed`]).
//! Quarantine is the supervisor's circuit breaker's: a quarantined device is not handed in at
//! all. [`Capacity::reclaim`] says which idle workers an admitted trial runs on and which must
//! go first to free the memory it was admitted into. [`Capacity::request`] says what a waiting
//! trial asks the other daemons' idle workers for, and [`answer`] which of ours go for such a
//! request.
//!
//! Users' view: `docs/gpu-memory-model.md`.

use super::ledger::Request;
use crate::units::format_gib;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

/// `bytes × factor`, rounded down, for a factor in [0, 1].
fn scale_down(bytes: u64, factor: f64) -> u64 {
    if factor >= 1.0 {
        bytes
    } else {
        (bytes as f64 * factor.max(0.0)).floor() as u64
    }
}

/// What the capacity model needs from an NVML reading of one device, and of the memory on it
/// that is ours to take back or that other daemons have yet to claim.
#[derive(Debug, Clone, Default)]
pub struct DeviceView {
    pub index: u32,
    pub total: u64,
    pub free: u64,
    /// What our idle workers on it hold (contexts, caches): free once they are retired.
    pub idle: u64,
    pub idle_workers: usize,
    /// What the other daemons' trials on it have yet to allocate, and how many they run.
    pub others: u64,
    pub others_running: usize,
    /// What the other daemons' idle workers on it hold: not ours to take, but theirs to give
    /// back when asked ([`Capacity::request`]).
    pub others_idle: u64,
    /// What another daemon's trial, passed too often, waits for here (counted in `others`
    /// too): while it waits, the card is drained for it, so "always one" is its, not ours.
    pub held: u64,
    /// What the other daemons' trials on it use now (each at most its bound): free again once
    /// they end ([`Capacity::backfill_room`]).
    pub others_used: u64,
}

impl DeviceView {
    /// What processes that are neither ours (our running trials, `ours_used` in all, and idle
    /// workers) nor the other daemons' trials hold on the device: someone else's job. Not ours
    /// to try: a card they fill is waited for, never tried.
    pub fn foreign(&self, ours_used: u64) -> u64 {
        self.total
            .saturating_sub(self.free)
            .saturating_sub(self.idle)
            .saturating_sub(ours_used)
            .saturating_sub(self.others_used)
    }
}

/// One of our idle workers: a persistent worker waiting on `device` for its next trial.
#[derive(Debug, Clone)]
pub struct IdleWorker {
    pub id: i64,
    pub device: u32,
    /// What NVML shows its process group holding.
    pub memory: u64,
    /// When its last trial ended.
    pub since: Instant,
}

/// What a trial admitted on a device does with our idle workers there: runs on `reuse` (its
/// memory becomes the trial's), and waits for `retire` to be gone (their memory freed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reclaim {
    pub reuse: Option<i64>,
    /// Least recently used first.
    pub retire: Vec<i64>,
}

/// One of our running trials on a device.
#[derive(Debug, Clone)]
pub struct RunningTrial {
    pub trial_id: i64,
    pub device: u32,
    /// Its worker's process group, once a worker is bound to it.
    pub pgid: Option<i32>,
    /// What the memory model expected this trial to peak at when it was admitted.
    pub expected_peak: u64,
    /// What NVML shows the trial's process group using on `device` now (0 just after start).
    pub used_now: u64,
    /// It has reached its peak (`super::monitor::settled`): what it uses now is what it needs.
    pub settled: bool,
    /// It runs under a memory cap from `expected_peak` (the bytes it was admitted with) that its
    /// worker enforces (it reported a framework, `super::monitor::TrialMemory::held_to_cap`):
    /// it may grow to that cap whatever it uses now, settled or not. A cap sent to a worker
    /// that reported none may be ignored: such a trial is not `capped` here.
    pub capped: bool,
}

/// What a worker process is taken to hold outside its framework's allocator (its CUDA context,
/// library workspaces) until it says or is measured (`docs/gpu-memory-model.md`).
pub const CONTEXT_PRIOR: u64 = 512 << 20;
/// The least cap a trial is given, however little it was admitted with.
pub const MIN_CAP: u64 = 64 << 20;

/// The memory cap of a trial admitted with `admitted` bytes on a worker that holds `context`
/// outside its allocator: what the allocator may hold, so that the process holds no more than
/// it was admitted with (at least [`MIN_CAP`]).
pub fn memory_cap(admitted: u64, context: u64) -> u64 {
    admitted.saturating_sub(context).max(MIN_CAP)
}

/// What a settled trial is still expected to grow by (allocator noise), as a share of its use.
pub const SETTLED_MARGIN: f64 = 0.02;

/// What is still held back for a trial settled at its peak using `used` bytes: allocator noise,
/// [`SETTLED_MARGIN`] of its use, rounded up. Admission counts it as the trial's unclaimed
/// memory, and the monitor calls a settled trial that grows by more a late allocator.
pub fn settled_margin(used: u64) -> u64 {
    (used as f64 * SETTLED_MARGIN).ceil() as u64
}

impl RunningTrial {
    /// Memory this trial is expected to claim but has not yet: `max(0, expected_peak − used_now)`,
    /// or once it has settled at its peak, only allocator noise on what it uses
    /// ([`settled_margin`]): the rest of an over-estimate is not held back for its whole run.
    /// A capped trial may still claim up to its cap, settled or not: a neighbour is never
    /// given what it may take (its estimate aims at its peak, so its cap is near it).
    pub fn unclaimed(&self) -> u64 {
        let rest = self.expected_peak.saturating_sub(self.used_now);
        if self.settled && !self.capped {
            rest.min(settled_margin(self.used_now))
        } else {
            rest
        }
    }
}

/// Why a device does not take a trial now (shown by `sweepd status` / `sweepd gpus`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Wait {
    /// `running` of our trials already run there, and `limit` is `max_par_per_device`.
    MaxParPerDevice { running: usize, limit: usize },
    /// The new trial's expected peak (`needed`) is more than the device can give (`available`).
    /// `available = (free + idle − headroom − unclaimed − others) × factor`; the other fields
    /// are its parts: `idle` is what `idle_workers` of ours hold there, `unclaimed` is what
    /// `claiming` of our running trials there have yet to allocate, `others` what
    /// `others_running` trials of other daemons have, and `factor` is below 1 for a while after
    /// an out-of-memory failure on the device.
    Memory {
        needed: u64,
        available: u64,
        free: u64,
        headroom: u64,
        unclaimed: u64,
        claiming: usize,
        factor: f64,
        idle: u64,
        idle_workers: usize,
        others: u64,
        others_running: usize,
        /// What the other daemons' idle workers hold there: given back when a waiting trial
        /// asks for it (`Capacity::request`), not counted as available before.
        others_idle: u64,
        /// Of `others`, what is left free for another daemon's trial passed too often.
        held: u64,
        /// What processes other than sweepd's hold on the device ([`DeviceView::foreign`]).
        foreign: u64,
    },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::MaxParPerDevice { running, limit } => write!(
                f,
                "{running} of {limit} trials already running here (max_par_per_device)"
            ),
            Wait::Memory {
                needed,
                available,
                free,
                headroom,
                unclaimed,
                claiming,
                factor,
                idle,
                idle_workers,
                others,
                others_running,
                others_idle,
                held,
                foreign,
            } => {
                let mut parts = format!("free {}", format_gib(*free));
                if *idle > 0 {
                    let workers = if *idle_workers == 1 {
                        "worker"
                    } else {
                        "workers"
                    };
                    parts.push_str(&format!(
                        " + {} held by {idle_workers} idle {workers}",
                        format_gib(*idle)
                    ));
                }
                parts.push_str(&format!(" − headroom {}", format_gib(*headroom)));
                if *unclaimed > 0 {
                    let trials = if *claiming == 1 { "trial" } else { "trials" };
                    parts.push_str(&format!(
                        " − {} yet to be claimed by {claiming} running {trials}",
                        format_gib(*unclaimed)
                    ));
                }
                let claimed = others.saturating_sub(*held);
                if claimed > 0 {
                    let trials = if *others_running == 1 {
                        "trial"
                    } else {
                        "trials"
                    };
                    parts.push_str(&format!(
                        " − {} yet to be claimed by {others_running} {trials} of other daemons",
                        format_gib(claimed)
                    ));
                }
                if *held > 0 {
                    parts.push_str(&format!(
                        " − {} left free for another daemon's trial, passed too often",
                        format_gib(*held)
                    ));
                }
                write!(
                    f,
                    "needs {}, {} available (",
                    format_gib(*needed),
                    format_gib(*available)
                )?;
                if *factor < 1.0 {
                    write!(
                        f,
                        "({parts}) × {factor:.2} after a recent out-of-memory failure)"
                    )?;
                } else {
                    write!(f, "{parts})")?;
                }
                if *others_idle > 0 {
                    write!(
                        f,
                        "; other daemons' idle workers hold {} here, theirs to give back when asked",
                        format_gib(*others_idle)
                    )?;
                }
                if *foreign > *headroom {
                    write!(
                        f,
                        "; other processes hold {} here: waiting for them",
                        format_gib(*foreign)
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Whether one device takes a trial of a given expected size now, and why not.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decision {
    pub device: u32,
    pub admitted: bool,
    /// `None` exactly when `admitted`.
    pub wait: Option<Wait>,
    /// `(free + idle − headroom − unclaimed − others) × oom_factor`: what a new trial may use
    /// on the device.
    pub usable: u64,
    /// Our trials running on the device now.
    pub par_now: usize,
    /// How many trials of this expected size the device could hold now: running + how many more
    /// fit (at most `max_par_per_device`; at least 1 on a device with none of ours running) —
    /// the "PAR per device" that status shows.
    pub par_estimate: usize,
}

impl Decision {
    /// It waits for memory that processes neither ours nor another daemon's hold on the device
    /// (more than `headroom` of it): someone else's job, waited for, not tried.
    pub fn waits_for_others(&self) -> bool {
        matches!(&self.wait, Some(Wait::Memory { foreign, headroom, .. }) if foreign > headroom)
    }

    /// The bytes a trial of `expected_peak` is admitted with here: its estimate, or what the
    /// card gives where it took the trial as its only one though the estimate is more (an empty
    /// card: under a cap, the trial runs in what there is and is re-run larger only if it
    /// needs more; it then never fits, and is found infeasible).
    pub fn grant(&self, expected_peak: u64) -> u64 {
        if self.admitted && self.usable > 0 {
            expected_peak.min(self.usable)
        } else {
            expected_peak
        }
    }
}

/// The admission factor of one device after an out-of-memory failure there.
#[derive(Debug, Clone, Copy)]
struct OomState {
    /// The factor at `at`; it recovers linearly to 1.0 over `oom_recovery` from there.
    factor: f64,
    at: Instant,
}

/// The admission rule, with the per-device state it keeps: the admission factor after OOMs. See
/// the module documentation for the rule. `[gpu] headroom`, which may change while the daemon
/// runs, is not kept here: each decision is handed the value in force.
#[derive(Debug, Clone)]
pub struct Capacity {
    max_par_per_device: usize,
    oom_admission_factor: f64,
    oom_recovery: Duration,
    oom: BTreeMap<u32, OomState>,
}

impl Capacity {
    /// `max_par_per_device`: at most this many of
    /// our trials per device (0 is taken as 1: a device that must never run a trial is left out
    /// of the device list instead); `oom_admission_factor` in [0, 1]: what an OOM multiplies
    /// usable memory by (a value outside is clamped, NaN is 1.0 = no decrease); `oom_recovery`:
    /// how long the factor takes to climb back to 1.0.
    pub fn new(
        max_par_per_device: usize,
        oom_admission_factor: f64,
        oom_recovery: Duration,
    ) -> Capacity {
        let oom_admission_factor = if oom_admission_factor.is_nan() {
            1.0
        } else {
            oom_admission_factor.clamp(0.0, 1.0)
        };
        Capacity {
            max_par_per_device: max_par_per_device.max(1),
            oom_admission_factor,
            oom_recovery,
            oom: BTreeMap::new(),
        }
    }

    pub fn max_par_per_device(&self) -> usize {
        self.max_par_per_device
    }

    /// What usable memory on `device` is multiplied by now: 1.0, or less for `oom_recovery` after
    /// an out-of-memory failure there.
    pub fn admission_factor(&self, device: u32, now: Instant) -> f64 {
        let Some(state) = self.oom.get(&device) else {
            return 1.0;
        };
        let elapsed = now.saturating_duration_since(state.at);
        if elapsed >= self.oom_recovery {
            return 1.0;
        }
        // Here oom_recovery > elapsed ≥ 0, so the division is by a positive number.
        let t = elapsed.as_secs_f64() / self.oom_recovery.as_secs_f64();
        (state.factor + (1.0 - state.factor) * t).min(1.0)
    }

    /// A trial on `device` ran out of memory: multiply the device's admission factor (as it is
    /// now, so a second OOM before recovery multiplies again) by `oom_admission_factor`, and
    /// recover linearly from there to 1.0 over `oom_recovery`.
    pub fn record_oom(&mut self, device: u32, now: Instant) {
        let current = self.admission_factor(device, now);
        let at = match self.oom.get(&device) {
            Some(prev) => prev.at.max(now),
            None => now,
        };
        self.oom.insert(
            device,
            OomState {
                factor: current * self.oom_admission_factor,
                at,
            },
        );
    }

    /// Choose a device for a new trial of `expected_peak` bytes among `devices` (the ones sweepd
    /// may use, already read), or say why each waits (one decision per device, in the order of
    /// `devices`; empty if `devices` is). Among the devices that admit the trial, the one with
    /// the most usable memory left after admitting it wins; ties go to fewer running trials,
    /// then to the lower index. `headroom`: `[gpu] headroom`, left free on every device.
    pub fn place(
        &self,
        devices: &[DeviceView],
        running: &[RunningTrial],
        expected_peak: u64,
        headroom: u64,
        now: Instant,
    ) -> Result<u32, Vec<Decision>> {
        let decisions: Vec<Decision> = devices
            .iter()
            .map(|d| self.decide(d, running, expected_peak, headroom, now))
            .collect();
        decisions
            .iter()
            .filter(|d| d.admitted)
            .max_by_key(|d| {
                // Signed: a device admitting its first trial may have less room than needed.
                let room_after = i128::from(d.usable) - i128::from(expected_peak);
                (room_after, Reverse(d.par_now), Reverse(d.device))
            })
            .map(|d| d.device)
            .ok_or(decisions)
    }

    /// Whether `device` takes a trial of `expected_peak` bytes now (the rule of [`Capacity::place`]
    /// for one device; also what `sweepd gpus` shows). Trials in `running` on other devices are
    /// ignored.
    pub fn decide(
        &self,
        device: &DeviceView,
        running: &[RunningTrial],
        expected_peak: u64,
        headroom: u64,
        now: Instant,
    ) -> Decision {
        let mut par_now = 0;
        let mut unclaimed: u64 = 0;
        let mut claiming = 0;
        let mut ours_used: u64 = 0;
        for t in running.iter().filter(|t| t.device == device.index) {
            par_now += 1;
            ours_used = ours_used.saturating_add(t.used_now);
            let u = t.unclaimed();
            if u > 0 {
                claiming += 1;
                unclaimed = unclaimed.saturating_add(u);
            }
        }
        let foreign = device.foreign(ours_used);
        let factor = self.admission_factor(device.index, now);
        let before_factor = device
            .free
            .saturating_add(device.idle)
            .saturating_sub(headroom)
            .saturating_sub(unclaimed)
            .saturating_sub(device.others);
        let usable = scale_down(before_factor, factor);
        let limit = self.max_par_per_device;
        let more_fit = match usable.checked_div(expected_peak) {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => usize::MAX, // expected_peak 0: memory does not limit
        };
        let mut par_estimate = par_now + more_fit.min(limit.saturating_sub(par_now));

        let wait = if par_now >= limit {
            Some(Wait::MaxParPerDevice {
                running: par_now,
                limit,
            })
        } else if par_now == 0
            && device.others_running == 0
            && device.held == 0
            && foreign <= headroom
        {
            // Always one on a device with no trial of any daemon: a too-large estimate must not
            // stall the sweep forever. If the trial does not fit it fails by OOM (or reaches
            // its cap) and that feeds back. (With another daemon's trials there, it waits for
            // them to end instead; with another daemon's trial waiting for the card drained,
            // that one goes first: taking "always one" each time our last trial ended, the
            // moment the card was empty, kept a 21.6 GiB trial of the other daemon waiting 4 s
            // while we ran one at a time. With someone else's job holding the card, it waits
            // for that job: "always one" started trials into the 2 GiB it left of 24, and ten of
            // them failed in 0.3 s.)
            par_estimate = par_estimate.max(1);
            None
        } else if usable >= expected_peak {
            None
        } else {
            Some(Wait::Memory {
                needed: expected_peak,
                available: usable,
                free: device.free,
                headroom,
                unclaimed,
                claiming,
                factor,
                idle: device.idle,
                idle_workers: device.idle_workers,
                others: device.others,
                others_running: device.others_running,
                others_idle: device.others_idle,
                held: device.held,
                foreign,
            })
        };
        Decision {
            device: device.index,
            admitted: wait.is_none(),
            wait,
            usable,
            par_now,
            par_estimate,
        }
    }
}

impl Capacity {
    /// What a trial may take on `device` beside a waiting trial of `head` bytes that has been
    /// passed too often (`super::super::supervisor`'s admission line): the device as it will
    /// be once every trial running there now has ended (what they use and have yet to claim
    /// free again, ours and the other daemons'), less `head`, less what `backfilled(trial)`
    /// trials of ours started beside the head already count at (their use and what they have
    /// yet to claim). A trial within it still leaves the head room once the trials before it
    /// end, so the head waits no longer than it would with the card drained for it; the room
    /// is 0 where the head would not fit even then.
    pub fn backfill_room(
        &self,
        device: &DeviceView,
        running: &[RunningTrial],
        head: u64,
        backfilled: impl Fn(i64) -> bool,
        headroom: u64,
        now: Instant,
    ) -> u64 {
        let mut ours_used: u64 = 0;
        let mut beside: u64 = 0;
        for t in running.iter().filter(|t| t.device == device.index) {
            ours_used = ours_used.saturating_add(t.used_now);
            if backfilled(t.trial_id) {
                beside = beside.saturating_add(t.used_now.saturating_add(t.unclaimed()));
            }
        }
        // What the others have yet to claim goes with their trials; what they hold free for
        // their own waiting trial stays.
        let drained = device
            .free
            .saturating_add(device.idle)
            .saturating_add(ours_used)
            .saturating_add(device.others_used)
            .saturating_sub(headroom)
            .saturating_sub(device.held);
        scale_down(drained, self.admission_factor(device.index, now))
            .saturating_sub(head)
            .saturating_sub(beside)
    }

    /// What a trial of `expected_peak` bytes admitted on `device` does with our idle workers
    /// there (`idle`; those on other devices are ignored): it runs on the one used most recently
    /// (its context and caches become the trial's), and the least recently used others are
    /// retired, one by one, until the memory the trial was admitted into is free without them:
    /// `free − headroom − unclaimed − others ≥ expected_peak / factor`, counting what the reused
    /// worker holds as the trial's own. A trial admitted as the only one on its device (it may
    /// not fit at all) has every other idle worker there retired.
    pub fn reclaim(
        &self,
        device: &DeviceView,
        running: &[RunningTrial],
        expected_peak: u64,
        idle: &[IdleWorker],
        headroom: u64,
        now: Instant,
    ) -> Reclaim {
        let mut here: Vec<&IdleWorker> = idle.iter().filter(|w| w.device == device.index).collect();
        // Most recently used first; the reused one is the first, retirements come from the end.
        here.sort_by_key(|w| (Reverse(w.since), w.id));
        let Some((reuse, rest)) = here.split_first() else {
            return Reclaim::default();
        };
        let unclaimed: u64 = running
            .iter()
            .filter(|t| t.device == device.index)
            .map(RunningTrial::unclaimed)
            .fold(0, u64::saturating_add);
        let factor = self.admission_factor(device.index, now);
        // Bytes needed before the factor, as admission's rule has it.
        let needed = if factor > 0.0 {
            (expected_peak as f64 / factor).ceil()
        } else {
            f64::INFINITY
        };
        let have = device.free as f64 - headroom as f64 - unclaimed as f64 - device.others as f64
            + reuse.memory as f64;
        let mut short = needed - have;
        let mut retire = Vec::new();
        for w in rest.iter().rev() {
            if short <= 0.0 {
                break;
            }
            retire.push(w.id);
            short -= w.memory as f64;
        }
        Reclaim {
            reuse: Some(reuse.id),
            retire,
        }
    }
}

/// Asking the other daemons on the host for their idle workers' memory.
impl Capacity {
    /// What a waiting trial asks the other daemons for, from the decisions that made it wait
    /// (one per device in `views`): on the device where it lacks least, the bytes it lacks,
    /// when the others' idle workers there hold that much (retiring them would let it start);
    /// `None` when no device is short of memory alone or the others' idle workers would not
    /// make up for it.
    pub fn request(&self, views: &[DeviceView], decisions: &[Decision]) -> Option<Request> {
        if decisions.iter().any(|d| d.admitted) {
            return None;
        }
        decisions
            .iter()
            .filter_map(|d| {
                let Some(Wait::Memory {
                    needed,
                    available,
                    factor,
                    ..
                }) = d.wait
                else {
                    return None;
                };
                let v = views.iter().find(|v| v.index == d.device)?;
                // In bytes before the OOM factor, as `decide` subtracts them.
                let lacks = if factor > 0.0 {
                    (needed as f64 / factor).ceil() - (available as f64 / factor).floor()
                } else {
                    f64::INFINITY
                };
                (lacks > 0.0 && lacks <= v.others_idle as f64).then_some(Request {
                    device: d.device,
                    want: lacks as u64,
                    seen: v.free,
                })
            })
            .min_by_key(|r| (r.want, r.device))
    }
}

/// Which of our idle workers (`idle`) to retire for another daemon that lacks `bytes` on
/// `device`: the least recently used there, one by one, until their memory makes up for it (or
/// every one there, when all of them do not).
pub fn answer(idle: &[IdleWorker], device: u32, bytes: u64) -> Vec<i64> {
    let mut here: Vec<&IdleWorker> = idle
        .iter()
        .filter(|w| w.device == device && w.memory > 0)
        .collect();
    here.sort_by_key(|w| (w.since, w.id));
    let mut freed = 0u64;
    let mut out = Vec::new();
    for w in here {
        if freed >= bytes {
            break;
        }
        freed = freed.saturating_add(w.memory);
        out.push(w.id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const G: u64 = 1 << 30;

    fn gib(x: f64) -> u64 {
        (x * G as f64) as u64
    }

    fn card(index: u32, free: u64) -> DeviceView {
        DeviceView {
            index,
            total: 24 * G,
            free,
            ..DeviceView::default()
        }
    }

    fn cap() -> Capacity {
        Capacity::new(16, 0.5, Duration::from_secs(600))
    }

    fn trial(id: i64, device: u32, expected_peak: u64, used_now: u64) -> RunningTrial {
        RunningTrial {
            trial_id: id,
            device,
            pgid: None,
            expected_peak,
            used_now,
            settled: false,
            capped: false,
        }
    }

    /// Admits trials of `peak` bytes on the given devices with no new NVML reading in between
    /// (each admitted trial is added with used_now 0), until placement fails; returns the
    /// running trials and the final refusal.
    fn fill(
        cap: &Capacity,
        devices: &[DeviceView],
        peak: u64,
        now: Instant,
    ) -> (Vec<RunningTrial>, Vec<Decision>) {
        let mut running = Vec::new();
        for id in 0..1000 {
            match cap.place(devices, &running, peak, G, now) {
                Ok(d) => running.push(trial(id, d, peak, 0)),
                Err(why) => return (running, why),
            }
        }
        panic!("never stopped admitting");
    }

    #[test]
    fn small_trials_admit_many_large_few() {
        let now = Instant::now();
        let c = cap();
        let dev = [card(0, 23 * G)];
        // 23 − 1 headroom = 22 GiB usable.
        let (small, _) = fill(&c, &dev, 2 * G, now);
        let (medium, _) = fill(&c, &dev, 5 * G, now);
        let (large, _) = fill(&c, &dev, 6 * G, now);
        assert_eq!(small.len(), 11);
        assert_eq!(medium.len(), 4);
        assert_eq!(large.len(), 3);
        let est = |peak| c.decide(&dev[0], &[], peak, G, now).par_estimate;
        assert_eq!(est(2 * G), 11);
        assert_eq!(est(5 * G), 4);
        assert_eq!(est(6 * G), 3);
        assert_eq!(est(12 * G), 1);
        // With small trials the limit is max_par_per_device.
        assert_eq!(est(G / 2), 16);
    }

    #[test]
    fn just_started_trial_counts_its_whole_expected_peak() {
        let now = Instant::now();
        let c = cap();
        let dev = [card(0, 23 * G)];
        // place → add it with used_now 0 → place again, with the same (stale) reading.
        let mut running = Vec::new();
        for id in 0..3 {
            assert_eq!(c.place(&dev, &running, 6 * G, G, now), Ok(0));
            running.push(trial(id, 0, 6 * G, 0));
        }
        let why = c.place(&dev, &running, 6 * G, G, now).unwrap_err();
        assert_eq!(
            why[0].wait,
            Some(Wait::Memory {
                needed: 6 * G,
                available: 4 * G,
                free: 23 * G,
                headroom: G,
                unclaimed: 18 * G,
                claiming: 3,
                factor: 1.0,
                idle: 0,
                idle_workers: 0,
                others: 0,
                others_running: 0,
                others_idle: 0,
                held: 0,
                foreign: G,
            })
        );
        assert_eq!(why[0].par_now, 3);
        assert_eq!(why[0].par_estimate, 3);
        // As the trials allocate, free falls by what used_now rises by: the decision holds.
        for used in [G, 3 * G, 6 * G] {
            let r: Vec<_> = running
                .iter()
                .map(|t| trial(t.trial_id, 0, t.expected_peak, used))
                .collect();
            let d = c.decide(&card(0, 23 * G - 3 * used), &r, 6 * G, G, now);
            assert!(!d.admitted);
            assert_eq!(d.usable, 4 * G);
        }
        // A trial that ends up above its estimate claims nothing more, and is not credited.
        let r = vec![trial(0, 0, 6 * G, 8 * G)];
        assert_eq!(c.decide(&card(0, 15 * G), &r, 6 * G, G, now).usable, 14 * G);
    }

    #[test]
    fn foreign_process_lowers_par() {
        let now = Instant::now();
        let c = cap();
        let alone = c.decide(&card(0, 23 * G), &[], 3 * G, G, now);
        // Someone else's process holds 10 GiB: it is simply not in free.
        let shared = c.decide(&card(0, 13 * G), &[], 3 * G, G, now);
        assert_eq!(alone.par_estimate, 7);
        assert_eq!(shared.par_estimate, 4);
        let (running, _) = fill(&c, &[card(0, 13 * G)], 3 * G, now);
        assert_eq!(running.len(), 4);
    }

    #[test]
    fn max_par_per_device_is_enforced() {
        let now = Instant::now();
        let c = Capacity::new(2, 0.5, Duration::from_secs(600));
        let dev = [card(0, 80 * G)];
        let (running, why) = fill(&c, &dev, G, now);
        assert_eq!(running.len(), 2);
        assert_eq!(
            why[0].wait,
            Some(Wait::MaxParPerDevice {
                running: 2,
                limit: 2
            })
        );
        assert_eq!(why[0].par_estimate, 2);
        let c = Capacity::new(3, 0.5, Duration::from_secs(600));
        assert_eq!(c.place(&dev, &running, G, G, now), Ok(0));
        assert_eq!(c.decide(&dev[0], &running, G, G, now).par_estimate, 3);
        // A limit below what runs: nothing new, nothing stopped.
        let c = Capacity::new(1, 0.5, Duration::from_secs(600));
        let d = c.decide(&dev[0], &running, G, G, now);
        assert!(!d.admitted);
        assert_eq!((d.par_now, d.par_estimate), (2, 2));
        // 0 means 1.
        let c = Capacity::new(0, 0.5, Duration::from_secs(600));
        assert_eq!(c.max_par_per_device(), 1);
    }

    #[test]
    fn admission_keeps_the_headroom_it_is_given_free() {
        let now = Instant::now();
        let c = cap();
        let dev = card(0, 23 * G);
        // The value in force at each decision: a reload that changes it changes the next one.
        assert_eq!(c.decide(&dev, &[], 6 * G, G, now).par_estimate, 3);
        assert_eq!(c.decide(&dev, &[], 6 * G, 5 * G, now).par_estimate, 3);
        assert_eq!(c.decide(&dev, &[], 6 * G, 6 * G, now).par_estimate, 2);
        assert_eq!(c.decide(&dev, &[], 6 * G, 6 * G, now).usable, 17 * G);
    }

    #[test]
    fn oom_factor_lowers_admission_then_recovers() {
        let t0 = Instant::now();
        let mut c = Capacity::new(16, 0.5, Duration::from_secs(600));
        let dev = card(0, 24 * G);
        let other = card(1, 24 * G);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(c.decide(&dev, &[], 4 * G, 0, t0).par_estimate, 6);
        c.record_oom(0, t0);
        assert_eq!(c.admission_factor(0, t0), 0.5);
        let d = c.decide(&dev, &[], 4 * G, 0, t0);
        assert_eq!((d.usable, d.par_estimate), (12 * G, 3));
        // The other device is untouched.
        assert_eq!(c.decide(&other, &[], 4 * G, 0, t0).par_estimate, 6);
        // Halfway through recovery: 0.75.
        assert_eq!(c.admission_factor(0, at(300)), 0.75);
        assert_eq!(c.decide(&dev, &[], 4 * G, 0, at(300)).usable, 18 * G);
        // Recovered.
        assert_eq!(c.admission_factor(0, at(600)), 1.0);
        assert_eq!(c.decide(&dev, &[], 4 * G, 0, at(600)).par_estimate, 6);
        assert_eq!(c.decide(&dev, &[], 4 * G, 0, at(10_000)).usable, 24 * G);

        // A second OOM multiplies again: from 0.75 at t=300 to 0.375, then back over 600 s.
        c.record_oom(0, at(300));
        assert_eq!(c.admission_factor(0, at(300)), 0.375);
        assert!((c.admission_factor(0, at(600)) - 0.6875).abs() < 1e-12);
        assert_eq!(c.admission_factor(0, at(900)), 1.0);
        // Two OOMs at once: 0.25.
        let mut c2 = Capacity::new(16, 0.5, Duration::from_secs(600));
        c2.record_oom(0, t0);
        c2.record_oom(0, t0);
        assert_eq!(c2.admission_factor(0, t0), 0.25);
        // The factor shows in the reason.
        let running = [trial(1, 0, 4 * G, 4 * G)];
        let d = c2.decide(&card(0, 20 * G), &running, 6 * G, 0, t0);
        let wait = d.wait.unwrap();
        assert_eq!(
            wait.to_string(),
            "needs 6.0 GiB, 5.0 GiB available ((free 20.0 GiB − headroom 0.0 GiB) × 0.25 \
             after a recent out-of-memory failure)"
        );
        // Zero recovery time: no lasting effect.
        let mut c3 = Capacity::new(16, 0.5, Duration::ZERO);
        c3.record_oom(0, t0);
        assert_eq!(c3.admission_factor(0, t0), 1.0);
    }

    #[test]
    fn device_with_none_of_ours_always_admits_one() {
        let now = Instant::now();
        let c = cap();
        let dev = [card(0, 23 * G)];
        // Estimated at 40 GiB on a 24 GiB card: still one, so the sweep cannot stall.
        let d = c.decide(&dev[0], &[], 40 * G, G, now);
        assert!(d.admitted);
        assert_eq!(d.par_estimate, 1);
        let (running, why) = fill(&c, &dev, 40 * G, now);
        assert_eq!(running.len(), 1);
        assert!(matches!(why[0].wait, Some(Wait::Memory { .. })));
        // Also after OOMs. (Not where other people's processes hold the card:
        // `a_card_that_other_processes_fill_is_waited_for_not_tried`.)
        let mut c = cap();
        c.record_oom(0, now);
        c.record_oom(0, now);
        assert!(c.decide(&card(0, 23 * G), &[], 40 * G, G, now).admitted);
    }

    #[test]
    fn place_picks_the_device_with_more_room() {
        let now = Instant::now();
        let c = cap();
        let devs = [card(0, 10 * G), card(1, 20 * G)];
        assert_eq!(c.place(&devs, &[], 4 * G, G, now), Ok(1));
        // Our trials still to claim memory on device 1 count against it.
        let running = [trial(1, 1, 10 * G, 0), trial(2, 1, 8 * G, 6 * G)];
        assert_eq!(c.place(&devs, &running, 4 * G, G, now), Ok(0));
        // Filling two devices spreads the trials: 9 + 19 = 28 GiB of room in 4 GiB trials.
        let (running, why) = fill(&c, &devs, 4 * G, now);
        assert_eq!(running.iter().filter(|t| t.device == 0).count(), 2);
        assert_eq!(running.iter().filter(|t| t.device == 1).count(), 4);
        assert_eq!(why.iter().map(|d| d.device).collect::<Vec<_>>(), [0, 1]);
        assert!(why.iter().all(|d| !d.admitted && d.wait.is_some()));
        // Equal room: the lower index.
        let same = [card(3, 20 * G), card(2, 20 * G)];
        assert_eq!(c.place(&same, &[], 4 * G, G, now), Ok(2));
        // No device at all.
        assert_eq!(c.place(&[], &[], 4 * G, G, now), Err(vec![]));
    }

    #[test]
    fn memory_wait_displays_its_parts() {
        let now = Instant::now();
        let c = cap();
        let running = [
            trial(1, 0, 3 * G, G),
            trial(2, 0, 3 * G, G),
            trial(3, 0, 2 * G, 2 * G),
        ];
        // The card holds what our trials use and nothing else.
        let card = |free: u64, used: u64| DeviceView {
            total: free + used,
            ..card(0, free)
        };
        let d = c.decide(&card(gib(9.1), 4 * G), &running, 6 * G, G, now);
        let wait = d.wait.unwrap();
        assert_eq!(
            wait.to_string(),
            "needs 6.0 GiB, 4.1 GiB available (free 9.1 GiB − headroom 1.0 GiB − 4.0 GiB yet \
             to be claimed by 2 running trials)"
        );
        let one = [trial(1, 0, 3 * G, G)];
        let d = c.decide(&card(2 * G, G), &one, 6 * G, G, now);
        assert!(d.wait.unwrap().to_string().ends_with("by 1 running trial)"));
        let claimed = [trial(1, 0, 3 * G, 3 * G)];
        let d = c.decide(&card(2 * G, 3 * G), &claimed, 6 * G, G, now);
        assert_eq!(
            d.wait.unwrap().to_string(),
            "needs 6.0 GiB, 1.0 GiB available (free 2.0 GiB − headroom 1.0 GiB)"
        );
        assert_eq!(
            Wait::MaxParPerDevice {
                running: 4,
                limit: 4
            }
            .to_string(),
            "4 of 4 trials already running here (max_par_per_device)"
        );
    }

    #[test]
    fn idle_workers_memory_is_ours_to_take_back_and_other_daemons_claims_are_not() {
        let now = Instant::now();
        let c = cap();
        let busy = [trial(1, 0, 4 * G, 4 * G)];
        // 10 GiB free, 6 GiB held by three idle workers of ours: 15 GiB usable.
        let with_idle = DeviceView {
            idle: 6 * G,
            idle_workers: 3,
            ..card(0, 10 * G)
        };
        assert_eq!(c.decide(&with_idle, &busy, 12 * G, G, now).usable, 15 * G);
        assert!(c.decide(&with_idle, &busy, 12 * G, G, now).admitted);
        assert!(!c.decide(&card(0, 10 * G), &busy, 12 * G, G, now).admitted);
        // Another daemon's trials have 5 GiB yet to allocate there: not ours to use.
        let shared = DeviceView {
            others: 5 * G,
            others_running: 2,
            others_used: 4 * G,
            ..with_idle.clone()
        };
        let d = c.decide(&shared, &busy, 12 * G, G, now);
        assert_eq!(d.usable, 10 * G);
        assert_eq!(
            d.wait.unwrap().to_string(),
            "needs 12.0 GiB, 10.0 GiB available (free 10.0 GiB + 6.0 GiB held by 3 idle \
             workers − headroom 1.0 GiB − 5.0 GiB yet to be claimed by 2 trials of other \
             daemons)"
        );
        // Another daemon's idle workers there are named: theirs to give back when asked.
        let asked = DeviceView {
            others_idle: 3 * G,
            ..shared.clone()
        };
        assert!(c
            .decide(&asked, &busy, 12 * G, G, now)
            .wait
            .unwrap()
            .to_string()
            .ends_with(
                "daemons); other daemons' idle workers hold 3.0 GiB here, theirs to give back \
                 when asked"
            ));
        // No trial of ours there, but the other daemon's: no "always one", it waits for them.
        assert!(!c.decide(&shared, &[], 12 * G, G, now).admitted);
        // Their trials gone, and what they held with them.
        let alone = DeviceView {
            others: 0,
            others_running: 0,
            others_used: 0,
            free: 18 * G,
            ..shared
        };
        assert!(c.decide(&alone, &[], 40 * G, G, now).admitted);
    }

    /// Two daemons: the other's trial of 21.6 GiB, passed too often, waited 4 s for the card
    /// drained, while we took "always one" each time our last trial ended and ran one at a
    /// time into the memory it waited for.
    #[test]
    fn another_daemons_held_trial_goes_first_on_an_empty_card() {
        let now = Instant::now();
        let c = cap();
        let held = DeviceView {
            others: 20 * G,
            held: 20 * G,
            ..card(0, 24 * G)
        };
        let d = c.decide(&held, &[], 6 * G, G, now);
        assert!(!d.admitted, "{d:?}");
        assert_eq!(
            d.wait.unwrap().to_string(),
            "needs 6.0 GiB, 3.0 GiB available (free 24.0 GiB − headroom 1.0 GiB − 20.0 GiB \
             left free for another daemon's trial, passed too often)"
        );
        // What fits beside the held memory still starts.
        assert!(c.decide(&held, &[], 3 * G, G, now).admitted);
        // Once it runs (no hold, its trial running), the rule is as before.
        let running = DeviceView {
            others: 0,
            others_running: 1,
            held: 0,
            ..card(0, 4 * G)
        };
        assert!(!c.decide(&running, &[], 6 * G, G, now).admitted);
        // Gone, and its memory with it: an empty card takes one whatever its estimate.
        let gone = DeviceView {
            others_running: 0,
            ..card(0, 23 * G)
        };
        assert!(c.decide(&gone, &[], 40 * G, G, now).admitted);
    }

    #[test]
    fn an_admitted_trial_reuses_the_newest_idle_worker_and_retires_the_oldest_for_room() {
        let now = Instant::now();
        let ago = |s: u64| now - Duration::from_secs(s);
        let w = |id: i64, device: u32, memory: u64, idle_for: u64| IdleWorker {
            id,
            device,
            memory,
            since: ago(idle_for),
        };
        let idle = [
            w(1, 0, 2 * G, 30),
            w(2, 0, 2 * G, 10),
            w(3, 0, 2 * G, 20),
            // Another device's idle worker is no help here.
            w(4, 1, 8 * G, 100),
        ];
        let dev = DeviceView {
            idle: 6 * G,
            idle_workers: 3,
            ..card(0, 10 * G)
        };
        let c = cap();
        let reclaim = |c: &Capacity, e: u64| c.reclaim(&dev, &[], e, &idle, G, now);
        // 10 − 1 headroom + the reused worker's 2 = 11 GiB without retiring anyone.
        let fits = Reclaim {
            reuse: Some(2),
            retire: vec![],
        };
        assert_eq!(reclaim(&c, 8 * G), fits);
        assert_eq!(reclaim(&c, 11 * G), fits);
        // One more GiB: the least recently used goes.
        assert_eq!(
            reclaim(&c, 12 * G),
            Reclaim {
                reuse: Some(2),
                retire: vec![1],
            }
        );
        // More than all of them give (a first trial on the device): every other one goes.
        assert_eq!(
            reclaim(&c, 20 * G),
            Reclaim {
                reuse: Some(2),
                retire: vec![1, 3],
            }
        );
        // A running trial's unclaimed memory is not free either.
        let running = [trial(9, 0, 5 * G, 4 * G)];
        assert_eq!(
            c.reclaim(&dev, &running, 11 * G, &idle, G, now),
            Reclaim {
                reuse: Some(2),
                retire: vec![1],
            }
        );
        // After an OOM the factor asks for more room: 6 GiB at 0.5 needs 12 before it.
        let mut c = cap();
        c.record_oom(0, now);
        assert_eq!(reclaim(&c, 6 * G).retire, vec![1]);
        // No idle worker on the device: nothing to reuse or retire.
        assert_eq!(
            cap().reclaim(&card(2, 10 * G), &[], 20 * G, &idle, G, now),
            Reclaim::default()
        );
    }

    #[test]
    fn a_waiting_trial_asks_for_other_daemons_idle_memory_only_where_it_would_then_fit() {
        let now = Instant::now();
        let c = cap();
        let busy = [trial(1, 0, 4 * G, 4 * G), trial(2, 1, 4 * G, 4 * G)];
        // Device 0: 10 GiB free, 9 usable; the other daemon's idle workers hold 2 GiB there.
        // Device 1: 8 GiB free, 7 usable, 8 GiB held idle by the other daemon.
        let views = [
            DeviceView {
                others_idle: 2 * G,
                ..card(0, 10 * G)
            },
            DeviceView {
                others_idle: 8 * G,
                ..card(1, 8 * G)
            },
        ];
        let ask = |e: u64| {
            let d: Vec<Decision> = views
                .iter()
                .map(|v| c.decide(v, &busy, e, G, now))
                .collect();
            c.request(&views, &d)
        };
        // 10 GiB: 1 short on device 0, 3 on device 1: asks where it lacks least.
        assert_eq!(
            ask(10 * G),
            Some(Request {
                device: 0,
                want: G,
                seen: 10 * G
            })
        );
        // 12 GiB: device 0's 2 idle cannot make up 3, device 1's 8 make up 5.
        assert_eq!(
            ask(12 * G),
            Some(Request {
                device: 1,
                want: 5 * G,
                seen: 8 * G
            })
        );
        // 16 GiB: 7 short where 2 are idle, 9 where 8 are: retiring would not let it start.
        assert_eq!(ask(16 * G), None);
        // It fits somewhere: no decision waits for memory there, and none asks.
        assert_eq!(ask(9 * G), None);
        // Waiting for max_par_per_device, not memory: nothing to ask for.
        let full = Capacity::new(1, 0.5, Duration::from_secs(600));
        let d: Vec<Decision> = views
            .iter()
            .map(|v| full.decide(v, &busy, 12 * G, G, now))
            .collect();
        assert_eq!(full.request(&views, &d), None);
        // Without the other daemon's idle memory there is nothing to ask for either.
        let plain = [card(0, 10 * G)];
        let d = [c.decide(&plain[0], &busy, 10 * G, G, now)];
        assert_eq!(c.request(&plain, &d), None);
    }

    #[test]
    fn another_daemons_request_retires_our_least_recently_used_idle_workers_until_met() {
        let now = Instant::now();
        let w = |id: i64, device: u32, memory: u64, idle_for: u64| IdleWorker {
            id,
            device,
            memory,
            since: now - Duration::from_secs(idle_for),
        };
        let idle = [
            w(1, 0, 2 * G, 10),
            w(2, 0, 3 * G, 30),
            w(3, 0, 2 * G, 20),
            w(4, 1, 8 * G, 100),
            // Its process is gone (memory 0): retiring it frees nothing.
            w(5, 0, 0, 50),
        ];
        assert_eq!(answer(&idle, 0, G), vec![2]);
        assert_eq!(answer(&idle, 0, 3 * G), vec![2]);
        assert_eq!(answer(&idle, 0, 4 * G), vec![2, 3]);
        assert_eq!(answer(&idle, 0, 40 * G), vec![2, 3, 1]);
        assert_eq!(answer(&idle, 1, G), vec![4]);
        assert!(answer(&idle, 0, 0).is_empty());
        assert!(answer(&idle, 2, G).is_empty());
    }

    #[test]
    fn a_settled_trial_counts_at_what_it_uses_not_at_its_over_estimate() {
        let now = Instant::now();
        let c = cap();
        // Three trials expected at 7 GiB that settled at 5: 24 − 15 − 1 headroom = 8 GiB.
        let mut running: Vec<RunningTrial> = (0..3).map(|i| trial(i, 0, 7 * G, 5 * G)).collect();
        let dev = card(0, 9 * G);
        // Not settled: each may still grow to 7, 6 GiB held back.
        assert_eq!(c.decide(&dev, &running, 4 * G, G, now).usable, 2 * G);
        for t in &mut running {
            t.settled = true;
        }
        let d = c.decide(&dev, &running, 4 * G, G, now);
        // Settled: 2% of 5 GiB each for allocator noise, the rest usable.
        assert_eq!(d.usable, 8 * G - 3 * (5 * G / 50 + 1));
        assert!(d.admitted);
        // A settled trial above its estimate has nothing left to claim.
        assert_eq!(
            RunningTrial {
                settled: true,
                ..trial(9, 0, 4 * G, 5 * G)
            }
            .unclaimed(),
            0
        );
    }

    /// Under caps a trial may grow to its cap whatever it uses now: a settled capped trial
    /// still counts at its cap (the 6 GiB it was admitted with, 4 GiB used), an uncapped one at
    /// its level plus 2%. Before, both counted at their level, and a neighbour could be given
    /// the 2 GiB the capped one may still claim.
    #[rstest::rstest]
    #[case::capped_ramping(true, false, 2 * G)]
    #[case::capped_settled(true, true, 2 * G)]
    #[case::uncapped_ramping(false, false, 2 * G)]
    #[case::uncapped_settled(false, true, 4 * G / 50 + 1)]
    fn a_settled_capped_trial_keeps_its_cap_counted_and_an_uncapped_one_does_not(
        #[case] capped: bool,
        #[case] settled: bool,
        #[case] unclaimed: u64,
    ) {
        let t = RunningTrial {
            capped,
            settled,
            ..trial(1, 0, 6 * G, 4 * G)
        };
        assert_eq!(t.unclaimed(), unclaimed);
        // An 8 GiB card with 1 GiB headroom, 4 GiB free: a 2 GiB neighbour fits beside the
        // settled uncapped trial only.
        let eight = DeviceView {
            total: 8 * G,
            ..card(0, 4 * G)
        };
        let d = cap().decide(&eight, &[t], 2 * G, G, Instant::now());
        assert_eq!(d.admitted, !capped && settled, "{d:?}");
    }

    #[rstest::rstest]
    #[case::nothing_used(0, 0)]
    #[case::rounds_up(1, 1)]
    #[case::two_percent(50 * G, G)]
    #[case::five_gib(5 * G, 5 * G / 50 + 1)]
    fn a_settled_trial_holds_back_two_percent_of_its_use_rounded_up(
        #[case] used: u64,
        #[case] held_back: u64,
    ) {
        assert_eq!(settled_margin(used), held_back);
    }

    /// A 24 GiB card (1 GiB headroom) runs our trial 1, settled at 14 GiB of its 15 GiB
    /// bound; the head of the line waits for 15.5 GiB. What may start beside it: the card
    /// once trial 1 and the others' trials end, less the head, less the trials already started
    /// beside it (trial 2: 2 GiB used of its 3 GiB bound).
    #[rstest::rstest]
    #[case::alone(&[1], 0, 0, 15.5, 7.5)]
    #[case::beside_one_already(&[1, 2], 0, 0, 15.5, 4.5)]
    #[case::the_others_trial_ends_too(&[1], 3, 0, 15.5, 7.5)]
    #[case::the_others_hold_stays(&[1], 0, 4, 15.5, 3.5)]
    #[case::the_head_never_fits(&[1], 0, 0, 24.0, 0.0)]
    fn backfill_room_leaves_the_head_room_once_the_trials_before_it_end(
        #[case] ours: &[i64],
        #[case] others_used: u64,
        #[case] held: u64,
        #[case] head: f64,
        #[case] room: f64,
    ) {
        let now = Instant::now();
        let mut running = vec![RunningTrial {
            settled: true,
            ..trial(1, 0, 15 * G, 14 * G)
        }];
        if ours.contains(&2) {
            running.push(trial(2, 0, 3 * G, 2 * G));
        }
        running.push(trial(3, 1, 9 * G, 0)); // on another device: no part of it
        let used: u64 = running
            .iter()
            .filter(|t| t.device == 0)
            .map(|t| t.used_now)
            .sum();
        let dev = DeviceView {
            free: 24 * G - used - others_used * G,
            others_used: others_used * G,
            held: held * G,
            others: held * G,
            ..card(0, 0)
        };
        let backfilled = |id: i64| id == 2;
        let got = cap().backfill_room(&dev, &running, gib(head), backfilled, G, now);
        assert_eq!(got, gib(room), "{} GiB", got as f64 / G as f64);
    }

    /// Someone else's job holds 22 of the 24 GiB (`used` GiB, none of it ours): a trial that
    /// needs more than the rest waits for that job, and says so; one within the rest starts.
    /// "Always one" is for an empty card only (nothing beyond headroom held by others).
    #[rstest::rstest]
    #[case::a_busy_card_waits(
        22.0,
        4.0,
        false,
        Some(" other processes hold 22.0 GiB here: waiting for them")
    )]
    #[case::what_fits_beside_it_starts(22.0, 0.5, true, None)]
    #[case::an_empty_card_takes_one_whatever_its_estimate(0.0, 40.0, true, None)]
    #[case::a_little_within_headroom_is_empty_still(0.75, 40.0, true, None)]
    #[case::past_headroom_it_is_not(
        1.5,
        40.0,
        false,
        Some(" other processes hold 1.5 GiB here: waiting for them")
    )]
    fn a_card_that_other_processes_fill_is_waited_for_not_tried(
        #[case] used: f64,
        #[case] estimate: f64,
        #[case] admitted: bool,
        #[case] said: Option<&str>,
    ) {
        let now = Instant::now();
        let dev = card(0, 24 * G - gib(used));
        let d = cap().decide(&dev, &[], gib(estimate), G, now);
        assert_eq!(d.admitted, admitted, "{d:?}");
        assert_eq!(d.waits_for_others(), said.is_some(), "{d:?}");
        let text = d.wait.as_ref().map(|w| w.to_string());
        match said {
            Some(end) => {
                let text = text.unwrap();
                assert!(text.ends_with(&format!(";{end}")), "{text}");
                assert!(
                    text.starts_with(&format!("needs {estimate:.1} GiB")),
                    "{text}"
                );
            }
            None => assert_eq!(text, None),
        }
    }

    #[test]
    fn our_own_trials_and_idle_workers_and_other_daemons_are_not_foreign() {
        // 24 GiB: 8 free, 6 held by our idle workers, 6 by our running trial, 4 by another
        // daemon's trials: nothing of anyone else's.
        let dev = DeviceView {
            idle: 6 * G,
            others_used: 4 * G,
            ..card(0, 8 * G)
        };
        assert_eq!(dev.foreign(6 * G), 0);
        assert_eq!(dev.foreign(4 * G), 2 * G);
        // Readings that do not add up are never negative.
        assert_eq!(card(0, 30 * G).foreign(0), 0);
    }

    #[test]
    fn an_empty_card_grants_a_trial_too_large_for_it_what_it_has() {
        let now = Instant::now();
        let d = cap().decide(&card(0, 24 * G), &[], 40 * G, G, now);
        assert!(d.admitted);
        assert_eq!(d.grant(40 * G), 23 * G);
        // Where it fits, its estimate.
        assert_eq!(d.grant(4 * G), 4 * G);
        let waits = cap().decide(&card(0, 2 * G), &[], 4 * G, G, now);
        assert_eq!(waits.grant(4 * G), 4 * G);
    }

    #[rstest::rstest]
    #[case::less_the_context(8 * G, 512 << 20, 8 * G - (512 << 20))]
    #[case::measured_context(8 * G, G, 7 * G)]
    #[case::never_below_the_least(G / 2, G, MIN_CAP)]
    #[case::nothing_admitted(0, CONTEXT_PRIOR, MIN_CAP)]
    fn a_trials_cap_is_what_it_was_admitted_with_less_its_workers_context(
        #[case] admitted: u64,
        #[case] context: u64,
        #[case] want: u64,
    ) {
        assert_eq!(memory_cap(admitted, context), want);
    }

    #[test]
    fn decision_serializes() {
        let now = Instant::now();
        let c = Capacity::new(1, 0.5, Duration::from_secs(1));
        let d = c.decide(&card(2, 23 * G), &[trial(1, 2, G, 0)], G, G, now);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["device"], json!(2));
        assert_eq!(v["admitted"], json!(false));
        assert_eq!(
            v["wait"],
            json!({"MaxParPerDevice": {"running": 1, "limit": 1}})
        );
        assert_eq!(v["par_now"], json!(1));
    }
}
