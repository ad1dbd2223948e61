//! Keeping the budget's [`Tally`] current by reading only the trials that can have changed.

use super::sqlite::Connection;
use super::{placeholders, Result, SqlContext, Store, Study};
use crate::study::{Tally, TrialState};

/// The columns [`Store::refresh_tally`] reads for each trial (a [`TallyRow`]).
const TALLY_COLUMNS: &str = "SELECT t.trial_id, t.state, \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as') AS retried, \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key IN ('sweepd:daemon', 'sweepd:worker_id')) \
       AS sweepd \
     FROM trials t";

/// What the tally needs of one trial.
#[derive(sqlx::FromRow)]
struct TallyRow {
    trial_id: i64,
    state: String,
    /// A FAIL with a retry copy.
    retried: bool,
    /// Run by a sweepd daemon.
    sweepd: bool,
}

impl TallyRow {
    fn apply_to(&self, tally: &mut Tally) {
        let state = self.state.parse::<TrialState>().ok();
        tally.apply(self.trial_id, state, self.retried, self.sweepd);
    }
}

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
        // trial_id is the rowid: a range over it reads only the new rows.
        let new: Vec<TallyRow> = sqlx::query_as(&format!(
            "{TALLY_COLUMNS} WHERE t.trial_id > $1 AND t.study_id = $2 ORDER BY t.trial_id"
        ))
        .bind(tally.seen())
        .bind(study.id)
        .fetch_all(&mut *conn)
        .await
        .at(&self.path)?;
        for row in &new {
            row.apply_to(tally);
        }
        let open: Vec<i64> = tally.open();
        for chunk in open.chunks(500) {
            let marks = placeholders(1, chunk.len());
            let sql = format!("{TALLY_COLUMNS} WHERE t.trial_id IN ({marks})");
            let mut q = sqlx::query_as::<_, TallyRow>(&sql);
            for id in chunk {
                q = q.bind(id);
            }
            let rows = q.fetch_all(&mut *conn).await.at(&self.path)?;
            let mut gone: std::collections::HashSet<i64> = chunk.iter().copied().collect();
            for row in &rows {
                gone.remove(&row.trial_id);
                row.apply_to(tally);
            }
            for id in gone {
                tally.apply(id, None, false, false);
            }
        }
        Ok(())
    }
}
