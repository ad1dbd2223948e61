//! Whether a study's daemon runs, as `status` and `gpus` tell it: a daemon on this machine (same
//! boot, same PID namespace) is looked up by its pid and process start time in our `/proc`, so
//! one killed -9 is shown gone at once; elsewhere only its heartbeat can say. The rule
//! ([`liveness`]) is pure; [`Here`] is what this process reads of itself.

use crate::store::{DaemonView, Instance};
use crate::study::DaemonState;
use crate::supervisor::{self, Kinship};
use std::time::Duration;

/// What `status` knows of a daemon row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Liveness {
    Runs,
    /// It stopped (or was failed over): its row says so.
    Stopped,
    /// Its process is not in our `/proc` with its recorded start time (killed?).
    Exited,
    /// This machine booted since its last heartbeat.
    Rebooted,
    /// Its heartbeat is older than the timeout (it runs where we cannot look).
    Silent,
}

impl Liveness {
    pub(super) fn runs(self) -> bool {
        self == Liveness::Runs
    }
}

/// This process's instance and uptime: what a daemon row's pid is compared against.
#[derive(Debug, Clone, Default)]
pub(super) struct Here {
    pub instance: Instance,
    pub uptime: Option<Duration>,
}

impl Here {
    pub(super) fn read() -> Here {
        Here {
            instance: supervisor::this_instance(),
            uptime: supervisor::uptime(),
        }
    }
}

/// Whether `d` runs. One whose pid is ours to look up (same machine, boot and PID namespace,
/// its start time recorded) runs while `pid_runs(pid, start)`, whatever its heartbeat says;
/// one from before this machine's boot is gone; any other runs while its heartbeat is fresh.
pub(super) fn liveness(
    d: &DaemonView,
    here: &Here,
    gone_after: Duration,
    pid_runs: impl Fn(u32, Option<u64>) -> bool,
) -> Liveness {
    if matches!(d.state, DaemonState::Stopped | DaemonState::Gone) {
        return Liveness::Stopped;
    }
    let fresh = supervisor::heartbeat_fresh(d.age_s, gone_after);
    let by_heartbeat = if fresh {
        Liveness::Runs
    } else {
        Liveness::Silent
    };
    match supervisor::kinship(&d.instance, d.age_s, &here.instance, here.uptime) {
        Kinship::Same => match (u32::try_from(d.pid), d.pid_start) {
            (Ok(pid), Some(start)) if pid_runs(pid, Some(start)) => Liveness::Runs,
            (Ok(_), Some(_)) => Liveness::Exited,
            _ => by_heartbeat,
        },
        Kinship::Rebooted => Liveness::Rebooted,
        Kinship::Unrecorded | Kinship::OtherNamespace | Kinship::OtherMachine => by_heartbeat,
    }
}

/// What `status` says of a daemon that does not run, after "GONE: pid P on H".
pub(super) fn gone_text(l: Liveness, d: &DaemonView) -> String {
    match l {
        Liveness::Exited => format!(
            "its process is gone (killed?); last heartbeat at {}",
            d.heartbeat_at
        ),
        Liveness::Rebooted => format!(
            "this machine rebooted since its last heartbeat at {}",
            d.heartbeat_at
        ),
        _ => format!("stopped sending heartbeats at {} (killed?)", d.heartbeat_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn ours() -> Instance {
        Instance {
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            boot_id: "11111111-2222-3333-4444-555555555555".into(),
            pid_ns: "pid:[4026531836]".into(),
        }
    }

    fn row(state: DaemonState, age_s: f64, instance: Instance, start: Option<u64>) -> DaemonView {
        DaemonView {
            pid: 4242,
            host: "a".into(),
            started_at: "2026-01-01 10:00:00".into(),
            heartbeat_at: "2026-01-01 10:05:00".into(),
            age_s: Some(age_s),
            state,
            detail: None,
            pid_start: start,
            instance,
        }
    }

    #[rstest]
    // Ours, killed -9 a moment ago: its heartbeat is fresh, its pid is gone.
    #[case::killed_here_is_gone_at_once(
        DaemonState::Running,
        0.5,
        ours(),
        Some(9),
        false,
        Liveness::Exited
    )]
    #[case::ours_running_runs_even_while_its_heartbeat_lags(
        DaemonState::Running,
        90.0,
        ours(),
        Some(9),
        true,
        Liveness::Runs
    )]
    #[case::ours_without_a_start_time_by_heartbeat(
        DaemonState::Running,
        0.5,
        ours(),
        None,
        false,
        Liveness::Runs
    )]
    #[case::stopped_is_stopped(DaemonState::Stopped, 0.5, ours(), Some(9), true, Liveness::Stopped)]
    #[case::failed_over_is_stopped(
        DaemonState::Gone,
        0.5,
        ours(),
        Some(9),
        true,
        Liveness::Stopped
    )]
    #[case::another_namespace_by_heartbeat(DaemonState::Running, 0.5, Instance { pid_ns: "pid:[1]".into(), ..ours() }, Some(9), false, Liveness::Runs)]
    #[case::another_machine_silent(DaemonState::Paused, 61.0, Instance { machine_id: "f".repeat(32), ..ours() }, Some(9), true, Liveness::Silent)]
    #[case::unrecorded_by_heartbeat(
        DaemonState::Running,
        0.5,
        Instance::default(),
        Some(9),
        false,
        Liveness::Runs
    )]
    #[case::before_our_boot_is_gone(DaemonState::Running, 7200.0, Instance { boot_id: "99999999-2222-3333-4444-555555555555".into(), ..ours() }, Some(9), true, Liveness::Rebooted)]
    fn a_daemon_runs_by_its_pid_where_it_is_ours_else_by_its_heartbeat(
        #[case] state: DaemonState,
        #[case] age_s: f64,
        #[case] instance: Instance,
        #[case] start: Option<u64>,
        #[case] pid_alive: bool,
        #[case] expected: Liveness,
    ) {
        let here = Here {
            instance: ours(),
            uptime: Some(Duration::from_secs(3600)),
        };
        let d = row(state, age_s, instance, start);
        let seen = std::cell::Cell::new(None);
        let got = liveness(&d, &here, Duration::from_secs(60), |pid, s| {
            seen.set(Some((pid, s)));
            pid_alive
        });
        assert_eq!(got, expected);
        if let Some(asked) = seen.get() {
            assert_eq!(asked, (4242, start), "looked up by pid and start time");
        }
    }
}
