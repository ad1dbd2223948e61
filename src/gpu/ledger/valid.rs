//! Which of the ledger's entries a daemon believes. Whatever is written in the file was once
//! believed: a line naming pid 1 with its real start time never expired, and its 1 TiB claim
//! or its hold stalled every study on the host. So an entry counts only while
//! - its daemon's heartbeat (`PID START beat MS`, rewritten at least every [`BEAT`]) is fresh:
//!   older than [`EXPIRES`] it is dropped, whatever its pid, and ahead of the host's clock it
//!   was never written by a daemon;
//! - its pid names a live process started when the entry says, running the same program as
//!   this daemon (its `comm`), as this user (in a group's directory, as any user of it);
//! - nothing in it exceeds the device's total memory.
//!
//! What does not pass is dropped ([`sift`]); a daemon gone or silent is the normal end of an
//! entry, anything else means the file was written by someone else ([`Dropped::bad`]), and the
//! caller repairs it. A daemon also remembers the others' entries it last read, and puts back
//! those a file emptied or made anew lacks while their daemons still beat ([`merge`]).

use super::entry::{Claim, Owner, Sheet};
use crate::process;
use std::collections::BTreeMap;
use std::time::Duration;

/// A daemon rewrites its line at least this often, even when it admits nothing.
pub const BEAT: Duration = Duration::from_secs(2);

/// An entry whose heartbeat is older than this is dropped, whatever its pid says.
pub const EXPIRES: Duration = Duration::from_secs(20);

/// A heartbeat this far ahead of the host's boot clock (milliseconds) was not written by a
/// daemon of this host: the clock is the same for all of them.
const AHEAD_MS: u64 = 1_000;

/// The host's boot clock (`CLOCK_BOOTTIME`) in milliseconds: the same for every process of the
/// host, and it never steps as the wall clock may, so a heartbeat's age is what it says.
pub fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is, and reads nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
}

/// What /proc says of a pid, as [`judge_process`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcFacts {
    pub start: u64,
    /// Neither a zombie nor dead.
    pub live: bool,
    pub comm: String,
    pub uid: u32,
}

/// What /proc says of `pid` (`None`: no such process).
pub fn process_of(pid: u32) -> Option<ProcFacts> {
    let pid = i32::try_from(pid).ok().filter(|p| *p > 0)?;
    let st = process::proc_stat(pid)?;
    let (comm, uid) = process::proc_identity(pid)?;
    Some(ProcFacts {
        start: st.start_time,
        live: !matches!(st.state, 'Z' | 'X' | 'x'),
        comm,
        uid,
    })
}

/// The daemons whose entries count: processes of this daemon's program (`comm`) run by its
/// user (`uid`), or by any user where the ledger is a group's (`any_user`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    pub comm: String,
    pub uid: u32,
    pub any_user: bool,
}

/// What an entry's owner is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Process {
    /// A live sweepd daemon of ours: its entries count.
    Daemon,
    /// Exited (its pid gone, or reused by a process started later): its entries expire.
    Gone,
    /// A live process that is not a sweepd daemon of ours: someone else wrote its entries.
    Stranger(String),
}

/// What `owner` is, from what /proc says of its pid (`facts`).
pub fn judge_process(owner: Owner, facts: Option<&ProcFacts>, peers: &Peers) -> Process {
    let Some(f) = facts.filter(|f| f.live && f.start == owner.start) else {
        return Process::Gone;
    };
    if f.comm != peers.comm {
        return Process::Stranger(format!("pid {} (`{}`)", owner.pid, f.comm));
    }
    if !peers.any_user && f.uid != peers.uid {
        return Process::Stranger(format!("pid {} (`{}` of uid {})", owner.pid, f.comm, f.uid));
    }
    Process::Daemon
}

/// The field of `claim` that is more than a device of `total` bytes holds, if one is.
pub fn too_large(claim: &Claim, total: u64) -> Option<&'static str> {
    let fields = [
        ("unclaimed", claim.unclaimed),
        ("idle", claim.idle),
        ("want", claim.want),
        ("seen", claim.seen),
        ("hold", claim.hold),
    ];
    if let Some((name, _)) = fields.iter().find(|(_, v)| *v > total) {
        return Some(name);
    }
    let trials = claim.trials.iter().flatten();
    trials
        .clone()
        .any(|t| t.bound > total)
        .then_some("trial bound")
}

/// What [`sift`] dropped, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Daemons gone, or silent for longer than [`EXPIRES`]: the normal end of their entries.
    pub expired: usize,
    /// Entries claiming more than their device holds.
    pub too_large: usize,
    /// Owners that are live processes but not sweepd daemons of ours.
    pub strangers: Vec<String>,
    /// Entries of a daemon with no heartbeat line.
    pub no_beat: usize,
    /// Heartbeats ahead of the host's clock.
    pub ahead: usize,
}

impl Dropped {
    /// In words, for the log.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.too_large > 0 {
            out.push(format!(
                "{} entries claiming more than their device holds",
                self.too_large
            ));
        }
        if !self.strangers.is_empty() {
            out.push(format!(
                "entries of {}, which is not a sweepd daemon of this user",
                self.strangers.join(", ")
            ));
        }
        if self.no_beat > 0 {
            out.push(format!(
                "{} entries without a heartbeat (a sweepd from before heartbeats? restart it)",
                self.no_beat
            ));
        }
        if self.ahead > 0 {
            out.push(format!(
                "{} heartbeats ahead of this host's clock",
                self.ahead
            ));
        }
        out
    }
}

/// The other daemons' part of `sheet` that counts at `now` (the boot clock, milliseconds),
/// heartbeats older than `expires` ms left out, with `totals` the devices' memory as this
/// daemon knows it (a device it does not know is not judged by size) and `process` what an
/// owner is ([`judge_process`]); and what was dropped. `me`'s own entries are left out
/// without a word: it writes them anew.
pub fn sift(
    sheet: Sheet,
    me: Owner,
    now: u64,
    expires: u64,
    totals: &BTreeMap<u32, u64>,
    mut process: impl FnMut(Owner) -> Process,
) -> (Sheet, Dropped) {
    let mut dropped = Dropped::default();
    let mut out = Sheet::default();
    let beating: Vec<Owner> = sheet.beats.keys().copied().collect();
    for (owner, beat) in sheet.beats.into_iter().filter(|(o, _)| *o != me) {
        if beat > now.saturating_add(AHEAD_MS) {
            dropped.ahead += 1;
        } else if now.saturating_sub(beat) > expires {
            dropped.expired += 1;
        } else {
            match process(owner) {
                Process::Daemon => {
                    out.beats.insert(owner, beat);
                }
                Process::Gone => dropped.expired += 1,
                Process::Stranger(who) => dropped.strangers.push(who),
            }
        }
    }
    for e in sheet.entries {
        if e.owner == me {
            continue;
        }
        if !out.beats.contains_key(&e.owner) {
            // Counted with its owner's heartbeat above, or without one.
            if !beating.contains(&e.owner) {
                dropped.no_beat += 1;
            }
            continue;
        }
        if totals
            .get(&e.device)
            .is_some_and(|t| too_large(&e.claim, *t).is_some())
        {
            dropped.too_large += 1;
            continue;
        }
        out.entries.push(e);
    }
    (out, dropped)
}

/// `file` (already sifted) with what this daemon remembers of the others (`remembered`, the
/// sheet it last read or wrote) where it is newer: a daemon the file lacks, or whose heartbeat
/// there is older than the one remembered, and that still beats (`expires`, `process`). The
/// second value says whether anything was put back (the file should be written again).
pub fn merge(
    mut file: Sheet,
    remembered: &Sheet,
    now: u64,
    expires: u64,
    mut process: impl FnMut(Owner) -> Process,
) -> (Sheet, bool) {
    let mut restored = false;
    for (owner, beat) in &remembered.beats {
        let newer = file.beats.get(owner).is_none_or(|b| b < beat);
        let fresh = now.saturating_sub(*beat) <= expires;
        if !newer || !fresh || process(*owner) != Process::Daemon {
            continue;
        }
        file.beats.insert(*owner, *beat);
        file.entries.retain(|e| e.owner != *owner);
        file.entries.extend(
            remembered
                .entries
                .iter()
                .filter(|e| e.owner == *owner)
                .cloned(),
        );
        restored = true;
    }
    (file, restored)
}

#[cfg(test)]
mod tests {
    use super::super::entry::{Entry, Held};
    use super::*;
    use rstest::rstest;

    const G: u64 = 1 << 30;
    const ME: Owner = Owner { pid: 10, start: 1 };
    const PEER: Owner = Owner { pid: 20, start: 1 };
    const NOW: u64 = 1_000_000;
    const EXP: u64 = 20_000;

    fn peers(any_user: bool) -> Peers {
        Peers {
            comm: "sweepd".into(),
            uid: 1000,
            any_user,
        }
    }

    fn facts(start: u64, live: bool, comm: &str, uid: u32) -> Option<ProcFacts> {
        Some(ProcFacts {
            start,
            live,
            comm: comm.into(),
            uid,
        })
    }

    #[rstest]
    #[case::a_daemon_of_ours(facts(1, true, "sweepd", 1000), false, Process::Daemon)]
    #[case::no_such_pid(None, false, Process::Gone)]
    #[case::its_pid_reused(facts(2, true, "sweepd", 1000), false, Process::Gone)]
    #[case::a_zombie(facts(1, false, "sweepd", 1000), false, Process::Gone)]
    #[case::another_program(facts(1, true, "process_api", 1000), false, Process::Stranger("pid 20 (`process_api`)".into()))]
    #[case::another_users(facts(1, true, "sweepd", 4242), false, Process::Stranger("pid 20 (`sweepd` of uid 4242)".into()))]
    #[case::another_users_in_a_groups_ledger(facts(1, true, "sweepd", 4242), true, Process::Daemon)]
    #[case::another_program_in_a_groups_ledger(facts(1, true, "bash", 4242), true, Process::Stranger("pid 20 (`bash`)".into()))]
    fn an_entrys_owner_is_a_daemon_only_when_it_runs_our_program_as_our_user(
        #[case] f: Option<ProcFacts>,
        #[case] any_user: bool,
        #[case] expected: Process,
    ) {
        assert_eq!(judge_process(PEER, f.as_ref(), &peers(any_user)), expected);
    }

    fn claim(unclaimed: u64, bounds: &[u64]) -> Claim {
        Claim {
            unclaimed,
            running: bounds.len(),
            trials: Some(
                bounds
                    .iter()
                    .map(|&bound| Held { pgid: 7, bound })
                    .collect(),
            ),
            ..Claim::default()
        }
    }

    #[rstest]
    #[case::within(claim(20 * G, &[20 * G, 4 * G]), None)]
    #[case::the_whole_device(claim(24 * G, &[24 * G]), None)]
    #[case::unclaimed_beyond(claim(1 << 40, &[]), Some("unclaimed"))]
    #[case::a_trial_beyond(claim(G, &[G, 25 * G]), Some("trial bound"))]
    #[case::a_hold_beyond(Claim { hold: 30 * G, ..Claim::default() }, Some("hold"))]
    #[case::idle_beyond(Claim { idle: 30 * G, ..Claim::default() }, Some("idle"))]
    #[case::a_request_beyond(Claim { want: 30 * G, ..Claim::default() }, Some("want"))]
    fn nothing_in_an_entry_may_exceed_its_device(#[case] c: Claim, #[case] expected: Option<&str>) {
        assert_eq!(too_large(&c, 24 * G), expected);
    }

    fn entry(owner: Owner, device: u32, c: Claim) -> Entry {
        Entry {
            owner,
            device,
            claim: c,
        }
    }

    fn sheet(beats: &[(Owner, u64)], entries: Vec<Entry>) -> Sheet {
        Sheet {
            beats: beats.iter().copied().collect(),
            entries,
        }
    }

    /// Pid 20 is a daemon of ours, 30 a stranger, anything else gone.
    fn process(o: Owner) -> Process {
        match o.pid {
            20 | 21 => Process::Daemon,
            30 => Process::Stranger("pid 30 (`bash`)".into()),
            _ => Process::Gone,
        }
    }

    #[test]
    fn only_live_beating_daemons_entries_within_their_device_are_kept() {
        let (stranger, gone, silent, ahead, mute) = (
            Owner { pid: 30, start: 1 },
            Owner { pid: 40, start: 1 },
            Owner { pid: 21, start: 1 },
            Owner { pid: 21, start: 2 },
            Owner { pid: 20, start: 9 },
        );
        let ok = claim(G, &[G]);
        let s = sheet(
            &[
                (ME, 0),
                (PEER, NOW - 1_000),
                (stranger, NOW),
                (gone, NOW),
                (silent, NOW - EXP - 1),
                (ahead, NOW + 60_000),
            ],
            vec![
                entry(ME, 0, ok.clone()),
                entry(PEER, 0, ok.clone()),
                entry(PEER, 1, claim(1 << 40, &[])),
                entry(PEER, 7, claim(1 << 40, &[])),
                entry(stranger, 0, ok.clone()),
                entry(gone, 0, ok.clone()),
                entry(silent, 0, ok.clone()),
                entry(ahead, 0, ok.clone()),
                entry(mute, 0, ok.clone()),
                entry(mute, 1, ok.clone()),
            ],
        );
        let totals = BTreeMap::from([(0, 24 * G), (1, 24 * G)]);
        let (kept, dropped) = sift(s, ME, NOW, EXP, &totals, process);
        // Ours is left out (written anew); device 7 is not ours to judge.
        assert_eq!(
            kept,
            sheet(
                &[(PEER, NOW - 1_000)],
                vec![entry(PEER, 0, ok), entry(PEER, 7, claim(1 << 40, &[]))]
            )
        );
        assert_eq!(
            dropped,
            Dropped {
                expired: 2,
                too_large: 1,
                strangers: vec!["pid 30 (`bash`)".into()],
                no_beat: 2,
                ahead: 1,
            }
        );
        assert_eq!(dropped.describe().len(), 4);
        // Nothing but gone or silent daemons: nothing to say.
        let (_, quiet) = sift(
            sheet(&[(gone, NOW)], vec![entry(gone, 0, claim(G, &[]))]),
            ME,
            NOW,
            EXP,
            &totals,
            process,
        );
        assert!(quiet.describe().is_empty(), "{quiet:?}");
    }

    #[test]
    fn what_a_file_lost_comes_back_from_memory_while_its_daemon_beats() {
        let other = Owner { pid: 21, start: 1 };
        let remembered = sheet(
            &[(PEER, NOW - 500), (other, NOW - 500)],
            vec![
                entry(PEER, 0, claim(G, &[G])),
                entry(other, 0, claim(2 * G, &[2 * G])),
            ],
        );
        // A file made anew: both come back.
        let (back, restored) = merge(Sheet::default(), &remembered, NOW, EXP, process);
        assert!(restored);
        assert_eq!(back, remembered);
        // The file is newer for one: its version stands, the other comes back.
        let file = sheet(
            &[(PEER, NOW - 100)],
            vec![entry(PEER, 0, claim(3 * G, &[]))],
        );
        let (back, restored) = merge(file.clone(), &remembered, NOW, EXP, process);
        assert!(restored);
        assert_eq!(back.beats[&PEER], NOW - 100);
        assert_eq!(back.entries[0], entry(PEER, 0, claim(3 * G, &[])));
        assert_eq!(back.entries.len(), 2);
        // Remembered, but silent too long or gone: not put back.
        let (back, restored) = merge(file.clone(), &remembered, NOW + EXP, EXP, process);
        assert!(!restored);
        assert_eq!(back, file);
        let (_, restored) = merge(Sheet::default(), &remembered, NOW, EXP, |_| Process::Gone);
        assert!(!restored);
    }
}
