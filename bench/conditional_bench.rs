//! Sampler quality on conditional (define-by-run) search spaces: sweepd's samplers driven
//! directly (no daemon, no database) on objectives that choose their params as they run, the
//! way the daemon drives them over protocol 2, one JSON line per (function, sampler, seed) run.
//! `bench/conditional_bench.py` runs it next to Optuna's samplers on the same functions
//! (defined identically there) and writes its section of `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example conditional_bench -- \
//!     [--funcs all|branches,layers,pipeline] [--samplers tpe,tpe-group,random] \
//!     [--seeds 20] [--seed0 0] [--trials 100]
//! cargo run --release --example conditional_bench -- --eval  # {"func","params"} lines on stdin
//! ```
//!
//! Each trial goes through the calls the daemon makes: `propose` for a trial with no static
//! params (its relative values kept), then each param the objective asks for answered as
//! `supervisor::suggest` answers it (a name asked again: its value; a single-valued
//! distribution: that value; a relative value of a compatible distribution that contains it;
//! else `suggest`), `observe` after each new param, and `tell` with the COMPLETE record and the
//! distributions the trial used.

use serde_json::{json, Value};
use std::io::{BufRead, Write};
use sweepd::config::{SamplerConfig, SamplerKind};
use sweepd::sampler::{self, Relative, Sampler};
use sweepd::study::{
    Direction, Distribution, Dists, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};

/// How an objective gets a param's value: by name, from a distribution.
trait Ask {
    fn ask(&mut self, name: &str, dist: Distribution) -> ParamValue;

    fn float(&mut self, name: &str, low: f64, high: f64, log: bool) -> f64 {
        let d = Distribution::Float {
            low,
            high,
            step: None,
            log,
        };
        match self.ask(name, d) {
            ParamValue::Float(x) => x,
            v => panic!("{name}: {v:?}"),
        }
    }

    fn int(&mut self, name: &str, low: i64, high: i64, log: bool) -> i64 {
        let d = Distribution::Int {
            low,
            high,
            step: 1,
            log,
        };
        match self.ask(name, d) {
            ParamValue::Int(i) => i,
            v => panic!("{name}: {v:?}"),
        }
    }

    /// The index of the choice.
    fn choice(&mut self, name: &str, choices: &[&str]) -> usize {
        let d = Distribution::Categorical {
            choices: choices.iter().map(|c| json!(c)).collect(),
        };
        match self.ask(name, d) {
            ParamValue::Choice(i) => i,
            v => panic!("{name}: {v:?}"),
        }
    }
}

/// A conditional test function (minimized) and its known minimum.
struct Func {
    name: &'static str,
    optimum: f64,
    f: fn(&mut dyn Ask) -> f64,
}

/// Three models, each with its own params and optimum: "a" bottoms out at 0.5, "c" at 0.6,
/// only "b" reaches 0.
fn branches(t: &mut dyn Ask) -> f64 {
    match t.choice("model", &["a", "b", "c"]) {
        0 => {
            let x1 = t.float("a_x1", -5.0, 5.0, false);
            let x2 = t.float("a_x2", -5.0, 5.0, false);
            0.5 + 0.1 * ((x1 - 1.0).powi(2) + (x2 + 2.0).powi(2))
        }
        1 => {
            let y = t.float("b_y", 1e-4, 1.0, true);
            let n = t.int("b_n", 1, 20, false);
            (y.log10() + 2.0).powi(2) + 0.05 * (n as f64 - 7.0).powi(2)
        }
        _ => {
            let z = t.choice("c_z", &["p", "q", "r", "s"]);
            let w = t.float("c_w", 0.0, 1.0, false);
            0.6 + if z == 2 { 0.0 } else { 1.0 } + 4.0 * (w - 0.3).powi(2)
        }
    }
}

/// A network: `n_layers`, then one width per layer (the best width differs per layer), then a
/// learning rate and a dropout whose best value depends on the depth.
fn layers(t: &mut dyn Ask) -> f64 {
    let n = t.int("n_layers", 1, 4, false);
    let mut v = 0.3 * (n as f64 - 3.0).powi(2);
    for i in 0..n {
        let u = t.int(&format!("n_units_l{i}"), 4, 256, true);
        v += 0.1 * ((u as f64).log2() - (5.0 + i as f64)).powi(2);
    }
    let lr = t.float("lr", 1e-5, 1e-1, true);
    let dropout = t.float("dropout", 0.0, 0.5, false);
    v + 0.5 * (lr.log10() + 3.0).powi(2) + 2.0 * (dropout - 0.1 * n as f64).powi(2)
}

/// An optimizer with its own params, a learning rate whose best value depends on it, and a
/// scheduler of which one kind has params of its own.
fn pipeline(t: &mut dyn Ask) -> f64 {
    let lr = t.float("lr", 1e-5, 1.0, true);
    let mut v = match t.choice("optimizer", &["sgd", "adam"]) {
        0 => {
            let m = t.float("momentum", 0.0, 0.99, false);
            let nesterov = t.choice("nesterov", &["no", "yes"]);
            0.3 + 0.5 * (lr.log10() + 1.0).powi(2)
                + 3.0 * (m - 0.9).powi(2)
                + if nesterov == 1 { 0.0 } else { 0.2 }
        }
        _ => {
            let b1 = t.float("beta1", 0.5, 0.999, false);
            let eps = t.float("eps", 1e-10, 1e-6, true);
            0.5 * (lr.log10() + 3.0).powi(2)
                + 10.0 * (b1 - 0.9).powi(2)
                + 0.1 * (eps.log10() + 8.0).powi(2)
        }
    };
    v += match t.choice("scheduler", &["none", "cosine", "step"]) {
        0 => 0.4,
        1 => 0.1,
        _ => {
            let size = t.int("step_size", 1, 50, false);
            let gamma = t.float("gamma", 0.1, 0.9, false);
            0.002 * (size as f64 - 20.0).powi(2) + (gamma - 0.5).powi(2)
        }
    };
    v
}

fn functions() -> Vec<Func> {
    vec![
        Func {
            name: "branches",
            optimum: 0.0,
            f: branches,
        },
        Func {
            name: "layers",
            optimum: 0.0,
            f: layers,
        },
        Func {
            name: "pipeline",
            optimum: 0.1,
            f: pipeline,
        },
    ]
}

/// A trial as the daemon runs it (see the module docs).
struct Trial<'a> {
    sampler: &'a mut dyn Sampler,
    number: i64,
    relative: Relative,
    params: Params,
    dists: Dists,
}

impl Ask for Trial<'_> {
    fn ask(&mut self, name: &str, dist: Distribution) -> ParamValue {
        if let Some(v) = self.params.get(name) {
            return v.clone();
        }
        let v = match (dist.single(), self.relative.remove(name)) {
            (Some(v), _) => v,
            (None, Some((d, v))) if d.compatible(&dist).is_ok() && dist.contains(&v) => v,
            _ => self
                .sampler
                .suggest(name, &dist, self.number as u64)
                .expect("a value"),
        };
        self.params.insert(name.to_owned(), v.clone());
        self.dists.insert(name.to_owned(), dist);
        let mut seen = self.params.clone();
        for (n, (_, v)) in &self.relative {
            seen.entry(n.clone()).or_insert_with(|| v.clone());
        }
        self.sampler.observe(self.number, &seen);
        v
    }
}

/// Answers from given external values, recording which names were asked.
struct Given<'a> {
    values: &'a serde_json::Map<String, Value>,
    asked: Vec<String>,
}

impl Ask for Given<'_> {
    fn ask(&mut self, name: &str, dist: Distribution) -> ParamValue {
        self.asked.push(name.to_owned());
        let ext = self
            .values
            .get(name)
            .unwrap_or_else(|| panic!("{name} not given"));
        dist.from_external(ext)
            .unwrap_or_else(|| panic!("{name}: {ext} not in {dist:?}"))
    }
}

/// One sequential run; the best-so-far curve.
fn run_one(
    func: &Func,
    kind: SamplerKind,
    settings: &SamplerConfig,
    seed: u64,
    n: u64,
) -> Vec<f64> {
    let space = SearchSpace::default();
    let mut s = sampler::build(kind, &space, Some(seed), &[Direction::Minimize], settings)
        .expect("a sampler");
    let mut best = f64::INFINITY;
    let mut curve = Vec::with_capacity(n as usize);
    for number in 0..n {
        let proposal = s
            .propose(&space, &Params::new(), number)
            .expect("a proposal");
        let relative = proposal.relative;
        let seen: Params = relative
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect();
        s.observe(number as i64, &seen);
        let mut t = Trial {
            sampler: s.as_mut(),
            number: number as i64,
            relative,
            params: Params::new(),
            dists: Dists::new(),
        };
        let value = (func.f)(&mut t);
        let (params, dists) = (t.params, t.dists);
        s.tell(&TrialRecord {
            number: number as i64,
            params,
            state: TrialState::Complete,
            values: vec![value],
            constraints: Vec::new(),
            distributions: dists,
        });
        best = best.min(value);
        curve.push(best);
    }
    curve
}

fn usage(msg: &str) -> ! {
    eprintln!("conditional_bench: {msg}");
    eprintln!(
        "usage: conditional_bench [--funcs all|a,b] [--samplers tpe,tpe-group,random] \
         [--seeds N] [--seed0 S] [--trials N] | --eval"
    );
    std::process::exit(2)
}

fn main() {
    let mut funcs = vec!["all".to_owned()];
    let mut samplers = vec!["tpe".to_owned(), "tpe-group".into(), "random".into()];
    let (mut seeds, mut seed0, mut trials, mut eval) = (20u64, 0u64, 100u64, false);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage("a flag needs a value"));
        let num = |s: String| -> u64 { s.parse().unwrap_or_else(|_| usage("bad number")) };
        match flag.as_str() {
            "--funcs" => funcs = val().split(',').map(str::to_owned).collect(),
            "--samplers" => samplers = val().split(',').map(str::to_owned).collect(),
            "--seeds" => seeds = num(val()),
            "--seed0" => seed0 = num(val()),
            "--trials" => trials = num(val()),
            "--eval" => eval = true,
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let all = functions();
    let out = std::io::stdout();
    let mut out = out.lock();
    if eval {
        // {"func", "params": {name: external value}} -> {"value", "asked": [names in order]}
        for line in std::io::stdin().lock().lines() {
            let line = line.expect("stdin");
            if line.trim().is_empty() {
                continue;
            }
            let q: Value = serde_json::from_str(&line).expect("JSON line");
            let f = all
                .iter()
                .find(|f| f.name == q["func"])
                .expect("known func");
            let mut g = Given {
                values: q["params"].as_object().expect("params"),
                asked: Vec::new(),
            };
            let value = (f.f)(&mut g);
            writeln!(out, "{}", json!({"value": value, "asked": g.asked})).unwrap();
        }
        return;
    }
    let chosen: Vec<&Func> = all
        .iter()
        .filter(|f| funcs == ["all"] || funcs.iter().any(|n| n == f.name))
        .collect();
    for f in chosen {
        for sname in &samplers {
            let (kind, settings) = match sname.as_str() {
                // `[sampler]`'s defaults, Optuna's: multivariate over the intersection space.
                "tpe" => (SamplerKind::Tpe, SamplerConfig::default()),
                // With Optuna's group decomposition.
                "tpe-group" => (
                    SamplerKind::Tpe,
                    SamplerConfig {
                        group: true,
                        ..SamplerConfig::default()
                    },
                ),
                "random" => (SamplerKind::Random, SamplerConfig::default()),
                other => usage(&format!("unknown sampler {other}")),
            };
            for seed in seed0..seed0 + seeds {
                let curve = run_one(f, kind, &settings, seed, trials);
                let line = json!({
                    "func": f.name,
                    "optimum": f.optimum,
                    "sampler": format!("sweepd-{sname}"),
                    "seed": seed,
                    "trials": trials,
                    "curve": curve,
                });
                writeln!(out, "{line}").unwrap();
                out.flush().unwrap();
            }
        }
    }
}
