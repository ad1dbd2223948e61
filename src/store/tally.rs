//! Keeping the budget's [`Tally`] current by reading only the trials that can have changed.

use super::sqlite::Connection;
use super::{placeholders, Result, SqlContext, Store, Study};
use crate::study::{Tally, TrialState};
use sqlx::Row;

/// The columns [`Store::refresh_tally`] reads for each trial.
const TALLY_COLUMNS: &str = "SELECT t.trial_id, t.state, \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as'), \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key IN ('sweepd:daemon', 'sweepd:worker_id')) \
     FROM trials t";

impl Store {
    /// Brings `tally` up to date: the study's trials created since the last refresh, and those
    /// that were not final then. Cheap (it reads what changed, not the study), so the budget
    /// can be checked against the database before every start.
    pub async fn refresh_tally(&self, study: &Study, tally: &mut Tally) -> Result<()> {
        let mut conn = self.pool.acquire().await.at(&self.path)?;
        self.refresh_tally_on(&mut conn, study, tally).await
    }

    pub(super) async fn refresh_tally_on(
        &self,
        conn: &mut Connection,
        study: &Study,
        tally: &mut Tally,
    ) -> Result<()> {
        let read = |row: &sqlx::sqlite::SqliteRow| {
            (
                row.get::<i64, _>(0),
                row.get::<&str, _>(1).parse::<TrialState>().ok(),
                row.get::<bool, _>(2),
                row.get::<bool, _>(3),
            )
        };
        // trial_id is the rowid: a range over it reads only the new rows.
        let new = sqlx::query(&format!(
            "{TALLY_COLUMNS} WHERE t.trial_id > $1 AND t.study_id = $2 ORDER BY t.trial_id"
        ))
        .bind(tally.seen())
        .bind(study.id)
        .fetch_all(&mut *conn)
        .await
        .at(&self.path)?;
        for row in &new {
            let (id, state, retried, sweepd) = read(row);
            tally.apply(id, state, retried, sweepd);
        }
        let open: Vec<i64> = tally.open();
        for chunk in open.chunks(500) {
            let marks = placeholders(1, chunk.len());
            let sql = format!("{TALLY_COLUMNS} WHERE t.trial_id IN ({marks})");
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(id);
            }
            let rows = q.fetch_all(&mut *conn).await.at(&self.path)?;
            let mut gone: std::collections::HashSet<i64> = chunk.iter().copied().collect();
            for row in &rows {
                let (id, state, retried, sweepd) = read(row);
                gone.remove(&id);
                tally.apply(id, state, retried, sweepd);
            }
            for id in gone {
                tally.apply(id, None, false, false);
            }
        }
        Ok(())
    }
}
