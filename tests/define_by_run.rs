//! Define-by-run: objectives written exactly as for Optuna (`tests/workers/define_by_run.py`)
//! run under sweepd with protocol 2, and what sweepd records compared row by row with what
//! Optuna itself records for the same calls (the same objective run by `study.optimize` with
//! sweepd's params enqueued, `tests/py/optuna_replay.py`).

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn worker() -> Vec<String> {
    vec![
        python(),
        repo()
            .join("tests/workers/define_by_run.py")
            .to_string_lossy()
            .into_owned(),
    ]
}

/// A study of `objective` (see define_by_run.py) with no `[params]` unless `params` says.
fn study(name: &str, objective: &str, mode: &'static str, n_trials: u64, params: &str) -> Cfg {
    Cfg {
        name: name.into(),
        n_trials: Some(n_trials),
        max_par: 2,
        mode,
        sampler: "tpe",
        command: worker(),
        params: params.into(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_OBJECTIVE", objective)
}

/// Everything Optuna's tools read of trial `number` of `study` in `db`, one line per row, as
/// stored: the state, the value, each param (its name, internal value and `distribution_json`
/// text) in the order it was recorded, intermediate values, and user attributes (`value_json`
/// text) but sweepd's own `sweepd:` ones. Numbers are read as doubles and printed as the
/// shortest text that reads back to them, so two lines are equal only if every bit is.
fn recorded(db: &Path, study: &str, number: i64, params_in_order: bool) -> Vec<String> {
    let q = |sql: &str| {
        sql_column(
            db,
            &sql.replace("STUDY", &study.replace('\'', "''"))
                .replace("NUMBER", &number.to_string()),
        )
    };
    let trial = "(SELECT t.trial_id FROM trials t JOIN studies s ON s.study_id = t.study_id \
                 WHERE s.study_name = 'STUDY' AND t.number = NUMBER)";
    // A query's rows as "label number" lines: `label` and `number` are its two columns' SQL.
    let zip = |label: &str, number: &str, from: &str| -> Vec<String> {
        let labels = q(&format!("SELECT {label} {from}"));
        let numbers = q(&format!("SELECT {number} {from}"));
        assert_eq!(labels.len(), numbers.len());
        labels
            .into_iter()
            .zip(numbers)
            .map(|(l, n)| format!("{l} {n}"))
            .collect()
    };
    let mut rows = q(&format!(
        "SELECT 'state ' || state FROM trials WHERE trial_id = {trial}"
    ));
    rows.extend(zip(
        "'value ' || objective || ' ' || value_type",
        "value",
        &format!("FROM trial_values WHERE trial_id = {trial} ORDER BY objective"),
    ));
    let order = if params_in_order {
        "param_id"
    } else {
        "param_name"
    };
    rows.extend(zip(
        "'param ' || param_name || ' ' || distribution_json",
        "param_value",
        &format!("FROM trial_params WHERE trial_id = {trial} ORDER BY {order}"),
    ));
    rows.extend(zip(
        "'step ' || step || ' ' || intermediate_value_type",
        "intermediate_value",
        &format!("FROM trial_intermediate_values WHERE trial_id = {trial} ORDER BY step"),
    ));
    rows.extend(q(&format!(
        "SELECT 'user_attr ' || key || ' ' || value_json FROM trial_user_attributes \
         WHERE trial_id = {trial} AND key NOT LIKE 'sweepd:%' ORDER BY key"
    )));
    rows
}

/// Runs `objective` under Optuna with every trial of sweepd's study enqueued, and checks
/// that both recorded the same trials. Returns sweepd's trials' states.
fn same_as_optuna(sweep: &Sweep, name: &str, objective: &str, in_order: bool) -> Vec<String> {
    let replay = sweep.path("optuna.db");
    let n: i64 = sweep
        .optuna(
            "optuna_replay.py",
            &[name, objective, replay.to_str().unwrap()],
        )
        .trim()
        .parse()
        .unwrap();
    let states = sweep.states();
    assert_eq!(n as usize, states.len());
    for number in 0..n {
        let ours = recorded(&sweep.db, name, number, in_order);
        let theirs = recorded(&replay, "replay", number, in_order);
        assert_eq!(ours, theirs, "trial {number}: sweepd vs Optuna");
    }
    states
}

fn define_by_run_matches_optuna(mode: &'static str) {
    let name = format!("models-{mode}");
    // TPE after 4 random trials: relative (group) and independent sampling both run.
    let cfg = study(
        &name,
        "models",
        mode,
        16,
        "[sampler]\nn_startup_trials = 4\n",
    );
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    // Each trial's params follow its branch: never another model's params.
    let mut models = std::collections::BTreeSet::new();
    for t in &trials {
        let p = t["params"].as_object().unwrap();
        let model = p["model"].as_str().unwrap();
        models.insert(model.to_owned());
        let others: &[&str] = match model {
            "svc" => &["rf_max_depth", "n_layers", "dropout"],
            "forest" => &["svc_c", "n_layers", "dropout"],
            _ => &["svc_c", "rf_max_depth"],
        };
        for o in others {
            assert!(
                !p.contains_key(*o),
                "trial {}: {model} has {o}: {p:?}",
                t["number"]
            );
        }
        if model == "mlp" {
            let layers = p["n_layers"].as_i64().unwrap();
            for i in 0..3 {
                assert_eq!(
                    p.contains_key(&format!("n_units_l{i}")),
                    i < layers,
                    "trial {}: {p:?}",
                    t["number"]
                );
            }
        }
    }
    assert!(
        models.len() >= 2,
        "the study tried one model only: {models:?}"
    );
    let states = same_as_optuna(&sweep, &name, "models", true);
    assert!(
        states.iter().all(|s| s == "COMPLETE" || s == "PRUNED"),
        "{states:?}"
    );
    assert!(
        states.iter().any(|s| s == "PRUNED"),
        "no pruned trial: {states:?}"
    );
}

#[test]
fn define_by_run_trials_are_recorded_as_optuna_records_them_persistent() {
    define_by_run_matches_optuna("persistent");
}

#[test]
fn define_by_run_trials_are_recorded_as_optuna_records_them_oneshot() {
    define_by_run_matches_optuna("oneshot");
}

#[test]
fn conflicting_distributions_are_refused_as_optuna_refuses_them() {
    // One trial at a time, so that the first use of each name is the same trial as Optuna's.
    let cfg = Cfg {
        max_par: 1,
        sampler: "random",
        ..study("conflict", "conflict", "persistent", 12, "")
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let states = same_as_optuna(&sweep, "conflict", "conflict", true);
    let trials = sweep.trials();
    for (t, state) in trials.iter().zip(&states) {
        let n = t["number"].as_i64().unwrap();
        let why = t["fail_reason"].as_str().unwrap_or_default();
        match n % 6 {
            1 => assert!(
                why.contains("Cannot set different distribution kind to the same parameter name."),
                "trial {n}: {why}"
            ),
            3 => assert!(
                why.contains("Cannot set different log configuration to the same parameter name."),
                "trial {n}: {why}"
            ),
            5 => assert!(
                why.contains("CategoricalDistribution does not support dynamic value space."),
                "trial {n}: {why}"
            ),
            _ => assert_eq!(state, "COMPLETE", "trial {n}: {why}"),
        }
    }
    // Optuna failed the same trials (`same_as_optuna` compared the states; Optuna 5 keeps the
    // reason in its log only).
    assert_eq!(
        states.iter().filter(|s| *s == "FAIL").count(),
        6,
        "{states:?}"
    );
}

#[test]
fn toml_params_are_sampled_up_front_and_the_objective_suggests_the_rest() {
    // `lr` and `model` in [params] (as Optuna writes them); the rest suggested. The same
    // distribution returns the pre-sampled value; a name outside [params] is sampled when asked.
    let params = r#"
[params.model]
type = "categorical"
choices = ["svc", "forest", "mlp"]

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true
"#;
    let cfg = study("mixed", "models", "persistent", 8, params);
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert!(trials.iter().all(|t| t["state"] != "FAIL"), "{trials:?}");
    for t in &trials {
        // [params] first, in the config's order; then what the objective suggested.
        let names: Vec<&String> = t["params"].as_object().unwrap().keys().collect();
        assert_eq!(names[..2], ["model", "lr"], "trial {}", t["number"]);
        assert!(names.len() > 2, "trial {}: {names:?}", t["number"]);
    }
    // sweepd wrote [params] when the trial started, Optuna as the objective asked: the rows
    // are the same, in another order.
    same_as_optuna(&sweep, "mixed", "models", false);
}

#[test]
fn a_presampled_param_outside_the_objectives_distribution_fails_the_trial_saying_why() {
    // Log scale as the objective's, but a range the objective's does not reach.
    let params = "[params.lr]\ntype = \"float\"\nlow = 0.2\nhigh = 0.9\nlog = true\n";
    let cfg = Cfg {
        max_par: 1,
        ..study("disagree", "models", "persistent", 2, params)
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    for t in sweep.trials() {
        assert_eq!(t["state"], "FAIL");
        let why = t["fail_reason"].as_str().unwrap();
        assert!(
            why.contains("ValueError") && why.contains("[params.lr]") && why.contains("not in"),
            "{why}"
        );
    }
}

#[test]
fn enqueued_params_are_used_and_the_rest_suggested() {
    let cfg = study("enq", "models", "persistent", 1, "");
    let sweep = Sweep::new(&cfg);
    assert!(sweep.run(&[], LIMIT).status.success());
    // Some params fixed, as an Optuna user enqueues them: the branch and one of its params.
    sweep.optuna(
        "optuna_enqueue.py",
        &["enq", r#"{"model": "mlp", "n_layers": 2, "dropout": 0.3}"#],
    );
    std::fs::write(
        &sweep.config,
        cfg.to_toml().replace("n_trials = 1", "n_trials = 2"),
    )
    .unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = &sweep.trials()[1];
    assert_eq!(t["state"], "COMPLETE", "{t}");
    let p = &t["params"];
    assert_eq!(
        (&p["model"], &p["n_layers"], &p["dropout"]),
        (&json!("mlp"), &json!(2), &json!(0.3))
    );
    for name in ["n_units_l0", "n_units_l1", "lr"] {
        assert!(p[name].is_number(), "{name}: {p}");
    }
    assert!(p.get("n_units_l2").is_none(), "{p}");
    same_as_optuna(&sweep, "enq", "models", true);
}

#[test]
fn optuna_dashboard_shows_why_a_trial_failed_while_the_study_runs() {
    // A budget the study cannot spend before the dashboard has looked, however slow the
    // machine (the dashboard's import alone takes seconds): SIGTERM ends it.
    let cfg = Cfg {
        name: "dash".into(),
        n_trials: Some(100_000),
        max_par: 2,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_RAISE_ON", "3")
    .env("SWEEPD_TEST_SLEEP", "0.2");
    let sweep = Sweep::new(&cfg);
    let mut child = sweep.spawn_run();
    // The dashboard reads the live database (no "database is locked" on either side) until
    // the failed trial is there with its reason.
    let mut shown = None;
    wait_until(LIMIT, "the dashboard to show trial 3 failed", || {
        let page: serde_json::Value =
            serde_json::from_str(&sweep.optuna("dashboard_api.py", &["dash"])).unwrap();
        shown = page["trials"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["number"] == 3 && t["state"] == "Fail")
            .cloned();
        shown.is_some()
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the study is still running"
    );
    let reason = shown.unwrap()["user_attrs"]["sweepd:fail_reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.starts_with("user_error: ") && reason.contains("rejected param in trial 3"),
        "{reason}"
    );
    sigterm(&child);
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Whether the test Python can import `module`.
fn importable(module: &str) -> bool {
    std::process::Command::new(python())
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `examples/NAME.toml` as shipped, with the test Python running `examples/NAME.py`, the
/// database where the harness looks, and a smaller budget.
fn example(name: &str, n_trials: u64) -> Sweep {
    let toml = std::fs::read_to_string(repo().join(format!("examples/{name}.toml"))).unwrap();
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let script = repo().join(format!("examples/{name}.py"));
    let command = format!("command = [\"python3\", \"{name}.py\"]");
    assert!(toml.contains(&command), "{toml}");
    let url = format!("url = \"sqlite:///{name}.db\"");
    assert!(toml.contains(&url), "{toml}");
    let toml = toml
        .replace(
            &command,
            &format!(
                "command = [{}, {}]",
                q(&python()),
                q(script.to_str().unwrap())
            ),
        )
        .replace(&url, "url = \"sqlite:///study.db\"");
    let toml: Vec<String> = toml
        .lines()
        .map(|l| match l.strip_prefix("n_trials = ") {
            Some(rest) => {
                let comment = rest.find('#').map_or("", |i| &rest[i..]);
                format!("n_trials = {n_trials}  {comment}")
            }
            None => l.to_owned(),
        })
        .collect();
    Sweep::with_toml(&(toml.join("\n") + "\n"))
}

#[test]
fn the_scikit_learn_example_runs_as_ported_from_optuna_examples() {
    assert!(
        importable("sklearn"),
        "scikit-learn is in requirements-test.txt: run the tests through `make test`"
    );
    let sweep = example("sklearn_simple", 12);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 12);
    for t in &trials {
        assert_eq!(t["state"], "COMPLETE", "{t}");
        let accuracy = t["value"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&accuracy), "{t}");
        let p = t["params"].as_object().unwrap();
        // Each trial carries its own classifier's params only.
        match p["classifier"].as_str().unwrap() {
            "SVC" => assert!(
                p.contains_key("svc_c") && !p.contains_key("rf_max_depth"),
                "{t}"
            ),
            _ => assert!(
                p.contains_key("rf_max_depth") && !p.contains_key("svc_c"),
                "{t}"
            ),
        }
    }
    // A random forest of depth >= 2 on iris scores well above chance (1/3).
    let best: serde_json::Value =
        serde_json::from_slice(&sweep.sweepd(&["best", "--json"]).output().unwrap().stdout)
            .unwrap();
    assert!(best["value"].as_f64().unwrap() > 0.8, "{best}");
}

#[test]
fn the_pytorch_example_runs_as_ported_from_optuna_examples() {
    if !importable("torch") {
        eprintln!(
            "SKIPPED the_pytorch_example_runs_as_ported_from_optuna_examples: PyTorch is not \
             installed in the test Python (it is optional; `pip install torch` to run it)"
        );
        return;
    }
    let sweep = example("pytorch_simple", 6);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(trials.len(), 6);
    for t in &trials {
        assert!(t["state"] == "COMPLETE" || t["state"] == "PRUNED", "{t}");
        let p = t["params"].as_object().unwrap();
        let layers = p["n_layers"].as_i64().unwrap();
        for i in 0..3 {
            assert_eq!(p.contains_key(&format!("n_units_l{i}")), i < layers, "{t}");
        }
    }
}

/// optuna-examples' `pytorch_checkpoint.py`, ported with one line changed (issue 42): its
/// worker is killed -9 once it has saved a checkpoint, sweepd re-enqueues the trial with
/// Optuna's `failed_trial`, and the retry, through Optuna's own
/// `RetryFailedTrialCallback.retried_trial_number(trial)`, loads that checkpoint and goes on
/// from the next epoch. Before, the helper's trial had no `system_attrs` and the example could
/// not run unchanged.
#[test]
fn the_pytorch_checkpoint_example_resumes_a_trial_killed_mid_run() {
    if !importable("torch") {
        eprintln!(
            "SKIPPED the_pytorch_checkpoint_example_resumes_a_trial_killed_mid_run: PyTorch is \
             not installed in the test Python (it is optional; `pip install torch` to run it)"
        );
        return;
    }
    let mut sweep = example("pytorch_checkpoint", 1);
    // Epochs enough to kill the trial between two of them.
    sweep.env.push(("EPOCHS".into(), "400".into()));
    let daemon = sweep.spawn_run();
    // Every worker's output (which of the two slots runs the trial is not fixed).
    let logs = || -> String {
        std::fs::read_dir(sweep.path("pytorch-checkpoint-logs"))
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_until(LIMIT, "a checkpoint of the third epoch", || {
        logs().contains("Saving a checkpoint in epoch 2.")
    });
    let running = sweep.trials();
    let pid = running[0]["worker_pid"]
        .as_i64()
        .expect("the running trial's worker");
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let group = nix::unistd::getpgid(Some(pid)).unwrap();
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let states: Vec<String> = sweep
        .trials()
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["FAIL", "COMPLETE"], "{}", stderr(&out));
    // The retry resumed past the third epoch, and never trained the first one again.
    let logs = logs();
    let epoch: i64 = logs
        .lines()
        .find_map(|l| {
            l.strip_prefix("Loading a checkpoint from trial 0 in epoch ")?
                .strip_suffix('.')?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("the retry did not resume:\n{logs}"));
    assert!(epoch >= 2, "{logs}");
    assert_eq!(
        logs.matches("Saving a checkpoint in epoch 0.").count(),
        1,
        "{logs}"
    );
    // The example removes its checkpoint once the trial is done.
    assert!(!sweep.path("pytorch_checkpoint/0").exists());
}

/// `sweepd ARGS` run in `dir`, without a config argument.
fn sweepd_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run sweepd")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn status_trials_and_best_read_a_study_by_storage_url_without_a_config() {
    let cfg = Cfg {
        sampler: "random",
        ..study("by-url", "models", "persistent", 6, "")
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = sweep.dir.path();
    // Optuna's relative URL, from the study's directory; the study found alone in it.
    let out = sweepd_in(
        dir,
        &["status", "--storage", "sqlite:///study.db", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["study"], "by-url");
    assert_eq!(v["finished"], 6);
    assert!(v["n_trials"].is_null(), "no config, no budget: {v}");
    // CSV: one column per param, in the order the objective first suggested them, not the
    // alphabet's; trial 0 suggested `model` first.
    let out = sweepd_in(
        dir,
        &[
            "trials",
            "--storage",
            "sqlite:///study.db",
            "--study",
            "by-url",
            "--csv",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    assert_eq!(header[9], "params_model", "{text}");
    assert!(header.contains(&"params_lr"), "{text}");
    assert_eq!(text.lines().count(), 7, "{text}");
    // The four-slash absolute URL, from anywhere; `best --csv` is one row.
    let abs = format!("sqlite:///{}", sweep.db.display());
    let out = sweepd_in(Path::new("/"), &["best", "--storage", &abs, "--csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
    for cmd in ["status", "gpus"] {
        let out = sweepd_in(dir, &[cmd, "--storage", "sqlite:///study.db", "--csv"]);
        assert!(out.status.success(), "{cmd}: {}", stderr(&out));
        assert!(stdout(&out).lines().next().unwrap().contains(','), "{cmd}");
    }
    // sweepd's old two-slash form still works, with a warning.
    let out = sweepd_in(dir, &["best", "--storage", "sqlite://study.db", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sqlite:///study.db"),
        "{}",
        stderr(&out)
    );
    // Two studies in one file: the name is needed, and the message lists them.
    sweep.optuna("optuna_create.py", &["another", "minimize", "0"]);
    let out = sweepd_in(dir, &["trials", "--storage", "sqlite:///study.db"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("by-url, another") && stderr(&out).contains("--study"),
        "{}",
        stderr(&out)
    );
    // A config and a storage URL name the study twice: refused.
    let out = sweepd_in(
        dir,
        &[
            "status",
            "-c",
            "supervisor.toml",
            "--storage",
            "sqlite:///study.db",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn check_says_the_objective_defines_the_params_and_lists_the_static_ones_as_csv() {
    let sweep = Sweep::new(&study("chk", "models", "persistent", 1, ""));
    let out = sweep.sweepd(&["check"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("the objective defines every param as it runs"),
        "{}",
        stdout(&out)
    );
    let with = Sweep::new(&study(
        "chk",
        "models",
        "persistent",
        1,
        "[params.lr]\ntype = \"float\"\nlow = 1e-5\nhigh = 0.1\nlog = true\n",
    ));
    let out = with.sweepd(&["check"]).output().unwrap();
    assert!(
        stdout(&out).contains("the objective may suggest more"),
        "{}",
        stdout(&out)
    );
    let out = with.sweepd(&["check", "--csv"]).output().unwrap();
    assert_eq!(
        stdout(&out),
        "name,type,low,high,step,log,choices\nlr,float,0.00001,0.1,,true,\n"
    );
}
