//! Trial system attributes as sweepd writes them (their names are `study::attrs`): the record
//! of negative zeros that SQLite's REAL columns lose (PostgreSQL keeps them; the record is
//! written on both, so the two read back alike), and the upsert of one attribute.

use super::engine::{sql, Tx};
use super::{Result, SqlContext, Store};
use crate::study::attrs::NEGATIVE_ZERO_ATTR;
use crate::study::{ParamValue, Params};
use serde_json::Value;

/// The content of [`NEGATIVE_ZERO_ATTR`]: which of a trial's stored zeros are really -0.0.
///
/// SQLite stores a REAL that equals an integer as that integer, so a -0.0 written to Optuna's
/// float columns (`trial_values`, `trial_intermediate_values`, `trial_params`) reads back as
/// 0.0, for Optuna as for us. sweepd keeps the sign of such zeros in this attribute and applies
/// it wherever it reads its own values back, so what a worker sent is what sweepd shows.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct NegativeZeros {
    /// Objective indices of `trial_values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) values: Vec<i64>,
    /// Steps of `trial_intermediate_values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) intermediate: Vec<i64>,
    /// Names of float params.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) params: Vec<String>,
}

impl NegativeZeros {
    pub(super) fn parse(json: Option<&str>) -> NegativeZeros {
        json.and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default()
    }

    /// The value of objective `objective` as the worker sent it.
    pub(super) fn value(&self, objective: i64, v: f64) -> f64 {
        restore_sign(v, self.values.contains(&objective))
    }

    /// Float params as the worker received them.
    pub(super) fn params(&self, params: &mut Params) {
        for name in &self.params {
            if let Some(ParamValue::Float(x)) = params.get_mut(name) {
                *x = restore_sign(*x, true);
            }
        }
    }
}

pub(super) fn is_negative_zero(v: f64) -> bool {
    v == 0.0 && v.is_sign_negative()
}

pub(super) fn restore_sign(v: f64, negative: bool) -> f64 {
    if negative && v == 0.0 {
        -0.0
    } else {
        v
    }
}

impl Store {
    /// Adds to a trial's record of negative zeros (see [`NEGATIVE_ZERO_ATTR`]).
    pub(super) async fn note_negative_zeros(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        add: impl FnOnce(&mut NegativeZeros),
    ) -> Result<()> {
        let old: Option<String> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT value_json FROM trial_system_attributes WHERE trial_id = $1 AND key = $2",
        )
        .bind(trial_id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        let mut zeros = NegativeZeros::parse(old.as_deref());
        add(&mut zeros);
        let value = serde_json::to_value(&zeros).expect("serializable");
        self.set_attr(tx, trial_id, NEGATIVE_ZERO_ATTR, &value)
            .await
    }

    pub(super) async fn set_attr(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        key: &str,
        value: &Value,
    ) -> Result<()> {
        self.set_attr_text(tx, trial_id, key, &value.to_string())
            .await
    }

    /// [`Store::set_attr`] of a value already in its JSON text.
    pub(super) async fn set_attr_text(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        key: &str,
        value: &str,
    ) -> Result<()> {
        sql!(tx.conn(), |c| sqlx::query(
            "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES ($1, $2, $3) \
             ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
        )
        .bind(trial_id)
        .bind(key)
        .bind(value)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }
}
