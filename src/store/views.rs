//! Reading trials back: as the CLI shows them (`trials`, `best`, `status`), and the measured
//! peaks a restarted daemon's memory model starts from (its sampler and pruner learn the study
//! through `feed`).

use super::attrs::NegativeZeros;
use super::engine::{fetch_bound, sql, Label};
use super::outage::retrying;
use super::{
    decode_value, placeholders, read_value, Result, SqlContext, Store, Study, IDS_PER_STATEMENT,
};
use crate::study::attrs::{
    CONSTRAINTS_ATTR, CONSTRAINT_KEY_PREFIX, FAIL_KIND_ATTR, FAIL_REASON_ATTR, GPU_ATTR,
    NEGATIVE_ZERO_ATTR, PEAK_MEMORY_ATTR, RETRIED_AS_ATTR, WORKER_ID_ATTR, WORKER_PID_ATTR,
};
use crate::study::{pareto, ConstraintAttrs, Counts, Direction, Distribution, Params, TrialState};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};

/// The columns of a [`TrialRow`].
const TRIAL_COLUMNS: &str = "SELECT CAST(t.trial_id AS BIGINT) AS trial_id, \
     CAST(t.number AS BIGINT) AS number, CAST(t.state AS TEXT) AS state, v.value, \
     CAST(v.value_type AS TEXT) AS value_type, CAST(t.datetime_start AS TEXT) AS datetime_start, \
     CAST(t.datetime_complete AS TEXT) AS datetime_complete \
     FROM trials t LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0";

/// What a [`TrialView`] is made from besides its params and attributes (see `Store::view`).
#[derive(sqlx::FromRow)]
struct TrialRow {
    trial_id: i64,
    number: i64,
    state: String,
    value: Option<f64>,
    value_type: Option<String>,
    datetime_start: Option<String>,
    datetime_complete: Option<String>,
}

/// The system attributes a [`TrialView`] shows.
const SHOWN_SYSTEM_ATTRS: [&str; 6] = [
    WORKER_ID_ATTR,
    WORKER_PID_ATTR,
    FAIL_KIND_ATTR,
    FAIL_REASON_ATTR,
    NEGATIVE_ZERO_ATTR,
    GPU_ATTR,
];

/// What a trial's view is made of beside its row, read for many trials at once.
#[derive(Debug, Default)]
struct Details {
    /// (name, internal value, distribution JSON), in the order they were recorded.
    params: Vec<(String, f64, String)>,
    /// (key, JSON) of [`SHOWN_SYSTEM_ATTRS`].
    system: Vec<(String, String)>,
    /// (key, JSON), in the order they were set.
    user: Vec<(String, String)>,
    /// (value, value_type) by objective; read only for a study with several objectives.
    values: Vec<(Option<f64>, String)>,
    /// The last reported step; read only for RUNNING and PRUNED trials.
    step: Option<i64>,
}

/// A trial's view from its row and details.
fn view_of(study: &Study, row: TrialRow, d: Details) -> TrialView {
    let mut view = TrialView {
        trial_id: row.trial_id,
        number: row.number,
        state: row.state,
        value: decode_value(row.value, row.value_type.as_deref().unwrap_or("")),
        datetime_start: row.datetime_start,
        datetime_complete: row.datetime_complete,
        step: d.step,
        ..TrialView::default()
    };
    if study.is_multi_objective() {
        view.value = Value::Null;
        view.values = Some(if d.values.is_empty() {
            Value::Null
        } else {
            Value::Array(d.values.iter().map(|(v, t)| decode_value(*v, t)).collect())
        });
    }
    for (name, internal, dist) in d.params {
        let ext = Distribution::from_optuna_json(&dist)
            .ok()
            .and_then(|d| d.from_internal(internal).map(|v| d.external(&v)))
            .unwrap_or(json!(internal));
        view.params.insert(name, ext);
    }
    for (key, json) in d.system {
        let value: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
        match key.as_str() {
            WORKER_ID_ATTR => view.worker_id = value.as_i64(),
            WORKER_PID_ATTR => view.worker_pid = value.as_i64(),
            FAIL_KIND_ATTR => view.fail_kind = value.as_str().map(str::to_owned),
            FAIL_REASON_ATTR => view.fail_reason = value.as_str().map(str::to_owned),
            GPU_ATTR => view.gpu = value.as_u64().and_then(|d| u32::try_from(d).ok()),
            _ => negative_zeros(&mut view, &json),
        }
    }
    view.user_attrs = d
        .user
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_str(&v).unwrap_or(Value::String(v))))
        .collect();
    view
}

/// The -0.0 values and params that `NEGATIVE_ZERO_ATTR`'s JSON names, put back into `view`.
fn negative_zeros(view: &mut TrialView, json: &str) {
    let zeros = NegativeZeros::parse(Some(json));
    if let Some(v) = view.value.as_f64() {
        view.value = json!(zeros.value(0, v));
    }
    if let Some(Value::Array(vs)) = &mut view.values {
        for (objective, v) in vs.iter_mut().enumerate() {
            if let Some(x) = v.as_f64() {
                *v = json!(zeros.value(objective as i64, x));
            }
        }
    }
    for name in &zeros.params {
        if view.params.get(name).and_then(Value::as_f64) == Some(0.0) {
            view.params.insert(name.clone(), json!(-0.0));
        }
    }
}

/// One trial as the CLI shows it; its `Default` is an empty row that its builders fill in.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrialView {
    pub trial_id: i64,
    pub number: i64,
    pub state: String,
    /// Finite values as numbers; infinities as the strings "inf"/"-inf". A study with several
    /// objectives has none (null): see `values`.
    pub value: Value,
    /// A study with several objectives: one value per objective (as `value`), null when the
    /// trial has none. Absent for a single-objective study.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Value>,
    /// External form: the float, the int, the categorical choice.
    pub params: serde_json::Map<String, Value>,
    pub datetime_start: Option<String>,
    pub datetime_complete: Option<String>,
    pub worker_id: Option<i64>,
    pub worker_pid: Option<i64>,
    pub fail_kind: Option<String>,
    pub fail_reason: Option<String>,
    /// The GPU it runs or ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// A RUNNING trial's last reported step; a PRUNED one's, the step it was pruned at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    /// Its user attributes (`trial.set_user_attr`), JSON as Optuna stored them.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub user_attrs: serde_json::Map<String, Value>,
    /// A WAITING or RUNNING trial: why it waits or what it does (`study::reason`), filled in by
    /// the commands that show it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A COMPLETE trial as the Pareto front is chosen from (see `Store::front_candidates`).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub trial_id: i64,
    pub number: i64,
    /// One per objective, in objective order.
    pub values: Vec<f64>,
    /// Optuna's `constraints`; empty when not set.
    pub constraints: Vec<f64>,
}

impl Store {
    /// Trial counts by state; FAIL trials with a retry copy are counted apart.
    pub async fn counts(&self, study: &Study) -> Result<Counts> {
        retrying!(self, { self.counts_attempt(study).await })
    }

    async fn counts_attempt(&self, study: &Study) -> Result<Counts> {
        let rows: Vec<(String, i64, Option<i64>)> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT CAST(t.state AS TEXT), COUNT(*), SUM(CASE WHEN a.trial_id IS NULL THEN 0 ELSE 1 END) \
             FROM trials t LEFT JOIN trial_system_attributes a \
               ON a.trial_id = t.trial_id AND a.key = $2 \
             WHERE t.study_id = $1 GROUP BY t.state",
        )
        .bind(study.id)
        .bind(RETRIED_AS_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut c = Counts::default();
        for (state, n, retried) in rows {
            let n = n as u64;
            match &state.parse::<TrialState>().ok() {
                Some(TrialState::Running) => c.running = n,
                Some(TrialState::Waiting) => c.waiting = n,
                Some(TrialState::Complete) => c.complete = n,
                Some(TrialState::Pruned) => c.pruned = n,
                Some(TrialState::Fail) => {
                    c.fail = n;
                    c.fail_retried = retried.unwrap_or(0) as u64;
                }
                None => {}
            }
        }
        Ok(c)
    }

    /// Trials for display, oldest first; optionally only one state and only the last `limit`.
    pub async fn trials(
        &self,
        study: &Study,
        state: Option<TrialState>,
        limit: Option<u64>,
    ) -> Result<Vec<TrialView>> {
        retrying!(self, { self.trials_attempt(study, state, limit).await })
    }

    async fn trials_attempt(
        &self,
        study: &Study,
        state: Option<TrialState>,
        limit: Option<u64>,
    ) -> Result<Vec<TrialView>> {
        let mut sql = format!("{TRIAL_COLUMNS} WHERE t.study_id = $1");
        let mut n = 1;
        if state.is_some() {
            n += 1;
            sql.push_str(&format!(" AND t.state = ${n}"));
        }
        sql.push_str(" ORDER BY t.number DESC");
        if limit.is_some() {
            n += 1;
            sql.push_str(&format!(" LIMIT ${n}"));
        }
        let rows: Vec<TrialRow> = sql!(self.acquire().await?.conn(), |c| {
            let mut q = sqlx::query_as(&sql).bind(study.id);
            if let Some(s) = state {
                q = q.bind(Label::state(s.as_str()));
            }
            if let Some(l) = limit {
                q = q.bind(l as i64);
            }
            q.fetch_all(c).await
        })
        .at(&self.path)?;
        // Newest first for the limit; shown oldest first.
        self.views(study, rows.into_iter().rev().collect()).await
    }

    /// The names of every param the study's trials have, in the order each was first recorded
    /// (`trials --csv`'s columns, whichever rows it shows).
    pub async fn param_names(&self, study: &Study) -> Result<Vec<String>> {
        retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(
                "SELECT p.param_name FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id \
                 WHERE t.study_id = $1 AND p.param_name IS NOT NULL \
                 GROUP BY p.param_name ORDER BY MIN(p.param_id)",
            )
            .bind(study.id)
            .fetch_all(c)
            .await)
            .at(&self.path)
        })
    }

    /// Every trial's values, by trial id, in objective order (a NaN stored by another writer
    /// reads as NaN).
    async fn values_of(&self, study: &Study) -> Result<HashMap<i64, Vec<f64>>> {
        let rows: Vec<(i64, Option<f64>, Option<String>)> =
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT CAST(v.trial_id AS BIGINT), v.value, CAST(v.value_type AS TEXT) \
                 FROM trial_values v JOIN trials t ON t.trial_id = v.trial_id \
                 WHERE t.study_id = $1 ORDER BY v.trial_id, v.objective",
            )
            .bind(study.id)
            .fetch_all(c)
            .await)
            .at(&self.path)?;
        let mut out: HashMap<i64, Vec<f64>> = HashMap::new();
        for (trial_id, value, value_type) in rows {
            out.entry(trial_id)
                .or_default()
                .push(read_value(value, value_type.as_deref()).unwrap_or(f64::NAN));
        }
        Ok(out)
    }

    /// The best feasible COMPLETE trial for a single-objective study's direction (the first
    /// objective's, for a study with several: see `front_candidates` for those), as Optuna 5's
    /// `study.best_trial`: a trial with a constraint above 0 is passed over.
    pub async fn best(&self, study: &Study) -> Result<Option<TrialView>> {
        retrying!(self, { self.best_attempt(study).await })
    }

    async fn best_attempt(&self, study: &Study) -> Result<Option<TrialView>> {
        // INF_NEG/INF_POS rows have a NULL value: order them by type first.
        let order = match study.directions[0] {
            Direction::Minimize => {
                "CASE v.value_type WHEN 'INF_NEG' THEN 0 WHEN 'FINITE' THEN 1 ELSE 2 END, v.value ASC"
            }
            Direction::Maximize => {
                "CASE v.value_type WHEN 'INF_POS' THEN 0 WHEN 'FINITE' THEN 1 ELSE 2 END, v.value DESC"
            }
        };
        let sql = format!(
            "SELECT CAST(t.trial_id AS BIGINT) FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id \
             AND v.objective = 0 WHERE t.study_id = $1 AND t.state = 'COMPLETE' \
             ORDER BY {order}, t.number"
        );
        let ids: Vec<i64> = sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(&sql)
            .bind(study.id)
            .fetch_all(c)
            .await)
        .at(&self.path)?;
        let infeasible = self.infeasible_of(study).await?;
        match ids.into_iter().find(|id| !infeasible.contains(id)) {
            Some(id) => self.trial_attempt(study, id).await.map(Some),
            None => Ok(None),
        }
    }

    /// The trials of `study` with a constraint above 0, in either of Optuna 5's forms.
    pub(super) async fn infeasible_of(&self, study: &Study) -> Result<HashSet<i64>> {
        let attrs: Vec<(i64, String, String)> = sql!(self.acquire().await?.conn(), |c| {
            sqlx::query_as(
                "SELECT CAST(a.trial_id AS BIGINT), a.key, a.value_json \
                 FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
                 WHERE t.study_id = $1 AND (a.key = $2 OR a.key LIKE $3)",
            )
            .bind(study.id)
            .bind(CONSTRAINTS_ATTR)
            .bind(format!("{CONSTRAINT_KEY_PREFIX}%"))
            .fetch_all(c)
            .await
        })
        .at(&self.path)?;
        let mut constraints: HashMap<i64, ConstraintAttrs> = HashMap::new();
        for (trial_id, key, json) in attrs {
            constraints.entry(trial_id).or_default().take(&key, &json);
        }
        Ok(constraints
            .into_iter()
            .filter(|(_, c)| c.values().iter().any(|v| *v > 0.0))
            .map(|(id, _)| id)
            .collect())
    }

    /// What the Pareto front is chosen from, as Optuna's `study.best_trials` chooses: every
    /// COMPLETE trial in trial order with its values and constraints, and whether the study is
    /// a constrained one (some trial, in any state, has constraints).
    pub async fn front_candidates(&self, study: &Study) -> Result<(Vec<Candidate>, bool)> {
        retrying!(self, { self.front_candidates_attempt(study).await })
    }

    async fn front_candidates_attempt(&self, study: &Study) -> Result<(Vec<Candidate>, bool)> {
        let rows: Vec<(i64, i64)> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT CAST(trial_id AS BIGINT), CAST(number AS BIGINT) FROM trials \
             WHERE study_id = $1 AND state = 'COMPLETE' ORDER BY trial_id",
        )
        .bind(study.id)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut values = self.values_of(study).await?;
        let attrs: Vec<(i64, String, String)> = sql!(self.acquire().await?.conn(), |c| {
            sqlx::query_as(
                "SELECT CAST(a.trial_id AS BIGINT), a.key, a.value_json \
                 FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
                 WHERE t.study_id = $1 AND (a.key IN ($2, $3) OR a.key LIKE $4)",
            )
            .bind(study.id)
            .bind(CONSTRAINTS_ATTR)
            .bind(NEGATIVE_ZERO_ATTR)
            .bind(format!("{CONSTRAINT_KEY_PREFIX}%"))
            .fetch_all(c)
            .await
        })
        .at(&self.path)?;
        let mut constraints: HashMap<i64, ConstraintAttrs> = HashMap::new();
        for (trial_id, key, json) in attrs {
            if constraints.entry(trial_id).or_default().take(&key, &json) {
                continue;
            }
            if key == NEGATIVE_ZERO_ATTR {
                let zeros = NegativeZeros::parse(Some(&json));
                if let Some(vs) = values.get_mut(&trial_id) {
                    for (objective, v) in vs.iter_mut().enumerate() {
                        *v = zeros.value(objective as i64, *v);
                    }
                }
            }
        }
        let mut constraints: HashMap<i64, Vec<f64>> = constraints
            .into_iter()
            .map(|(id, c)| (id, c.values()))
            .collect();
        let constrained = constraints.values().any(|c| !c.is_empty());
        let candidates = rows
            .into_iter()
            .map(|(trial_id, number)| Candidate {
                trial_id,
                number,
                values: values.remove(&trial_id).unwrap_or_default(),
                constraints: constraints.remove(&trial_id).unwrap_or_default(),
            })
            .collect();
        Ok((candidates, constrained))
    }

    /// A study's Pareto front as Optuna's `study.best_trials` chooses it (the rule is
    /// `study::pareto::best_trials`), in trial order: each trial's values as read, and as shown.
    pub async fn best_trials(&self, study: &Study) -> Result<Vec<(Candidate, TrialView)>> {
        let (candidates, constrained) = self.front_candidates(study).await?;
        let on = pareto::best_trials(
            candidates
                .iter()
                .map(|c| (&c.values[..], &c.constraints[..])),
            &study.directions,
            constrained,
        );
        let mut front = Vec::with_capacity(on.len());
        for i in on {
            let view = self.trial(study, candidates[i].trial_id).await?;
            front.push((candidates[i].clone(), view));
        }
        Ok(front)
    }

    /// One trial of `study` by id.
    pub async fn trial(&self, study: &Study, trial_id: i64) -> Result<TrialView> {
        retrying!(self, { self.trial_attempt(study, trial_id).await })
    }

    async fn trial_attempt(&self, study: &Study, trial_id: i64) -> Result<TrialView> {
        let row = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(&format!(
            "{TRIAL_COLUMNS} WHERE t.trial_id = $1"
        ))
        .bind(trial_id)
        .fetch_one(c)
        .await)
        .at(&self.path)?;
        // One view per row.
        Ok(self.views(study, vec![row]).await?.remove(0))
    }

    /// The views of `rows`, in their order. Each kind of detail is read in one statement per
    /// [`IDS_PER_STATEMENT`] trials, not one per trial: `trials` on a study of thousands of trials
    /// over PostgreSQL would otherwise wait for thousands of round trips.
    async fn views(&self, study: &Study, rows: Vec<TrialRow>) -> Result<Vec<TrialView>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.trial_id).collect();
        // Only a RUNNING or PRUNED trial shows a step.
        let stepped: Vec<i64> = rows
            .iter()
            .filter(|r| r.state == "RUNNING" || r.state == "PRUNED")
            .map(|r| r.trial_id)
            .collect();
        let mut details: HashMap<i64, Details> = HashMap::new();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            self.read_details(chunk, study.is_multi_objective(), &mut details)
                .await?;
        }
        for chunk in stepped.chunks(IDS_PER_STATEMENT) {
            let sql = format!(
                "SELECT CAST(trial_id AS BIGINT), CAST(MAX(step) AS BIGINT) \
                 FROM trial_intermediate_values WHERE trial_id IN ({}) GROUP BY trial_id",
                placeholders(1, chunk.len())
            );
            let steps: Vec<(i64, Option<i64>)> =
                fetch_bound!(self.acquire().await?.conn(), &sql, chunk).at(&self.path)?;
            for (id, step) in steps {
                details.entry(id).or_default().step = step;
            }
        }
        Ok(rows
            .into_iter()
            .map(|row| {
                let d = details.remove(&row.trial_id).unwrap_or_default();
                view_of(study, row, d)
            })
            .collect())
    }

    /// The params, shown attributes and (with several objectives) values of the trials `ids`,
    /// into `into`.
    async fn read_details(
        &self,
        ids: &[i64],
        multi: bool,
        into: &mut HashMap<i64, Details>,
    ) -> Result<()> {
        let keys = SHOWN_SYSTEM_ATTRS;
        let params_sql = format!(
            "SELECT CAST(trial_id AS BIGINT), param_name, param_value, distribution_json \
             FROM trial_params WHERE trial_id IN ({}) ORDER BY trial_id, param_id",
            placeholders(1, ids.len())
        );
        let system_sql = format!(
            "SELECT CAST(trial_id AS BIGINT), key, value_json FROM trial_system_attributes \
             WHERE key IN ({}) AND trial_id IN ({})",
            placeholders(1, keys.len()),
            placeholders(keys.len() + 1, ids.len())
        );
        let user_sql = format!(
            "SELECT CAST(trial_id AS BIGINT), key, value_json FROM trial_user_attributes \
             WHERE trial_id IN ({}) ORDER BY trial_id, trial_user_attribute_id",
            placeholders(1, ids.len())
        );
        let params: Vec<(i64, String, f64, String)> =
            fetch_bound!(self.acquire().await?.conn(), &params_sql, ids).at(&self.path)?;
        let system: Vec<(i64, String, String)> =
            fetch_bound!(self.acquire().await?.conn(), &system_sql, keys, ids).at(&self.path)?;
        let user: Vec<(i64, String, String)> =
            fetch_bound!(self.acquire().await?.conn(), &user_sql, ids).at(&self.path)?;
        for (id, name, internal, dist) in params {
            into.entry(id)
                .or_default()
                .params
                .push((name, internal, dist));
        }
        for (id, key, json) in system {
            into.entry(id).or_default().system.push((key, json));
        }
        for (id, key, json) in user {
            into.entry(id).or_default().user.push((key, json));
        }
        if multi {
            let values_sql = format!(
                "SELECT CAST(trial_id AS BIGINT), value, CAST(value_type AS TEXT) FROM trial_values \
                 WHERE trial_id IN ({}) ORDER BY trial_id, objective",
                placeholders(1, ids.len())
            );
            let values: Vec<(i64, Option<f64>, String)> =
                fetch_bound!(self.acquire().await?.conn(), &values_sql, ids).at(&self.path)?;
            for (id, value, kind) in values {
                into.entry(id).or_default().values.push((value, kind));
            }
        }
        Ok(())
    }

    /// Measured peaks of finished trials (`sweepd:peak_memory_mib`) with their params, so the
    /// memory model survives a restart.
    pub async fn peaks(&self, study: &Study) -> Result<Vec<(Params, u64)>> {
        retrying!(self, { self.peaks_attempt(study).await })
    }

    async fn peaks_attempt(&self, study: &Study) -> Result<Vec<(Params, u64)>> {
        let rows: Vec<(i64, String, String, f64, String)> =
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT CAST(a.trial_id AS BIGINT), a.value_json, p.param_name, p.param_value, \
             p.distribution_json \
             FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
             JOIN trial_params p ON p.trial_id = a.trial_id \
             WHERE t.study_id = $1 AND a.key = $2 AND t.state <> 'FAIL' \
             ORDER BY a.trial_id",
            )
            .bind(study.id)
            .bind(PEAK_MEMORY_ATTR)
            .fetch_all(c)
            .await)
            .at(&self.path)?;
        let mut out: Vec<(i64, Params, u64)> = Vec::new();
        for (id, json, name, internal, dist) in rows {
            if out.last().is_none_or(|l| l.0 != id) {
                let mib: f64 = serde_json::from_str::<Value>(&json)
                    .ok()
                    .and_then(|v| v.as_f64())
                    .unwrap_or(0.0);
                out.push((id, Params::new(), (mib * 1048576.0) as u64));
            }
            if let Some(v) = Distribution::from_optuna_json(&dist)
                .ok()
                .and_then(|d| d.from_internal(internal))
            {
                out.last_mut().expect("pushed").1.insert(name, v);
            }
        }
        Ok(out.into_iter().map(|(_, p, b)| (p, b)).collect())
    }
}
