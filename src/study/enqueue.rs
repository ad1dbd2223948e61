//! Trials a person adds with chosen params (`sweepd enqueue`), by Optuna's `enqueue_trial`
//! rules: a WAITING trial whose `fixed_params` system attribute holds the params in external
//! form (the float, the int, the choice itself), which the next start takes before any new
//! sample, the sampler completing the params it leaves out.
//!
//! Pure: how `name=value` reads, a value checked against the distribution the study knows for
//! its name (the config's `[params]`, else the one the study's trials last used), and Optuna's
//! `skip_if_exists` rule (`Study._should_skip_enqueue`).

use super::space::{json_eq, Distribution};
use serde_json::{Map, Value};

/// A `--param name=value` split at its first `=`; the value is still text.
pub fn assignment(text: &str) -> Result<(&str, &str), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim(), value)),
        _ => Err(format!(
            "--param {text:?}: expected NAME=VALUE (e.g. lr=0.001, optimizer=adam)"
        )),
    }
}

/// The external value of `--param name=text`: the text read as JSON (`0.001`, `4`, `true`,
/// `"adam"`), else as a string (`adam`), whichever the distribution takes (a categorical of
/// strings `"3"` and `"5"` takes `3` as the string).
pub fn from_text(name: &str, text: &str, dist: Option<&Distribution>) -> Result<Value, String> {
    let as_json = serde_json::from_str::<Value>(text.trim()).ok();
    let as_string = Value::String(text.to_owned());
    let mut first_error = None;
    for candidate in as_json.into_iter().chain([as_string]) {
        match from_json(name, &candidate, dist) {
            Ok(v) => return Ok(v),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("at least one candidate"))
}

/// The external value stored for `name` given `value` (from a `--file` line, or read from
/// `--param`'s text): checked against `dist`, the study's distribution for the name, and
/// written in its form (an int as an int, a float as a float, the choice as the config spells
/// it). A name the study does not know yet takes any scalar: the objective's `suggest` will
/// check it.
pub fn from_json(name: &str, value: &Value, dist: Option<&Distribution>) -> Result<Value, String> {
    if matches!(value, Value::Array(_) | Value::Object(_)) {
        return Err(format!(
            "param `{name}` = {value}: a param's value is a number, a string, true, false or null"
        ));
    }
    let Some(dist) = dist else {
        return Ok(value.clone());
    };
    match dist.from_external(value) {
        Some(v) => Ok(dist.external(&v)),
        None => Err(format!(
            "param `{name}` = {value} is outside the search space: {name} is {}",
            describe(dist)
        )),
    }
}

/// A distribution in a person's words: "a float from 1e-05 to 0.1 (log)".
pub fn describe(dist: &Distribution) -> String {
    match dist {
        Distribution::Float {
            low,
            high,
            step,
            log,
        } => format!(
            "a float from {low:?} to {high:?}{}{}",
            step.map(|s| format!(", step {s:?}")).unwrap_or_default(),
            if *log { " (log)" } else { "" }
        ),
        Distribution::Int {
            low,
            high,
            step,
            log,
        } => format!(
            "an int from {low} to {high}{}{}",
            if *step != 1 {
                format!(", step {step}")
            } else {
                String::new()
            },
            if *log { " (log)" } else { "" }
        ),
        Distribution::Categorical { choices } => format!(
            "one of {}",
            choices
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Optuna's `skip_if_exists` rule: whether `new` repeats `existing` (a trial's `fixed_params`,
/// else its params): the same names, and each value of the same Python type (an int where an
/// int was; a bool counts as an int, as `isinstance` has it) and equal, numbers by
/// `numpy.isclose(new, old, atol=0)` (a relative tolerance of 1e-5).
pub fn repeats(new: &Map<String, Value>, existing: &Map<String, Value>) -> bool {
    if new.len() != existing.len() || new.keys().any(|k| !existing.contains_key(k)) {
        return false;
    }
    new.iter().all(|(name, v)| same_value(v, &existing[name]))
}

/// Python's type of a JSON scalar as `json.loads` gives it.
#[derive(PartialEq, Clone, Copy)]
enum PyType {
    Bool,
    Int,
    Float,
    Str,
    None,
    Other,
}

fn py_type(v: &Value) -> PyType {
    match v {
        Value::Bool(_) => PyType::Bool,
        Value::Number(n) if n.is_f64() => PyType::Float,
        Value::Number(_) => PyType::Int,
        Value::String(_) => PyType::Str,
        Value::Null => PyType::None,
        _ => PyType::Other,
    }
}

/// `isinstance(new, type(old))` and then `isclose` for numbers, `==` for the rest.
fn same_value(new: &Value, old: &Value) -> bool {
    let (n, o) = (py_type(new), py_type(old));
    let instance = n == o || (n == PyType::Bool && o == PyType::Int);
    if !instance {
        return false;
    }
    let number = |v: &Value| match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(x) => x.as_f64(),
        _ => None,
    };
    match (number(new), number(old)) {
        // numpy.isclose(a, b, rtol=1e-5, atol=0, equal_nan=True); JSON has no NaN.
        (Some(a), Some(b)) => (a - b).abs() <= 1e-5 * b.abs(),
        _ => json_eq(new, old) || new == old,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::test_util::{cat, float, int};
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case("lr=0.001", Ok(("lr", "0.001")))]
    #[case(" opt =adam", Ok(("opt", "adam")))]
    #[case("expr=a=b", Ok(("expr", "a=b")))]
    #[case("lr", Err(()))]
    #[case("=3", Err(()))]
    fn a_param_is_name_equals_value(#[case] text: &str, #[case] want: Result<(&str, &str), ()>) {
        assert_eq!(assignment(text).map_err(|_| ()), want);
    }

    fn choices() -> Distribution {
        Distribution::Categorical {
            choices: vec![json!("adam"), json!("sgd"), json!(3), json!(true)],
        }
    }

    fn string_choices() -> Distribution {
        Distribution::Categorical {
            choices: vec![json!("3"), json!("5")],
        }
    }

    #[rstest]
    #[case::float(float(1e-5, 0.1, None, true), "0.001", Ok(json!(0.001)))]
    #[case::float_given_as_an_int(float(0.0, 4.0, None, false), "2", Ok(json!(2.0)))]
    #[case::float_outside(
        float(1e-5, 0.1, None, true),
        "0.5",
        Err("param `p` = 0.5 is outside the search space: p is a float from 1e-5 to 0.1 (log)")
    )]
    #[case::float_off_its_step(
        float(0.0, 1.0, Some(0.25), false),
        "0.3",
        Err(
            "param `p` = 0.3 is outside the search space: p is a float from 0.0 to 1.0, step 0.25"
        )
    )]
    #[case::int(int(0, 10, 2, false), "4", Ok(json!(4)))]
    #[case::int_written_as_float(int(0, 10, 2, false), "4.0", Ok(json!(4)))]
    #[case::int_off_its_step(
        int(0, 10, 2, false),
        "3",
        Err("param `p` = 3 is outside the search space: p is an int from 0 to 10, step 2")
    )]
    #[case::int_not_a_number(
        int(0, 10, 1, false),
        "four",
        Err("param `p` = \"four\" is outside the search space: p is an int from 0 to 10")
    )]
    #[case::choice_bare_string(choices(), "adam", Ok(json!("adam")))]
    #[case::choice_quoted(choices(), "\"sgd\"", Ok(json!("sgd")))]
    #[case::choice_number(choices(), "3", Ok(json!(3)))]
    #[case::choice_bool(choices(), "true", Ok(json!(true)))]
    #[case::choice_number_among_strings(string_choices(), "3", Ok(json!("3")))]
    #[case::not_a_choice(
        cat(2),
        "2",
        Err("param `p` = 2 is outside the search space: p is one of \"c0\", \"c1\"")
    )]
    fn a_value_is_checked_against_the_distribution_and_kept_in_its_form(
        #[case] dist: Distribution,
        #[case] text: &str,
        #[case] want: Result<Value, &str>,
    ) {
        assert_eq!(
            from_text("p", text, Some(&dist)),
            want.map_err(str::to_owned)
        );
    }

    #[rstest]
    #[case("0.5", json!(0.5))]
    #[case("7", json!(7))]
    #[case("adam", json!("adam"))]
    #[case("\"adam\"", json!("adam"))]
    #[case("null", json!(null))]
    fn a_name_the_study_does_not_know_takes_any_scalar(#[case] text: &str, #[case] want: Value) {
        assert_eq!(from_text("new", text, None), Ok(want));
    }

    #[test]
    fn a_list_or_an_object_is_no_param_value() {
        let e = from_json("p", &json!([1, 2]), None).unwrap_err();
        assert!(e.contains("param `p` = [1,2]"), "{e}");
        // From text, `[1,2]` is taken as the string it is: no distribution refuses a string.
        assert_eq!(from_text("p", "[1,2]", None), Ok(json!("[1,2]")));
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[rstest]
    #[case::same(json!({"x": 1.0, "opt": "sgd"}), json!({"opt": "sgd", "x": 1.0}), true)]
    #[case::close_by_rtol(json!({"x": 1.000001}), json!({"x": 1.0}), true)]
    #[case::not_close(json!({"x": 1.001}), json!({"x": 1.0}), false)]
    #[case::other_names(json!({"x": 1.0}), json!({"x": 1.0, "n": 2}), false)]
    #[case::int_where_a_float_was(json!({"x": 1}), json!({"x": 1.0}), false)]
    #[case::float_where_an_int_was(json!({"n": 2.0}), json!({"n": 2}), false)]
    #[case::bool_where_an_int_was(json!({"n": true}), json!({"n": 1}), true)]
    #[case::int_where_a_bool_was(json!({"b": 1}), json!({"b": true}), false)]
    #[case::other_choice(json!({"opt": "adam"}), json!({"opt": "sgd"}), false)]
    #[case::no_params(json!({}), json!({}), true)]
    fn skip_if_exists_compares_as_optuna_does(
        #[case] new: Value,
        #[case] old: Value,
        #[case] want: bool,
    ) {
        assert_eq!(repeats(&map(new), &map(old)), want);
    }
}
