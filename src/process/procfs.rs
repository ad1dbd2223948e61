//! Processes as /proc shows them: a process's group and start time, the members of a group, and
//! killing a group (a worker's, or one a previous daemon left behind) and waiting until it is gone.

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::time::Duration;

/// Sends `sig` to process group `pgid`. A group already gone gives ESRCH: nothing to do. Never
/// group 0, which killpg(2) reads as our own.
pub(super) fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), sig);
    }
}

/// SIGKILLs one process (an orphan of a retired worker's group that NVML still lists). One
/// already gone gives ESRCH: nothing to do. Only a real pid: 0 or one past `i32::MAX` would make
/// kill(2) address a whole group, maybe ours.
pub fn kill_pid(pid: u32) {
    if let Ok(pid @ 1..) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// How often a group being ended is looked for in /proc.
const POLL: Duration = Duration::from_millis(20);
/// How long a group gets to vanish after SIGKILL before the wait gives up.
const AFTER_SIGKILL: Duration = Duration::from_secs(5);

/// Ends process group `pgid`: with a `grace`, SIGTERM and, if members are left when it is over,
/// SIGKILL; without one, SIGKILL at once. Then waits (bounded) until /proc shows no member.
/// Returns the pids alive at SIGKILL time (none if the group went on SIGTERM).
///
/// `leader_reaped`: the leader's exit was seen, so an empty group is done with; until then the
/// group is signalled even if /proc shows no member yet.
pub(super) async fn end_group(pgid: i32, grace: Option<Duration>, leader_reaped: bool) -> Vec<i32> {
    let mut members = group_members_off_runtime(pgid).await;
    if members.is_empty() && leader_reaped {
        return members;
    }
    if let Some(grace) = grace {
        signal_group(pgid, Signal::SIGTERM);
        if wait_group_gone(pgid, grace).await {
            return Vec::new();
        }
        members = group_members_off_runtime(pgid).await;
    }
    signal_group(pgid, Signal::SIGKILL);
    wait_group_gone(pgid, AFTER_SIGKILL).await;
    members
}

async fn wait_group_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if group_members_off_runtime(pgid).await.is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`group_members`], scanned on a blocking thread: it reads every /proc/PID/stat, which is no
/// work for the runtime's one thread. Scanned here if the runtime has no thread left to give
/// (it is shutting down): an empty answer would read as "the group is gone".
pub async fn group_members_off_runtime(pgid: i32) -> Vec<i32> {
    match tokio::task::spawn_blocking(move || group_members(pgid)).await {
        Ok(members) => members,
        Err(_) => group_members(pgid),
    }
}

/// Live (non-zombie) processes whose process group is `pgid`, from /proc.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|st| st.pgrp == pgid && st.state != 'Z' && st.state != 'X')
        })
        .collect()
}

/// The fields of /proc/PID/stat sweepd needs.
pub struct ProcStat {
    pub state: char,
    pub pgrp: i32,
    /// Clock ticks after boot: with the pid, identifies a process across pid reuse.
    pub start_time: u64,
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may hold spaces and parentheses: the fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        pgrp: f.get(2)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

/// The program a process runs and who runs it: its `comm` (the name of the file it executed,
/// at most 15 bytes) and its real user id (`None`: no such process).
pub fn proc_identity(pid: i32) -> Option<(String, u32)> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((comm.trim_end_matches('\n').to_owned(), uid))
}

/// Kills the process group led by `pid` if, and only if, that pid is still the process that
/// started at `start_time` (a pid reused by an unrelated process is left alone).
pub fn kill_stale_group(pid: i32, start_time: u64) -> bool {
    match proc_stat(pid) {
        Some(st) if st.start_time == start_time && st.pgrp == pid => {
            signal_group(pid, Signal::SIGKILL);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_reads_our_own_process() {
        let me = std::process::id() as i32;
        let st = proc_stat(me).expect("own stat");
        assert_eq!(st.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(st.start_time > 0);
        let (comm, uid) = proc_identity(me).expect("own identity");
        assert_eq!(uid, nix::unistd::getuid().as_raw());
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(&comm) && !comm.is_empty(), "{comm} {name}");
    }
}
