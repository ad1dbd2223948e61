//! Sampler-quality benchmark: drives sweepd's samplers directly (no daemon, no database) on
//! synthetic test functions, in a sequential ask/evaluate/tell loop, and prints one JSON line per
//! (function, sampler, seed) run. `bench/search_bench.py` runs it next to Optuna's samplers on
//! the same functions (defined identically there) and writes the tables in `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example sampler_bench -- \
//!     [--funcs all|branin,hartmann6,...] [--samplers random,tpe] [--seeds 20] [--seed0 0] \
//!     [--trials 200] [--n-startup 10] [--n-ei 24] [--multivariate true] [--constant-liar true]
//! cargo run --release --example sampler_bench -- --list    # the functions and their spaces
//! cargo run --release --example sampler_bench -- --eval    # JSON lines {"func","params"} on stdin
//! ```
//!
//! Each trial goes through the same calls the daemon makes: `sample` (keyed by the trial number),
//! `observe` (the trial is running), then `tell` with the COMPLETE record. The samplers are built
//! with `sweepd::sampler::build`, the constructor the daemon uses.

use serde_json::{json, Value};
use std::f64::consts::PI;
use std::io::{BufRead, Write};
use std::time::Instant;
use sweepd::config::{SamplerConfig, SamplerKind};
use sweepd::sampler;
use sweepd::study::{
    Direction, Distribution, ParamSpec, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};

/// A test function: its search space and the objective (minimized).
struct Func {
    name: &'static str,
    /// The known global minimum, for the report.
    optimum: f64,
    space: SearchSpace,
    f: fn(&Params) -> f64,
}

fn float(name: &str, low: f64, high: f64, log: bool) -> ParamSpec {
    ParamSpec {
        name: name.to_owned(),
        dist: Distribution::Float {
            low,
            high,
            step: None,
            log,
        },
    }
}

fn int(name: &str, low: i64, high: i64, step: i64, log: bool) -> ParamSpec {
    ParamSpec {
        name: name.to_owned(),
        dist: Distribution::Int {
            low,
            high,
            step,
            log,
        },
    }
}

fn categorical(name: &str, choices: &[&str]) -> ParamSpec {
    ParamSpec {
        name: name.to_owned(),
        dist: Distribution::Categorical {
            choices: choices.iter().map(|c| json!(c)).collect(),
        },
    }
}

/// `x0 .. x{d-1}`, each a float in [low, high].
fn box_space(d: usize, low: f64, high: f64) -> SearchSpace {
    SearchSpace {
        params: (0..d)
            .map(|i| float(&format!("x{i}"), low, high, false))
            .collect(),
    }
}

fn xs(p: &Params) -> Vec<f64> {
    // Params is a BTreeMap: "x10" would sort before "x2", so index by parsed number instead.
    let mut v: Vec<(usize, f64)> = p
        .iter()
        .map(|(k, v)| {
            let i: usize = k[1..].parse().expect("param named x<i>");
            match v {
                ParamValue::Float(x) => (i, *x),
                other => panic!("expected float for {k}, got {other:?}"),
            }
        })
        .collect();
    v.sort_by_key(|(i, _)| *i);
    v.into_iter().map(|(_, x)| x).collect()
}

fn branin(p: &Params) -> f64 {
    let x = xs(p);
    let (x1, x2) = (x[0], x[1]);
    let b = 5.1 / (4.0 * PI * PI);
    let c = 5.0 / PI;
    let t = 1.0 / (8.0 * PI);
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

const H6_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
const H6_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
const H6_P: [[f64; 6]; 4] = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
];

fn hartmann6(p: &Params) -> f64 {
    let x = xs(p);
    let mut s = 0.0;
    for i in 0..4 {
        let mut inner = 0.0;
        for j in 0..6 {
            inner += H6_A[i][j] * (x[j] - H6_P[i][j]).powi(2);
        }
        s += H6_ALPHA[i] * (-inner).exp();
    }
    -s
}

fn rosenbrock(p: &Params) -> f64 {
    let x = xs(p);
    let mut s = 0.0;
    for i in 0..x.len() - 1 {
        s += 100.0 * (x[i + 1] - x[i] * x[i]).powi(2) + (1.0 - x[i]).powi(2);
    }
    s
}

fn styblinski_tang(p: &Params) -> f64 {
    let x = xs(p);
    0.5 * x
        .iter()
        .map(|v| v.powi(4) - 16.0 * v * v + 5.0 * v)
        .sum::<f64>()
}

fn ackley(p: &Params) -> f64 {
    let x = xs(p);
    let d = x.len() as f64;
    let sq = x.iter().map(|v| v * v).sum::<f64>() / d;
    let cs = x.iter().map(|v| (2.0 * PI * v).cos()).sum::<f64>() / d;
    -20.0 * (-0.2 * sq.sqrt()).exp() - cs.exp() + 20.0 + std::f64::consts::E
}

/// Optimizers of the mixed function: (name, best log10(lr), offset).
const NN_OPTIMIZERS: [(&str, f64, f64); 3] = [
    ("sgd", -1.5, 0.3),
    ("adam", -3.0, 0.0),
    ("rmsprop", -3.5, 0.1),
];

/// A "neural-net-like" mixed function: a log-scale learning rate whose best value depends on a
/// categorical optimizer (each with its own offset), an int layer count with a step, a log-scale
/// int width, and a dropout whose best value depends on the depth. Minimum 0 at
/// (adam, lr=1e-3, n_layers=4, width=128, dropout=0.2).
fn nnlike(p: &Params) -> f64 {
    let lr = match p["lr"] {
        ParamValue::Float(x) => x,
        ref o => panic!("lr: {o:?}"),
    };
    let n_layers = match p["n_layers"] {
        ParamValue::Int(i) => i as f64,
        ref o => panic!("n_layers: {o:?}"),
    };
    let width = match p["width"] {
        ParamValue::Int(i) => i as f64,
        ref o => panic!("width: {o:?}"),
    };
    let (_, best_log_lr, offset) = match p["optimizer"] {
        ParamValue::Choice(i) => NN_OPTIMIZERS[i],
        ref o => panic!("optimizer: {o:?}"),
    };
    let dropout = match p["dropout"] {
        ParamValue::Float(x) => x,
        ref o => panic!("dropout: {o:?}"),
    };
    offset
        + 0.5 * (lr.log10() - best_log_lr).powi(2)
        + 0.08 * (n_layers - 4.0).powi(2)
        + 0.05 * (width.log2() - 7.0).powi(2)
        + 3.0 * (dropout - 0.05 * n_layers).powi(2)
}

fn functions() -> Vec<Func> {
    let nn_space = SearchSpace {
        params: vec![
            float("lr", 1e-5, 1e-1, true),
            int("n_layers", 2, 12, 2, false),
            int("width", 16, 512, 1, true),
            categorical(
                "optimizer",
                &NN_OPTIMIZERS.iter().map(|o| o.0).collect::<Vec<_>>(),
            ),
            float("dropout", 0.0, 0.6, false),
        ],
    };
    vec![
        Func {
            name: "branin",
            optimum: 0.397887357729738,
            space: SearchSpace {
                params: vec![
                    float("x0", -5.0, 10.0, false),
                    float("x1", 0.0, 15.0, false),
                ],
            },
            f: branin,
        },
        Func {
            name: "hartmann6",
            optimum: -3.32236801141551,
            space: box_space(6, 0.0, 1.0),
            f: hartmann6,
        },
        Func {
            name: "rosenbrock4",
            optimum: 0.0,
            space: box_space(4, -5.0, 10.0),
            f: rosenbrock,
        },
        Func {
            name: "styblinski_tang10",
            optimum: -39.16616570377142 * 10.0,
            space: box_space(10, -5.0, 5.0),
            f: styblinski_tang,
        },
        Func {
            name: "ackley5",
            optimum: 0.0,
            space: box_space(5, -32.768, 32.768),
            f: ackley,
        },
        Func {
            name: "nnlike_mixed",
            optimum: 0.0,
            space: nn_space,
            f: nnlike,
        },
    ]
}

fn dist_json(d: &Distribution) -> Value {
    serde_json::from_str(&d.optuna_json()).expect("sweepd writes valid JSON")
}

struct Args {
    funcs: Vec<String>,
    samplers: Vec<String>,
    seeds: u64,
    seed0: u64,
    trials: usize,
    settings: SamplerConfig,
    mode: Mode,
}

enum Mode {
    Run,
    List,
    Eval,
}

fn parse_bool(s: &str) -> bool {
    match s {
        "true" | "1" | "yes" => true,
        "false" | "0" | "no" => false,
        _ => usage(&format!("not a boolean: {s}")),
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("sampler_bench: {msg}");
    eprintln!(
        "usage: sampler_bench [--funcs all|a,b] [--samplers random,tpe] [--seeds N] [--seed0 S] \
         [--trials N] [--n-startup N] [--n-ei N] [--multivariate B] [--constant-liar B] \
         | --list | --eval"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        funcs: vec!["all".into()],
        samplers: vec!["random".into(), "tpe".into()],
        seeds: 20,
        seed0: 0,
        trials: 200,
        settings: SamplerConfig::default(),
        mode: Mode::Run,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let num = |s: String| -> u64 { s.parse().unwrap_or_else(|_| usage("bad number")) };
        match flag.as_str() {
            "--funcs" => a.funcs = val().split(',').map(str::to_owned).collect(),
            "--samplers" => a.samplers = val().split(',').map(str::to_owned).collect(),
            "--seeds" => a.seeds = num(val()),
            "--seed0" => a.seed0 = num(val()),
            "--trials" => a.trials = num(val()) as usize,
            "--n-startup" => a.settings.n_startup_trials = num(val()) as usize,
            "--n-ei" => a.settings.n_ei_candidates = num(val()) as usize,
            "--multivariate" => a.settings.multivariate = parse_bool(&val()),
            "--constant-liar" => a.settings.constant_liar = parse_bool(&val()),
            "--list" => a.mode = Mode::List,
            "--eval" => a.mode = Mode::Eval,
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    a
}

/// One sequential run: `trials` ask/evaluate/tell rounds. Returns the best-so-far curve and the
/// seconds spent in `sample`+`observe` (ask) and in `tell`, per trial.
fn run_one(
    func: &Func,
    kind: SamplerKind,
    seed: u64,
    trials: usize,
    settings: &SamplerConfig,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut s = sampler::build(kind, &func.space, Some(seed), Direction::Minimize, settings)
        .unwrap_or_else(|e| panic!("{}: {e}", func.name));
    let (mut curve, mut ask, mut tell) = (
        Vec::with_capacity(trials),
        Vec::with_capacity(trials),
        Vec::with_capacity(trials),
    );
    let mut best = f64::INFINITY;
    let none = Params::new();
    for n in 0..trials {
        let t0 = Instant::now();
        let params = s
            .sample(&func.space, &none, n as u64)
            .expect("sampler proposed nothing");
        s.observe(n as i64, &params);
        ask.push(t0.elapsed().as_secs_f64());
        for spec in &func.space.params {
            let v = params.get(&spec.name).expect("every param proposed");
            assert!(spec.dist.contains(v), "{}: {v:?} out of domain", spec.name);
        }
        let value = (func.f)(&params);
        best = best.min(value);
        curve.push(best);
        let record = TrialRecord {
            number: n as i64,
            params,
            state: TrialState::Complete,
            value: Some(value),
            constraints: Vec::new(),
        };
        let t1 = Instant::now();
        s.tell(&record);
        tell.push(t1.elapsed().as_secs_f64());
    }
    (curve, ask, tell)
}

fn main() {
    let args = parse_args();
    let all = functions();
    let out = std::io::stdout();
    let mut out = out.lock();
    match args.mode {
        Mode::List => {
            for f in &all {
                let params: Vec<Value> = f
                    .space
                    .params
                    .iter()
                    .map(|p| json!({"name": p.name, "distribution": dist_json(&p.dist)}))
                    .collect();
                let line = json!({"func": f.name, "optimum": f.optimum, "params": params});
                writeln!(out, "{line}").unwrap();
            }
        }
        Mode::Eval => {
            // {"func": name, "params": {name: external value}} -> {"value": f}
            for line in std::io::stdin().lock().lines() {
                let line = line.expect("stdin");
                if line.trim().is_empty() {
                    continue;
                }
                let q: Value = serde_json::from_str(&line).expect("JSON line");
                let name = q["func"].as_str().expect("func");
                let f = all.iter().find(|f| f.name == name).expect("known func");
                let mut params = Params::new();
                for spec in &f.space.params {
                    let ext = &q["params"][&spec.name];
                    let v = spec
                        .dist
                        .from_external(ext)
                        .unwrap_or_else(|| panic!("{name}.{}: {ext} not in domain", spec.name));
                    params.insert(spec.name.clone(), v);
                }
                writeln!(out, "{}", json!({"value": (f.f)(&params)})).unwrap();
            }
        }
        Mode::Run => {
            let chosen: Vec<&Func> = if args.funcs == ["all"] {
                all.iter().collect()
            } else {
                args.funcs
                    .iter()
                    .map(|n| {
                        all.iter()
                            .find(|f| f.name == n)
                            .unwrap_or_else(|| usage(&format!("unknown function {n}")))
                    })
                    .collect()
            };
            for f in chosen {
                for sname in &args.samplers {
                    let kind = match sname.as_str() {
                        "random" => SamplerKind::Random,
                        "tpe" => SamplerKind::Tpe,
                        other => usage(&format!("unknown sampler {other}")),
                    };
                    for seed in args.seed0..args.seed0 + args.seeds {
                        let (curve, ask, tell) =
                            run_one(f, kind, seed, args.trials, &args.settings);
                        let line = json!({
                            "func": f.name,
                            "sampler": format!("sweepd-{sname}"),
                            "seed": seed,
                            "trials": args.trials,
                            "curve": curve,
                            "ask_s": ask.iter().sum::<f64>(),
                            "ask_s_max": ask.iter().cloned().fold(0.0, f64::max),
                            "tell_s": tell.iter().sum::<f64>(),
                        });
                        writeln!(out, "{line}").unwrap();
                        out.flush().unwrap();
                    }
                }
            }
        }
    }
}
