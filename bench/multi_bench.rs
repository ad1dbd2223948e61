//! sweepd's samplers on problems with two objectives, driven directly (no daemon), for
//! `bench/multi_bench.py`, which runs Optuna's samplers on the same problems and compares the
//! hypervolumes.
//!
//! ```text
//! multi_bench --sampler nsga2|tpe|random --problem zdt1|zdt2|dtlz2|mixed \
//!             --seeds 0..20 --trials 300
//! ```
//!
//! Prints one JSON object per seed: the values of every trial in order, the params of the last
//! trial (external form, for the script's check that both definitions of the problem agree),
//! and the time each proposal took (`sample`, in nanoseconds). Trials are sequential: each
//! proposal is observed, evaluated and told before the next, as in Optuna's `study.optimize`
//! with one worker. Every sampler runs with sweepd's defaults (Optuna's).

use std::time::Instant;
use sweepd::config::{SamplerConfig, SamplerKind};
use sweepd::sampler;
use sweepd::study::{
    Direction, Distribution, ParamSpec, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};

/// Decision variables of the continuous problems.
const DIMS: usize = 10;
/// The mixed problem's categorical choices: (cost to objective 1, cost to objective 2).
const MIXED_CHOICES: [(f64, f64); 4] = [(0.0, 0.5), (0.5, 0.0), (0.2, 0.2), (0.6, 0.6)];

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

fn space(problem: &str) -> SearchSpace {
    let params = match problem {
        "mixed" => vec![
            float("x", 0.0, 1.0, false),
            ParamSpec {
                name: "n".into(),
                dist: Distribution::Int {
                    low: 1,
                    high: 10,
                    step: 1,
                    log: false,
                },
            },
            ParamSpec {
                name: "k".into(),
                dist: Distribution::Int {
                    low: 1,
                    high: 128,
                    step: 1,
                    log: true,
                },
            },
            ParamSpec {
                name: "c".into(),
                dist: Distribution::Categorical {
                    choices: ["a", "b", "c", "d"].map(serde_json::Value::from).to_vec(),
                },
            },
        ],
        _ => (0..DIMS)
            .map(|i| float(&format!("x{i}"), 0.0, 1.0, false))
            .collect(),
    };
    SearchSpace { params }
}

fn num(p: &Params, k: &str) -> f64 {
    match p[k] {
        ParamValue::Float(x) => x,
        ParamValue::Int(i) => i as f64,
        ParamValue::Choice(c) => c as f64,
    }
}

/// Both objectives, minimized. The same definitions as `bench/multi_bench.py`.
fn evaluate(problem: &str, p: &Params) -> Vec<f64> {
    let x: Vec<f64> = (0..DIMS)
        .map(|i| {
            p.get(&format!("x{i}"))
                .map_or(0.0, |_| num(p, &format!("x{i}")))
        })
        .collect();
    match problem {
        "zdt1" | "zdt2" => {
            let f1 = x[0];
            let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / (DIMS - 1) as f64;
            let h = if problem == "zdt1" {
                1.0 - (f1 / g).sqrt()
            } else {
                1.0 - (f1 / g).powi(2)
            };
            vec![f1, g * h]
        }
        "dtlz2" => {
            let g: f64 = x[1..].iter().map(|v| (v - 0.5).powi(2)).sum();
            let a = x[0] * std::f64::consts::FRAC_PI_2;
            vec![(1.0 + g) * a.cos(), (1.0 + g) * a.sin()]
        }
        "mixed" => {
            let (xv, n, k) = (num(p, "x"), num(p, "n"), num(p, "k"));
            let (c1, c2) = MIXED_CHOICES[num(p, "c") as usize];
            vec![
                xv + 0.1 * (n - 3.0).abs() + c1,
                (1.0 - xv).powi(2) + 0.05 * (k.log2() - 4.0).abs() + c2,
            ]
        }
        other => panic!("unknown problem {other}"),
    }
}

struct Args {
    sampler: SamplerKind,
    problem: String,
    seeds: std::ops::Range<u64>,
    trials: i64,
}

fn args() -> Args {
    let mut a = Args {
        sampler: SamplerKind::Nsga2,
        problem: "zdt1".into(),
        seeds: 0..1,
        trials: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--sampler" => {
                a.sampler = match val.as_str() {
                    "nsga2" => SamplerKind::Nsga2,
                    "tpe" => SamplerKind::Tpe,
                    "random" => SamplerKind::Random,
                    other => panic!("unknown sampler {other}"),
                }
            }
            "--problem" => a.problem = val,
            "--seeds" => {
                let (lo, hi) = val.split_once("..").expect("--seeds A..B");
                a.seeds = lo.parse().unwrap()..hi.parse().unwrap();
            }
            "--trials" => a.trials = val.parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn main() {
    let a = args();
    let space = space(&a.problem);
    let directions = [Direction::Minimize, Direction::Minimize];
    for seed in a.seeds.clone() {
        let mut s = sampler::build(
            a.sampler,
            &space,
            Some(seed),
            &directions,
            &SamplerConfig::default(),
        )
        .expect("a sampler");
        let mut values = Vec::with_capacity(a.trials as usize);
        let mut ask_ns = Vec::with_capacity(a.trials as usize);
        let mut last = Params::new();
        for k in 0..a.trials {
            let t = Instant::now();
            let p = s
                .sample(&space, &Params::new(), k as u64)
                .expect("a proposal");
            ask_ns.push(t.elapsed().as_nanos() as u64);
            s.observe(k, &p);
            let v = evaluate(&a.problem, &p);
            s.tell(&TrialRecord {
                number: k,
                params: p.clone(),
                state: TrialState::Complete,
                values: v.clone(),
                constraints: vec![],
                distributions: space
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.dist.clone()))
                    .collect(),
            });
            values.push(v);
            last = p;
        }
        let out = serde_json::json!({
            "seed": seed,
            "values": values,
            "last_params": space.external_json(&last),
            "ask_ns": ask_ns,
        });
        println!("{out}");
    }
}
