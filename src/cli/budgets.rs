//! `status`'s budgets: each limit the config sets beside `n_trials` (which the progress line
//! shows) with how much of it the study has spent, from the same figures the daemon decides on
//! (`store::spent`, `study::budget`). Needs the config: a study named by `--storage` alone has
//! no limits to show.

use crate::config::Config;
use crate::store::{Store, Study};
use crate::study::budget::{self, Limits, Stall};
use crate::units::{format_duration, format_elapsed};
use serde_json::{json, Value};
use std::time::Duration;

/// The limits and what was spent of them.
pub(super) struct Budgets {
    limits: Limits,
    gpu_seconds: f64,
    stall: Option<Stall>,
}

impl Budgets {
    /// `None` when the config sets none of `timeout`, `gpu_hours`, `patience`.
    pub(super) async fn read(
        store: &Store,
        study: &Study,
        config: Option<&Config>,
    ) -> Result<Option<Budgets>, crate::store::StoreError> {
        let Some(config) = config else {
            return Ok(None);
        };
        let limits = config.study.limits();
        if limits.timeout.is_none() && limits.gpu_hours.is_none() && limits.patience.is_none() {
            return Ok(None);
        }
        let trials = store.final_trials(study).await?;
        let gpus = store.gpus(study).await?;
        let (gpu_seconds, values) = crate::store::spent(&trials, |host, device| {
            gpus.iter()
                .find(|g| g.device == device && host.is_none_or(|h| g.host == h))
                .and_then(|g| g.total)
        });
        let values: Vec<Option<f64>> = values.into_iter().map(|v| v.1).collect();
        let stall = limits
            .patience
            .map(|p| budget::stall(&values, study.directions[0], p));
        Ok(Some(Budgets {
            limits,
            gpu_seconds,
            stall,
        }))
    }

    /// One line for a person; `ran`: how long the running daemon has run (its timeout counts
    /// from its start), where one runs.
    pub(super) fn text(&self, ran: Option<Duration>) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.limits.timeout {
            parts.push(match ran {
                Some(r) => format!(
                    "timeout {} of {} (this run)",
                    format_elapsed(r),
                    format_duration(t)
                ),
                None => format!("timeout {} (from a daemon's start)", format_duration(t)),
            });
        }
        if let Some(h) = self.limits.gpu_hours {
            parts.push(format!(
                "gpu_hours {:.2} of {h} spent",
                self.gpu_seconds / 3600.0
            ));
        }
        if let (Some(rule), Some(s)) = (self.limits.patience, self.stall) {
            parts.push(match s.best {
                None => format!("patience {}: no COMPLETE trial yet", rule.patience),
                Some(b) => format!(
                    "patience {} of {} finished trials without beating {b}{}",
                    s.since,
                    rule.patience,
                    if s.stalled { " (stalled)" } else { "" }
                ),
            });
        }
        parts.join(", ")
    }

    /// `status --json`'s `budgets`.
    pub(super) fn json(&self, ran: Option<Duration>) -> Value {
        json!({
            "timeout_s": self.limits.timeout.map(|t| t.as_secs_f64()),
            "ran_s": ran.filter(|_| self.limits.timeout.is_some()).map(|r| r.as_secs_f64()),
            "gpu_hours": self.limits.gpu_hours,
            "gpu_hours_spent": self.limits.gpu_hours.map(|_| self.gpu_seconds / 3600.0),
            "patience": self.limits.patience.map(|p| p.patience),
            "min_delta": self.limits.patience.map(|p| p.min_delta),
            "stall": self.stall.map(|s| json!({
                "best": s.best, "since": s.since, "stalled": s.stalled,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::budget::Patience;
    use rstest::rstest;

    fn budgets(timeout: bool, gpu: bool, stall: Option<Stall>) -> Budgets {
        Budgets {
            limits: Limits {
                n_trials: Some(50),
                timeout: timeout.then(|| Duration::from_secs(7200)),
                gpu_hours: gpu.then_some(10.0),
                patience: stall.map(|_| Patience {
                    patience: 8,
                    min_delta: 0.01,
                }),
            },
            gpu_seconds: 4500.0,
            stall,
        }
    }

    const STALLING: Stall = Stall {
        best: Some(0.25),
        since: 3,
        stalled: false,
    };

    #[rstest]
    #[case::all(
        budgets(true, true, Some(STALLING)),
        Some(192),
        "timeout 3m12s of 2h (this run), gpu_hours 1.25 of 10 spent, patience 3 of 8 finished trials without beating 0.25"
    )]
    #[case::no_daemon(budgets(true, false, None), None, "timeout 2h (from a daemon's start)")]
    #[case::stalled(
        budgets(false, false, Some(Stall { best: Some(1.5), since: 8, stalled: true })),
        None,
        "patience 8 of 8 finished trials without beating 1.5 (stalled)"
    )]
    #[case::no_best_yet(
        budgets(false, false, Some(Stall { best: None, since: 0, stalled: false })),
        None,
        "patience 8: no COMPLETE trial yet"
    )]
    fn each_budget_shows_what_is_spent_of_it(
        #[case] b: Budgets,
        #[case] ran_s: Option<u64>,
        #[case] text: &str,
    ) {
        assert_eq!(b.text(ran_s.map(Duration::from_secs)), text);
    }

    #[test]
    fn the_json_carries_each_figure() {
        let v = budgets(true, true, Some(STALLING)).json(Some(Duration::from_secs(60)));
        assert_eq!(v["gpu_hours_spent"], 1.25);
        assert_eq!(v["ran_s"], 60.0);
        assert_eq!(v["stall"]["since"], 3);
        assert_eq!(v["patience"], 8);
    }
}
