//! Real Optuna (from PyPI, in the test venv) reads what sweepd writes, and sweepd continues
//! what Optuna wrote.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn dump(sweep: &Sweep, study: &str) -> Value {
    serde_json::from_str(&sweep.optuna("optuna_dump.py", &[study])).expect("dump JSON")
}

#[test]
fn optuna_load_study_reads_every_trial_as_sweepd_recorded_it() {
    let cfg = Cfg {
        name: "compat".into(),
        n_trials: Some(8),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RAISE_ON", "3");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    // A WAITING trial, enqueued the way Optuna users do.
    let n = sweep.optuna(
        "optuna_enqueue.py",
        &["compat", r#"{"x": 0.5, "opt": "sgd", "n": 4, "lr": 0.001}"#],
    );
    assert_eq!(n.trim(), "8");
    let ours = sweep.trials();
    let theirs = dump(&sweep, "compat");
    assert_eq!(theirs["direction"], "MINIMIZE");
    let theirs = theirs["trials"].as_array().unwrap();
    assert_eq!(ours.len(), 9);
    assert_eq!(theirs.len(), 9);
    let mut seen_states = std::collections::HashSet::new();
    for (a, b) in ours.iter().zip(theirs) {
        assert_eq!(a["number"], b["number"]);
        assert_eq!(a["state"], b["state"], "trial {}", a["number"]);
        seen_states.insert(a["state"].as_str().unwrap().to_owned());
        assert_eq!(a["value"], b["value"], "trial {}", a["number"]);
        if a["state"] != "WAITING" {
            // Every param, with its type: log float, int with step, categorical.
            assert_eq!(a["params"], b["params"], "trial {}", a["number"]);
            assert_eq!(
                b["distributions"]["lr"],
                json!({"name": "FloatDistribution", "attributes": {"low": 1e-5, "high": 0.1, "step": null, "log": true}})
            );
            assert_eq!(
                b["distributions"]["n"],
                json!({"name": "IntDistribution", "attributes": {"low": 0, "high": 10, "step": 2, "log": false}})
            );
            assert_eq!(b["distributions"]["opt"]["name"], "CategoricalDistribution");
            assert!(b["params"]["n"].is_i64());
            assert!(b["params"]["opt"].is_string());
        }
        if a["state"] == "COMPLETE" {
            assert_eq!(b["intermediate_values"].as_object().unwrap().len(), 3);
            assert!(b["datetime_complete"].is_string());
        }
        if a["state"] == "FAIL" {
            assert!(b["system_attrs"]["fail_reason"]
                .as_str()
                .unwrap()
                .contains("ValueError"));
        }
    }
    for s in ["COMPLETE", "FAIL", "WAITING"] {
        assert!(seen_states.contains(s), "{s} covered");
    }
    // The enqueued trial runs first on the next run, with exactly the enqueued params.
    std::fs::write(
        &sweep.config,
        cfg.to_toml().replace("n_trials = 8", "n_trials = 9"),
    )
    .unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = &sweep.trials()[8];
    assert_eq!(t["state"], "COMPLETE");
    assert_eq!(
        t["params"],
        json!({"x": 0.5, "opt": "sgd", "n": 4, "lr": 0.001})
    );
    let again = dump(&sweep, "compat");
    assert_eq!(again["trials"][8]["params"], t["params"]);
    assert_eq!(again["trials"][8]["state"], "COMPLETE");
}

#[test]
fn enqueued_partial_params_are_completed_by_the_sampler() {
    let cfg = Cfg {
        name: "partial".into(),
        n_trials: Some(1),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    assert!(sweep.run(&[], LIMIT).status.success());
    sweep.optuna("optuna_enqueue.py", &["partial", r#"{"opt": "rmsprop"}"#]);
    std::fs::write(
        &sweep.config,
        cfg.to_toml().replace("n_trials = 1", "n_trials = 2"),
    )
    .unwrap();
    assert!(sweep.run(&[], LIMIT).status.success());
    let t = &sweep.trials()[1];
    assert_eq!(t["state"], "COMPLETE");
    assert_eq!(t["params"]["opt"], "rmsprop");
    assert!(t["params"]["x"].is_f64() && t["params"]["n"].is_i64());
    assert_eq!(dump(&sweep, "partial")["trials"][1]["params"], t["params"]);
}

#[test]
fn sweepd_continues_a_study_that_optuna_created() {
    let cfg = Cfg {
        name: "from-optuna".into(),
        n_trials: Some(7),
        params: r#"
[params.x]
type = "float"
low = -5.0
high = 5.0
[params.opt]
type = "categorical"
choices = ["adam", "sgd", "rmsprop"]
"#
        .into(),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    sweep.optuna("optuna_create.py", &["from-optuna", "minimize", "3"]);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let theirs = dump(&sweep, "from-optuna");
    let trials = theirs["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 7, "3 from optuna + 4 from sweepd");
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["number"], i);
        assert_eq!(t["state"], "COMPLETE");
    }
}

#[test]
fn a_schema_from_another_optuna_version_is_refused() {
    let out = rerun_after(
        "UPDATE alembic_version SET version_num = 'v3.0.0.d' RETURNING version_num",
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("incompatible Optuna version") && err.contains("v3.0.0.d"),
        "{err}"
    );
}

#[test]
fn a_study_of_the_other_direction_is_refused() {
    let cfg = Cfg {
        n_trials: Some(1),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    assert!(sweep.run(&[], LIMIT).status.success());
    std::fs::write(&sweep.config, cfg.to_toml().replace("minimize", "maximize")).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("MINIMIZE"), "{}", stderr(&out));
}

#[test]
fn the_sweepd_trials_view_answers_hand_written_queries() {
    let cfg = Cfg {
        n_trials: Some(3),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    assert!(sweep.run(&[], LIMIT).status.success());
    let params = sweep.sql("SELECT params FROM sweepd_trials ORDER BY number");
    let ours = sweep.trials();
    for (p, t) in params.iter().zip(&ours) {
        let p: Value = serde_json::from_str(p).unwrap();
        assert_eq!(p["opt"], t["params"]["opt"]);
        assert_eq!(p["n"], t["params"]["n"]);
    }
    let pids = sweep.sql("SELECT worker_pid FROM sweepd_trials WHERE worker_pid IS NOT NULL");
    assert_eq!(pids.len(), 3);
}

/// The sweepd tables that have rows, with their counts: every `sweepd_*` table holds rows of
/// one study or of its trials.
fn sweepd_rows(sweep: &Sweep) -> Vec<(String, String)> {
    sweep
        .sql("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sweepd\\_%' ESCAPE '\\'")
        .into_iter()
        .map(|t| {
            let n = sweep.sql(&format!("SELECT count(*) FROM {t}"))[0].clone();
            (t, n)
        })
        .filter(|(_, n)| n != "0")
        .collect()
}

/// A sweepd study run to its end, deleted with `optuna.delete_study` (with or without foreign
/// keys enforced on Optuna's connection), then a new study of the same name run by sweepd.
fn delete_with_optuna_then_run_the_name_again(foreign_keys: bool) {
    let cfg = Cfg {
        name: "gone".into(),
        n_trials: Some(4),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RAISE_ON", "1");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(sweep.sweepd(&["resume"]).output().unwrap().status.success());
    let id = sweep.sql("SELECT study_id FROM studies WHERE study_name = 'gone'");
    // Tell the old rows from the ones the new study will get.
    sweep.sql("UPDATE sweepd_workers SET host = 'old study'");
    sweep.sql("UPDATE sweepd_worker_events SET detail = 'old study'");
    let before: Vec<String> = sweepd_rows(&sweep).into_iter().map(|(t, _)| t).collect();
    for t in [
        "sweepd_workers",
        "sweepd_worker_events",
        "sweepd_daemon",
        "sweepd_commands",
    ] {
        assert!(
            before.iter().any(|b| b == t),
            "{t} has rows before the delete"
        );
    }
    assert_eq!(sweep.sql("SELECT count(*) FROM sweepd_trials"), ["4"]);
    assert_eq!(
        sweep.sql("SELECT count(*) FROM sweepd_worker_events WHERE trial_id IS NOT NULL"),
        ["1"],
        "the failed trial's event"
    );
    let mut args = vec!["gone"];
    if foreign_keys {
        args.push("--foreign-keys");
    }
    let said: Value = serde_json::from_str(&sweep.optuna("optuna_delete.py", &args)).unwrap();
    assert_eq!(said["foreign_keys"], json!(foreign_keys as i64));
    assert_eq!(sweep.sql("SELECT count(*) FROM trials"), ["0"]);
    assert_eq!(
        sweepd_rows(&sweep),
        [],
        "sweepd rows left by the deleted study"
    );
    // SQLite gives the new study the id of the deleted one: it must start with nothing of it.
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sweep.sql("SELECT study_id FROM studies WHERE study_name = 'gone'"),
        id,
        "the id is reused (else this test proves nothing)"
    );
    assert_eq!(
        sweep.sql(
            "SELECT (SELECT count(*) FROM sweepd_workers WHERE host = 'old study') \
             + (SELECT count(*) FROM sweepd_worker_events WHERE detail = 'old study')"
        ),
        ["0"],
        "the new study inherited the old one's workers or events"
    );
    let numbers: Vec<i64> = sweep
        .trials()
        .iter()
        .map(|t| t["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [0, 1, 2, 3]);
    assert_eq!(
        sweep.sql("SELECT count(*) FROM sweepd_trials WHERE study_name = 'gone'"),
        ["4"]
    );
}

#[test]
fn optuna_delete_study_leaves_no_sweepd_rows_for_a_new_study_of_the_same_name() {
    // Regression: sweepd's workers, events, daemon and command rows outlived the study, and a
    // new study of the same name (same reused id) inherited them.
    delete_with_optuna_then_run_the_name_again(false);
}

#[test]
fn optuna_delete_study_with_foreign_keys_enforced_deletes_the_study() {
    // Regression: sweepd's tables referenced studies and trials by FOREIGN KEY, so with
    // foreign keys on in Optuna's connection the delete failed, and Optuna swallowed the
    // error: the study silently stayed.
    delete_with_optuna_then_run_the_name_again(true);
}

/// The view `sweepd_trials` had (migration 0002), evaluated on Optuna's tables as they are
/// now: what the `sweepd_trials` table must hold, row for row.
const SWEEPD_TRIALS_AS_THE_VIEW_WAS: &str = "
SELECT json_array(s.study_name, t.trial_id, t.number, t.state, v.value, v.value_type,
    (SELECT json_group_object(p.param_name,
                CASE
                    WHEN json_extract(p.distribution_json, '$.name') = 'CategoricalDistribution' THEN
                        CASE json_type(p.distribution_json,
                                       '$.attributes.choices[' || CAST(p.param_value AS INTEGER) || ']')
                            WHEN 'true' THEN json('true')
                            WHEN 'false' THEN json('false')
                            ELSE json_extract(p.distribution_json,
                                              '$.attributes.choices[' || CAST(p.param_value AS INTEGER) || ']')
                        END
                    WHEN json_extract(p.distribution_json, '$.name')
                         IN ('IntDistribution', 'IntUniformDistribution', 'IntLogUniformDistribution') THEN
                        CAST(p.param_value AS INTEGER)
                    ELSE p.param_value
                END)
       FROM (SELECT param_name, param_value, distribution_json
               FROM trial_params
              WHERE trial_id = t.trial_id
              ORDER BY param_id) AS p),
    t.datetime_start,
    t.datetime_complete,
    (julianday(t.datetime_complete) - julianday(t.datetime_start)) * 86400.0,
    (SELECT json_extract(a.value_json, '$')
       FROM trial_system_attributes AS a
      WHERE a.trial_id = t.trial_id AND a.\"key\" = 'sweepd:worker_id'),
    (SELECT json_extract(a.value_json, '$')
       FROM trial_system_attributes AS a
      WHERE a.trial_id = t.trial_id AND a.\"key\" = 'sweepd:worker_pid'),
    (SELECT json_extract(a.value_json, '$')
       FROM trial_system_attributes AS a
      WHERE a.trial_id = t.trial_id AND a.\"key\" = 'fail_reason'))
FROM trials AS t
JOIN studies AS s ON s.study_id = t.study_id
LEFT JOIN trial_values AS v ON v.trial_id = t.trial_id AND v.objective = 0
ORDER BY t.trial_id";

const SWEEPD_TRIALS_ROWS: &str = "
SELECT json_array(study_name, trial_id, number, state, value, value_type, json(params),
                  datetime_start, datetime_complete, duration_s, worker_id, worker_pid, fail_reason)
FROM sweepd_trials ORDER BY trial_id";

#[test]
fn optuna_migrations_that_rebuild_tables_succeed_on_a_sweepd_database() {
    // Regression: the view sweepd_trials named Optuna's tables, and SQLite re-checks every
    // view when alembic renames a rebuilt table into place: Optuna's own migration v3.0.0.d
    // failed with "error in view sweepd_trials: no such table: main.trial_values".
    let cfg = Cfg {
        name: "migrated".into(),
        n_trials: Some(6),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RAISE_ON", "2");
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let said: Value = serde_json::from_str(&sweep.optuna("optuna_migrate.py", &[])).unwrap();
    assert_eq!(said["revision"], "v3.2.0.a", "{said}");
    // Optuna itself still reads the study, and writes to it with sweepd's triggers gone.
    sweep.optuna("optuna_create.py", &["migrated-by-optuna", "minimize", "2"]);
    assert_eq!(
        dump(&sweep, "migrated")["trials"].as_array().unwrap().len(),
        6
    );
    // sweepd opens the migrated file, puts its triggers back and runs more trials.
    std::fs::write(
        &sweep.config,
        cfg.to_toml().replace("n_trials = 6", "n_trials = 9"),
    )
    .unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 9);
    assert!(trials.iter().any(|t| t["state"] == "FAIL"), "{trials:?}");
    // sweepd_trials shows every trial, of both studies, as the view would have.
    let want = sweep.sql(SWEEPD_TRIALS_AS_THE_VIEW_WAS);
    assert_eq!(want.len(), 11);
    assert_eq!(sweep.sql(SWEEPD_TRIALS_ROWS), want);
    // And stays so as Optuna writes.
    sweep.optuna("optuna_create.py", &["migrated-by-optuna", "minimize", "4"]);
    assert_eq!(
        sweep.sql(SWEEPD_TRIALS_ROWS),
        sweep.sql(SWEEPD_TRIALS_AS_THE_VIEW_WAS)
    );
}

#[test]
fn optuna_copy_study_and_cli_work_on_a_sweepd_database() {
    let cfg = Cfg {
        name: "original".into(),
        n_trials: Some(4),
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let said: Value =
        serde_json::from_str(&sweep.optuna("optuna_copy.py", &["original", "copy"])).unwrap();
    let listed: Vec<(Value, Value)> = said["studies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].clone(), s["n_trials"].clone()))
        .collect();
    assert_eq!(
        listed,
        [(json!("original"), json!(4)), (json!("copy"), json!(4))]
    );
    // The copy's rows, written by Optuna, show in sweepd_trials like sweepd's own.
    let rows = sweep.sql(SWEEPD_TRIALS_ROWS);
    assert_eq!(rows.len(), 8);
    assert_eq!(rows, sweep.sql(SWEEPD_TRIALS_AS_THE_VIEW_WAS));
    // Deleting the copy takes only the copy's rows.
    sweep.optuna("optuna_delete.py", &["copy"]);
    assert_eq!(
        sweep.sql("SELECT DISTINCT study_name FROM sweepd_trials"),
        ["original"]
    );
    assert_eq!(sweep.sql("SELECT count(*) FROM sweepd_workers"), ["2"]);
    assert_eq!(
        dump(&sweep, "original")["trials"].as_array().unwrap().len(),
        4
    );
}

#[test]
fn deleting_the_study_under_a_running_daemon_stops_it_and_says_so() {
    // Regression: a daemon whose study optuna.delete_study removed went on until a write
    // failed, then exited 3 with "FOREIGN KEY constraint failed", not saying why.
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        name: "live".into(),
        n_trials: Some(100),
        max_par: 2,
        // Long trials and a long grace: the trials of a deleted study must be killed at once.
        shutdown_grace: "60s",
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "60")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two running trials", || {
        sweep.db.exists() && recorded(record.path()).len() == 2
    });
    sweep.optuna("optuna_delete.py", &["live"]);
    let status = wait_output(child, LIMIT).status;
    let err = sweep.daemon_stderr();
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(
        err.contains("study `live` was deleted from") && err.contains("optuna.delete_study?"),
        "{err}"
    );
    assert!(!err.contains("FOREIGN KEY"), "{err}");
    for (pid, _) in recorded(record.path()) {
        assert!(!alive(pid), "worker {pid} outlived its deleted study");
    }
    // The worker logs (log_dir also holds the trials' checkpoint directories).
    let logs: String = std::fs::read_dir(sweep.path("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert_eq!(
        logs.matches("FAIL interrupted: interrupted: the study was deleted from the database")
            .count(),
        2,
        "both running trials killed without the grace:\n{logs}"
    );
    // Nothing of the study is left: neither Optuna's rows nor sweepd's, not even what the
    // daemon wrote while it stopped.
    assert_eq!(sweep.sql("SELECT count(*) FROM trials"), ["0"]);
    assert_eq!(sweepd_rows(&sweep), Vec::<(String, String)>::new());
}
