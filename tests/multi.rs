//! Studies with several objectives, end to end: the real daemon, real workers returning
//! tuples, and real Optuna reading what sweepd wrote (`study.directions`, every trial's
//! `values`, `study.best_trials` against `sweepd best --json`).

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// A study of (loss: minimize, accuracy: maximize) on `multi_worker.py`.
fn multi(name: &str, sampler: &'static str, n_trials: u64) -> Cfg {
    Cfg {
        name: name.into(),
        n_trials: Some(n_trials),
        max_par: 2,
        sampler,
        command: vec![
            python(),
            repo()
                .join("tests/workers/multi_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        ..Cfg::default()
    }
}

/// The config of `cfg` with two objectives, and `tables` (e.g. `[sampler]`) at its end.
fn toml(cfg: &Cfg, tables: &str) -> String {
    let text = cfg.to_toml().replace(
        "direction = \"minimize\"\n",
        "directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\", \"accuracy\"]\n",
    );
    format!("{text}\n{tables}")
}

fn json_of(sweep: &Sweep, args: &[&str]) -> Value {
    let out = sweep.sweepd(args).output().expect("sweepd");
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn front(sweep: &Sweep, name: &str, action: &[&str]) -> Value {
    let mut args = vec![name];
    args.extend_from_slice(action);
    serde_json::from_str(&sweep.optuna("optuna_front.py", &args)).expect("front JSON")
}

/// (number, values) of each trial of `sweepd best --json`.
fn ours(best: &Value) -> Vec<(i64, Value)> {
    best.as_array()
        .expect("an array: the Pareto front")
        .iter()
        .map(|t| (t["number"].as_i64().unwrap(), t["values"].clone()))
        .collect()
}

fn theirs(front: &Value) -> Vec<(i64, Value)> {
    front["best_trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["number"].as_i64().unwrap(), t["values"].clone()))
        .collect()
}

#[test]
fn optuna_reads_the_directions_every_trials_values_and_sweepd_best_is_its_best_trials() {
    let cfg = multi("mo", "tpe", 24).env("SWEEPD_TEST_MULTI", "3:inf,5:count,6:nan,8:text");
    let sweep = Sweep::with_toml(&toml(&cfg, "[sampler]\nn_startup_trials = 8\n"));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));

    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &["mo"])).unwrap();
    assert_eq!(dump["directions"], json!(["MINIMIZE", "MAXIMIZE"]));
    let mine = sweep.trials();
    let optunas = dump["trials"].as_array().unwrap();
    assert_eq!(mine.len(), optunas.len());
    let mut complete = 0;
    for (a, b) in mine.iter().zip(optunas) {
        assert_eq!(a["number"], b["number"]);
        assert_eq!(a["state"], b["state"], "trial {}", a["number"]);
        if b["state"] == "COMPLETE" {
            complete += 1;
            assert_eq!(b["values"].as_array().unwrap().len(), 2);
            assert_eq!(a["values"], b["values"], "trial {}", a["number"]);
        } else {
            assert_eq!(b["values"], Value::Null);
        }
    }
    assert_eq!(complete, 21, "24 trials, 3 of them bad values: {mine:#?}");
    // Infinities as Optuna stores them; the bad values failed as bad_value, not retried.
    let by_number = |n: i64| mine.iter().find(|t| t["number"] == n).unwrap().clone();
    assert_eq!(by_number(3)["values"], json!(["inf", "-inf"]));
    assert_eq!(
        sweep.sql(
            "SELECT value_type FROM trial_values v JOIN trials t USING (trial_id) \
             WHERE t.number = 3 ORDER BY objective"
        ),
        ["INF_POS", "INF_NEG"]
    );
    for (n, says) in [
        (
            5,
            "the objective returned 3 values but the study has 2 objectives",
        ),
        (6, "the objective returned NaN for objective 1"),
        (8, "non-number: ("),
    ] {
        let t = by_number(n);
        assert_eq!(t["state"], "FAIL");
        assert_eq!(t["fail_kind"], "bad_value");
        assert!(
            t["fail_reason"].as_str().unwrap().contains(says),
            "{n}: {}",
            t["fail_reason"]
        );
    }

    let optuna = front(&sweep, "mo", &[]);
    assert_eq!(optuna["metric_names"], json!(["loss", "accuracy"]));
    let best = json_of(&sweep, &["best", "--json"]);
    assert!(!theirs(&optuna).is_empty());
    assert_eq!(ours(&best), theirs(&optuna));

    // optuna-dashboard's own API, as its page reads it to draw the Pareto-front plot: the
    // objectives' names and the same front.
    let dash: Value =
        serde_json::from_str(&sweep.optuna("dashboard_front.py", &["mo"])).expect("JSON");
    assert_eq!(dash["directions"], json!(["minimize", "maximize"]));
    assert_eq!(dash["objective_names"], json!(["loss", "accuracy"]));
    let numbers: Vec<i64> = ours(&best).into_iter().map(|t| t.0).collect();
    assert_eq!(dash["best_trials"], json!(numbers));
    let shown = dash["trials"].as_array().unwrap();
    assert_eq!(shown.len(), mine.len());
    assert_eq!(shown[3]["values"], json!(["inf", "-inf"]));

    // The CSV names its value columns as Optuna's trials_dataframe does.
    let csv = sweep.sweepd(&["best", "--csv"]).output().unwrap();
    let csv = String::from_utf8(csv.stdout).unwrap();
    assert!(
        csv.starts_with("number,state,values_loss,values_accuracy,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 1 + theirs(&optuna).len());

    // status: the front's size and each objective's best on it.
    let status = json_of(&sweep, &["status", "--json"]);
    assert_eq!(status["directions"], json!(["MINIMIZE", "MAXIMIZE"]));
    assert_eq!(status["pareto_front"]["size"], theirs(&optuna).len());
    let bests = status["pareto_front"]["best"].as_array().unwrap().clone();
    assert_eq!(bests[0]["name"], "loss");
    let values: Vec<Vec<Value>> = theirs(&optuna)
        .into_iter()
        .map(|t| t.1.as_array().unwrap().clone())
        .collect();
    let min_loss = values
        .iter()
        .filter_map(|v| v[0].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(bests[0]["value"].as_f64(), Some(min_loss));
    let text = sweep.sweepd(&["status"]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "front     {} trials on the Pareto front",
            values.len()
        )),
        "{text}"
    );
    assert!(text.contains("best accuracy (MAXIMIZE): "), "{text}");
}

#[test]
fn constraints_are_honoured_by_the_front_and_nsga2_continues_from_them() {
    let cfg = multi("con", "nsga2", 12);
    let text = toml(&cfg, "[sampler]\npopulation_size = 4\n");
    let sweep = Sweep::with_toml(&text);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    // Optuna adds an infeasible trial better than all, and a feasible one.
    let optuna = front(&sweep, "con", &["add-constrained"]);
    let best = theirs(&optuna);
    assert_eq!(best.len(), 1, "the feasible trial dominates all: {optuna}");
    assert_eq!(best[0].0, 13);
    assert_eq!(ours(&json_of(&sweep, &["best", "--json"])), best);
    // NSGA-II picks the study up with the constrained trials in it.
    std::fs::write(
        &sweep.config,
        text.replace("n_trials = 12", "n_trials = 20"),
    )
    .unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 20);
    let optuna = front(&sweep, "con", &[]);
    assert_eq!(ours(&json_of(&sweep, &["best", "--json"])), theirs(&optuna));
}

#[test]
fn a_report_in_a_study_with_several_objectives_gets_a_clear_error() {
    let cfg = multi("rep", "random", 3).env("SWEEPD_TEST_MULTI", "1:report");
    let sweep = Sweep::with_toml(&toml(&cfg, ""));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = &sweep.trials()[1];
    assert_eq!(t["state"], "FAIL");
    assert_eq!(t["fail_kind"], "user_error");
    let reason = t["fail_reason"].as_str().unwrap();
    assert!(
        reason.contains("NotImplementedError")
            && reason.contains("Trial.report is not supported for multi-objective optimization"),
        "{reason}"
    );
    assert_eq!(
        sweep.sql("SELECT COUNT(*) FROM trial_intermediate_values"),
        ["0"]
    );
    assert_eq!(sweep.count("COMPLETE"), 2);
}

#[test]
fn check_refuses_a_pruner_with_several_objectives() {
    let cfg = multi("pr", "random", 3);
    let sweep = Sweep::with_toml(&toml(&cfg, "[pruner]\ntype = \"median\"\n"));
    let out = sweep.sweepd(&["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("`pruner.type`: pruning is not supported with several objectives"),
        "{err}"
    );
}

#[test]
fn oneshot_workers_return_several_values_through_the_result_file() {
    let mut cfg = multi("one", "nsga2", 6);
    cfg.mode = "oneshot";
    let sweep = Sweep::with_toml(&toml(&cfg, "[sampler]\npopulation_size = 2\n"));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 6);
    for t in sweep.trials() {
        assert_eq!(t["values"].as_array().map(Vec::len), Some(2), "{t}");
    }
    let optuna = front(&sweep, "one", &[]);
    assert_eq!(ours(&json_of(&sweep, &["best", "--json"])), theirs(&optuna));
}

#[test]
fn a_study_keeps_the_objectives_it_was_created_with() {
    let one = Cfg {
        name: "keep".into(),
        n_trials: Some(2),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&one);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    // The same study with two objectives: refused, nothing written.
    std::fs::write(&sweep.config, toml(&multi("keep", "tpe", 4), "")).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is MINIMIZE, but the config says MINIMIZE, MAXIMIZE"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        sweep.sql("SELECT COUNT(*) FROM study_directions"),
        ["1"],
        "no direction added"
    );
    // A study created with two objectives refuses one, and the same two in another order.
    let two = Sweep::with_toml(&toml(&multi("two", "random", 2), ""));
    let out = two.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    for (from, to) in [
        (
            "directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\", \"accuracy\"]",
            "direction = \"minimize\"",
        ),
        (
            "directions = [\"minimize\", \"maximize\"]",
            "directions = [\"maximize\", \"minimize\"]",
        ),
    ] {
        let text = toml(&multi("two", "random", 4), "").replace(from, to);
        std::fs::write(&two.config, text).unwrap();
        let out = two.run(&[], LIMIT);
        assert_eq!(out.status.code(), Some(3), "{to}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is MINIMIZE, MAXIMIZE, but the config says"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn the_pareto_example_runs_as_shipped() {
    let sweep = Sweep::with_toml("");
    for f in ["pareto.toml", "pareto_worker.py"] {
        std::fs::copy(repo().join("examples").join(f), sweep.path(f)).unwrap();
    }
    let text = std::fs::read_to_string(sweep.path("pareto.toml"))
        .unwrap()
        .replace("n_trials = 120", "n_trials = 30")
        .replace("\"python3\"", &format!("{:?}", python()))
        .replace("sqlite:///pareto.db", "sqlite:///study.db");
    std::fs::write(&sweep.config, text).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 30);
    let optuna = front(&sweep, "pareto-example", &[]);
    assert_eq!(optuna["metric_names"], json!(["val_loss", "latency_ms"]));
    assert!(theirs(&optuna).len() >= 2, "a trade-off: {optuna}");
    assert_eq!(ours(&json_of(&sweep, &["best", "--json"])), theirs(&optuna));
}
