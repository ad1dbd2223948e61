//! A slot's own choices: what happens to its worker after a trial, what a worker that failed
//! to start leads to, and whether its next trial is started in the commit that records its
//! trial's finish.

use crate::config::WorkerConfig;
use crate::gpu::Aim;
use crate::store::Runner;
use crate::supervisor::events::Retirement;
use crate::supervisor::policy::{self, Fate, WorkerHealth};
use std::time::Duration;

/// Worker starts that fail in a row before the run gives up: a missing import is not fixed by
/// trying again.
pub(in crate::supervisor) const MAX_START_FAILURES: u32 = 3;

/// How a trial ended, for the worker that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum TrialEnd {
    /// Complete or pruned.
    Success,
    /// An out-of-memory exception.
    Oom,
    Other,
}

/// A persistent worker's fate after its trial: what the trial's conversation said (`fate`:
/// replaced when it died or cannot be trusted), else, after an OOM, kept only if its memory
/// came back (`policy::after_oom`), after a success recycled after its count or its growth
/// (`policy::recycle`). `health` counts the trial just run.
pub(in crate::supervisor) fn after_trial(
    fate: Fate,
    end: TrialEnd,
    health: &WorkerHealth,
    cfg: &WorkerConfig,
) -> Fate {
    match (fate, end) {
        (Fate::Keep, TrialEnd::Oom) => policy::after_oom(health),
        (Fate::Keep, TrialEnd::Success) => {
            policy::recycle(health, cfg.recycle_after, cfg.recycle_on_growth)
        }
        (fate, _) => fate,
    }
}

/// Whether a persistent worker cannot run a trial of memory cap `cap`: its framework
/// (`framework`, as its `ready` said) reads its limit once, at its start (JAX reads
/// `XLA_PYTHON_CLIENT_MEM_FRACTION`, TensorFlow its logical device's `memory_limit`), and it
/// started under a smaller cap (`started_with`). A worker whose framework is unknown or takes
/// a new limit per trial (PyTorch, none) runs it.
pub(in crate::supervisor) fn cap_outgrown(
    framework: Option<&str>,
    started_with: Option<u64>,
    cap: Option<u64>,
) -> bool {
    let fixed = matches!(framework, Some("jax" | "tensorflow"));
    match (started_with, cap) {
        (Some(was), Some(now)) => fixed && now > was,
        // Started uncapped: its framework may take the whole device; capped since: a new one.
        (None, Some(_)) => fixed,
        (_, None) => false,
    }
}

/// What the study's memory model aims at, now `aiming` at that, once a worker of ours has
/// reported `framework` (the first report, `None`: none yet): the peak with caps on and a
/// framework reported, since its trials keep to their caps; else unchanged. A worker that
/// reports none (a raw worker, a framework the helper does not know) may ignore its cap and
/// grow past an estimate aimed at its peak into its neighbours' memory: until one reports, the
/// bound, as with caps off (the first trials, admitted before any worker exists, too). Never
/// back: a study whose workers enforce their caps keeps aiming at the peak.
pub(in crate::supervisor) fn aim(caps: bool, aiming: Aim, framework: Option<&str>) -> Aim {
    match (caps, framework) {
        (true, Some(_)) => Aim::Peak,
        _ => aiming,
    }
}

/// Whether an idle worker (on a GPU, in the pool) is retired now: its process is gone
/// (`alive` false), or it has been idle for `[gpu] idle_worker_timeout`.
pub(in crate::supervisor) fn idle_expired(
    alive: bool,
    idle_for: Duration,
    timeout: Duration,
) -> Option<Retirement> {
    if !alive {
        Some(Retirement::ExitedWhileIdle)
    } else if idle_for >= timeout {
        Some(Retirement::IdleTimeout(timeout))
    } else {
        None
    }
}

/// What a slot does after its worker failed to start `failures` times in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum Retry {
    /// The study is stopping: the slot ends.
    Stop,
    /// The run ends with the last failure ([`MAX_START_FAILURES`] in a row).
    GiveUp,
    /// Tries again after this wait, doubled at each failure (at most 32 s).
    After(Duration),
}

pub(in crate::supervisor) fn start_failed(failures: u32, stopping: bool) -> Retry {
    if stopping {
        Retry::Stop
    } else if failures >= MAX_START_FAILURES {
        Retry::GiveUp
    } else {
        Retry::After(Duration::from_millis(500 * 2u64.pow(failures.min(6))))
    }
}

/// What the commit that records a trial's finish also does.
#[derive(Debug, Clone, Copy)]
pub(in crate::supervisor) enum Then {
    /// Nothing more: the slot ends after it (shutdown, or `max_par` lowered below it), or the
    /// trial never ran.
    Stop,
    /// Starts the slot's next trial where one can start now. `hint`: the device it would
    /// rather run on (its worker's); `runner`: the worker kept here without GPUs, which that
    /// commit records as the next trial's.
    Next {
        hint: Option<u32>,
        runner: Option<Runner>,
    },
}

/// Whether slot `slot` asks for its next trial in the finish's commit: unless it is ending
/// (`stopping`, or `max_par` lowered below it). A persistent worker prefers its `device`; the
/// worker `kept` without GPUs runs the next trial.
pub(in crate::supervisor) fn then(
    stopping: bool,
    slot: usize,
    max_par: usize,
    persistent: bool,
    device: Option<u32>,
    kept: Option<Runner>,
) -> Then {
    if stopping || slot >= max_par {
        return Then::Stop;
    }
    Then::Next {
        hint: if persistent { device } else { None },
        runner: kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const MIB: u64 = 1 << 20;

    fn worker(recycle_after: Option<u32>, recycle_on_growth: Option<u64>) -> WorkerConfig {
        let dir = tempfile::tempdir().unwrap();
        let text = "[study]\nname = \"s\"\n[worker]\ncommand = [\"python\", \"t.py\"]\n\
                    [params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";
        let mut w = crate::config::Config::parse(text, &dir.path().join("supervisor.toml"))
            .unwrap()
            .worker;
        (w.recycle_after, w.recycle_on_growth) = (recycle_after, recycle_on_growth);
        w
    }

    fn health(successes: u64, baseline: Option<u64>, idle: Option<u64>) -> WorkerHealth {
        WorkerHealth {
            successes,
            trials_run: successes + 1,
            baseline,
            idle,
        }
    }

    #[rstest]
    #[case::kept_after_a_success(Fate::Keep, TrialEnd::Success, health(3, Some(500 * MIB), Some(520 * MIB)), None, true)]
    #[case::recycled_after_its_count(
        Fate::Keep,
        TrialEnd::Success,
        health(10, None, None),
        Some(10),
        false
    )]
    #[case::recycled_when_it_grew(Fate::Keep, TrialEnd::Success, health(3, Some(500 * MIB), Some(1600 * MIB)), None, false)]
    #[case::kept_after_an_oom_its_memory_came_back_from(Fate::Keep, TrialEnd::Oom, health(3, Some(500 * MIB), Some(600 * MIB)), None, true)]
    #[case::replaced_after_an_oom_it_holds_on_to(Fate::Keep, TrialEnd::Oom, health(3, Some(500 * MIB), Some(900 * MIB)), None, false)]
    #[case::replaced_after_an_oom_without_readings(
        Fate::Keep,
        TrialEnd::Oom,
        health(3, None, None),
        None,
        false
    )]
    #[case::kept_after_another_failure(Fate::Keep, TrialEnd::Other, health(0, None, Some(9000 * MIB)), Some(1), true)]
    #[case::the_conversation_replaced_it(Fate::Replace("worker exited".into()), TrialEnd::Success, health(0, None, None), None, false)]
    fn a_worker_is_kept_recycled_or_replaced_after_its_trial(
        #[case] fate: Fate,
        #[case] end: TrialEnd,
        #[case] h: WorkerHealth,
        #[case] recycle_after: Option<u32>,
        #[case] kept: bool,
    ) {
        let cfg = worker(recycle_after, Some(1024 * MIB));
        assert_eq!(after_trial(fate, end, &h, &cfg) == Fate::Keep, kept);
    }

    #[rstest]
    #[case::first(1, false, Retry::After(Duration::from_secs(1)))]
    #[case::second(2, false, Retry::After(Duration::from_secs(2)))]
    #[case::third_gives_up(3, false, Retry::GiveUp)]
    #[case::stopping(1, true, Retry::Stop)]
    fn a_worker_that_fails_to_start_is_tried_again_twice_then_the_run_ends(
        #[case] failures: u32,
        #[case] stopping: bool,
        #[case] expected: Retry,
    ) {
        assert_eq!(start_failed(failures, stopping), expected);
    }

    #[rstest]
    #[case::busy_recently(true, 59, None)]
    #[case::idle_for_its_timeout(true, 60, Some(Retirement::IdleTimeout(Duration::from_secs(60))))]
    #[case::exited_while_idle(false, 1, Some(Retirement::ExitedWhileIdle))]
    fn an_idle_worker_goes_after_its_timeout_or_when_its_process_is_gone(
        #[case] alive: bool,
        #[case] idle_s: u64,
        #[case] expected: Option<Retirement>,
    ) {
        let timeout = Duration::from_secs(60);
        assert_eq!(
            idle_expired(alive, Duration::from_secs(idle_s), timeout),
            expected
        );
    }

    #[test]
    fn the_next_trial_starts_in_the_finishs_commit_unless_the_slot_ends() {
        let runner = Runner {
            worker_id: 4,
            pid: 40,
        };
        let next = |stopping, slot, persistent, kept| match then(
            stopping,
            slot,
            2,
            persistent,
            Some(1),
            kept,
        ) {
            Then::Stop => None,
            Then::Next { hint, runner } => Some((hint, runner.map(|r| r.worker_id))),
        };
        assert_eq!(next(true, 0, true, None), None, "shutdown");
        assert_eq!(next(false, 2, true, None), None, "max_par lowered below it");
        assert_eq!(next(false, 1, true, None), Some((Some(1), None)));
        assert_eq!(next(false, 1, false, None), Some((None, None)), "oneshot");
        assert_eq!(next(false, 0, true, Some(runner)), Some((Some(1), Some(4))));
    }

    #[rstest::rstest]
    #[case::torch_takes_a_new_cap_per_trial(Some("torch"), Some(4), Some(8), false)]
    #[case::no_framework_reads_it_from_the_trial(None, Some(4), Some(8), false)]
    #[case::jax_read_a_smaller_one_at_its_start(Some("jax"), Some(4), Some(8), true)]
    #[case::tensorflow_too(Some("tensorflow"), Some(4), Some(8), true)]
    #[case::jax_within_what_it_started_with(Some("jax"), Some(8), Some(4), false)]
    #[case::jax_started_uncapped(Some("jax"), None, Some(4), true)]
    #[case::no_cap_now(Some("jax"), Some(4), None, false)]
    fn a_worker_whose_framework_read_a_smaller_cap_at_its_start_is_not_reused(
        #[case] framework: Option<&str>,
        #[case] started_with: Option<u64>,
        #[case] cap: Option<u64>,
        #[case] outgrown: bool,
    ) {
        assert_eq!(cap_outgrown(framework, started_with, cap), outgrown);
    }

    /// Issue 41: under the default caps, estimates aim at the peak only once a worker reported
    /// a framework that enforces its cap. Before, caps on alone made them aim at the peak, and a
    /// worker that ignores its cap grew past them into its neighbours.
    #[rstest]
    #[case::caps_off(false, Aim::Bound, Some("torch"), Aim::Bound)]
    #[case::no_report_yet(true, Aim::Bound, None, Aim::Bound)]
    #[case::the_first_report(true, Aim::Bound, Some("torch"), Aim::Peak)]
    #[case::any_framework_it_reports(true, Aim::Bound, Some("jax"), Aim::Peak)]
    #[case::never_back(true, Aim::Peak, None, Aim::Peak)]
    #[case::caps_off_never_peak_without_a_report(false, Aim::Bound, None, Aim::Bound)]
    fn estimates_aim_at_the_peak_only_once_a_worker_reported_a_framework(
        #[case] caps: bool,
        #[case] aiming: Aim,
        #[case] framework: Option<&str>,
        #[case] want: Aim,
    ) {
        assert_eq!(aim(caps, aiming, framework), want);
    }
}
