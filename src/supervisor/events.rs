//! What happens to workers, as `sweepd_worker_events` records it and as the log says it: the
//! kinds of event, and why a worker is retired, as enums, so that each kind is spelt once and
//! the code that acts on one (a retirement that counts as a restart) matches a variant, never
//! a string.

use crate::store::{Store, StoreError};
use crate::study::FailureKind;
use std::fmt;
use std::time::Duration;

/// One row of `sweepd_worker_events`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum WorkerEvent<'a> {
    /// A worker process started, in `slot`, on `device` (`None`: the CPU).
    Spawned {
        pid: u32,
        slot: usize,
        device: Option<u32>,
    },
    /// It said `ready`.
    Ready,
    /// It could not be started.
    SpawnFailed(&'a str),
    /// Processes of its group outlived it and were killed (`at_once`: after a second Ctrl-C,
    /// without the grace).
    Killed { survivors: &'a [i32], at_once: bool },
    /// NVML still listed processes of a retired worker's group on `device`, which were killed.
    ReleaseTimeout { device: u32, pids: &'a [u32] },
    /// It was retired.
    Exited(&'a Retirement),
    /// Its trial failed.
    TrialFailed { kind: FailureKind, reason: &'a str },
    /// The circuit breaker quarantined a device (`on`: `gpu0`, or the CPU) for `wait`.
    Quarantined { on: String, wait: Duration },
    /// A process on our GPU that belongs to no trial or worker of ours, killed.
    OrphanKilled { pid: u32, device: u32, bytes: u64 },
    /// A worker a previous instance of this daemon left running, killed.
    KilledStale { pid: i64 },
}

impl WorkerEvent<'_> {
    /// The `kind` column.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            WorkerEvent::Spawned { .. } => "spawned",
            WorkerEvent::Ready => "ready",
            WorkerEvent::SpawnFailed(_) => "spawn_failed",
            WorkerEvent::Killed { .. } => "killed",
            WorkerEvent::ReleaseTimeout { .. } => "release_timeout",
            WorkerEvent::Exited(_) => "exited",
            WorkerEvent::TrialFailed { .. } => "trial_failed",
            WorkerEvent::Quarantined { .. } => "quarantined",
            WorkerEvent::OrphanKilled { .. } => "orphan_killed",
            WorkerEvent::KilledStale { .. } => "killed_stale",
        }
    }

    /// The `detail` column.
    pub(super) fn detail(&self) -> String {
        match self {
            WorkerEvent::Spawned { pid, slot, device } => format!(
                "pid {pid} slot {slot} on {}",
                device.map_or("cpu".into(), |d| format!("gpu{d}"))
            ),
            WorkerEvent::Ready => String::new(),
            WorkerEvent::SpawnFailed(why) => (*why).to_owned(),
            WorkerEvent::Killed {
                survivors,
                at_once: true,
            } => format!("stopped at once: SIGKILLed {survivors:?}"),
            WorkerEvent::Killed { survivors, .. } => format!("survivors {survivors:?}"),
            WorkerEvent::ReleaseTimeout { device, pids } => format!("gpu{device} pids {pids:?}"),
            WorkerEvent::Exited(why) => why.to_string(),
            WorkerEvent::TrialFailed { kind, reason } => format!("{}: {reason}", kind.as_str()),
            WorkerEvent::Quarantined { on, wait } => format!("{on} for {wait:?}"),
            WorkerEvent::OrphanKilled { pid, device, bytes } => {
                format!("pid {pid} held {bytes} bytes on gpu{device}")
            }
            WorkerEvent::KilledStale { pid } => format!("pid {pid}"),
        }
    }

    /// Records it, for `worker` and `trial` where it is theirs.
    pub(super) async fn record(
        &self,
        store: &Store,
        worker: Option<i64>,
        trial: Option<i64>,
    ) -> Result<(), StoreError> {
        store
            .event(worker, trial, self.kind(), &self.detail())
            .await
    }
}

/// Why a worker is retired.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Retirement {
    /// The study stopped (its last workers go with it).
    StudyStopped,
    /// A oneshot worker's trial is over.
    OneshotDone,
    /// Its process exited while it waited for a trial.
    ExitedWhileIdle,
    /// Its slot's next trial runs on another device.
    MovedDevice,
    /// Idle, and its memory was needed for trial number `trial`.
    MemoryNeeded { trial: i64 },
    /// Idle for `[gpu] idle_worker_timeout`.
    IdleTimeout(Duration),
    /// Idle, and another daemon on the host waits for `bytes` on `device`.
    Asked { device: u32, bytes: u64 },
    /// It did not start (no `ready`): why.
    FailedToStart(String),
    /// Its trial left it dead or untrusted, or it is recycled (`policy::Fate::Replace`): why.
    Replaced(String),
}

impl Retirement {
    /// Whether a worker takes its place (`sweepd_worker_restarts_total`): every retirement
    /// but the study's end and a oneshot worker's.
    pub(super) fn restarts(&self) -> bool {
        !matches!(self, Retirement::StudyStopped | Retirement::OneshotDone)
    }
}

impl fmt::Display for Retirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retirement::StudyStopped => f.write_str("study stopped"),
            Retirement::OneshotDone => f.write_str("oneshot trial done"),
            Retirement::ExitedWhileIdle => f.write_str("exited while idle"),
            Retirement::MovedDevice => f.write_str("moved to another device"),
            Retirement::MemoryNeeded { trial } => {
                write!(f, "idle; its memory was needed for trial {trial}")
            }
            Retirement::IdleTimeout(t) => write!(
                f,
                "idle for {} (idle_worker_timeout)",
                crate::units::format_duration(*t)
            ),
            Retirement::Asked { device, bytes } => write!(
                f,
                "another daemon on this host waits for {} on gpu{device}",
                crate::units::format_gib(*bytes)
            ),
            Retirement::FailedToStart(why) | Retirement::Replaced(why) => f.write_str(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_studys_end_and_a_oneshot_workers_do_not_count_as_restarts() {
        let all = [
            (Retirement::StudyStopped, false),
            (Retirement::OneshotDone, false),
            (Retirement::ExitedWhileIdle, true),
            (Retirement::MovedDevice, true),
            (Retirement::MemoryNeeded { trial: 3 }, true),
            (Retirement::IdleTimeout(Duration::from_secs(60)), true),
            (
                Retirement::Asked {
                    device: 0,
                    bytes: 1 << 30,
                },
                true,
            ),
            (
                Retirement::FailedToStart("exited before `ready`".into()),
                true,
            ),
            (
                Retirement::Replaced("worker exited with code 1".into()),
                true,
            ),
        ];
        for (why, restarts) in all {
            assert_eq!(why.restarts(), restarts, "{why}");
        }
    }

    #[test]
    fn events_are_recorded_with_the_kinds_and_details_the_tables_have_always_had() {
        let stopped = Retirement::StudyStopped;
        let cases = [
            (
                WorkerEvent::Spawned {
                    pid: 12,
                    slot: 1,
                    device: Some(2),
                },
                "spawned",
                "pid 12 slot 1 on gpu2",
            ),
            (
                WorkerEvent::Spawned {
                    pid: 12,
                    slot: 0,
                    device: None,
                },
                "spawned",
                "pid 12 slot 0 on cpu",
            ),
            (WorkerEvent::Ready, "ready", ""),
            (WorkerEvent::Exited(&stopped), "exited", "study stopped"),
            (
                WorkerEvent::Killed {
                    survivors: &[5, 6],
                    at_once: false,
                },
                "killed",
                "survivors [5, 6]",
            ),
            (
                WorkerEvent::Killed {
                    survivors: &[5],
                    at_once: true,
                },
                "killed",
                "stopped at once: SIGKILLed [5]",
            ),
            (
                WorkerEvent::ReleaseTimeout {
                    device: 1,
                    pids: &[7],
                },
                "release_timeout",
                "gpu1 pids [7]",
            ),
            (
                WorkerEvent::TrialFailed {
                    kind: FailureKind::Oom,
                    reason: "CUDA out of memory",
                },
                "trial_failed",
                "oom: CUDA out of memory",
            ),
            (
                WorkerEvent::Quarantined {
                    on: "gpu0".into(),
                    wait: Duration::from_secs(60),
                },
                "quarantined",
                "gpu0 for 60s",
            ),
            (
                WorkerEvent::OrphanKilled {
                    pid: 9,
                    device: 0,
                    bytes: 1024,
                },
                "orphan_killed",
                "pid 9 held 1024 bytes on gpu0",
            ),
            (WorkerEvent::KilledStale { pid: 4 }, "killed_stale", "pid 4"),
        ];
        for (event, kind, detail) in cases {
            assert_eq!((event.kind(), event.detail().as_str()), (kind, detail));
        }
    }
}
