//! The study database: Optuna's RDB schema (v12, alembic `v3.2.0.a`) plus sweepd's own tables.
//!
//! Users keep their tools: `optuna.load_study`, optuna-dashboard and `sqlite3` all read what
//! sweepd writes, so every row here is written the way Optuna writes it (upper-case enums,
//! internal param values, `distribution_json`, JSON attribute values, numbers 0..n-1 in
//! `trial_id` order). Other writers (an Optuna script, the dashboard) may add rows at any time,
//! so nothing here assumes it is the only writer, and a finished trial is never modified.
//!
//! Every change that spans several statements runs in one write transaction
//! (`Store::begin_write`: on SQLite `BEGIN IMMEDIATE`), so a `kill -9` at any moment leaves
//! either all of it or none.
//!
//! Optuna's own tools come first: sweepd's tables have no foreign keys to Optuna's, and what
//! sweepd attaches to Optuna's tables (`mirror`: the triggers behind `sweepd_trials` and behind
//! deleting sweepd's rows with a study) never blocks, breaks or outlives `optuna.delete_study`
//! or an Optuna schema migration.
//!
//! The store records and reads; it decides nothing (whether a daemon still runs, whether a
//! failure is retried, what the budget allows are the callers' rules, passed in where a
//! transaction needs them) and imports nothing of sweepd's but `study` (the attribute names
//! are `study::attrs`). One file per concern: `schema` (opening the file, version checks,
//! migrations, file modes), `trials` (starting, claiming, finishing and re-enqueueing trials,
//! their reports, the RUNNING ones to reconcile), `rows` (what a start and a finish write, built
//! once for both write paths, and the types of a start), `suggested` (what a running trial's
//! objective adds: suggested params, user attributes), `attrs` (the negative zeros' record, the
//! upsert of one attribute), `views` (trials read back for the CLI, and the peaks a restarted
//! daemon's memory model starts from), `feed` (what changed since a daemon last looked: every
//! trial at its start, then other processes' trials as they come, for the sampler, pruner and
//! memory model), `tally` (the budget's count), `spent` (the finished trials' values and GPU
//! time, for the budgets beside `n_trials`), `reasons` (each daemon's published line of waiting
//! candidates and why they wait, and the WAITING retry copies with the failures they follow),
//! `workers`, `daemon` (the lock row, its state, the CLI's commands), `control` (what the
//! study's owner asked of every daemon: paused, stopping, cancelling), `steer` (a trial killed by hand, trials enqueued with chosen params,
//! where a trial's log is, which of a daemon's trials another process ended), `hosts`
//! (heartbeats, failover), `step` (PostgreSQL: a finish, the next
//! start, or both, in one call of the server-side function `sweepd_step`), `telemetry` (GPU
//! rows, memory samples), `time` (the one timestamp codec), `columns` (enums and unsigned
//! numbers in columns), and the engines' files below.
//!
//! **Layers.** A file uses (imports, and calls the `Store` methods of) files of lower layers
//! only, lowest first:
//! 1. `time`, `columns`, `sync`, `sqlite`, `postgres`: nothing of the folder;
//! 2. `engine`;
//! 3. `outage`, `attrs`;
//! 4. `once`;
//! 5. `daemon`, `control`, `tally`, `workers`, `telemetry`, `views`, `spent`, `reasons`, `mirror`;
//! 6. `rows`, `feed`;
//! 7. `step`;
//! 8. `trials`;
//! 9. `suggested`, `hosts`, `steer`, `schema`.
//!
//! This file is the folder itself: the `Store` handle that every file extends (`impl Store`),
//! its error, the `Study` row and the connection and transaction helpers every file uses, and
//! the re-exports of the public names. Files name each other by their own path
//! (`super::daemon::DaemonId`), never through a re-export.
//!
//! **Two engines.** SQLite for one host; PostgreSQL for several hosts on one study, used as
//! Optuna uses it (its own schema, its row lock on the study before numbering a trial). The
//! queries are written once (`$1, $2, …` placeholders, no `INSERT OR`, claims as conditional
//! `UPDATE`s, upserts as `ON CONFLICT`) and run on either through `engine` (how, and the few
//! rules the text follows for PostgreSQL's types). What only one engine does is in `sqlite`
//! and `postgres` (connection, write transaction, table lookup, migrations); `sync` (group
//! commit by `fdatasync` of the write-ahead log) and `mirror` (triggers) are SQLite's alone.
//! The store does not go through `sqlx::Any`.

mod attrs;
mod columns;
mod control;
mod daemon;
mod engine;
mod feed;
mod hosts;
mod mirror;
mod once;
mod outage;
mod postgres;
mod reasons;
mod rows;
mod schema;
mod spent;
mod sqlite;
mod steer;
mod step;
mod suggested;
mod sync;
mod tally;
mod telemetry;
pub mod time;
mod trials;
mod views;
mod workers;

pub use daemon::{DaemonId, DaemonLockError, DaemonView, Holder, Instance};
pub use engine::Engine;
pub use feed::{Changed, Changes, Feed};
pub use hosts::{FailedOver, HostView};
pub use outage::{Ended, Outage};
pub use reasons::RetryCopy;
pub use rows::{Runner, StartCtx, StartOp, Started, Waiting};
pub use schema::{world_readable, ALEMBIC_HEAD, SCHEMA_VERSION};
pub use spent::{spent, FinalTrial};
pub use steer::{EndedElsewhere, Enqueued, KillRefused, Killed, Repeats, TrialLog, KILLED_BY_HAND};
pub use suggested::ParamRefused;
pub use telemetry::{GpuRow, MemorySample};
pub use views::{Candidate, TrialView};
pub use workers::WorkerView;

use crate::study::attrs::METRIC_NAMES_ATTR;
use crate::study::Direction;
use engine::sql;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The file system's state is read when the error is shown: SQLite reports a file system
    // gone read-only as a plain "disk I/O error", sometimes before the kernel flags it.
    #[error("database {path}: {source}{}", fs_hint(path, source))]
    Sql {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    #[error(
        "database {path}: could not make its write-ahead log durable: {source}{}",
        io_hint(path)
    )]
    Sync {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("database {path}: migrations failed: {source}{}", migrate_hint(source))]
    Migrate {
        path: PathBuf,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    #[error("database {path} was written by an incompatible Optuna version ({found}); sweepd reads schema {SCHEMA_VERSION} / alembic {ALEMBIC_HEAD} (optuna 3.2 to 5.0). Upgrade it with `optuna storage upgrade --storage {}` or use another database", optuna_url(path))]
    IncompatibleSchema { path: PathBuf, found: String },
    #[error("no database at {0}: has `sweepd run` been started with this config?")]
    Missing(PathBuf),
    #[error("{0} has no study tables (yet): a `sweepd run` may be creating them right now, or the file is not a study database")]
    NoSchema(PathBuf),
    #[error("study `{name}` in {path} is {found}, but the config says {wanted}")]
    DirectionMismatch {
        path: PathBuf,
        name: String,
        found: String,
        wanted: String,
    },
    #[error("study `{name}` not found in {path}")]
    NoStudy { path: PathBuf, name: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Where a study database is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: the URL sqlx connects with (`postgres://` or `postgresql://`),
    /// and how messages name it (the URL without its password).
    Postgres { url: String, label: String },
}

impl Target {
    /// How messages name it: the file, or the URL without its password.
    pub fn label(&self) -> PathBuf {
        match self {
            Target::Sqlite(p) => p.clone(),
            Target::Postgres { label, .. } => PathBuf::from(label),
        }
    }
}

/// The sqlx pool over the study database.
#[derive(Clone)]
pub struct Store {
    pool: engine::Pool,
    /// The file, or the PostgreSQL URL without its password: what messages name.
    path: PathBuf,
    /// Group commit: makes lazy commits durable (see [`Store::sync`]); SQLite only.
    syncer: Option<std::sync::Arc<sync::Syncer>>,
    /// Whether operations wait through an outage of the server, and the outage in progress
    /// (`outage`); shared by every clone.
    outages: std::sync::Arc<outage::Outages>,
    /// The ids of the writes that must take effect once (`once`).
    ops: std::sync::Arc<once::Ops>,
    /// The connection a trial's start and finish use, kept out of the pool (`engine::Kept`).
    kept: engine::Kept,
}

/// A study row.
#[derive(Debug, Clone)]
pub struct Study {
    pub id: i64,
    pub name: String,
    /// One per objective (`study_directions` in objective order), never empty.
    pub directions: Vec<Direction>,
    /// Optuna's `study.metric_names`, when set (and one per objective).
    pub metric_names: Option<Vec<String>>,
}

impl Study {
    /// Whether the study has several objectives.
    pub fn is_multi_objective(&self) -> bool {
        self.directions.len() > 1
    }

    /// Objective `i`'s name: its metric name, else `values_i` (what Optuna's dataframes call
    /// it).
    pub fn objective_name(&self, i: usize) -> String {
        self.metric_names
            .as_ref()
            .and_then(|n| n.get(i).cloned())
            .unwrap_or_else(|| format!("values_{i}"))
    }
}

/// Names the database an sqlx error happened on (and, through [`StoreError::Sql`]'s message,
/// the file system's state when that is the cause): `query.execute(..).await.at(&self.path)?`.
trait SqlContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> SqlContext<T> for std::result::Result<T, sqlx::Error> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|source| StoreError::Sql {
            path: path.to_owned(),
            source,
        })
    }
}

/// The storage URL Optuna's tools take for the database (a file as `sqlite:///path`).
fn optuna_url(path: &Path) -> String {
    let shown = path.display().to_string();
    if shown.contains("://") {
        shown
    } else {
        format!("sqlite:///{shown}")
    }
}

/// The same hint for an I/O error of sweepd's own (syncing the log).
fn io_hint(path: &Path) -> String {
    file_system_state(path)
        .map(|h| format!(" ({h})"))
        .unwrap_or_default()
}

/// What to do about a migration error that means another sweepd version migrated the database:
/// sqlx's own words ("previously applied but is missing") do not say so. On PostgreSQL the
/// first host to start a newer sweepd migrates the database for every host.
fn migrate_hint(e: &sqlx::migrate::MigrateError) -> String {
    use sqlx::migrate::MigrateError;
    match e {
        MigrateError::VersionMissing(v) => format!(
            " (a newer sweepd migrated this database; its migration {v} is unknown to this \
             one: run that version or a later one here, and on every host that opens the \
             database; docs/operations.md, \"Upgrading\")"
        ),
        MigrateError::VersionMismatch(v) => format!(
            " (another build of sweepd migrated this database; its migration {v} differs \
             from this one's: run the same sweepd version on every host that opens it; \
             docs/operations.md, \"Upgrading\")"
        ),
        _ => String::new(),
    }
}

/// " (the file system … is read-only)" when a database or I/O error has that cause.
fn fs_hint(path: &Path, source: &sqlx::Error) -> String {
    if path.to_string_lossy().contains("://") {
        // A server, not a file.
        return if outage::connection_lost(source) {
            " (the database server cannot be reached: down, restarting, or the network cut)"
                .to_owned()
        } else {
            String::new()
        };
    }
    // Not only a database or I/O error: whatever sqlx made of the failure that followed one
    // (a connection left inside a transaction, its worker thread gone), the file system's state
    // is what a person can act on.
    match source {
        sqlx::Error::Database(_)
        | sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::InvalidSavePointStatement
        | sqlx::Error::BeginFailed
        | sqlx::Error::WorkerCrashed => file_system_state(path)
            .map(|h| format!(" ({h})"))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// "read-only file system" or "no space left" for the file system holding `path`, if so.
pub fn file_system_state(path: &Path) -> Option<String> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    use std::io::ErrorKind;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let st = statvfs(dir).ok()?;
    let read_only = || {
        Some(format!(
            "the file system holding {} is read-only: the database cannot be written until it \
             is mounted read-write again (after a fsck, if an error turned it read-only)",
            dir.display()
        ))
    };
    let full = || {
        Some(format!(
            "no space left on the file system holding {}: the database cannot be written until \
             some is freed",
            dir.display()
        ))
    };
    if st.flags().contains(FsFlags::ST_RDONLY) {
        return read_only();
    }
    // A file system in an emergency read-only state (ext4 after an error) does not say so in
    // statvfs: a write does.
    let probe = dir.join(".sweepd-write-probe");
    let result = std::fs::write(&probe, b"probe");
    let _ = std::fs::remove_file(&probe);
    match result.map_err(|e| e.kind()) {
        Err(ErrorKind::ReadOnlyFilesystem) => read_only(),
        Err(ErrorKind::StorageFull) => full(),
        _ if st.blocks_available() == 0 => full(),
        _ => None,
    }
}

/// Ids bound one by one in an `IN (…)` list, at most: well under SQLite's and PostgreSQL's
/// limits.
const IDS_PER_STATEMENT: usize = 500;

/// `$first, $first+1, …`, `count` of them: the placeholders of a list bound value by value.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Optuna's (value, value_type) pair for a trial value: infinities are NULL plus a type.
fn encode_value(v: f64) -> (Option<f64>, &'static str) {
    if v.is_finite() {
        (Some(v), "FINITE")
    } else if v.is_nan() {
        (None, "NAN")
    } else if v > 0.0 {
        (None, "INF_POS")
    } else {
        (None, "INF_NEG")
    }
}

/// A value stored as Optuna's (value, value_type) pair; `None` for NaN or no value.
fn read_value(value: Option<f64>, value_type: Option<&str>) -> Option<f64> {
    match value_type {
        Some("FINITE") => value,
        Some("INF_POS") => Some(f64::INFINITY),
        Some("INF_NEG") => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A value stored as Optuna's (value, value_type) pair, for display: infinities and NaN as
/// strings.
fn decode_value(value: Option<f64>, value_type: &str) -> Value {
    match value_type {
        "INF_POS" => json!("inf"),
        "INF_NEG" => json!("-inf"),
        "NAN" => json!("nan"),
        _ => value.map(|v| json!(v)).unwrap_or(Value::Null),
    }
}

impl Store {
    /// Returns once everything committed before the call survives a power loss (see
    /// `store::sync`: one sync of the write-ahead log, shared by every caller waiting).
    pub async fn sync(&self) -> Result<()> {
        let Some(syncer) = &self.syncer else {
            return Ok(()); // PostgreSQL: a commit is durable when it returns
        };
        syncer.sync().await.map_err(|source| StoreError::Sync {
            path: self.path.clone(),
            source,
        })
    }

    /// The file, or the PostgreSQL URL without its password.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn engine(&self) -> Engine {
        self.pool.engine()
    }

    /// The SQLite pool, for tests that look inside the file.
    #[cfg(test)]
    pub(crate) fn sqlite_pool(&self) -> &sqlx::SqlitePool {
        match &self.pool {
            engine::Pool::Sqlite(p) => p,
            engine::Pool::Postgres(_) => panic!("a SQLite store"),
        }
    }

    /// A connection from the pool, for queries outside a transaction. (An operation that
    /// must wait through an outage of the server runs whole in `retrying!`, see `outage`.)
    async fn acquire(&self) -> Result<engine::PoolConn> {
        self.pool.acquire().await.at(&self.path)
    }

    /// A transaction for single-row writes (see `engine::Pool::begin`).
    async fn begin(&self) -> Result<engine::Tx> {
        self.pool.begin().await.at(&self.path)
    }

    /// Starts a multi-statement write transaction. It commits lazily: whoever reports what it
    /// wrote (a trial started or finished) waits for [`Store::sync`] first. On SQLite it holds
    /// the write lock from the start; on PostgreSQL one that numbers or counts trials takes the
    /// study's row lock (`engine::Tx::lock_study`).
    async fn begin_write(&self) -> Result<engine::Tx> {
        self.pool.begin_write().await.at(&self.path)
    }

    /// A write transaction serialised with every writer of the study's trials.
    async fn begin_study_write(&self, study_id: i64) -> Result<engine::Tx> {
        let mut tx = self.begin_write().await?;
        tx.lock_study(study_id).await.at(&self.path)?;
        Ok(tx)
    }

    /// Finds the study, or creates it the way `optuna.create_study` does: one
    /// `study_directions` row per objective. `metric_names`, when given, are stored as
    /// Optuna's `set_metric_names` stores them (the study system attribute
    /// `study:metric_names`), replacing any set before.
    pub async fn ensure_study(
        &self,
        name: &str,
        directions: &[Direction],
        metric_names: Option<&[String]>,
    ) -> Result<Study> {
        match self.ensure_study_once(name, directions, metric_names).await {
            // Daemons on several hosts creating the study at once (PostgreSQL, where the
            // transactions do not wait for each other): the loser's insert hits the unique
            // name, and a second look finds the winner's study.
            Err(StoreError::Sql {
                source: sqlx::Error::Database(e),
                ..
            }) if e.is_unique_violation() => {
                self.ensure_study_once(name, directions, metric_names).await
            }
            other => other,
        }
    }

    async fn ensure_study_once(
        &self,
        name: &str,
        directions: &[Direction],
        metric_names: Option<&[String]>,
    ) -> Result<Study> {
        let mut tx = self.begin_write().await?;
        let existing: Option<i64> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT CAST(study_id AS BIGINT) FROM studies WHERE study_name = $1"
        )
        .bind(name)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        let wanted: Vec<&str> = directions.iter().map(Direction::as_optuna).collect();
        let id = match existing {
            Some(id) => {
                let found: Vec<String> = sql!(tx.conn(), |c| sqlx::query_scalar(
                    "SELECT CAST(direction AS TEXT) FROM study_directions \
                     WHERE study_id = $1 ORDER BY objective",
                )
                .bind(id)
                .fetch_all(c)
                .await)
                .at(&self.path)?;
                // A study without direction rows (being created by another writer) is taken
                // as it is.
                if !found.is_empty() && found != wanted {
                    return Err(StoreError::DirectionMismatch {
                        path: self.path.clone(),
                        name: name.to_owned(),
                        found: found.join(", "),
                        wanted: wanted.join(", "),
                    });
                }
                id
            }
            None => {
                // Two daemons creating the study at once on PostgreSQL: the unique name makes
                // the second insert fail, and its retry finds the study.
                let id: i64 = sql!(tx.conn(), |c| sqlx::query_scalar(
                    "INSERT INTO studies (study_name) VALUES ($1) RETURNING CAST(study_id AS BIGINT)",
                )
                .bind(name)
                .fetch_one(c)
                .await)
                .at(&self.path)?;
                for (objective, direction) in directions.iter().enumerate() {
                    sql!(tx.conn(), |c| sqlx::query(
                        "INSERT INTO study_directions (direction, study_id, objective) \
                         VALUES ($1, $2, $3)",
                    )
                    .bind(engine::Label::direction(direction.as_optuna()))
                    .bind(id)
                    .bind(objective as i64)
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected()))
                    .at(&self.path)?;
                }
                id
            }
        };
        if let Some(names) = metric_names {
            sql!(tx.conn(), |c| sqlx::query(
                "INSERT INTO study_system_attributes (study_id, key, value_json) \
                 VALUES ($1, $2, $3) \
                 ON CONFLICT (study_id, key) DO UPDATE SET value_json = excluded.value_json",
            )
            .bind(id)
            .bind(METRIC_NAMES_ATTR)
            .bind(json!(names).to_string())
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(Study {
            id,
            name: name.to_owned(),
            directions: directions.to_vec(),
            metric_names: metric_names.map(<[String]>::to_vec),
        })
    }

    /// Every study's name, in creation order.
    pub async fn study_names(&self) -> Result<Vec<String>> {
        sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(
            "SELECT study_name FROM studies ORDER BY study_id"
        )
        .fetch_all(c)
        .await)
        .at(&self.path)
    }

    /// Looks a study up without creating it (read-only commands).
    pub async fn find_study(&self, name: &str) -> Result<Study> {
        let mut conn = self.acquire().await?;
        let id: i64 = sql!(conn.conn(), |c| sqlx::query_scalar(
            "SELECT CAST(study_id AS BIGINT) FROM studies WHERE study_name = $1"
        )
        .bind(name)
        .fetch_optional(c)
        .await)
        .at(&self.path)?
        .ok_or_else(|| StoreError::NoStudy {
            path: self.path.clone(),
            name: name.to_owned(),
        })?;
        let found: Vec<String> = sql!(conn.conn(), |c| sqlx::query_scalar(
            "SELECT CAST(direction AS TEXT) FROM study_directions \
             WHERE study_id = $1 ORDER BY objective",
        )
        .bind(id)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut directions: Vec<Direction> = found
            .iter()
            .map(|d| {
                if d == "MAXIMIZE" {
                    Direction::Maximize
                } else {
                    Direction::Minimize
                }
            })
            .collect();
        if directions.is_empty() {
            directions.push(Direction::Minimize);
        }
        let names: Option<String> = sql!(conn.conn(), |c| sqlx::query_scalar(
            "SELECT value_json FROM study_system_attributes WHERE study_id = $1 AND key = $2",
        )
        .bind(id)
        .bind(METRIC_NAMES_ATTR)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        let metric_names = names
            .and_then(|j| serde_json::from_str::<Vec<String>>(&j).ok())
            .filter(|n| n.len() == directions.len());
        Ok(Study {
            id,
            name: name.to_owned(),
            directions,
            metric_names,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_optunas_value_and_type() {
        for v in [1.5, -0.0, f64::INFINITY, f64::NEG_INFINITY] {
            let (stored, ty) = encode_value(v);
            assert_eq!(read_value(stored, Some(ty)), Some(v), "{v}");
        }
        let (stored, ty) = encode_value(f64::NAN);
        assert_eq!((stored, ty), (None, "NAN"));
        assert_eq!(read_value(stored, Some(ty)), None);
        assert_eq!(decode_value(stored, ty), json!("nan"));
        assert_eq!(decode_value(None, "INF_NEG"), json!("-inf"));
        assert_eq!(read_value(Some(2.0), None), None, "no value_type: no value");
    }

    #[test]
    fn placeholders_are_numbered_from_where_the_list_starts() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(placeholders(1, 1), "$1");
        assert_eq!(placeholders(1, 0), "");
    }
}
