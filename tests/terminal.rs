//! What `sweepd run` shows: on a terminal, a live progress display above which the log lines
//! scroll; through a pipe (or to journald), the log lines alone, as plain text.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_terminal_shows_live_progress_not_only_log_lines() {
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.3");
    let sweep = Sweep::new(&cfg);
    let (status, screen) = sweep.run_on_terminal(&[], LIMIT);
    assert!(status.success(), "{screen}");
    let best: Value = serde_json::from_slice(
        &sweep
            .sweepd(&["best", "--json"])
            .output()
            .expect("sweepd best")
            .stdout,
    )
    .expect("best JSON");
    let value = best["value"].as_f64().expect("a best value");
    // The display's last state stays on the screen: the whole budget, the best trial, the
    // clock; and the log lines are still there above it.
    for shown in [
        "6/6 finished [".to_owned(),
        format!("best {value} (trial {})", best["number"]),
        "elapsed ".to_owned(),
        "ETA ".to_owned(),
        "running 0/2".to_owned(),
        "failures: none".to_owned(),
        "COMPLETE value=".to_owned(),
    ] {
        assert!(
            screen.contains(&shown),
            "no {shown:?} on the screen:\n{screen}"
        );
    }
}

#[test]
fn a_pipe_gets_plain_log_lines_with_params_and_no_gpu_none() {
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 2,
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // No display, no colours: nothing a log file or `grep` would choke on.
    assert!(!err.contains('\x1b'), "control sequences in a pipe:\n{err}");
    assert!(
        !err.contains("finished ["),
        "a progress display in a pipe:\n{err}"
    );
    // A CPU study has no GPU to name, and says nothing about one.
    assert!(!err.contains("=None"), "{err}");
    assert!(!err.contains("gpu="), "{err}");
    let trials = sweep.trials();
    let mut complete = 0;
    for line in err.lines() {
        // Log lines as before: timestamp, level, target, message; then sweepd's summary.
        let level = line.split_whitespace().nth(1).unwrap_or_default();
        assert!(
            line.starts_with("sweepd: ")
                || (line.starts_with("20") && ["INFO", "WARN", "ERROR"].contains(&level)),
            "not a log line: {line:?}"
        );
        if !line.contains(" COMPLETE value=") {
            continue;
        }
        complete += 1;
        let number: i64 = line
            .split(" trial=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no trial number: {line}"));
        let params: Value = line
            .split(" params=")
            .nth(1)
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_else(|| panic!("no params: {line}"));
        let trial = trials.iter().find(|t| t["number"] == number).unwrap();
        assert_eq!(params, trial["params"], "{line}");
    }
    assert_eq!(complete, 6, "{err}");
}

/// Two simulated GPUs (the fake libnvidia-ml), one float param.
fn gpu_sweep() -> Sweep {
    let cfg = Cfg {
        n_trials: Some(4),
        max_par: 2,
        command: gpu_sim_worker(),
        params: "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n".into(),
        ..Cfg::default()
    };
    let (sweep, _fake) = gpu_study(
        &cfg,
        &["24G Fake A10", "24G Fake A10"],
        "devices = \"all\"\nheadroom = \"1GiB\"\npoll_interval = \"100ms\"",
    );
    sweep
}

#[test]
fn a_gpu_study_shows_trials_per_gpu_and_logs_the_gpu_as_a_number() {
    let sweep = gpu_sweep();
    let (status, screen) = sweep.run_on_terminal(&[], LIMIT);
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("running 0/2 (gpu0 0, gpu1 0)"),
        "no trials per GPU on the screen:\n{screen}"
    );
    let sweep = gpu_sweep();
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("Some("), "{err}");
    let outcomes: Vec<&str> = err.lines().filter(|l| l.contains(" COMPLETE ")).collect();
    assert_eq!(outcomes.len(), 4, "{err}");
    for line in outcomes {
        assert!(
            line.contains(" gpu=0 params=") || line.contains(" gpu=1 params="),
            "{line}"
        );
    }
}
