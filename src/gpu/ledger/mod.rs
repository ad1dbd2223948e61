//! One ledger per host: what each sweepd daemon's running trials have yet to claim on each
//! device, shared by every daemon on the machine.
//!
//! Admission counts a just-started trial at its whole expected peak until NVML shows it using
//! that memory ("unclaimed", `docs/gpu-memory-model.md`). A daemon knows that only of its own
//! trials: two daemons on one card (two studies, two `sweepd@` units) would each see the other's
//! just-started trials as free memory and over-admit. So each daemon writes its unclaimed memory
//! and its running trials per device into one small file, and subtracts the others' in
//! admission.
//!
//! An idle worker of one daemon holds memory (its CUDA context, its framework's caches) that a
//! trial of another daemon may be waiting for; only its own daemon can retire it, and left
//! alone it goes only after `idle_worker_timeout`. So each daemon also writes what its idle
//! workers hold per device, and a daemon whose waiting trial would fit if the others' idle
//! workers there were gone writes a request: the bytes it lacks and the free memory it saw.
//! The others retire their least recently used idle workers there until the request is met,
//! counting what was freed since the request was made (`Request::outstanding`). They answer
//! as soon as their watch of the file (below) shows a request they had not seen
//! ([`asked_anew`]), not at their next `poll_interval`, and each request once: written again
//! unchanged while the retirements it caused are still under way, it is not answered again.
//!
//! The file is read and rewritten whole under an exclusive `flock`, held by a daemon from
//! reading the others' claims to writing its own after the admission decision, so that two
//! daemons never decide on the same free memory.
//!
//! What another daemon's trial has yet to claim must be counted against the same NVML reading
//! as the free memory it is subtracted from: a figure the other daemon worked out from its own,
//! older reading counts twice what the trial allocated since (it is gone from free memory and
//! still in the figure), and from a newer one it counts nothing of what our reading does not
//! yet show. So each running trial is written with its worker's process group and the bytes it
//! is counted at in all (its expected peak, or what it uses plus allocator noise once settled),
//! and each daemon subtracts `bound − what the group uses in its own reading` (`Claim::against`).
//!
//! A large trial waiting in one daemon's line could starve while another daemon keeps filling
//! every byte freed with small trials: a daemon's own line lets a trial that fits pass the head
//! only `MAX_PASSES` times, and the others' starts are passes too. So each daemon writes how
//! many trials it has started per device, and one whose waiting trial has been passed that
//! often writes a hold: the bytes that trial needs on a device. The others count the hold as
//! a claim, so the card drains until the trial fits; holds are honoured oldest first (a daemon
//! ignores those younger than its own on the device), so two holds never wait for each other.
//! These travel on a line of their own (`PID START DEVICE + STARTED HOLD SINCE`), which a daemon
//! of an earlier format skips, reading the claims line as before.
//!
//! Another daemon's trial that ends frees memory our waiting trials may fit in, but our NVML
//! readings come every `poll_interval`: so each daemon watches the file ([`Ledger::watch`],
//! inotify) and, when another daemon's entry shows fewer trials, less held by idle workers or
//! less yet to claim on a device ([`freed`]), reads NVML and looks at its line at once. Its
//! own writes and the others' starts change nothing there, so two daemons do not wake each
//! other in turn.
//!
//! An entry is keyed by the daemon's pid and that
//! process's start time: an entry whose daemon is gone (exited, killed, crashed) is left out of
//! every reading and dropped at the next write, so a crashed daemon's claims expire by
//! themselves.
//!
//! Where the file is: `$SWEEPD_LEDGER` when set (tests point two daemons at one file with it),
//! else `$RUNTIME_DIRECTORY/gpu-ledger` (systemd's `RuntimeDirectory=`), else
//! `$XDG_RUNTIME_DIR/sweepd/gpu-ledger`, else `/run/sweepd/gpu-ledger` where that directory is
//! writable, else `sweepd-<uid>/gpu-ledger` in the temporary directory.

use crate::process;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Environment variable naming the ledger file, over every default.
pub const LEDGER_ENV: &str = "SWEEPD_LEDGER";

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

/// What is still to be freed per device for `requests`, each against the free memory `free`
/// reads on its device now (`None`: a device we do not use, which we cannot help on).
pub fn outstanding(requests: &[Request], free: impl Fn(u32) -> Option<u64>) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for r in requests {
        if let Some(f) = free(r.device) {
            let bytes: &mut u64 = out.entry(r.device).or_default();
            *bytes = bytes.saturating_add(r.outstanding(f));
        }
    }
    out.retain(|_, b| *b > 0);
    out
}

/// The other daemons' requests for our idle workers' memory: those not answered yet, and those
/// answered while the ledger still shows them. A daemon that looks again before the memory our
/// retirements free shows in NVML writes its request again unchanged; answered twice, it would
/// cost a second idle worker.
#[derive(Debug, Default)]
pub struct Answers {
    asked: Vec<Request>,
    answered: Vec<Request>,
}

impl Answers {
    /// Takes in the requests as the ledger shows them now.
    pub fn take(&mut self, requests: Vec<Request>) {
        self.answered.retain(|r| requests.contains(r));
        self.asked = requests
            .into_iter()
            .filter(|r| !self.answered.contains(r))
            .collect();
    }

    /// What is still to free per device for the requests not answered yet ([`outstanding`]);
    /// they count as answered from now on.
    pub fn answer(&mut self, free: impl Fn(u32) -> Option<u64>) -> BTreeMap<u32, u64> {
        let bytes = outstanding(&self.asked, free);
        self.answered.append(&mut self.asked);
        bytes
    }
}

/// Whether another daemon asks anew for idle workers' memory: a request in `now` that `before`
/// did not have (a first one, or one for another amount or from another reading). The daemon
/// whose idle workers hold it answers at once rather than at its next `poll_interval`.
pub fn asked_anew(before: &[Request], now: &[Request]) -> bool {
    now.iter().any(|r| !before.contains(r))
}

/// The other live daemons' claims and requests, as a daemon watching the ledger compares them
/// between two writes ([`freed`], [`asked_anew`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Neighbours {
    pub claims: Claims,
    pub requests: Vec<Request>,
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
struct Entry {
    owner: Owner,
    device: u32,
    claim: Claim,
}

/// Parses the file's text; lines that do not read as entries (a future format, a hand edit) are
/// left out rather than trusted.
fn parse(text: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if let Some((owner, device, [started, hold, since])) = parse_standing(line) {
            // It follows its claims line; alone it is left out.
            if let Some(e) = entries
                .iter_mut()
                .find(|e| e.owner == owner && e.device == device)
            {
                e.claim.started = started;
                e.claim.hold = hold;
                e.claim.hold_since = since;
            }
        } else if let Some(e) = parse_claims(line) {
            entries.push(e);
        }
    }
    entries
}

/// `PID START DEVICE + STARTED HOLD SINCE`.
fn parse_standing(line: &str) -> Option<(Owner, u32, [u64; 3])> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [pid, start, device, "+", started, hold, since] = f[..] else {
        return None;
    };
    let owner = Owner {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    };
    Some((
        owner,
        device.parse().ok()?,
        [
            started.parse().ok()?,
            hold.parse().ok()?,
            since.parse().ok()?,
        ],
    ))
}

/// `PID START DEVICE UNCLAIMED RUNNING [IDLE WANT SEEN [TRIALS]]`.
fn parse_claims(l: &str) -> Option<Entry> {
    let mut f = l.split_whitespace();
    let mut entry = Entry {
        owner: Owner {
            pid: f.next()?.parse().ok()?,
            start: f.next()?.parse().ok()?,
        },
        device: f.next()?.parse().ok()?,
        claim: Claim {
            unclaimed: f.next()?.parse().ok()?,
            running: f.next()?.parse().ok()?,
            ..Claim::default()
        },
    };
    let rest = f.collect::<Vec<&str>>();
    match rest[..] {
        [] => {}
        [idle, want, seen, ..] if rest.len() <= 4 => {
            entry.claim.idle = idle.parse().ok()?;
            entry.claim.want = want.parse().ok()?;
            entry.claim.seen = seen.parse().ok()?;
        }
        _ => return None,
    }
    if let Some(trials) = rest.get(3) {
        entry.claim.trials = Some(parse_trials(trials)?);
    }
    Some(entry)
}

/// `-` or `PGID:BOUND,...`.
fn parse_trials(text: &str) -> Option<Vec<Held>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|t| {
            let (pgid, bound) = t.split_once(':')?;
            Some(Held {
                pgid: pgid.parse().ok().filter(|g| *g >= 0)?,
                bound: bound.parse().ok()?,
            })
        })
        .collect()
}

fn format(entries: &[Entry]) -> String {
    let mut out = String::from(
        "# sweepd GPU ledger (docs/gpu-memory-model.md): pid start_time device unclaimed_bytes running idle_bytes want_bytes seen_free_bytes trials(pgid:bound_bytes,...)\n\
         # and: pid start_time device + trials_started hold_bytes hold_since_ms\n",
    );
    for e in entries {
        let c = &e.claim;
        out.push_str(&format!(
            "{} {} {} {} {} {} {} {}",
            e.owner.pid, e.owner.start, e.device, c.unclaimed, c.running, c.idle, c.want, c.seen
        ));
        match c.trials.as_deref() {
            None => {}
            Some([]) => out.push_str(" -"),
            Some(trials) => {
                let list: Vec<String> = trials
                    .iter()
                    .map(|t| format!("{}:{}", t.pgid, t.bound))
                    .collect();
                out.push(' ');
                out.push_str(&list.join(","));
            }
        }
        out.push('\n');
        if c.started > 0 || c.hold > 0 {
            out.push_str(&format!(
                "{} {} {} + {} {} {}\n",
                e.owner.pid, e.owner.start, e.device, c.started, c.hold, c.hold_since
            ));
        }
    }
    out
}

/// The claims of every daemon but `me`, summed per device (their requests left out: see
/// [`requests`]): the trials of those that write them, the `unclaimed` of those that do not.
fn others(entries: &[Entry], me: Owner) -> Claims {
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
fn holds(entries: &[Entry], me: Owner) -> Vec<Hold> {
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
fn requests(entries: &[Entry], me: Owner) -> Vec<Request> {
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
fn replace_mine(entries: &[Entry], me: Owner, mine: &Claims) -> Vec<Entry> {
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

/// The ledger's path from the environment (`var`), whether `/run/sweepd` is writable, the
/// temporary directory and the user id: the rule of the module documentation.
fn path_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
    run_writable: bool,
    tmp: &Path,
    uid: u32,
) -> PathBuf {
    let var = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(p) = var(LEDGER_ENV) {
        return PathBuf::from(p);
    }
    if let Some(dir) = var("RUNTIME_DIRECTORY") {
        // systemd may list several directories, separated by ':'.
        let dir = dir.to_string_lossy().into_owned();
        let first = dir.split(':').next().unwrap_or_default();
        if !first.is_empty() {
            return Path::new(first).join("gpu-ledger");
        }
    }
    if let Some(dir) = var("XDG_RUNTIME_DIR") {
        return Path::new(&dir).join("sweepd/gpu-ledger");
    }
    if run_writable {
        return PathBuf::from("/run/sweepd/gpu-ledger");
    }
    tmp.join(format!("sweepd-{uid}")).join("gpu-ledger")
}

/// The host's ledger, as this daemon uses it.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
    me: Owner,
}

/// The ledger locked: the others' live claims, read; this daemon's, to be written. The lock is
/// released when this is dropped (after [`Locked::write`] or without writing).
pub struct Locked {
    file: Flock<File>,
    me: Owner,
    /// Live entries (those of gone daemons already left out).
    entries: Vec<Entry>,
}

impl Ledger {
    /// Where the ledger is on this host (see the module documentation).
    pub fn default_path() -> PathBuf {
        let run = Path::new("/run/sweepd");
        let run_writable = nix::unistd::access(run, nix::unistd::AccessFlags::W_OK).is_ok();
        path_from(
            |name| std::env::var_os(name),
            run_writable,
            &std::env::temp_dir(),
            // The owner of /proc/self is this process's user (no unsafe getuid needed).
            std::fs::metadata("/proc/self").map_or(0, |m| m.uid()),
        )
    }

    /// The ledger at `path` for daemon `me`: its directory is created (0700 when sweepd makes
    /// it) and the file too (0660), so that a first use fails here, loudly, not at admission.
    pub fn open(path: PathBuf, me: Owner) -> std::io::Result<Ledger> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.is_dir() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
        }
        let ledger = Ledger { path, me };
        drop(ledger.file()?);
        Ok(ledger)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self) -> std::io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o660)
            .open(&self.path)
    }

    /// Locks the ledger (waiting for another daemon that holds it: it holds it only for one
    /// admission decision) and reads the live entries.
    pub fn lock(&self) -> std::io::Result<Locked> {
        let mut file = Flock::lock(self.file()?, FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let entries = parse(&text)
            .into_iter()
            .filter(|e| e.owner == self.me || e.owner.alive())
            .collect();
        Ok(Locked {
            file,
            me: self.me,
            entries,
        })
    }

    /// Writes this daemon's claims (others' kept, gone daemons' dropped).
    pub fn publish(&self, mine: &Claims) -> std::io::Result<()> {
        self.lock()?.write(mine)
    }

    /// The other live daemons' claims and requests, read under the lock and released at once.
    pub fn read_neighbours(&self) -> std::io::Result<Neighbours> {
        let locked = self.lock()?;
        Ok(Neighbours {
            claims: locked.others(),
            requests: locked.requests(),
        })
    }

    /// Watches the file for writes (any daemon's, this one's included: [`freed`] tells which
    /// matter). A ledger removed and made again is not followed: the polls go on as before.
    pub fn watch(&self) -> std::io::Result<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(&self.path, AddWatchFlags::IN_MODIFY)?;
        Ok(Watch(inotify))
    }
}

/// Writes to the ledger file, as an inotify descriptor to wait on (readable when some came).
pub struct Watch(Inotify);

impl Watch {
    /// Takes the writes seen so far, without waiting: whether there were any.
    pub fn drain(&self) -> bool {
        let mut any = false;
        while matches!(self.0.read_events(), Ok(events) if !events.is_empty()) {
            any = true;
        }
        any
    }
}

impl std::os::fd::AsRawFd for Watch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// Whether the other daemons freed room on some device between two readings of their claims:
/// fewer trials running (one ended, or its daemon is gone), less held by idle workers (one
/// retired), or less counted for their trials (one settled at its peak, below its bound).
/// More of any of them (a start) frees nothing.
pub fn freed(before: &Claims, now: &Claims) -> bool {
    // What their trials are counted at in all: their bounds, against a reading of nothing.
    let bound = |c: &Claim| c.against(|_| 0);
    before.iter().any(|(device, b)| {
        let n = now.get(device).cloned().unwrap_or_default();
        n.running < b.running || n.idle < b.idle || bound(&n) < bound(b)
    })
}

impl Locked {
    /// The other live daemons' claims, per device.
    pub fn others(&self) -> Claims {
        others(&self.entries, self.me)
    }

    /// The other live daemons' requests for the memory of idle workers.
    pub fn requests(&self) -> Vec<Request> {
        requests(&self.entries, self.me)
    }

    /// The other live daemons' holds.
    pub fn holds(&self) -> Vec<Hold> {
        holds(&self.entries, self.me)
    }

    /// This daemon, as the ledger knows it.
    pub fn me(&self) -> Owner {
        self.me
    }

    /// Replaces this daemon's claims with `mine`, and releases the lock.
    pub fn write(mut self, mine: &Claims) -> std::io::Result<()> {
        let text = format(&replace_mine(&self.entries, self.me, mine));
        self.file.seek(SeekFrom::Start(0))?;
        self.file.set_len(0)?;
        self.file.write_all(text.as_bytes())?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn claims(list: &[(u32, u64, usize)]) -> Claims {
        list.iter()
            .map(|&(d, unclaimed, running)| {
                (
                    d,
                    Claim {
                        unclaimed,
                        running,
                        ..Claim::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_file_reads_back_what_was_written_and_skips_what_is_not_an_entry() {
        let a = Owner { pid: 10, start: 5 };
        let entries = replace_mine(&[], a, &claims(&[(0, 6 * G, 2), (1, 0, 0)]));
        // A device with nothing claimed and nothing running is not written.
        assert_eq!(entries.len(), 1);
        let text = format!("{}garbage line\n1 2 3\n1 2 3 4 5 6\n", format(&entries));
        assert_eq!(parse(&text), entries);
    }

    #[test]
    fn a_daemon_sees_the_others_claims_summed_and_not_its_own() {
        let (a, b, c) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let mut e = replace_mine(&[], a, &claims(&[(0, 6 * G, 1)]));
        e = replace_mine(&e, b, &claims(&[(0, 2 * G, 1), (1, G, 1)]));
        e = replace_mine(&e, c, &claims(&[(0, 0, 3)]));
        assert_eq!(others(&e, a), claims(&[(0, 2 * G, 4), (1, G, 1)]));
        // Rewriting one's own entry replaces it, whatever it was.
        e = replace_mine(&e, b, &claims(&[]));
        assert_eq!(others(&e, a), claims(&[(0, 0, 3)]));
        // The same pid started at another time is another daemon.
        let a_again = Owner { pid: 1, start: 2 };
        assert_eq!(others(&e, a_again), claims(&[(0, 6 * G, 4)]));
    }

    #[test]
    fn idle_memory_and_requests_travel_to_the_other_daemons() {
        let (a, b) = (Owner { pid: 1, start: 1 }, Owner { pid: 2, start: 1 });
        let holding = Claim {
            running: 1,
            idle: 6 * G,
            ..Claim::default()
        };
        let asking = Claim {
            want: 4 * G,
            seen: 10 * G,
            ..Claim::default()
        };
        let mut e = replace_mine(&[], a, &[(0, holding)].into());
        // A daemon with nothing running that asks for memory is written all the same.
        e = replace_mine(&e, b, &[(0, asking)].into());
        let e = parse(&format(&e));
        assert_eq!(others(&e, b)[&0].idle, 6 * G);
        assert_eq!(
            requests(&e, a),
            vec![Request {
                device: 0,
                want: 4 * G,
                seen: 10 * G
            }]
        );
        // One's own request is not one to answer.
        assert!(requests(&e, b).is_empty());
        // What was freed since the request was made counts against it.
        let r = requests(&e, a)[0];
        assert_eq!(r.outstanding(10 * G), 4 * G);
        assert_eq!(r.outstanding(13 * G), G);
        assert_eq!(r.outstanding(15 * G), 0);
        assert_eq!(r.outstanding(8 * G), 4 * G);
        // A line of the first format (no idle, want, seen) still reads.
        let old = parse("7 1 0 1024 2\n");
        assert_eq!(old[0].claim.unclaimed, 1024);
        assert_eq!(old[0].claim.idle, 0);
    }

    #[test]
    fn starts_and_holds_travel_on_a_line_that_earlier_daemons_skip() {
        let (a, b, c) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let holding = |started, hold, hold_since| Claim {
            running: 1,
            started,
            hold,
            hold_since,
            ..Claim::default()
        };
        let mut e = replace_mine(&[], a, &[(0, holding(9, 12 * G, 500))].into());
        e = replace_mine(
            &e,
            b,
            &[(0, holding(4, 0, 0)), (1, holding(2, G, 700))].into(),
        );
        // A daemon that started nothing and holds nothing writes no such line.
        e = replace_mine(&e, c, &claims(&[(0, G, 1)]));
        let text = format(&e);
        assert_eq!(
            text.lines()
                .filter(|l| !l.starts_with('#') && l.contains(" + "))
                .count(),
            3
        );
        let back = parse(&text);
        assert_eq!(back, e);
        assert_eq!(others(&back, c)[&0].started, 13);
        assert_eq!(
            holds(&back, c),
            vec![
                Hold {
                    device: 0,
                    bytes: 12 * G,
                    since: (500, a)
                },
                Hold {
                    device: 1,
                    bytes: G,
                    since: (700, b)
                },
            ]
        );
        assert!(holds(&back, a).iter().all(|h| h.since.1 != a));
        // A daemon of the format before reads the claims lines as they were and skips these:
        // their fourth field is not a number.
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(" + "))
        {
            assert!(line
                .split_whitespace()
                .nth(3)
                .unwrap()
                .parse::<u64>()
                .is_err());
        }
        // Alone, without its claims line, such a line is left out.
        assert!(parse("5 1 0 + 3 1024 9\n").is_empty());
    }

    #[test]
    fn the_older_hold_is_honoured_so_two_never_wait_for_each_other() {
        let (a, b) = (Owner { pid: 1, start: 1 }, Owner { pid: 2, start: 1 });
        let theirs = Hold {
            device: 0,
            bytes: G,
            since: (500, a),
        };
        // Without a hold of ours there, theirs counts.
        assert!(theirs.before(None));
        // Ours is younger: theirs counts; ours is older: it does not.
        assert!(theirs.before(Some((600, b))));
        assert!(!theirs.before(Some((400, b))));
        // The same millisecond: the daemons' order decides, the same way for both.
        assert!(theirs.before(Some((500, b))));
        let ours = Hold {
            device: 0,
            bytes: G,
            since: (500, b),
        };
        assert!(!ours.before(Some((500, a))));
    }

    /// Two daemons on one card: the other's trial allocated 5 of its 6 GiB after it last
    /// wrote the ledger (by its reading, 6 GiB yet to claim), and our reading, newer, shows it.
    #[test]
    fn the_others_trials_are_counted_against_our_reading_not_the_one_they_wrote_by() {
        let (a, b, old) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let theirs = Claim {
            unclaimed: 6 * G + 3 * G,
            running: 2,
            trials: Some(vec![
                Held {
                    pgid: 40,
                    bound: 6 * G,
                },
                // Admitted, no worker yet: its whole bound.
                Held {
                    pgid: 0,
                    bound: 3 * G,
                },
            ]),
            ..Claim::default()
        };
        let mut e = replace_mine(&[], b, &[(0, theirs)].into());
        // A daemon of the format before trials: its own figure is all there is.
        e = replace_mine(&e, old, &claims(&[(0, G, 1)]));
        let e = parse(&format(&e));
        let seen = &others(&e, a)[&0];
        assert_eq!(seen.running, 3);
        // Group 40 uses 5 GiB in our reading: 1 GiB left to claim, not 6.
        let ours = |g: i32| if g == 40 { 5 * G } else { 0 };
        assert_eq!(seen.against(ours), G + 3 * G + G);
        // A reading older than their trial's allocation: the whole bound, not what it wrote.
        assert_eq!(seen.against(|_| 0), 6 * G + 3 * G + G);
        // Using more than its bound leaves nothing to claim, and takes nothing from the others.
        assert_eq!(seen.against(|g| if g == 40 { 9 * G } else { 0 }), 3 * G + G);
        // What they use, free once they end: group 40's 5 GiB, at most its 6 GiB bound; the
        // trial without a worker and the old-format entry add nothing.
        assert_eq!(seen.used_by(ours), 5 * G);
        assert_eq!(seen.used_by(|g| if g == 40 { 9 * G } else { 0 }), 6 * G);
        assert_eq!(seen.used_by(|_| 0), 0);
        // A daemon with nothing running writes an empty list, which reads back as one.
        let idle = Claim {
            idle: G,
            trials: Some(Vec::new()),
            ..Claim::default()
        };
        let e = parse(&format(&replace_mine(&[], b, &[(0, idle.clone())].into())));
        assert_eq!(e[0].claim, idle);
        // A list that does not read leaves the line out.
        assert!(parse("2 1 0 0 1 0 0 0 40:x\n").is_empty());
        assert!(parse("2 1 0 0 1 0 0 0 -5:100\n").is_empty());
    }

    #[test]
    fn entries_of_gone_daemons_expire_and_live_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ledger");
        let me = Owner::me().unwrap();
        // This test's own parent process (cargo's test harness or a shell) is alive.
        let parent = nix::unistd::getppid().as_raw() as u32;
        let live = Owner {
            pid: parent,
            start: process::proc_stat(parent as i32).unwrap().start_time,
        };
        // Pid 1 with a start time it never had: a daemon that is gone, its pid reused.
        let gone = Owner {
            pid: 1,
            start: u64::MAX,
        };
        let mut e = replace_mine(&[], live, &claims(&[(0, 3 * G, 1)]));
        e = replace_mine(&e, gone, &claims(&[(0, 9 * G, 2)]));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format(&e)).unwrap();
        let ledger = Ledger::open(path.clone(), me).unwrap();
        let locked = ledger.lock().unwrap();
        assert_eq!(locked.others(), claims(&[(0, 3 * G, 1)]));
        locked.write(&claims(&[(0, G, 1)])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let left = parse(&text);
        assert!(left.iter().all(|e| e.owner != gone), "{text}");
        assert!(left.iter().any(|e| e.owner == live));
        assert!(left.iter().any(|e| e.owner == me && e.claim.unclaimed == G));
        // Another daemon's view of the same file sees ours.
        let other = Ledger::open(path, live).unwrap();
        assert_eq!(other.lock().unwrap().others(), claims(&[(0, G, 1)]));
    }

    fn held(device: u32, running: usize, idle: u64, bounds: &[u64]) -> Claims {
        let trials = bounds
            .iter()
            .map(|&bound| Held { pgid: 7, bound })
            .collect();
        let c = Claim {
            running,
            idle,
            trials: Some(trials),
            ..Claim::default()
        };
        [(device, c)].into()
    }

    fn req(device: u32, want: u64, seen: u64) -> Request {
        Request { device, want, seen }
    }

    #[rstest::rstest]
    #[case::none(&[], &[], false)]
    #[case::a_first_one(&[], &[req(0, G, 10 * G)], true)]
    #[case::the_same_written_again(&[req(0, G, 10 * G)], &[req(0, G, 10 * G)], false)]
    #[case::for_another_amount(&[req(0, G, 10 * G)], &[req(0, 2 * G, 10 * G)], true)]
    #[case::from_another_reading(&[req(0, G, 10 * G)], &[req(0, G, 9 * G)], true)]
    #[case::a_second_daemon_asks_too(&[req(0, G, 10 * G)], &[req(0, G, 10 * G), req(1, G, 4 * G)], true)]
    #[case::one_withdrawn(&[req(0, G, 10 * G), req(1, G, 4 * G)], &[req(1, G, 4 * G)], false)]
    fn a_request_is_new_when_the_ledger_did_not_show_it_before(
        #[case] before: &[Request],
        #[case] now: &[Request],
        #[case] expected: bool,
    ) {
        assert_eq!(asked_anew(before, now), expected);
    }

    #[test]
    fn a_request_is_answered_once_while_it_is_written_again_unchanged() {
        let free = |_| Some(10 * G);
        let mut a = Answers::default();
        a.take(vec![req(0, 2 * G, 10 * G)]);
        assert_eq!(a.answer(free), [(0, 2 * G)].into());
        assert!(a.answer(free).is_empty());
        // Its daemon looked again before the retirement showed in NVML.
        a.take(vec![req(0, 2 * G, 10 * G)]);
        assert!(a.answer(free).is_empty());
        // It asks for more, from the same reading: a new request.
        a.take(vec![req(0, 3 * G, 10 * G)]);
        assert_eq!(a.answer(free), [(0, 3 * G)].into());
        // Withdrawn, then made again: answered again.
        a.take(vec![]);
        a.take(vec![req(0, 3 * G, 10 * G)]);
        assert_eq!(a.answer(free), [(0, 3 * G)].into());
    }

    #[test]
    fn what_is_outstanding_is_summed_per_device_we_use_against_its_reading() {
        let free = |d: u32| match d {
            0 => Some(11 * G),
            1 => Some(4 * G),
            _ => None,
        };
        let requests = [
            // 1 GiB freed since: 3 left.
            req(0, 4 * G, 10 * G),
            req(0, G, 11 * G),
            // Met already by what was freed since.
            req(1, G, 2 * G),
            // Not a device of ours.
            req(2, G, 0),
        ];
        assert_eq!(outstanding(&requests, free), [(0, 4 * G)].into());
        assert!(outstanding(&[], free).is_empty());
    }

    #[rstest::rstest]
    #[case::a_trial_ended(held(0, 2, 0, &[6 * G, 2 * G]), held(0, 1, 0, &[2 * G]), true)]
    #[case::its_daemon_is_gone(held(0, 1, 0, &[2 * G]), Claims::new(), true)]
    #[case::an_idle_worker_retired(held(0, 1, 3 * G, &[2 * G]), held(0, 1, 0, &[2 * G]), true)]
    #[case::a_trial_settled_below_its_bound(held(0, 1, 0, &[6 * G]), held(0, 1, 0, &[5 * G]), true)]
    #[case::a_trial_started(held(0, 1, 0, &[2 * G]), held(0, 2, 0, &[2 * G, G]), false)]
    #[case::more_held_by_idle_workers(held(0, 1, 0, &[2 * G]), held(0, 1, G, &[2 * G]), false)]
    #[case::nothing_changed(held(0, 1, G, &[2 * G]), held(0, 1, G, &[2 * G]), false)]
    #[case::a_start_on_another_device(held(0, 1, 0, &[2 * G]), {
        let mut c = held(0, 1, 0, &[2 * G]);
        c.extend(held(1, 1, 0, &[G]));
        c
    }, false)]
    fn the_others_freed_room_only_when_they_hold_less_somewhere(
        #[case] before: Claims,
        #[case] now: Claims,
        #[case] expected: bool,
    ) {
        assert_eq!(freed(&before, &now), expected);
    }

    #[test]
    fn a_watch_sees_writes_to_the_ledger_and_is_quiet_without_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let me = Owner::me().unwrap();
        let ledger = Ledger::open(path, me).unwrap();
        let watch = ledger.watch().unwrap();
        // Locking and reading writes nothing.
        ledger.read_neighbours().unwrap();
        assert!(!watch.drain());
        ledger.publish(&claims(&[(0, G, 1)])).unwrap();
        assert!(watch.drain());
        assert!(!watch.drain());
    }

    #[test]
    fn the_lock_is_held_until_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let me = Owner::me().unwrap();
        let a = Ledger::open(path.clone(), me).unwrap();
        let held = a.lock().unwrap();
        // A second open file description cannot take the lock while it is held.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(_) => panic!("the ledger was not locked"),
            Err((f, _)) => f,
        };
        held.write(&claims(&[(0, G, 1)])).unwrap();
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok());
    }

    #[test]
    fn the_ledger_is_where_the_environment_says_else_in_a_runtime_directory() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let tmp = Path::new("/tmp");
        let all: &[(&str, &str)] = &[
            (LEDGER_ENV, "/srv/shared/ledger"),
            ("RUNTIME_DIRECTORY", "/run/sweepd:/run/other"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ];
        assert_eq!(
            path_from(env(all), true, tmp, 7),
            Path::new("/srv/shared/ledger")
        );
        assert_eq!(
            path_from(env(&all[1..]), true, tmp, 7),
            Path::new("/run/sweepd/gpu-ledger")
        );
        assert_eq!(
            path_from(env(&all[2..]), true, tmp, 7),
            Path::new("/run/user/1000/sweepd/gpu-ledger")
        );
        // An empty variable counts as unset.
        assert_eq!(
            path_from(env(&[(LEDGER_ENV, "")]), true, tmp, 7),
            Path::new("/run/sweepd/gpu-ledger")
        );
        assert_eq!(
            path_from(env(&[]), false, tmp, 7),
            Path::new("/tmp/sweepd-7/gpu-ledger")
        );
    }
}
