//! sweepd's worker rows and their events: who ran what, with which pid, and how it ended.

use super::engine::{sql, Stamp, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::WorkerState;
use std::path::Path;

impl Store {
    /// Registers a worker before it is spawned; its id is the worker's `SWEEPD_WORKER_ID`.
    pub async fn worker_created(&self, study: &Study, slot: usize, host: &str) -> Result<i64> {
        // Once: a second row for one worker would show a worker that never ran.
        once!(self, study.id, |tx| {
            let id = self.worker_created_in(tx, study, slot, host).await?;
            Ok(Commit::Yes(id))
        })
    }

    async fn worker_created_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        slot: usize,
        host: &str,
    ) -> Result<i64> {
        sql!(tx.conn(), |c| sqlx::query_scalar(
            "INSERT INTO sweepd_workers (study_id, slot, host, state, started_at) \
             VALUES ($1, $2, $3, 'STARTING', $4) RETURNING worker_id",
        )
        .bind(study.id)
        .bind(slot as i64)
        .bind(host)
        .bind(Stamp::now())
        .fetch_one(c)
        .await)
        .at(&self.path)
    }

    /// Records the pid and its start time, so a later instance can kill exactly this process.
    pub async fn worker_spawned(
        &self,
        worker_id: i64,
        pid: u32,
        start_time: Option<u64>,
        log: &Path,
    ) -> Result<()> {
        retrying!(self, {
            self.worker_spawned_attempt(worker_id, pid, start_time, log)
                .await
        })
    }

    async fn worker_spawned_attempt(
        &self,
        worker_id: i64,
        pid: u32,
        start_time: Option<u64>,
        log: &Path,
    ) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "UPDATE sweepd_workers SET pid = $1, pid_start_time = $2, log_path = $3 WHERE worker_id = $4",
        )
        .bind(pid as i64)
        .bind(start_time.map(|t| t as i64))
        .bind(log.to_string_lossy().into_owned())
        .bind(worker_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    pub async fn worker_state(&self, worker_id: i64, state: WorkerState) -> Result<()> {
        retrying!(self, { self.worker_state_attempt(worker_id, state).await })
    }

    async fn worker_state_attempt(&self, worker_id: i64, state: WorkerState) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "UPDATE sweepd_workers SET state = $1 WHERE worker_id = $2"
        )
        .bind(state.as_str())
        .bind(worker_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    pub async fn worker_exited(
        &self,
        worker_id: i64,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<()> {
        retrying!(self, {
            self.worker_exited_attempt(worker_id, exit_code, signal)
                .await
        })
    }

    async fn worker_exited_attempt(
        &self,
        worker_id: i64,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "UPDATE sweepd_workers SET state = 'EXITED', ended_at = $1, exit_code = $2, \
             exit_signal = $3 WHERE worker_id = $4",
        )
        .bind(Stamp::now())
        .bind(exit_code)
        .bind(signal)
        .bind(worker_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    /// Counts a successful trial of a worker (shown by `status`, used for recycling), in the
    /// finish's transaction.
    pub(super) async fn count_trial_done(&self, tx: &mut Tx, worker_id: i64) -> Result<()> {
        sql!(tx.conn(), |c| sqlx::query(
            "UPDATE sweepd_workers SET trials_done = trials_done + 1 WHERE worker_id = $1"
        )
        .bind(worker_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    pub async fn event(
        &self,
        worker_id: Option<i64>,
        trial_id: Option<i64>,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        retrying!(self, {
            self.event_attempt(worker_id, trial_id, kind, detail).await
        })
    }

    async fn event_attempt(
        &self,
        worker_id: Option<i64>,
        trial_id: Option<i64>,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "INSERT INTO sweepd_worker_events (worker_id, trial_id, at, kind, detail) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(worker_id)
        .bind(trial_id)
        .bind(Stamp::now())
        .bind(kind)
        .bind(detail)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    /// Workers of this study that no instance marked EXITED: (worker_id, pid, pid start time);
    /// only those of `host` when given (several hosts: the others' are theirs to reap).
    pub async fn unfinished_workers(
        &self,
        study: &Study,
        host: Option<&str>,
    ) -> Result<Vec<(i64, Option<i64>, Option<i64>)>> {
        retrying!(self, { self.unfinished_workers_attempt(study, host).await })
    }

    async fn unfinished_workers_attempt(
        &self,
        study: &Study,
        host: Option<&str>,
    ) -> Result<Vec<(i64, Option<i64>, Option<i64>)>> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT worker_id, pid, pid_start_time FROM sweepd_workers \
             WHERE study_id = $1 AND state <> 'EXITED' AND ($2 IS NULL OR host = $2)",
        )
        .bind(study.id)
        .bind(host)
        .fetch_all(c)
        .await)
        .at(&self.path)
    }

    /// Live workers for `status`.
    pub async fn live_workers(&self, study: &Study) -> Result<Vec<WorkerView>> {
        retrying!(self, { self.live_workers_attempt(study).await })
    }

    async fn live_workers_attempt(&self, study: &Study) -> Result<Vec<WorkerView>> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT worker_id, host, slot, pid, state, trials_done, \
             CAST(started_at AS TEXT) AS started_at FROM sweepd_workers \
             WHERE study_id = $1 AND state <> 'EXITED' ORDER BY host, slot",
        )
        .bind(study.id)
        .fetch_all(c)
        .await)
        .at(&self.path)
    }
}

/// A worker row for `status`.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct WorkerView {
    pub worker_id: i64,
    pub host: String,
    pub slot: i64,
    pub pid: Option<i64>,
    pub state: WorkerState,
    pub trials_done: i64,
    pub started_at: String,
}
