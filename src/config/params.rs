//! `[params.*]`: the static part of the search space, optional. Each param is one flat raw
//! table checked by its `type` (float, int, categorical) into a [`Distribution`], in file order.
//! Without it (or beside it) the objective defines its params as it runs (`suggest_*`,
//! protocol 2); only the grid sampler needs the whole space here. Then the limits of what a trial's
//! params can be on their way to a worker and to Optuna's tables (one protocol line, one
//! environment variable, `distribution_json`), and, for the grid sampler, a finite grid of a
//! sane size.

use super::raw::{dotted, Entries, RawParam, RawStudy, Table};
use super::validate::*;
use crate::study::rules::{self, Attr};
use crate::study::space::{grid_points, json_eq, MAX_GRID_POINTS};
use crate::study::{Distribution, ParamSpec, SearchSpace};
use crate::units::format_size;
use toml::Spanned;

impl Validator<'_> {
    pub(crate) fn space(&mut self, raw: Option<&Entries<Table<RawParam>>>) -> Option<SearchSpace> {
        let entries = raw.map_or(&[][..], |e| &e.0);
        let before = self.problems.len();
        let mut params = Vec::new();
        for (name, raw) in entries {
            if let Some(dist) = self.param(name, &raw.0) {
                params.push(ParamSpec {
                    name: name.get_ref().clone(),
                    dist,
                });
            }
        }
        // `{"name":value,...}` with every value at its longest.
        let longest = |p: &ParamSpec| {
            serde_json::Value::from(p.name.as_str()).to_string().len()
                + max_value_json_len(&p.dist)
                + 2
        };
        let total: usize = 2 + params.iter().map(longest).sum::<usize>();
        if total > MAX_PARAMS_JSON_BYTES {
            let largest = params
                .iter()
                .max_by_key(|p| longest(p))
                .expect("a non-empty total");
            self.at_key(
                "params",
                format!(
                    "one trial's params can take {} as JSON, more than the {} a worker can be \
                     given (one protocol line, one environment variable); the largest is {} \
                     ({}): use shorter choices or names, or fewer params",
                    format_size(total as u64),
                    format_size(MAX_PARAMS_JSON_BYTES as u64),
                    dotted(&["params", &largest.name]),
                    format_size(longest(largest) as u64)
                ),
            );
        }
        (self.problems.len() == before).then_some(SearchSpace { params })
    }

    pub(crate) fn param(&mut self, name: &Spanned<String>, raw: &RawParam) -> Option<Distribution> {
        let before = self.problems.len();
        let base = dotted(&["params", name.get_ref()]);
        // The rule a worker's `suggest` is held to as well.
        if let Err(message) = rules::param_name(name.get_ref()) {
            self.at(name, &base, message);
        }
        let p = ParamCtx {
            base: &base,
            name,
            raw,
        };
        let dist = match &raw.kind {
            None => {
                self.at(
                    name,
                    &p.key("type"),
                    format!("missing required key; expected one of {PARAM_TYPES}"),
                );
                None
            }
            Some(kind) => match kind.get_ref().as_str() {
                "float" => self.float_param(&p),
                "int" => self.int_param(&p),
                "categorical" => self.categorical_param(&p),
                other => {
                    self.at(
                        kind,
                        &p.key("type"),
                        format!("unknown param type {other:?}; expected one of {PARAM_TYPES}"),
                    );
                    None
                }
            },
        };
        dist.filter(|_| self.problems.len() == before)
    }

    pub(crate) fn float_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        self.no_choices(p);
        let low = self.bound(p, "low", &p.raw.low, float_value);
        let high = self.bound(p, "high", &p.raw.high, float_value);
        let step = match &p.raw.step {
            None => Some(None),
            Some(s) => self.value_of(p, "step", s, float_value).map(Some),
        };
        let log = p.raw.log.as_ref().is_some_and(|l| *l.get_ref());
        let (low, high, step) = (low?, high?, step?);
        if !self.ordered(p, low, high) {
            return None;
        }
        let dist = self.ruled(p, rules::float(low, high, step, log))?;
        if let (Distribution::Float { high: last, .. }, Some(s)) = (&dist, &p.raw.step) {
            if *last != high {
                self.at(
                    s,
                    &p.key("step"),
                    format!(
                        "step ({}) does not divide high - low ({}): Optuna would lower high to \
                         {}, the last step",
                        step.unwrap_or_default(),
                        high - low,
                        last
                    ),
                );
            }
        }
        Some(dist)
    }

    pub(crate) fn int_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        self.no_choices(p);
        let low = self.bound(p, "low", &p.raw.low, int_value);
        let high = self.bound(p, "high", &p.raw.high, int_value);
        let log = p.raw.log.as_ref().is_some_and(|l| *l.get_ref());
        let step = match &p.raw.step {
            None => Some(1),
            Some(s) => self.value_of(p, "step", s, int_value),
        };
        let (low, high, step) = (low?, high?, step?);
        if !self.ordered(p, low as f64, high as f64) {
            return None;
        }
        let dist = self.ruled(p, rules::int(low, high, step, log))?;
        if let (Distribution::Int { high: last, .. }, Some(s)) = (&dist, &p.raw.step) {
            if *last != high {
                // i128: high - low can overflow i64 for extreme bounds.
                let span = i128::from(high) - i128::from(low);
                self.at(
                    s,
                    &p.key("step"),
                    format!("step ({step}) does not divide high - low ({span})"),
                );
            }
        }
        Some(dist)
    }

    fn no_choices(&mut self, p: &ParamCtx) {
        if let Some(c) = &p.raw.choices {
            self.at(
                c,
                &p.key("choices"),
                "only categorical params take `choices`",
            );
        }
    }

    /// The shared rule's verdict (`study::rules`, what a worker's `suggest` is held to too),
    /// a refusal reported at the key it names.
    fn ruled(
        &mut self,
        p: &ParamCtx,
        verdict: Result<Distribution, rules::Refusal>,
    ) -> Option<Distribution> {
        let refusal = match verdict {
            Ok(dist) => return Some(dist),
            Err(r) => r,
        };
        let (field, raw) = match refusal.attr {
            Attr::Low => ("low", p.raw.low.as_ref().map(Spanned::span)),
            Attr::High => ("high", p.raw.high.as_ref().map(Spanned::span)),
            Attr::Step => ("step", p.raw.step.as_ref().map(Spanned::span)),
            Attr::Log => ("log", p.raw.log.as_ref().map(Spanned::span)),
            Attr::Choices => ("choices", p.raw.choices.as_ref().map(Spanned::span)),
        };
        let span = raw.or_else(|| Some(p.name.span()));
        self.report(span, Some(p.key(field)), refusal.message);
        None
    }

    pub(crate) fn categorical_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        let numeric = [
            ("low", p.raw.low.as_ref().map(Spanned::span)),
            ("high", p.raw.high.as_ref().map(Spanned::span)),
            ("step", p.raw.step.as_ref().map(Spanned::span)),
            ("log", p.raw.log.as_ref().map(Spanned::span)),
        ];
        for (field, span) in numeric {
            if let Some(span) = span {
                self.report(
                    Some(span),
                    Some(p.key(field)),
                    format!("`{field}` does not apply to categorical params"),
                );
            }
        }
        let Some(raw_choices) = &p.raw.choices else {
            self.at(
                p.name,
                &p.key("choices"),
                "missing required key: categorical params need `choices`",
            );
            return None;
        };
        if raw_choices.get_ref().is_empty() {
            self.at(raw_choices, &p.key("choices"), "must not be empty");
            return None;
        }
        let mut choices: Vec<serde_json::Value> = Vec::new();
        for c in raw_choices.get_ref() {
            let json = match c.get_ref() {
                toml::Value::String(s) => Some(serde_json::Value::from(s.as_str())),
                toml::Value::Integer(i) => Some(serde_json::Value::from(*i)),
                toml::Value::Boolean(b) => Some(serde_json::Value::from(*b)),
                toml::Value::Float(f) => {
                    serde_json::Number::from_f64(*f).map(serde_json::Value::Number)
                }
                toml::Value::Datetime(_) | toml::Value::Array(_) | toml::Value::Table(_) => None,
            };
            let Some(json) = json else {
                self.at(
                    c,
                    &p.key("choices"),
                    format!(
                        "choices must be strings, integers, finite floats or booleans, not {}",
                        c.get_ref()
                    ),
                );
                continue;
            };
            if let Some(text) = json.as_str() {
                // A oneshot worker gets the choice as `--name=choice`, where NUL cannot travel.
                if text.contains('\0') {
                    self.at(
                        c,
                        &p.key("choices"),
                        "choices may not contain NUL bytes (a worker could not be given them)",
                    );
                    continue;
                }
                if text.len() > MAX_CHOICE_BYTES {
                    self.at(
                        c,
                        &p.key("choices"),
                        format!(
                            "a choice is too long: at most {} (got {})",
                            format_size(MAX_CHOICE_BYTES as u64),
                            format_size(text.len() as u64)
                        ),
                    );
                    continue;
                }
            }
            // Python's equality (1 == 1.0): Optuna would map both to the same index.
            if choices.iter().any(|seen| json_eq(seen, &json)) {
                self.at(c, &p.key("choices"), format!("duplicate choice {json}"));
                continue;
            }
            choices.push(json);
        }
        let dist = self.ruled(p, rules::categorical(choices))?;
        let len = dist.optuna_json().len();
        if len > MAX_DISTRIBUTION_JSON_BYTES {
            self.at(
                raw_choices,
                &p.key("choices"),
                format!(
                    "the choices take {} as Optuna's distribution_json, stored with every \
                     trial: at most {} (use fewer or shorter choices)",
                    format_size(len as u64),
                    format_size(MAX_DISTRIBUTION_JSON_BYTES as u64)
                ),
            );
        }
        Some(dist)
    }

    /// A required low/high bound.
    pub(crate) fn bound<T>(
        &mut self,
        p: &ParamCtx,
        field: &str,
        raw: &Option<Spanned<toml::Value>>,
        convert: fn(&toml::Value) -> Result<T, String>,
    ) -> Option<T> {
        match raw {
            None => {
                self.at(p.name, &p.key(field), "missing required key");
                None
            }
            Some(v) => self.value_of(p, field, v, convert),
        }
    }

    pub(crate) fn value_of<T>(
        &mut self,
        p: &ParamCtx,
        field: &str,
        raw: &Spanned<toml::Value>,
        convert: fn(&toml::Value) -> Result<T, String>,
    ) -> Option<T> {
        convert(raw.get_ref())
            .map_err(|message| self.at(raw, &p.key(field), message))
            .ok()
    }

    pub(crate) fn ordered(&mut self, p: &ParamCtx, low: f64, high: f64) -> bool {
        if low < high {
            return true;
        }
        let at = p
            .raw
            .low
            .as_ref()
            .expect("low was converted, so it was written");
        self.at(
            at,
            &p.key("low"),
            format!("low ({low}) must be less than high ({high})"),
        );
        false
    }

    /// Grid-specific checks, once every param is otherwise valid.
    pub(crate) fn grid(
        &mut self,
        raw_params: Option<&Entries<Table<RawParam>>>,
        raw_study: Option<&RawStudy>,
        space: &SearchSpace,
    ) {
        let names = raw_params.map_or(&[][..], |e| &e.0);
        if space.params.is_empty() {
            let message = "the grid sampler searches a static space: define the grid in \
                           [params.NAME] tables (the params an objective suggests as it runs \
                           need sampler = \"tpe\" or \"random\")";
            match raw_study.and_then(|s| s.sampler.as_ref()) {
                Some(s) => self.at(s, "study.sampler", message),
                None => self.at_key("study.sampler", message),
            }
            return;
        }
        match space.grid_lens() {
            Err(continuous) => {
                for i in continuous {
                    let (Some(spec), Some((name, _))) = (space.params.get(i), names.get(i)) else {
                        continue;
                    };
                    self.at(
                        name,
                        &dotted(&["params", &spec.name]),
                        "the grid sampler needs a `step` for continuous params \
                         (and so cannot search a log-scale float)",
                    );
                }
            }
            Ok(lens) => {
                let points = grid_points(&lens);
                if points > MAX_GRID_POINTS {
                    let message = format!(
                        "the grid has {points} points, more than the {MAX_GRID_POINTS} allowed; \
                         use larger steps, fewer params or the random sampler"
                    );
                    match raw_study.and_then(|s| s.sampler.as_ref()) {
                        Some(s) => self.at(s, "study.sampler", message),
                        None => self.at_key("study.sampler", message),
                    }
                }
            }
        }
    }
}

/// What a param's problems need to name and locate themselves.
pub(crate) struct ParamCtx<'a> {
    /// `params.NAME`
    base: &'a str,
    name: &'a Spanned<String>,
    raw: &'a RawParam,
}

impl ParamCtx<'_> {
    fn key(&self, field: &str) -> String {
        format!("{}.{field}", self.base)
    }
}

/// The longest a param's value can be as JSON, as a worker receives it: a float at most 24
/// characters (`-2.2250738585072014e-308`), an int 20 (`-9223372036854775808`), a choice its own.
pub(crate) fn max_value_json_len(dist: &Distribution) -> usize {
    match dist {
        Distribution::Float { .. } => 24,
        Distribution::Int { .. } => 20,
        Distribution::Categorical { choices } => choices
            .iter()
            .map(|c| c.to_string().len())
            .max()
            .unwrap_or(0),
    }
}

pub(crate) fn int_value(v: &toml::Value) -> Result<i64, String> {
    match v {
        toml::Value::Integer(i) => Ok(*i),
        toml::Value::Float(f) => Err(format!("int params need integer values (got {f})")),
        other => Err(format!(
            "int params need integer values, not {}",
            other.type_str()
        )),
    }
}
