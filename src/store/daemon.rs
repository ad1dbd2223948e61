//! The study's daemon rows (one per host: the single-instance lock, the heartbeat other hosts
//! watch, and the state `status` shows) and the commands the CLI queues for running daemons.
//! A row records its daemon's pid with the instance that pid belongs to (machine id, boot id,
//! PID namespace), so that two machines given one host id are told apart by the caller's rule.

use super::columns::NullableInt;
use super::engine::{sql, Engine, Stamp, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::{Result, SqlContext, Store, StoreError, Study};
use crate::study::{DaemonCommand, DaemonState, UnknownName};
use serde_json::{json, Value};

impl Store {
    /// Takes this host's daemon row of the study for `me`, running as `instance`, refusing
    /// while a daemon whose row `blocks` (the caller's rule) is alive. Asked inside a
    /// transaction serialised on the study, so that two daemons starting at once cannot both
    /// take it. Returns the row it replaced, if another daemon's (whose processes the caller
    /// may then reap, where its pids mean something here).
    ///
    /// On SQLite a study has one daemon row (one host runs it): the rows of other hosts that
    /// do not block are stale and are taken over. On PostgreSQL every host keeps its own row,
    /// the heartbeat the others watch (`hosts`), and only this host's is taken.
    pub async fn lock_daemon(
        &self,
        study: &Study,
        me: &DaemonId,
        instance: &Instance,
        blocks: impl Fn(&Holder) -> bool,
    ) -> Result<Option<Holder>, DaemonLockError> {
        // Safe to run again whole: taken by a first attempt whose commit was lost, the row
        // is ours and blocks nothing.
        let taken = retrying!(self, {
            self.lock_daemon_attempt(study, me, instance, &blocks).await
        })?;
        taken.map_err(|holder| DaemonLockError::Held(Box::new(holder)))
    }

    /// One attempt of [`Store::lock_daemon`]: the row replaced, or the live holder that
    /// blocks it.
    async fn lock_daemon_attempt(
        &self,
        study: &Study,
        me: &DaemonId,
        instance: &Instance,
        blocks: &impl Fn(&Holder) -> bool,
    ) -> Result<Result<Option<Holder>, Holder>> {
        let mut tx = self.begin_study_write(study.id).await?;
        let sql = format!(
            "SELECT pid, pid_start, host, machine_id, boot_id, pid_ns, \
             CAST(started_at AS TEXT) AS started_at, \
             CAST(heartbeat_at AS TEXT) AS heartbeat_at, {} AS age_s, state \
             FROM sweepd_daemon WHERE study_id = $1 ORDER BY started_at",
            self.engine().age("heartbeat_at")
        );
        let holders: Vec<Holder> = sql!(tx.conn(), |c| sqlx::query_as(&sql)
            .bind(study.id)
            .fetch_all(c)
            .await)
        .at(&self.path)?;
        if let Some(holder) = holders.iter().find(|h| blocks(h)) {
            return Ok(Err(holder.clone()));
        }
        // SQLite: the study's one row, whatever its host; PostgreSQL: this host's.
        let replaced = holders.into_iter().find(|h| {
            (self.engine() == Engine::Sqlite || h.id.host == me.host)
                && !(h.id == *me && h.instance == *instance)
        });
        self.forget_old_ops(&mut tx).await?;
        if self.engine() == Engine::Sqlite {
            for table in ["sweepd_daemon", "sweepd_gpus"] {
                let sql = format!("DELETE FROM {table} WHERE study_id = $1 AND host <> $2");
                sql!(tx.conn(), |c| sqlx::query(&sql)
                    .bind(study.id)
                    .bind(&me.host)
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected()))
                .at(&self.path)?;
            }
        }
        // An update, else an insert (no upsert: SQLite cannot take (study_id, host) as the
        // conflict target while study_id is the table's rowid). Safe in this transaction,
        // which holds the study against every other daemon starting.
        let now = self.engine().now();
        let update = format!(
            "UPDATE sweepd_daemon SET pid = $1, pid_start = $2, started_at = $3, \
             heartbeat_at = {now}, state = 'RUNNING', detail = NULL, \
             machine_id = $6, boot_id = $7, pid_ns = $8 WHERE study_id = $4 AND host = $5"
        );
        let updated = sql!(tx.conn(), |c| sqlx::query(&update)
            .bind(me.pid as i64)
            .bind(me.pid_start.map(|v| v as i64))
            .bind(Stamp::now())
            .bind(study.id)
            .bind(&me.host)
            .bind(&instance.machine_id)
            .bind(&instance.boot_id)
            .bind(&instance.pid_ns)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
        .at(&self.path)?;
        if updated == 0 {
            let insert = format!(
                "INSERT INTO sweepd_daemon (study_id, pid, pid_start, host, started_at, heartbeat_at, \
                 state, machine_id, boot_id, pid_ns) \
                 VALUES ($1, $2, $3, $4, $5, {now}, 'RUNNING', $6, $7, $8)"
            );
            sql!(tx.conn(), |c| sqlx::query(&insert)
                .bind(study.id)
                .bind(me.pid as i64)
                .bind(me.pid_start.map(|v| v as i64))
                .bind(&me.host)
                .bind(Stamp::now())
                .bind(&instance.machine_id)
                .bind(&instance.boot_id)
                .bind(&instance.pid_ns)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(Ok(replaced))
    }

    /// Heartbeat and state of our daemon row. `false` when the row is no longer ours (another
    /// host failed this one over while it could not reach the database, or another daemon
    /// with this host id took the row): the caller's trials may be running elsewhere by now.
    /// The row is ours by pid *and* instance: two containers' daemons are often both pid 1.
    pub async fn daemon_state(
        &self,
        study: &Study,
        me: &DaemonId,
        instance: &Instance,
        state: DaemonState,
        detail: Option<&str>,
    ) -> Result<bool> {
        let sql = format!(
            "UPDATE sweepd_daemon SET heartbeat_at = {}, state = $1, detail = $2 \
             WHERE study_id = $3 AND pid = $4 AND host = $5 AND state <> $6 \
             AND machine_id = $7 AND boot_id = $8 AND pid_ns = $9",
            self.engine().now()
        );
        let done = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query(&sql)
                .bind(state.as_str())
                .bind(detail)
                .bind(study.id)
                .bind(me.pid as i64)
                .bind(&me.host)
                .bind(DaemonState::Gone.as_str())
                .bind(&instance.machine_id)
                .bind(&instance.boot_id)
                .bind(&instance.pid_ns)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
            .at(&self.path)
        })?;
        Ok(done == 1)
    }

    /// The daemon rows of the study (one per host that ran it), oldest start first.
    pub async fn daemons(&self, study: &Study) -> Result<Vec<DaemonView>> {
        let sql = format!(
            "SELECT pid, pid_start, host, CAST(started_at AS TEXT) AS started_at, \
             CAST(heartbeat_at AS TEXT) AS heartbeat_at, {} AS age_s, state, detail, \
             machine_id, boot_id, pid_ns \
             FROM sweepd_daemon WHERE study_id = $1 ORDER BY started_at, host",
            self.engine().age("heartbeat_at")
        );
        retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(&sql)
                .bind(study.id)
                .fetch_all(c)
                .await)
            .at(&self.path)
        })
    }

    /// Queues a request for the running daemon.
    pub async fn send_command(&self, study: &Study, command: DaemonCommand) -> Result<()> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query(
            "INSERT INTO sweepd_commands (study_id, command, created_at) VALUES ($1, $2, $3)",
        )
        .bind(study.id)
        .bind(command.as_str())
        .bind(Stamp::now())
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    /// Takes the queued requests (marks them done); one this version does not know is an
    /// `Err` naming it, for the daemon to say it ignored it.
    pub async fn take_commands(
        &self,
        study: &Study,
    ) -> Result<Vec<Result<DaemonCommand, UnknownName>>> {
        // Once: a command marked done by a commit whose acknowledgement was lost must still
        // be carried out.
        let cmds: Vec<String> = once!(self, study.id, |tx| {
            Ok(Commit::Yes(self.take_commands_in(tx, study).await?))
        })?;
        Ok(cmds.iter().map(|c| c.parse()).collect())
    }

    async fn take_commands_in(&self, tx: &mut Tx, study: &Study) -> Result<Vec<String>> {
        let cmds: Vec<String> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT command FROM sweepd_commands WHERE study_id = $1 AND done_at IS NULL ORDER BY command_id",
        )
        .bind(study.id)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        if !cmds.is_empty() {
            sql!(tx.conn(), |c| sqlx::query(
                "UPDATE sweepd_commands SET done_at = $1 WHERE study_id = $2 AND done_at IS NULL",
            )
            .bind(Stamp::now())
            .bind(study.id)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        Ok(cmds)
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

/// What a daemon's pids are relative to: the machine, that machine's boot and the PID
/// namespace it runs in (`/etc/machine-id`, `/proc/sys/kernel/random/boot_id`, `readlink
/// /proc/self/ns/pid`). Each is `""` where unknown, and all are in rows written by a sweepd
/// older than these columns. Whose pids are comparable with whose is the caller's rule.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct Instance {
    pub machine_id: String,
    pub boot_id: String,
    pub pid_ns: String,
}

impl std::fmt::Display for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &str| {
            if s.is_empty() {
                "unknown".to_owned()
            } else {
                s.to_owned()
            }
        };
        write!(
            f,
            "machine id {}, boot id {}, PID namespace {}",
            or(&self.machine_id),
            or(&self.boot_id),
            or(&self.pid_ns)
        )
    }
}

/// The daemon holding a study's row, as the lock finds it: whether it is still alive is the
/// caller's rule (see `Store::lock_daemon`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Holder {
    #[sqlx(flatten)]
    pub id: DaemonId,
    #[sqlx(flatten)]
    pub instance: Instance,
    pub started_at: String,
    pub heartbeat_at: String,
    /// Seconds since the heartbeat, by the database's clock (`None`: not a time).
    pub age_s: Option<f64>,
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
    #[error("another sweepd is running this study: pid {} on {}, since {} (stop it first, or wait for it)", .0.id.pid, .0.id.host, .0.started_at)]
    Held(Box<Holder>),
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
    /// Seconds since the heartbeat, by the database's clock (`None`: not a time).
    pub age_s: Option<f64>,
    pub state: DaemonState,
    pub detail: Option<String>,
    /// The daemon's process start time (`/proc/PID/stat`), where it was read.
    #[sqlx(try_from = "NullableInt")]
    pub pid_start: Option<u64>,
    /// What its pid is relative to: whether `status` may look it up in its own `/proc`.
    #[sqlx(flatten)]
    #[serde(skip)]
    pub instance: Instance,
}
