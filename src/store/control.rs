//! The study's control state (`sweepd_control`): what its owner asked of every daemon of the
//! study (`sweepd pause`, `stop`, `cancel`, `resume`), who asked and when. One row per study,
//! none for a study nobody steered (RUNNING). Written by the CLI, read by every daemon each
//! housekeeping tick and at start; what a daemon does about it is `study::control::decide`.

use super::engine::{sql, Stamp, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::{ControlState, DaemonCommand, StudyControl};

/// A control row as read.
#[derive(sqlx::FromRow)]
struct Row {
    state: String,
    since: String,
    by_user: String,
    by_host: String,
}

impl Store {
    /// The study's control state: RUNNING for a study nobody steered. A state this version does
    /// not know (written by a newer sweepd) reads as PAUSED: start nothing, end nothing.
    pub async fn control(&self, study: &Study) -> Result<StudyControl> {
        let row: Option<Row> = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT state, CAST(since AS TEXT) AS since, by_user, by_host \
                 FROM sweepd_control WHERE study_id = $1",
            )
            .bind(study.id)
            .fetch_optional(c)
            .await)
            .at(&self.path)
        })?;
        Ok(row.map(control_of).unwrap_or_default())
    }

    /// Sets the study's control state, asked by `by_user` from `by_host`, and returns the one
    /// it replaced. One transaction on the study's lock, once (a retry after a lost commit
    /// acknowledgement returns what the first attempt replaced).
    pub async fn set_control(
        &self,
        study: &Study,
        state: ControlState,
        by_user: &str,
        by_host: &str,
    ) -> Result<StudyControl> {
        once!(self, study.id, |tx| {
            let before = self
                .set_control_in(tx, study, state, by_user, by_host)
                .await?;
            Ok(Commit::Yes(before))
        })
    }

    /// `sweepd resume`: the study RUNNING again, and the running daemons asked to lift their
    /// circuit breaker's quarantines (`sweepd_commands`), in one transaction. Returns the state
    /// it replaced.
    pub async fn resume(
        &self,
        study: &Study,
        by_user: &str,
        by_host: &str,
    ) -> Result<StudyControl> {
        once!(self, study.id, |tx| {
            let before = self
                .set_control_in(tx, study, ControlState::Running, by_user, by_host)
                .await?;
            sql!(tx.conn(), |c| sqlx::query(
                "INSERT INTO sweepd_commands (study_id, command, created_at) VALUES ($1, $2, $3)",
            )
            .bind(study.id)
            .bind(DaemonCommand::Resume.as_str())
            .bind(Stamp::now())
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
            Ok(Commit::Yes(before))
        })
    }

    async fn set_control_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        state: ControlState,
        by_user: &str,
        by_host: &str,
    ) -> Result<StudyControl> {
        let before: Option<Row> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT state, CAST(since AS TEXT) AS since, by_user, by_host \
             FROM sweepd_control WHERE study_id = $1",
        )
        .bind(study.id)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        sql!(tx.conn(), |c| sqlx::query(
            "INSERT INTO sweepd_control (study_id, state, since, by_user, by_host) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (study_id) DO UPDATE SET state = excluded.state, \
             since = excluded.since, by_user = excluded.by_user, by_host = excluded.by_host",
        )
        .bind(study.id)
        .bind(state.as_str())
        .bind(Stamp::now())
        .bind(by_user)
        .bind(by_host)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(before.map(control_of).unwrap_or_default())
    }
}

fn control_of(row: Row) -> StudyControl {
    StudyControl {
        state: row.state.parse().unwrap_or(ControlState::Paused),
        since: Some(row.since),
        by: Some(format!("{}@{}", row.by_user, row.by_host)),
    }
}
