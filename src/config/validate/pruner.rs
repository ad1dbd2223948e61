//! `[pruner]`: which pruner and its settings. Each setting belongs to some pruner types, and one
//! written for another type is an error that names the types it belongs to; the bounds are
//! Optuna's constructors' (which raise `ValueError` outside them), plus Hyperband's
//! `max_resource` not below `min_resource` (Optuna accepts it and never prunes) nor above the
//! largest step a worker may report plus one.

use super::*;
use crate::config::raw::RawPruner;
use crate::config::{MaxResource, PrunerConfig};
use crate::study::rules::MAX_STEP;

/// Which pruner type each setting belongs to.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    None,
    Median,
    Asha,
    Hyperband,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::Median => "median",
            Kind::Asha => "asha",
            Kind::Hyperband => "hyperband",
        }
    }
}

/// A setting's name, where it is written (if it is), and the types it belongs to.
type Setting<'a> = (&'a str, Option<Range<usize>>, &'a [Kind]);

impl Validator<'_> {
    pub(crate) fn pruner(&mut self, raw: Option<&RawPruner>) -> PrunerConfig {
        let Some(raw) = raw else {
            return PrunerConfig::None;
        };
        let written = self.choice(raw.kind.as_ref(), "pruner.type", PRUNERS, |s| match s {
            "none" => Some(Kind::None),
            "median" => Some(Kind::Median),
            "asha" => Some(Kind::Asha),
            "hyperband" => Some(Kind::Hyperband),
            _ => None,
        });
        let kind = match (&raw.kind, written) {
            (None, _) => Kind::None,
            (Some(_), Some(k)) => k,
            // Unknown type: which settings apply cannot be told.
            (Some(_), None) => return PrunerConfig::None,
        };
        self.pruner_keys_of_other_types(raw, kind);
        match kind {
            Kind::None => PrunerConfig::None,
            Kind::Median => PrunerConfig::Median {
                n_startup_trials: self.int(
                    raw.n_startup_trials.as_ref(),
                    "pruner.n_startup_trials",
                    0..=USIZE_MAX,
                    5,
                ),
                n_warmup_steps: self.int(
                    raw.n_warmup_steps.as_ref(),
                    "pruner.n_warmup_steps",
                    0..=i64::MAX,
                    0,
                ),
                interval_steps: self.int(
                    raw.interval_steps.as_ref(),
                    "pruner.interval_steps",
                    1..=i64::MAX,
                    1,
                ),
            },
            Kind::Asha => PrunerConfig::Asha {
                min_resource: self.min_resource(raw),
                reduction_factor: self.reduction_factor(raw),
                min_early_stopping_rate: self.int(
                    raw.min_early_stopping_rate.as_ref(),
                    "pruner.min_early_stopping_rate",
                    0..=U32_MAX,
                    0,
                ),
            },
            Kind::Hyperband => self.hyperband(raw),
        }
    }

    /// A setting written for another type than `kind` is an error naming the types it is for.
    fn pruner_keys_of_other_types(&mut self, raw: &RawPruner, kind: Kind) {
        use Kind::{Asha, Hyperband, Median};
        let max_resource = raw.max_resource.as_ref().map(|v| v.span());
        let fields: [Setting; 8] = [
            ("n_startup_trials", span(&raw.n_startup_trials), &[Median]),
            ("n_warmup_steps", span(&raw.n_warmup_steps), &[Median]),
            ("interval_steps", span(&raw.interval_steps), &[Median]),
            ("min_resource", span(&raw.min_resource), &[Asha, Hyperband]),
            (
                "reduction_factor",
                span(&raw.reduction_factor),
                &[Asha, Hyperband],
            ),
            (
                "min_early_stopping_rate",
                span(&raw.min_early_stopping_rate),
                &[Asha],
            ),
            ("max_resource", max_resource, &[Hyperband]),
            ("bootstrap_count", span(&raw.bootstrap_count), &[Hyperband]),
        ];
        let hint = match kind {
            Kind::None if raw.kind.is_none() => " (the default); set `type`",
            _ => "",
        };
        for (name, at, owners) in fields {
            let Some(at) = at else { continue };
            if owners.contains(&kind) {
                continue;
            }
            let names: Vec<String> = owners.iter().map(|k| format!("{:?}", k.name())).collect();
            let (types, names) = match &names[..] {
                [one] => ("type", one.clone()),
                _ => ("types", names.join(" and ")),
            };
            let why = if kind == Kind::Hyperband && name == "min_early_stopping_rate" {
                " (Hyperband gives its bracket k the rate k)"
            } else {
                ""
            };
            self.report(
                Some(at),
                Some(format!("pruner.{name}")),
                format!(
                    "`{name}` is a setting of pruner {types} {names} and does not apply to \
                     type {:?}{hint}{why}",
                    kind.name()
                ),
            );
        }
    }

    fn min_resource(&mut self, raw: &RawPruner) -> i64 {
        self.int(
            raw.min_resource.as_ref(),
            "pruner.min_resource",
            1..=i64::MAX,
            1,
        )
    }

    fn reduction_factor(&mut self, raw: &RawPruner) -> u32 {
        self.int(
            raw.reduction_factor.as_ref(),
            "pruner.reduction_factor",
            2..=U32_MAX,
            3,
        )
    }

    /// `type = "hyperband"`: Optuna's `HyperbandPruner` arguments, with its own checks
    /// (`bootstrap_count > 0` needs a fixed `max_resource`) and one more: a `max_resource` below
    /// `min_resource` leaves no bracket, so nothing would ever be pruned.
    fn hyperband(&mut self, raw: &RawPruner) -> PrunerConfig {
        let min_resource = self.min_resource(raw);
        let max_resource = match &raw.max_resource {
            None => MaxResource::Auto,
            Some(v) => self.max_resource(v, min_resource),
        };
        let bootstrap_count = self.int(
            raw.bootstrap_count.as_ref(),
            "pruner.bootstrap_count",
            0..=USIZE_MAX,
            0,
        );
        if let (Some(b), MaxResource::Auto) = (&raw.bootstrap_count, max_resource) {
            if bootstrap_count > 0 {
                let whose = if raw.max_resource.is_some() {
                    "`max_resource = \"auto\"`"
                } else {
                    "`max_resource` unset (\"auto\")"
                };
                self.at(
                    b,
                    "pruner.bootstrap_count",
                    format!(
                        "bootstrap_count > 0 needs a number of steps as `max_resource`, not \
                         {whose}: set `max_resource` to the steps a full-length trial reports \
                         (Optuna refuses the pair too)"
                    ),
                );
            }
        }
        PrunerConfig::Hyperband {
            min_resource,
            max_resource,
            reduction_factor: self.reduction_factor(raw),
            bootstrap_count,
        }
    }

    fn max_resource(&mut self, raw: &Spanned<toml::Value>, min_resource: i64) -> MaxResource {
        const KEY: &str = "pruner.max_resource";
        let message = match raw.get_ref() {
            toml::Value::String(s) if s == "auto" => return MaxResource::Auto,
            toml::Value::Integer(i) if *i < 1 => format!("must be at least 1 (got {i})"),
            toml::Value::Integer(i) if *i > MAX_STEP + 1 => format!(
                "must be at most {} (got {i}): a step is at most {MAX_STEP}",
                MAX_STEP + 1
            ),
            toml::Value::Integer(i) if *i >= min_resource => return MaxResource::Steps(*i),
            toml::Value::Integer(i) => format!(
                "{i} is below min_resource ({min_resource}): Hyperband would have no bracket \
                 and never prune; set it to the steps a full-length trial reports"
            ),
            toml::Value::String(s) => {
                format!("unknown value {s:?}; expected a number of steps or \"auto\"")
            }
            other => format!(
                "must be a number of steps or \"auto\", not {}",
                other.type_str()
            ),
        };
        self.at(raw, KEY, message);
        MaxResource::Auto
    }
}

fn span<T>(v: &Option<Spanned<T>>) -> Option<Range<usize>> {
    v.as_ref().map(|v| v.span())
}
