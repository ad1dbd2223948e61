//! Why trials wait, as each daemon publishes it (`study::reason::Line`): one study system
//! attribute per host (`WAITING_LINE_PREFIX` + host), replaced when its phrases change, read
//! back by `status` and `trials`. Optuna ignores it; a study's attributes go with the study.

use super::engine::sql;
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::attrs::WAITING_LINE_PREFIX;
use crate::study::reason::Line;

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
}
