//! What the samplers' unit tests share: spaces, objectives, the sequential loop, TPE's settings.

use crate::config::SamplerConfig;
use crate::sampler::Sampler;
use crate::study::space::test_util::{cat, float, int, spec};
use crate::study::{Dists, ParamValue, Params, SearchSpace, TrialRecord, TrialState};

pub(crate) fn seeded(seed: u64) -> SamplerConfig {
    SamplerConfig {
        seed: Some(seed),
        ..SamplerConfig::default()
    }
}

pub(crate) fn x_space() -> SearchSpace {
    SearchSpace {
        params: vec![spec("x", float(-10.0, 10.0, None, false))],
    }
}

/// A value as a number: the float, the int, or the choice's index.
pub(crate) fn f_of_value(v: &ParamValue) -> f64 {
    match *v {
        ParamValue::Float(x) => x,
        ParamValue::Int(i) => i as f64,
        ParamValue::Choice(c) => c as f64,
    }
}

/// Param `k` of `p`, which must be a float.
pub(crate) fn float_of(p: &Params, k: &str) -> f64 {
    match p[k] {
        ParamValue::Float(x) => x,
        ref v => panic!("{k} = {v:?}"),
    }
}

/// Param `k` of `p` as a number.
pub(crate) fn f_of(p: &Params, k: &str) -> f64 {
    f_of_value(&p[k])
}

/// A COMPLETE trial without distributions: it never joins TPE's relative search space (see
/// [`in_space`]).
pub(crate) fn record(
    number: i64,
    params: &Params,
    value: f64,
    constraints: Vec<f64>,
) -> TrialRecord {
    TrialRecord {
        number,
        params: params.clone(),
        state: TrialState::Complete,
        values: vec![value],
        constraints,
        distributions: Dists::new(),
    }
}

/// `r` with the distributions of `space` for the params it has, as the store reads a trial back.
pub(crate) fn in_space(mut r: TrialRecord, space: &SearchSpace) -> TrialRecord {
    r.distributions = space
        .params
        .iter()
        .filter(|p| r.params.contains_key(&p.name))
        .map(|p| (p.name.clone(), p.dist.clone()))
        .collect();
    r
}

/// Sequential trials numbered from `start`: each proposal is observed, evaluated, told.
pub(crate) fn run(
    s: &mut dyn Sampler,
    space: &SearchSpace,
    start: i64,
    n: i64,
    f: &dyn Fn(&Params) -> (f64, Vec<f64>),
) -> Vec<Params> {
    (start..start + n)
        .map(|k| {
            let p = s.sample(space, &Params::new(), k as u64).unwrap();
            s.observe(k, &p);
            let (v, c) = f(&p);
            s.tell(&in_space(record(k, &p, v, c), space));
            p
        })
        .collect()
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

/// Every kind of param a sampler meets: continuous, log, stepped (one with `high` off the grid),
/// stepped log, categorical, and ones with a single legal value.
pub(crate) fn mixed_space() -> SearchSpace {
    SearchSpace {
        params: vec![
            spec("f", float(-1.0, 2.5, None, false)),
            spec("lf", float(1e-5, 1e-1, None, true)),
            spec("sf", float(0.0, 0.3, Some(0.1), false)),
            spec("sf_off", float(0.0, 1.0, Some(0.4), false)),
            spec("slf", float(0.5, 2.0, Some(0.5), true)),
            spec("i", int(-3, 7, 1, false)),
            spec("li", int(1, 1000, 1, true)),
            spec("lis", int(1, 40, 3, true)),
            spec("si", int(2, 11, 3, false)),
            spec("c", cat(4)),
            spec("one", cat(1)),
            spec("pt", float(0.5, 0.5, None, false)),
            spec("pi", int(3, 4, 2, false)),
        ],
    }
}

pub(crate) fn mixed_objective(p: &Params) -> (f64, Vec<f64>) {
    let v = (f_of(p, "f") - 1.0).powi(2)
        + (f_of(p, "lf").log10() + 3.0).powi(2)
        + f_of(p, "sf")
        + (f_of(p, "i") - 2.0).abs()
        + (f_of(p, "li").ln() - 3.0).abs()
        + (f_of(p, "c") - 2.0).abs()
        + f_of(p, "lis") / 40.0;
    (v, vec![])
}

pub(crate) fn xp(x: f64) -> Params {
    let mut p = Params::new();
    p.insert("x".into(), ParamValue::Float(x));
    p
}
