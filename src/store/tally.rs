//! Keeping the budget's [`Tally`] current by reading only the trials that can have changed.

use super::engine::{sql, Conn};
use super::outage::retrying;
use super::{placeholders, Result, SqlContext, Store, Study, IDS_PER_STATEMENT};
use crate::study::attrs::{OWNER_ATTR, RETRIED_AS_ATTR, WORKER_ID_ATTR};
use crate::study::{Tally, TrialState};

/// The columns [`Store::refresh_tally`] reads for each trial (a [`TallyRow`]) on SQLite. On
/// PostgreSQL the function `sweepd_tally` reads them
/// (`migrations-postgres/functions/sweepd_tally.sql`), for a refresh as for `sweepd_step`.
fn tally_columns() -> String {
    format!(
        "SELECT CAST(t.trial_id AS BIGINT) AS trial_id, \
         CAST(t.state AS TEXT) AS state, \
         EXISTS (SELECT 1 FROM trial_system_attributes a \
                 WHERE a.trial_id = t.trial_id AND a.key = '{RETRIED_AS_ATTR}') AS retried, \
         EXISTS (SELECT 1 FROM trial_system_attributes a \
                 WHERE a.trial_id = t.trial_id AND a.key IN ('{OWNER_ATTR}', '{WORKER_ID_ATTR}')) \
           AS sweepd \
         FROM trials t"
    )
}

/// What the tally needs of one trial.
#[derive(sqlx::FromRow)]
pub(super) struct TallyRow {
    pub(super) trial_id: i64,
    pub(super) state: String,
    /// A FAIL with a retry copy.
    pub(super) retried: bool,
    /// Run by a sweepd daemon.
    pub(super) sweepd: bool,
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
        // Safe to run again: what one attempt applied, the next reads again.
        retrying!(self, {
            let mut conn = self.acquire().await?;
            self.refresh_tally_on(conn.conn(), study, tally).await
        })
    }

    /// [`Store::refresh_tally`] on `conn`: in a start's transaction, which on PostgreSQL holds
    /// the study's row lock, so that no trial can be created or claimed between this read and
    /// the start (every writer of trials takes that lock first; trial ids then grow in commit
    /// order within the study, and a range over them misses nothing).
    pub(super) async fn refresh_tally_on(
        &self,
        mut conn: Conn<'_>,
        study: &Study,
        tally: &mut Tally,
    ) -> Result<()> {
        if let Conn::Postgres(c) = conn.reborrow() {
            return self.refresh_tally_pg(c, study, tally).await;
        }
        // trial_id is the rowid (a sequence on PostgreSQL): a range over it reads only the
        // new rows.
        let columns = tally_columns();
        let sql =
            format!("{columns} WHERE t.trial_id > $1 AND t.study_id = $2 ORDER BY t.trial_id");
        let new: Vec<TallyRow> = sql!(conn.reborrow(), |c| sqlx::query_as(&sql)
            .bind(tally.seen())
            .bind(study.id)
            .fetch_all(c)
            .await)
        .at(&self.path)?;
        for row in &new {
            row.apply_to(tally);
        }
        let open: Vec<i64> = tally.open();
        for chunk in open.chunks(IDS_PER_STATEMENT) {
            let marks = placeholders(1, chunk.len());
            let sql = format!("{columns} WHERE t.trial_id IN ({marks})");
            let rows: Vec<TallyRow> = sql!(conn.reborrow(), |c| {
                let mut q = sqlx::query_as(&sql);
                for id in chunk {
                    q = q.bind(id);
                }
                q.fetch_all(c).await
            })
            .at(&self.path)?;
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

    /// [`Store::refresh_tally_on`] on PostgreSQL: the new trials and the open ones in one
    /// statement, `sweepd_tally`'s read (one round trip inside the study's lock, and one text
    /// whatever the number of open trials, so the server keeps one prepared statement for it).
    async fn refresh_tally_pg(
        &self,
        c: &mut sqlx::PgConnection,
        study: &Study,
        tally: &mut Tally,
    ) -> Result<()> {
        let open: Vec<i64> = tally.open();
        let rows: Vec<TallyRow> =
            sqlx::query_as("SELECT trial_id, state, retried, sweepd FROM sweepd_tally($1, $2, $3)")
                .bind(study.id)
                .bind(tally.seen())
                .bind(&open)
                .fetch_all(c)
                .await
                .at(&self.path)?;
        apply_read(tally, open, rows);
        Ok(())
    }
}

/// Takes in one read of the tally's trials: `rows` are the trials created since the read
/// before and those of `open` (the tally's open trials when the read was made) still there.
/// The new ones are applied first, in id order, then the open ones; an open trial the read did
/// not find was deleted.
pub(super) fn apply_read(tally: &mut Tally, open: Vec<i64>, rows: Vec<TallyRow>) {
    let mut gone: std::collections::HashSet<i64> = open.into_iter().collect();
    let (mut old, mut new): (Vec<TallyRow>, Vec<TallyRow>) =
        rows.into_iter().partition(|r| gone.contains(&r.trial_id));
    new.sort_by_key(|r| r.trial_id);
    for row in new {
        row.apply_to(tally);
    }
    old.sort_by_key(|r| r.trial_id);
    for row in old {
        gone.remove(&row.trial_id);
        row.apply_to(tally);
    }
    for id in gone {
        tally.apply(id, None, false, false);
    }
}
