//! What a study has spent of the budgets beside `n_trials`, read from its finished trials: each
//! one's value (the stall rule's input, in the order they finished) and, for GPU-hours, how
//! long it ran on which GPU of which host at which measured peak. Every process's trials count,
//! on every host, across restarts: it is all in the database.

use super::engine::sql;
use super::outage::retrying;
use super::{read_value, Result, SqlContext, Store, Study};
use crate::study::attrs::{GPU_ATTR, OWNER_ATTR, PEAK_MEMORY_ATTR, RETRIED_AS_ATTR};
use crate::study::{budget, TrialState};
use serde_json::Value;

/// A finished trial (COMPLETE, PRUNED or FAIL) as the budgets read it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalTrial {
    pub trial_id: i64,
    pub state: TrialState,
    /// Its first objective's value (COMPLETE trials; NaN as `None`).
    pub value: Option<f64>,
    /// Seconds from its start to its end (`None`: either time missing).
    pub ran_s: Option<f64>,
    /// The GPU it ran on, and the host of the daemon that ran it.
    pub gpu: Option<u32>,
    pub host: Option<String>,
    /// Its measured memory peak, bytes.
    pub peak: Option<u64>,
    /// A FAIL whose retry copy carries its attempt on.
    pub retried: bool,
    /// A constraint of it is above 0 (Optuna's infeasible): its value is nobody's best.
    pub infeasible: bool,
}

#[derive(sqlx::FromRow)]
struct Row {
    trial_id: i64,
    state: String,
    value: Option<f64>,
    value_type: Option<String>,
    datetime_start: Option<String>,
    datetime_complete: Option<String>,
    gpu: Option<String>,
    peak: Option<String>,
    owner: Option<String>,
    retried: Option<String>,
}

impl Store {
    /// The study's finished trials in the order they finished (their end time, then id).
    pub async fn final_trials(&self, study: &Study) -> Result<Vec<FinalTrial>> {
        retrying!(self, { self.final_trials_attempt(study).await })
    }

    async fn final_trials_attempt(&self, study: &Study) -> Result<Vec<FinalTrial>> {
        let rows: Vec<Row> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT CAST(t.trial_id AS BIGINT) AS trial_id, CAST(t.state AS TEXT) AS state, v.value, \
             CAST(v.value_type AS TEXT) AS value_type, \
             CAST(t.datetime_start AS TEXT) AS datetime_start, \
             CAST(t.datetime_complete AS TEXT) AS datetime_complete, \
             g.value_json AS gpu, p.value_json AS peak, o.value_json AS owner, \
             r.value_json AS retried \
             FROM trials t \
             LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0 \
             LEFT JOIN trial_system_attributes g ON g.trial_id = t.trial_id AND g.key = $2 \
             LEFT JOIN trial_system_attributes p ON p.trial_id = t.trial_id AND p.key = $3 \
             LEFT JOIN trial_system_attributes o ON o.trial_id = t.trial_id AND o.key = $4 \
             LEFT JOIN trial_system_attributes r ON r.trial_id = t.trial_id AND r.key = $5 \
             WHERE t.study_id = $1 AND t.state IN ('COMPLETE', 'PRUNED', 'FAIL') \
             ORDER BY t.datetime_complete, t.trial_id",
        )
        .bind(study.id)
        .bind(GPU_ATTR)
        .bind(PEAK_MEMORY_ATTR)
        .bind(OWNER_ATTR)
        .bind(RETRIED_AS_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let infeasible = self.infeasible_of(study).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let bad = infeasible.contains(&r.trial_id);
                final_trial(r, bad)
            })
            .collect())
    }
}

fn final_trial(r: Row, infeasible: bool) -> Option<FinalTrial> {
    let json = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
    };
    let ran_s = match (
        r.datetime_start.as_deref().and_then(super::time::parse),
        r.datetime_complete.as_deref().and_then(super::time::parse),
    ) {
        (Some(a), Some(b)) => Some(((b - a).num_milliseconds().max(0) as f64) / 1000.0),
        _ => None,
    };
    Some(FinalTrial {
        trial_id: r.trial_id,
        state: r.state.parse().ok()?,
        value: read_value(r.value, r.value_type.as_deref()),
        ran_s,
        gpu: json(&r.gpu)
            .and_then(|v| v.as_u64())
            .and_then(|d| u32::try_from(d).ok()),
        host: json(&r.owner).and_then(|v| v.get("host")?.as_str().map(str::to_owned)),
        peak: json(&r.peak)
            .and_then(|v| v.as_f64())
            .map(|mib| (mib * 1048576.0) as u64),
        retried: r.retried.is_some(),
        infeasible,
    })
}

/// What `trials` spent: GPU-seconds (each trial's by `study::budget::gpu_seconds`, the device's
/// memory from `total(host, device)`), and the values the stall rule reads, in the order the
/// trials finished, by trial id (a FAIL that is retried is left out there: its copy counts when
/// it ends; an infeasible trial's value is `None` there, as it can be no best).
pub fn spent(
    trials: &[FinalTrial],
    total: impl Fn(Option<&str>, u32) -> Option<u64>,
) -> (f64, Vec<(i64, Option<f64>)>) {
    let mut gpu_seconds = 0.0;
    let mut values = Vec::with_capacity(trials.len());
    for t in trials {
        if let (Some(device), Some(ran_s)) = (t.gpu, t.ran_s) {
            gpu_seconds += budget::gpu_seconds(ran_s, t.peak, total(t.host.as_deref(), device));
        }
        if !(t.state == TrialState::Fail && t.retried) {
            values.push((
                t.trial_id,
                t.value
                    .filter(|_| t.state == TrialState::Complete && !t.infeasible),
            ));
        }
    }
    (gpu_seconds, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(state: TrialState, value: Option<f64>, gpu: Option<u32>, peak_gib: u64) -> FinalTrial {
        FinalTrial {
            trial_id: 0,
            state,
            value,
            ran_s: Some(3600.0),
            gpu,
            host: Some("a".into()),
            peak: Some(peak_gib << 30),
            retried: false,
            infeasible: false,
        }
    }

    #[test]
    fn gpu_time_counts_each_trial_at_its_share_and_retried_failures_leave_the_stall_alone() {
        let mut retried = t(TrialState::Fail, None, Some(0), 20);
        retried.retried = true;
        let trials = [
            t(TrialState::Complete, Some(1.0), Some(0), 20),
            t(TrialState::Pruned, Some(9.0), Some(1), 10),
            retried,
            t(TrialState::Complete, Some(2.0), None, 0),
        ];
        let (secs, values) = spent(&trials, |host, d| match (host, d) {
            (Some("a"), 0) => Some(80 << 30),
            _ => None,
        });
        // A quarter of GPU 0 for an hour, twice; GPU 1's size unknown: a whole GPU.
        assert_eq!(secs, 900.0 + 3600.0 + 900.0);
        let values: Vec<Option<f64>> = values.into_iter().map(|v| v.1).collect();
        assert_eq!(values, [Some(1.0), None, Some(2.0)]);
    }

    #[test]
    fn an_infeasible_complete_trial_gives_the_stall_rule_no_value() {
        let mut infeasible = t(TrialState::Complete, Some(0.5), None, 0);
        infeasible.infeasible = true;
        let trials = [t(TrialState::Complete, Some(1.0), None, 0), infeasible];
        let values: Vec<Option<f64>> = spent(&trials, |_, _| None)
            .1
            .into_iter()
            .map(|v| v.1)
            .collect();
        assert_eq!(values, [Some(1.0), None]);
    }
}
