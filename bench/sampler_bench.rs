//! Sampler-quality benchmark: drives sweepd's samplers directly (no daemon, no database) on
//! synthetic test functions, in a sequential ask/evaluate/tell loop, and prints one JSON line per
//! (function, sampler, seed) run. `bench/search_bench.py` runs it next to Optuna's samplers on
//! the same functions (defined identically there) and writes the tables in `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example sampler_bench -- \
//!     [--funcs all|branin,hartmann6,...] [--samplers random,tpe] [--seeds 20] [--seed0 0] \
//!     [--trials 200] [--n-startup 10] [--n-ei 24] [--multivariate true] [--constant-liar true] \
//!     [--batch 1]
//! cargo run --release --example sampler_bench -- --list    # the functions and their spaces
//! cargo run --release --example sampler_bench -- --eval    # JSON lines {"func","params"} on stdin
//! cargo run --release --example sampler_bench -- --scenarios [--seeds 20]   # TPE vs Optuna 5.0
//! cargo run --release --example sampler_bench -- --timing [--trials 1000]   # TPE's cost
//! cargo run --release --example sampler_bench -- --timing-gp [--sizes 100,300,1000]  # the GP's
//! ```
//!
//! `--samplers` takes `random`, `tpe` and `gp`. `--batch N` runs N trials at once: N proposals
//! (each made while the ones before it run, as the daemon makes them), then their N values told,
//! which is how `bench/gp_bench.py` runs the GP with 4 trials in flight. `--timing-gp` prints,
//! per size N and function, the milliseconds a GP proposal takes with N COMPLETE trials (random
//! points) and 3 running.
//!
//! `--scenarios` runs the problems of TPE's unit tests (`src/sampler/tpe/`), which check a few
//! seeds each, over `--seeds` seeds, and prints each figure's mean, min and max next to what
//! Optuna 5.0's `TPESampler(seed=s)` gave on the same problem with the same trial counts (run
//! by hand; the figures are in [`SCENARIO_REFERENCE`]). `--timing` times `--trials` sequential
//! rounds on a 5-param space, then one proposal with that much history, multivariate and not.
//!
//! Each trial goes through the same calls the daemon makes: `sample` (keyed by the trial number),
//! `observe` (the trial is running), then `tell` with the COMPLETE record. The samplers are built
//! with `sweepd::sampler::build`, the constructor the daemon uses.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::io::{BufRead, Write};
use std::ops::Range;
use std::time::Instant;
use sweepd::config::{SamplerConfig, SamplerKind};
use sweepd::sampler::{self, Sampler};
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
    /// `--trials`; each mode has its own default.
    trials: Option<usize>,
    settings: SamplerConfig,
    /// Trials in flight at once (`--batch`).
    batch: usize,
    /// `--timing-gp`'s history sizes.
    sizes: Vec<u64>,
    mode: Mode,
}

enum Mode {
    Run,
    List,
    Eval,
    Scenarios,
    Timing,
    TimingGp,
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
         [--batch N] | --list | --eval | --scenarios [--seeds N] | --timing [--trials N] \
         | --timing-gp [--sizes 100,300,1000]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        funcs: vec!["all".into()],
        samplers: vec!["random".into(), "tpe".into()],
        seeds: 20,
        seed0: 0,
        trials: None,
        settings: SamplerConfig::default(),
        batch: 1,
        sizes: vec![100, 300, 1000],
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
            "--trials" => a.trials = Some(num(val()) as usize),
            "--n-startup" => a.settings.n_startup_trials = num(val()) as usize,
            "--n-ei" => a.settings.n_ei_candidates = num(val()) as usize,
            "--multivariate" => a.settings.multivariate = Some(parse_bool(&val())),
            "--constant-liar" => a.settings.constant_liar = parse_bool(&val()),
            "--list" => a.mode = Mode::List,
            "--eval" => a.mode = Mode::Eval,
            "--scenarios" => a.mode = Mode::Scenarios,
            "--timing" => a.mode = Mode::Timing,
            "--timing-gp" => a.mode = Mode::TimingGp,
            "--batch" => a.batch = num(val()).max(1) as usize,
            "--sizes" => a.sizes = val().split(',').map(|s| num(s.to_owned())).collect(),
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    a
}

/// One trial of a sequential run: what was proposed, its value, and the seconds spent in
/// `sample` + `observe` (ask) and in `tell`.
struct Step {
    params: Params,
    value: f64,
    ask_s: f64,
    tell_s: f64,
}

/// Sequential trials `numbers`, through the calls the daemon makes: `sample` keyed by the trial
/// number, `observe` (the trial is running), evaluate, then `tell` the COMPLETE record with the
/// objective's value and constraint values.
fn drive(
    s: &mut dyn Sampler,
    space: &SearchSpace,
    numbers: Range<u64>,
    f: &dyn Fn(&Params) -> (f64, Vec<f64>),
) -> Vec<Step> {
    drive_batched(s, space, numbers, 1, f)
}

/// [`drive`] with `batch` trials in flight: `batch` proposals (each observed before the next is
/// made), then their values told in order.
fn drive_batched(
    s: &mut dyn Sampler,
    space: &SearchSpace,
    numbers: Range<u64>,
    batch: usize,
    f: &dyn Fn(&Params) -> (f64, Vec<f64>),
) -> Vec<Step> {
    let none = Params::new();
    let mut steps = Vec::with_capacity(numbers.clone().count());
    let mut next = numbers.start;
    while next < numbers.end {
        let end = (next + batch as u64).min(numbers.end);
        let asked: Vec<(u64, Params, f64)> = (next..end)
            .map(|n| {
                let t0 = Instant::now();
                let params = s.sample(space, &none, n).expect("sampler proposed nothing");
                s.observe(n as i64, &params);
                let ask_s = t0.elapsed().as_secs_f64();
                for spec in &space.params {
                    let v = params.get(&spec.name).expect("every param proposed");
                    assert!(spec.dist.contains(v), "{}: {v:?} out of domain", spec.name);
                }
                (n, params, ask_s)
            })
            .collect();
        for (n, params, ask_s) in asked {
            let (value, constraints) = f(&params);
            let record = complete(space, n, params, value, constraints);
            let t1 = Instant::now();
            s.tell(&record);
            steps.push(Step {
                params: record.params,
                value,
                ask_s,
                tell_s: t1.elapsed().as_secs_f64(),
            });
        }
        next = end;
    }
    steps
}

/// A COMPLETE trial of `space`.
fn complete(
    space: &SearchSpace,
    n: u64,
    params: Params,
    value: f64,
    constraints: Vec<f64>,
) -> TrialRecord {
    TrialRecord {
        number: n as i64,
        params,
        state: TrialState::Complete,
        values: vec![value],
        constraints,
        distributions: space
            .params
            .iter()
            .map(|p| (p.name.clone(), p.dist.clone()))
            .collect(),
    }
}

/// One sequential run: `trials` ask/evaluate/tell rounds. Returns the best-so-far curve and the
/// seconds spent in `sample`+`observe` (ask) and in `tell`, per trial.
fn run_one(
    func: &Func,
    kind: SamplerKind,
    seed: u64,
    trials: usize,
    batch: usize,
    settings: &SamplerConfig,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut s = sampler::build(
        kind,
        &func.space,
        Some(seed),
        &[Direction::Minimize],
        settings,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", func.name));
    let steps = drive_batched(&mut *s, &func.space, 0..trials as u64, batch, &|p| {
        ((func.f)(p), Vec::new())
    });
    let mut best = f64::INFINITY;
    let curve = steps
        .iter()
        .map(|st| {
            best = best.min(st.value);
            best
        })
        .collect();
    let ask = steps.iter().map(|st| st.ask_s).collect();
    let tell = steps.iter().map(|st| st.tell_s).collect();
    (curve, ask, tell)
}

// ---- TPE scenarios and timing: what TPE's unit tests check at a few seeds, over many. ----

/// Optuna 5.0's `TPESampler(seed=s)` on each scenario's problem, with the same trial counts,
/// as mean (min to max) over 20 seeds (80 for `mixed5`), and what this port gave when they were
/// last compared. Run by hand: the problems are the ones [`scenarios`] defines.
const SCENARIO_REFERENCE: &[(&str, &str)] = &[
    (
        "quadratic mv=true: median |x-3| of the last 20 of 50",
        "1.86 (1.47 to 2.20); port 1.87 (1.59 to 2.21)",
    ),
    (
        "quadratic mv=false: median |x-3| of the last 20 of 50",
        "1.86 (1.47 to 2.20)",
    ),
    (
        "quadratic maximize: median |x-3| of the last 20 of 50",
        "1.86 (1.47 to 2.20)",
    ),
    (
        "categorical mv=true: c1 among the 40 after startup",
        "23.5 (22 to 25); port 23.5",
    ),
    (
        "categorical mv=false: c1 among the 40 after startup",
        "28.7 (28 to 30); port 29.3",
    ),
    (
        "log param: median decades from 1e-3, last 20 of 50",
        "0.36 (0.27 to 0.47); port 0.37",
    ),
    (
        "stepped int: at the optimum, last 50 of 110",
        "25.5; port 25.3",
    ),
    (
        "constrained: feasible among the last 20 of 50",
        "11.5 (9 to 14); port 11.5",
    ),
    (
        "constrained: in [4, 5] among the last 20 of 50",
        "6.4; port 6.3",
    ),
    ("unconstrained: x <= 5 among the last 20 of 50", "0 to 4"),
    ("mixed5 mv=true: best of 100", "0.29; port 0.31 (80 seeds)"),
    (
        "mixed5 mv=true: median of the last 20 of 100",
        "0.70; port 0.78 (80 seeds)",
    ),
    ("mixed5 mv=false: best of 100", "0.15; port 0.16 (80 seeds)"),
    (
        "mixed5 mv=false: median of the last 20 of 100",
        "0.87; port 0.80 (80 seeds)",
    ),
];

/// A param's value as a number: the float, the int, or the choice's index.
fn num(p: &Params, k: &str) -> f64 {
    match p[k] {
        ParamValue::Float(x) => x,
        ParamValue::Int(i) => i as f64,
        ParamValue::Choice(c) => c as f64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// TPE as `[sampler]` builds it (constant liar included), for one seed.
struct Tpe<'a> {
    base: &'a SamplerConfig,
    seed: u64,
}

impl Tpe<'_> {
    fn build(
        &self,
        space: &SearchSpace,
        direction: Direction,
        multivariate: bool,
    ) -> Box<dyn Sampler> {
        let settings = SamplerConfig {
            multivariate: Some(multivariate),
            ..self.base.clone()
        };
        sampler::build(
            SamplerKind::Tpe,
            space,
            Some(self.seed),
            &[direction],
            &settings,
        )
        .unwrap_or_else(|e| panic!("tpe: {e}"))
    }

    /// `n` sequential trials.
    fn run(
        &self,
        space: &SearchSpace,
        direction: Direction,
        multivariate: bool,
        n: u64,
        f: &dyn Fn(&Params) -> (f64, Vec<f64>),
    ) -> Vec<Params> {
        let mut s = self.build(space, direction, multivariate);
        drive(&mut *s, space, 0..n, f)
            .into_iter()
            .map(|st| st.params)
            .collect()
    }
}

fn quadratic(p: &Params) -> (f64, Vec<f64>) {
    ((num(p, "x") - 3.0).powi(2), vec![])
}

/// The 5-param problem of `mixed5` and `--timing`.
fn mixed5_space() -> SearchSpace {
    SearchSpace {
        params: vec![
            float("lr", 1e-5, 1e-1, true),
            float("dropout", 0.0, 0.5, false),
            int("layers", 1, 8, 1, false),
            int("width", 16, 1024, 1, true),
            categorical("opt", &["c0", "c1", "c2"]),
        ],
    }
}

fn mixed5(p: &Params) -> (f64, Vec<f64>) {
    let v = (num(p, "lr").log10() + 3.0).powi(2)
        + (num(p, "dropout") - 0.2).powi(2)
        + (num(p, "layers") - 4.0).abs()
        + (num(p, "width").log2() - 8.0).abs()
        + num(p, "opt");
    (v, vec![])
}

/// How many of `ps[from..]` satisfy `pred`, as a figure.
fn count(ps: &[Params], from: usize, pred: impl Fn(&Params) -> bool) -> f64 {
    ps[from..].iter().filter(|p| pred(p)).count() as f64
}

/// The figures of [`SCENARIO_REFERENCE`] for one seed, in its order.
fn scenario_figures(base: &SamplerConfig, seed: u64) -> Vec<f64> {
    let tpe = Tpe { base, seed };
    let min = Direction::Minimize;
    let x10 = SearchSpace {
        params: vec![float("x", -10.0, 10.0, false)],
    };
    let last20_err =
        |ps: &[Params]| median(ps[30..].iter().map(|p| (num(p, "x") - 3.0).abs()).collect());
    let mut out = Vec::new();
    for mv in [true, false] {
        out.push(last20_err(&tpe.run(&x10, min, mv, 50, &quadratic)));
    }
    let max_quadratic = |p: &Params| (-quadratic(p).0, vec![]);
    out.push(last20_err(&tpe.run(
        &x10,
        Direction::Maximize,
        true,
        50,
        &max_quadratic,
    )));

    // "c1" is best whatever x.
    let cat_space = SearchSpace {
        params: vec![
            categorical("c", &["c0", "c1", "c2", "c3"]),
            float("x", 0.0, 1.0, false),
        ],
    };
    let fc = |p: &Params| {
        let not_c1 = f64::from(u8::from(p["c"] != ParamValue::Choice(1)));
        (not_c1 + 0.3 * num(p, "x"), vec![])
    };
    for mv in [true, false] {
        let ps = tpe.run(&cat_space, min, mv, 50, &fc);
        out.push(count(&ps, 10, |p| p["c"] == ParamValue::Choice(1)));
    }

    let log_space = SearchSpace {
        params: vec![float("lr", 1e-5, 1e-1, true)],
    };
    let decades = |p: &Params| (num(p, "lr").log10() + 3.0).abs();
    let ps = tpe.run(&log_space, min, true, 50, &|p| (decades(p).powi(2), vec![]));
    out.push(median(ps[30..].iter().map(decades).collect()));

    // high is off the grid: the legal values are 2, 5, ..., 29.
    let int_space = SearchSpace {
        params: vec![int("n", 2, 31, 3, false)],
    };
    let ps = tpe.run(&int_space, min, true, 110, &|p| {
        ((num(p, "n") - 14.0).abs(), vec![])
    });
    out.push(count(&ps, 60, |p| num(p, "n") == 14.0));

    // Better the larger x, but x > 5 violates a constraint.
    let x_0_10 = SearchSpace {
        params: vec![float("x", 0.0, 10.0, false)],
    };
    let ps = tpe.run(&x_0_10, min, true, 50, &|p| {
        let x = num(p, "x");
        (-x, vec![if x > 5.0 { 1.0 } else { 0.0 }])
    });
    out.push(count(&ps, 30, |p| num(p, "x") <= 5.0));
    out.push(count(&ps, 30, |p| (4.0..=5.0).contains(&num(p, "x"))));
    let ps = tpe.run(&x_0_10, min, true, 50, &|p| (-num(p, "x"), vec![]));
    out.push(count(&ps, 30, |p| num(p, "x") <= 5.0));

    let space = mixed5_space();
    for mv in [true, false] {
        let values: Vec<f64> = tpe
            .run(&space, min, mv, 100, &mixed5)
            .iter()
            .map(|p| mixed5(p).0)
            .collect();
        out.push(values.iter().copied().fold(f64::INFINITY, f64::min));
        out.push(median(values[80..].to_vec()));
    }
    out
}

/// `--scenarios`: each figure's mean, min and max over the seeds, next to Optuna 5.0's.
fn scenarios(args: &Args, out: &mut impl Write) {
    let mut figures: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for seed in args.seed0..args.seed0 + args.seeds {
        let seed_figures = scenario_figures(&args.settings, seed);
        assert_eq!(
            seed_figures.len(),
            SCENARIO_REFERENCE.len(),
            "a figure per scenario"
        );
        for (i, v) in seed_figures.into_iter().enumerate() {
            figures.entry(i).or_default().push(v);
        }
    }
    writeln!(
        out,
        "{} seeds from {}; mean (min to max) | Optuna 5.0",
        args.seeds, args.seed0
    )
    .unwrap();
    for (i, (name, reference)) in SCENARIO_REFERENCE.iter().enumerate() {
        let v = &figures[&i];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        writeln!(
            out,
            "{name:55} {mean:7.3} ({lo:.3} to {hi:.3}) | {reference}"
        )
        .unwrap();
    }
}

/// `--timing`: `trials` sequential rounds on the 5-param space, then 50 proposals with that
/// much history, for multivariate TPE and independent TPE.
fn timing(args: &Args, out: &mut impl Write) {
    let trials = args.trials.unwrap_or(1000) as u64;
    let space = mixed5_space();
    for multivariate in [true, false] {
        let tpe = Tpe {
            base: &args.settings,
            seed: args.seed0,
        };
        let mut s = tpe.build(&space, Direction::Minimize, multivariate);
        let t = Instant::now();
        let steps = drive(&mut *s, &space, 0..trials, &mixed5);
        let total = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        for k in 0..50 {
            s.sample(&space, &Params::new(), trials + k);
        }
        let last = t.elapsed().as_secs_f64() * 1e3 / 50.0;
        let best = steps
            .iter()
            .map(|st| st.value)
            .fold(f64::INFINITY, f64::min);
        writeln!(
            out,
            "multivariate={multivariate}: {trials} rounds in {total:.0} ms = {:.2} ms/round; \
             {last:.2} ms/sample at {trials} trials; best {best:.3}",
            total / trials.max(1) as f64
        )
        .unwrap();
    }
}

/// `--timing-gp`: per size N and function (a continuous one and the mixed one), the GP's
/// proposal time with N COMPLETE trials at random points and 3 running, over 5 proposals.
fn timing_gp(args: &Args, out: &mut impl Write) {
    let all = functions();
    for name in ["hartmann6", "nnlike_mixed"] {
        let func = all
            .iter()
            .find(|f| f.name == name)
            .expect("a known function");
        for &n in &args.sizes {
            let mut random = sampler::RandomSampler::new(Some(args.seed0));
            let mut s = sampler::build(
                SamplerKind::Gp,
                &func.space,
                Some(args.seed0),
                &[Direction::Minimize],
                &args.settings,
            )
            .unwrap_or_else(|e| panic!("gp: {e}"));
            let none = Params::new();
            for k in 0..n + 3 {
                let p = random
                    .sample(&func.space, &none, k)
                    .expect("random proposes");
                s.observe(k as i64, &p);
                if k < n {
                    let v = (func.f)(&p);
                    s.tell(&complete(&func.space, k, p, v, Vec::new()));
                }
            }
            let t = Instant::now();
            for k in 0..5 {
                s.sample(&func.space, &none, n + 3 + k);
            }
            let ms = t.elapsed().as_secs_f64() * 1e3 / 5.0;
            let line = json!({"func": name, "trials": n, "running": 3, "ms_per_ask": ms});
            writeln!(out, "{line}").unwrap();
            out.flush().unwrap();
        }
    }
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
        Mode::Scenarios => scenarios(&args, &mut out),
        Mode::Timing => timing(&args, &mut out),
        Mode::TimingGp => timing_gp(&args, &mut out),
        Mode::Run => {
            let trials = args.trials.unwrap_or(200);
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
                        "gp" => SamplerKind::Gp,
                        other => usage(&format!("unknown sampler {other}")),
                    };
                    for seed in args.seed0..args.seed0 + args.seeds {
                        let (curve, ask, tell) =
                            run_one(f, kind, seed, trials, args.batch, &args.settings);
                        let line = json!({
                            "func": f.name,
                            "sampler": format!("sweepd-{sname}"),
                            "seed": seed,
                            "trials": trials,
                            "batch": args.batch,
                            "curve": curve,
                            "ask_ms": ask.iter().map(|s| s * 1e3).collect::<Vec<f64>>(),
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
