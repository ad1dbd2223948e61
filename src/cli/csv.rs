//! `--csv`: every data-printing command's rows as RFC 4180 CSV with a header line, for a
//! spreadsheet or `pandas.read_csv`. Params are columns `params_NAME` in the order the space
//! defines them: `[params]` first in the config's order, then the names the objectives
//! suggested, in the order they first appear.

use crate::store::{time, DaemonView, GpuRow, Study, TrialView};
use crate::study::{Counts, Distribution, SearchSpace};
use crate::units;
use serde_json::Value;
use std::path::Path;

/// A cell as text: strings bare, numbers and booleans as JSON, nothing for null.
pub(super) fn value_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn line<S: AsRef<str>>(cells: &[S]) {
    let row: Vec<String> = cells.iter().map(|c| field(c.as_ref())).collect();
    println!("{}", row.join(","));
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// A finished trial's duration in seconds (`None` while it runs or waits).
pub(super) fn duration_s(t: &TrialView) -> Option<f64> {
    time::seconds_between(
        t.datetime_start.as_deref()?,
        t.datetime_complete.as_deref()?,
    )
}

/// The step a PRUNED trial was pruned at (its last reported one).
pub(super) fn pruned_step(t: &TrialView) -> Option<i64> {
    t.step.filter(|_| t.state == "PRUNED")
}

/// The param columns: `first` (the config's `[params]`), then every other name in the order it
/// first appears (trials oldest first, each trial's params in the order they were recorded).
pub(super) fn param_names(trials: &[TrialView], first: Vec<String>) -> Vec<String> {
    let mut names = first;
    for t in trials {
        for name in t.params.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

/// The value columns: `value`, or with several objectives one per objective named as Optuna's
/// `trials_dataframe` names them (`values_0`, or `values_NAME` with metric names).
fn value_columns(study: &Study) -> Vec<String> {
    if !study.is_multi_objective() {
        return vec!["value".to_owned()];
    }
    (0..study.directions.len())
        .map(|i| match &study.metric_names {
            Some(_) => format!("values_{}", study.objective_name(i)),
            None => format!("values_{i}"),
        })
        .collect()
}

/// `trials --csv` and `best --csv`.
pub(super) fn trials(study: &Study, trials: &[TrialView], static_names: Vec<String>) {
    let names = param_names(trials, static_names);
    let value_columns = value_columns(study);
    let mut header: Vec<String> = vec!["number".to_owned(), "state".to_owned()];
    header.extend(value_columns.iter().cloned());
    header.extend(
        [
            "datetime_start",
            "datetime_complete",
            "duration_s",
            "pruned_step",
            "fail_kind",
            "fail_reason",
        ]
        .map(str::to_owned),
    );
    header.extend(names.iter().map(|n| format!("params_{n}")));
    // Optuna's `trials_dataframe` names: `user_attrs_KEY`, of the rows shown.
    let mut attrs: Vec<&String> = Vec::new();
    for k in trials.iter().flat_map(|t| t.user_attrs.keys()) {
        if !attrs.contains(&k) {
            attrs.push(k);
        }
    }
    header.extend(attrs.iter().map(|k| format!("user_attrs_{k}")));
    line(&header);
    for t in trials {
        let mut row = vec![t.number.to_string(), t.state.clone()];
        match &t.values {
            Some(Value::Array(vs)) => row.extend(vs.iter().map(value_text)),
            Some(_) => row.extend(value_columns.iter().map(|_| String::new())),
            None => row.push(value_text(&t.value)),
        }
        row.extend([
            t.datetime_start.clone().unwrap_or_default(),
            t.datetime_complete.clone().unwrap_or_default(),
            duration_s(t).map(|d| d.to_string()).unwrap_or_default(),
            pruned_step(t).map(|s| s.to_string()).unwrap_or_default(),
            t.fail_kind.clone().unwrap_or_default(),
            t.fail_reason.clone().unwrap_or_default(),
        ]);
        row.extend(
            names
                .iter()
                .map(|n| t.params.get(n).map(value_text).unwrap_or_default()),
        );
        row.extend(attrs.iter().map(|k| {
            t.user_attrs
                .get(*k)
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                })
                .unwrap_or_default()
        }));
        line(&row);
    }
}

/// `status --csv`: one row.
pub(super) fn status(
    study: &Study,
    db: &Path,
    counts: &Counts,
    n_trials: Option<u64>,
    best: Option<&TrialView>,
    daemon: Option<&DaemonView>,
    alive: impl Fn(&DaemonView) -> bool,
) {
    line(&[
        "study",
        "direction",
        "database",
        "finished",
        "n_trials",
        "complete",
        "pruned",
        "fail",
        "fail_retried",
        "running",
        "waiting",
        "best_number",
        "best_value",
        "daemon_state",
        "daemon_alive",
    ]);
    line(&[
        study.name.clone(),
        study
            .directions
            .iter()
            .map(|d| d.as_optuna())
            .collect::<Vec<_>>()
            .join(" "),
        db.display().to_string(),
        counts.finished().to_string(),
        opt(n_trials),
        counts.complete.to_string(),
        counts.pruned.to_string(),
        counts.fail.to_string(),
        counts.fail_retried.to_string(),
        counts.running.to_string(),
        counts.waiting.to_string(),
        opt(best.map(|b| b.number)),
        best.map(|b| value_text(&b.value)).unwrap_or_default(),
        opt(daemon.map(|d| d.state)),
        opt(daemon.map(&alive)),
    ]);
}

/// `gpus --csv`: one row per device, sizes in MiB.
pub(super) fn gpus(rows: &[GpuRow]) {
    line(&[
        "gpu",
        "name",
        "total_mib",
        "free_mib",
        "used_mib",
        "util_gpu",
        "util_mem",
        "running",
        "par",
        "next_trial_mib",
        "wait",
        "error",
        "read_at",
        "source",
    ]);
    let mib = |v: Option<u64>| opt(v.map(units::whole_mib));
    for r in rows {
        line(&[
            r.device.to_string(),
            r.name.clone().unwrap_or_default(),
            mib(r.total),
            mib(r.free),
            mib(r.used),
            opt(r.util_gpu),
            opt(r.util_mem),
            r.running.to_string(),
            opt(r.par_estimate),
            mib(r.expected_peak),
            r.wait.clone().unwrap_or_default(),
            r.error.clone().unwrap_or_default(),
            r.updated_at.clone(),
            r.source.clone().unwrap_or_default(),
        ]);
    }
}

/// `check --csv`: the static params, one row each.
pub(super) fn params(space: &SearchSpace) {
    line(&["name", "type", "low", "high", "step", "log", "choices"]);
    for p in &space.params {
        let row = match &p.dist {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => [
                "float".to_owned(),
                low.to_string(),
                high.to_string(),
                opt(*step),
                log.to_string(),
                String::new(),
            ],
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => [
                "int".to_owned(),
                low.to_string(),
                high.to_string(),
                step.to_string(),
                log.to_string(),
                String::new(),
            ],
            Distribution::Categorical { choices } => [
                "categorical".to_owned(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                Value::Array(choices.clone()).to_string(),
            ],
        };
        let mut cells = vec![p.name.clone()];
        cells.extend(row);
        line(&cells);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(number: i64, params: Value) -> TrialView {
        TrialView {
            trial_id: number + 1,
            number,
            state: "COMPLETE".into(),
            value: json!(1.0),
            params: params.as_object().unwrap().clone(),
            ..TrialView::default()
        }
    }

    #[test]
    fn param_columns_follow_the_space_not_the_alphabet() {
        // Two branches of a define-by-run objective, after a static `lr`.
        let trials = [
            view(0, json!({"lr": 0.1, "classifier": "SVC", "svc_c": 3.0})),
            view(1, json!({"lr": 0.2, "classifier": "RF", "rf_max_depth": 4})),
            view(2, json!({"lr": 0.3, "classifier": "SVC", "svc_c": 1.0})),
        ];
        assert_eq!(
            param_names(&trials, vec!["lr".into()]),
            ["lr", "classifier", "svc_c", "rf_max_depth"]
        );
        assert_eq!(
            param_names(&trials[1..2], vec![]),
            ["lr", "classifier", "rf_max_depth"]
        );
    }

    #[test]
    fn fields_with_separators_are_quoted() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("plain"), "plain");
    }
}
