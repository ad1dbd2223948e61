//! Why trials wait, as each daemon publishes it (`study::reason::Line`): one study system
//! attribute per host (`WAITING_LINE_PREFIX` + host), replaced when its phrases change, read
//! back by `status` and `trials`. Optuna ignores it; a study's attributes go with the study.
//! Beside them, what the CLI says of a WAITING retry copy without any daemon: which failures
//! it follows ([`Store::retry_copies`]).

use super::engine::{sql, Label};
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::attrs::{ATTEMPTS_ATTR, FAIL_KIND_ATTR, RETRY_HISTORY_ATTR, WAITING_LINE_PREFIX};
use crate::study::reason::Line;
use crate::study::{Attempts, FailureKind, TrialState};
use serde_json::Value;
use std::collections::HashMap;

/// A WAITING copy of a failed trial (Optuna's `retry_history` on it), as the CLI phrases it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryCopy {
    pub trial_id: i64,
    /// The failed attempts of its params by kind (`sweepd:attempts`; empty where another
    /// process made the copy).
    pub attempts: Attempts,
    /// The kind of the failure it follows: the last attempt of `retry_history`'s
    /// `sweepd:fail_kind` (`None`: not recorded, as where Optuna's own callback retried it).
    pub after: Option<FailureKind>,
}

impl Store {
    /// Replaces `host`'s line of waiting candidates.
    pub async fn publish_line(&self, study: &Study, host: &str, line: &Line) -> Result<()> {
        let key = format!("{WAITING_LINE_PREFIX}{host}");
        let text = serde_json::to_string(line).expect("a line serializes");
        retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query(
                "INSERT INTO study_system_attributes (study_id, key, value_json) \
                 VALUES ($1, $2, $3) \
                 ON CONFLICT (study_id, key) DO UPDATE SET value_json = excluded.value_json",
            )
            .bind(study.id)
            .bind(&key)
            .bind(&text)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)
            .map(|_| ())
        })
    }

    /// Every host's published line, by host (a line that does not parse is left out).
    pub async fn lines(&self, study: &Study) -> Result<Vec<(String, Line)>> {
        retrying!(self, {
            let rows: Vec<(String, String)> = sql!(self.acquire().await?.conn(), |c| {
                sqlx::query_as(
                    "SELECT key, value_json FROM study_system_attributes \
                     WHERE study_id = $1 AND key LIKE $2 ORDER BY key",
                )
                .bind(study.id)
                .bind(format!("{WAITING_LINE_PREFIX}%"))
                .fetch_all(c)
                .await
            })
            .at(&self.path)?;
            Ok(rows
                .into_iter()
                .filter_map(|(k, v)| {
                    let host = k.strip_prefix(WAITING_LINE_PREFIX)?.to_owned();
                    Some((host, serde_json::from_str(&v).ok()?))
                })
                .collect())
        })
    }

    /// The study's WAITING retry copies, oldest first.
    pub async fn retry_copies(&self, study: &Study) -> Result<Vec<RetryCopy>> {
        retrying!(self, { self.retry_copies_attempt(study).await })
    }

    async fn retry_copies_attempt(&self, study: &Study) -> Result<Vec<RetryCopy>> {
        let copies: Vec<(i64, String, Option<String>)> =
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT CAST(t.trial_id AS BIGINT), h.value_json, a.value_json FROM trials t \
                 JOIN trial_system_attributes h ON h.trial_id = t.trial_id AND h.key = $2 \
                 LEFT JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = $3 \
                 WHERE t.study_id = $1 AND t.state = $4 ORDER BY t.trial_id",
            )
            .bind(study.id)
            .bind(RETRY_HISTORY_ATTR)
            .bind(ATTEMPTS_ATTR)
            .bind(Label::state(TrialState::Waiting.as_str()))
            .fetch_all(c)
            .await)
            .at(&self.path)?;
        if copies.is_empty() {
            return Ok(Vec::new());
        }
        let kinds: Vec<(i64, String)> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT CAST(t.number AS BIGINT), k.value_json FROM trials t \
             JOIN trial_system_attributes k ON k.trial_id = t.trial_id AND k.key = $2 \
             WHERE t.study_id = $1",
        )
        .bind(study.id)
        .bind(FAIL_KIND_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let kind_of: HashMap<i64, FailureKind> = kinds
            .into_iter()
            .filter_map(|(n, json)| {
                let v: Value = serde_json::from_str(&json).ok()?;
                Some((n, v.as_str()?.parse().ok()?))
            })
            .collect();
        Ok(copies
            .into_iter()
            .map(|(trial_id, history, attempts)| {
                let last = serde_json::from_str::<Value>(&history)
                    .ok()
                    .and_then(|h| h.as_array()?.last()?.as_i64());
                RetryCopy {
                    trial_id,
                    attempts: attempts
                        .and_then(|a| serde_json::from_str(&a).ok())
                        .unwrap_or_default(),
                    after: last.and_then(|n| kind_of.get(&n).copied()),
                }
            })
            .collect())
    }
}
