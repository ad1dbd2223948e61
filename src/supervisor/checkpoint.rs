//! Resume, not restart: what a trial's worker is told of the attempts it replaces and of the
//! study (the trial message's `system_attrs` and `study`), and the trial's checkpoint
//! directory, one per original trial under `[worker] checkpoint_dir`, shared by all its
//! retries and removed when the trial reaches a final state (unless `keep_checkpoints`).

use crate::config::Config;
use crate::process;
use crate::study::attrs::{FAILED_TRIAL_ATTR, RETRY_HISTORY_ATTR};
use crate::study::{checkpoint_key, Claimed, Finish};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use tracing::warn;

/// The trial's checkpoint directory: `checkpoint_dir/trial-<the first attempt's number>`.
pub(super) fn dir_of(cfg: &Config, c: &Claimed) -> PathBuf {
    cfg.worker.checkpoint_dir.join(format!(
        "trial-{}",
        checkpoint_key(c.number, c.retry_of.as_ref())
    ))
}

/// Creates the trial's checkpoint directory (an existing one, a retry's, is left as it is)
/// and returns it; `None`, with a warning, where it cannot be created: the trial runs anyway,
/// without one.
pub(super) fn prepare(cfg: &Config, c: &Claimed) -> Option<PathBuf> {
    let dir = dir_of(cfg, c);
    match process::create_private_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            warn!(
                trial = c.number,
                "could not create the checkpoint directory {}: {e}; the trial runs without one",
                dir.display()
            );
            None
        }
    }
}

/// Whether a trial's checkpoint directory goes once it ended `how`: when that is final (not a
/// failure that is retried), unless the config keeps checkpoints.
pub(super) fn removed_after(how: &Finish, keep: bool) -> bool {
    !keep && !matches!(how, Finish::Fail(f) if f.retry)
}

/// Removes the trial's checkpoint directory where [`removed_after`] says so; a failure is
/// logged, never fatal.
pub(super) fn release(cfg: &Config, c: &Claimed, how: &Finish) {
    if !removed_after(how, cfg.worker.keep_checkpoints) {
        return;
    }
    let dir = dir_of(cfg, c);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => warn!(
            trial = c.number,
            "could not remove the checkpoint directory {}: {e}",
            dir.display()
        ),
        _ => {}
    }
}

/// The trial message's additions: `system_attrs` (Optuna's `failed_trial` and
/// `retry_history` on a retry, as `RetryFailedTrialCallback` reads them; empty otherwise),
/// `study` (name, directions and, one objective, the `best` value of its COMPLETE trials so
/// far, `trial.study.best_value`) and `checkpoint_dir`.
pub(super) fn message_fields(
    cfg: &Config,
    c: &Claimed,
    dir: Option<&PathBuf>,
    best: Option<f64>,
) -> Map<String, Value> {
    let mut attrs = Map::new();
    if let Some(r) = &c.retry_of {
        attrs.insert(FAILED_TRIAL_ATTR.to_owned(), json!(r.failed_trial));
        attrs.insert(RETRY_HISTORY_ATTR.to_owned(), json!(r.retry_history));
    }
    let directions: Vec<&str> = cfg.study.directions.iter().map(|d| d.as_str()).collect();
    let mut fields = Map::new();
    fields.insert("system_attrs".to_owned(), Value::Object(attrs));
    fields.insert(
        "study".to_owned(),
        json!({"name": cfg.study.name, "directions": directions,
               "best_value": best.filter(|b| b.is_finite())}),
    );
    fields.insert(
        "checkpoint_dir".to_owned(),
        dir.map_or(Value::Null, |d| json!(d.to_string_lossy())),
    );
    fields
}

/// The study's directions as a worker's environment carries them (`SWEEPD_DIRECTIONS`):
/// `minimize` / `maximize`, comma-separated, in the order of the objectives.
pub(super) fn directions(cfg: &Config) -> String {
    let names: Vec<&str> = cfg.study.directions.iter().map(|d| d.as_str()).collect();
    names.join(",")
}

/// What a oneshot worker gets of [`message_fields`], as environment variables:
/// `SWEEPD_SYSTEM_ATTRS` (JSON), `SWEEPD_CHECKPOINT_DIR` and `SWEEPD_BEST_VALUE` (the study is
/// in `SWEEPD_STUDY` and `SWEEPD_DIRECTIONS`, which every worker gets).
pub(super) fn env(
    cfg: &Config,
    c: &Claimed,
    dir: Option<&PathBuf>,
    best: Option<f64>,
) -> Vec<(String, String)> {
    let fields = message_fields(cfg, c, dir, best);
    let mut env = vec![(
        "SWEEPD_SYSTEM_ATTRS".to_owned(),
        fields["system_attrs"].to_string(),
    )];
    if let Some(d) = dir {
        env.push((
            "SWEEPD_CHECKPOINT_DIR".to_owned(),
            d.to_string_lossy().into_owned(),
        ));
    }
    if let Some(b) = fields["study"]["best_value"].as_f64() {
        // Rust's shortest round-trip form: Python's float() reads the same value back.
        env.push(("SWEEPD_BEST_VALUE".to_owned(), format!("{b:?}")));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::{Failure, FailureKind};
    use rstest::rstest;

    fn fail(retry: bool) -> Finish {
        Finish::Fail(Failure {
            kind: FailureKind::WorkerDied,
            reason: "killed".to_owned(),
            stderr_tail: None,
            retry,
            counts: true,
        })
    }

    #[rstest]
    #[case::a_complete_trial_s_checkpoints_go(Finish::Complete(vec![1.0]), false, true)]
    #[case::a_pruned_trial_s_checkpoints_go(Finish::Pruned, false, true)]
    #[case::a_final_failure_s_checkpoints_go(fail(false), false, true)]
    #[case::a_retried_failure_keeps_them_for_its_retry(fail(true), false, false)]
    #[case::keep_checkpoints_keeps_a_complete_trial_s(Finish::Complete(vec![1.0]), true, false)]
    fn checkpoints_go_when_the_trial_is_final(
        #[case] how: Finish,
        #[case] keep: bool,
        #[case] removed: bool,
    ) {
        assert_eq!(removed_after(&how, keep), removed);
    }
}
