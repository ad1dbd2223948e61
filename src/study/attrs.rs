//! The names of the attributes sweepd writes and reads on Optuna's tables, in one place.
//!
//! Optuna's tools (`optuna.load_study`, the dashboard) read these rows, and several of them
//! are Optuna's own (the retry callback's, `constraints`, `set_metric_names`): a name written
//! in two places that drifted apart would be a row nobody reads. Every module names them
//! through these constants; SQL that needs one as a literal (the PostgreSQL functions in
//! `migrations-postgres/functions/`) is checked against them by the store's tests.

/// What every name sweepd gives its own attributes starts with; param names may not (config).
pub const SWEEPD_PREFIX: &str = "sweepd:";

/// A study system attribute per host (`sweepd:waiting:HOST`): that host's daemon's line of
/// waiting candidates and why each waits (`study::reason::Line` as JSON), written when a phrase
/// changes, for `status` and `trials` to read.
pub const WAITING_LINE_PREFIX: &str = "sweepd:waiting:";

// sweepd's own trial system attributes.

/// The sweepd daemon that runs a trial (`DaemonId::json`), written when the trial starts:
/// RUNNING trials without it (or [`WORKER_ID_ATTR`], which older versions wrote alone) belong
/// to someone else (an Optuna script) and are never reconciled by sweepd.
pub const OWNER_ATTR: &str = "sweepd:daemon";
/// The worker process that runs a trial: its id in `sweepd_workers`, its pid.
pub const WORKER_ID_ATTR: &str = "sweepd:worker_id";
pub const WORKER_PID_ATTR: &str = "sweepd:worker_pid";
/// The GPU a trial runs on.
pub const GPU_ATTR: &str = "sweepd:gpu";
/// A failed trial's `FailureKind`, and the tail of its worker's stderr.
pub const FAIL_KIND_ATTR: &str = "sweepd:fail_kind";
pub const STDERR_TAIL_ATTR: &str = "sweepd:stderr_tail";
/// The number of the WAITING copy a failed trial was retried as (such a FAIL spends no budget).
pub const RETRIED_AS_ATTR: &str = "sweepd:retried_as";
/// Earlier failed attempts of a trial's params, by failure kind.
pub const ATTEMPTS_ATTR: &str = "sweepd:attempts";
/// A finished trial's measured GPU memory peak, in MiB.
pub const PEAK_MEMORY_ATTR: &str = "sweepd:peak_memory_mib";
/// The memory cap a GPU trial ran under, in MiB: what its framework's allocator was allowed to
/// hold (the bytes it was admitted with, less its worker's context), `docs/gpu-memory-model.md`.
pub const MEMORY_CAP_ATTR: &str = "sweepd:memory_cap_mib";
/// Which of a trial's stored zeros are -0.0 (SQLite's REAL columns lose the sign).
pub const NEGATIVE_ZERO_ATTR: &str = "sweepd:negative_zero";

/// A trial a person ended by hand (`sweepd kill`): who, when, as which state. Such a FAIL is
/// final: never retried, never re-enqueued (the same-error stop's re-enqueue leaves it too).
pub const KILLED_BY_HAND_ATTR: &str = "sweepd:killed_by_hand";

/// The trial *user* attribute that carries a failed trial's reason where optuna-dashboard
/// shows it (it shows user attributes, not the [`FAIL_REASON_ATTR`] system attribute).
pub const FAIL_REASON_USER_ATTR: &str = "sweepd:fail_reason";

// Optuna's own attributes, written as Optuna writes them.

/// A failed trial's reason (trial system attribute, Optuna's `Study.tell`).
pub const FAIL_REASON_ATTR: &str = "fail_reason";
/// The first attempt's number, and every failed attempt's number, on a retry copy (Optuna's
/// `RetryFailedTrialCallback`).
pub const FAILED_TRIAL_ATTR: &str = "failed_trial";
pub const RETRY_HISTORY_ATTR: &str = "retry_history";
/// The params `study.enqueue_trial` fixed, in external form.
pub const FIXED_PARAMS_ATTR: &str = "fixed_params";
/// A trial's constraint values (Optuna's `constraints_func`; feasible when all are <= 0), a
/// list: the form Optuna 5 still reads, and the one sweepd writes for an out-of-memory trial.
pub const CONSTRAINTS_ATTR: &str = "constraints";
/// What Optuna 5's `trial.set_constraint(key, value)` writes a constraint's name after: one
/// attribute per constraint, `constraints:<key>`, its value a float.
pub const CONSTRAINT_KEY_PREFIX: &str = "constraints:";
/// The study system attribute `study.set_metric_names` writes.
pub const METRIC_NAMES_ATTR: &str = "study:metric_names";

/// Every trial system attribute sweepd names, its own and Optuna's.
pub const TRIAL_SYSTEM_ATTRS: &[&str] = &[
    OWNER_ATTR,
    WORKER_ID_ATTR,
    WORKER_PID_ATTR,
    GPU_ATTR,
    FAIL_KIND_ATTR,
    STDERR_TAIL_ATTR,
    RETRIED_AS_ATTR,
    ATTEMPTS_ATTR,
    PEAK_MEMORY_ATTR,
    MEMORY_CAP_ATTR,
    NEGATIVE_ZERO_ATTR,
    KILLED_BY_HAND_ATTR,
    FAIL_REASON_ATTR,
    FAILED_TRIAL_ATTR,
    RETRY_HISTORY_ATTR,
    FIXED_PARAMS_ATTR,
    CONSTRAINTS_ATTR,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweepds_names_carry_its_prefix_and_optunas_do_not() {
        let optunas = [
            FAIL_REASON_ATTR,
            FAILED_TRIAL_ATTR,
            RETRY_HISTORY_ATTR,
            FIXED_PARAMS_ATTR,
            CONSTRAINTS_ATTR,
            METRIC_NAMES_ATTR,
        ];
        for name in TRIAL_SYSTEM_ATTRS
            .iter()
            .chain([&FAIL_REASON_USER_ATTR, &METRIC_NAMES_ATTR])
        {
            let sweepds = !optunas.contains(name);
            assert_eq!(name.starts_with(SWEEPD_PREFIX), sweepds, "{name}");
        }
        let mut all = TRIAL_SYSTEM_ATTRS.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), TRIAL_SYSTEM_ATTRS.len(), "each name once");
    }
}
