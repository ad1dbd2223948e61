//! What the ledger says: the daemons (`Owner`), what each one's trials hold back on a device
//! (`Claim`), its requests and holds, and the sheet of them all (`Sheet`) as the file is read
//! and written (`text`) and validated (`valid`).

use crate::process;
use std::collections::BTreeMap;

/// A daemon, as the ledger keys it: its pid and that process's start time (clock ticks after
/// boot), so that a reused pid is never taken for a live daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub pid: u32,
    pub start: u64,
}

impl Owner {
    /// This process, or `None` where /proc cannot say its start time.
    pub fn me() -> Option<Owner> {
        let pid = std::process::id();
        let start = process::proc_stat(pid as i32)?.start_time;
        Some(Owner { pid, start })
    }

    /// Whether this daemon still runs: its pid names a live process started when it was.
    pub fn alive(&self) -> bool {
        process::proc_stat(self.pid as i32)
            .is_some_and(|s| s.start_time == self.start && !matches!(s.state, 'Z' | 'X' | 'x'))
    }
}

/// One running trial as the other daemons count it: its worker's process group (0 while it has
/// none) and the bytes it is counted at in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub pgid: i32,
    pub bound: u64,
}

/// What one daemon's running trials hold back on one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    /// Bytes its running trials are expected to allocate but have not yet, by its own reading
    /// (what a daemon of the first formats, which writes no `trials`, goes by).
    pub unclaimed: u64,
    /// Its running trials, each with its process group and bound (`None`: an entry of a daemon
    /// that does not write them; its `unclaimed` counts instead). Summed over the other
    /// daemons ([`Locked::others`]), the trials of those that write them.
    pub trials: Option<Vec<Held>>,
    /// Its trials running on the device.
    pub running: usize,
    /// What its idle workers there hold (it can give that back by retiring them).
    pub idle: u64,
    /// Bytes its waiting trial lacks there that the others' idle workers hold (0: no request).
    pub want: u64,
    /// The free memory it saw on the device when it asked.
    pub seen: u64,
    /// Trials it has started on the device since it began (summed over the other daemons by
    /// [`Locked::others`]).
    pub started: u64,
    /// Bytes its waiting trial, passed too often, holds back from the others (0: no hold), and
    /// since when (milliseconds since the epoch).
    pub hold: u64,
    pub hold_since: u64,
}

impl Claim {
    /// What these trials have yet to claim against a reading in which process group `g` uses
    /// `used(g)` bytes on the device: `bound − used` for each trial that writes its group (a
    /// trial without a worker yet, or one the reading does not list, at its whole bound), plus
    /// the `unclaimed` of the entries that do not.
    pub fn against(&self, used: impl Fn(i32) -> u64) -> u64 {
        let trials = self.trials.iter().flatten().map(|t| {
            let used = if t.pgid > 0 { used(t.pgid) } else { 0 };
            t.bound.saturating_sub(used)
        });
        trials.fold(self.unclaimed, u64::saturating_add)
    }

    /// What these trials use against the same reading, each at most its bound: memory that is
    /// free again once they end (what one uses past its bound is not taken to go with it).
    /// Entries that write no `trials` add nothing: what they use cannot be told apart.
    pub fn used_by(&self, used: impl Fn(i32) -> u64) -> u64 {
        let trials = self.trials.iter().flatten().map(|t| {
            let used = if t.pgid > 0 { used(t.pgid) } else { 0 };
            used.min(t.bound)
        });
        trials.fold(0, u64::saturating_add)
    }
}

/// Another daemon asks for memory held by idle workers on `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub device: u32,
    pub want: u64,
    pub seen: u64,
}

impl Request {
    /// What is still to be freed for it with the device's free memory now at `free`: what was
    /// freed since it was made (retirements already done, trials ended) counts against it, so
    /// that a request read again before its daemon has looked again is not answered twice.
    pub fn outstanding(&self, free: u64) -> u64 {
        self.want.saturating_sub(free.saturating_sub(self.seen))
    }
}

/// Another daemon's hold on `device`: memory it asks the others to leave free for its waiting
/// trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub device: u32,
    pub bytes: u64,
    /// Milliseconds since the epoch, then the daemon: the order holds are honoured in.
    pub since: (u64, Owner),
}

impl Hold {
    /// Whether this hold comes before `mine` (this daemon's hold on the same device, if any):
    /// the older is honoured, so two daemons' holds never wait for each other.
    pub fn before(&self, mine: Option<(u64, Owner)>) -> bool {
        mine.is_none_or(|m| self.since < m)
    }
}

/// Claims by device index.
pub type Claims = BTreeMap<u32, Claim>;

/// One line of the file: `PID START DEVICE UNCLAIMED RUNNING IDLE WANT SEEN TRIALS`, `TRIALS`
/// being `-` or `PGID:BOUND,...` (a line of the first formats, without the last four or the
/// last one, reads with them 0 and without trials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) owner: Owner,
    pub(super) device: u32,
    pub(super) claim: Claim,
}

/// What the file says of the daemons that write it: each one's heartbeat and its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Sheet {
    /// Each daemon's latest heartbeat: milliseconds of the host's boot clock
    /// ([`super::valid::now_ms`]), which every daemon of the host reads alike and which never
    /// steps.
    pub(super) beats: BTreeMap<Owner, u64>,
    pub(super) entries: Vec<Entry>,
}

impl Sheet {
    /// The sheet with `me`'s entries replaced by `mine` and its heartbeat at `now`.
    pub(super) fn with_mine(&self, me: Owner, mine: &Claims, now: u64) -> Sheet {
        let mut beats = self.beats.clone();
        beats.insert(me, now);
        Sheet {
            beats,
            entries: replace_mine(&self.entries, me, mine),
        }
    }
}

/// The claims of every daemon but `me`, summed per device (their requests left out: see
/// [`requests`]): the trials of those that write them, the `unclaimed` of those that do not.
pub(super) fn others(entries: &[Entry], me: Owner) -> Claims {
    let mut out = Claims::new();
    for e in entries.iter().filter(|e| e.owner != me) {
        let c = out.entry(e.device).or_default();
        match &e.claim.trials {
            Some(trials) => c.trials.get_or_insert_with(Vec::new).extend(trials),
            None => c.unclaimed = c.unclaimed.saturating_add(e.claim.unclaimed),
        }
        c.running = c.running.saturating_add(e.claim.running);
        c.idle = c.idle.saturating_add(e.claim.idle);
        c.started = c.started.saturating_add(e.claim.started);
    }
    out
}

/// The other daemons' holds.
pub(super) fn holds(entries: &[Entry], me: Owner) -> Vec<Hold> {
    entries
        .iter()
        .filter(|e| e.owner != me && e.claim.hold > 0)
        .map(|e| Hold {
            device: e.device,
            bytes: e.claim.hold,
            since: (e.claim.hold_since, e.owner),
        })
        .collect()
}

/// The other daemons' requests for idle workers' memory.
pub(super) fn requests(entries: &[Entry], me: Owner) -> Vec<Request> {
    entries
        .iter()
        .filter(|e| e.owner != me && e.claim.want > 0)
        .map(|e| Request {
            device: e.device,
            want: e.claim.want,
            seen: e.claim.seen,
        })
        .collect()
}

/// The entries with `me`'s replaced by `mine` (devices with nothing to claim and nothing
/// running are left out).
pub(super) fn replace_mine(entries: &[Entry], me: Owner, mine: &Claims) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries.iter().filter(|e| e.owner != me).cloned().collect();
    for (device, claim) in mine {
        if claim.unclaimed > 0
            || claim.running > 0
            || claim.idle > 0
            || claim.want > 0
            || claim.started > 0
            || claim.hold > 0
        {
            out.push(Entry {
                owner: me,
                device: *device,
                claim: claim.clone(),
            });
        }
    }
    out
}
