//! Who this daemon is, and whether the daemon a study's row names still runs: the
//! single-instance rule behind `sweepd_daemon`.
//!
//! A host id (`SWEEPD_HOST_ID`, else the hostname) is a name; a pid means something only
//! within one PID namespace of one boot of one machine. So each row records that instance too
//! (`store::Instance`: machine id, boot id, PID namespace), and a row with our host id is
//! judged by how its instance relates to ours ([`kinship`]): ours, where its pid is looked up
//! in our `/proc`; the same machine booted since, where it is certainly gone; another machine
//! or PID namespace, where only its heartbeat can say, and a live one is another machine using
//! our name: refused ([`Block::HostIdInUse`]), never taken over, never its trials failed.
//! The reading is [`this_instance`]; the decisions ([`kinship`], [`blocks`]) are pure.

use super::error::RunError;
use crate::config::Config;
use crate::store::{DaemonId, DaemonLockError, Engine, Holder, Instance, Store};
use crate::study::DaemonState;
use std::time::Duration;

/// A daemon whose heartbeat (written every second) is older than this is gone: `status` says
/// so, and `run` on another host takes its row over (SQLite, one host per study; several
/// hosts on PostgreSQL use `[storage] host_timeout` instead).
pub const DAEMON_GONE_AFTER: Duration = Duration::from_secs(60);

/// Whether a heartbeat `age_s` seconds old (by the database's clock; `None`: not a time) is
/// recent enough for its daemon to be running.
pub fn heartbeat_fresh(age_s: Option<f64>, gone_after: Duration) -> bool {
    age_s.is_some_and(|age| age < gone_after.as_secs_f64())
}

/// This host's name in the study: `$SWEEPD_HOST_ID` (several "hosts" on one machine, or a
/// name that outlives a hostname change), else the hostname.
pub fn host_id() -> Result<String, RunError> {
    match std::env::var("SWEEPD_HOST_ID") {
        Ok(id) => {
            if id.is_empty()
                || id.len() > 255
                || id.chars().any(|c| c.is_control() || c.is_whitespace())
            {
                Err(RunError::HostId(format!(
                    "SWEEPD_HOST_ID={id:?}: must be 1 to 255 characters without spaces or control characters"
                )))
            } else {
                Ok(id)
            }
        }
        Err(_) => Ok(hostname()),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// What this process's pids are relative to, as far as it can be read: `/etc/machine-id`
/// (else `/var/lib/dbus/machine-id`), the kernel's boot id, our PID namespace. A value that
/// cannot be read or is not in its documented form is `""` (unknown).
pub fn this_instance() -> Instance {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_default();
    Instance {
        machine_id: Some(machine_id(&read("/etc/machine-id")))
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| machine_id(&read("/var/lib/dbus/machine-id"))),
        boot_id: boot_id(&read("/proc/sys/kernel/random/boot_id")),
        pid_ns: pid_namespace(&pid_ns),
    }
}

/// A machine id as machine-id(5) writes it: 32 lowercase hex digits (an image's empty file or
/// "uninitialized" is no machine's id); else `""`.
fn machine_id(text: &str) -> String {
    let id = text.trim();
    let ok = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok && id.bytes().any(|b| b != b'0') {
        id.to_owned()
    } else {
        String::new()
    }
}

/// The kernel's boot id: a UUID, new at every boot; else `""`.
fn boot_id(text: &str) -> String {
    let id = text.trim();
    let ok = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if ok {
        id.to_ascii_lowercase()
    } else {
        String::new()
    }
}

/// The PID namespace as `readlink /proc/self/ns/pid` names it, `pid:[4026531836]`; else `""`.
fn pid_namespace(link: &str) -> String {
    let ok = link
        .strip_prefix("pid:[")
        .and_then(|r| r.strip_suffix(']'))
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        link.to_owned()
    } else {
        String::new()
    }
}

/// How long this machine has been up (`/proc/uptime`), `None` where it cannot be read.
pub fn uptime() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

/// How the instance that wrote a row of our host id relates to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kinship {
    /// This machine, this boot, this PID namespace: its pid is one of ours to look up.
    Same,
    /// A row written by a sweepd that did not record its instance: judged as before, by pid.
    Unrecorded,
    /// This machine, booted since that daemon last sent a heartbeat: it is certainly gone.
    Rebooted,
    /// This machine and boot, another PID namespace (another container): its pid means
    /// nothing in our `/proc`, only its heartbeat says whether it runs.
    OtherNamespace,
    /// Another machine, or one we cannot tell from another: only its heartbeat can say.
    OtherMachine,
}

/// How the instance `theirs`, whose last heartbeat is `their_age_s` seconds old (by the
/// database's clock), relates to `mine`, on a machine up for `uptime`. A boot id is new at
/// every boot of every machine, so a shared one means a shared kernel; a machine id is often
/// copied with a disk image, so one alone proves only so much: a "reboot" counts only where
/// their last heartbeat is older than our boot (a clone with our machine id sends them now).
pub fn kinship(
    theirs: &Instance,
    their_age_s: Option<f64>,
    mine: &Instance,
    uptime: Option<Duration>,
) -> Kinship {
    let known = |a: &str, b: &str| !a.is_empty() && !b.is_empty();
    if *theirs == Instance::default() {
        return Kinship::Unrecorded;
    }
    if known(&theirs.machine_id, &mine.machine_id) && theirs.machine_id != mine.machine_id {
        return Kinship::OtherMachine;
    }
    if !known(&theirs.boot_id, &mine.boot_id) {
        return Kinship::OtherMachine;
    }
    if theirs.boot_id == mine.boot_id {
        return if known(&theirs.pid_ns, &mine.pid_ns) && theirs.pid_ns == mine.pid_ns {
            Kinship::Same
        } else {
            Kinship::OtherNamespace
        };
    }
    let silent_since_our_boot = match (their_age_s, uptime) {
        (Some(age), Some(up)) => age > up.as_secs_f64(),
        _ => false,
    };
    if known(&theirs.machine_id, &mine.machine_id) && silent_since_our_boot {
        Kinship::Rebooted
    } else {
        Kinship::OtherMachine
    }
}

/// This daemon, as the single-instance rule compares a row's daemon with it.
#[derive(Debug, Clone)]
pub struct Here<'a> {
    pub id: &'a DaemonId,
    pub instance: &'a Instance,
    /// How long this machine has been up (`None`: unknown).
    pub uptime: Option<Duration>,
    /// PostgreSQL: other hosts' daemons run the study beside us.
    pub several_hosts: bool,
    /// A heartbeat this old is a gone daemon's: `[storage] host_timeout` on PostgreSQL (the
    /// failover timeout), [`DAEMON_GONE_AFTER`] on SQLite.
    pub gone_after: Duration,
}

/// Why a row keeps `me` from running the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Another daemon runs the study (`run` exits 4).
    Running,
    /// A live daemon on another machine or in another PID namespace has our host id.
    HostIdInUse(Kinship),
}

/// The single-instance rule: whether the daemon holding a row of the study still runs, so
/// that `here` must not start (or take the row back), and why. A stopped or failed-over one
/// does not. One with our host id runs, by [`kinship`], while its pid runs with the recorded
/// start time (`pid_runs`, our `/proc`), never after a reboot, and while its heartbeat is
/// fresh where its pid means nothing here. On SQLite one host runs a study, and another
/// host's daemon runs while its heartbeat is fresh; on PostgreSQL other hosts' daemons are
/// welcome and never block.
pub fn blocks(
    holder: &Holder,
    here: &Here,
    pid_runs: impl Fn(u32, Option<u64>) -> bool,
) -> Option<Block> {
    if matches!(holder.state, DaemonState::Stopped | DaemonState::Gone) {
        return None;
    }
    let fresh = heartbeat_fresh(holder.age_s, here.gone_after);
    let h = &holder.id;
    if h.host != here.id.host {
        return (!here.several_hosts && fresh).then_some(Block::Running);
    }
    match kinship(&holder.instance, holder.age_s, here.instance, here.uptime) {
        Kinship::Same | Kinship::Unrecorded => {
            (h.pid != here.id.pid && pid_runs(h.pid, h.pid_start)).then_some(Block::Running)
        }
        Kinship::Rebooted => None,
        k @ (Kinship::OtherNamespace | Kinship::OtherMachine) => {
            fresh.then_some(Block::HostIdInUse(k))
        }
    }
}

/// Whether `pid` is, in our `/proc`, the process that started at `start` (a zombie too: it
/// has not been reaped yet).
pub fn pid_runs(pid: u32, start: Option<u64>) -> bool {
    crate::process::proc_stat(pid as i32).is_some_and(|s| Some(s.start_time) == start)
}

/// Whether the processes of the daemon whose row we replaced may be looked up by pid here (to
/// kill the workers it left behind): only where its pids are ours.
pub fn pids_comparable(replaced: &Holder, here: &Here) -> bool {
    matches!(
        kinship(
            &replaced.instance,
            replaced.age_s,
            here.instance,
            here.uptime
        ),
        Kinship::Same | Kinship::Unrecorded
    )
}

/// What a daemon refused for [`Block::HostIdInUse`] says: the host id and where it comes
/// from, both instances, and what to do.
pub fn host_id_in_use(holder: &Holder, here: &Here, kin: Kinship, from_env: bool) -> String {
    let whence = if from_env {
        "from SWEEPD_HOST_ID"
    } else {
        "this machine's hostname; SWEEPD_HOST_ID is not set"
    };
    let where_ = match kin {
        Kinship::OtherNamespace => "on this machine in another PID namespace (another container?)",
        _ => "on another machine",
    };
    let age = holder
        .age_s
        .map_or("unknown".to_owned(), |a| format!("{:.1}s ago", a.max(0.0)));
    format!(
        "host id `{host}` ({whence}) is in use by a live sweepd {where_}: pid {pid} there, \
         running since {since}, last heartbeat {age} ({theirs}); this one is {mine}. \
         Each machine or container needs a host id of its own: set SWEEPD_HOST_ID to a name \
         unique to each (its own hostname, say) and start again. Nothing of the running daemon \
         was touched. If it is in fact gone (a container restarted, a machine switched off), \
         this start succeeds once its heartbeat is older than {timeout}.",
        host = holder.id.host,
        pid = holder.id.pid,
        since = holder.started_at,
        theirs = holder.instance,
        mine = here.instance,
        timeout = crate::units::format_duration(here.gone_after),
    )
}

/// This daemon, as the single-instance rule compares a row's daemon with it, now.
pub fn here<'a>(
    me: &'a DaemonId,
    instance: &'a Instance,
    store: &Store,
    config: &Config,
) -> Here<'a> {
    let several_hosts = store.engine() == Engine::Postgres;
    Here {
        id: me,
        instance,
        uptime: uptime(),
        several_hosts,
        gone_after: if several_hosts {
            config.storage.host_timeout
        } else {
            DAEMON_GONE_AFTER
        },
    }
}

/// The error a start refused by `holder` ends with: exit 4 for another daemon running the
/// study, exit 7 for a live daemon elsewhere with our host id.
pub fn refused(holder: &Holder, here: &Here) -> RunError {
    match blocks(holder, here, pid_runs) {
        Some(Block::HostIdInUse(kin)) => RunError::HostIdInUse(host_id_in_use(
            holder,
            here,
            kin,
            std::env::var_os("SWEEPD_HOST_ID").is_some(),
        )),
        _ => RunError::Locked(DaemonLockError::Held(Box::new(holder.clone())).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const M1: &str = "0123456789abcdef0123456789abcdef";
    const M2: &str = "fedcba9876543210fedcba9876543210";
    const B1: &str = "4e5d0da2-fcd1-4333-9d86-8ff49ed76a54";
    const B2: &str = "9a0c1f33-0000-4b4b-8c8c-123456789abc";
    const N1: &str = "pid:[4026531836]";
    const N2: &str = "pid:[4026532180]";

    fn inst(m: &str, b: &str, n: &str) -> Instance {
        Instance {
            machine_id: m.into(),
            boot_id: b.into(),
            pid_ns: n.into(),
        }
    }

    const UP: Option<Duration> = Some(Duration::from_secs(100));

    #[rstest]
    #[case::the_same_instance(inst(M1, B1, N1), Some(0.5), Kinship::Same)]
    #[case::the_same_instance_long_silent(inst(M1, B1, N1), Some(500.0), Kinship::Same)]
    #[case::an_older_sweepds_row(inst("", "", ""), Some(0.5), Kinship::Unrecorded)]
    #[case::another_pid_namespace(inst(M1, B1, N2), Some(0.5), Kinship::OtherNamespace)]
    #[case::a_namespace_we_cannot_read(inst(M1, B1, ""), Some(0.5), Kinship::OtherNamespace)]
    #[case::another_machine(inst(M2, B2, N1), Some(0.5), Kinship::OtherMachine)]
    // Two containers of one kernel with other machine ids: another machine, as far as it says.
    #[case::another_machine_id_on_our_kernel(inst(M2, B1, N2), Some(0.5), Kinship::OtherMachine)]
    // Silent since before our boot: this machine's previous boot.
    #[case::rebooted(inst(M1, B2, N1), Some(150.0), Kinship::Rebooted)]
    // Our machine id, another boot, heartbeats since we booted: a clone of our disk image.
    #[case::a_clone_with_our_machine_id(inst(M1, B2, N1), Some(0.5), Kinship::OtherMachine)]
    #[case::a_clone_silent_for_a_while(inst(M1, B2, N1), Some(99.0), Kinship::OtherMachine)]
    #[case::no_age_no_reboot(inst(M1, B2, N1), None, Kinship::OtherMachine)]
    #[case::no_machine_ids_another_boot(inst("", B2, N1), Some(150.0), Kinship::OtherMachine)]
    #[case::no_boot_id(inst(M1, "", N1), Some(0.5), Kinship::OtherMachine)]
    fn how_a_rows_instance_relates_to_ours(
        #[case] theirs: Instance,
        #[case] age: Option<f64>,
        #[case] expect: Kinship,
    ) {
        assert_eq!(kinship(&theirs, age, &inst(M1, B1, N1), UP), expect);
    }

    #[test]
    fn without_our_uptime_no_row_is_a_previous_boots() {
        assert_eq!(
            kinship(&inst(M1, B2, N1), Some(1e6), &inst(M1, B1, N1), None),
            Kinship::OtherMachine
        );
    }

    #[test]
    fn without_a_machine_id_of_our_own_the_boot_id_still_tells_namespaces_apart() {
        let me = inst("", B1, N1);
        assert_eq!(
            kinship(&inst("", B1, N1), Some(0.5), &me, UP),
            Kinship::Same
        );
        assert_eq!(
            kinship(&inst("", B1, N2), Some(0.5), &me, UP),
            Kinship::OtherNamespace
        );
    }

    fn holder(host: &str, pid: u32, instance: Instance, age: f64, state: DaemonState) -> Holder {
        Holder {
            id: DaemonId {
                pid,
                pid_start: Some(77),
                host: host.into(),
            },
            instance,
            started_at: "2026-12-01 10:00:00".into(),
            heartbeat_at: "2026-12-01 10:05:00".into(),
            age_s: Some(age),
            state,
        }
    }

    const ALIVE: DaemonState = DaemonState::Running;
    const LOCAL_PID: u32 = 500;
    const OUR_PID: u32 = 900;

    /// (host, pid, instance, heartbeat age, state, several hosts) → the verdict, with pid 500
    /// running here and our daemon pid 900 on host "a", instance (M1, B1, N1), up 100 s,
    /// gone after 60 s.
    #[rstest]
    #[case::our_pid_namespace_its_pid_runs(
        "a",
        LOCAL_PID,
        inst(M1, B1, N1),
        0.5,
        ALIVE,
        true,
        Some(Block::Running)
    )]
    #[case::our_pid_namespace_its_pid_is_gone("a", 501, inst(M1, B1, N1), 0.5, ALIVE, true, None)]
    #[case::our_own_row("a", OUR_PID, inst(M1, B1, N1), 0.5, ALIVE, true, None)]
    #[case::an_older_sweepds_row_its_pid_runs(
        "a",
        LOCAL_PID,
        inst("", "", ""),
        0.5,
        ALIVE,
        false,
        Some(Block::Running)
    )]
    #[case::an_older_sweepds_row_its_pid_is_gone(
        "a",
        501,
        inst("", "", ""),
        0.5,
        ALIVE,
        false,
        None
    )]
    #[case::another_machine_alive(
        "a",
        501,
        inst(M2, B2, N1),
        0.5,
        ALIVE,
        true,
        Some(Block::HostIdInUse(Kinship::OtherMachine))
    )]
    // Its pid 500 runs here too: that is not it.
    #[case::another_machine_alive_whatever_our_pids(
        "a",
        LOCAL_PID,
        inst(M2, B2, N1),
        0.5,
        ALIVE,
        false,
        Some(Block::HostIdInUse(Kinship::OtherMachine))
    )]
    #[case::another_machine_as_pid_one_like_us(
        "a",
        OUR_PID,
        inst(M2, B2, N2),
        0.5,
        ALIVE,
        true,
        Some(Block::HostIdInUse(Kinship::OtherMachine))
    )]
    #[case::another_machine_silent("a", 501, inst(M2, B2, N1), 61.0, ALIVE, true, None)]
    #[case::another_machine_stopped(
        "a",
        501,
        inst(M2, B2, N1),
        0.5,
        DaemonState::Stopped,
        true,
        None
    )]
    #[case::another_machine_failed_over(
        "a",
        501,
        inst(M2, B2, N1),
        0.5,
        DaemonState::Gone,
        true,
        None
    )]
    #[case::another_container_alive(
        "a",
        501,
        inst(M1, B1, N2),
        0.5,
        DaemonState::Paused,
        false,
        Some(Block::HostIdInUse(Kinship::OtherNamespace))
    )]
    #[case::another_container_silent("a", 501, inst(M1, B1, N2), 60.0, ALIVE, false, None)]
    // Its old pid 500 runs again after the reboot: another process.
    #[case::this_machine_before_its_reboot(
        "a",
        LOCAL_PID,
        inst(M1, B2, N1),
        150.0,
        ALIVE,
        true,
        None
    )]
    #[case::another_host_on_postgresql("b", LOCAL_PID, inst(M2, B2, N1), 0.5, ALIVE, true, None)]
    #[case::another_host_on_sqlite_alive(
        "b",
        501,
        inst(M2, B2, N1),
        0.5,
        ALIVE,
        false,
        Some(Block::Running)
    )]
    #[case::another_host_on_sqlite_silent("b", 501, inst(M2, B2, N1), 61.0, ALIVE, false, None)]
    fn whether_a_row_keeps_us_from_the_study(
        #[case] host: &str,
        #[case] pid: u32,
        #[case] instance: Instance,
        #[case] age: f64,
        #[case] state: DaemonState,
        #[case] several_hosts: bool,
        #[case] expect: Option<Block>,
    ) {
        let me = DaemonId {
            pid: OUR_PID,
            pid_start: Some(5),
            host: "a".into(),
        };
        let mine = inst(M1, B1, N1);
        let here = Here {
            id: &me,
            instance: &mine,
            uptime: UP,
            several_hosts,
            gone_after: Duration::from_secs(60),
        };
        let h = holder(host, pid, instance, age, state);
        let runs = |p: u32, start: Option<u64>| p == LOCAL_PID && start == Some(77);
        assert_eq!(blocks(&h, &here, runs), expect);
    }

    #[test]
    fn the_refusal_names_the_host_id_both_instances_and_what_to_do() {
        let me = DaemonId {
            pid: 1,
            pid_start: Some(5),
            host: "twin".into(),
        };
        let mine = inst(M1, B1, N1);
        let here = Here {
            id: &me,
            instance: &mine,
            uptime: UP,
            several_hosts: true,
            gone_after: Duration::from_secs(60),
        };
        let h = holder("twin", 1, inst(M2, B2, ""), 0.42, ALIVE);
        let text = host_id_in_use(&h, &here, Kinship::OtherMachine, true);
        for part in [
            "host id `twin` (from SWEEPD_HOST_ID)",
            "on another machine",
            "pid 1 there",
            "last heartbeat 0.4s ago",
            &format!("machine id {M2}, boot id {B2}, PID namespace unknown"),
            &format!("this one is machine id {M1}, boot id {B1}, PID namespace {N1}"),
            "set SWEEPD_HOST_ID to a name unique to each",
            "older than 1m",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        let text = host_id_in_use(&h, &here, Kinship::OtherNamespace, false);
        assert!(text.contains("(this machine's hostname; SWEEPD_HOST_ID is not set)"));
        assert!(text.contains("in another PID namespace"), "{text}");
    }

    #[rstest]
    #[case::systemds(
        "3d1219c7c4c5404aaa1f6d2a48adfda4\n",
        "3d1219c7c4c5404aaa1f6d2a48adfda4"
    )]
    #[case::empty_in_an_image("", "")]
    #[case::uninitialized("uninitialized\n", "")]
    #[case::upper_case("3D1219C7C4C5404AAA1F6D2A48ADFDA4", "")]
    #[case::too_short("3d1219c7", "")]
    #[case::all_zero("00000000000000000000000000000000", "")]
    fn a_machine_id_is_32_lowercase_hex_digits(#[case] text: &str, #[case] expect: &str) {
        assert_eq!(machine_id(text), expect);
    }

    #[rstest]
    #[case::the_kernels(
        "4e5d0da2-fcd1-4333-9d86-8ff49ed76a54\n",
        "4e5d0da2-fcd1-4333-9d86-8ff49ed76a54"
    )]
    #[case::garbage("not a uuid", "")]
    #[case::no_dashes("4e5d0da2fcd143339d868ff49ed76a54abcd", "")]
    fn a_boot_id_is_a_uuid(#[case] text: &str, #[case] expect: &str) {
        assert_eq!(boot_id(text), expect);
    }

    #[rstest]
    #[case::the_kernels("pid:[4026531836]", "pid:[4026531836]")]
    #[case::another_namespace_kind("net:[4026531840]", "")]
    #[case::empty("pid:[]", "")]
    fn a_pid_namespace_is_its_links_text(#[case] text: &str, #[case] expect: &str) {
        assert_eq!(pid_namespace(text), expect);
    }

    #[test]
    fn this_process_has_a_boot_id_and_a_pid_namespace() {
        let me = this_instance();
        assert_eq!(boot_id(&me.boot_id), me.boot_id);
        assert!(!me.boot_id.is_empty(), "{me:?}");
        assert!(me.pid_ns.starts_with("pid:["), "{me:?}");
        assert!(uptime().is_some());
    }
}
