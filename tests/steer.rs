//! Steering a study through the database (issue 42): `sweepd pause`, `resume`, `stop`,
//! `cancel`, `kill`, `enqueue` and `logs`, each with a daemon running the study and with none,
//! and a trial ended by another process (an Optuna script's `tell`) stopping its worker.
//! Real daemons, real Python workers, the real SQLite file; the workers wait at a gate file
//! (`SWEEPD_TEST_GATE`) so that a trial is RUNNING for as long as a test needs.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A hang guard, never a speed assertion.
const LIMIT: Duration = Duration::from_secs(120);

/// A study whose trials wait at `gate` (a file in `gates`, which outlives the study's dir).
fn gated(n: u64, max_par: usize, gates: &Path, extra_env: &[(&str, &str)]) -> (Sweep, PathBuf) {
    let gate = gates.join("gate");
    let mut cfg = Cfg {
        n_trials: Some(n),
        max_par,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_GATE", gate.to_str().unwrap());
    for (k, v) in extra_env {
        cfg = cfg.env(k, v);
    }
    (Sweep::new(&cfg), gate)
}

/// `sweepd ARGS -c config`, run to its end.
fn sweepd(sweep: &Sweep, args: &[&str]) -> Output {
    let child = sweep
        .sweepd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sweepd");
    wait_output(child, LIMIT)
}

/// The command's stdout; it must have succeeded.
fn ok(sweep: &Sweep, args: &[&str]) -> String {
    let out = sweepd(sweep, args);
    assert!(
        out.status.success(),
        "sweepd {args:?}: {}\n{}",
        stderr(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The command's exit code and stderr; it must have failed.
fn refused(sweep: &Sweep, args: &[&str]) -> (i32, String) {
    let out = sweepd(sweep, args);
    assert!(!out.status.success(), "sweepd {args:?} succeeded");
    (out.status.code().unwrap(), stderr(&out))
}

fn trial(sweep: &Sweep, number: i64) -> Value {
    sweep
        .trials()
        .into_iter()
        .find(|t| t["number"] == number)
        .unwrap_or_else(|| panic!("no trial {number}"))
}

fn state_of(sweep: &Sweep, number: i64) -> String {
    sweep
        .sql(&format!("SELECT state FROM trials WHERE number = {number}"))
        .pop()
        .unwrap_or_default()
}

fn wait_running(sweep: &Sweep, n: usize) {
    wait_until(LIMIT, &format!("{n} trial(s) RUNNING"), || {
        running(sweep) == n
    });
}

fn wait_exit(sweep: &Sweep, daemon: Child) -> std::process::ExitStatus {
    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    out.status
}

/// Trials that ever started, retry copies included.
fn trial_rows(sweep: &Sweep) -> usize {
    try_count(&sweep.db, "SELECT COUNT(*) FROM trials").unwrap_or(0)
}

fn open(gate: &Path) {
    std::fs::write(gate, "").unwrap();
}

/// Turns on the daemon's metrics endpoint on a free loopback port.
fn with_metrics(sweep: &Sweep) -> u16 {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = std::fs::read_to_string(&sweep.config).unwrap();
    cfg.push_str(&format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    std::fs::write(&sweep.config, cfg).unwrap();
    port
}

/// A sample of the daemon's metrics (`name{host="…"} value`), if it answers.
fn metric(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.split(['{', ' ']).next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_paused_study_starts_no_trial_lets_the_running_one_finish_and_stays_paused_across_a_restart() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(3, 1, gates.path(), &[]);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 1);
    let said = ok(&sweep, &["pause"]);
    assert!(said.contains("paused (was RUNNING)"), "{said}");
    assert!(said.contains("waits for `sweepd resume`"), "{said}");
    wait_until(LIMIT, "the daemon reads the pause", || {
        sweep.daemon_stderr().contains("study paused")
    });
    open(&gate);
    wait_until(LIMIT, "the running trial finishes", || {
        count_in(&sweep, "COMPLETE") == 1
    });
    // Several housekeeping passes: nothing new starts while paused.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(trial_rows(&sweep), 1, "{:#?}", sweep.trials());
    let status = ok(&sweep, &["status", "--json"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["daemon"]["state"], "PAUSED", "{status}");
    let detail = status["daemon"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("(`sweepd pause`); no trial starts until `sweepd resume`"),
        "{status}"
    );
    sigterm(&daemon);
    wait_exit(&sweep, daemon);
    // A new daemon starts paused.
    let daemon = sweep.spawn_run();
    wait_until(LIMIT, "the new daemon says it starts paused", || {
        sweep.daemon_stderr().matches("study paused").count() >= 2
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(trial_rows(&sweep), 1, "{:#?}", sweep.trials());
    let said = ok(&sweep, &["resume"]);
    assert!(said.contains("resumed (was PAUSED by "), "{said}");
    wait_exit(&sweep, daemon);
    assert_eq!(sweep.states(), ["COMPLETE"; 3]);
}

#[test]
fn pause_with_no_daemon_makes_the_next_run_start_paused_until_resume() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(2, 1, gates.path(), &[]);
    open(&gate);
    // The study exists once a daemon made it: a first run of one trial, then pause.
    let cfg = std::fs::read_to_string(&sweep.config).unwrap();
    std::fs::write(&sweep.config, cfg.replace("n_trials = 2", "n_trials = 1")).unwrap();
    assert!(sweep.run(&[], LIMIT).status.success());
    std::fs::write(&sweep.config, cfg).unwrap();
    let said = ok(&sweep, &["pause"]);
    assert!(
        said.contains("no daemon runs it now; the next `sweepd run` starts paused"),
        "{said}"
    );
    let again = ok(&sweep, &["pause", "--json"]);
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["state"], "PAUSED", "{again}");
    let daemon = sweep.spawn_run();
    wait_until(LIMIT, "the daemon starts paused", || {
        sweep.daemon_stderr().contains("study paused")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(trial_rows(&sweep), 1);
    ok(&sweep, &["resume"]);
    wait_exit(&sweep, daemon);
    assert_eq!(sweep.states(), ["COMPLETE"; 2]);
}

#[test]
fn stop_lets_running_trials_finish_then_the_daemon_exits_0_and_runs_exit_at_once_until_resume() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(6, 2, gates.path(), &[]);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 2);
    let said = ok(&sweep, &["stop"]);
    assert!(said.contains("stopped (was RUNNING)"), "{said}");
    wait_until(LIMIT, "the daemon reads the stop", || {
        sweep.daemon_stderr().contains("study stopping")
    });
    open(&gate);
    wait_exit(&sweep, daemon);
    assert_eq!(sweep.states(), ["COMPLETE"; 2], "{:#?}", sweep.trials());
    let log = sweep.daemon_stderr();
    assert!(log.contains("STOPPING by "), "{log}");
    // Stopped: a new run (systemd's restart) exits 0 at once, saying so, and starts nothing.
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("study stopped: STOPPING by "),
        "{}",
        stderr(&out)
    );
    assert_eq!(trial_rows(&sweep), 2);
    ok(&sweep, &["resume"]);
    assert!(sweep.run(&[], LIMIT).status.success());
    assert_eq!(sweep.states(), ["COMPLETE"; 6]);
}

#[test]
fn cancel_kills_running_trials_re_enqueues_them_and_the_daemon_exits_0() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(4, 2, gates.path(), &[]);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 2);
    let said = ok(&sweep, &["cancel"]);
    assert!(said.contains("killed and re-enqueued"), "{said}");
    // The gate stays shut: only the cancel ends these trials.
    wait_exit(&sweep, daemon);
    assert_eq!(running(&sweep), 0);
    assert_eq!(count_in(&sweep, "FAIL"), 2, "{:#?}", sweep.trials());
    assert_eq!(count_in(&sweep, "WAITING"), 2, "{:#?}", sweep.trials());
    let log = sweep.daemon_stderr();
    assert!(
        log.contains("the study was cancelled (CANCELLING by "),
        "{log}"
    );
    // Cancelled: `run` exits at once until `resume`; then the copies run first.
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(count_in(&sweep, "WAITING"), 2);
    ok(&sweep, &["resume"]);
    open(&gate);
    assert!(sweep.run(&[], LIMIT).status.success());
    assert_eq!(count_in(&sweep, "COMPLETE"), 4, "{:#?}", sweep.trials());
    assert_eq!(trial_rows(&sweep), 6);
}

#[test]
fn stop_and_cancel_with_no_daemon_keep_the_next_run_from_starting() {
    let sweep = Sweep::new(&Cfg {
        n_trials: Some(1),
        ..Cfg::default()
    });
    assert!(sweep.run(&[], LIMIT).status.success());
    let cfg = std::fs::read_to_string(&sweep.config).unwrap();
    std::fs::write(&sweep.config, cfg.replace("n_trials = 1", "n_trials = 3")).unwrap();
    for cmd in ["stop", "cancel"] {
        let said = ok(&sweep, &[cmd]);
        assert!(said.contains("no daemon runs it now"), "{said}");
        let out = sweep.run(&[], LIMIT);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stderr(&out).contains("study stopped: "), "{}", stderr(&out));
        assert_eq!(trial_rows(&sweep), 1);
    }
    ok(&sweep, &["resume"]);
    assert!(sweep.run(&[], LIMIT).status.success());
    assert_eq!(sweep.states(), ["COMPLETE"; 3]);
}

#[test]
fn a_trial_killed_by_hand_leaves_nothing_running_and_is_not_retried() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(3, 1, gates.path(), &[("SWEEPD_TEST_HANG_ON", "0")]);
    let port = with_metrics(&sweep);
    open(&gate);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 1);
    assert_eq!(state_of(&sweep, 0), "RUNNING");
    // Paused first, so that the daemon is still up to be asked for its metrics.
    ok(&sweep, &["pause"]);
    wait_until(LIMIT, "sweepd_paused 1", || {
        metric(port, "sweepd_paused") == Some(1.0)
    });
    let said = ok(&sweep, &["kill", "0"]);
    assert!(
        said.contains("trial 0: RUNNING → FAIL, killed by hand, not retried"),
        "{said}"
    );
    // Counted once the daemon stopped the worker.
    wait_until(LIMIT, "sweepd_trials_killed_by_hand_total 1", || {
        metric(port, "sweepd_trials_killed_by_hand_total") == Some(1.0)
    });
    ok(&sweep, &["resume"]);
    // Trial 0 hangs forever: the daemon ends only if it stopped its worker.
    wait_exit(&sweep, daemon);
    assert_eq!(running(&sweep), 0);
    assert_eq!(state_of(&sweep, 0), "FAIL");
    assert_eq!(count_in(&sweep, "WAITING"), 0, "{:#?}", sweep.trials());
    assert_eq!(
        trial_rows(&sweep),
        3,
        "no retry copy: {:#?}",
        sweep.trials()
    );
    let t = trial(&sweep, 0);
    assert!(t.to_string().contains("killed by hand"), "{t}");
    let log = sweep.daemon_stderr();
    assert!(
        log.contains("the trial was ended by hand (`sweepd kill` by "),
        "{log}"
    );
    // A final trial, and one that does not exist, are refused.
    let (code, why) = refused(&sweep, &["kill", "0"]);
    assert_eq!(code, 1);
    assert!(why.contains("trial 0 is FAIL already"), "{why}");
    let (code, why) = refused(&sweep, &["kill", "99"]);
    assert_eq!(code, 2);
    assert!(why.contains("has no trial 99"), "{why}");
}

#[test]
fn kill_prune_with_no_daemon_ends_a_waiting_trial_a_paused_one_says_paused_and_enqueue_refuses_a_finished_study(
) {
    let sweep = Sweep::new(&Cfg {
        n_trials: Some(1),
        ..Cfg::default()
    });
    assert!(sweep.run(&[], LIMIT).status.success());
    // A study whose budget is spent would never start an enqueued trial.
    let (code, why) = refused(&sweep, &["enqueue", "--param", "x=0.5"]);
    assert_eq!(code, 1);
    assert!(why.contains("study `t` is finished"), "{why}");
    let cfg = std::fs::read_to_string(&sweep.config).unwrap();
    std::fs::write(&sweep.config, cfg.replace("n_trials = 1", "n_trials = 2")).unwrap();
    ok(&sweep, &["enqueue", "--param", "x=0.5"]);
    // Paused with no daemon: the WAITING trial says so (it said nothing before).
    ok(&sweep, &["pause"]);
    let rows: Value = serde_json::from_str(&ok(&sweep, &["trials", "--json"])).unwrap();
    let waiting = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["number"] == 1)
        .unwrap();
    assert_eq!(waiting["reason"], "paused", "{rows}");
    let said = ok(&sweep, &["kill", "1", "--prune"]);
    assert!(said.contains("trial 1: WAITING → PRUNED by hand"), "{said}");
    assert_eq!(state_of(&sweep, 1), "PRUNED");
}

#[test]
fn enqueued_params_run_next_and_a_value_outside_the_space_is_refused() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(4, 1, gates.path(), &[]);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 1);
    // Refused, naming the param and its space; nothing added.
    let (code, why) = refused(&sweep, &["enqueue", "--param", "n=3"]);
    assert_eq!(code, 2);
    assert!(
        why.contains("param `n` = 3 is outside the search space"),
        "{why}"
    );
    let (code, why) = refused(&sweep, &["enqueue", "--param", "opt=adagrad"]);
    assert_eq!(code, 2, "{why}");
    assert_eq!(trial_rows(&sweep), 1);
    let said = ok(
        &sweep,
        &[
            "enqueue", "--param", "x=1.5", "--param", "n=4", "--param", "opt=sgd",
        ],
    );
    assert!(said.contains("enqueued trial 1 (WAITING)"), "{said}");
    let file = sweep.path("more.jsonl");
    std::fs::write(&file, "{\"x\": -1.25, \"lr\": 0.01}\n").unwrap();
    let said = ok(&sweep, &["enqueue", "--file", file.to_str().unwrap()]);
    assert!(said.contains("enqueued trial 2 (WAITING)"), "{said}");
    open(&gate);
    wait_exit(&sweep, daemon);
    assert_eq!(sweep.states(), ["COMPLETE"; 4]);
    let one = trial(&sweep, 1);
    assert_eq!(one["params"]["x"], 1.5, "{one}");
    assert_eq!(one["params"]["n"], 4, "{one}");
    assert_eq!(one["params"]["opt"], "sgd", "{one}");
    let two = trial(&sweep, 2);
    assert_eq!(two["params"]["x"], -1.25, "{two}");
    assert_eq!(two["params"]["lr"], 0.01, "{two}");
}

#[test]
fn logs_shows_one_trial_s_output_and_follow_ends_when_the_trial_ends() {
    let gates = tempfile::tempdir().unwrap();
    let (sweep, gate) = gated(2, 1, gates.path(), &[("SWEEPD_TEST_CHATTY", "1")]);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 1);
    let follow = sweep
        .sweepd(&["logs", "0", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    open(&gate);
    // `-f` ends by itself once trial 0 ended (the daemon goes on to trial 1).
    let out = wait_output(follow, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("trial 0 stdout line 1999"),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(!text.contains("trial 1 stdout"), "only trial 0's lines");
    assert!(!text.contains("=== sweepd:"), "no daemon markers");
    wait_exit(&sweep, daemon);
    let one = ok(&sweep, &["logs", "1"]);
    assert!(
        one.contains("trial 1 stdout line 1999"),
        "{}",
        &one[..one.len().min(2000)]
    );
    assert!(!one.contains("trial 0 stdout"));
    let (code, why) = refused(&sweep, &["logs", "7"]);
    assert_eq!(code, 2);
    assert!(why.contains("has no trial 7"), "{why}");
}

/// `study.tell(number, state=FAIL)` through Optuna, as a script (or optuna-dashboard's fail)
/// ends a trial that sweepd runs.
fn optuna_fail(sweep: &Sweep, number: i64) {
    let script = "import sys, optuna\n\
                  optuna.logging.set_verbosity(optuna.logging.ERROR)\n\
                  s = optuna.load_study(study_name='t', storage='sqlite:///' + sys.argv[1])\n\
                  s.tell(int(sys.argv[2]), state=optuna.trial.TrialState.FAIL)\n";
    let out = Command::new(python())
        .args(["-c", script])
        .arg(&sweep.db)
        .arg(number.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// optuna-dashboard's "Fail" on a running trial (`tests/py/dashboard_fail.py`: its HTTP API).
fn dashboard_fail(sweep: &Sweep, number: i64) {
    let answer = sweep.optuna("dashboard_fail.py", &["t", &number.to_string()]);
    assert_eq!(answer.trim(), "204");
}

#[test]
fn a_trial_failed_by_an_optuna_script_has_its_worker_stopped_and_the_slot_moves_on() {
    ended_elsewhere_stops_the_worker(optuna_fail);
}

#[test]
fn a_trial_failed_from_optuna_dashboard_has_its_worker_stopped_and_the_slot_moves_on() {
    ended_elsewhere_stops_the_worker(dashboard_fail);
}

/// Trial 0 hangs; `fail` ends it from outside sweepd: its worker is stopped (within the hang
/// guard), what the other process wrote stands, and the study goes on to its end.
fn ended_elsewhere_stops_the_worker(fail: fn(&Sweep, i64)) {
    let gates = tempfile::tempdir().unwrap();
    let record = gates.path().join("pids");
    let (sweep, gate) = gated(
        3,
        1,
        gates.path(),
        &[
            ("SWEEPD_TEST_HANG_ON", "0"),
            ("SWEEPD_TEST_RECORD", record.to_str().unwrap()),
        ],
    );
    open(&gate);
    let daemon = sweep.spawn_run();
    wait_running(&sweep, 1);
    wait_until(LIMIT, "trial 0's worker recorded", || {
        !recorded(&record).is_empty()
    });
    let (pid, _) = recorded(&record)[0];
    fail(&sweep, 0);
    // Trial 0 hangs forever: its worker goes only because the daemon stopped it.
    wait_until(LIMIT, "trial 0's worker stopped", || !alive(pid));
    wait_exit(&sweep, daemon);
    assert_eq!(state_of(&sweep, 0), "FAIL", "the script's FAIL stands");
    assert_eq!(count_in(&sweep, "COMPLETE"), 2, "{:#?}", sweep.trials());
    assert_eq!(running(&sweep), 0);
    let log = sweep.daemon_stderr();
    assert!(
        log.contains("the trial was ended by another process (now FAIL"),
        "{log}"
    );
}

fn pg_count(url: &str, state: &str) -> usize {
    pg_try_column(
        url,
        &format!("SELECT count(*) FROM trials WHERE state = '{state}'"),
    )
    .and_then(|c| c[0].parse().ok())
    .unwrap_or(0)
}

/// Two hosts' daemons of one study on PostgreSQL: `stop` from one host lets both hosts'
/// running trials finish and both daemons exit 0; `cancel` kills both hosts' trials,
/// re-enqueues them, and both exit 0.
#[test]
fn stop_and_cancel_reach_every_daemon_of_a_study_on_postgresql() {
    let pg = PgServer::start();
    let url = pg.create_db("steer");
    let gates = tempfile::tempdir().unwrap();
    let gate = gates.path().join("gate");
    let cfg = Cfg {
        name: "multi".into(),
        n_trials: Some(10),
        max_par: 1,
        storage: Some(format!("url = \"{url}\"\nhost_timeout = \"60s\"")),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_GATE", gate.to_str().unwrap());
    let hosts: Vec<Sweep> = ["a", "b"]
        .iter()
        .map(|h| {
            let mut s = Sweep::new(&cfg);
            s.env.push(("SWEEPD_HOST_ID".into(), (*h).into()));
            s
        })
        .collect();
    let both_running = || {
        wait_until(LIMIT, "a trial RUNNING on each host", || {
            pg_count(&url, "RUNNING") == 2
        })
    };
    let daemons: Vec<Child> = hosts.iter().map(Sweep::spawn_run).collect();
    both_running();
    let said = ok(&hosts[1], &["stop"]);
    assert!(said.contains("the 2 daemons on "), "{said}");
    std::fs::write(&gate, "").unwrap();
    for (d, h) in daemons.into_iter().zip(&hosts) {
        wait_exit(h, d);
    }
    let logs = || {
        format!(
            "{}\n---\n{}",
            hosts[0].daemon_stderr(),
            hosts[1].daemon_stderr()
        )
    };
    assert_eq!(pg_count(&url, "COMPLETE"), 2, "{}", logs());
    assert_eq!(pg_count(&url, "RUNNING") + pg_count(&url, "WAITING"), 0);
    // Again, with the gate shut, and cancelled.
    std::fs::remove_file(&gate).unwrap();
    ok(&hosts[0], &["resume"]);
    let daemons: Vec<Child> = hosts.iter().map(Sweep::spawn_run).collect();
    both_running();
    let said = ok(&hosts[0], &["cancel"]);
    assert!(said.contains("the 2 daemons on "), "{said}");
    for (d, h) in daemons.into_iter().zip(&hosts) {
        wait_exit(h, d);
    }
    assert_eq!(pg_count(&url, "RUNNING"), 0);
    assert_eq!(pg_count(&url, "FAIL"), 2);
    assert_eq!(pg_count(&url, "WAITING"), 2);
    assert_eq!(pg_count(&url, "COMPLETE"), 2);
}
