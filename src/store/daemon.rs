//! The study's daemon row (the single-instance lock, and the state `status` shows) and the
//! commands the CLI queues for the running daemon.

use super::columns::NullableInt;
use super::{time, Result, SqlContext, Store, StoreError, Study};
use crate::study::{DaemonCommand, DaemonState, UnknownName};
use serde_json::{json, Value};

impl Store {
    /// Takes the study's daemon row for `me`, refusing while the daemon holding it is `alive`
    /// (the caller's rule, asked inside the transaction that takes the row, so that two
    /// daemons starting at once cannot both take it). A row whose holder is not alive is taken
    /// over.
    pub async fn lock_daemon(
        &self,
        study: &Study,
        me: &DaemonId,
        alive: impl Fn(&Holder) -> bool,
    ) -> Result<(), DaemonLockError> {
        let mut tx = self.begin_write().await?;
        let holder: Option<Holder> = sqlx::query_as(
            "SELECT pid, pid_start, host, started_at, heartbeat_at, state FROM sweepd_daemon WHERE study_id = $1",
        )
        .bind(study.id)
        .fetch_optional(&mut *tx)
        .await
        .at(&self.path)?;
        if let Some(holder) = holder.filter(|h| alive(h)) {
            return Err(DaemonLockError::Held {
                pid: holder.id.pid,
                host: holder.id.host,
                since: holder.started_at,
            });
        }
        let now = time::now();
        sqlx::query(
            "INSERT INTO sweepd_daemon (study_id, pid, pid_start, host, started_at, heartbeat_at, state) \
             VALUES ($1, $2, $3, $4, $5, $6, 'RUNNING') \
             ON CONFLICT (study_id) DO UPDATE SET pid = excluded.pid, pid_start = excluded.pid_start, \
             host = excluded.host, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, \
             state = 'RUNNING', detail = NULL",
        )
        .bind(study.id)
        .bind(me.pid as i64)
        .bind(me.pid_start.map(|v| v as i64))
        .bind(&me.host)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await
        .at(&self.path)?;
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    /// Heartbeat and state of our daemon row.
    pub async fn daemon_state(
        &self,
        study: &Study,
        me: &DaemonId,
        state: DaemonState,
        detail: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE sweepd_daemon SET heartbeat_at = $1, state = $2, detail = $3 WHERE study_id = $4 AND pid = $5 AND host = $6",
        )
        .bind(time::now())
        .bind(state.as_str())
        .bind(detail)
        .bind(study.id)
        .bind(me.pid as i64)
        .bind(&me.host)
        .execute(&self.pool)
        .await
        .at(&self.path)?;
        Ok(())
    }

    /// The daemon row for `status`.
    pub async fn daemon_view(&self, study: &Study) -> Result<Option<DaemonView>> {
        sqlx::query_as(
            "SELECT pid, host, started_at, heartbeat_at, state, detail FROM sweepd_daemon WHERE study_id = $1",
        )
        .bind(study.id)
        .fetch_optional(&self.pool)
        .await
        .at(&self.path)
    }

    /// Queues a request for the running daemon.
    pub async fn send_command(&self, study: &Study, command: DaemonCommand) -> Result<()> {
        sqlx::query(
            "INSERT INTO sweepd_commands (study_id, command, created_at) VALUES ($1, $2, $3)",
        )
        .bind(study.id)
        .bind(command.as_str())
        .bind(time::now())
        .execute(&self.pool)
        .await
        .at(&self.path)?;
        Ok(())
    }

    /// Takes the queued requests (marks them done); one this version does not know is an
    /// `Err` naming it, for the daemon to say it ignored it.
    pub async fn take_commands(
        &self,
        study: &Study,
    ) -> Result<Vec<Result<DaemonCommand, UnknownName>>> {
        let mut tx = self.begin_write().await?;
        let cmds: Vec<String> = sqlx::query_scalar(
            "SELECT command FROM sweepd_commands WHERE study_id = $1 AND done_at IS NULL ORDER BY command_id",
        )
        .bind(study.id)
        .fetch_all(&mut *tx)
        .await
        .at(&self.path)?;
        if !cmds.is_empty() {
            sqlx::query(
                "UPDATE sweepd_commands SET done_at = $1 WHERE study_id = $2 AND done_at IS NULL",
            )
            .bind(time::now())
            .bind(study.id)
            .execute(&mut *tx)
            .await
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(cmds.iter().map(|c| c.parse()).collect())
    }
}

/// Identifies a daemon process: the single-instance lock compares these.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DaemonId {
    #[sqlx(try_from = "i64")]
    pub pid: u32,
    #[sqlx(try_from = "NullableInt")]
    pub pid_start: Option<u64>,
    pub host: String,
}

/// The daemon holding a study's row, as the lock finds it: whether it is still alive is the
/// caller's rule (see `Store::lock_daemon`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Holder {
    #[sqlx(flatten)]
    pub id: DaemonId,
    pub started_at: String,
    pub heartbeat_at: String,
    pub state: DaemonState,
}

impl DaemonId {
    /// The value of [`OWNER_ATTR`].
    pub fn json(&self) -> Value {
        json!({"host": self.host, "pid": self.pid, "pid_start": self.pid_start})
    }

    pub(super) fn from_json(v: &Value) -> Option<DaemonId> {
        Some(DaemonId {
            host: v["host"].as_str()?.to_owned(),
            pid: v["pid"].as_u64()? as u32,
            pid_start: v["pid_start"].as_u64(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonLockError {
    #[error("another sweepd is running this study: pid {pid} on {host}, since {since} (stop it first, or wait for it)")]
    Held {
        pid: u32,
        host: String,
        since: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The daemon row for `status`.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct DaemonView {
    pub pid: i64,
    pub host: String,
    pub started_at: String,
    pub heartbeat_at: String,
    pub state: DaemonState,
    pub detail: Option<String>,
}
