//! A trial's start and its finish, each in one statement on PostgreSQL.
//!
//! On PostgreSQL every statement is a round trip to the server, and a host's starts and
//! finishes all run inside the study's row lock (`Tx::lock_study`): the longer one takes, the
//! longer every other host waits. The engine-neutral path (`trials`) writes a start as the
//! trial's row, then one row per attribute and one per param, and a finish as the state, then
//! one row per value and per attribute: a dozen round trips for a trial of four params. Here
//! each is one statement: data-modifying CTEs (`WITH t AS (INSERT … RETURNING …) INSERT …
//! SELECT … FROM t, unnest(…)`), which SQLite does not have, so SQLite keeps the neutral path.
//! The rows written are the same, in the same order (ids in the order the space lists the
//! params), and so are the conditions: a claim or a finish that finds the trial no longer in
//! the state it expects writes nothing at all.
//!
//! Rare cases keep the neutral path on PostgreSQL too (the callers fall back when these return
//! `None`): negative zeros (their note is read and rewritten), a pruned trial's value (read
//! from its reports) and failures (their retry copy).

use super::attrs::is_negative_zero;
use super::engine::{Label, Stamp, Tx};
use super::{encode_value, Result, SqlContext, Store, Study};
use crate::study::{Finish, TrialState};

/// One param row of a start: name, internal value, `distribution_json`.
pub(super) type ParamRow = (String, f64, String);

/// The head of a start: a new trial numbered in the statement, or a WAITING one claimed.
pub(super) enum Head {
    New,
    Claim(i64),
}

impl Store {
    /// Starts a trial in one statement on PostgreSQL: its row (numbered as `insert_trial` does,
    /// or the WAITING row claimed), its system attributes (upserted) and its params. `None`
    /// where the neutral path must do it (SQLite, a negative zero); `Some(None)`: the WAITING
    /// trial was no longer WAITING (nothing written).
    pub(super) async fn start_merged(
        &self,
        tx: &mut Tx,
        study: &Study,
        head: Head,
        attrs: &[(&str, String)],
        params: &[ParamRow],
    ) -> Result<Option<Option<(i64, i64)>>> {
        let Tx::Postgres(t) = tx else {
            return Ok(None);
        };
        if params.iter().any(|(_, v, _)| is_negative_zero(*v)) {
            return Ok(None);
        }
        let head_sql = match head {
            // `$3` (the claimed trial) is NULL here; named so that both heads take the same
            // arguments.
            Head::New => {
                "INSERT INTO trials (number, study_id, state, datetime_start) \
                 SELECT COALESCE(MAX(number), -1) + 1, $1, 'RUNNING', $2 FROM trials \
                 WHERE study_id = $1 AND $3::bigint IS NULL \
                 RETURNING trial_id, number"
            }
            Head::Claim(_) => {
                "UPDATE trials SET state = 'RUNNING', datetime_start = $2 \
                 WHERE trial_id = $3 AND state = 'WAITING' AND study_id = $1 \
                 RETURNING trial_id, number"
            }
        };
        let sql = format!(
            "WITH t AS ({head_sql}), \
             a AS (INSERT INTO trial_system_attributes (trial_id, key, value_json) \
                   SELECT t.trial_id, x.k, x.v FROM t, unnest($4::text[], $5::text[]) AS x(k, v) \
                   ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json), \
             p AS (INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
                   SELECT t.trial_id, y.n, y.v, y.d \
                   FROM t, unnest($6::text[], $7::float8[], $8::text[]) WITH ORDINALITY AS y(n, v, d, i) \
                   ORDER BY y.i) \
             SELECT CAST(trial_id AS BIGINT), CAST(number AS BIGINT) FROM t"
        );
        let claim = match head {
            Head::New => None,
            Head::Claim(id) => Some(id),
        };
        let row: Option<(i64, i64)> = sqlx::query_as(&sql)
            .bind(study.id)
            .bind(Stamp::now())
            .bind(claim)
            .bind(attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>())
            .bind(attrs.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>())
            .bind(
                params
                    .iter()
                    .map(|(n, _, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(params.iter().map(|(_, v, _)| *v).collect::<Vec<_>>())
            .bind(
                params
                    .iter()
                    .map(|(_, _, d)| d.as_str())
                    .collect::<Vec<_>>(),
            )
            .fetch_optional(&mut **t)
            .await
            .at(&self.path)?;
        Ok(Some(row))
    }

    /// Finishes a RUNNING trial COMPLETE in one statement on PostgreSQL: its state, its values,
    /// its system attributes, and worker `done_by`'s count of trials done. `None` where the
    /// neutral path must do it (SQLite, not a COMPLETE, a negative zero); `Some(None)`: the
    /// trial was not RUNNING (nothing written), else its number.
    pub(super) async fn finish_merged(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, String)],
        done_by: Option<i64>,
    ) -> Result<Option<Option<i64>>> {
        let Tx::Postgres(t) = tx else {
            return Ok(None);
        };
        let Finish::Complete(values) = how else {
            return Ok(None);
        };
        if values.iter().any(|v| is_negative_zero(*v)) {
            return Ok(None);
        }
        let encoded: Vec<(Option<f64>, &str)> = values.iter().map(|v| encode_value(*v)).collect();
        let number: Option<i64> = sqlx::query_scalar(
            "WITH f AS (UPDATE trials SET state = $1, datetime_complete = $2 \
                        WHERE trial_id = $3 AND state = 'RUNNING' RETURNING trial_id, number), \
             v AS (INSERT INTO trial_values (trial_id, objective, value, value_type) \
                   SELECT f.trial_id, x.i - 1, x.v, CAST(x.t AS trialvaluetype) \
                   FROM f, unnest($4::float8[], $5::text[]) WITH ORDINALITY AS x(v, t, i)), \
             a AS (INSERT INTO trial_system_attributes (trial_id, key, value_json) \
                   SELECT f.trial_id, y.k, y.v FROM f, unnest($6::text[], $7::text[]) AS y(k, v) \
                   ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json), \
             w AS (UPDATE sweepd_workers SET trials_done = trials_done + 1 \
                   WHERE worker_id = $8 AND EXISTS (SELECT 1 FROM f)) \
             SELECT CAST(number AS BIGINT) FROM f",
        )
        .bind(Label::state(TrialState::Complete.as_str()))
        .bind(Stamp::now())
        .bind(trial_id)
        .bind(encoded.iter().map(|(v, _)| *v).collect::<Vec<_>>())
        .bind(encoded.iter().map(|(_, t)| *t).collect::<Vec<_>>())
        .bind(attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>())
        .bind(attrs.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>())
        .bind(done_by)
        .fetch_optional(&mut **t)
        .await
        .at(&self.path)?;
        Ok(Some(number))
    }
}
