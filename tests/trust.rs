//! Regression tests for failures found by running sweepd as an adversary would: each test is
//! named after the failure it pins and failed before its fix.

mod common;

use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_worker_closing_its_channel_mid_trial_does_not_stall_the_study() {
    // No trial_timeout and no heartbeat_timeout: only the closed channel can end trial 1,
    // whose worker closes it and then sleeps for an hour.
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(4),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_CLOSE_ON", "1")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let failed = &trials[1];
    assert_eq!(failed["state"], "FAIL", "{failed}");
    assert_eq!(failed["fail_kind"], "worker_died");
    assert!(
        failed["fail_reason"]
            .as_str()
            .unwrap()
            .contains("closed its protocol channel"),
        "{failed}"
    );
    // Retried by the crash policy: the same params ran again and completed.
    assert_eq!(trials[2]["params"], failed["params"]);
    assert_eq!(trials[2]["state"], "COMPLETE");
    assert_eq!(sweep.count("COMPLETE"), 4);
    // The sleeping worker's group was killed.
    for (pid, _) in recorded(record.path()) {
        assert!(!alive(pid), "worker {pid} outlived the run");
    }
}

/// Doubles that need all 17 significant digits, subnormals, signed zeros, the extremes and
/// infinities, then pseudo-random bit patterns over every exponent.
fn hard_values() -> Vec<f64> {
    let mut v = vec![
        0.200_626_407_997_296_22,
        -0.0,
        0.0,
        5e-324,
        -5e-324,
        2.225_073_858_507_201_4e-308,
        2.225_073_858_507_201e-308,
        f64::MAX,
        f64::MIN,
        0.1,
        1.0 / 3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while v.len() < 8 * 21 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let f = f64::from_bits(x);
        if f.is_finite() {
            v.push(f);
        }
    }
    // The hardest ones also as trials' final values (index 21 * number + 20).
    for (number, f) in [-0.0, -5e-324, f64::MAX, 0.200_626_407_997_296_22]
        .into_iter()
        .enumerate()
    {
        v[21 * number + 20] = f;
    }
    v
}

fn hex(f: f64) -> String {
    format!("{:016x}", f.to_bits())
}

/// SQLite stores a REAL that equals an integer as that integer, so -0.0 comes back as 0.0 to
/// anyone reading Optuna's columns (Optuna itself included); sweepd keeps the sign aside.
fn as_sqlite_reads_it(bits: &str) -> String {
    if bits == hex(-0.0) {
        hex(0.0)
    } else {
        bits.to_owned()
    }
}

const EXACT_PARAMS: &str = r#"
[params.x]
type = "float"
low = -1.0
high = 1.0

[params.big]
type = "float"
low = 0.0
high = 1.7976931348623157e308

[params.n]
type = "int"
low = 0
high = 10
step = 2

[params.opt]
type = "categorical"
choices = ["adam", "sgd"]
"#;

fn parse_value(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::String(s) if s == "inf" => f64::INFINITY,
        serde_json::Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        other => other
            .as_f64()
            .unwrap_or_else(|| panic!("not a number: {other}")),
    }
}

/// One study in `mode`, with four trials enqueued through Optuna and four sampled: every float
/// the worker receives, reports and returns is compared bit for bit along every path.
fn floats_round_trip_bit_exactly(mode: &'static str, plain: bool) {
    let values = hard_values();
    let values_file = tempfile::NamedTempFile::new().unwrap();
    let text: String = values.iter().map(|v| hex(*v) + "\n").collect();
    std::fs::write(values_file.path(), text).unwrap();
    let record = tempfile::NamedTempFile::new().unwrap();
    let mut command = vec![
        python(),
        repo()
            .join("tests/workers/exact_worker.py")
            .to_string_lossy()
            .into_owned(),
    ];
    if plain {
        command.push("--plain".into());
    }
    let cfg = Cfg {
        name: "exact".into(),
        n_trials: Some(8),
        max_par: 2,
        mode,
        command,
        params: EXACT_PARAMS.into(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_VALUES", values_file.path().to_str().unwrap())
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    sweep.optuna("optuna_create.py", &["exact", "minimize", "0"]);
    let enqueued = [
        (0.200_626_407_997_296_22, f64::MAX),
        (-0.0, 5e-324),
        (1.0 / 3.0, 2.225_073_858_507_201e-308),
        (-0.613_793_104_571_290_6, 1.234_567_890_123_456_7e300),
    ];
    for (x, big) in enqueued {
        let params = serde_json::json!({"x": x, "big": big, "n": 4, "opt": "sgd"});
        sweep.optuna("optuna_enqueue.py", &["exact", &params.to_string()]);
    }
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));

    let expected_value =
        |number: i64, step: usize| values[(number as usize * 21 + step) % values.len()];
    // What the worker received, by trial number.
    let received: std::collections::BTreeMap<i64, serde_json::Value> =
        std::fs::read_to_string(record.path())
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["number"].as_i64().unwrap(), v["params"].clone())
            })
            .collect();
    assert_eq!(received.len(), 8, "{received:?}");
    for (i, (x, big)) in enqueued.iter().enumerate() {
        let got = &received[&(i as i64)];
        assert_eq!(
            got["x"],
            hex(*x),
            "enqueued x of trial {i} reached the worker changed"
        );
        assert_eq!(
            got["big"],
            hex(*big),
            "enqueued big of trial {i} reached the worker changed"
        );
    }

    // Optuna reads every value, intermediate value and param as it was sent.
    let dump = sweep.optuna("optuna_bits.py", &["exact"]);
    let trials: Vec<serde_json::Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(trials.len(), 8);
    for t in &trials {
        let n = t["number"].as_i64().unwrap();
        assert_eq!(t["state"], "COMPLETE", "{t}");
        assert_eq!(
            t["values"][0],
            as_sqlite_reads_it(&hex(expected_value(n, 20))),
            "value of trial {n}"
        );
        if !plain {
            for step in 0..20 {
                assert_eq!(
                    t["intermediate"][step.to_string()],
                    as_sqlite_reads_it(&hex(expected_value(n, step))),
                    "intermediate value {step} of trial {n}"
                );
            }
        }
        for name in ["x", "big"] {
            let sent = received[&n][name].as_str().unwrap();
            assert_eq!(
                t["params"][name],
                as_sqlite_reads_it(sent),
                "param {name} of trial {n}"
            );
        }
    }

    // sweepd's own outputs keep every bit, the sign of zero included.
    let ours = sweep.trials();
    for t in &ours {
        let n = t["number"].as_i64().unwrap();
        assert_eq!(
            hex(parse_value(&t["value"])),
            hex(expected_value(n, 20)),
            "--json value of trial {n}"
        );
        for name in ["x", "big"] {
            assert_eq!(
                hex(t["params"][name].as_f64().unwrap()),
                received[&n][name].as_str().unwrap(),
                "--json param {name} of trial {n}"
            );
        }
    }
    let csv = sweep.sweepd(&["trials", "--csv"]).output().unwrap();
    let csv = String::from_utf8(csv.stdout).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let n: i64 = f[col("number")].parse().unwrap();
        assert_eq!(
            hex(f[col("value")].parse().unwrap()),
            hex(expected_value(n, 20)),
            "--csv value of trial {n}"
        );
        for name in ["x", "big"] {
            let v: f64 = f[col(&format!("params_{name}"))].parse().unwrap();
            assert_eq!(
                hex(v),
                received[&n][name].as_str().unwrap(),
                "--csv param {name} of trial {n}"
            );
        }
    }
}

#[test]
fn floats_changed_their_last_bit_in_persistent_mode() {
    floats_round_trip_bit_exactly("persistent", false);
}

#[test]
fn floats_changed_their_last_bit_in_oneshot_mode_with_the_helper() {
    floats_round_trip_bit_exactly("oneshot", false);
}

#[test]
fn floats_changed_their_last_bit_in_a_plain_oneshot_script() {
    floats_round_trip_bit_exactly("oneshot", true);
}

/// `optuna_optimize.py` on the study, in the background.
fn optuna_optimize(sweep: &Sweep, args: &[&str]) -> std::process::Child {
    std::process::Command::new(python())
        .arg(repo().join("tests/py/optuna_optimize.py"))
        .arg(&sweep.db)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run optuna_optimize.py")
}

#[test]
fn a_starting_daemon_failed_the_running_trial_of_a_live_optuna_process() {
    let cfg = Cfg {
        name: "shared".into(),
        n_trials: Some(6),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    sweep.optuna("optuna_create.py", &["shared", "minimize", "0"]);
    let hold = sweep.path("hold");
    let optuna = optuna_optimize(&sweep, &["shared", "1", "0", hold.to_str().unwrap()]);
    let running = sweep.path("hold.running");
    wait_until(LIMIT, "Optuna's trial to run", || running.exists());
    // sweepd starts, runs its budget beside Optuna's RUNNING trial and stops.
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&hold, "").unwrap();
    let optuna = optuna.wait_with_output().unwrap();
    assert!(
        optuna.status.success(),
        "the Optuna process died: {}",
        String::from_utf8_lossy(&optuna.stderr)
    );
    let trials = sweep.trials();
    let theirs = &trials[0];
    assert_eq!(theirs["state"], "COMPLETE", "{theirs}");
    assert!(theirs["fail_reason"].is_null(), "{theirs}");
    // Nothing ran Optuna's params a second time.
    let copies = trials
        .iter()
        .filter(|t| t["params"] == theirs["params"])
        .count();
    assert_eq!(copies, 1, "{trials:?}");
    assert_eq!(sweep.count("COMPLETE"), 7);
}

#[test]
fn the_budget_ignored_trials_that_optuna_processes_finished() {
    let cfg = Cfg {
        name: "shared".into(),
        n_trials: Some(30),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.1");
    let sweep = Sweep::new(&cfg);
    sweep.optuna("optuna_create.py", &["shared", "minimize", "0"]);
    let others: Vec<_> = (0..2)
        .map(|_| optuna_optimize(&sweep, &["shared", "25", "0.1"]))
        .collect();
    // sweepd starts while both Optuna processes are finishing trials.
    wait_until(LIMIT, "Optuna to finish trials", || {
        sweep.sql("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'")[0]
            .parse::<u32>()
            .unwrap()
            >= 2
    });
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    for o in others {
        let o = o.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // When sweepd started each of its trials, fewer than 30 trials had finished (whoever ran
    // them): timestamps are written by both sides in the same local-time format.
    let late = sweep.sql(
        "SELECT t.number FROM trials t WHERE EXISTS (SELECT 1 FROM trial_system_attributes a \
           WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:worker_id') \
         AND (SELECT COUNT(*) FROM trials f WHERE f.state IN ('COMPLETE', 'PRUNED', 'FAIL') \
              AND f.datetime_complete < t.datetime_start) >= 30",
    );
    assert!(
        late.is_empty(),
        "sweepd started trials {late:?} after the budget was spent"
    );
    let ours =
        sweep.sql("SELECT COUNT(*) FROM trial_system_attributes WHERE key = 'sweepd:worker_id'");
    assert!(ours[0].parse::<u32>().unwrap() > 0, "sweepd ran nothing");
}

/// Python's sqlite3 holding the write lock of a rollback-journal file, as an Optuna process
/// does while it commits, then letting go.
const HOLD_THE_WRITE_LOCK: &str = "\
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('BEGIN IMMEDIATE')
c.execute('UPDATE studies SET study_name = study_name')
print('held', flush=True)
time.sleep(1.0)
c.execute('COMMIT')
";

/// sweepd opening an Optuna-made file while an Optuna process committed failed with
/// "database is locked" (seen as a flaky `the_budget_ignored_trials_that_optuna_processes_finished`):
/// switching the file to WAL wants the exclusive lock, and SQLite answers "busy" at once,
/// without waiting, to a connection that holds the shared lock while another holds the
/// reserved one.
#[test]
fn opening_a_file_while_optuna_commits_failed_with_database_is_locked() {
    use std::io::BufRead;
    let sweep = Sweep::new(&Cfg {
        name: "shared".into(),
        ..Cfg::default()
    });
    sweep.optuna("optuna_create.py", &["shared", "minimize", "2"]);
    let mut holder = std::process::Command::new(python())
        .args(["-c", HOLD_THE_WRITE_LOCK])
        .arg(&sweep.db)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn python");
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
    let out = sweep.sweepd(&["trials", "--json"]).output().unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.trials().len(), 2);
}

#[test]
fn a_study_that_can_only_fail_never_ended() {
    let cfg = Cfg {
        n_trials: Some(20),
        max_par: 2,
        command: vec![
            python(),
            repo()
                .join("tests/workers/old_report_order_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    // What a person needs: the exception, where the user's code raised it, how many trials.
    assert!(
        err.contains("5 trials in a row failed with the same error"),
        "{err}"
    );
    assert!(err.contains("TypeError"), "{err}");
    assert!(
        err.contains("old_report_order_worker.py:20, in objective"),
        "{err}"
    );
    // The failures spent none of the budget: each has a WAITING copy.
    let status = sweep.sweepd(&["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["finished"], 0, "{status}");
    let fails = sweep.count("FAIL");
    assert!(fails >= 5, "{fails}");
    let retried =
        sweep.sql("SELECT COUNT(*) FROM trial_system_attributes WHERE key = 'sweepd:retried_as'");
    assert_eq!(
        retried,
        vec![fails.to_string()],
        "every failure re-enqueued"
    );
    assert!(sweep.count("WAITING") >= 5);
    assert_eq!(sweep.count("RUNNING"), 0);
}

/// (trial number, params) of every `COMPLETE` line the daemon logged.
fn logged_complete(stderr: &str) -> std::collections::BTreeMap<i64, serde_json::Value> {
    stderr
        .lines()
        .filter(|l| l.contains(" COMPLETE value="))
        .map(|l| {
            let number = l
                .split(" trial=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            let params = l.split(" params=").nth(1).unwrap();
            (
                number.parse().unwrap(),
                serde_json::from_str(params).unwrap(),
            )
        })
        .collect()
}

#[test]
fn trials_logged_complete_were_lost_with_the_power() {
    let cfg = Cfg {
        n_trials: Some(100_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.02");
    let ms = mounted_sweep(&cfg, |dir| {
        Mount::ext4(&dir.join("fs.img"), &dir.join("fs"))
    });
    let sweep = &*ms;
    // The config was written before: it survives the power loss.
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "trials to complete", || {
        logged_complete(&sweep.daemon_stderr()).len() >= 30
    });
    // What was reported before the power goes. Not what is logged after: the emulated power
    // loss is not an instant, and an fdatasync under way while the file system shuts down can
    // return success and still lose its data (the kernel alone, no SQLite:
    // `writes_synced_before_the_emulated_power_loss_survive_it` loses 1 to 3 such writes in 8
    // power losses, and none synced before one). A daemon keeps running through that window, as
    // it cannot through a real power loss, and such a line failed this test in 2 of 3 runs of
    // the whole suite on a clean clone (none in about 45 runs of this file alone).
    let logged = logged_complete(&sweep.daemon_stderr());
    // The power goes: the file system keeps nothing that was not synced, and the daemon dies
    // with it a moment later.
    ms.mount.power_loss();
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    ms.mount.remount(&sweep.dir.path().join("fs.img"));
    // Every trial reported COMPLETE survived, with the params it was reported with: its
    // number can never name other params.
    let trials = sweep.trials();
    for (number, params) in &logged {
        let t = trials
            .iter()
            .find(|t| t["number"] == *number)
            .unwrap_or_else(|| panic!("trial {number} was logged COMPLETE and is gone"));
        // The daemon's lines about the trial, and its warnings and errors.
        let about = || {
            sweep
                .daemon_stderr()
                .lines()
                .filter(|l| l.contains(&format!(" trial={number} ")) || !l.contains(" INFO "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(t["state"], "COMPLETE", "{t}\n{}", about());
        assert_eq!(&t["params"], params, "trial {number}");
    }
}

/// The premise of the power-loss tests, checked on the kernel that runs them: a write whose
/// fdatasync returned before `Mount::power_loss` survives it. A write synced while the ioctl
/// runs may not (the emulation is not an instant), which is why those tests take what the
/// daemon reported before it. Appends of 4 KiB, each synced through a second, read-only
/// handle as `store::sync` does, by a thread the power loss interrupts.
#[test]
fn writes_synced_before_the_emulated_power_loss_survive_it() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const BLOCK: usize = 4096;
    let mut lost_in_the_window = 0;
    for round in 0..8u64 {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mount = Mount::ext4(&image, &dir.path().join("fs"));
        let path = mount.at.join("log");
        let file = std::fs::File::create(&path).unwrap();
        std::fs::File::open(&mount.at).unwrap().sync_all().unwrap();
        let syncer = std::fs::File::open(&path).unwrap();
        let acked = Arc::new(AtomicU64::new(0));
        let writer = {
            let acked = acked.clone();
            std::thread::spawn(move || {
                for i in 1u64.. {
                    let block: Vec<u8> = std::iter::repeat_n(i.to_le_bytes(), BLOCK / 8)
                        .flatten()
                        .collect();
                    let ok = file.write_all_at(&block, (i - 1) * BLOCK as u64).is_ok()
                        && syncer.sync_data().is_ok();
                    if !ok {
                        return;
                    }
                    acked.store(i, Ordering::SeqCst);
                }
            })
        };
        std::thread::sleep(Duration::from_millis(150 + 40 * round));
        let before = acked.load(Ordering::SeqCst);
        mount.power_loss();
        writer.join().unwrap();
        let after = acked.load(Ordering::SeqCst);
        mount.remount(&image);
        let data = std::fs::read(&path).unwrap();
        let survived = (data.len() / BLOCK) as u64;
        for k in 0..survived.min(after) {
            let at = k as usize * BLOCK;
            let got = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
            assert_eq!(got, k + 1, "round {round}: block {k} holds another write");
        }
        assert!(
            survived >= before,
            "round {round}: {before} writes synced before the power loss, {survived} survived"
        );
        lost_in_the_window += after.saturating_sub(survived.max(before));
    }
    println!(
        "writes whose sync returned during the power loss and were lost: {lost_in_the_window}"
    );
}

/// `sweepd status` on a file only Optuna had written failed with "no such table:
/// sweepd_workers": an Optuna user who switches reads the study before sweepd ever ran it.
#[test]
fn status_of_a_file_only_optuna_wrote_failed_with_no_such_table() {
    let sweep = Sweep::new(&Cfg {
        name: "shared".into(),
        ..Cfg::default()
    });
    sweep.optuna("optuna_create.py", &["shared", "minimize", "2"]);
    for args in [&["status"][..], &["status", "--json"], &["trials"]] {
        let out = sweep.sweepd(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let out = sweep.sweepd(&["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["counts"]["complete"], 2, "{status}");
}
