//! What a study may record, as one rule for both doors it comes in by: the config's `[params]`
//! (`config::params`, what `sweepd check` accepts) and what a worker sends (a `suggest`'s name
//! and distribution, a user attribute's key, a report's step). Each rule is Optuna's where
//! Optuna has one (its distribution constructors, with their messages: Optuna runs them again
//! on every `distribution_json` it reads, so a distribution they refuse makes the study
//! unreadable), and what both databases can store, SQLite and PostgreSQL alike (Optuna's
//! schema has VARCHAR(512) names and keys, an INTEGER step and a float `param_value`;
//! PostgreSQL's text holds no NUL).

use super::decimal::{adjust_discrete_high, TooManySteps};
use super::pyjson::float_repr;
use super::space::{crate_clip, last_int_index, Distribution};
use serde_json::Value;

/// Optuna's `param_name` and user attribute `key` columns are VARCHAR(512): characters, on
/// PostgreSQL.
pub const MAX_NAME_CHARS: usize = 512;
/// Names sweepd keeps for its own params and attributes.
pub const RESERVED_PREFIX: &str = super::attrs::SWEEPD_PREFIX;
/// An int param's value is stored as a float (`trial_params.param_value`): past ±2^53 it would
/// be stored rounded.
pub const MAX_EXACT_INT: i64 = 1 << 53;
/// `trial_intermediate_values.step` is an INTEGER: 32 bits on PostgreSQL.
pub const MAX_STEP: i64 = i32::MAX as i64;

/// The attribute of a distribution a refusal is about, for the config to point at its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    Low,
    High,
    Step,
    Log,
    Choices,
}

/// Why a distribution is refused, and which of its attributes to fix.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub attr: Attr,
    pub message: String,
}

fn refuse<T>(attr: Attr, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        attr,
        message: message.into(),
    })
}

/// A param's name: not empty (a oneshot worker gets `--name=value`), no NUL (PostgreSQL cannot
/// store it, exec cannot pass it), at most [`MAX_NAME_CHARS`], not sweepd's.
pub fn param_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a param name must not be empty".into());
    }
    stored_name("a param name", name)?;
    if name.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "param names starting with {RESERVED_PREFIX:?} are reserved for sweepd"
        ));
    }
    Ok(())
}

/// A user attribute's key (Optuna's `set_user_attr`): no NUL, at most [`MAX_NAME_CHARS`]
/// (SQLite would store either, PostgreSQL neither: both are refused on both), not sweepd's
/// (`sweepd:fail_reason` is the reason sweepd gives a failed trial).
pub fn user_attr_key(key: &str) -> Result<(), String> {
    stored_name("a user attribute key", key)?;
    if key.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "user attribute keys starting with {RESERVED_PREFIX:?} are reserved for sweepd"
        ));
    }
    Ok(())
}

/// A constraint Optuna 5's `trial.set_constraint(key, value)` records: its attribute's name,
/// `constraints:<key>`, stored as any other (no NUL, at most [`MAX_NAME_CHARS`]), and a value
/// that is not NaN (Optuna's refusal; infinities are kept, as Optuna keeps them).
pub fn constraint(key: &str, value: f64) -> Result<(), String> {
    stored_name(
        "a constraint's attribute name (`constraints:` and its key)",
        &format!("{}{key}", super::attrs::CONSTRAINT_KEY_PREFIX),
    )?;
    if value.is_nan() {
        return Err(format!(
            "Attempted to set a constraint for {key:?}, but NaN is not allowed."
        ));
    }
    Ok(())
}

fn stored_name(what: &str, name: &str) -> Result<(), String> {
    if name.contains('\0') {
        return Err(format!(
            "{what} may not contain NUL bytes (PostgreSQL cannot store them)"
        ));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "{what} is at most {MAX_NAME_CHARS} characters (Optuna's VARCHAR(512)), got {chars}"
        ));
    }
    Ok(())
}

/// A report's step: Optuna's `Trial.report` refuses a negative one (with this message), and
/// PostgreSQL's column holds at most [`MAX_STEP`].
pub fn report_step(step: i64) -> Result<(), String> {
    if step < 0 {
        return Err(format!("`step={step}` must be non-negative."));
    }
    if step > MAX_STEP {
        return Err(format!(
            "`step={step}` is too large: a step is at most {MAX_STEP} (the INTEGER column of \
             Optuna's trial_intermediate_values)"
        ));
    }
    Ok(())
}

/// Optuna's `FloatDistribution(low, high, log, step)`: its checks and messages, in its order,
/// and its `high` lowered to the last step (with its decimal arithmetic, which also refuses a
/// range of 10^28 steps or more). sweepd also needs every number finite.
pub fn float(low: f64, high: f64, step: Option<f64>, log: bool) -> Result<Distribution, Refusal> {
    for (attr, name, x) in [(Attr::Low, "low", low), (Attr::High, "high", high)]
        .into_iter()
        .chain(step.map(|s| (Attr::Step, "step", s)))
    {
        if !x.is_finite() {
            return refuse(attr, format!("`{name}` must be a finite number, got {x}"));
        }
    }
    let (l, h) = (float_repr(low), float_repr(high));
    if log && step.is_some() {
        return refuse(
            Attr::Step,
            "The parameter `step` is not supported when `log` is true.",
        );
    }
    if low > high {
        return refuse(
            Attr::Low,
            format!("`low <= high` must hold, but got (low={l}, high={h})."),
        );
    }
    if log && low <= 0.0 {
        return refuse(
            Attr::Log,
            format!("`low > 0` must hold for `log=True`, but got (low={l}, high={h})."),
        );
    }
    let high = match step {
        None => high,
        Some(s) if s <= 0.0 => {
            return refuse(
                Attr::Step,
                format!("`step > 0` must hold, but got step={}.", float_repr(s)),
            )
        }
        Some(s) => match adjust_discrete_high(low, high, s) {
            Ok(h) if h.is_finite() => h,
            Ok(_) | Err(TooManySteps) => {
                return refuse(
                    Attr::Step,
                    format!(
                        "the step {} divides [{l}, {h}] into 10^28 steps or more: Optuna \
                         computes (high - low) / step with 28-digit decimals and raises \
                         decimal.InvalidOperation (and would on every read of the study): use \
                         a larger step",
                        float_repr(s)
                    ),
                )
            }
        },
    };
    Ok(Distribution::Float {
        low,
        high,
        step,
        log,
    })
}

/// Optuna's `IntDistribution(low, high, log, step)`: its checks and messages, in its order, and
/// its `high` lowered to the last step. sweepd also needs every bound within ±2^53, where a
/// value is stored exactly.
pub fn int(low: i64, high: i64, step: i64, log: bool) -> Result<Distribution, Refusal> {
    if log && step != 1 {
        return refuse(
            Attr::Step,
            format!(
                "Samplers and other components in Optuna only accept step is 1 when `log` \
                 argument is True, but got step={step}."
            ),
        );
    }
    if low > high {
        return refuse(
            Attr::Low,
            format!("`low <= high` must hold, but got (low={low}, high={high})."),
        );
    }
    if log && low < 1 {
        return refuse(
            Attr::Log,
            format!("`low >= 1` must hold for `log=True`, but got (low={low}, high={high})."),
        );
    }
    if step <= 0 {
        return refuse(
            Attr::Step,
            format!("`step > 0` must hold, but got step={step}."),
        );
    }
    for (attr, name, x) in [
        (Attr::Low, "low", low),
        (Attr::High, "high", high),
        (Attr::Step, "step", step),
    ] {
        if x.unsigned_abs() > MAX_EXACT_INT as u64 {
            return refuse(
                attr,
                format!(
                    "`{name}` = {x} is beyond ±2^53 ({MAX_EXACT_INT}): Optuna stores an int \
                     param's value as a float, which would round it"
                ),
            );
        }
    }
    Ok(Distribution::Int {
        low,
        high: low + step * last_int_index(low, high, step) as i64,
        step,
        log,
    })
}

/// Optuna's `CategoricalDistribution(choices)`: at least one, and each `None`, a bool, a
/// number or a string (Optuna warns of others; no storage can hold them).
pub fn categorical(choices: Vec<Value>) -> Result<Distribution, Refusal> {
    if choices.is_empty() {
        return refuse(
            Attr::Choices,
            "The `choices` must contain one or more elements.",
        );
    }
    if let Some(c) = choices
        .iter()
        .find(|c| matches!(c, Value::Array(_) | Value::Object(_)))
    {
        return refuse(
            Attr::Choices,
            format!(
                "Choices for a categorical distribution should be a tuple of None, bool, int, \
                 float and str, but contains {}",
                crate_clip(&c.to_string())
            ),
        );
    }
    Ok(Distribution::Categorical { choices })
}

/// A distribution a worker asks for (the protocol's `suggest`, in Optuna's JSON form), read
/// and checked by the rules above: what Optuna would make of it, or why not.
pub fn requested(v: &Value) -> Result<Distribution, String> {
    let name = v["name"].as_str().unwrap_or_default();
    let a = &v["attributes"];
    if !a.is_object() {
        return Err(format!(
            "the distribution has no `attributes` object: {}",
            crate_clip(&v.to_string())
        ));
    }
    let num = |k: &str| -> Result<f64, String> {
        match a.get(k) {
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{name}: `{k}` must be a finite number, got {n}")),
            other => Err(format!(
                "{name}: `{k}` must be a finite number, got {}",
                other.map_or("nothing".into(), Value::to_string)
            )),
        }
    };
    // An integer as written (1, or 1.0); one written as a float past ±2^53 is not exact.
    let integer = |k: &str| -> Result<i64, String> {
        if let Some(i) = a.get(k).and_then(Value::as_i64) {
            return Ok(i);
        }
        let x = num(k)?;
        if x.fract() != 0.0 || x.abs() > MAX_EXACT_INT as f64 {
            return Err(format!(
                "{name}: `{k}` must be an integer within ±2^53, got {}",
                float_repr(x)
            ));
        }
        Ok(x as i64)
    };
    let log = match a.get("log") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("{name}: `log` must be true or false, got {other}")),
    };
    let stepped = !matches!(a.get("step"), None | Some(Value::Null));
    let refused = |r: Refusal| r.message;
    match name {
        "FloatDistribution" => {
            let step = if stepped { Some(num("step")?) } else { None };
            float(num("low")?, num("high")?, step, log).map_err(refused)
        }
        "IntDistribution" => {
            let step = if stepped { integer("step")? } else { 1 };
            int(integer("low")?, integer("high")?, step, log).map_err(refused)
        }
        "CategoricalDistribution" => {
            let choices = a["choices"]
                .as_array()
                .ok_or_else(|| format!("{name}: `choices` must be a list, got {}", a["choices"]))?;
            categorical(choices.clone()).map_err(refused)
        }
        other => Err(format!(
            "unknown distribution `{}`: expected FloatDistribution, IntDistribution or \
             CategoricalDistribution",
            crate_clip(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::test_util::{float as f, int as i};
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::plain(0.0, 1.0, None, false, Ok(f(0.0, 1.0, None, false)))]
    #[case::single(0.5, 0.5, None, false, Ok(f(0.5, 0.5, None, false)))]
    #[case::log(1e-5, 0.1, None, true, Ok(f(1e-5, 0.1, None, true)))]
    #[case::stepped(0.0, 1.0, Some(0.25), false, Ok(f(0.0, 1.0, Some(0.25), false)))]
    #[case::high_lowered_to_the_last_step(
        0.0,
        1.0,
        Some(0.3),
        false,
        Ok(f(0.0, 0.9, Some(0.3), false))
    )]
    #[case::decimal_not_float_divides(
        0.1,
        0.30000000000000004,
        Some(0.1),
        false,
        Ok(f(0.1, 0.3, Some(0.1), false))
    )]
    #[case::log_and_step(1.0, 2.0, Some(0.5), true, Err(Attr::Step))]
    #[case::low_above_high(0.5, 0.1, None, false, Err(Attr::Low))]
    #[case::log_from_zero(0.0, 1.0, None, true, Err(Attr::Log))]
    #[case::zero_step(0.0, 1.0, Some(0.0), false, Err(Attr::Step))]
    #[case::negative_step(0.0, 1.0, Some(-0.1), false, Err(Attr::Step))]
    #[case::tiny_step(0.0, 1.0, Some(1e-30), false, Err(Attr::Step))]
    #[case::exactly_1e28_steps(0.0, 1.0, Some(1e-28), false, Err(Attr::Step))]
    #[case::infinite_high(0.0, f64::INFINITY, None, false, Err(Attr::High))]
    #[case::nan_step(0.0, 1.0, Some(f64::NAN), false, Err(Attr::Step))]
    fn float_distributions_are_optunas(
        #[case] low: f64,
        #[case] high: f64,
        #[case] step: Option<f64>,
        #[case] log: bool,
        #[case] want: Result<Distribution, Attr>,
    ) {
        assert_eq!(float(low, high, step, log).map_err(|r| r.attr), want);
    }

    #[rstest]
    #[case::plain(0, 10, 1, false, Ok(i(0, 10, 1, false)))]
    #[case::high_lowered_to_the_last_step(0, 10, 3, false, Ok(i(0, 9, 3, false)))]
    #[case::log(4, 128, 1, true, Ok(i(4, 128, 1, true)))]
    #[case::exact_limit(-(1 << 53), 1 << 53, 1, false, Ok(i(-(1 << 53), 1 << 53, 1, false)))]
    #[case::log_with_a_step(1, 9, 2, true, Err(Attr::Step))]
    #[case::low_above_high(3, 1, 1, false, Err(Attr::Low))]
    #[case::log_from_zero(0, 8, 1, true, Err(Attr::Log))]
    #[case::zero_step(0, 4, 0, false, Err(Attr::Step))]
    #[case::high_past_2_pow_53(0, 3_864_557_551_897_539_457, 1, false, Err(Attr::High))]
    #[case::low_past_minus_2_pow_53(-(1 << 53) - 1, 0, 1, false, Err(Attr::Low))]
    #[case::extremes(i64::MIN, i64::MAX, 1, false, Err(Attr::Low))]
    fn int_distributions_are_optunas_and_stored_exactly(
        #[case] low: i64,
        #[case] high: i64,
        #[case] step: i64,
        #[case] log: bool,
        #[case] want: Result<Distribution, Attr>,
    ) {
        assert_eq!(int(low, high, step, log).map_err(|r| r.attr), want);
    }

    #[test]
    fn refusals_carry_optunas_messages() {
        let why = |r: Result<Distribution, Refusal>| r.unwrap_err().message;
        assert_eq!(
            why(float(0.5, 0.1, None, false)),
            "`low <= high` must hold, but got (low=0.5, high=0.1)."
        );
        assert_eq!(
            why(float(0.0, 1.0, None, true)),
            "`low > 0` must hold for `log=True`, but got (low=0.0, high=1.0)."
        );
        assert_eq!(
            why(int(0, 4, -2, false)),
            "`step > 0` must hold, but got step=-2."
        );
        assert!(why(float(0.0, 1.0, Some(1e-30), false)).contains("decimal.InvalidOperation"));
        assert_eq!(
            why(categorical(vec![])),
            "The `choices` must contain one or more elements."
        );
    }

    #[test]
    fn categorical_choices_are_scalars() {
        assert!(categorical(vec![
            json!(null),
            json!(true),
            json!(1),
            json!(1.5),
            json!("a")
        ])
        .is_ok());
        assert_eq!(
            categorical(vec![json!([1])]).unwrap_err().attr,
            Attr::Choices
        );
        assert_eq!(
            categorical(vec![json!({"a": 1})]).unwrap_err().attr,
            Attr::Choices
        );
    }

    #[rstest]
    #[case::fine("lr", None)]
    #[case::longest(&"n".repeat(512), None)]
    #[case::empty("", Some("empty"))]
    #[case::nul("a\0b", Some("NUL"))]
    #[case::too_long(&"n".repeat(513), Some("513"))]
    #[case::reserved("sweepd:x", Some("reserved"))]
    fn param_names(#[case] name: &str, #[case] refused: Option<&str>) {
        match (param_name(name), refused) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{why}"),
            (got, _) => panic!("{name:?}: {got:?}"),
        }
    }

    #[rstest]
    #[case::fine("batch_size", None)]
    #[case::empty("", None)]
    #[case::longest(&"k".repeat(512), None)]
    #[case::multibyte_characters_count_once(&"é".repeat(512), None)]
    #[case::too_long(&"k".repeat(600), Some("600"))]
    #[case::nul("a\0b", Some("NUL"))]
    #[case::reserved("sweepd:fail_reason", Some("reserved"))]
    fn user_attr_keys(#[case] key: &str, #[case] refused: Option<&str>) {
        match (user_attr_key(key), refused) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{why}"),
            (got, _) => panic!("{key:?}: {got:?}"),
        }
    }

    #[rstest]
    #[case::fine("mem", 0.5, None)]
    #[case::infinite("mem", f64::INFINITY, None)]
    #[case::nan("mem", f64::NAN, Some("NaN is not allowed"))]
    #[case::nul("a\0b", 1.0, Some("NUL"))]
    #[case::too_long_with_the_prefix(&"k".repeat(510), 1.0, Some("522"))]
    fn constraints(#[case] key: &str, #[case] value: f64, #[case] refused: Option<&str>) {
        match (constraint(key, value), refused) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{why}"),
            (got, _) => panic!("{key:?}: {got:?}"),
        }
    }

    #[rstest]
    #[case(0, true)]
    #[case(3, true)]
    #[case(i32::MAX as i64, true)]
    #[case(-5, false)]
    #[case(i32::MAX as i64 + 1, false)]
    fn report_steps(#[case] step: i64, #[case] ok: bool) {
        assert_eq!(report_step(step).is_ok(), ok, "{step}");
        if step == -5 {
            assert_eq!(
                report_step(step).unwrap_err(),
                "`step=-5` must be non-negative."
            );
        }
    }

    #[rstest]
    #[case::float(json!({"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-5, "high": 0.1, "log": true}}), Ok(f(1e-5, 0.1, None, true)))]
    #[case::float_high_lowered(json!({"name": "FloatDistribution", "attributes": {"step": 0.3, "low": 0.0, "high": 1.0, "log": false}}), Ok(f(0.0, 0.9, Some(0.3), false)))]
    #[case::int_without_step(json!({"name": "IntDistribution", "attributes": {"low": 0, "high": 10}}), Ok(i(0, 10, 1, false)))]
    #[case::int_high_lowered(json!({"name": "IntDistribution", "attributes": {"log": false, "step": 3, "low": 0, "high": 10}}), Ok(i(0, 9, 3, false)))]
    #[case::int_written_as_a_float(json!({"name": "IntDistribution", "attributes": {"step": 1, "low": 2.0, "high": 4}}), Ok(i(2, 4, 1, false)))]
    #[case::categorical(json!({"name": "CategoricalDistribution", "attributes": {"choices": ["a", null]}}), Ok(Distribution::Categorical { choices: vec![json!("a"), json!(null)] }))]
    #[case::tiny_step(json!({"name": "FloatDistribution", "attributes": {"step": 1e-30, "low": 0.0, "high": 1.0, "log": false}}), Err("InvalidOperation"))]
    #[case::int_past_2_pow_53_not_rounded_into_range(json!({"name": "IntDistribution", "attributes": {"step": 1, "low": 0, "high": 9_007_199_254_740_993_i64}}), Err("2^53"))]
    #[case::int_with_a_fraction(json!({"name": "IntDistribution", "attributes": {"step": 1, "low": 0.5, "high": 4}}), Err("must be an integer"))]
    #[case::string_bound(json!({"name": "FloatDistribution", "attributes": {"low": "0", "high": 1.0}}), Err("finite number"))]
    #[case::bad_log(json!({"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0, "log": 1}}), Err("`log` must be true or false"))]
    #[case::no_attributes(json!({"name": "FloatDistribution"}), Err("no `attributes`"))]
    #[case::unknown(json!({"name": "BetaDistribution", "attributes": {}}), Err("unknown distribution"))]
    #[case::nested_choice(json!({"name": "CategoricalDistribution", "attributes": {"choices": [[1]]}}), Err("should be a tuple"))]
    fn requested_distributions(#[case] v: Value, #[case] want: Result<Distribution, &str>) {
        match (requested(&v), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(why), Err(part)) => assert!(why.contains(part), "{why}"),
            (got, want) => panic!("{v}: {got:?}, expected {want:?}"),
        }
    }
}
