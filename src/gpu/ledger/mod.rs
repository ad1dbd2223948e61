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
//! An entry is keyed by the daemon's pid and that process's start time, and believed only
//! while that daemon beats (`valid`): each daemon rewrites its line at least every
//! [`BEAT`] ([`Ledger::beat`]), and an entry whose heartbeat is older than [`EXPIRES`], whose
//! pid is not a live sweepd daemon of this user, or that claims more than its device holds is
//! left out of every reading. A crashed daemon's claims expire by themselves, and a line
//! someone else wrote never stalls a study. A file that holds such lines, bytes that do not
//! read, or more than [`MAX_BYTES`] is rewritten under the lock with the live entries alone
//! (said in the log, at most once a minute). The file is read as bytes, at most [`MAX_BYTES`]
//! of it, so a huge or garbled file neither stalls a daemon nor makes it admit as if alone.
//!
//! A ledger removed (by hand, by a cleaner of the runtime directory) or replaced is made again
//! by the next daemon that locks it: after taking the lock a daemon checks that the path still
//! names the file it locked, and otherwise locks the one there now, so two daemons never hold
//! locks on two files and each think itself alone. What the lost file held comes back from
//! each daemon's memory of the others' entries, as long as they still beat, and each daemon
//! writes its own line again as soon as it finds it missing.
//!
//! Where the file is, and which files and directories are refused: `super::runtime_dir`.

mod entry;
mod text;
mod valid;

pub use entry::{Claim, Claims, Held, Hold, Owner, Request};
pub use valid::{BEAT, EXPIRES};

use super::runtime_dir::RuntimeDir;
use entry::Sheet;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::warn;
use valid::{Peers, Process};

/// At most this much of the file is read: a ledger is a few lines per daemon and device, and
/// one larger is rewritten with its live entries.
pub const MAX_BYTES: u64 = 1 << 20;

/// What the ledger is called in errors.
const WHAT: &str = "the GPU ledger";

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

/// The host's ledger, as this daemon uses it (clones share what it remembers).
#[derive(Clone)]
pub struct Ledger(Arc<Inner>);

struct Inner {
    dir: Arc<RuntimeDir>,
    name: OsString,
    path: PathBuf,
    me: Owner,
    peers: Peers,
    state: Mutex<State>,
}

/// What a daemon keeps between two locks of the ledger.
#[derive(Default)]
struct State {
    /// Each device's total memory, as NVML says: an entry claiming more is not believed.
    totals: BTreeMap<u32, u64>,
    /// Our claims as last written, which [`Ledger::beat`] writes again.
    mine: Claims,
    /// When we last wrote our line (`None`: never yet).
    written: Option<Instant>,
    /// The other daemons' entries as last read or written, put back into a file that lost
    /// them ([`valid::merge`]).
    others: Sheet,
    /// The file last locked (device, inode): another one at the path was made anew.
    id: Option<(u64, u64)>,
    /// What was said of a file holding what no daemon of ours wrote, of a file made anew, and
    /// of our own line lost.
    repaired: Said,
    made_again: Said,
    lost: Said,
    /// The heartbeat we last wrote: a file whose line of ours has another was written by
    /// someone else (another daemon putting back what it remembered of us).
    beat: Option<u64>,
}

/// A warning said at most once a minute, with how many were not said in between.
#[derive(Debug, Default)]
struct Said {
    last: Option<Instant>,
    quiet: u64,
}

impl Said {
    const EVERY: Duration = Duration::from_secs(60);

    /// Whether to say it now: `Some(times it was not said since the last time)`.
    fn due(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < Self::EVERY)
        {
            self.quiet += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.quiet))
    }
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Ledger").field(&self.0.path).finish()
    }
}

/// The ledger locked: the others' live claims, read; this daemon's, to be written. The lock is
/// released when this is dropped (after [`Locked::write`] or without writing).
pub struct Locked {
    file: Flock<File>,
    ledger: Ledger,
    /// The file locked (device, inode).
    id: (u64, u64),
    /// The other daemons' live entries.
    sheet: Sheet,
}

impl Ledger {
    /// The ledger `name` in `dir` for daemon `me`, with the devices' total memory as far as
    /// known (`totals`; more come with [`Ledger::know_totals`]). The file is opened and read
    /// once here, so that one sweepd refuses ([`super::runtime_dir::judge_file`]) or cannot
    /// open fails here, loudly, not at admission.
    pub fn open(
        dir: Arc<RuntimeDir>,
        name: &OsStr,
        me: Owner,
        totals: impl IntoIterator<Item = (u32, u64)>,
    ) -> std::io::Result<Ledger> {
        let (comm, uid) = crate::process::proc_identity(std::process::id() as i32)
            .ok_or_else(|| std::io::Error::other("/proc does not say what this process is"))?;
        let ledger = Ledger(Arc::new(Inner {
            path: dir.path().join(name),
            name: name.to_os_string(),
            peers: Peers {
                comm,
                uid,
                any_user: dir.trust().group.is_some(),
            },
            dir,
            me,
            state: Mutex::default(),
        }));
        ledger.know_totals(totals);
        drop(ledger.lock()?);
        Ok(ledger)
    }

    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The directory the ledger is in (the memory groups' peak logs are beside it).
    pub fn dir(&self) -> &Arc<RuntimeDir> {
        &self.0.dir
    }

    pub fn name(&self) -> &OsStr {
        &self.0.name
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in devices' total memory (NVML's), against which entries are judged.
    pub fn know_totals(&self, totals: impl IntoIterator<Item = (u32, u64)>) {
        self.state().totals.extend(totals);
    }

    /// Locks the ledger (waiting for another daemon that holds it: it holds it only for one
    /// admission decision) and reads the live entries. A file that held anything else, or that
    /// lost what this daemon knew, is written again at once.
    pub fn lock(&self) -> std::io::Result<Locked> {
        let inner = &self.0;
        for _ in 0..8 {
            let opened = inner.dir.open_file(&inner.name, false, WHAT)?;
            let asked = Instant::now();
            let mut file = Flock::lock(opened.file, FlockArg::LockExclusive)
                .map_err(|(_, errno)| std::io::Error::from(errno))?;
            let waited = asked.elapsed();
            // Removed or replaced while we waited for it: lock the one at the path now.
            if inner.dir.id_of(&inner.name)? != Some(opened.id) {
                continue;
            }
            let size = file.metadata()?.len();
            let mut bytes = Vec::new();
            file.seek(SeekFrom::Start(0))?;
            (&*file).take(MAX_BYTES).read_to_end(&mut bytes)?;
            return self.take(file, opened.id, opened.created, &bytes, size, waited);
        }
        Err(std::io::Error::other(format!(
            "{WHAT} {} kept being replaced while this daemon locked it",
            inner.path.display()
        )))
    }

    /// The locked file's `bytes` (of `size` in all) judged: what counts, what to say, and
    /// whether to write it again now.
    fn take(
        &self,
        file: Flock<File>,
        id: (u64, u64),
        created: bool,
        bytes: &[u8],
        size: u64,
        waited: Duration,
    ) -> std::io::Result<Locked> {
        let inner = &self.0;
        let (read, unreadable) = text::parse(bytes);
        let our_beat = read.beats.get(&inner.me).copied();
        let now = valid::now_ms();
        // Nobody wrote while we waited for the lock: their heartbeats are that much older.
        let expires = (EXPIRES + waited).as_millis() as u64;
        let mut known: BTreeMap<Owner, Process> = BTreeMap::new();
        let mut process = |o: Owner| {
            known
                .entry(o)
                .or_insert_with(|| {
                    valid::judge_process(o, valid::process_of(o.pid).as_ref(), &inner.peers)
                })
                .clone()
        };
        // /proc is read without holding the state (the lock of the file keeps the others of
        // this process out meanwhile).
        let (totals, remembered) = {
            let st = self.state();
            (st.totals.clone(), st.others.clone())
        };
        let (sheet, dropped) = valid::sift(read, inner.me, now, expires, &totals, &mut process);
        let (sheet, restored) = valid::merge(sheet, &remembered, now, expires, &mut process);
        let mut st = self.state();
        let made_again = created && st.id.is_some_and(|old| old != id);
        let lost_mine = st.written.is_some() && our_beat != st.beat;
        st.id = Some(id);
        st.others = sheet.clone();
        let at = Instant::now();
        let mut why = dropped.describe();
        if unreadable > 0 {
            why.insert(0, format!("{unreadable} lines that do not read as entries"));
        }
        if size > MAX_BYTES {
            why.insert(0, format!("{size} bytes (at most {MAX_BYTES} are read)"));
        }
        if !why.is_empty() {
            if let Some(quiet) = st.repaired.due(at) {
                warn!(
                    ledger = %inner.path.display(),
                    "the GPU ledger held {}: left out, and the file written again with the live daemons' entries alone{}",
                    why.join("; "),
                    unsaid(quiet)
                );
            }
        }
        let said = if made_again {
            st.made_again
                .due(at)
                .map(|q| ("was gone (deleted?): made again", q))
        } else if lost_mine {
            let what = "no longer held this daemon's own entry as written (emptied, or made again by another daemon?)";
            st.lost.due(at).map(|q| (what, q))
        } else {
            None
        };
        if let Some((what, quiet)) = said {
            warn!(
                ledger = %inner.path.display(),
                "the GPU ledger {what}; this daemon's entry and those it knew of the others written again{}",
                unsaid(quiet)
            );
        }
        let mine = st.mine.clone();
        drop(st);
        let mut locked = Locked {
            file,
            ledger: self.clone(),
            id,
            sheet,
        };
        if !why.is_empty() || restored || made_again || lost_mine {
            locked.put(&mine)?;
        }
        Ok(locked)
    }

    /// Writes this daemon's claims (others' kept, gone daemons' dropped).
    pub fn publish(&self, mine: &Claims) -> std::io::Result<()> {
        self.lock()?.write(mine)
    }

    /// Writes our line again, with a fresh heartbeat, when it was last written [`BEAT`] ago or
    /// more: the other daemons drop an entry that stops beating.
    pub fn beat(&self) -> std::io::Result<()> {
        if self.state().written.is_some_and(|t| t.elapsed() < BEAT) {
            return Ok(());
        }
        let locked = self.lock()?;
        let mine = self.state().mine.clone();
        locked.write(&mine)
    }

    /// The other live daemons' claims and requests, read under the lock and released at once.
    pub fn read_neighbours(&self) -> std::io::Result<Neighbours> {
        let locked = self.lock()?;
        Ok(Neighbours {
            claims: locked.others(),
            requests: locked.requests(),
        })
    }

    /// Watches the file for writes, and for its removal or making again (any daemon's, this
    /// one's included: [`freed`] tells which matter): the directory is watched, for this name.
    pub fn watch(&self) -> std::io::Result<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(
            self.0.dir.path(),
            AddWatchFlags::IN_MODIFY
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_ONLYDIR
                | AddWatchFlags::IN_DONT_FOLLOW,
        )?;
        Ok(Watch {
            inotify,
            name: self.0.name.clone(),
        })
    }
}

/// ", and N times more since it was last said", or nothing.
fn unsaid(quiet: u64) -> String {
    match quiet {
        0 => String::new(),
        n => format!(" ({n} times more since this was last said)"),
    }
}

/// Writes to the ledger file, as an inotify descriptor to wait on (readable when some came).
pub struct Watch {
    inotify: Inotify,
    name: OsString,
}

impl Watch {
    /// Takes the events seen so far, without waiting: whether any was the ledger's.
    pub fn drain(&self) -> bool {
        let mut any = false;
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            any |= events
                .iter()
                .any(|e| e.name.as_deref() == Some(&*self.name));
        }
        any
    }
}

impl std::os::fd::AsRawFd for Watch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.inotify.as_fd().as_raw_fd()
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
        entry::others(&self.sheet.entries, self.ledger.0.me)
    }

    /// The other live daemons' requests for the memory of idle workers.
    pub fn requests(&self) -> Vec<Request> {
        entry::requests(&self.sheet.entries, self.ledger.0.me)
    }

    /// The other live daemons' holds.
    pub fn holds(&self) -> Vec<Hold> {
        entry::holds(&self.sheet.entries, self.ledger.0.me)
    }

    /// This daemon, as the ledger knows it.
    pub fn me(&self) -> Owner {
        self.ledger.0.me
    }

    /// Writes the file: the others' live entries, our claims `mine` and our heartbeat.
    fn put(&mut self, mine: &Claims) -> std::io::Result<()> {
        let now = valid::now_ms();
        let sheet = self.sheet.with_mine(self.ledger.0.me, mine, now);
        let text = text::format(&sheet);
        self.file.seek(SeekFrom::Start(0))?;
        self.file.set_len(0)?;
        self.file.write_all(text.as_bytes())?;
        self.file.flush()?;
        let mut st = self.ledger.state();
        st.mine = mine.clone();
        st.written = Some(Instant::now());
        st.beat = Some(now);
        Ok(())
    }

    /// Replaces this daemon's claims with `mine`, and releases the lock. Where the file was
    /// removed or replaced meanwhile, what was written went nowhere: it is written again in
    /// the one at the path now.
    pub fn write(mut self, mine: &Claims) -> std::io::Result<()> {
        self.put(mine)?;
        let (ledger, id) = (self.ledger.clone(), self.id);
        drop(self);
        if ledger.0.dir.id_of(&ledger.0.name)? != Some(id) {
            ledger.lock()?.put(mine)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::runtime_dir::RuntimeDir;

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

    fn ledger(dir: &Path, me: Owner) -> Ledger {
        let rd = RuntimeDir::open(dir, super::super::runtime_dir::Origin::Named).unwrap();
        Ledger::open(Arc::new(rd), OsStr::new("ledger"), me, [(0, 24 * G)]).unwrap()
    }

    /// The file's text for these daemons: each one's heartbeat and claims.
    fn file_of(daemons: &[(Owner, u64, Claims)]) -> String {
        let mut s = Sheet::default();
        for (owner, beat, mine) in daemons {
            s = s.with_mine(*owner, mine, *beat);
        }
        text::format(&s)
    }

    /// The file at `path`, read: its sheet and how many lines did not read.
    fn read(path: &Path) -> (Sheet, usize) {
        text::parse(&std::fs::read(path).unwrap())
    }

    /// A live process that is, by the ledger's rule, a sweepd daemon of ours (this user, the
    /// same program name): `sleep` run through a link named as this test binary is.
    struct Peer {
        child: std::process::Child,
        _dir: tempfile::TempDir,
    }

    impl Peer {
        fn start() -> Peer {
            let dir = tempfile::tempdir().unwrap();
            let (comm, _) = crate::process::proc_identity(std::process::id() as i32).unwrap();
            let sleep = ["/bin/sleep", "/usr/bin/sleep"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .expect("sleep");
            let link = dir.path().join(comm);
            std::os::unix::fs::symlink(sleep, &link).unwrap();
            let child = std::process::Command::new(&link).arg("60").spawn().unwrap();
            Peer { child, _dir: dir }
        }

        fn owner(&self) -> Owner {
            let pid = self.child.id();
            let start = crate::process::proc_stat(pid as i32).unwrap().start_time;
            Owner { pid, start }
        }
    }

    impl Drop for Peer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Pid 1 as it is: alive, started when /proc says, and not a sweepd daemon.
    fn init() -> Owner {
        Owner {
            pid: 1,
            start: crate::process::proc_stat(1).unwrap().start_time,
        }
    }

    #[test]
    fn entries_of_gone_daemons_expire_and_live_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let me = Owner::me().unwrap();
        let peer = Peer::start();
        let live = peer.owner();
        // Pid 1 with a start time it never had: a daemon that is gone, its pid reused.
        let gone = Owner {
            pid: 1,
            start: u64::MAX,
        };
        let now = valid::now_ms();
        std::fs::write(
            &path,
            file_of(&[
                (live, now, claims(&[(0, 3 * G, 1)])),
                (gone, now, claims(&[(0, 9 * G, 2)])),
            ]),
        )
        .unwrap();
        let ledger = ledger(dir.path(), me);
        let locked = ledger.lock().unwrap();
        assert_eq!(locked.others(), claims(&[(0, 3 * G, 1)]));
        locked.write(&claims(&[(0, G, 1)])).unwrap();
        let (left, bad) = read(&path);
        assert_eq!(bad, 0);
        assert!(left.entries.iter().all(|e| e.owner != gone), "{left:?}");
        assert!(left.entries.iter().any(|e| e.owner == live));
        assert!(left
            .entries
            .iter()
            .any(|e| e.owner == me && e.claim.unclaimed == G));
        // The other daemon's view of the same file sees ours.
        let other = self::ledger(dir.path(), live);
        assert_eq!(other.lock().unwrap().others(), claims(&[(0, G, 1)]));
    }

    #[test]
    fn lines_naming_a_live_process_that_is_not_a_sweepd_daemon_are_dropped_and_the_file_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let peer = Peer::start();
        let now = valid::now_ms();
        let forged = Claims::from([(
            0,
            Claim {
                unclaimed: 1 << 40,
                running: 1,
                hold: 20 * G,
                hold_since: 1,
                started: 1,
                ..Claim::default()
            },
        )]);
        std::fs::write(
            &path,
            file_of(&[
                (init(), now, forged),
                (peer.owner(), now, claims(&[(0, 2 * G, 1)])),
            ]),
        )
        .unwrap();
        let ledger = ledger(dir.path(), Owner::me().unwrap());
        let locked = ledger.lock().unwrap();
        assert_eq!(locked.others(), claims(&[(0, 2 * G, 1)]));
        assert!(locked.holds().is_empty());
        drop(locked);
        // Repaired under the lock, before this daemon wrote anything of its own.
        let (left, bad) = read(&path);
        assert_eq!(bad, 0);
        assert!(!left.beats.contains_key(&init()), "{left:?}");
        assert!(left.entries.iter().all(|e| e.owner != init()));
        assert!(left.entries.iter().any(|e| e.owner == peer.owner()));
    }

    #[rstest::rstest]
    #[case::fresh(0, true)]
    #[case::silent_a_while(5_000, true)]
    #[case::silent_too_long(EXPIRES.as_millis() as i64 + 5_000, false)]
    #[case::ahead_of_the_clock(-60_000, false)]
    fn an_entry_counts_while_its_daemon_beats_whatever_its_pid(
        #[case] age_ms: i64,
        #[case] counts: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let peer = Peer::start();
        let beat = (valid::now_ms() as i64 - age_ms) as u64;
        std::fs::write(
            dir.path().join("ledger"),
            file_of(&[(peer.owner(), beat, claims(&[(0, 2 * G, 1)]))]),
        )
        .unwrap();
        let ledger = ledger(dir.path(), Owner::me().unwrap());
        let expected = if counts {
            claims(&[(0, 2 * G, 1)])
        } else {
            Claims::new()
        };
        assert_eq!(ledger.lock().unwrap().others(), expected);
    }

    #[test]
    fn a_claim_larger_than_its_device_is_dropped_and_one_on_a_device_we_do_not_know_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let peer = Peer::start();
        let now = valid::now_ms();
        std::fs::write(
            dir.path().join("ledger"),
            file_of(&[(peer.owner(), now, claims(&[(0, 30 * G, 1), (5, 30 * G, 1)]))]),
        )
        .unwrap();
        let ledger = ledger(dir.path(), Owner::me().unwrap());
        assert_eq!(ledger.lock().unwrap().others(), claims(&[(5, 30 * G, 1)]));
        // Once the device is known, that one goes too.
        ledger.know_totals([(5, 16 * G)]);
        assert_eq!(ledger.lock().unwrap().others(), Claims::new());
    }

    #[test]
    fn garbled_bytes_and_a_huge_file_are_repaired_and_the_live_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let peer = Peer::start();
        let mut bytes =
            file_of(&[(peer.owner(), valid::now_ms(), claims(&[(0, 2 * G, 1)]))]).into_bytes();
        bytes.extend_from_slice(b"\xff\xfe not text\n");
        let junk = format!("{} {} 0 0 0 1 0 0 -\n", 1, init().start);
        while bytes.len() < 3 * MAX_BYTES as usize {
            bytes.extend_from_slice(junk.as_bytes());
        }
        bytes.push(0xff);
        std::fs::write(&path, &bytes).unwrap();
        let ledger = ledger(dir.path(), Owner::me().unwrap());
        assert_eq!(ledger.lock().unwrap().others(), claims(&[(0, 2 * G, 1)]));
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size < 4096, "{size} bytes left");
        assert_eq!(read(&path).1, 0);
    }

    #[test]
    fn a_ledger_removed_is_made_again_with_what_each_daemon_knew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let peer = Peer::start();
        let a = ledger(dir.path(), Owner::me().unwrap());
        let b = ledger(dir.path(), peer.owner());
        a.publish(&claims(&[(0, G, 1)])).unwrap();
        b.publish(&claims(&[(0, 2 * G, 1)])).unwrap();
        assert_eq!(
            a.read_neighbours().unwrap().claims,
            claims(&[(0, 2 * G, 1)])
        );
        std::fs::remove_file(&path).unwrap();
        // The next lock makes it again, with its own entry and the other's it knew.
        assert_eq!(a.lock().unwrap().others(), claims(&[(0, 2 * G, 1)]));
        let (back, bad) = read(&path);
        assert_eq!(bad, 0);
        assert_eq!(back.beats.len(), 2, "{back:?}");
        assert_eq!(b.read_neighbours().unwrap().claims, claims(&[(0, G, 1)]));
        // Emptied rather than removed: the same.
        std::fs::write(&path, "").unwrap();
        assert_eq!(b.lock().unwrap().others(), claims(&[(0, G, 1)]));
        assert_eq!(read(&path).0.beats.len(), 2);
    }

    #[test]
    fn a_ledger_removed_while_one_daemon_holds_its_lock_loses_neither_daemons_claims() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let peer = Peer::start();
        let a = ledger(dir.path(), Owner::me().unwrap());
        let b = ledger(dir.path(), peer.owner());
        a.publish(&claims(&[(0, G, 1)])).unwrap();
        b.publish(&Claims::new()).unwrap();
        let held = a.lock().unwrap();
        std::fs::remove_file(&path).unwrap();
        // b locks the file made anew, not the one a holds, and still counts a's claims.
        let lb = b.lock().unwrap();
        assert_eq!(lb.others(), claims(&[(0, G, 1)]));
        lb.write(&claims(&[(0, 2 * G, 1)])).unwrap();
        // a's write went to the file removed: it is written again where b can read it.
        held.write(&claims(&[(0, 3 * G, 2)])).unwrap();
        assert_eq!(
            b.read_neighbours().unwrap().claims,
            claims(&[(0, 3 * G, 2)])
        );
        assert_eq!(
            a.read_neighbours().unwrap().claims,
            claims(&[(0, 2 * G, 1)])
        );
    }

    #[test]
    fn a_daemon_that_admits_nothing_still_beats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let me = Owner::me().unwrap();
        let a = ledger(dir.path(), me);
        a.publish(&claims(&[(0, G, 1)])).unwrap();
        let before = std::fs::read(&path).unwrap();
        // Written just now: nothing to do.
        a.beat().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        a.state().written = Some(Instant::now() - BEAT);
        let first = read(&path).0.beats[&me];
        std::thread::sleep(Duration::from_millis(20));
        a.beat().unwrap();
        let (after, _) = read(&path);
        assert!(after.beats[&me] > first);
        assert_eq!(after.entries, read_entries(&before));
    }

    fn read_entries(bytes: &[u8]) -> Vec<entry::Entry> {
        text::parse(bytes).0.entries
    }

    #[test]
    fn a_warning_is_said_at_most_once_a_minute_with_how_often_it_was_not() {
        let t = Instant::now();
        let mut said = Said::default();
        assert_eq!(said.due(t), Some(0));
        assert_eq!(said.due(t + Duration::from_secs(1)), None);
        assert_eq!(said.due(t + Duration::from_secs(30)), None);
        assert_eq!(said.due(t + Duration::from_secs(61)), Some(2));
        assert_eq!(said.due(t + Duration::from_secs(62)), None);
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
        let ledger = ledger(dir.path(), me);
        let watch = ledger.watch().unwrap();
        // Locking and reading writes nothing.
        ledger.read_neighbours().unwrap();
        assert!(!watch.drain());
        ledger.publish(&claims(&[(0, G, 1)])).unwrap();
        assert!(watch.drain());
        assert!(!watch.drain());
        // Another file beside it is not the ledger; the ledger removed, and made again, is.
        std::fs::write(dir.path().join("ledger.peaks-0"), "x\n").unwrap();
        assert!(!watch.drain());
        std::fs::remove_file(&path).unwrap();
        assert!(watch.drain());
        ledger.publish(&claims(&[(0, G, 1)])).unwrap();
        assert!(watch.drain());
    }

    #[test]
    fn the_lock_is_held_until_the_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        let me = Owner::me().unwrap();
        let a = ledger(dir.path(), me);
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
}
