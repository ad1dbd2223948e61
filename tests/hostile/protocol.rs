//! Workers that send what the Python helper never would (`tests/workers/raw_worker.py` speaks
//! the protocol by hand): what Optuna cannot read or a database cannot store is refused with
//! the reason sent back, a late message is dropped rather than charged to the next trial, and
//! memory stays bounded whatever a worker writes. And `check` refuses what `run` cannot do.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);

/// A raw worker's files: the lines it sends, and what sweepd sent it.
struct Raw {
    dir: tempfile::TempDir,
}

impl Raw {
    fn new() -> Raw {
        Raw {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A study of `n_trials` on the raw worker, one at a time, without `[params]`: each trial
    /// sends `send` (answers awaited), its result, then `after`.
    fn cfg(&self, name: &str, n_trials: u64, send: &[&str], after: &[&str]) -> Cfg {
        let write = |file: &str, lines: &[&str]| {
            let path = self.path(file);
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            path.to_string_lossy().into_owned()
        };
        Cfg {
            name: name.into(),
            n_trials: Some(n_trials),
            max_par: 1,
            command: vec![
                python(),
                repo()
                    .join("tests/workers/raw_worker.py")
                    .to_string_lossy()
                    .into_owned(),
            ],
            params: String::new(),
            ..Cfg::default()
        }
        .env("SWEEPD_TEST_SEND", &write("send", send))
        .env("SWEEPD_TEST_AFTER", &write("after", after))
        .env("SWEEPD_TEST_RECORD", self.path("record").to_str().unwrap())
    }

    /// Every message sweepd sent, with the trial number it came in.
    fn received(&self) -> Vec<(i64, Value)> {
        let text = std::fs::read_to_string(self.path("record")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["number"].as_i64().unwrap_or(-1), v["msg"].clone())
            })
            .collect()
    }

    /// sweepd's answers of `kind` ("param", "prune", "user_attr_refused") in trial `number`.
    fn answers(&self, number: i64, kind: &str) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|(n, m)| *n == number && m["type"] == kind)
            .map(|(_, m)| m)
            .collect()
    }
}

fn suggest(name: &str, distribution: &str) -> String {
    format!(
        r#"{{"type":"suggest","trial_id":TRIAL_ID,"name":{},"distribution":{distribution}}}"#,
        serde_json::to_string(name).unwrap()
    )
}

fn float_dist(low: &str, high: &str, step: &str) -> String {
    format!(
        r#"{{"name":"FloatDistribution","attributes":{{"step":{step},"low":{low},"high":{high},"log":false}}}}"#
    )
}

fn categorical(choices: &str) -> String {
    format!(r#"{{"name":"CategoricalDistribution","attributes":{{"choices":[{choices}]}}}}"#)
}

fn user_attr(key: &str, value: &str) -> String {
    format!(
        r#"{{"type":"user_attr","trial_id":TRIAL_ID,"key":{},"value":{value}}}"#,
        serde_json::to_string(key).unwrap()
    )
}

fn run_ok(sweep: &Sweep) -> Output {
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

/// The answer named `name` in `answers` (param answers echo the name).
fn named<'a>(answers: &'a [Value], name: &str) -> &'a Value {
    answers
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no answer for {name:?} in {answers:#?}"))
}

#[test]
fn a_tiny_float_step_through_suggest_is_refused_and_optuna_still_reads_the_study() {
    // Optuna's constructor computes (high - low) % step with 28-digit decimals: 1e30 steps
    // raise decimal.InvalidOperation, and so would every `study.trials` after it was stored.
    let raw = Raw::new();
    let send = [
        suggest("x", &float_dist("0.0", "1.0", "1e-30")),
        suggest("y", &float_dist("0.0", "1.0", "0.25")),
    ];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let sweep = Sweep::new(&raw.cfg("tiny", 2, &send, &[]));
    run_ok(&sweep);
    for number in 0..2 {
        let answers = raw.answers(number, "param");
        let why = named(&answers, "x")["error"].as_str().unwrap_or_default();
        assert!(why.contains("InvalidOperation"), "{answers:#?}");
        assert!(named(&answers, "y")["value"].is_number(), "{answers:#?}");
    }
    let dump = optuna_dump(sweep.db.to_str().unwrap(), "tiny");
    for t in dump["trials"].as_array().unwrap() {
        assert_eq!(t["state"], "COMPLETE", "{t}");
        let names: Vec<&String> = t["params"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["y"], "{t}");
    }
}

#[test]
fn names_check_forbids_are_refused_through_suggest_too() {
    let raw = Raw::new();
    let dist = float_dist("0.0", "1.0", "null");
    let send = [
        suggest("", &dist),
        suggest("a\0b", &dist),
        suggest("sweepd:x", &dist),
        suggest("ok", &dist),
    ];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let sweep = Sweep::new(&raw.cfg("names", 1, &send, &[]));
    run_ok(&sweep);
    let answers = raw.answers(0, "param");
    for (name, why) in [("", "empty"), ("a\0b", "NUL"), ("sweepd:x", "sweepd:")] {
        let error = named(&answers, name)["error"].as_str().unwrap_or_default();
        assert!(error.contains(why), "{name:?}: {answers:#?}");
    }
    assert!(named(&answers, "ok")["value"].is_number(), "{answers:#?}");
    assert_eq!(
        sweep.sql("SELECT param_name FROM trial_params ORDER BY param_id"),
        ["ok"]
    );
}

/// The user attribute keys a trial of `cfg` stored, as "length:first char" (a 512-character
/// key reads short), sorted.
fn stored_keys(keys: Vec<String>) -> Vec<String> {
    let mut keys: Vec<String> = keys
        .iter()
        .map(|k| format!("{}:{}", k.chars().count(), k.chars().next().unwrap_or(' ')))
        .collect();
    keys.sort();
    keys
}

#[test]
fn user_attr_keys_postgresql_cannot_store_are_refused_alike_on_sqlite_and_postgresql() {
    let long = "k".repeat(600);
    let longest = "m".repeat(512);
    let send = [
        user_attr(&long, "1"),
        user_attr("a\0b", "2"),
        user_attr("sweepd:fail_reason", "\"forged\""),
        user_attr(&longest, "3"),
        user_attr("ok", "4"),
    ];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let keys_sql = "SELECT key FROM trial_user_attributes ORDER BY key";
    // SQLite.
    let raw = Raw::new();
    let sweep = Sweep::new(&raw.cfg("attrs", 1, &send, &[]));
    run_ok(&sweep);
    let on_sqlite = stored_keys(sweep.sql(keys_sql));
    let refused_sqlite = raw.answers(0, "user_attr_refused");
    // PostgreSQL.
    let server = PgServer::start();
    let url = server.create_db("attrs");
    let raw_pg = Raw::new();
    let cfg = Cfg {
        storage: Some(format!("url = \"{url}\"")),
        ..raw_pg.cfg("attrs", 1, &send, &[])
    };
    run_ok(&Sweep::new(&cfg));
    let on_postgres = stored_keys(pg_column(&url, keys_sql));
    let refused_pg = raw_pg.answers(0, "user_attr_refused");

    assert_eq!(on_sqlite, ["2:o", "512:m"], "SQLite");
    assert_eq!(on_postgres, on_sqlite, "PostgreSQL stores what SQLite does");
    let keys = |answers: &[Value]| -> Vec<String> {
        answers
            .iter()
            .map(|a| a["key"].as_str().unwrap().chars().take(8).collect())
            .collect()
    };
    assert_eq!(keys(&refused_sqlite), ["kkkkkkkk", "a\0b", "sweepd:f"]);
    assert_eq!(keys(&refused_pg), keys(&refused_sqlite));
    for a in &refused_sqlite {
        assert!(a["error"].as_str().is_some_and(|e| !e.is_empty()), "{a}");
    }
}

#[test]
fn categorical_integers_beyond_64_bits_are_refused_and_those_within_come_back_exactly() {
    let raw = Raw::new();
    let send = [
        suggest("c", &categorical("18446744073709551616, 1")),
        suggest("d", &categorical("-9223372036854775809, 2")),
        suggest("e", &categorical("18446744073709551615")),
        suggest("f", &categorical("-9223372036854775808")),
    ];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let sweep = Sweep::new(&raw.cfg("ints", 1, &send, &[]));
    run_ok(&sweep);
    let answers = raw.answers(0, "param");
    for (name, int) in [("c", "18446744073709551616"), ("d", "-9223372036854775809")] {
        let error = named(&answers, name)["error"].as_str().unwrap_or_default();
        assert!(error.contains(int), "{name}: {answers:#?}");
    }
    // The record was written by Python's json: integers are exact there, and in serde_json
    // within 64 bits.
    assert_eq!(named(&answers, "e")["value"], 18446744073709551615u64);
    assert_eq!(named(&answers, "f")["value"], i64::MIN);
    let dump = optuna_dump(sweep.db.to_str().unwrap(), "ints");
    let t = &dump["trials"][0];
    assert_eq!(t["params"]["e"], 18446744073709551615u64, "{t}");
    assert_eq!(t["params"]["f"], i64::MIN, "{t}");
    assert!(t["params"].get("c").is_none() && t["params"].get("d").is_none());
}

#[test]
fn a_report_at_a_negative_step_is_refused_not_stored() {
    let raw = Raw::new();
    let report = |step: &str| {
        format!(r#"{{"type":"report","trial_id":TRIAL_ID,"step":{step},"value":0.5}}"#)
    };
    // PostgreSQL's step column is an INTEGER: a larger step is refused on both engines.
    let send = [report("-5"), report("2147483648"), report("3")];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let sweep = Sweep::new(&raw.cfg("steps", 1, &send, &[]));
    run_ok(&sweep);
    let answers = raw.answers(0, "prune");
    assert_eq!(answers.len(), 3, "{answers:#?}");
    assert!(
        answers[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("must be non-negative")),
        "{answers:#?}"
    );
    assert!(answers[1]["error"].is_string(), "{answers:#?}");
    assert!(answers[2].get("error").is_none(), "{answers:#?}");
    assert_eq!(
        sweep.sql("SELECT step FROM trial_intermediate_values ORDER BY step"),
        ["3"]
    );
    let dump = optuna_dump(sweep.db.to_str().unwrap(), "steps");
    assert_eq!(
        dump["trials"][0]["intermediate_values"],
        serde_json::json!({"3": 0.5})
    );
}

#[test]
fn json_nested_200_deep_is_called_nested_too_deep_not_not_a_json_object() {
    let raw = Raw::new();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let send = [user_attr("deep", &deep)];
    let send: Vec<&str> = send.iter().map(String::as_str).collect();
    let sweep = Sweep::new(&raw.cfg("deep", 1, &send, &[]));
    let _ = sweep.run(&[], LIMIT);
    let trials = sweep.trials();
    let reason = trials[0]["fail_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("nested too deep"), "{:#?}", trials[0]);
    assert!(!reason.contains("not a JSON object"), "{reason}");
}

#[test]
fn a_late_user_attr_leaves_the_next_trial_complete() {
    let raw = Raw::new();
    let late = user_attr("late", "1");
    let sweep = Sweep::new(&raw.cfg("late", 3, &[], &[&late]));
    let out = run_ok(&sweep);
    let trials = sweep.trials();
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["COMPLETE"; 3], "{trials:#?}");
    assert!(
        sweep
            .sql("SELECT key FROM trial_user_attributes WHERE key = 'late'")
            .is_empty(),
        "a late attribute is not recorded"
    );
    let log = stderr(&out);
    assert!(log.contains("already ended"), "the drop is logged:\n{log}");
}

/// The most memory the process has held (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

fn open_gate(gates: &Path, number: i64) {
    std::fs::write(gates.join(number.to_string()), "").unwrap();
}

/// Waits until trial `number` is in one of `states`.
fn wait_state(sweep: &Sweep, number: usize, states: &[&str]) {
    wait_until(LIMIT, &format!("trial {number} in {states:?}"), || {
        sweep
            .trials()
            .get(number)
            .is_some_and(|t| states.contains(&t["state"].as_str().unwrap_or_default()))
    });
}

#[test]
fn a_600_mb_result_file_or_protocol_line_keeps_the_daemon_under_a_bound() {
    // Trial 1 writes a 600 MB result file, trial 2 sends a 600 MB protocol line; each waits
    // for its gate, so that the daemon's peak is read before and after each, with the daemon
    // still running (trial 3 waits too).
    let raw = Raw::new();
    let gates = raw.path("gates");
    std::fs::create_dir(&gates).unwrap();
    let cfg = Cfg {
        mode: "oneshot",
        ..raw.cfg("big", 4, &[], &[])
    }
    .env("SWEEPD_TEST_GATE_DIR", gates.to_str().unwrap())
    .env("SWEEPD_TEST_BIG", "result:1,line:2");
    let sweep = Sweep::new(&cfg);
    open_gate(&gates, 0);
    let mut daemon = sweep.spawn_run();
    wait_state(&sweep, 0, &["COMPLETE"]);
    wait_state(&sweep, 1, &["RUNNING"]);
    let baseline = peak_rss(daemon.id());
    for number in [1, 2] {
        open_gate(&gates, number);
        wait_state(&sweep, number as usize, &["FAIL"]);
        wait_state(&sweep, number as usize + 1, &["RUNNING"]);
    }
    let peak = peak_rss(daemon.id());
    open_gate(&gates, 3);
    let deadline = Instant::now() + LIMIT;
    while daemon.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let trials = sweep.trials();
    assert_eq!(trials[1]["fail_kind"], "bad_value", "{:#?}", trials[1]);
    assert_eq!(trials[2]["fail_kind"], "protocol", "{:#?}", trials[2]);
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < 100 << 20,
        "the daemon's peak grew by {} MiB (from {} MiB)",
        grown >> 20,
        baseline >> 20
    );
}

// ---- `check` refuses what `run` cannot do

/// `sweepd check` of `cfg`.
fn check(cfg: &Cfg) -> Output {
    let sweep = Sweep::new(cfg);
    sweep.sweepd(&["check"]).output().unwrap()
}

fn assert_refused(out: &Output, key: &str, what: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "expected exit 2:\n{err}");
    assert!(
        err.contains(&format!("`{key}`")),
        "should name `{key}`:\n{err}"
    );
    assert!(err.contains(what), "should say {what:?}:\n{err}");
}

#[test]
fn check_refuses_int_params_beyond_2_pow_53_that_would_be_stored_rounded() {
    let cfg = Cfg {
        params: "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 3864557551897539457\n".into(),
        ..Cfg::default()
    };
    assert_refused(&check(&cfg), "params.n.high", "2^53");
}

#[test]
fn check_refuses_a_startup_timeout_of_1ns() {
    let cfg = Cfg {
        worker_extra: "startup_timeout = \"1ns\"\n".into(),
        ..Cfg::default()
    };
    assert_refused(&check(&cfg), "worker.startup_timeout", "at least 1s");
}

#[test]
fn check_refuses_a_pythonpath_that_hides_the_helper() {
    let hides = Cfg::default().env("PYTHONPATH", "/nonexistent/lib");
    assert_refused(&check(&hides), "worker.env.PYTHONPATH", "sweepd_worker");
    // One that keeps the helper's directory is fine.
    let helper = repo().join("python");
    let keeps = Cfg::default().env(
        "PYTHONPATH",
        &format!("/nonexistent/lib:{}", helper.display()),
    );
    let out = check(&keeps);
    assert!(out.status.success(), "{}", stderr(&out));
}
