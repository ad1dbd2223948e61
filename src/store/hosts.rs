//! Several hosts on one study (PostgreSQL): Optuna's trial heartbeats for the trials a daemon
//! runs, and failing over a host that stopped heartbeating.
//!
//! Every daemon heartbeats its own `sweepd_daemon` row (`daemon::daemon_state`). A host whose
//! row has been silent for the caller's timeout, judged on the database's clock (hosts'
//! clocks may disagree), is failed over by whichever surviving host gets there first: in one
//! transaction serialised on the study, its row is marked GONE by a conditional update (so
//! only one survivor wins) and its RUNNING trials are marked FAIL and re-enqueued as retry
//! copies, exactly as a restarted daemon reconciles its own. The dead host, when it comes back,
//! finds its trials no longer RUNNING: nothing runs twice, and a result it still reports is
//! refused by the finish's own conditional update.

use super::daemon::{DaemonId, DaemonView};
use super::engine::{sql, Engine, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::{Result, SqlContext, Store, Study};
use crate::study::attrs::OWNER_ATTR;
use crate::study::{DaemonState, Failure, FailureKind, Finish};
use serde_json::Value;
use std::time::Duration;

/// A host failed over: its name and the numbers of the trials re-enqueued.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedOver {
    pub host: String,
    pub trials: Vec<i64>,
}

/// One host of a study, for `status`: its daemon row and what it runs now.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostView {
    pub daemon: DaemonView,
    /// RUNNING trials this host's daemons started.
    pub running: Vec<i64>,
}

impl Store {
    /// Upserts Optuna's `trial_heartbeats` row of each trial, at the database's `now()` as
    /// Optuna's own `record_heartbeat` writes it, so that an Optuna process calling
    /// `fail_stale_trials` sees sweepd's running trials alive, and stale once their host is gone.
    pub async fn trial_heartbeats(&self, trial_ids: &[i64]) -> Result<()> {
        if trial_ids.is_empty() {
            return Ok(());
        }
        let now = match self.engine() {
            // SQLAlchemy's func.now() on SQLite: CURRENT_TIMESTAMP, UTC.
            Engine::Sqlite => "CURRENT_TIMESTAMP",
            Engine::Postgres => "LOCALTIMESTAMP",
        };
        let sql = format!(
            "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES ($1, {now}) \
             ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat"
        );
        retrying!(self, {
            let mut tx = self.begin().await?;
            for id in trial_ids {
                sql!(tx.conn(), |c| sqlx::query(&sql)
                    .bind(id)
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected()))
                .at(&self.path)?;
            }
            tx.commit().await.at(&self.path)
        })
    }

    /// Fails over every other host of the study whose daemon row has been silent for
    /// `timeout`: its row marked GONE and its RUNNING trials FAIL (`interrupted`) with a WAITING
    /// retry copy, each host in one transaction, exactly once whichever host does it.
    pub async fn fail_over_silent_hosts(
        &self,
        study: &Study,
        me: &DaemonId,
        timeout: Duration,
    ) -> Result<Vec<FailedOver>> {
        let silent = format!(
            "study_id = $1 AND host <> $2 AND state IN ('RUNNING', 'PAUSED') AND {} > $3",
            self.engine().age("heartbeat_at")
        );
        let hosts: Vec<String> = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| {
                sqlx::query_scalar(&format!("SELECT host FROM sweepd_daemon WHERE {silent}"))
                    .bind(study.id)
                    .bind(&me.host)
                    .bind(timeout.as_secs_f64())
                    .fetch_all(c)
                    .await
            })
            .at(&self.path)
        })?;
        let mut out = Vec::new();
        for host in hosts {
            // Once: a failover whose commit was lost is still reported.
            let trials = once!(self, study.id, |tx| {
                self.fail_over_in(tx, study, me, timeout, &silent, &host)
                    .await
            })?;
            out.extend(trials.map(|trials| FailedOver { host, trials }));
        }
        Ok(out)
    }

    /// Fails `host` over in `tx`, if it is still silent and no other survivor was first: the
    /// numbers of its trials re-enqueued.
    async fn fail_over_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        me: &DaemonId,
        timeout: Duration,
        silent: &str,
        host: &str,
    ) -> Result<Commit<Option<Vec<i64>>>> {
        let detail = format!(
            "silent for {}s: failed over by {}",
            timeout.as_secs(),
            me.host
        );
        let won = sql!(tx.conn(), |c| sqlx::query(&format!(
            "UPDATE sweepd_daemon SET state = $4, detail = $5 WHERE {silent} AND host = $6"
        ))
        .bind(study.id)
        .bind(&me.host)
        .bind(timeout.as_secs_f64())
        .bind(DaemonState::Gone.as_str())
        .bind(&detail)
        .bind(host)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        if won != 1 {
            // Back in time, or another survivor was first.
            return Ok(Commit::No(None));
        }
        let running: Vec<(i64, Option<String>)> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT CAST(t.trial_id AS BIGINT), a.value_json FROM trials t \
             JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = $1 \
             WHERE t.study_id = $2 AND t.state = 'RUNNING' ORDER BY t.trial_id",
        )
        .bind(OWNER_ATTR)
        .bind(study.id)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut trials = Vec::new();
        for (trial_id, owner) in running {
            let owner = owner
                .and_then(|j| serde_json::from_str::<Value>(&j).ok())
                .and_then(|v| DaemonId::from_json(&v));
            if owner.is_none_or(|o| o.host != host) {
                continue;
            }
            let failure = Failure {
                kind: FailureKind::Interrupted,
                reason: format!(
                    "interrupted: host {host} stopped sending heartbeats for {}s (failed over by {})",
                    timeout.as_secs(),
                    me.host
                ),
                stderr_tail: None,
                retry: true,
                counts: true,
            };
            let finished = self
                .finish_in(tx, study, trial_id, &Finish::Fail(failure), &[], None)
                .await?;
            trials.extend(finished);
        }
        Ok(Commit::Yes(Some(trials)))
    }

    /// Each host of the study with the RUNNING trials its daemons started, for `status`.
    pub async fn hosts(&self, study: &Study) -> Result<Vec<HostView>> {
        let daemons = self.daemons(study).await?;
        let running = self.sweepd_running(study).await?;
        let mut out = Vec::new();
        for d in daemons {
            let mine: Vec<i64> = running
                .iter()
                .filter(|(_, owner)| owner.as_ref().is_some_and(|o| o.host == d.host))
                .map(|(id, _)| *id)
                .collect();
            out.push(HostView {
                daemon: d,
                running: mine,
            });
        }
        Ok(out)
    }
}
