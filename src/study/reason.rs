//! Why a trial waits, or what it is doing, in one short phrase, as Slurm's `squeue` REASON
//! column says it: `waiting: expects 7.1 GiB, 5.3 GiB free on GPU 1`, `paused`, `retry 2/3
//! after oom`, `held by the breaker until 14:05`, `running 3m12s on GPU 0, step 40`.
//!
//! A person looking at a study that does not move needs the why, not a state. Some reasons
//! only the daemon knows (the memory a candidate expects against what is free, the slots, the
//! breaker, a pause): it publishes them as data, a [`Line`] of [`Queued`] entries, and writes
//! the line again only when a phrase changes ([`Line::differs`]), so that a figure moving by a
//! few MiB costs no write. The others the CLI derives alone from a trial's rows (how long it
//! runs, on which GPU, its last step; which retry of how many it is): [`Reason::retry`]. Both
//! are rendered here, once, by [`Reason::phrase`].

use super::trial::{Attempts, FailureKind};
use crate::units::{format_elapsed, format_gib};
use std::time::Duration;

/// Why a trial waits or what it does, with the figures the phrase names.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// GPU admission found no device with room: the candidate's expected peak, and the device
    /// with the most free memory (bytes).
    Memory {
        expects: u64,
        free: u64,
        device: u32,
    },
    /// Every slot runs a trial.
    Slots { running: usize, max_par: usize },
    /// Other candidates are ahead of it in the daemon's line.
    Queued { ahead: usize },
    /// The study is paused: running trials finish, none starts.
    Paused,
    /// The circuit breaker quarantines every device until this local time (as the store writes
    /// times: `2026-01-01 14:05:00`).
    Breaker { until: String },
    /// A retry copy: its `attempt`th retry after a failure of kind `after`, of `of` allowed
    /// (`None`: not known here, or no limit).
    Retry {
        attempt: u32,
        of: Option<u32>,
        after: FailureKind,
    },
    /// Running for `elapsed_s` seconds, on a GPU or not, its last reported step.
    Running {
        elapsed_s: u64,
        device: Option<u32>,
        step: Option<i64>,
    },
    /// Still RUNNING in the database, but the daemon that ran it is gone: how long it had run
    /// when that daemon was last heard of (the next `sweepd run` fails and re-enqueues it).
    DaemonGone {
        ran_s: u64,
        device: Option<u32>,
        step: Option<i64>,
    },
}

impl Reason {
    /// The phrase `status` and `trials` show.
    pub fn phrase(&self) -> String {
        match self {
            Reason::Memory {
                expects,
                free,
                device,
            } => format!(
                "waiting: expects {}, {} free on GPU {device}",
                format_gib(*expects),
                format_gib(*free)
            ),
            Reason::Slots { running, max_par } => {
                format!("waiting: all slots busy ({running}/{max_par} running)")
            }
            Reason::Queued { ahead: 1 } => "waiting: 1 candidate ahead in line".to_owned(),
            Reason::Queued { ahead } => format!("waiting: {ahead} candidates ahead in line"),
            Reason::Paused => "paused".to_owned(),
            Reason::Breaker { until } => format!("held by the breaker until {}", clock(until)),
            Reason::Retry { attempt, of, after } => match of {
                Some(of) => format!("retry {attempt}/{of} after {after}"),
                None => format!("retry {attempt} after {after}"),
            },
            Reason::Running {
                elapsed_s,
                device,
                step,
            } => format!("running {}", run_text(*elapsed_s, *device, *step)),
            Reason::DaemonGone {
                ran_s,
                device,
                step,
            } => format!(
                "its daemon is gone: ran {} (re-enqueued by the next `sweepd run`)",
                run_text(*ran_s, *device, *step)
            ),
        }
    }

    /// The retry a WAITING copy is, from its failed attempts by kind and the failure it
    /// follows; `of`: the re-enqueues `[retry]` allows for that kind, where known. Kinds that
    /// share a limit count together, as the retry policy counts them (`timeout`, `hang`,
    /// `killed` and `worker_died` are all `[retry] crash`).
    pub fn retry(attempts: &Attempts, after: FailureKind, of: Option<u32>) -> Reason {
        let attempt = attempts
            .iter()
            .filter(|(k, _)| retry_class(**k) == retry_class(after))
            .map(|(_, n)| *n)
            .sum::<u32>()
            .max(1);
        Reason::Retry { attempt, of, after }
    }

    /// The phrases of several reasons of one trial, the most pressing first.
    pub fn phrases(reasons: &[Reason]) -> String {
        reasons
            .iter()
            .map(Reason::phrase)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Which `[retry]` limit a failure kind counts against (`None`: never retried, or no limit).
fn retry_class(kind: FailureKind) -> Option<&'static str> {
    match kind {
        FailureKind::Oom => Some("oom"),
        FailureKind::CudaFatal => Some("cuda_fatal"),
        FailureKind::Killed
        | FailureKind::Timeout
        | FailureKind::Hang
        | FailureKind::WorkerDied => Some("crash"),
        FailureKind::Interrupted => Some("interrupted"),
        // A trial that reached its own memory cap is re-run larger at no cost (issue 41):
        // no `[retry]` limit, counted apart from an out-of-memory failure.
        FailureKind::Cap => Some("cap"),
        FailureKind::UserError | FailureKind::BadValue | FailureKind::Protocol => None,
    }
}

/// "3m12s on GPU 0, step 40", each part only where known.
fn run_text(secs: u64, device: Option<u32>, step: Option<i64>) -> String {
    let mut out = format_elapsed(Duration::from_secs(secs));
    if let Some(d) = device {
        out.push_str(&format!(" on GPU {d}"));
    }
    if let Some(s) = step {
        out.push_str(&format!(", step {s}"));
    }
    out
}

/// "14:05" from a stored local time; the text as given when it is not one.
fn clock(stamp: &str) -> &str {
    let ok = stamp.len() >= 16
        && stamp.as_bytes()[10] == b' '
        && stamp.as_bytes()[13] == b':'
        && stamp.is_char_boundary(16);
    if ok {
        &stamp[11..16]
    } else {
        stamp
    }
}

/// One entry of a daemon's line: a trial (its id; `None` for a candidate not numbered yet, a
/// new sample the daemon holds until a device has room) and why it waits.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Queued {
    pub trial_id: Option<i64>,
    pub reason: Reason,
}

/// What one daemon publishes: its line of waiting candidates, head first, and the reason
/// that holds the whole study (paused, the breaker) where one does.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Line {
    #[serde(default)]
    pub study: Option<Reason>,
    #[serde(default)]
    pub queued: Vec<Queued>,
}

impl Line {
    /// Whether `self` says something other than `last` (what was written before): compared
    /// by phrase, so that a figure that moves below what the phrase shows (free memory by a
    /// few MiB) is no change and costs no write.
    pub fn differs(&self, last: Option<&Line>) -> bool {
        let Some(last) = last else {
            return true;
        };
        let key = |l: &Line| {
            (
                l.study.as_ref().map(Reason::phrase),
                l.queued
                    .iter()
                    .map(|q| (q.trial_id, q.reason.phrase()))
                    .collect::<Vec<_>>(),
            )
        };
        key(self) != key(last)
    }

    /// The reasons of one entry of the line: the study's hold first, then its own.
    pub fn reasons_of_queued(&self, q: &Queued) -> Vec<Reason> {
        self.study
            .iter()
            .cloned()
            .chain(std::iter::once(q.reason.clone()))
            .collect()
    }

    /// The reason published for trial `trial_id`: the study's hold first, then its own.
    pub fn reasons_of(&self, trial_id: i64) -> Vec<Reason> {
        self.study
            .iter()
            .cloned()
            .chain(
                self.queued
                    .iter()
                    .filter(|q| q.trial_id == Some(trial_id))
                    .map(|q| q.reason.clone()),
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const GIB: u64 = 1 << 30;

    #[rstest]
    #[case::memory(
        Reason::Memory { expects: 7 * GIB + GIB / 10, free: 5 * GIB + 3 * GIB / 10, device: 1 },
        "waiting: expects 7.1 GiB, 5.3 GiB free on GPU 1"
    )]
    #[case::slots(Reason::Slots { running: 4, max_par: 4 }, "waiting: all slots busy (4/4 running)")]
    #[case::one_ahead(Reason::Queued { ahead: 1 }, "waiting: 1 candidate ahead in line")]
    #[case::several_ahead(Reason::Queued { ahead: 3 }, "waiting: 3 candidates ahead in line")]
    #[case::paused(Reason::Paused, "paused")]
    #[case::breaker(
        Reason::Breaker { until: "2026-03-01 14:05:31.000000".into() },
        "held by the breaker until 14:05"
    )]
    #[case::breaker_not_a_time(
        Reason::Breaker { until: "soon".into() },
        "held by the breaker until soon"
    )]
    #[case::retry_of(
        Reason::Retry { attempt: 2, of: Some(3), after: FailureKind::Oom },
        "retry 2/3 after oom"
    )]
    #[case::retry_limit_unknown(
        Reason::Retry { attempt: 1, of: None, after: FailureKind::Interrupted },
        "retry 1 after interrupted"
    )]
    #[case::retry_after_its_cap(
        Reason::Retry { attempt: 1, of: None, after: FailureKind::Cap },
        "retry 1 after cap"
    )]
    #[case::running_on_a_gpu(
        Reason::Running { elapsed_s: 192, device: Some(0), step: Some(40) },
        "running 3m12s on GPU 0, step 40"
    )]
    #[case::running_cpu_no_step(
        Reason::Running { elapsed_s: 5, device: None, step: None },
        "running 5s"
    )]
    #[case::daemon_gone(
        Reason::DaemonGone { ran_s: 61, device: Some(1), step: None },
        "its daemon is gone: ran 1m01s on GPU 1 (re-enqueued by the next `sweepd run`)"
    )]
    fn each_reason_reads_as_a_short_phrase(#[case] reason: Reason, #[case] phrase: &str) {
        assert_eq!(reason.phrase(), phrase);
    }

    fn attempts(kinds: &[(FailureKind, u32)]) -> Attempts {
        kinds.iter().copied().collect()
    }

    #[rstest]
    #[case::first_oom(&[(FailureKind::Oom, 1)], FailureKind::Oom, Some(2), "retry 1/2 after oom")]
    // Another kind's failures count against their own limit, not this one's.
    #[case::oom_after_a_crash(
        &[(FailureKind::Oom, 2), (FailureKind::Killed, 1)],
        FailureKind::Oom,
        Some(2),
        "retry 2/2 after oom"
    )]
    // A timeout and a hang are both `[retry] crash`.
    #[case::crashes_count_together(
        &[(FailureKind::Timeout, 1), (FailureKind::Hang, 1), (FailureKind::Oom, 1)],
        FailureKind::Hang,
        Some(3),
        "retry 2/3 after hang"
    )]
    // A copy whose attempts were not recorded (another writer's) is at least a first retry.
    #[case::no_record(&[], FailureKind::Oom, None, "retry 1 after oom")]
    fn a_retry_counts_the_attempts_of_its_kind(
        #[case] done: &[(FailureKind, u32)],
        #[case] after: FailureKind,
        #[case] of: Option<u32>,
        #[case] phrase: &str,
    ) {
        assert_eq!(Reason::retry(&attempts(done), after, of).phrase(), phrase);
    }

    fn memory(free_mib: u64) -> Reason {
        Reason::Memory {
            expects: 7 * GIB,
            free: free_mib << 20,
            device: 0,
        }
    }

    #[test]
    fn a_line_is_written_again_only_when_a_phrase_changes() {
        let line = |free_mib, trial_id| Line {
            study: None,
            queued: vec![Queued {
                trial_id,
                reason: memory(free_mib),
            }],
        };
        let last = line(5000, Some(3));
        assert!(line(5000, Some(3)).differs(None), "nothing written yet");
        // 5000 and 5010 MiB are both "4.9 GiB".
        assert!(!line(5010, Some(3)).differs(Some(&last)));
        assert!(line(5200, Some(3)).differs(Some(&last)));
        assert!(line(5000, None).differs(Some(&last)), "another candidate");
        let paused = Line {
            study: Some(Reason::Paused),
            ..last.clone()
        };
        assert!(paused.differs(Some(&last)));
        assert!(Line::default().differs(Some(&last)), "the line emptied");
    }

    #[test]
    fn a_trial_s_reasons_are_the_study_s_hold_then_its_own_and_survive_json() {
        let line = Line {
            study: Some(Reason::Breaker {
                until: "2026-03-01 14:05:00".into(),
            }),
            queued: vec![
                Queued {
                    trial_id: None,
                    reason: memory(5000),
                },
                Queued {
                    trial_id: Some(9),
                    reason: Reason::Queued { ahead: 1 },
                },
            ],
        };
        let back: Line = serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(back, line);
        assert_eq!(
            Reason::phrases(&line.reasons_of(9)),
            "held by the breaker until 14:05; waiting: 1 candidate ahead in line"
        );
        assert_eq!(line.reasons_of(4).len(), 1, "the hold alone");
        let json = serde_json::to_value(&line.queued[0].reason).unwrap();
        assert_eq!(json["kind"], "memory");
        assert_eq!(json["device"], 0);
    }
}
