//! What the GPU memory model costs per admission as trials pile up, driven directly (no
//! daemon), for `bench/model_bench.py`.
//!
//! ```text
//! model_bench --params 30 --trials 2000
//! ```
//!
//! The search space has `width` (64–1024, log) and `depth` (1–8), which drive memory (the
//! packing bench's continuous workload: 500 MiB + 512 MiB + 2 MiB × width × depth, ±2%), and
//! `params − 2` floats of no effect. For each trial, as the supervisor does, the model estimates
//! it (an admission) and then records its peak (the trial ended), which makes the next estimate
//! fit again; every tenth more trials it also chooses again which params drive memory. Prints
//! one JSON object: the time of each estimate, in nanoseconds, in order.

use rand::{Rng, SeedableRng};
use std::time::Instant;
use sweepd::gpu::MemoryModel;
use sweepd::study::{Distribution, ParamSpec, ParamValue, Params, SearchSpace};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn main() {
    let n_params = arg("--params", 30).max(2);
    let n_trials = arg("--trials", 2000);
    let mut params = vec![
        ParamSpec {
            name: "width".into(),
            dist: Distribution::Int {
                low: 64,
                high: 1024,
                step: 1,
                log: true,
            },
        },
        ParamSpec {
            name: "depth".into(),
            dist: Distribution::Int {
                low: 1,
                high: 8,
                step: 1,
                log: false,
            },
        },
    ];
    for k in 2..n_params {
        params.push(ParamSpec {
            name: format!("x{k}"),
            dist: Distribution::Float {
                low: 1e-5,
                high: 1e-1,
                step: None,
                log: true,
            },
        });
    }
    let space = SearchSpace { params };
    let mut model = MemoryModel::new(&space, 6 << 30);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut times = Vec::with_capacity(n_trials);
    for _ in 0..n_trials {
        let w = (64.0 * 16f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
        let d = rng.gen_range(1..=8i64);
        let mut p = Params::new();
        p.insert("width".into(), ParamValue::Int(w));
        p.insert("depth".into(), ParamValue::Int(d));
        for k in 2..n_params {
            let v = 10f64.powf(rng.gen_range(-5.0..-1.0));
            p.insert(format!("x{k}"), ParamValue::Float(v));
        }
        let mib = 1u64 << 20;
        let alloc = (512 * mib + (w * d) as u64 * 2 * mib) as f64 * rng.gen_range(0.98..1.02);
        let peak = 500 * mib + alloc as u64;
        let t = Instant::now();
        std::hint::black_box(model.estimate(&p));
        times.push(t.elapsed().as_nanos() as u64);
        model.record(&p, peak);
    }
    println!(
        "{}",
        serde_json::json!({"params": n_params, "trials": n_trials, "estimate_ns": times})
    );
}
