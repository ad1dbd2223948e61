//! `sweepd check`: the config validated and the study it resolves to, as a person reads it, as
//! JSON, or its static params as CSV. It reads the config only, never the database.

use super::args::Output;
use super::csv;
use super::error::CliError;
use super::render::print_json;
use crate::config::{Config, SamplerKind, WorkerMode};
use crate::study::Distribution;
use crate::units;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// Loads `config` (every problem is an error naming its place) and prints what it resolves to.
pub(super) fn check(config: &Path, output: Output) -> Result<(), CliError> {
    let config = Config::load(config)?;
    match output {
        Output::Csv => csv::params(&config.space),
        Output::Json => print_json(&resolved(&config)),
        Output::Text => print!("{}", check_text(&config)),
    }
    Ok(())
}

/// The study the config resolves to, every default filled in: `check --json`.
fn resolved(config: &Config) -> Value {
    let w = &config.worker;
    let params: Vec<Value> = config
        .space
        .params
        .iter()
        .map(|p| {
            json!({"name": p.name, "distribution": serde_json::from_str::<Value>(&p.dist.optuna_json()).expect("valid JSON")})
        })
        .collect();
    let dur = |d: Option<std::time::Duration>| d.map(|d| units::format_duration(d).to_string());
    json!({
        "config": config.path,
        "study": {
            "name": config.study.name,
            "direction": (!config.study.is_multi_objective()).then(|| config.study.directions[0].as_optuna()),
            "directions": config.study.directions.iter().map(|d| d.as_optuna()).collect::<Vec<_>>(),
            "metric_names": config.study.metric_names,
            "n_trials": config.study.n_trials,
            "timeout": dur(config.study.timeout),
            "sampler": sampler_name(config.study.sampler),
            "seed": config.study.seed,
        },
        "storage": {"url": config.storage.url, "path": config.storage.path, "warning": config.storage.warning},
        "worker": {
            "command": w.command,
            "mode": mode_name(w.mode),
            "recycle_after": w.recycle_after,
            "max_par": w.max_par,
            "trial_timeout": dur(w.trial_timeout),
            "startup_timeout": dur(Some(w.startup_timeout)),
            "shutdown_grace": dur(Some(w.shutdown_grace)),
            "log_dir": w.log_dir,
            "cwd": w.cwd,
            "env": w.env,
            "final_env": final_env(config),
        },
        "params": params,
        "params_note": params_note(config),
    })
}

fn sampler_name(kind: SamplerKind) -> &'static str {
    match kind {
        SamplerKind::Random => "random",
        SamplerKind::Grid => "grid",
        SamplerKind::Tpe => "tpe",
        SamplerKind::Nsga2 => "nsga2",
        SamplerKind::Gp => "gp",
    }
}

fn mode_name(mode: WorkerMode) -> &'static str {
    match mode {
        WorkerMode::Persistent => "persistent",
        WorkerMode::Oneshot => "oneshot",
    }
}

/// `check` for a person: "config ok", then the study, storage, worker, env and params.
fn check_text(config: &Config) -> String {
    let w = &config.worker;
    let mut out = String::new();
    let _ = writeln!(out, "config ok: {}", config.path.display());
    let objectives = config
        .study
        .directions
        .iter()
        .enumerate()
        .map(|(i, d)| match &config.study.metric_names {
            Some(names) => format!("{} {}", names[i], d.as_optuna()),
            None => d.as_optuna().to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "study     {} ({objectives}), sampler {}, budget {}",
        config.study.name,
        sampler_name(config.study.sampler),
        budget_text(config)
    );
    let _ = writeln!(out, "storage   {}", config.storage.path.display());
    if let Some(w) = &config.storage.warning {
        let _ = writeln!(out, "          warning: {w}");
    }
    let _ = writeln!(
        out,
        "worker    {:?} ({}), max_par {}, recycle_after {}",
        w.command,
        mode_name(w.mode),
        w.max_par,
        w.recycle_after.map_or("never".into(), |n| n.to_string())
    );
    let _ = writeln!(out, "logs      {}", w.log_dir.display());
    let _ = writeln!(
        out,
        "env       (what every worker gets besides SWEEPD_* and the device)"
    );
    for (k, v) in final_env(config) {
        let _ = writeln!(out, "  {k}={v}");
    }
    let _ = writeln!(out, "params    {}", params_note(config));
    for p in &config.space.params {
        let _ = writeln!(out, "  {:<16} {}", p.name, describe_dist(&p.dist));
    }
    out
}

/// What `check` says of the search space: the static part is all it can know.
fn params_note(config: &Config) -> &'static str {
    match (config.space.params.is_empty(), config.study.sampler) {
        (true, _) => "none in [params]: the objective defines every param as it runs (suggest_*)",
        (false, SamplerKind::Grid) => "the grid, sampled before each trial starts",
        (false, _) => "sampled before each trial starts; the objective may suggest more as it runs",
    }
}

/// The allocator settings and `[worker.env]` as a worker receives them (user values win).
fn final_env(config: &Config) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = config.worker.allocator.env().into_iter().collect();
    env.extend(config.worker.env.clone());
    env
}

fn budget_text(config: &Config) -> String {
    match (config.study.n_trials, config.study.timeout) {
        (Some(n), Some(t)) => format!("{n} trials or {}", units::format_duration(t)),
        (Some(n), None) => format!("{n} trials"),
        (None, Some(t)) => units::format_duration(t).to_string(),
        (None, None) => "none (runs until stopped)".into(),
    }
}

fn describe_dist(d: &Distribution) -> String {
    match d {
        Distribution::Float {
            low,
            high,
            step,
            log,
        } => format!(
            "float [{low}, {high}]{}{}",
            step.map(|s| format!(" step {s}")).unwrap_or_default(),
            if *log { " log" } else { "" }
        ),
        Distribution::Int {
            low,
            high,
            step,
            log,
        } => format!(
            "int [{low}, {high}]{}{}",
            if *step != 1 {
                format!(" step {step}")
            } else {
                String::new()
            },
            if *log { " log" } else { "" }
        ),
        Distribution::Categorical { choices } => {
            format!("one of {}", Value::Array(choices.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[study]
name = "s"
directions = ["minimize", "maximize"]
metric_names = ["loss", "fps"]
n_trials = 12
sampler = "random"

[storage]
url = "sqlite:////tmp/s.db"

[worker]
command = ["python3", "w.py"]
max_par = 2

[worker.env]
A = "1"

[params.lr]
type = "float"
low = 0.001
high = 0.1
log = true

[params.depth]
type = "int"
low = 2
high = 8
step = 2

[params.opt]
type = "categorical"
choices = ["adam", "sgd"]
"#;

    #[test]
    fn check_shows_the_study_worker_env_and_each_param_s_distribution() {
        let config = Config::parse(TOML, Path::new("/tmp/s.toml")).expect("a valid config");
        let text = check_text(&config);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "config ok: /tmp/s.toml");
        assert_eq!(
            lines[1],
            "study     s (loss MINIMIZE, fps MAXIMIZE), sampler random, budget 12 trials"
        );
        assert_eq!(lines[2], "storage   /tmp/s.db");
        assert_eq!(
            lines[3],
            "worker    [\"python3\", \"w.py\"] (persistent), max_par 2, recycle_after never"
        );
        assert!(text.contains("\n  A=1\n"), "{text}");
        let params: Vec<&str> = lines[lines.len() - 4..].to_vec();
        assert_eq!(
            params,
            [
                "params    sampled before each trial starts; the objective may suggest more as \
                 it runs",
                "  lr               float [0.001, 0.1] log",
                "  depth            int [2, 8] step 2",
                "  opt              one of [\"adam\",\"sgd\"]",
            ]
        );
        let json = resolved(&config);
        assert_eq!(json["study"]["sampler"], "random");
        assert_eq!(json["worker"]["mode"], "persistent");
        assert_eq!(json["study"]["direction"], Value::Null);
        assert_eq!(json["worker"]["final_env"]["A"], "1");
    }
}
