//! What a running trial's objective adds to it as it runs (define-by-run, protocol 2): a param
//! the moment it is suggested, checked against the study's earlier use of the name as Optuna's
//! storage checks it, user attributes and constraints (Optuna 5's `set_constraint`), all
//! written as Optuna writes them.

use super::engine::sql;
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::attrs::CONSTRAINT_KEY_PREFIX;
use crate::study::{pyjson, Distribution, ParamValue};
use serde_json::Value;

/// Why a suggested param was not recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamRefused {
    /// The study recorded the name with a distribution this one conflicts with (Optuna's
    /// message).
    Conflict(String),
    /// The trial is no longer RUNNING (it ended, or another process ended it).
    NotRunning,
}

impl Store {
    /// Optuna's check before a param is recorded (its RDB storage's `set_trial_param`): the
    /// study's earlier distribution for `name`, if it recorded one, must be compatible with
    /// `dist` (`Distribution::compatible`). Any earlier one will do: every writer checks, so
    /// they agree on kind, log and choices. `Some(reason)` when not.
    pub async fn param_conflict(
        &self,
        study: &Study,
        name: &str,
        dist: &Distribution,
    ) -> Result<Option<String>> {
        retrying!(self, {
            self.param_conflict_attempt(study, name, dist).await
        })
    }

    async fn param_conflict_attempt(
        &self,
        study: &Study,
        name: &str,
        dist: &Distribution,
    ) -> Result<Option<String>> {
        let earlier: Option<String> = sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(
            "SELECT p.distribution_json FROM trial_params p JOIN trials t \
             ON t.trial_id = p.trial_id WHERE t.study_id = $1 AND p.param_name = $2 LIMIT 1",
        )
        .bind(study.id)
        .bind(name)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        Ok(conflict(earlier.as_deref(), dist))
    }

    /// Records param `name` of a RUNNING trial, suggested by its objective, with the check of
    /// [`Store::param_conflict`] made again in the write's own transaction (another writer may
    /// have recorded the name since). Run again whole through an outage: an attempt whose
    /// commit went through but whose acknowledgement was lost finds the param recorded with
    /// this value, which is a success.
    pub async fn set_param(
        &self,
        study: &Study,
        trial_id: i64,
        name: &str,
        dist: &Distribution,
        v: &ParamValue,
    ) -> Result<std::result::Result<(), ParamRefused>> {
        retrying!(self, {
            self.set_param_attempt(study, trial_id, name, dist, v).await
        })
    }

    async fn set_param_attempt(
        &self,
        study: &Study,
        trial_id: i64,
        name: &str,
        dist: &Distribution,
        v: &ParamValue,
    ) -> Result<std::result::Result<(), ParamRefused>> {
        let mut tx = self.begin_write().await?;
        let recorded: Option<(f64, String)> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT param_value, distribution_json FROM trial_params \
             WHERE trial_id = $1 AND param_name = $2"
        )
        .bind(trial_id)
        .bind(name)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        if let Some((internal, json)) = recorded {
            tx.rollback().await.at(&self.path)?;
            let same =
                internal.to_bits() == dist.to_internal(v).to_bits() && json == dist.optuna_json();
            return Ok(if same {
                Ok(())
            } else {
                Err(ParamRefused::Conflict(format!(
                    "param `{name}` of this trial was already recorded with another value"
                )))
            });
        }
        let running: Option<i64> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT CAST(1 AS BIGINT) FROM trials WHERE trial_id = $1 AND state = 'RUNNING'"
        )
        .bind(trial_id)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        if running.is_none() {
            tx.rollback().await.at(&self.path)?;
            return Ok(Err(ParamRefused::NotRunning));
        }
        let earlier: Option<String> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT p.distribution_json FROM trial_params p JOIN trials t \
             ON t.trial_id = p.trial_id WHERE t.study_id = $1 AND p.param_name = $2 LIMIT 1",
        )
        .bind(study.id)
        .bind(name)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        if let Some(why) = conflict(earlier.as_deref(), dist) {
            tx.rollback().await.at(&self.path)?;
            return Ok(Err(ParamRefused::Conflict(why)));
        }
        self.insert_param(&mut tx, trial_id, name, dist, v).await?;
        tx.commit().await.at(&self.path)?;
        Ok(Ok(()))
    }

    /// Optuna's `trial.set_user_attr(key, value)`: the value as `json.dumps` writes it, a key
    /// set again replaced. Only while the trial is RUNNING (Optuna refuses to change a finished
    /// trial); a late one is dropped.
    pub async fn set_user_attr(&self, trial_id: i64, key: &str, value: &Value) -> Result<()> {
        retrying!(self, {
            self.set_user_attr_attempt(trial_id, key, value).await
        })
    }

    async fn set_user_attr_attempt(&self, trial_id: i64, key: &str, value: &Value) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "INSERT INTO trial_user_attributes (trial_id, key, value_json) \
             SELECT $1, $2, $3 WHERE EXISTS \
               (SELECT 1 FROM trials WHERE trial_id = $1 AND state = 'RUNNING') \
             ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
        )
        .bind(trial_id)
        .bind(key)
        .bind(pyjson::dumps(value))
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }
}

impl Store {
    /// Optuna 5's `trial.set_constraint(key, value)`: the system attribute
    /// `constraints:<key>`, the value as `json.dumps` writes a float. Only while the trial is
    /// RUNNING; a key set before keeps its first value (Optuna warns and ignores the second).
    /// Returns whether it was written.
    pub async fn set_constraint(&self, trial_id: i64, key: &str, value: f64) -> Result<bool> {
        retrying!(self, {
            self.set_constraint_attempt(trial_id, key, value).await
        })
    }

    async fn set_constraint_attempt(&self, trial_id: i64, key: &str, value: f64) -> Result<bool> {
        let written = sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "INSERT INTO trial_system_attributes (trial_id, key, value_json) \
             SELECT $1, $2, $3 WHERE EXISTS \
               (SELECT 1 FROM trials WHERE trial_id = $1 AND state = 'RUNNING') \
             ON CONFLICT (trial_id, key) DO NOTHING",
        )
        .bind(trial_id)
        .bind(format!("{CONSTRAINT_KEY_PREFIX}{key}"))
        .bind(float_json(value))
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(written > 0)
    }
}

/// A float as Python's `json.dumps` writes it, infinities included (`Infinity`, which
/// `json.loads` reads back; JSON itself has none).
fn float_json(value: f64) -> String {
    match value {
        f64::INFINITY => "Infinity".into(),
        f64::NEG_INFINITY => "-Infinity".into(),
        v => pyjson::dumps(&serde_json::json!(v)),
    }
}

/// Optuna's compatibility check of `dist` against an earlier `distribution_json`. One Optuna
/// (or sweepd) could not read is no reason to refuse.
fn conflict(earlier: Option<&str>, dist: &Distribution) -> Option<String> {
    let earlier = Distribution::from_optuna_json(earlier?).ok()?;
    earlier.compatible(dist).err().map(str::to_owned)
}
