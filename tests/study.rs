//! End-to-end: the real daemon, real Python worker processes, a real SQLite file.

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn parse_time(s: &str) -> f64 {
    let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").expect("datetime");
    t.and_utc().timestamp_micros() as f64 / 1e6
}

/// The largest number of trials whose [start, complete] intervals overlap.
fn max_overlap(trials: &[Value]) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for t in trials {
        if let (Some(s), Some(e)) = (
            t["datetime_start"].as_str(),
            t["datetime_complete"].as_str(),
        ) {
            edges.push((parse_time(s), 1));
            edges.push((parse_time(e), -1));
        }
    }
    edges.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (mut cur, mut best) = (0i32, 0i32);
    for (_, d) in edges {
        cur += d;
        best = best.max(cur);
    }
    best as usize
}

fn assert_numbers_dense(trials: &[Value]) {
    let numbers: Vec<i64> = trials
        .iter()
        .map(|t| t["number"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = (0..trials.len() as i64).collect();
    assert_eq!(numbers, expected, "trial numbers are 0..n-1");
}

#[test]
fn persistent_study_runs_to_budget_with_max_par_workers() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(12),
        max_par: 3,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.3")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 12);
    assert!(
        trials.iter().all(|t| t["state"] == "COMPLETE"),
        "{trials:?}"
    );
    assert_numbers_dense(&trials);
    assert_eq!(max_overlap(&trials), 3, "three trials ran at once");
    // Persistent: three processes served all twelve trials.
    let pids: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    // Every param lies in its domain, and the value is what the worker computed from it.
    for t in &trials {
        let p = &t["params"];
        let x = p["x"].as_f64().unwrap();
        let lr = p["lr"].as_f64().unwrap();
        let n = p["n"].as_i64().unwrap();
        let opt = p["opt"].as_str().unwrap();
        assert!((-2.0..=2.0).contains(&x));
        assert!((1e-5..=1e-1).contains(&lr));
        assert!(n % 2 == 0 && (0..=10).contains(&n));
        assert!(["adam", "sgd", "rmsprop"].contains(&opt));
        let expected = x * x + lr * lr + (n * n) as f64 + opt.len() as f64;
        assert!((t["value"].as_f64().unwrap() - expected).abs() < 1e-9);
    }
    // No worker outlives the run.
    for (pid, _) in recorded(record.path()) {
        assert!(!alive(pid), "worker {pid} still alive after the run");
    }
}

#[test]
fn par_override_runs_one_trial_at_a_time() {
    let cfg = Cfg {
        n_trials: Some(5),
        max_par: 4,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.15");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&["--par", "1"], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 5);
    assert_eq!(max_overlap(&trials), 1);
}

#[test]
fn oneshot_study_runs_one_process_per_trial() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 2,
        mode: "oneshot",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 6);
    assert!(
        trials.iter().all(|t| t["state"] == "COMPLETE"),
        "{trials:?}"
    );
    let pids: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    assert_eq!(pids.len(), 6, "one process per trial");
}

#[test]
fn oneshot_plain_script_joins_with_the_result_file() {
    // examples/oneshot_train.py uses no helper: argv params in, SWEEPD_RESULT_FILE out.
    let cfg = Cfg {
        n_trials: Some(4),
        mode: "oneshot",
        command: vec![
            python(),
            repo()
                .join("examples/oneshot_train.py")
                .to_string_lossy()
                .into_owned(),
        ],
        params: EXAMPLE_PARAMS.into(),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 4);
    assert!(
        trials
            .iter()
            .all(|t| t["state"] == "COMPLETE" && t["value"].is_f64()),
        "{trials:?}"
    );
}

const EXAMPLE_PARAMS: &str = r#"
[params.x]
type = "float"
low = -5.0
high = 5.0
[params.y]
type = "int"
low = -4
high = 8
step = 2
[params.optimizer]
type = "categorical"
choices = ["adam", "sgd", "rmsprop"]
[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true
"#;

#[test]
fn bundled_example_config_is_valid_and_runs() {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
        .args(["check", "-c"])
        .arg(repo().join("supervisor.toml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The same study, run in a temp dir so the repo stays clean.
    let text = std::fs::read_to_string(repo().join("supervisor.toml"))
        .unwrap()
        .replace(
            "\"examples/quadratic_worker.py\"",
            &format!("{:?}", repo().join("examples/quadratic_worker.py")),
        )
        .replace("n_trials = 60", "n_trials = 8");
    let sweep = Sweep::with_toml(&text);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 8);
    let status = sweep.sweepd(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("8/8 finished"), "{text}");
    assert!(text.contains("best"), "{text}");
}

#[test]
fn worker_printing_freely_to_stdout_and_stderr_does_not_disturb_the_protocol() {
    let cfg = Cfg {
        n_trials: Some(4),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_CHATTY", "1");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert!(
        trials.iter().all(|t| t["state"] == "COMPLETE"),
        "{trials:?}"
    );
    // The fake result lines the worker printed were not taken as results.
    assert!(trials.iter().all(|t| t["value"].as_f64().unwrap() > -1.0));
    // The output went to the per-worker logs, with trial boundaries marked.
    let logs: String = std::fs::read_dir(sweep.path("logs"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    assert!(logs.contains("trial 0 stdout line 1999"));
    assert!(logs.contains("=== sweepd: trial 0 (trial_id"));
}

#[test]
fn worker_exiting_mid_trial_fails_that_trial_and_is_replaced() {
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_EXIT_ON", "2");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let failed = &trials[2];
    assert_eq!(failed["state"], "FAIL");
    assert_eq!(failed["fail_kind"], "worker_died");
    assert!(
        failed["fail_reason"]
            .as_str()
            .unwrap()
            .contains("exit code 3"),
        "{failed}"
    );
    // [retry] crash = 1 by default: the same params ran again, as the next trial, and completed.
    assert_eq!(trials[3]["params"], failed["params"]);
    assert_eq!(trials[3]["state"], "COMPLETE");
    assert_eq!(
        sweep.count("COMPLETE"),
        6,
        "the budget counts final outcomes only"
    );
    assert_eq!(trials.len(), 7);
    // The replacement worker is a new process.
    let workers = sweep.sql("SELECT COUNT(DISTINCT pid) FROM sweepd_workers");
    assert_eq!(workers, vec!["2"]);
}

#[test]
fn garbage_on_the_protocol_channel_fails_the_trial_not_the_daemon() {
    let cfg = Cfg {
        n_trials: Some(5),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_GARBAGE_ON", "1");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials[1]["state"], "FAIL");
    assert_eq!(trials[1]["fail_kind"], "protocol");
    assert!(trials[1]["fail_reason"]
        .as_str()
        .unwrap()
        .contains("this is not json"));
    assert_eq!(sweep.count("COMPLETE"), 4);
}

#[test]
fn trial_timeout_kills_the_whole_process_group() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(3),
        max_par: 1,
        worker_extra: "trial_timeout = \"2s\"\n".into(),
        study_extra: String::new(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_HANG_ON", "1")
    .env("SWEEPD_TEST_FORK", "1")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::with_toml(&format!("{}\n[retry]\ncrash = 0\n", cfg.to_toml()));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials[1]["state"], "FAIL");
    assert_eq!(trials[1]["fail_kind"], "timeout");
    assert!(trials[1]["fail_reason"]
        .as_str()
        .unwrap()
        .contains("trial_timeout"));
    assert_eq!(sweep.count("COMPLETE"), 2, "crash = 0: no retry");
    // Every worker and every child it forked (which ignore SIGTERM) is gone.
    let pids: Vec<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    assert!(!pids.is_empty());
    for pgid in pids {
        let members = sweepd::process::group_members(pgid);
        assert!(members.is_empty(), "group {pgid} still has {members:?}");
    }
}

#[test]
fn user_exception_and_nan_fail_without_retry_and_the_worker_goes_on() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(5),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RAISE_ON", "1")
    .env("SWEEPD_TEST_NAN_ON", "3")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 5);
    assert_eq!(trials[1]["fail_kind"], "user_error");
    assert!(trials[1]["fail_reason"]
        .as_str()
        .unwrap()
        .contains("ValueError: rejected param"));
    assert_eq!(trials[3]["fail_kind"], "bad_value");
    let tail = sweep.sql(
        "SELECT value_json FROM trial_system_attributes a JOIN trials t USING (trial_id) \
         WHERE t.number = 1 AND a.key = 'sweepd:stderr_tail'",
    );
    assert!(tail[0].contains("Traceback"), "{tail:?}");
    let pids: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    assert_eq!(pids.len(), 1, "one persistent worker served all trials");
}

#[test]
fn grid_sampler_runs_every_point_once_then_stops() {
    let cfg = Cfg {
        n_trials: None,
        sampler: "grid",
        max_par: 2,
        params: r#"
[params.a]
type = "int"
low = 0
high = 4
step = 2
[params.b]
type = "categorical"
choices = ["u", "v"]
"#
        .into(),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let points: HashSet<String> = trials.iter().map(|t| t["params"].to_string()).collect();
    assert_eq!(trials.len(), 6);
    assert_eq!(points.len(), 6, "every grid point exactly once");
}

#[test]
fn invalid_config_writes_nothing_and_names_the_key() {
    let cfg = Cfg::default();
    let bad = cfg.to_toml().replace("low = -2.0", "low = 3.0");
    let sweep = Sweep::with_toml(&bad);
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("params.x.low"), "{err}");
    assert!(err.contains("supervisor.toml:"), "{err}");
    assert!(!sweep.db.exists(), "no database for an invalid config");
    assert!(!sweep.path("logs").exists());
}

#[test]
fn check_prints_the_resolved_study() {
    let sweep = Sweep::new(&Cfg::default());
    let out = sweep.sweepd(&["check", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["study"]["direction"], "MINIMIZE");
    assert_eq!(v["worker"]["max_par"], 2);
    assert_eq!(v["params"].as_array().unwrap().len(), 4);
    assert!(v["storage"]["path"].as_str().unwrap().ends_with("study.db"));
}

#[test]
fn status_reads_a_running_study_and_csv_lists_trials() {
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "1.0");
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "a trial running", || {
        sweep.db.exists()
            && sweep.sql("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'") != vec!["0"]
    });
    let out = sweep.sweepd(&["status", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let running = v["running"].as_array().unwrap();
    assert!(!running.is_empty());
    assert!(running[0]["worker_pid"].as_i64().unwrap() > 0);
    assert_eq!(v["n_trials"], 6);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    let csv = sweep.sweepd(&["trials", "--csv"]).output().unwrap();
    let text = String::from_utf8_lossy(&csv.stdout);
    assert!(text.starts_with("number,state,value,"), "{text}");
    assert_eq!(text.lines().count(), 7);
    let best = sweep.sweepd(&["best", "--json"]).output().unwrap();
    let b: Value = serde_json::from_slice(&best.stdout).unwrap();
    let min = sweep
        .trials()
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(b["value"].as_f64().unwrap(), min);
}

#[test]
fn under_journald_each_log_line_carries_its_syslog_priority() {
    let cfg = Cfg {
        n_trials: Some(2),
        max_par: 1,
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep
        .sweepd(&["run"])
        .env("JOURNAL_STREAM", "8:12345")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.starts_with("<6>") && l.contains("study started")),
        "{err}"
    );
    assert!(!err.contains('\x1b'), "no terminal colours in the journal");
    // Outside systemd: no priority prefix.
    let out = sweep.run(&[], LIMIT);
    assert!(!stderr(&out).lines().any(|l| l.starts_with("<6>")));
}

/// A study whose trial N returns `values[N]` (the exact worker), one at a time, so that trials
/// finish in the order of their numbers; `study_extra`: more `[study]` lines.
fn valued_study(
    values: &[f64],
    n_trials: u64,
    study_extra: &str,
) -> (Sweep, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    // The worker reads 21 numbers per trial (20 reports, then the value), as IEEE bits.
    let text: String = values
        .iter()
        .flat_map(|v| std::iter::repeat_n(format!("{:016x}\n", v.to_bits()), 21))
        .collect();
    std::fs::write(file.path(), text).unwrap();
    let cfg = Cfg {
        n_trials: Some(n_trials),
        max_par: 1,
        command: vec![
            python(),
            repo()
                .join("tests/workers/exact_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        study_extra: study_extra.into(),
        params: "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n".into(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_VALUES", file.path().to_str().unwrap());
    (Sweep::new(&cfg), file)
}

#[test]
fn a_study_whose_best_value_stalls_for_patience_trials_stops_and_says_why() {
    // Trial 0 sets the best (5); none after it beats it.
    let values: Vec<f64> = (0..20).map(|i| 5.0 + i as f64).collect();
    let (sweep, _values) = valued_study(&values, 20, "patience = 3\nmin_delta = 0.01\n");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sweep.count("COMPLETE"),
        4,
        "the best, then three trials without an improvement"
    );
    let err = stderr(&out);
    assert!(
        err.contains(
            "study ended: the best value (5) has not improved by more than 1% in the last 3 \
             finished trials ([study] patience, min_delta); no new trial starts"
        ),
        "{err}"
    );
    // `status` shows the stall it stopped on.
    let out = sweep.sweepd(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("budgets   patience 3 of 3 finished trials without beating 5 (stalled)\n"),
        "{text}"
    );
    let out = sweep.sweepd(&["status", "--json"]).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["budgets"]["stall"]["stalled"], true, "{json}");
    assert_eq!(json["budgets"]["patience"], 3);
}

/// The stall rule once counted a COMPLETE trial that broke its constraints as an improvement:
/// that value, which `best` and Optuna's `best_trial` never report, restarted the count. Trial
/// `infeasible` is the lowest value but breaks its constraint; none of the others beats trial
/// 0, so the study stalls after 4 trials whichever it is. As the last before the stall (3),
/// its finish reaches the rule through the daemon's own account, before the database is read.
#[rstest::rstest]
#[case::read_from_the_database(1)]
#[case::the_daemons_own_finish(3)]
fn the_stall_rule_does_not_take_an_infeasible_trial_s_value_for_the_best(#[case] infeasible: u64) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("infeasible_best.py");
    std::fs::write(
        &script,
        format!(
            "import sweepd_worker\n\
             def objective(trial):\n\
             \x20   trial.suggest_float('x', 0.0, 1.0)\n\
             \x20   bad = trial.number == {infeasible}\n\
             \x20   trial.set_constraint('c', 1.0 if bad else -1.0)\n\
             \x20   return 1.0 if bad else 5.0 + trial.number\n\
             sweepd_worker.serve(objective)\n"
        ),
    )
    .unwrap();
    let cfg = Cfg {
        n_trials: Some(20),
        max_par: 1,
        command: vec![python(), script.to_string_lossy().into_owned()],
        study_extra: "patience = 3\nmin_delta = 0.01\n".into(),
        params: "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n".into(),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("study ended: the best value (5) has not improved"),
        "{err}"
    );
    assert_eq!(
        sweep.count("COMPLETE"),
        4,
        "trial 0 sets the best; the three after it (one infeasible) do not beat it"
    );
}

#[test]
fn a_study_that_keeps_improving_runs_to_its_n_trials_despite_patience() {
    // Each trial beats the one before by 5%, more than min_delta's 1%.
    let values: Vec<f64> = (0..8).map(|i| 100.0 * 0.95f64.powi(i)).collect();
    let (sweep, _values) = valued_study(&values, 8, "patience = 2\nmin_delta = 0.01\n");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 8);
    let err = stderr(&out);
    assert!(
        err.contains("study done: 8/8 trials finished ([study] n_trials)"),
        "{err}"
    );
}

#[test]
fn a_study_that_reaches_its_timeout_says_so_not_just_study_done() {
    let (sweep, _values) = valued_study(&[1.0], 1000, "timeout = \"2s\"\n");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("study ended: its time limit is reached ([study] timeout = \"2s\""),
        "{err}"
    );
}
