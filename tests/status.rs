//! `status` that tells the truth (issue 42): a daemon killed -9 on this host is shown gone at
//! once (its pid and start time, not its heartbeat's timeout), its trial's elapsed time stops
//! growing, and its workers are not shown READY; `gpus` says when its daemon does not run and
//! fits 100 columns; `trials` has durations, pruned steps, user attributes and every param. Real daemon, real Python workers, the real
//! SQLite file; the workers wait at a gate file (`SWEEPD_TEST_GATE`) so that a trial is RUNNING
//! for as long as the test needs.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Output, Stdio};
use std::time::Duration;

/// A hang guard, never a speed assertion.
const LIMIT: Duration = Duration::from_secs(120);

fn sweepd(sweep: &Sweep, args: &[&str]) -> Output {
    let child = sweep
        .sweepd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sweepd");
    wait_output(child, LIMIT)
}

fn ok(sweep: &Sweep, args: &[&str]) -> String {
    let out = sweepd(sweep, args);
    assert!(out.status.success(), "sweepd {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A study of one slot whose trial waits at a gate that never opens (its dir outlives the test).
fn gated() -> (Sweep, tempfile::TempDir, std::process::Child) {
    let gates = tempfile::tempdir().unwrap();
    let gate = gates.path().join("gate");
    let cfg = Cfg {
        n_trials: Some(2),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_GATE", gate.to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let daemon = sweep.spawn_run();
    wait_until(LIMIT, "a trial RUNNING", || running(&sweep) == 1);
    (sweep, gates, daemon)
}

#[test]
fn a_worker_running_a_trial_was_shown_ready() {
    let (sweep, _gates, mut daemon) = gated();
    let live: Value = serde_json::from_str(&ok(&sweep, &["status", "--json"])).unwrap();
    assert_eq!(live["daemon_alive"], true, "{live}");
    assert_eq!(live["workers"][0]["shown"], "BUSY", "{live}");
    let text = ok(&sweep, &["status"]);
    assert!(text.contains(" BUSY (trial 0)"), "{text}");
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}

#[test]
fn status_right_after_a_kill_9_of_the_daemon_said_it_was_running() {
    let (sweep, _gates, mut daemon) = gated();
    daemon.kill().unwrap(); // SIGKILL: its heartbeat is still fresh
    daemon.wait().unwrap();
    let text = ok(&sweep, &["status"]);
    assert!(
        text.lines().nth(1).is_some_and(
            |l| l.starts_with("daemon    GONE: pid ") && l.contains("its process is gone")
        ),
        "{text}"
    );
    assert!(
        !text.contains(" READY "),
        "a dead daemon's worker shown READY:\n{text}"
    );
    let first: Value = serde_json::from_str(&ok(&sweep, &["status", "--json"])).unwrap();
    assert_eq!(first["daemon_alive"], false, "{first}");
    std::thread::sleep(Duration::from_millis(1500));
    let later: Value = serde_json::from_str(&ok(&sweep, &["status", "--json"])).unwrap();
    assert_eq!(
        first["running"][0]["elapsed_s"], later["running"][0]["elapsed_s"],
        "a dead daemon's trial's elapsed time kept growing"
    );
    assert!(later["running"][0]["elapsed_s"].is_number(), "{later}");
}

/// The card's name is longer than `gpus`'s name column was (22 characters).
const LONG_CARD: &str = "NVIDIA GeForce RTX 3060 Laptop GPU";

#[test]
fn gpus_after_the_study_stopped_said_running_1_par_1_and_cut_the_card_s_name() {
    let env = [("SIM_MEM", "1G"), ("SIM_HOLD_S", "60")];
    let card = format!("12G {LONG_CARD}");
    let (sweep, _g) = gpu_sweep(&[&card], 1, 1, "trial_memory = \"1GiB\"", &env);
    let mut daemon = sweep.spawn_run();
    wait_until(GPU_LIMIT, "the GPU row to show the running trial", || {
        sweep.db.exists()
            && sweep.sql("SELECT COUNT(*) FROM sweepd_gpus WHERE running = 1") == vec!["1"]
    });
    let live = ok(&sweep, &["gpus"]);
    assert!(!live.contains("does not run"), "{live}");
    daemon.kill().unwrap(); // the row keeps its last reading: running 1
    daemon.wait().unwrap();
    let text = ok(&sweep, &["gpus"]);
    assert!(text.contains("does not run"), "{text}");
    for line in text.lines().chain(live.lines()) {
        assert!(line.chars().count() <= 100, "over 100 columns: {line:?}");
    }
    assert!(
        text.contains(LONG_CARD) && live.contains(LONG_CARD),
        "{live}\n{text}"
    );
    let rows: Value = serde_json::from_str(&ok(&sweep, &["gpus", "--json"])).unwrap();
    assert_eq!(rows[0]["daemon_running"], false, "{rows}");
}

/// A study Optuna made whose first trial alone has a conditional param (`svc_c`), read with
/// `sweepd trials --storage URL`: the CSV's columns are the study's params, whichever rows show;
/// each trial has its duration, a pruned one the step it was pruned at, and user attributes.
#[test]
fn trials_limit_csv_dropped_a_param_the_rows_shown_lack_and_no_duration_pruned_step_or_user_attrs()
{
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("optuna.db");
    let url = format!("sqlite:///{}", db.display());
    let script = format!(
        "import optuna\n\
         s = optuna.create_study(study_name='svm', storage={url:?})\n\
         for i in range(5):\n\
         \x20   t = s.ask()\n\
         \x20   t.suggest_categorical('kind', ['svc', 'tree'])\n\
         \x20   if i == 0:\n\
         \x20       t.suggest_float('svc_c', 0.1, 10.0)\n\
         \x20   t.set_user_attr('note', f'n{{i}}')\n\
         \x20   if i == 4:\n\
         \x20       t.report(0.5, 3)\n\
         \x20       s.tell(t, state=optuna.trial.TrialState.PRUNED)\n\
         \x20   else:\n\
         \x20       s.tell(t, float(i))\n"
    );
    let out = std::process::Command::new(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // `trials` reads sweepd's tables too (they are missing from a database only Optuna
    // wrote: a separate defect); a steering command adds them.
    let sweepd = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = sweepd(&["resume", "--storage", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
        .args(["trials", "--storage", &url, "--limit", "2", "--csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = String::from_utf8(out.stdout).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.contains("params_svc_c"), "{csv}");
    assert!(header.contains("params_kind"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    // Each row's duration, the pruned one's step and the user attributes, in every form.
    let cell = |line: &str, column: &str| {
        let i = header.split(',').position(|h| h == column).unwrap();
        line.split(',').nth(i).unwrap().to_owned()
    };
    let pruned = csv.lines().nth(2).unwrap();
    assert_eq!(cell(pruned, "pruned_step"), "3", "{csv}");
    assert_eq!(cell(pruned, "user_attrs_note"), "n4", "{csv}");
    assert!(cell(pruned, "duration_s").parse::<f64>().is_ok(), "{csv}");
    let out = sweepd(&["trials", "--storage", &url, "--limit", "2", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[1]["pruned_step"], 3, "{rows}");
    assert_eq!(rows[1]["user_attrs"]["note"], "n4", "{rows}");
    assert!(rows[0]["duration_s"].is_number(), "{rows}");
    assert_eq!(rows[0]["pruned_step"], Value::Null, "{rows}");
    let out = sweepd(&["trials", "--storage", &url, "--limit", "2"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("        pruned at step 3\n"), "{text}");
    assert!(
        text.contains(r#"        user attrs {"note":"n4"}"#),
        "{text}"
    );
}

/// A worker whose first trial waits at `gate` and then fails as PyTorch does when the card is
/// full; every other trial (its retry) completes.
const OOM_ONCE: &str = r#"
import os, sys, time
sys.path.insert(0, sys.argv[1])
import sweepd_worker

def objective(trial):
    x = trial.suggest_float("x", -1.0, 1.0)
    if trial.number == 0:
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.02)
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return x * x

sweepd_worker.serve(objective)
"#;

/// A trial that failed out of memory under `[retry] oom = 3`, its copy left WAITING by a
/// `sweepd stop` before it ran: `trials` and `status` said nothing of why it waits.
#[test]
fn a_waiting_retry_copy_did_not_say_which_retry_it_is_after_which_failure() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("oom_once.py");
    std::fs::write(&script, OOM_ONCE).unwrap();
    let gate = dir.path().join("gate");
    let cfg = gated_study(1, &script, &gate);
    let sweep = Sweep::with_toml(&format!("{}\n[retry]\noom = 3\n", cfg.to_toml()));
    let daemon = sweep.spawn_run();
    wait_until(LIMIT, "trial 0 RUNNING", || running(&sweep) == 1);
    ok(&sweep, &["stop"]);
    // The copy must not start: the daemon has read the stop before the trial fails.
    wait_until(LIMIT, "the daemon reads the stop", || {
        sweep.daemon_stderr().contains("study stopping")
    });
    std::fs::write(&gate, "").unwrap();
    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    let trials = sweep.trials();
    assert_eq!(trials[0]["fail_kind"], "oom", "{trials:?}");
    let copy = trials
        .iter()
        .find(|t| t["state"] == "WAITING")
        .unwrap_or_else(|| panic!("no retry copy: {trials:?}"));
    assert_eq!(copy["reason"], "retry 1/3 after oom", "{copy}");
    let text = ok(&sweep, &["trials"]);
    assert!(text.contains("        retry 1/3 after oom\n"), "{text}");
    let status: Value = serde_json::from_str(&ok(&sweep, &["status", "--json"])).unwrap();
    assert_eq!(status["waiting"][0]["number"], copy["number"], "{status}");
    assert_eq!(
        status["waiting"][0]["reason"], "retry 1/3 after oom",
        "{status}"
    );
    let text = ok(&sweep, &["status"]);
    let line = format!("waiting   trial {}: retry 1/3 after oom", copy["number"]);
    assert!(text.contains(&line), "{text}");
    // Named by its storage alone, no config says the limit.
    let url = format!("sqlite:///{}", sweep.db.display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
        .args(["trials", "--storage", &url, "--study", "t", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let copy = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["state"] == "WAITING")
        .unwrap();
    assert_eq!(copy["reason"], "retry 1 after oom", "{rows}");
}
