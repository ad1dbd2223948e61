//! Resume, not restart (issue 42): a trial whose worker is killed -9 mid-run is retried, and
//! its retry finds what the killed attempt saved in the trial's checkpoint directory, knows the
//! attempt it replaces (Optuna's `retry_history`, read through the helper), and the directory
//! goes once the trial is final.

mod common;

use common::*;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getpgid, Pid};
use rstest::rstest;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn starts(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "start")
        .cloned()
        .collect()
}

/// A study of `n_trials` run one at a time by `tests/workers/checkpoint_worker.py` in `mode`.
fn checkpoint_study(n_trials: u64, mode: &'static str) -> Cfg {
    Cfg {
        n_trials: Some(n_trials),
        max_par: 1,
        mode,
        command: vec![
            python(),
            repo()
                .join("tests/workers/checkpoint_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        params: String::new(),
        ..Cfg::default()
    }
}

#[rstest]
#[case::persistent("persistent")]
#[case::oneshot("oneshot")]
fn a_trial_killed_mid_run_resumes_from_its_checkpoint_in_its_retry(#[case] mode: &'static str) {
    let sweep = Sweep::new(&checkpoint_study(1, mode));
    let log = sweep.path("resume.jsonl");
    let toml = std::fs::read_to_string(&sweep.config).unwrap().replace(
        "[worker.env]\n",
        &format!(
            "[worker.env]\nRESUME_LOG = {}\n",
            serde_json::to_string(&log.to_string_lossy()).unwrap()
        ),
    );
    std::fs::write(&sweep.config, toml).unwrap();
    let daemon = sweep.spawn_run();

    // The first attempt gets some steps in, then its worker's whole group is killed -9.
    wait_until(LIMIT, "the first attempt's fifth step", || {
        log_lines(&log)
            .iter()
            .any(|l| l["event"] == "step" && l["step"].as_i64() >= Some(5))
    });
    let first = starts(&log_lines(&log))[0].clone();
    let pid = Pid::from_raw(first["pid"].as_i64().unwrap() as i32);
    killpg(getpgid(Some(pid)).unwrap(), Signal::SIGKILL).unwrap();
    let saved = log_lines(&log)
        .iter()
        .filter(|l| l["event"] == "step" && l["number"] == first["number"])
        .filter_map(|l| l["step"].as_i64())
        .max()
        .unwrap();

    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let attempts = starts(&log_lines(&log));
    assert_eq!(
        attempts.len(),
        2,
        "{attempts:?}\n{}",
        std::fs::read_to_string(sweep.path("sweepd.stderr")).unwrap_or_default()
    );
    let (first, retry) = (&attempts[0], &attempts[1]);
    assert_eq!(first["start"], 0, "{first}");
    assert_eq!(first["retry_history"], serde_json::json!([]), "{first}");
    assert_eq!(first["failed_trial"], Value::Null, "{first}");
    assert_eq!(first["study"], "t", "{first}");
    // The retry starts where the killed attempt's last saved step left it (a step saved while
    // the kill landed may be one more), in the same directory, and names the attempt it replaces.
    let resumed = retry["start"].as_i64().unwrap();
    assert!(resumed >= saved && resumed > 0, "saved {saved}, {retry}");
    assert_eq!(retry["checkpoint_dir"], first["checkpoint_dir"], "{retry}");
    assert_eq!(retry["env"], first["checkpoint_dir"], "{retry}");
    assert_eq!(retry["failed_trial"], first["number"], "{retry}");
    assert_eq!(
        retry["retry_history"],
        serde_json::json!([first["number"]]),
        "{retry}"
    );

    let trials = sweep.trials();
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["FAIL", "COMPLETE"], "{trials:?}");
    // The trial is final: its checkpoint directory is gone.
    let dir = first["checkpoint_dir"].as_str().unwrap();
    assert!(
        Path::new(dir).starts_with(sweep.path("logs/checkpoints")),
        "{dir}"
    );
    assert!(!Path::new(dir).exists(), "{dir} is left behind");
}

/// Issue 42: a worker reads the study's best value so far as Optuna's `study.best_value`
/// (`trial.study.best_value`): none before a trial is complete, then the best of those that
/// are, in both worker modes.
#[rstest]
#[case::persistent("persistent")]
#[case::oneshot("oneshot")]
fn a_worker_reads_the_study_s_best_value_so_far(#[case] mode: &'static str) {
    let mut sweep = Sweep::new(&checkpoint_study(3, mode));
    let log = sweep.path("resume.jsonl");
    sweep
        .env
        .push(("RESUME_LOG".into(), log.to_string_lossy().into_owned()));
    sweep.env.push(("RESUME_STEPS".into(), "1".into()));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let values: Vec<f64> = sweep
        .trials()
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .collect();
    let bests: Vec<Value> = starts(&log_lines(&log))
        .iter()
        .map(|s| s["best"].clone())
        .collect();
    let want = [
        Value::Null,
        serde_json::json!(values[0]),
        serde_json::json!(values[0].min(values[1])),
    ];
    assert_eq!(bests, want, "values {values:?}");
}
