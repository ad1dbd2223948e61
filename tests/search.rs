//! Search in the real daemon: TPE proposals, pruners driven by the workers' intermediate
//! reports, and PRUNED trials as Optuna reads them.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// A worker whose learning curve is (x - 0.3)^2 + 1 / (step + 1) over 10 steps, written as
/// an Optuna objective.
fn curve_worker(dir: &std::path::Path) -> Vec<String> {
    let script = dir.join("curve_worker.py");
    std::fs::write(
        &script,
        "import sweepd_worker\n\
         def objective(trial):\n\
         \x20   x = trial.suggest_float('x', -2.0, 2.0)\n\
         \x20   loss = None\n\
         \x20   for step in range(10):\n\
         \x20       loss = (x - 0.3) ** 2 + 1.0 / (step + 1)\n\
         \x20       trial.report(loss, step)\n\
         \x20       if trial.should_prune():\n\
         \x20           raise sweepd_worker.TrialPruned()\n\
         \x20   return loss\n\
         sweepd_worker.serve(objective)\n",
    )
    .unwrap();
    vec![python(), script.to_string_lossy().into_owned()]
}

fn pruned_study(name: &str, pruner: &str) -> (Sweep, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Cfg {
        name: name.into(),
        n_trials: Some(30),
        max_par: 2,
        sampler: "tpe",
        command: curve_worker(dir.path()),
        params: "[params.x]\ntype = \"float\"\nlow = -2.0\nhigh = 2.0\n".into(),
        ..Cfg::default()
    };
    let sweep = Sweep::with_toml(&format!("{}\n{pruner}\n", cfg.to_toml()));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &[name])).unwrap();
    let trials = dump["trials"].as_array().unwrap().clone();
    drop(dir);
    (sweep, trials)
}

fn check_pruned_as_optuna_writes_them(trials: &[Value]) {
    let pruned: Vec<&Value> = trials.iter().filter(|t| t["state"] == "PRUNED").collect();
    assert!(
        pruned.len() >= 3,
        "the pruner stopped bad trials: {}",
        pruned.len()
    );
    for t in &pruned {
        let iv = t["intermediate_values"].as_object().unwrap();
        // ASHA may prune at its rung on the last step, so all 10 values can be there.
        assert!(!iv.is_empty() && iv.len() <= 10, "{t}");
        // Optuna records a pruned trial's last intermediate value as its value.
        let last = iv.keys().map(|k| k.parse::<i64>().unwrap()).max().unwrap();
        assert_eq!(t["value"], iv[&last.to_string()], "{t}");
    }
    for t in trials.iter().filter(|t| t["state"] == "COMPLETE") {
        assert_eq!(t["intermediate_values"].as_object().unwrap().len(), 10);
    }
}

#[test]
fn median_pruner_prunes_bad_curves_and_optuna_reads_them_back() {
    let (sweep, trials) = pruned_study("median", "[pruner]\ntype = \"median\"\n");
    check_pruned_as_optuna_writes_them(&trials);
    let n_final = trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE" || t["state"] == "PRUNED")
        .count();
    assert_eq!(n_final, 30, "pruned trials spend the budget");
    // Nothing is pruned before five trials have completed (n_startup_trials = 5): the first
    // five to end are COMPLETE. (By number, trial 4 may end after trial 5 and be pruned.)
    let mut by_end: Vec<&Value> = trials
        .iter()
        .filter(|t| t["datetime_complete"].is_string())
        .collect();
    by_end.sort_by_key(|t| t["datetime_complete"].as_str().unwrap().to_owned());
    let first = &by_end[..5];
    assert!(first.iter().all(|t| t["state"] == "COMPLETE"), "{first:?}");
    assert_eq!(
        sweep.count("PRUNED"),
        trials.iter().filter(|t| t["state"] == "PRUNED").count()
    );
}

#[test]
fn asha_prunes_asynchronously_and_optuna_reads_them_back() {
    let (_sweep, trials) = pruned_study(
        "asha",
        "[pruner]\ntype = \"asha\"\nmin_resource = 1\nreduction_factor = 3\n",
    );
    check_pruned_as_optuna_writes_them(&trials);
}

#[test]
fn tpe_concentrates_on_the_optimum_in_the_daemon() {
    let (sweep, trials) = pruned_study("tpe", "");
    assert_eq!(sweep.count("COMPLETE"), 30);
    let err = |t: &Value| (t["params"]["x"].as_f64().unwrap() - 0.3).abs();
    let mut early: Vec<f64> = trials[..10].iter().map(err).collect();
    let mut late: Vec<f64> = trials[20..].iter().map(err).collect();
    early.sort_by(f64::total_cmp);
    late.sort_by(f64::total_cmp);
    // Random startup over [-2, 2] vs TPE's proposals: the median distance shrinks.
    assert!(
        late[5] < early[5],
        "late median {} vs startup median {}",
        late[5],
        early[5]
    );
}

/// An objective that defines its space as it runs: x always, then one of two branches.
fn conditional_worker(dir: &std::path::Path) -> Vec<String> {
    let script = dir.join("conditional_worker.py");
    std::fs::write(
        &script,
        "import math\n\
         import sweepd_worker\n\
         def objective(trial):\n\
         \x20   x = trial.suggest_float('x', -2.0, 2.0)\n\
         \x20   branch = trial.suggest_categorical('branch', ['lr', 'depth'])\n\
         \x20   if branch == 'lr':\n\
         \x20       lr = trial.suggest_float('lr', 1e-5, 1e-1, log=True)\n\
         \x20       return (x - 0.3) ** 2 + 0.01 * (math.log10(lr) + 3) ** 2\n\
         \x20   depth = trial.suggest_int('depth', 1, 12)\n\
         \x20   return (x - 0.3) ** 2 + 0.3 + 0.01 * abs(depth - 6)\n\
         sweepd_worker.serve(objective)\n",
    )
    .unwrap();
    vec![python(), script.to_string_lossy().into_owned()]
}

/// A worker whose curve is (x - 0.3)^2 + 1 / (step + 1) over 27 steps (0 to 26).
fn long_curve_worker(dir: &std::path::Path) -> Vec<String> {
    let script = dir.join("long_curve_worker.py");
    std::fs::write(
        &script,
        "import sweepd_worker\n\
         def objective(trial):\n\
         \x20   x = trial.suggest_float('x', -2.0, 2.0)\n\
         \x20   loss = None\n\
         \x20   for step in range(27):\n\
         \x20       loss = (x - 0.3) ** 2 + 1.0 / (step + 1)\n\
         \x20       trial.report(loss, step)\n\
         \x20       if trial.should_prune():\n\
         \x20           raise sweepd_worker.TrialPruned()\n\
         \x20   return loss\n\
         sweepd_worker.serve(objective)\n",
    )
    .unwrap();
    vec![python(), script.to_string_lossy().into_owned()]
}

#[test]
fn the_gp_sampler_runs_a_conditional_study_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Cfg {
        name: "gp".into(),
        n_trials: Some(24),
        max_par: 3,
        sampler: "gp",
        command: conditional_worker(dir.path()),
        params: String::new(),
        ..Cfg::default()
    };
    let sweep = Sweep::with_toml(&format!(
        "{}\n[sampler]\nn_startup_trials = 6\nseed = 1\n",
        cfg.to_toml()
    ));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sweep.count("COMPLETE"), 24);
    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &["gp"])).unwrap();
    let trials = dump["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 24);
    for t in trials {
        let p = t["params"].as_object().unwrap();
        let other = match p["branch"].as_str().unwrap() {
            "lr" => "depth",
            _ => "lr",
        };
        assert!(!p.contains_key(other), "{t}");
    }
    // x and the branch are in every trial: after the random startup the GP proposes them, and
    // x gathers at its optimum (0.3) where the startup spread it over [-2, 2].
    let err = |t: &Value| (t["params"]["x"].as_f64().unwrap() - 0.3).abs();
    let mut late: Vec<f64> = trials[14..].iter().map(err).collect();
    late.sort_by(f64::total_cmp);
    // The startup's median distance over [-2, 2] is about 1.
    assert!(late[5] < 0.3, "late distances to the optimum: {late:?}");
    // The branch without the fixed cost is found too.
    let late_lr = trials[14..]
        .iter()
        .filter(|t| t["params"]["branch"] == "lr")
        .count();
    assert!(
        late_lr >= 6,
        "{late_lr}/10 late trials in the better branch"
    );
    let best = trials
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(best < 0.1, "best {best}");
}

#[test]
fn hyperband_prunes_each_trial_at_its_own_brackets_rungs_as_optuna_assigns_them() {
    let dir = tempfile::tempdir().unwrap();
    let name = "hyperband";
    let cfg = Cfg {
        name: name.into(),
        n_trials: Some(60),
        max_par: 3,
        sampler: "tpe",
        command: long_curve_worker(dir.path()),
        params: "[params.x]\ntype = \"float\"\nlow = -2.0\nhigh = 2.0\n".into(),
        ..Cfg::default()
    };
    // min 1, max 27, factor 3: 4 brackets, bracket k's rungs at steps 3^(k + j); bracket 3's
    // first (27) is past the last step, so its trials always complete.
    let pruner = "[pruner]\ntype = \"hyperband\"\nmin_resource = 1\nmax_resource = 27\n\
                  reduction_factor = 3\n";
    let sweep = Sweep::with_toml(&format!("{}\n{pruner}\n", cfg.to_toml()));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &[name])).unwrap();
    let trials = dump["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 60);
    // Optuna's own HyperbandPruner on the same study: each trial's bracket.
    let optuna: Value =
        serde_json::from_str(&sweep.optuna("optuna_brackets.py", &[name, "1", "27", "3"])).unwrap();
    assert_eq!(optuna["n_brackets"], 4);
    let bracket = |t: &Value| {
        optuna["brackets"][t["number"].to_string()]
            .as_u64()
            .unwrap()
    };
    let curve = |t: &Value| -> std::collections::BTreeMap<u64, f64> {
        t["intermediate_values"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(s, v)| (s.parse().unwrap(), v.as_f64().unwrap()))
            .collect()
    };
    let mut pruned_in = [0; 4];
    for t in trials {
        let b = bracket(t) as u32;
        let iv = curve(t);
        let (last, value) = iv.last_key_value().map(|(s, v)| (*s, *v)).unwrap();
        match t["state"].as_str().unwrap() {
            "COMPLETE" => assert_eq!(last, 26, "{t}"),
            "PRUNED" => {
                pruned_in[b as usize] += 1;
                // Optuna records a pruned trial's last intermediate value as its value.
                assert_eq!(t["value"].as_f64(), Some(value), "{t}");
                // Reporting every step, a trial is pruned exactly at one of its bracket's
                // rungs, never at another bracket's.
                let rungs: Vec<u64> = (b..4).map(|k| 3u64.pow(k)).collect();
                assert!(
                    rungs.contains(&last),
                    "trial {} of bracket {b} pruned at step {last}, not one of its rungs \
                     {rungs:?}",
                    t["number"]
                );
                // Pruned means not the best recorded there: a trial of its own bracket had a
                // lower value at that step.
                assert!(
                    trials.iter().any(|o| o["number"] != t["number"]
                        && bracket(o) == u64::from(b)
                        && curve(o).get(&last).is_some_and(|v| *v < value)),
                    "trial {} pruned at step {last} with {value}: no better value of bracket \
                     {b} there",
                    t["number"]
                );
            }
            other => panic!("trial {} ended {other}", t["number"]),
        }
    }
    assert_eq!(pruned_in[3], 0, "the last bracket never prunes");
    assert!(
        pruned_in[0] >= 3 && pruned_in.iter().filter(|n| **n > 0).count() >= 2,
        "pruned per bracket: {pruned_in:?}"
    );
    drop(dir);
}

/// An objective with Optuna 5's `trial.set_constraint`: (x - 1.5)^2, feasible where x <= -0.5
/// (the constraint x + 0.5), so the unconstrained optimum is infeasible.
fn constrained_worker(dir: &std::path::Path) -> Vec<String> {
    let script = dir.join("constrained_worker.py");
    std::fs::write(
        &script,
        "import sweepd_worker\n\
         def objective(trial):\n\
         \x20   x = trial.suggest_float('x', -2.0, 2.0)\n\
         \x20   trial.set_constraint('edge', x + 0.5)\n\
         \x20   return (x - 1.5) ** 2\n\
         sweepd_worker.serve(objective)\n",
    )
    .unwrap();
    vec![python(), script.to_string_lossy().into_owned()]
}

/// A study whose objective sets a constraint, run by the daemon with `sampler`: every trial's
/// constraint reads back through Optuna as it wrote it, and the sampler learns from it: the
/// late trials gather at the feasible side's edge (x = -0.5; the GP closes in on it from both
/// sides), where the objective alone pulls them to x = 1.5, and a feasible trial is near it.
/// `settings`: the sampler's `[sampler]` keys beside the seed.
fn a_constraint_steers(sampler: &'static str, n_trials: u64, settings: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("constrained-{sampler}");
    let cfg = Cfg {
        name: name.clone(),
        n_trials: Some(n_trials),
        max_par: 2,
        sampler,
        command: constrained_worker(dir.path()),
        params: "[params.x]\ntype = \"float\"\nlow = -2.0\nhigh = 2.0\n".into(),
        ..Cfg::default()
    };
    let sweep = Sweep::with_toml(&format!(
        "{}\n[sampler]\n{settings}seed = 3\n",
        cfg.to_toml()
    ));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let dump: Value = serde_json::from_str(&sweep.optuna("optuna_dump.py", &[&name])).unwrap();
    let trials = dump["trials"].as_array().unwrap();
    assert_eq!(trials.len() as u64, n_trials);
    let x = |t: &Value| t["params"]["x"].as_f64().unwrap();
    for t in trials {
        assert_eq!(t["state"], "COMPLETE", "{t}");
        // Optuna 5's own reading: `trial.constraints`, from the attribute `constraints:edge`.
        assert_eq!(
            t["constraints"],
            serde_json::json!({"edge": x(t) + 0.5}),
            "{t}"
        );
        assert_eq!(t["system_attrs"]["constraints:edge"], x(t) + 0.5, "{t}");
    }
    let mut late: Vec<f64> = trials[trials.len() - 12..].iter().map(x).collect();
    late.sort_by(f64::total_cmp);
    let median = (late[5] + late[6]) / 2.0;
    assert!(
        median <= 0.0,
        "late trials with {sampler} (sorted): {late:?}"
    );
    let best_feasible = trials
        .iter()
        .map(x)
        .filter(|x| *x <= -0.5)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        best_feasible >= -1.0,
        "the feasible x nearest the edge with {sampler}: {best_feasible}"
    );
    // `sweepd best` is Optuna 5's `study.best_trial`: the best feasible trial, though
    // infeasible ones nearer 1.5 have better values.
    let best: Value =
        serde_json::from_slice(&sweep.sweepd(&["best", "--json"]).output().unwrap().stdout)
            .unwrap();
    assert!(
        trials.iter().any(|t| x(t) > -0.5),
        "no infeasible trial to pass over"
    );
    assert_eq!(best["number"], dump["best_trial"], "{best}");
}

#[test]
fn a_constraint_set_by_the_objective_steers_tpe_to_the_feasible_side() {
    a_constraint_steers("tpe", 36, "n_startup_trials = 8\n");
}

#[test]
fn a_constraint_set_by_the_objective_steers_the_gp_to_the_feasible_side() {
    a_constraint_steers("gp", 24, "n_startup_trials = 8\n");
}

/// NSGA-II with one objective: Optuna's constrained domination puts every feasible trial ahead
/// of every infeasible one, so the parents, and their children, stay on the feasible side. With
/// one param the default `mutation_prob` (1 / params) redraws every child at random, so it is
/// set lower here.
#[test]
fn a_constraint_set_by_the_objective_steers_nsga2_to_the_feasible_side() {
    a_constraint_steers("nsga2", 48, "population_size = 8\nmutation_prob = 0.2\n");
}
