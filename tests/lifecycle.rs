//! Stopping and restarting: SIGTERM with and without the grace running out, a second Ctrl-C
//! that ends the grace at once, and `kill -9` of the daemon followed by a restart. Nothing may
//! be lost or counted twice.

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn sigterm_lets_running_trials_finish_within_the_grace() {
    let cfg = Cfg {
        n_trials: Some(20),
        max_par: 2,
        shutdown_grace: "30s",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "1.5");
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two trials running", || running(&sweep) == 2);
    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    let trials = sweep.trials();
    assert!(trials.len() < 20, "no new trials after SIGTERM");
    assert!(
        trials.iter().all(|t| t["state"] == "COMPLETE"),
        "{trials:?}"
    );
}

#[test]
fn sigterm_past_the_grace_kills_the_workers_and_reenqueues_their_trials() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(20),
        max_par: 2,
        shutdown_grace: "1s",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "60")
    .env("SWEEPD_TEST_FORK", "1")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two trials running", || {
        running(&sweep) == 2 && recorded(record.path()).len() == 2
    });
    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    assert_nothing_lost(&sweep);
    assert_eq!(sweep.count("FAIL"), 2);
    assert_eq!(sweep.count("WAITING"), 2);
    for (pgid, _) in recorded(record.path()) {
        let left = sweepd::process::group_members(pgid);
        assert!(left.is_empty(), "group {pgid} survived: {left:?}");
    }
    // The next run takes the re-enqueued trials first, with their params.
    let waiting: Vec<Value> = sweep
        .trials()
        .into_iter()
        .filter(|t| t["state"] == "WAITING")
        .collect();
    let cfg2 = Cfg {
        n_trials: Some(2),
        shutdown_grace: "1s",
        ..cfg.clone()
    };
    std::fs::write(
        &sweep.config,
        cfg2.to_toml()
            .replace("SWEEPD_TEST_SLEEP = \"60\"", "SWEEPD_TEST_SLEEP = \"0.01\""),
    )
    .unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    for w in &waiting {
        let t = trials.iter().find(|t| t["number"] == w["number"]).unwrap();
        assert_eq!(t["state"], "COMPLETE");
        assert_eq!(t["params"], w["params"]);
    }
}

#[test]
fn a_second_ctrl_c_kills_the_workers_at_once_and_loses_nothing() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(20),
        max_par: 2,
        // Far past LIMIT: only the second Ctrl-C can end this run before the hang guard.
        shutdown_grace: "1h",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "3600")
    .env("SWEEPD_TEST_FORK", "1")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two trials running", || {
        running(&sweep) == 2 && recorded(record.path()).len() == 2
    });
    // Each worker's group: the worker and the child it forked, which ignores SIGTERM.
    let groups: Vec<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    wait_until(LIMIT, "each worker has forked its child", || {
        groups
            .iter()
            .all(|g| sweepd::process::group_members(*g).len() == 2)
    });
    let before: Vec<i32> = groups
        .iter()
        .flat_map(|g| sweepd::process::group_members(*g))
        .collect();
    sigint(&child);
    // Two signals sent back to back may be taken as one: the second goes once the first is.
    wait_until(
        LIMIT,
        "the first Ctrl-C taken, saying what a second does",
        || {
            sweep
                .daemon_stderr()
                .contains("press Ctrl-C again to stop now")
        },
    );
    sigint(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    for pid in &before {
        assert!(!alive(*pid), "process {pid} of a worker's group survived");
    }
    assert_nothing_lost(&sweep);
    assert_eq!(sweep.count("FAIL"), 2, "{}", sweep.daemon_stderr());
    assert_eq!(sweep.count("WAITING"), 2);
}

#[test]
fn restart_after_kill_9_loses_nothing_and_counts_nothing_twice() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let budget = 16;
    let cfg = Cfg {
        n_trials: Some(budget),
        max_par: 3,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.4")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    // Kill the daemon three times at different points, restarting each time.
    for kill_after in [2usize, 6, 10] {
        let mut child = sweep.spawn_run();
        wait_until(LIMIT, "some trials complete", || {
            sweep.db.exists() && sweep.count("COMPLETE") >= kill_after
        });
        child.kill().unwrap(); // SIGKILL: no cleanup of any kind
        child.wait().unwrap();
        assert!(running(&sweep) > 0 || sweep.count("COMPLETE") >= budget as usize);
    }
    let before: HashSet<i32> = recorded(record.path()).iter().map(|(p, _)| *p).collect();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_nothing_lost(&sweep);
    let trials = sweep.trials();
    let finals = trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE" || t["state"] == "PRUNED")
        .count();
    assert_eq!(
        finals as u64, budget,
        "exactly the budget reached a final outcome"
    );
    assert!(sweep.count("FAIL") > 0, "the kills interrupted trials");
    // Workers of the killed instances were killed by the restart, not left running.
    for pid in before {
        assert!(
            !alive(pid),
            "worker {pid} of a killed daemon is still alive"
        );
    }
    // Every trial's value is recorded once.
    let dup = sweep.sql("SELECT COUNT(*) FROM (SELECT trial_id FROM trial_values GROUP BY trial_id HAVING COUNT(*) > 1)");
    assert_eq!(dup, vec!["0"]);
}

/// A daemon killed with -9 while its worker runs a trial that reports nothing: the worker
/// went on until the trial ended (an hour, for a real one, holding its GPU memory with no one
/// to take its result), because only its reads of the channel noticed sweepd was gone. The
/// helper now watches the channel for the hang-up and exits at once.
#[test]
fn a_worker_in_a_long_trial_outlived_its_killed_daemon() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_HANG_ON", "0")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "trial 0 to start in its worker", || {
        !recorded(record.path()).is_empty()
    });
    let (pid, number) = recorded(record.path())[0];
    assert_eq!(number, 0);
    child.kill().unwrap(); // SIGKILL: no cleanup of any kind
    child.wait().unwrap();
    wait_until(LIMIT, "the worker of the killed daemon to exit", || {
        !alive(pid)
    });
}

#[test]
fn a_worker_that_never_starts_stops_the_run_with_its_stderr() {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        script.path(),
        "import sys\nsys.stderr.write('ImportError: no module named torch\\n')\nsys.exit(1)\n",
    )
    .unwrap();
    let cfg = Cfg {
        command: vec![python(), script.path().to_string_lossy().into_owned()],
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("keep failing to start"), "{err}");
    assert!(err.contains("no module named torch"), "{err}");
    assert_eq!(sweep.count("RUNNING"), 0);
}

#[test]
fn a_missing_worker_program_is_a_clear_error() {
    let cfg = Cfg {
        command: vec!["/nonexistent/trainer".into()],
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/trainer"),
        "{}",
        stderr(&out)
    );
}

/// A database that a newer sweepd migrated (on PostgreSQL, the first host upgraded migrates
/// it for every host) is refused with what to do, not only sqlx's "previously applied but is
/// missing in the resolved migrations".
#[test]
fn a_database_a_newer_sweepd_migrated_is_refused_with_what_to_do() {
    let out = rerun_after(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer sweepd', 1, x'00', 0)",
        LIMIT,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("a newer sweepd migrated this database; its migration 9999 is unknown")
            && err.contains("\"Upgrading\""),
        "{err}"
    );
}
