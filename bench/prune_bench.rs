//! Pruners on learning curves: sweepd's TPE with each of its pruners, driven directly (no
//! daemon, no database) through a fixed budget of steps with several trials running at once,
//! one JSON line per (problem, pruner, seed) run. `bench/prune_bench.py` runs it next to
//! Optuna's TPE with its `HyperbandPruner` on the same problems (defined identically there)
//! and writes its section of `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example prune_bench -- \
//!     [--problems crossing,ranked] [--pruners hyperband,asha,median,none] \
//!     [--seeds 20] [--seed0 0] [--budget 1350] [--par 4] [--steps 27] [--sampler tpe|random]
//! cargo run --release --example prune_bench -- --eval  # {"problem","seed","number","params"} lines
//! ```
//!
//! The schedule (the same in the Python script): `par` slots; at the start of each round every
//! empty slot starts a trial (`propose`, then `observe`: it runs), then each running trial, in
//! slot order, reports its next step (one step of the budget); the pruner's answer ends it as
//! PRUNED, its last step as COMPLETE (`finish` and `tell` either way, as the daemon tells
//! them). The run stops when the budget is spent; what is still running then never completes.

use serde_json::{json, Value};
use std::io::{BufRead, Write};
use sweepd::config::{MaxResource, PrunerConfig, SamplerConfig, SamplerKind};
use sweepd::pruner::Pruner;
use sweepd::sampler;
use sweepd::study::{
    Direction, Distribution, ParamSpec, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};

const OPTIMIZERS: [&str; 3] = ["sgd", "adam", "rmsprop"];
const AUGMENT: [&str; 4] = ["none", "flip", "crop", "mix"];

fn float(name: &str, low: f64, high: f64, log: bool) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        dist: Distribution::Float {
            low,
            high,
            step: None,
            log,
        },
    }
}

fn categorical(name: &str, choices: &[&str]) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        dist: Distribution::Categorical {
            choices: choices.iter().map(|c| json!(c)).collect(),
        },
    }
}

/// Seven params, two of no effect (`seed_shift`, `augment`).
fn space() -> SearchSpace {
    SearchSpace {
        params: vec![
            float("lr", 1e-4, 1.0, true),
            ParamSpec {
                name: "width".into(),
                dist: Distribution::Int {
                    low: 16,
                    high: 1024,
                    step: 1,
                    log: true,
                },
            },
            float("dropout", 0.0, 0.6, false),
            float("momentum", 0.0, 0.99, false),
            categorical("optimizer", &OPTIMIZERS),
            float("seed_shift", 0.0, 1.0, false),
            categorical("augment", &AUGMENT),
        ],
    }
}

/// The params as numbers: lr, width, dropout, momentum, optimizer index.
struct Hp {
    lr: f64,
    width: f64,
    dropout: f64,
    momentum: f64,
    optimizer: usize,
}

fn hp(p: &Params) -> Hp {
    let f = |n: &str| match p[n] {
        ParamValue::Float(x) => x,
        ParamValue::Int(i) => i as f64,
        ParamValue::Choice(c) => c as f64,
    };
    let ParamValue::Choice(optimizer) = p["optimizer"] else {
        panic!("optimizer")
    };
    Hp {
        lr: f("lr"),
        width: f("width"),
        dropout: f("dropout"),
        momentum: f("momentum"),
        optimizer,
    }
}

/// What a trial's curve settles at, and how fast: `value(t) = asymptote + 1.5 exp(-rate (t +
/// 1)) + noise`. `crossing`: a larger learning rate learns faster but settles higher (early
/// values mislead); `ranked`: every trial learns at about the same pace (early values rank as
/// the last ones do).
fn shape(problem: &str, h: &Hp) -> (f64, f64) {
    let u = h.lr.log10();
    let w = h.width.log2();
    let asymptote = 0.1
        + 0.25 * (u + 2.5).powi(2)
        + 0.04 * (w - 8.0).powi(2)
        + 0.8 * (h.dropout - 0.2).powi(2)
        + 0.5 * (h.momentum - 0.85).powi(2)
        + [0.0, 0.05, 0.15][h.optimizer];
    let rate = match problem {
        "crossing" => {
            0.06 * 10f64.powf(0.5 * (u + 2.0))
                * [1.0, 2.5, 1.8][h.optimizer]
                * (1.0 + h.momentum)
                * (1.0 - 0.5 * h.dropout)
                * (8.0 / w)
        }
        _ => 0.15 * (1.0 + 0.5 * h.momentum) * [1.0, 1.3, 1.2][h.optimizer],
    };
    (asymptote, rate)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// A standard normal draw that is a function of (seed, trial number, step) only.
fn gauss(seed: u64, number: u64, step: u64) -> f64 {
    let k = seed
        .wrapping_mul(1_000_003)
        .wrapping_add(number)
        .wrapping_mul(1_000_033)
        .wrapping_add(step);
    let u1 = unit(splitmix64(k));
    let u2 = unit(splitmix64(k ^ 0xD1B5_4A32_D192_ED03));
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

const NOISE: f64 = 0.03;

/// The value trial `number` reports at `step`, and without its noise.
fn value(problem: &str, seed: u64, number: u64, step: u64, p: &Params) -> (f64, f64) {
    let (asymptote, rate) = shape(problem, &hp(p));
    let clean = asymptote + 1.5 * (-rate * (step + 1) as f64).exp();
    (clean + NOISE * gauss(seed, number, step), clean)
}

/// What every run of one invocation shares.
#[derive(Clone, Copy)]
struct Plan {
    budget: u64,
    par: usize,
    steps: i64,
    sampler: SamplerKind,
}

struct Slot {
    number: i64,
    params: Params,
    next: i64,
}

struct Run {
    /// (steps spent when it completed, its value, its value without noise).
    completions: Vec<(u64, f64, f64)>,
    trials: i64,
    pruned: u64,
    brackets: Option<(i64, usize)>,
}

fn pruner_config(name: &str, steps: i64) -> PrunerConfig {
    match name {
        "none" => PrunerConfig::None,
        // Optuna's MedianPruner() defaults.
        "median" => PrunerConfig::Median {
            n_startup_trials: 5,
            n_warmup_steps: 0,
            interval_steps: 1,
        },
        // `[pruner] type = "asha"` defaults.
        "asha" => PrunerConfig::Asha {
            min_resource: 1,
            reduction_factor: 3,
            min_early_stopping_rate: 0,
        },
        // HyperbandPruner(min_resource=1, max_resource=steps, reduction_factor=3).
        "hyperband" => PrunerConfig::Hyperband {
            min_resource: 1,
            max_resource: MaxResource::Steps(steps),
            reduction_factor: 3,
            bootstrap_count: 0,
        },
        "hyperband-auto" => PrunerConfig::Hyperband {
            min_resource: 1,
            max_resource: MaxResource::Auto,
            reduction_factor: 3,
            bootstrap_count: 0,
        },
        other => usage(&format!("unknown pruner {other}")),
    }
}

/// One run (see the module docs for the schedule).
fn run_one(problem: &str, pruner: &str, seed: u64, plan: &Plan) -> Run {
    let Plan {
        budget,
        par,
        steps,
        sampler: kind,
    } = *plan;
    let space = space();
    let settings = SamplerConfig::default();
    let mut s = sampler::build(kind, &space, Some(seed), &[Direction::Minimize], &settings)
        .expect("a sampler");
    let name = format!("prune-{problem}-{seed}");
    let mut p = Pruner::new(pruner_config(pruner, steps), Direction::Minimize, &name);
    let dists: sweepd::study::Dists = space
        .params
        .iter()
        .map(|q| (q.name.clone(), q.dist.clone()))
        .collect();
    let mut slots: Vec<Slot> = Vec::new();
    let (mut used, mut number, mut pruned) = (0u64, 0i64, 0u64);
    let mut completions = Vec::new();
    while used < budget {
        while slots.len() < par {
            let params = s
                .sample(&space, &Params::new(), number as u64)
                .expect("a proposal");
            s.observe(number, &params);
            slots.push(Slot {
                number,
                params,
                next: 0,
            });
            number += 1;
        }
        let mut i = 0;
        while i < slots.len() && used < budget {
            let slot = &mut slots[i];
            let (v, clean) = value(
                problem,
                seed,
                slot.number as u64,
                slot.next as u64,
                &slot.params,
            );
            used += 1;
            let stop = p.report(slot.number, slot.next, v);
            let done = slot.next == steps - 1;
            if !stop && !done {
                slot.next += 1;
                i += 1;
                continue;
            }
            let slot = slots.remove(i);
            let state = if stop {
                pruned += 1;
                TrialState::Pruned
            } else {
                completions.push((used, v, clean));
                TrialState::Complete
            };
            p.finish(slot.number, state == TrialState::Complete);
            // As the daemon tells it (`Core::finish_end`): a pruned trial without a value (the
            // database holds its last report, which a restarted daemon reads).
            let values = match state {
                TrialState::Complete => vec![v],
                _ => Vec::new(),
            };
            s.tell(&TrialRecord {
                number: slot.number,
                params: slot.params,
                state,
                values,
                constraints: Vec::new(),
                distributions: dists.clone(),
            });
        }
    }
    Run {
        completions,
        trials: number,
        pruned,
        brackets: p.hyperband_brackets(),
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("prune_bench: {msg}");
    eprintln!(
        "usage: prune_bench [--problems crossing,ranked] [--pruners hyperband,asha,median,none] \
         [--seeds N] [--seed0 S] [--budget STEPS] [--par N] [--steps N] [--sampler tpe|random] \
         | --eval"
    );
    std::process::exit(2)
}

/// `{"problem", "seed", "number", "steps", "params": {name: external value}}` lines on stdin ->
/// `{"values": [...], "clean": [...]}`, the curve trial `number` would report.
fn eval() {
    let space = space();
    let out = std::io::stdout();
    let mut out = out.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let q: Value = serde_json::from_str(&line).expect("JSON line");
        let params: Params = space
            .params
            .iter()
            .map(|spec| {
                let v = spec.dist.from_external(&q["params"][&spec.name]);
                (spec.name.clone(), v.expect("a value in the space"))
            })
            .collect();
        let (problem, seed) = (q["problem"].as_str().unwrap(), q["seed"].as_u64().unwrap());
        let number = q["number"].as_u64().unwrap();
        let (values, clean): (Vec<f64>, Vec<f64>) = (0..q["steps"].as_u64().unwrap())
            .map(|t| value(problem, seed, number, t, &params))
            .unzip();
        writeln!(out, "{}", json!({"values": values, "clean": clean})).unwrap();
    }
}

fn main() {
    let mut problems = vec!["crossing".to_owned(), "ranked".into()];
    let mut pruners: Vec<String> = ["hyperband", "asha", "median", "none"]
        .map(String::from)
        .to_vec();
    let (mut seeds, mut seed0) = (20u64, 0u64);
    let mut plan = Plan {
        budget: 1350,
        par: 4,
        steps: 27,
        sampler: SamplerKind::Tpe,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage("a flag needs a value"));
        let num = |s: String| -> u64 { s.parse().unwrap_or_else(|_| usage("bad number")) };
        match flag.as_str() {
            "--problems" => problems = val().split(',').map(str::to_owned).collect(),
            "--pruners" => pruners = val().split(',').map(str::to_owned).collect(),
            "--seeds" => seeds = num(val()),
            "--seed0" => seed0 = num(val()),
            "--budget" => plan.budget = num(val()),
            "--par" => plan.par = (num(val()) as usize).max(1),
            "--steps" => plan.steps = num(val()).max(1) as i64,
            "--sampler" => {
                plan.sampler = match val().as_str() {
                    "tpe" => SamplerKind::Tpe,
                    "random" => SamplerKind::Random,
                    other => usage(&format!("unknown sampler {other}")),
                }
            }
            "--eval" => return eval(),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    for problem in &problems {
        for pruner in &pruners {
            for seed in seed0..seed0 + seeds {
                let t0 = std::time::Instant::now();
                let r = run_one(problem, pruner, seed, &plan);
                let sampler = match plan.sampler {
                    SamplerKind::Tpe => "",
                    _ => "random-",
                };
                let line = json!({
                    "problem": problem,
                    "method": format!("sweepd-{sampler}{pruner}"),
                    "seed": seed,
                    "budget": plan.budget,
                    "completions": r.completions,
                    "trials": r.trials,
                    "pruned": r.pruned,
                    "brackets": r.brackets,
                    "seconds": t0.elapsed().as_secs_f64(),
                });
                writeln!(out, "{line}").unwrap();
                out.flush().unwrap();
            }
        }
    }
}
