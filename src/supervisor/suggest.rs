//! A running trial's params as its objective defines them (define-by-run, protocol 2): what it
//! started with, what the sampler proposed for it, what was enqueued for it, and what its
//! objective has asked for so far; and the pure rule that answers a `suggest`, Optuna's
//! `Trial._suggest`: a name asked again gets the same value, a name given before the trial
//! started (`[params]`, a retry's params) gets that value where the objective's distribution
//! allows it, then an enqueued value, a single-valued distribution's value, the relative
//! proposal, and last the sampler. `Core::suggest` applies it, with the study's check and the
//! write.

use crate::sampler::Relative;
use crate::study::{Distribution, Dists, ParamValue, Params};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A running trial's params as they grow.
#[derive(Debug, Clone, Default)]
pub(super) struct Live {
    /// Everything the trial has in `trial_params`, with the distribution each was recorded
    /// with.
    pub(super) params: Params,
    pub(super) dists: Dists,
    /// The names of `params` in the order the trial got them: the static space's, then what
    /// its objective suggested, as the trial's rows are written (the log shows them so).
    order: Vec<String>,
    /// Names its objective has asked for.
    asked: BTreeSet<String>,
    /// The sampler's relative values for it (Optuna's `relative_params`), for names not in
    /// `params`.
    relative: Relative,
    /// Enqueued values (Optuna's `fixed_params`) for names not in `params`, in external form.
    enqueued: serde_json::Map<String, Value>,
    /// The constraints its objective set (`trial.set_constraint`), by key, as recorded.
    pub(super) constraints: BTreeMap<String, f64>,
}

/// What a `suggest` gets.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Answer {
    /// The value the trial already has for the name: nothing to write.
    Have(ParamValue),
    /// Refused, with Optuna's (or sweepd's) reason.
    Refuse(String),
    /// A new param for the trial: `Some` value taken from what the trial was given (enqueued,
    /// single-valued, relative), `None` for the sampler to draw. Either way the study's earlier
    /// use of the name is checked before it is written.
    New(Option<ParamValue>),
}

impl Live {
    /// `order`: the names of `params` in the order they were written.
    pub(super) fn new(
        params: Params,
        dists: Dists,
        order: Vec<String>,
        relative: Relative,
        enqueued: serde_json::Map<String, Value>,
    ) -> Live {
        Live {
            params,
            order,
            dists,
            asked: BTreeSet::new(),
            relative,
            enqueued,
            constraints: BTreeMap::new(),
        }
    }

    /// The answer to the objective asking for `name` from `dist` (see the module docs).
    pub(super) fn answer(&self, name: &str, dist: &Distribution) -> Answer {
        if let (Some(old), Some(v)) = (self.dists.get(name), self.params.get(name)) {
            if let Err(why) = old.compatible(dist) {
                return Answer::Refuse(why.to_owned());
            }
            // Asked again: the first value, whatever the range asked now (Optuna warns of
            // the inconsistency and keeps the first).
            if self.asked.contains(name) || dist.contains(v) {
                return Answer::Have(v.clone());
            }
            return Answer::Refuse(format!(
                "`{name}` = {} (from [params.{name}], or the attempt this trial retries) is not \
                 in the distribution the objective asks for: make them agree; asked for {}",
                old.external(v),
                dist.optuna_json()
            ));
        }
        if let Some(ext) = self.enqueued.get(name) {
            return match dist.from_external(ext) {
                Some(v) => Answer::New(Some(v)),
                None => Answer::Refuse(format!(
                    "the value {ext} enqueued for `{name}` is not in {}, the distribution the \
                     objective asks for",
                    dist.optuna_json()
                )),
            };
        }
        if let Some(v) = dist.single() {
            return Answer::New(Some(v));
        }
        match self.relative.get(name) {
            Some((d, v)) if d.compatible(dist).is_ok() && dist.contains(v) => {
                Answer::New(Some(v.clone()))
            }
            _ => Answer::New(None),
        }
    }

    /// The objective asked for `name` and got `v`: a new param (written), or one it had.
    pub(super) fn asked(&mut self, name: &str, dist: &Distribution, v: &ParamValue) {
        if !self.params.contains_key(name) {
            self.params.insert(name.to_owned(), v.clone());
            self.dists.insert(name.to_owned(), dist.clone());
            self.order.push(name.to_owned());
        }
        self.relative.remove(name);
        self.enqueued.remove(name);
        self.asked.insert(name.to_owned());
    }

    /// Its params as the worker saw them, in the order the trial got them.
    pub(super) fn external(&self) -> Value {
        let mut obj = serde_json::Map::new();
        for name in &self.order {
            if let (Some(v), Some(d)) = (self.params.get(name), self.dists.get(name)) {
                obj.insert(name.clone(), d.external(v));
            }
        }
        Value::Object(obj)
    }

    /// What the constant liar sees of the trial while it runs: its params, and its relative
    /// values not suggested yet (as Optuna's TPE reads a running trial's `relative_params`).
    pub(super) fn observed(&self) -> Params {
        let mut p = self.params.clone();
        for (name, (_, v)) in &self.relative {
            p.entry(name.clone()).or_insert_with(|| v.clone());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::space::test_util::{cat, float, int};
    use rstest::rstest;
    use serde_json::json;

    /// A trial that started with `x` from [params] (float [0, 1]), has `n_layers` = 2 asked
    /// already, was enqueued `opt` = "c1", and got a relative value for `lr`.
    fn live() -> Live {
        let mut params = Params::new();
        params.insert("x".into(), ParamValue::Float(0.25));
        let mut dists = Dists::new();
        dists.insert("x".into(), float(0.0, 1.0, None, false));
        let mut relative = Relative::new();
        relative.insert(
            "lr".into(),
            (float(1e-5, 1e-1, None, true), ParamValue::Float(1e-3)),
        );
        let mut enqueued = serde_json::Map::new();
        enqueued.insert("opt".into(), json!("c1"));
        let mut l = Live::new(params, dists, vec!["x".into()], relative, enqueued);
        l.asked("n_layers", &int(1, 3, 1, false), &ParamValue::Int(2));
        l
    }

    fn refused(why: &str) -> Answer {
        Answer::Refuse(why.into())
    }

    #[rstest]
    #[case::asked_again_same("n_layers", int(1, 3, 1, false), Answer::Have(ParamValue::Int(2)))]
    #[case::asked_again_other_range_keeps_the_first(
        "n_layers",
        int(5, 9, 1, false),
        Answer::Have(ParamValue::Int(2))
    )]
    #[case::asked_again_other_kind(
        "n_layers",
        float(1.0, 3.0, None, false),
        refused("Cannot set different distribution kind to the same parameter name.")
    )]
    #[case::asked_again_other_log(
        "n_layers",
        int(1, 3, 1, true),
        refused("Cannot set different log configuration to the same parameter name.")
    )]
    #[case::presampled_fits(
        "x",
        float(0.0, 0.5, None, false),
        Answer::Have(ParamValue::Float(0.25))
    )]
    #[case::enqueued("opt", cat(3), Answer::New(Some(ParamValue::Choice(1))))]
    #[case::single("one", int(4, 4, 1, false), Answer::New(Some(ParamValue::Int(4))))]
    #[case::relative(
        "lr",
        float(1e-5, 1e-1, None, true),
        Answer::New(Some(ParamValue::Float(1e-3)))
    )]
    #[case::relative_out_of_the_range_asked("lr", float(1e-2, 1e-1, None, true), Answer::New(None))]
    #[case::relative_of_another_kind("lr", cat(2), Answer::New(None))]
    #[case::unknown("units", int(4, 128, 1, true), Answer::New(None))]
    fn answers_as_optunas_trial_does(
        #[case] name: &str,
        #[case] dist: Distribution,
        #[case] want: Answer,
    ) {
        assert_eq!(live().answer(name, &dist), want);
    }

    #[test]
    fn a_presampled_value_outside_the_objectives_range_is_refused_with_both_named() {
        let Answer::Refuse(why) = live().answer("x", &float(0.5, 1.0, None, false)) else {
            panic!("not refused");
        };
        assert!(
            why.contains("`x` = 0.25") && why.contains("[params.x]"),
            "{why}"
        );
        let Answer::Refuse(why) = live().answer("opt", &cat(1)) else {
            panic!("not refused");
        };
        assert!(why.contains("\"c1\" enqueued for `opt`"), "{why}");
    }

    #[test]
    fn a_suggested_param_joins_the_trial_and_leaves_the_relative_values() {
        let mut l = live();
        assert!(l.observed().contains_key("lr"));
        l.asked(
            "lr",
            &float(1e-5, 1e-1, None, true),
            &ParamValue::Float(1e-3),
        );
        assert_eq!(l.params.len(), 3);
        assert_eq!(
            l.answer("lr", &float(1e-4, 1e-1, None, true)),
            Answer::Have(ParamValue::Float(1e-3))
        );
        assert_eq!(
            l.external(),
            serde_json::json!({"x": 0.25, "n_layers": 2, "lr": 1e-3})
        );
        let shown = l.external();
        let names: Vec<&String> = shown.as_object().unwrap().keys().collect();
        assert_eq!(
            names,
            ["x", "n_layers", "lr"],
            "in the order the trial got them"
        );
        // Asking for a param it had from the start marks it asked, and changes nothing else.
        l.asked("x", &float(0.0, 0.5, None, false), &ParamValue::Float(0.25));
        assert_eq!(l.dists["x"], float(0.0, 1.0, None, false));
    }
}
