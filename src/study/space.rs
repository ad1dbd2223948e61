//! The search space: what a parameter may be, and the value a trial got for it.
//!
//! A value exists in three forms and this module is the one place that converts between them:
//! - internal (`f64`): what Optuna stores in `trial_params.param_value`: the number itself for
//!   float and int, the index into `choices` for a categorical;
//! - external (JSON): what the worker receives and what `study.enqueue_trial` stores in the
//!   `fixed_params` system attribute: the float, the int, or the choice itself;
//! - [`ParamValue`]: the typed form the rest of sweepd works with.
//!
//! Distributions serialize to the exact `distribution_json` Optuna writes, so a study written by
//! sweepd loads in `optuna.load_study` and in optuna-dashboard.

use super::pyjson;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One parameter's domain, mirroring Optuna's Float/Int/CategoricalDistribution. Equality is
/// Python's, as Optuna compares distributions: choices `1`, `1.0` and `true` are equal.
#[derive(Debug, Clone)]
pub enum Distribution {
    Float {
        low: f64,
        high: f64,
        step: Option<f64>,
        log: bool,
    },
    Int {
        low: i64,
        high: i64,
        step: i64,
        log: bool,
    },
    /// Choices are JSON scalars (null, bool, number, string), as Optuna allows.
    Categorical { choices: Vec<Value> },
}

/// A trial's value for one parameter, in typed form.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Float(f64),
    Int(i64),
    /// Index into the distribution's `choices`.
    Choice(usize),
}

/// A named parameter of the study.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub dist: Distribution,
}

/// The study's parameters, in the order the config declares them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchSpace {
    pub params: Vec<ParamSpec>,
}

/// A trial's parameters by name. A `BTreeMap` so that every rendering is in a stable order.
pub type Params = BTreeMap<String, ParamValue>;

/// A trial's distributions by name: the one each of its params was drawn from (Optuna's
/// `trial.distributions`). In a define-by-run study they differ from trial to trial.
pub type Dists = BTreeMap<String, Distribution>;

/// Params in external form (what the worker sees), each through its own distribution; a name
/// without one renders as its plain number.
pub fn external_json(params: &Params, dists: &Dists) -> Value {
    let mut obj = serde_json::Map::new();
    for (name, v) in params {
        let ext = match dists.get(name) {
            Some(d) => d.external(v),
            None => v.plain_json(),
        };
        obj.insert(name.clone(), ext);
    }
    Value::Object(obj)
}

/// The largest grid sweepd searches: config rejects a larger one and the grid sampler refuses
/// it (it holds a permutation and a taken-set of its points in memory). A sweep larger than this
/// is almost certainly a mistake (a float step far too small), not a plan.
pub const MAX_GRID_POINTS: u64 = 1_000_000;

/// The number of points of a grid whose params have `lens` values each ([`SearchSpace::grid_lens`]),
/// saturating at `u64::MAX`.
pub fn grid_points(lens: &[u64]) -> u64 {
    lens.iter().fold(1, |total, &n| total.saturating_mul(n))
}

/// The index of the last point of the int grid `low + step * k` that does not pass `high`; 0
/// for an empty or malformed range.
pub fn last_int_index(low: i64, high: i64, step: i64) -> u64 {
    if step <= 0 || high < low {
        return 0;
    }
    // i128: high - low can overflow i64 for extreme bounds; the quotient fits in u64.
    ((i128::from(high) - i128::from(low)) / i128::from(step)) as u64
}

/// The index of the last point of the float grid `low + step * k` that does not pass `high`.
/// `round` absorbs the float error in `(high - low) / step`, but when `high` is off the grid
/// rounding up would put that point past `high`; Optuna avoids this by lowering `high` to the
/// grid, and stepping back one point here is the same thing.
pub fn last_grid_index(low: f64, high: f64, step: f64) -> u64 {
    let span = (high - low) / step;
    let mut n = span.round();
    if n > span + 1e-8 {
        n -= 1.0;
    }
    n.max(0.0) as u64
}

impl SearchSpace {
    pub fn get(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Each param's number of grid values ([`Distribution::grid_len`]), in order; or the
    /// indices of the params that have no grid (continuous floats).
    pub fn grid_lens(&self) -> Result<Vec<u64>, Vec<usize>> {
        let lens: Vec<Option<u64>> = self.params.iter().map(|p| p.dist.grid_len()).collect();
        let continuous: Vec<usize> = (0..lens.len()).filter(|&i| lens[i].is_none()).collect();
        if continuous.is_empty() {
            Ok(lens.into_iter().flatten().collect())
        } else {
            Err(continuous)
        }
    }

    /// The params as the JSON object a worker receives (external form).
    pub fn external_json(&self, params: &Params) -> Value {
        let mut obj = serde_json::Map::new();
        for (name, v) in params {
            let ext = match self.get(name) {
                Some(spec) => spec.dist.external(v),
                None => v.plain_json(),
            };
            obj.insert(name.clone(), ext);
        }
        Value::Object(obj)
    }
}

impl ParamValue {
    /// JSON of the typed value without a distribution (a choice renders as its index).
    fn plain_json(&self) -> Value {
        match self {
            ParamValue::Float(x) => json!(x),
            ParamValue::Int(i) => json!(i),
            ParamValue::Choice(i) => json!(i),
        }
    }
}

impl Distribution {
    /// Optuna's internal representation (`trial_params.param_value`).
    pub fn to_internal(&self, v: &ParamValue) -> f64 {
        match v {
            ParamValue::Float(x) => *x,
            ParamValue::Int(i) => *i as f64,
            ParamValue::Choice(i) => *i as f64,
        }
    }

    /// Reads Optuna's internal representation back; `None` if it does not fit this distribution.
    pub fn from_internal(&self, x: f64) -> Option<ParamValue> {
        let v = match self {
            Distribution::Float { .. } => ParamValue::Float(x),
            Distribution::Int { .. } => ParamValue::Int(x.round() as i64),
            Distribution::Categorical { choices } => {
                let i = x.round();
                if i < 0.0 || i as usize >= choices.len() {
                    return None;
                }
                ParamValue::Choice(i as usize)
            }
        };
        self.contains(&v).then_some(v)
    }

    /// The value as the worker sees it: the number, or the categorical choice itself.
    pub fn external(&self, v: &ParamValue) -> Value {
        match (self, v) {
            (Distribution::Categorical { choices }, ParamValue::Choice(i)) => {
                choices.get(*i).cloned().unwrap_or(Value::Null)
            }
            (_, other) => other.plain_json(),
        }
    }

    /// Parses an external value (e.g. from Optuna's `fixed_params`); `None` if it is not in the domain.
    pub fn from_external(&self, ext: &Value) -> Option<ParamValue> {
        let v = match self {
            Distribution::Float { .. } => ParamValue::Float(ext.as_f64()?),
            Distribution::Int { .. } => {
                let x = ext.as_f64()?;
                if x.fract() != 0.0 {
                    return None;
                }
                ParamValue::Int(x as i64)
            }
            Distribution::Categorical { choices } => {
                ParamValue::Choice(choices.iter().position(|c| json_eq(c, ext))?)
            }
        };
        self.contains(&v).then_some(v)
    }

    /// Whether `v` lies in the domain (type, bounds and step grid).
    pub fn contains(&self, v: &ParamValue) -> bool {
        match (self, v) {
            (
                Distribution::Float {
                    low, high, step, ..
                },
                ParamValue::Float(x),
            ) => {
                let in_range = x.is_finite() && *x >= *low && *x <= *high;
                // The tolerance grows with k, as config validation's check that the step
                // divides the range does: with many grid points (a step of 1e-9 over [-2, 2])
                // a point's k carries float error far above 1e-8.
                in_range
                    && step.is_none_or(|s| {
                        let k = (x - low) / s;
                        (k - k.round()).abs() < 1e-8 * k.abs().max(1.0)
                    })
            }
            (
                Distribution::Int {
                    low, high, step, ..
                },
                ParamValue::Int(i),
            ) => *i >= *low && *i <= *high && (i - low) % step == 0,
            (Distribution::Categorical { choices }, ParamValue::Choice(i)) => *i < choices.len(),
            _ => false,
        }
    }

    /// The `distribution_json` Optuna writes for this distribution, to the byte: its
    /// attribute order and Python's `json.dumps` text.
    pub fn optuna_json(&self) -> String {
        pyjson::dumps(&self.optuna_value())
    }

    /// [`Distribution::optuna_json`] as a JSON value (the protocol's `distribution`).
    pub fn optuna_value(&self) -> Value {
        match self {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => json!({"name": "FloatDistribution",
                        "attributes": {"step": step, "low": low, "high": high, "log": log}}),
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => json!({"name": "IntDistribution",
                        "attributes": {"log": log, "step": step, "low": low, "high": high}}),
            Distribution::Categorical { choices } => {
                json!({"name": "CategoricalDistribution", "attributes": {"choices": choices}})
            }
        }
    }

    /// Parses a `distribution_json` written by Optuna (v3+ names) or by sweepd.
    pub fn from_optuna_json(text: &str) -> Result<Distribution, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))?;
        let name = v["name"].as_str().unwrap_or_default();
        let a = &v["attributes"];
        let f = |k: &str| {
            a[k].as_f64()
                .ok_or_else(|| format!("{name}: missing `{k}`"))
        };
        let log = a["log"].as_bool().unwrap_or(false);
        match name {
            "FloatDistribution" => Ok(Distribution::Float {
                low: f("low")?,
                high: f("high")?,
                step: a["step"].as_f64(),
                log,
            }),
            "IntDistribution" => Ok(Distribution::Int {
                low: f("low")? as i64,
                high: f("high")? as i64,
                step: a["step"].as_i64().unwrap_or(1),
                log,
            }),
            "CategoricalDistribution" => Ok(Distribution::Categorical {
                choices: a["choices"]
                    .as_array()
                    .cloned()
                    .ok_or("CategoricalDistribution: missing `choices`")?,
            }),
            other => Err(format!("unsupported distribution `{other}`")),
        }
    }

    /// Optuna's `check_distribution_compatibility(self, new)`: whether a param recorded with
    /// `self` may be suggested with `new` (in the same study, or again in the same trial). The
    /// error is Optuna's message, word for word.
    pub fn compatible(&self, new: &Distribution) -> Result<(), &'static str> {
        match (self, new) {
            (Distribution::Float { log: a, .. }, Distribution::Float { log: b, .. })
            | (Distribution::Int { log: a, .. }, Distribution::Int { log: b, .. }) => {
                if a != b {
                    return Err(
                        "Cannot set different log configuration to the same parameter name.",
                    );
                }
                Ok(())
            }
            (Distribution::Categorical { .. }, Distribution::Categorical { .. }) => {
                if self != new {
                    return Err("CategoricalDistribution does not support dynamic value space.");
                }
                Ok(())
            }
            _ => Err("Cannot set different distribution kind to the same parameter name."),
        }
    }

    /// Whether the distribution has a single legal value (Optuna's `single()`): such a param is
    /// never sampled, and left out of the relative search space.
    pub fn single(&self) -> Option<ParamValue> {
        match *self {
            Distribution::Float {
                low,
                high,
                step: None,
                ..
            } => (low == high).then_some(ParamValue::Float(low)),
            Distribution::Float {
                low,
                high,
                step: Some(s),
                ..
            } => (last_grid_index(low, high, s) == 0 && low <= high)
                .then_some(ParamValue::Float(low)),
            Distribution::Int {
                low, high, step, ..
            } => (step > 0 && low <= high && last_int_index(low, high, step) == 0)
                .then_some(ParamValue::Int(low)),
            Distribution::Categorical { ref choices } => {
                (choices.len() == 1).then_some(ParamValue::Choice(0))
            }
        }
    }

    /// Why no sampler can draw from this distribution, if none can: bounds not finite or not in
    /// order, a step that is not positive, a log scale over values that are not positive, no
    /// choices. Config rejects all of these with a located message; the samplers check again so
    /// that they stay total whatever built the space.
    pub fn check(&self) -> Result<(), &'static str> {
        match *self {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => {
                if !low.is_finite() || !high.is_finite() || low > high {
                    return Err("float bounds must be finite with low <= high");
                }
                if step.is_some_and(|s| !s.is_finite() || s <= 0.0) {
                    return Err("float step must be positive");
                }
                if log && low <= 0.0 {
                    return Err("log scale needs low > 0");
                }
            }
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => {
                if low > high {
                    return Err("int bounds must have low <= high");
                }
                if step <= 0 {
                    return Err("int step must be positive");
                }
                if log && low < 1 {
                    return Err("log scale needs low >= 1");
                }
            }
            Distribution::Categorical { ref choices } => {
                if choices.is_empty() {
                    return Err("categorical needs at least one choice");
                }
            }
        }
        Ok(())
    }

    /// Number of grid values: `None` for a continuous float, 0 for a malformed int range. It
    /// saturates at `u64::MAX` instead of overflowing: config validation counts absurd ranges
    /// with it to reject them.
    pub fn grid_len(&self) -> Option<u64> {
        match *self {
            Distribution::Float {
                low,
                high,
                step: Some(s),
                ..
            } => Some(last_grid_index(low, high, s).saturating_add(1)),
            Distribution::Float { step: None, .. } => None,
            Distribution::Int {
                low, high, step, ..
            } => {
                if step <= 0 || high < low {
                    return Some(0);
                }
                Some(last_int_index(low, high, step).saturating_add(1))
            }
            Distribution::Categorical { ref choices } => Some(choices.len() as u64),
        }
    }

    /// The k-th grid value (0-based), for distributions with a finite grid.
    pub fn grid_value(&self, k: u64) -> Option<ParamValue> {
        if k >= self.grid_len()? {
            return None;
        }
        Some(match self {
            Distribution::Float { low, step, .. } => {
                ParamValue::Float(low + step.unwrap_or(0.0) * k as f64)
            }
            Distribution::Int { low, step, .. } => ParamValue::Int(low + step * k as i64),
            Distribution::Categorical { .. } => ParamValue::Choice(k as usize),
        })
    }
}

/// At most 200 characters of `s`, for messages that quote a worker's input.
pub(super) fn crate_clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

/// Equality of JSON scalars as Python's `==`: 1, 1.0 and true are the same number, and
/// integers compare exactly (2^53 + 1 is not 2^53, though both read as the same double).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    enum Num {
        Int(i128),
        Float(f64),
    }
    let num = |v: &Value| match v {
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Num::Int(i.into()),
            (None, Some(u)) => Num::Int(u.into()),
            _ => Num::Float(n.as_f64()?),
        }),
        Value::Bool(b) => Some(Num::Int(i128::from(*b))),
        _ => None,
    };
    // A float equals an integer only when it is that integer exactly (i128 holds every
    // integer a JSON number here can be, and a float past it equals none of them).
    let same = |i: i128, x: f64| x.fract() == 0.0 && x.abs() < 1.7e38 && x as i128 == i;
    match (num(a), num(b)) {
        (Some(Num::Int(i)), Some(Num::Int(j))) => i == j,
        (Some(Num::Float(x)), Some(Num::Float(y))) => x == y,
        (Some(Num::Int(i)), Some(Num::Float(x))) | (Some(Num::Float(x)), Some(Num::Int(i))) => {
            same(i, x)
        }
        _ => a == b,
    }
}

impl PartialEq for Distribution {
    fn eq(&self, other: &Distribution) -> bool {
        match (self, other) {
            (
                Distribution::Float {
                    low,
                    high,
                    step,
                    log,
                },
                Distribution::Float {
                    low: l2,
                    high: h2,
                    step: s2,
                    log: g2,
                },
            ) => low == l2 && high == h2 && step == s2 && log == g2,
            (
                Distribution::Int {
                    low,
                    high,
                    step,
                    log,
                },
                Distribution::Int {
                    low: l2,
                    high: h2,
                    step: s2,
                    log: g2,
                },
            ) => low == l2 && high == h2 && step == s2 && log == g2,
            (
                Distribution::Categorical { choices: a },
                Distribution::Categorical { choices: b },
            ) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_eq(x, y)),
            _ => false,
        }
    }
}

/// Shorthands for building search spaces in the samplers' unit tests.
#[cfg(test)]
pub(crate) mod test_util {
    use super::{Distribution, ParamSpec};
    use serde_json::json;

    pub fn spec(name: &str, dist: Distribution) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            dist,
        }
    }

    pub fn float(low: f64, high: f64, step: Option<f64>, log: bool) -> Distribution {
        Distribution::Float {
            low,
            high,
            step,
            log,
        }
    }

    pub fn int(low: i64, high: i64, step: i64, log: bool) -> Distribution {
        Distribution::Int {
            low,
            high,
            step,
            log,
        }
    }

    /// A categorical of `n` choices "c0", "c1", ...
    pub fn cat(n: usize) -> Distribution {
        Distribution::Categorical {
            choices: (0..n).map(|i| json!(format!("c{i}"))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::{float, int, spec};
    use super::*;

    fn cat() -> Distribution {
        Distribution::Categorical {
            choices: vec![json!("adam"), json!("sgd"), json!(3)],
        }
    }

    #[test]
    fn stepped_float_with_a_billion_grid_points_contains_its_own_points() {
        // Config check accepts this (the step divides the range); the random sampler's debug
        // assertion panicked on its draws, and their values read back were refused.
        let d = Distribution::Float {
            low: -2.0,
            high: 2.0,
            step: Some(1e-9),
            log: false,
        };
        for k in 631_184_000..631_185_000u64 {
            let x = (-2.0 + 1e-9 * k as f64).min(2.0);
            assert!(d.contains(&ParamValue::Float(x)), "point {k}: {x}");
            assert_eq!(d.from_internal(x), Some(ParamValue::Float(x)));
        }
        assert!(
            !d.contains(&ParamValue::Float(-2.0 + 0.5e-9)),
            "off the grid"
        );
    }

    #[test]
    fn categorical_round_trips_through_every_form() {
        let d = cat();
        let v = d.from_external(&json!("sgd")).unwrap();
        assert_eq!(v, ParamValue::Choice(1));
        assert_eq!(d.to_internal(&v), 1.0);
        assert_eq!(d.from_internal(1.0), Some(v.clone()));
        assert_eq!(d.external(&v), json!("sgd"));
        assert_eq!(d.from_external(&json!(3.0)), Some(ParamValue::Choice(2)));
        assert_eq!(d.from_internal(3.0), None);
    }

    #[test]
    fn distribution_json_round_trips() {
        for d in [
            Distribution::Float {
                low: 1e-5,
                high: 0.1,
                step: None,
                log: true,
            },
            Distribution::Int {
                low: 2,
                high: 10,
                step: 2,
                log: false,
            },
            cat(),
        ] {
            assert_eq!(Distribution::from_optuna_json(&d.optuna_json()).unwrap(), d);
        }
    }

    #[test]
    fn int_step_grid_excludes_off_grid_values() {
        let d = Distribution::Int {
            low: 2,
            high: 10,
            step: 2,
            log: false,
        };
        assert!(d.contains(&ParamValue::Int(4)));
        assert!(!d.contains(&ParamValue::Int(5)));
        assert_eq!(d.grid_len(), Some(5));
        assert_eq!(d.grid_value(4), Some(ParamValue::Int(10)));
        assert_eq!(d.grid_value(5), None);
    }

    #[test]
    fn grid_len_counts_the_points_up_to_an_off_grid_high() {
        // 0, 0.4, 0.8: rounding (1 - 0) / 0.4 = 2.5 up would count a point past high.
        let d = float(0.0, 1.0, Some(0.4), false);
        assert_eq!(d.grid_len(), Some(3));
        assert_eq!(d.grid_value(2), Some(ParamValue::Float(0.8)));
        assert_eq!(d.grid_value(3), None);
    }

    #[test]
    fn grid_len_saturates_instead_of_overflowing() {
        // high - low overflows i64 here; grid_len used to compute it in i64.
        assert_eq!(int(i64::MIN, i64::MAX, 1, false).grid_len(), Some(u64::MAX));
        let tiny_step = float(0.0, 1.0, Some(1e-300), false);
        assert_eq!(tiny_step.grid_len(), Some(u64::MAX));
        assert_eq!(grid_points(&[u64::MAX, 2]), u64::MAX);
        assert_eq!(grid_points(&[3, 4]), 12);
        assert_eq!(grid_points(&[]), 1);
        assert_eq!(int(5, 1, 0, false).grid_len(), Some(0));
    }

    #[test]
    fn grid_lens_names_the_continuous_params() {
        let stepped = int(0, 4, 2, false);
        let continuous = float(0.0, 1.0, None, false);
        let space = |dists: Vec<Distribution>| SearchSpace {
            params: dists
                .into_iter()
                .enumerate()
                .map(|(i, dist)| spec(&format!("p{i}"), dist))
                .collect(),
        };
        assert_eq!(
            space(vec![stepped.clone(), cat()]).grid_lens(),
            Ok(vec![3, 3])
        );
        assert_eq!(
            space(vec![continuous.clone(), stepped, continuous]).grid_lens(),
            Err(vec![0, 2])
        );
    }

    #[test]
    fn check_names_what_no_sampler_can_draw() {
        let bad = [
            (float(1.0, 0.0, None, false), "float bounds"),
            (float(0.0, f64::INFINITY, None, false), "float bounds"),
            (float(f64::NAN, 1.0, None, false), "float bounds"),
            (float(0.0, 1.0, Some(0.0), false), "float step"),
            (float(0.0, 1.0, Some(f64::NAN), false), "float step"),
            (float(0.0, 1.0, None, true), "log scale needs low > 0"),
            (int(2, 1, 1, false), "int bounds"),
            (int(0, 4, -2, false), "int step"),
            (int(0, 4, 1, true), "log scale needs low >= 1"),
            (
                Distribution::Categorical { choices: vec![] },
                "at least one choice",
            ),
        ];
        for (d, why) in bad {
            let err = d.check().unwrap_err();
            assert!(err.contains(why), "{d:?}: {err}");
        }
        for d in [
            float(1e-5, 1e-1, None, true),
            float(0.5, 0.5, None, false),
            float(0.0, 1.0, Some(0.25), false),
            int(1, 1, 1, true),
            int(2, 11, 3, false),
            cat(),
        ] {
            assert_eq!(d.check(), Ok(()), "{d:?}");
        }
    }

    #[test]
    fn float_step_grid() {
        let d = Distribution::Float {
            low: 0.0,
            high: 1.0,
            step: Some(0.25),
            log: false,
        };
        assert_eq!(d.grid_len(), Some(5));
        assert!(d.contains(&ParamValue::Float(0.75)));
        assert!(!d.contains(&ParamValue::Float(0.8)));
    }
}
