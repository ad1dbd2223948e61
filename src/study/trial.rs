//! Trials: their states, a study's direction, how a trial ended and why it failed.

use super::space::{Dists, Params};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A name that is not the spelling of any value of the enum it was parsed as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

/// Enums spelled in the database (and on the command line) by a fixed name each: `Display`
/// writes it, `FromStr` reads it back (ASCII case-insensitively), `ALL` lists every value.
macro_rules! spelled {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name as stored.
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<$name, UnknownName> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str().eq_ignore_ascii_case(s))
                    .ok_or_else(|| UnknownName { what: $what, name: s.to_owned() })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

spelled! {
    /// A trial's state, as Optuna names it in the `trials.state` column.
    TrialState, "trial state" {
        Running => "RUNNING",
        Waiting => "WAITING",
        Complete => "COMPLETE",
        Pruned => "PRUNED",
        Fail => "FAIL",
    }
}

impl TrialState {
    /// COMPLETE, PRUNED and FAIL never change again.
    pub fn is_final(&self) -> bool {
        !matches!(self, TrialState::Running | TrialState::Waiting)
    }
}

spelled! {
    /// Whether the objective is minimized or maximized, as Optuna names it in
    /// `study_directions.direction`.
    Direction, "direction" {
        Minimize => "MINIMIZE",
        Maximize => "MAXIMIZE",
    }
}

impl Direction {
    /// The name Optuna stores in `study_directions.direction`.
    pub fn as_optuna(&self) -> &'static str {
        self.as_str()
    }

    /// Whether objective value `a` is strictly better than `b` (never true when either is NaN).
    pub fn better(&self, a: f64, b: f64) -> bool {
        match self {
            Direction::Minimize => a < b,
            Direction::Maximize => a > b,
        }
    }
}

spelled! {
    /// How a trial failed: stored as `sweepd:fail_kind` and shown by `sweepd trials`.
    FailureKind, "failure kind" {
        /// Out of memory (GPU, or host for Python's `MemoryError`): the device was full.
        Oom => "oom",
        /// The trial's own allocator reached the memory cap it was admitted with, while the
        /// device still had room: its estimate was low, not the device full. Re-run with a
        /// larger cap; it spends no budget and no retry.
        Cap => "cap",
        /// A CUDA error that leaves the process's CUDA context unusable.
        CudaFatal => "cuda_fatal",
        /// The process died by a signal.
        Killed => "killed",
        /// The trial ran past its time limit.
        Timeout => "timeout",
        /// The worker stopped answering.
        Hang => "hang",
        /// The worker broke the protocol.
        Protocol => "protocol",
        /// The objective raised an ordinary exception.
        UserError => "user_error",
        /// The objective returned something that is not a number.
        BadValue => "bad_value",
        /// The process exited without a recognizable cause.
        WorkerDied => "worker_died",
        /// sweepd stopped the trial: shutdown, or the daemon that ran it is gone.
        Interrupted => "interrupted",
    }
}

impl FailureKind {
    /// The CUDA context of the process is unusable: the worker must be replaced.
    ///
    /// True for `cuda_fatal`, and for the kinds where the process is gone or can no longer be
    /// trusted (`killed`, `worker_died`, `timeout`, `hang`, `protocol`). An `oom` leaves a
    /// usable context (the allocator gives the memory back when the trial's tensors go).
    pub fn poisons_context(&self) -> bool {
        matches!(
            self,
            FailureKind::CudaFatal
                | FailureKind::Killed
                | FailureKind::WorkerDied
                | FailureKind::Timeout
                | FailureKind::Hang
                | FailureKind::Protocol
        )
    }

    /// A fault that may clear by itself (a device, a driver, memory others hold), as opposed to
    /// an error of the objective, which is the same error next time, sweepd's own stop, or a
    /// trial that reached its own memory cap (the device is fine: only its estimate was low).
    pub fn may_clear(&self) -> bool {
        !matches!(
            self,
            FailureKind::Interrupted
                | FailureKind::Cap
                | FailureKind::UserError
                | FailureKind::BadValue
                | FailureKind::Protocol
        )
    }
}

spelled! {
    /// The daemon's state in `sweepd_daemon.state`.
    DaemonState, "daemon state" {
        Running => "RUNNING",
        /// Every device quarantined by the circuit breaker.
        Paused => "PAUSED",
        Stopped => "STOPPED",
        /// Stopped heartbeating for `[storage] host_timeout`: another host failed its RUNNING
        /// trials and re-enqueued them (PostgreSQL, several hosts).
        Gone => "GONE",
    }
}

spelled! {
    /// A worker process's state in `sweepd_workers.state`.
    WorkerState, "worker state" {
        /// Spawned, not `ready` yet.
        Starting => "STARTING",
        Ready => "READY",
        Exited => "EXITED",
    }
}

spelled! {
    /// A request the CLI queues for the running daemon (`sweepd_commands.command`).
    DaemonCommand, "command" {
        /// `sweepd resume`: lift every quarantine.
        Resume => "resume",
    }
}

/// Failed attempts of the same params by kind, carried from a failed trial to its retry copy
/// (`sweepd:attempts`).
pub type Attempts = BTreeMap<FailureKind, u32>;

/// A failed attempt: why, and whether to run the same params again.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: FailureKind,
    /// One line for a person; also Optuna's `fail_reason`.
    pub reason: String,
    pub stderr_tail: Option<String>,
    /// Enqueue a WAITING copy with the same params, as Optuna's RetryFailedTrialCallback does.
    pub retry: bool,
    /// The attempt counts against its kind's retry limit (`sweepd:attempts` on the copy). Not
    /// for an attempt that failed for something else's doing: an out-of-memory failure whose
    /// message shows that other processes held the card.
    pub counts: bool,
}

/// How a trial ended, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// One value per objective, in the order of the study's directions.
    Complete(Vec<f64>),
    Pruned,
    Fail(Failure),
}

impl Finish {
    pub fn state(&self) -> TrialState {
        match self {
            Finish::Complete(_) => TrialState::Complete,
            Finish::Pruned => TrialState::Pruned,
            Finish::Fail(_) => TrialState::Fail,
        }
    }

    /// Whether it spends the budget: every final outcome but a failure that is retried.
    pub fn spends(&self) -> bool {
        !matches!(self, Finish::Fail(f) if f.retry)
    }
}

/// A trial started for this daemon: RUNNING in the database, to be run by a worker.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub trial_id: i64,
    pub number: i64,
    pub params: Params,
    /// Earlier failed attempts of the same params, by kind (empty for a new trial).
    pub attempts: Attempts,
    /// The attempts this one replaces (`None`: a first attempt).
    pub retry_of: Option<RetryOf>,
}

/// The attempts a retry copy replaces, as Optuna's `RetryFailedTrialCallback` records them on
/// it: `failed_trial` (the first attempt's number) and `retry_history` (every earlier attempt's
/// number, oldest first).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RetryOf {
    pub failed_trial: i64,
    pub retry_history: Vec<i64>,
}

impl RetryOf {
    /// From the two system attributes' JSON values; `None` unless `failed_trial` is a number.
    pub fn from_attrs(failed_trial: Option<&Value>, retry_history: Option<&Value>) -> Option<Self> {
        let failed_trial = failed_trial?.as_i64()?;
        let retry_history = retry_history
            .and_then(Value::as_array)
            .map(|h| h.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        Some(RetryOf {
            failed_trial,
            retry_history,
        })
    }
}

/// The number a trial's checkpoint directory is keyed by: the first attempt's, so that every
/// retry of it finds what the earlier attempts saved.
pub fn checkpoint_key(number: i64, retry_of: Option<&RetryOf>) -> i64 {
    retry_of.map_or(number, |r| r.failed_trial)
}

/// A trial as samplers learn from it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    pub number: i64,
    pub params: Params,
    pub state: TrialState,
    /// One value per objective for a COMPLETE trial; for a PRUNED one (single objective only)
    /// its last intermediate value, if it has one; empty otherwise.
    pub values: Vec<f64>,
    /// Optuna's constraints (`trial.constraints`), as [`constraint_values`] orders them: a
    /// value > 0 means infeasible (e.g. the trial ran out of GPU memory even alone on the
    /// device). Empty when not set.
    pub constraints: Vec<f64>,
    /// The distribution of each of its params, as recorded with the trial: in a define-by-run
    /// study they differ from trial to trial (Optuna's `trial.distributions`).
    pub distributions: Dists,
}

impl TrialRecord {
    /// The first objective's value (a single-objective study's only one).
    pub fn value(&self) -> Option<f64> {
        self.values.first().copied()
    }
}

/// A trial's constraint values from its two forms in Optuna 5: the `constraints:<key>`
/// attributes of `trial.set_constraint` (`keyed`, by key) and the older `constraints` list
/// (`listed`: `constraints_func`'s, and sweepd's own mark on an out-of-memory trial). Optuna's
/// `trial.constraints` is the union, a dict; its samplers read only the values. Here the keyed
/// values come first, by key, then the listed ones: every trial of a study that sets the same
/// keys has them at the same places (the GP fits one model per place), whether or not sweepd
/// marked it out of memory. A keyed value replaces nothing: Optuna names a listed value by its
/// index ("0", "1", ...), and a user key of that name stays beside it.
pub fn constraint_values(keyed: &BTreeMap<String, f64>, listed: &[f64]) -> Vec<f64> {
    keyed.values().chain(listed).copied().collect()
}

/// A trial's constraint attributes as the store reads them, row by row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConstraintAttrs {
    pub keyed: BTreeMap<String, f64>,
    pub listed: Vec<f64>,
}

impl ConstraintAttrs {
    /// Takes one system attribute (`key`, its `value_json`) if it is a constraint's, and says
    /// whether it was. A value that is not a number (or a list of them) is left out, as the
    /// samplers cannot use it.
    pub fn take(&mut self, key: &str, json: &str) -> bool {
        use super::attrs::{CONSTRAINTS_ATTR, CONSTRAINT_KEY_PREFIX};
        let value = serde_json::from_str::<serde_json::Value>(json).ok();
        if key == CONSTRAINTS_ATTR {
            if let Some(serde_json::Value::Array(cs)) = value {
                self.listed = cs.iter().filter_map(serde_json::Value::as_f64).collect();
            }
            return true;
        }
        let Some(name) = key.strip_prefix(CONSTRAINT_KEY_PREFIX) else {
            return false;
        };
        // Python's json writes infinities so (Optuna keeps them); JSON has none.
        let v = match json.trim() {
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => value.as_ref().and_then(serde_json::Value::as_f64),
        };
        if let Some(v) = v {
            self.keyed.insert(name.to_owned(), v);
        }
        true
    }

    /// The values, ordered by [`constraint_values`].
    pub fn values(&self) -> Vec<f64> {
        constraint_values(&self.keyed, &self.listed)
    }
}

/// Trial counts of a study, by state.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Counts {
    pub running: u64,
    pub waiting: u64,
    pub complete: u64,
    pub pruned: u64,
    /// All FAIL trials, retried or not.
    pub fail: u64,
    /// FAIL trials that have a WAITING (or later) copy: they do not spend the budget.
    pub fail_retried: u64,
}

impl Counts {
    /// Trials that reached a final outcome: what the `n_trials` budget counts.
    pub fn finished(&self) -> u64 {
        self.complete + self.pruned + self.fail - self.fail_retried
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::none(&[], &[], &[])]
    #[case::listed_only(&[], &[("constraints", "[1.0]")], &[1.0])]
    #[case::keyed_by_key_whatever_the_row_order(
        &[], &[("constraints:mem", "2.5"), ("constraints:lat", "-1.0")], &[-1.0, 2.5])]
    #[case::keyed_before_listed(
        &[], &[("constraints", "[1.0]"), ("constraints:mem", "-3")], &[-3.0, 1.0])]
    #[case::a_key_named_like_an_index_stays_beside_the_list(
        &[], &[("constraints", "[0.5]"), ("constraints:0", "-2.0")], &[-2.0, 0.5])]
    #[case::infinities_as_python_writes_them(
        &[], &[("constraints:a", "Infinity"), ("constraints:b", "-Infinity")],
        &[f64::INFINITY, f64::NEG_INFINITY])]
    #[case::not_a_number_is_left_out(&[], &[("constraints:x", "\"high\"")], &[])]
    #[case::other_attributes_are_not_taken(&["fail_reason", "constraintsx"], &[], &[])]
    fn constraint_attributes_read_as_optuna_5_writes_them(
        #[case] ignored: &[&str],
        #[case] rows: &[(&str, &str)],
        #[case] want: &[f64],
    ) {
        let mut c = ConstraintAttrs::default();
        for key in ignored {
            assert!(!c.take(key, "1.0"), "{key}");
        }
        for (key, json) in rows {
            assert!(c.take(key, json), "{key}");
        }
        assert_eq!(c.values(), want);
    }

    #[test]
    fn every_spelling_reads_back_and_nothing_else_does() {
        for s in TrialState::ALL {
            assert_eq!(s.to_string().parse::<TrialState>(), Ok(*s));
            assert_eq!(s.as_str().to_lowercase().parse::<TrialState>(), Ok(*s));
        }
        for k in FailureKind::ALL {
            assert_eq!(k.as_str().parse::<FailureKind>(), Ok(*k));
        }
        for d in DaemonState::ALL {
            assert_eq!(d.as_str().parse::<DaemonState>(), Ok(*d));
        }
        for w in WorkerState::ALL {
            assert_eq!(w.as_str().parse::<WorkerState>(), Ok(*w));
        }
        assert_eq!("resume".parse::<DaemonCommand>(), Ok(DaemonCommand::Resume));
        let e = "pause".parse::<DaemonCommand>().unwrap_err();
        assert_eq!(e.to_string(), "unknown command `pause`");
        assert_eq!("maximize".parse::<Direction>(), Ok(Direction::Maximize));
        let e = "DONE".parse::<TrialState>().unwrap_err();
        assert_eq!(e.to_string(), "unknown trial state `DONE`");
    }

    #[test]
    fn direction_helpers() {
        assert_eq!(Direction::Minimize.as_optuna(), "MINIMIZE");
        assert!(Direction::Minimize.better(1.0, 2.0));
        assert!(Direction::Maximize.better(2.0, 1.0));
        assert!(!Direction::Maximize.better(f64::NAN, 1.0));
    }

    #[test]
    fn a_retried_failure_spends_nothing() {
        let fail = |retry| {
            Finish::Fail(Failure {
                kind: FailureKind::Oom,
                reason: String::new(),
                stderr_tail: None,
                retry,
                counts: true,
            })
        };
        assert!(fail(false).spends());
        assert!(!fail(true).spends());
        assert!(Finish::Pruned.spends());
        assert_eq!(Finish::Complete(vec![1.0]).state(), TrialState::Complete);
    }

    #[test]
    fn poisons_context_for_fatal_and_gone_processes_only() {
        let poisoned: Vec<FailureKind> = FailureKind::ALL
            .iter()
            .copied()
            .filter(FailureKind::poisons_context)
            .collect();
        assert_eq!(
            poisoned,
            [
                FailureKind::CudaFatal,
                FailureKind::Killed,
                FailureKind::Timeout,
                FailureKind::Hang,
                FailureKind::Protocol,
                FailureKind::WorkerDied
            ]
        );
    }

    #[rstest::rstest]
    #[case::a_first_attempt_keys_by_its_own_number(7, None, None, 7)]
    #[case::a_retry_keys_by_the_first_failed_attempt(9, Some(serde_json::json!(3)), Some(serde_json::json!([3, 5])), 3)]
    #[case::a_retry_without_history_still_keys_by_failed_trial(9, Some(serde_json::json!(3)), None, 3)]
    #[case::a_failed_trial_that_is_not_a_number_is_no_retry(9, Some(serde_json::json!("3")), None, 9)]
    fn the_checkpoint_directory_is_keyed_by_the_first_attempt(
        #[case] number: i64,
        #[case] failed: Option<Value>,
        #[case] history: Option<Value>,
        #[case] key: i64,
    ) {
        let r = RetryOf::from_attrs(failed.as_ref(), history.as_ref());
        assert_eq!(checkpoint_key(number, r.as_ref()), key);
    }

    #[test]
    fn retry_history_is_read_oldest_first_and_skips_what_is_not_a_number() {
        let r = RetryOf::from_attrs(
            Some(&serde_json::json!(2)),
            Some(&serde_json::json!([2, "x", 4])),
        );
        assert_eq!(r.unwrap().retry_history, vec![2, 4]);
    }
}
