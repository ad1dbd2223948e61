//! The study database: Optuna's RDB schema (v12, alembic `v3.2.0.a`) plus sweepd's own tables.
//!
//! Users keep their tools: `optuna.load_study`, optuna-dashboard and `sqlite3` all read what
//! sweepd writes, so every row here is written the way Optuna writes it (upper-case enums,
//! internal param values, `distribution_json`, JSON attribute values, numbers 0..n-1 in
//! `trial_id` order). Other writers (an Optuna script, the dashboard) may add rows at any time,
//! so nothing here assumes it is the only writer, and a finished trial is never modified.
//!
//! Every change that spans several statements runs in one `BEGIN IMMEDIATE` transaction, so a
//! `kill -9` at any moment leaves either all of it or none. The SQL stays portable to
//! PostgreSQL (no `INSERT OR`, claims are conditional `UPDATE`s) except where noted.
//!
//! Optuna's own tools come first: sweepd's tables have no foreign keys to Optuna's, and what
//! sweepd attaches to Optuna's tables (`mirror`: the triggers behind `sweepd_trials` and behind
//! deleting sweepd's rows with a study) never blocks, breaks or outlives `optuna.delete_study`
//! or an Optuna schema migration.

mod mirror;
mod sync;

use crate::study::{
    Attempts, Claimed, Counts, Direction, Distribution, Failure, FailureKind, Finish, ParamValue,
    Params, SearchSpace, Tally, TrialRecord, TrialState,
};
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Optuna schema revision sweepd reads and writes.
pub const ALEMBIC_HEAD: &str = "v3.2.0.a";
pub const SCHEMA_VERSION: i64 = 12;

/// The columns a `TrialView` is made from (see `Store::view`).
const TRIAL_COLUMNS: &str = "SELECT t.trial_id, t.number, t.state, v.value, v.value_type, \
     t.datetime_start, t.datetime_complete \
     FROM trials t LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0";

/// How long a statement waits for another writer (an Optuna script, say) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

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
    #[error("database {path}: migrations failed: {source}")]
    Migrate {
        path: PathBuf,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    #[error("database {path} was written by an incompatible Optuna version ({found}); sweepd reads schema {SCHEMA_VERSION} / alembic {ALEMBIC_HEAD} (optuna 3.2 to 5.0). Upgrade it with `optuna storage upgrade --storage sqlite:///{path}` or use another file")]
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

/// What starting a trial needs besides the trial: who starts it, and the budget it is checked
/// against.
pub struct StartCtx<'a> {
    pub study: &'a Study,
    pub owner: &'a DaemonId,
    pub budget: Option<u64>,
    pub tally: &'a mut Tally,
}

/// The write that starts a trial: a new one with sampled params, or a WAITING one claimed with
/// its complete params.
#[derive(Debug, Clone, Copy)]
pub enum StartOp<'a> {
    New(&'a Params),
    Claim(&'a Waiting, &'a Params),
}

/// How an attempt to start a trial ended.
#[derive(Debug)]
pub enum Started {
    /// The trial is RUNNING for this daemon.
    Yes(Claimed),
    /// Another process claimed the WAITING trial first.
    Taken,
    /// The budget is spent, or reserved by trials running now (the tally says which).
    NoRoom,
}

/// The trial system attribute naming the sweepd daemon that runs a trial (`DaemonId::json`),
/// written when the trial starts: RUNNING trials without it belong to someone else (an Optuna
/// script) and are never reconciled by sweepd.
pub const OWNER_ATTR: &str = "sweepd:daemon";

/// A WAITING trial looked at, not yet claimed.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub trial_id: i64,
    pub number: i64,
    /// The params it already has, in this study's space.
    pub fixed: Params,
    /// Names that already have a `trial_params` row.
    present: Vec<String>,
    pub problem: Option<String>,
    /// Earlier failed attempts of these params by failure kind (`sweepd:attempts`).
    pub attempts: Attempts,
}

/// Who runs a claimed trial; written as `sweepd:` system attributes.
#[derive(Debug, Clone, Copy)]
pub struct Runner {
    pub worker_id: i64,
    pub pid: u32,
}

/// One trial as the CLI shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrialView {
    pub trial_id: i64,
    pub number: i64,
    pub state: String,
    /// Finite values as numbers; infinities as the strings "inf"/"-inf".
    pub value: Value,
    /// External form: the float, the int, the categorical choice.
    pub params: serde_json::Map<String, Value>,
    pub datetime_start: Option<String>,
    pub datetime_complete: Option<String>,
    pub worker_id: Option<i64>,
    pub worker_pid: Option<i64>,
    pub fail_kind: Option<String>,
    pub fail_reason: Option<String>,
}

/// The columns [`Store::refresh_tally`] reads for each trial.
const TALLY_COLUMNS: &str = "SELECT t.trial_id, t.state, \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as'), \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key IN ('sweepd:daemon', 'sweepd:worker_id')) \
     FROM trials t";

/// The sqlx pool over one SQLite file.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    path: PathBuf,
    /// Group commit: makes lazy commits durable (see [`Store::sync`]).
    syncer: std::sync::Arc<sync::Syncer>,
}

/// A study row.
#[derive(Debug, Clone)]
pub struct Study {
    pub id: i64,
    pub name: String,
    pub direction: Direction,
}

fn sql_error(path: &Path, source: sqlx::Error) -> StoreError {
    StoreError::Sql {
        path: path.to_owned(),
        source,
    }
}

/// Attempts at applying migrations while other writers keep the database busy.
const MIGRATE_BUSY_RETRIES: u32 = 100;

/// Whether a migration failed only because another connection was writing (SQLITE_BUSY and its
/// extended codes, such as BUSY_SNAPSHOT).
fn is_busy(e: &sqlx::migrate::MigrateError) -> bool {
    match e {
        sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(d))
        | sqlx::migrate::MigrateError::ExecuteMigration(sqlx::Error::Database(d), _) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

/// The same hint for an I/O error of sweepd's own (syncing the log).
fn io_hint(path: &Path) -> String {
    file_system_state(path)
        .map(|h| format!(" ({h})"))
        .unwrap_or_default()
}

/// " (the file system … is read-only)" when a database or I/O error has that cause.
fn fs_hint(path: &Path, source: &sqlx::Error) -> String {
    match source {
        sqlx::Error::Database(_) | sqlx::Error::Io(_) => file_system_state(path)
            .map(|h| format!(" ({h})"))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// "read-only file system" or "no space left" for the file system holding `path`, if so.
pub fn file_system_state(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only fills the zeroed struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let read_only = || {
        Some(format!(
            "the file system holding {} is read-only",
            dir.display()
        ))
    };
    let full = || {
        Some(format!(
            "no space left on the file system holding {}",
            dir.display()
        ))
    };
    if st.f_flag & libc::ST_RDONLY != 0 {
        return read_only();
    }
    // A file system in an emergency read-only state (ext4 after an error) does not say so in
    // statvfs: a write does.
    let probe = dir.join(".sweepd-write-probe");
    let result = std::fs::write(&probe, b"probe");
    let _ = std::fs::remove_file(&probe);
    match result.map_err(|e| e.raw_os_error()) {
        Err(Some(libc::EROFS)) => read_only(),
        Err(Some(libc::ENOSPC)) => full(),
        _ if st.f_bavail == 0 => full(),
        _ => None,
    }
}

/// Creates a missing database file readable by the service's user and group only (0640, or
/// less under a stricter umask): it holds the stderr tails of trials. SQLite gives the `-wal`
/// and `-shm` files the database's permission bits, so they follow. Changing the process umask
/// instead would also change it for the workers, whose files (checkpoints) are the user's
/// business. A file that exists is left as its owner made it (`run` warns when it is
/// world-readable).
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(path)
    {
        // An empty file is an empty SQLite database.
        Ok(_) => Ok(()),
        // Another process created it a moment ago: theirs to keep.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether users other than the owner and group can read the database file.
pub fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

/// The timestamp text Optuna (through SQLAlchemy) writes for DATETIME columns: local time.
pub fn now_text() -> String {
    chrono::Local::now()
        .naive_local()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
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

fn decode_value(value: Option<f64>, value_type: &str) -> Value {
    match value_type {
        "INF_POS" => json!("inf"),
        "INF_NEG" => json!("-inf"),
        "NAN" => json!("nan"),
        _ => value.map(|v| json!(v)).unwrap_or(Value::Null),
    }
}

/// SQLite stores a REAL that equals an integer as that integer, so a -0.0 written to Optuna's
/// float columns (`trial_values`, `trial_intermediate_values`, `trial_params`) reads back as 0.0,
/// for Optuna as for us. sweepd keeps the sign of such zeros in this trial system attribute and
/// applies it wherever it reads its own values back, so what a worker sent is what sweepd shows.
const NEGATIVE_ZERO_ATTR: &str = "sweepd:negative_zero";

/// The content of [`NEGATIVE_ZERO_ATTR`]: which of a trial's stored zeros are really -0.0.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct NegativeZeros {
    /// Objective indices of `trial_values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    values: Vec<i64>,
    /// Steps of `trial_intermediate_values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    intermediate: Vec<i64>,
    /// Names of float params.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    params: Vec<String>,
}

impl NegativeZeros {
    fn parse(json: Option<&str>) -> NegativeZeros {
        json.and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default()
    }

    /// The value of objective `objective` as the worker sent it.
    fn value(&self, objective: i64, v: f64) -> f64 {
        restore_sign(v, self.values.contains(&objective))
    }

    /// Float params as the worker received them.
    fn params(&self, params: &mut Params) {
        for name in &self.params {
            if let Some(ParamValue::Float(x)) = params.get_mut(name) {
                *x = restore_sign(*x, true);
            }
        }
    }
}

fn is_negative_zero(v: f64) -> bool {
    v == 0.0 && v.is_sign_negative()
}

fn restore_sign(v: f64, negative: bool) -> f64 {
    if negative && v == 0.0 {
        -0.0
    } else {
        v
    }
}

impl Store {
    /// Opens (creating if needed) the database for `sweepd run`: WAL, migrations applied.
    pub async fn open(path: &Path) -> Result<Store> {
        let store = Store::connect(path, true).await?;
        store.check_schema().await?;
        let migrator = sqlx::migrate!("./migrations");
        let mut attempt = 0u32;
        loop {
            match migrator.run(&store.pool).await {
                Ok(()) => break,
                // A migration whose statements only read (IF NOT EXISTS on Optuna's existing
                // tables) before it writes its record cannot wait for the write lock: SQLite
                // answers "busy" at once when another writer (an Optuna script optimizing the
                // study) committed after that read. A fresh attempt takes a fresh snapshot.
                Err(e) if is_busy(&e) && attempt < MIGRATE_BUSY_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt.min(10))))
                        .await;
                }
                Err(source) => {
                    return Err(StoreError::Migrate {
                        path: path.to_owned(),
                        source,
                    })
                }
            }
        }
        store.ensure_mirror().await?;
        Ok(store)
    }

    /// Starts a multi-statement write transaction. It commits lazily (`synchronous = NORMAL`):
    /// whoever reports what it wrote (a trial started or finished) waits for [`Store::sync`]
    /// first. Taking the write lock at BEGIN means no other writer can slip in between what the
    /// transaction reads and what it writes.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.err())
    }

    /// Returns once everything committed before the call survives a power loss (see
    /// `store::sync`: one sync of the write-ahead log, shared by every caller waiting).
    pub async fn sync(&self) -> Result<()> {
        self.syncer.sync().await.map_err(|source| StoreError::Sync {
            path: self.path.clone(),
            source,
        })
    }

    /// Opens an existing database without changing it, for `status`, `trials` and `best`.
    pub async fn open_existing(path: &Path) -> Result<Store> {
        if !path.exists() {
            return Err(StoreError::Missing(path.to_owned()));
        }
        let store = Store::connect(path, false).await?;
        store.check_schema().await?;
        if !store.has_table("studies").await? {
            return Err(StoreError::NoSchema(path.to_owned()));
        }
        Ok(store)
    }

    async fn has_table(&self, table: &str) -> Result<bool> {
        sqlx::query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
            .bind(table)
            .fetch_optional(&self.pool)
            .await
            .map(|r| r.is_some())
            .map_err(self.err())
    }

    async fn connect(path: &Path, create: bool) -> Result<Store> {
        if create {
            create_private(path).map_err(|e| sql_error(path, sqlx::Error::Io(e)))?;
        }
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            // SQLite's default 2 MiB page cache is outgrown around 10k trials, and every trial
            // then re-reads index pages; 64 MiB holds the hot part of a 100k-trial study.
            .pragma("cache_size", "-65536");
        // One connection: sweepd's writes are serialised anyway, and a single connection
        // cannot deadlock against itself on SQLite's one write lock.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .map_err(|source| sql_error(path, source))?;
        Ok(Store {
            pool,
            path: path.to_owned(),
            syncer: std::sync::Arc::new(sync::Syncer::new(path)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self) -> impl Fn(sqlx::Error) -> StoreError + '_ {
        move |source| sql_error(&self.path, source)
    }

    /// Refuses a database whose Optuna schema is another version than the one we write.
    async fn check_schema(&self) -> Result<()> {
        let has = |table: &'static str| async move {
            sqlx::query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
                .bind(table)
                .fetch_optional(&self.pool)
                .await
                .map(|r| r.is_some())
        };
        if has("alembic_version").await.map_err(self.err())? {
            let versions: Vec<String> =
                sqlx::query_scalar("SELECT version_num FROM alembic_version")
                    .fetch_all(&self.pool)
                    .await
                    .map_err(self.err())?;
            if versions.iter().any(|v| v != ALEMBIC_HEAD) {
                return Err(StoreError::IncompatibleSchema {
                    path: self.path.clone(),
                    found: format!("alembic revision {}", versions.join(", ")),
                });
            }
        }
        if has("version_info").await.map_err(self.err())? {
            let v: Option<i64> = sqlx::query_scalar(
                "SELECT schema_version FROM version_info WHERE version_info_id = 1",
            )
            .fetch_optional(&self.pool)
            .await
            .map_err(self.err())?;
            if let Some(v) = v.filter(|v| *v != SCHEMA_VERSION) {
                return Err(StoreError::IncompatibleSchema {
                    path: self.path.clone(),
                    found: format!("schema version {v}"),
                });
            }
        }
        Ok(())
    }

    /// Finds the study, or creates it the way `optuna.create_study` does.
    pub async fn ensure_study(&self, name: &str, direction: Direction) -> Result<Study> {
        let mut tx = self.begin_write().await?;
        let existing: Option<i64> =
            sqlx::query_scalar("SELECT study_id FROM studies WHERE study_name = ?")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.err())?;
        let id = match existing {
            Some(id) => {
                let found: Option<String> = sqlx::query_scalar(
                    "SELECT direction FROM study_directions WHERE study_id = ? AND objective = 0",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.err())?;
                if let Some(found) = found.filter(|f| f != direction.as_optuna()) {
                    return Err(StoreError::DirectionMismatch {
                        path: self.path.clone(),
                        name: name.to_owned(),
                        found,
                        wanted: direction.as_optuna().to_owned(),
                    });
                }
                id
            }
            None => {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO studies (study_name) VALUES (?) RETURNING study_id",
                )
                .bind(name)
                .fetch_one(&mut *tx)
                .await
                .map_err(self.err())?;
                sqlx::query(
                    "INSERT INTO study_directions (direction, study_id, objective) VALUES (?, ?, 0)",
                )
                .bind(direction.as_optuna())
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(self.err())?;
                id
            }
        };
        tx.commit().await.map_err(self.err())?;
        Ok(Study {
            id,
            name: name.to_owned(),
            direction,
        })
    }

    /// Looks a study up without creating it (read-only commands).
    pub async fn find_study(&self, name: &str) -> Result<Study> {
        let row = sqlx::query(
            "SELECT s.study_id, d.direction FROM studies s \
             LEFT JOIN study_directions d ON d.study_id = s.study_id AND d.objective = 0 \
             WHERE s.study_name = ?",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.err())?
        .ok_or_else(|| StoreError::NoStudy {
            path: self.path.clone(),
            name: name.to_owned(),
        })?;
        let dir: Option<String> = row.get(1);
        Ok(Study {
            id: row.get(0),
            name: name.to_owned(),
            direction: if dir.as_deref() == Some("MAXIMIZE") {
                Direction::Maximize
            } else {
                Direction::Minimize
            },
        })
    }

    /// Trial counts by state; FAIL trials with a retry copy are counted apart.
    pub async fn counts(&self, study: &Study) -> Result<Counts> {
        let rows = sqlx::query(
            "SELECT t.state, COUNT(*), SUM(CASE WHEN a.trial_id IS NULL THEN 0 ELSE 1 END) \
             FROM trials t LEFT JOIN trial_system_attributes a \
               ON a.trial_id = t.trial_id AND a.key = 'sweepd:retried_as' \
             WHERE t.study_id = ? GROUP BY t.state",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        let mut c = Counts::default();
        for row in rows {
            let state: String = row.get(0);
            let n = row.get::<i64, _>(1) as u64;
            match &state.parse::<TrialState>().ok() {
                Some(TrialState::Running) => c.running = n,
                Some(TrialState::Waiting) => c.waiting = n,
                Some(TrialState::Complete) => c.complete = n,
                Some(TrialState::Pruned) => c.pruned = n,
                Some(TrialState::Fail) => {
                    c.fail = n;
                    c.fail_retried = row.get::<Option<i64>, _>(2).unwrap_or(0) as u64;
                }
                None => {}
            }
        }
        Ok(c)
    }

    /// Brings `tally` up to date: the study's trials created since the last refresh, and those
    /// that were not final then. Cheap (it reads what changed, not the study), so the budget
    /// can be checked against the database before every start.
    pub async fn refresh_tally(&self, study: &Study, tally: &mut Tally) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(self.err())?;
        self.refresh_tally_on(&mut conn, study, tally).await
    }

    async fn refresh_tally_on(
        &self,
        conn: &mut sqlx::SqliteConnection,
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
            "{TALLY_COLUMNS} WHERE t.trial_id > ? AND t.study_id = ? ORDER BY t.trial_id"
        ))
        .bind(tally.seen())
        .bind(study.id)
        .fetch_all(&mut *conn)
        .await
        .map_err(self.err())?;
        for row in &new {
            let (id, state, retried, sweepd) = read(row);
            tally.apply(id, state, retried, sweepd);
        }
        let open: Vec<i64> = tally.open();
        for chunk in open.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!("{TALLY_COLUMNS} WHERE t.trial_id IN ({marks})");
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(id);
            }
            let rows = q.fetch_all(&mut *conn).await.map_err(self.err())?;
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

    /// Every trial of the study as the sampler learns from it: typed params, state, value and
    /// Optuna's `constraints`. Read once at start; afterwards the supervisor keeps it current.
    pub async fn history(&self, study: &Study) -> Result<Vec<TrialRecord>> {
        let rows = sqlx::query(
            "SELECT t.trial_id, t.number, t.state, v.value, v.value_type FROM trials t \
             LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0 \
             WHERE t.study_id = ? ORDER BY t.trial_id",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        let mut records: Vec<TrialRecord> = Vec::with_capacity(rows.len());
        let mut index = std::collections::HashMap::with_capacity(rows.len());
        for row in rows {
            let Some(state) = row.get::<&str, _>(2).parse::<TrialState>().ok() else {
                continue;
            };
            let vt: Option<String> = row.get(4);
            let value = match vt.as_deref() {
                Some("FINITE") => row.get::<Option<f64>, _>(3),
                Some("INF_POS") => Some(f64::INFINITY),
                Some("INF_NEG") => Some(f64::NEG_INFINITY),
                _ => None,
            };
            index.insert(row.get::<i64, _>(0), records.len());
            records.push(TrialRecord {
                number: row.get::<Option<i64>, _>(1).unwrap_or(0),
                params: Params::new(),
                state,
                value,
                constraints: Vec::new(),
            });
        }
        let params = sqlx::query(
            "SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json \
             FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id WHERE t.study_id = ?",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        for row in params {
            let Some(&i) = index.get(&row.get::<i64, _>(0)) else {
                continue;
            };
            if let Some(v) = Distribution::from_optuna_json(row.get(3))
                .ok()
                .and_then(|d| d.from_internal(row.get(2)))
            {
                records[i].params.insert(row.get(1), v);
            }
        }
        let attrs = sqlx::query(
            "SELECT a.trial_id, a.key, a.value_json FROM trial_system_attributes a \
             JOIN trials t ON t.trial_id = a.trial_id \
             WHERE t.study_id = ? AND a.key IN ('constraints', ?)",
        )
        .bind(study.id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        for row in attrs {
            let Some(&i) = index.get(&row.get::<i64, _>(0)) else {
                continue;
            };
            let record = &mut records[i];
            if row.get::<&str, _>(1) == NEGATIVE_ZERO_ATTR {
                let zeros = NegativeZeros::parse(Some(row.get(2)));
                record.value = record.value.map(|v| zeros.value(0, v));
                zeros.params(&mut record.params);
            } else if let Ok(Value::Array(cs)) = serde_json::from_str::<Value>(row.get(2)) {
                record.constraints = cs.iter().filter_map(Value::as_f64).collect();
            }
        }
        Ok(records)
    }

    /// The study's RUNNING trials that a sweepd daemon started, with that daemon (`None` for
    /// trials of sweepd versions that did not record it: they only named the worker). RUNNING
    /// trials of anyone else (an Optuna script) are not listed: sweepd leaves them alone.
    pub async fn sweepd_running(&self, study: &Study) -> Result<Vec<(i64, Option<DaemonId>)>> {
        let rows = sqlx::query(
            "SELECT t.trial_id, \
               (SELECT a.value_json FROM trial_system_attributes a \
                 WHERE a.trial_id = t.trial_id AND a.key = ?) \
             FROM trials t WHERE t.study_id = ? AND t.state = 'RUNNING' AND EXISTS \
               (SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id \
                 AND a.key IN (?, 'sweepd:worker_id')) \
             ORDER BY t.trial_id",
        )
        .bind(OWNER_ATTR)
        .bind(study.id)
        .bind(OWNER_ATTR)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(rows
            .iter()
            .map(|r| {
                let owner = r
                    .get::<Option<String>, _>(1)
                    .and_then(|j| serde_json::from_str::<Value>(&j).ok())
                    .and_then(|v| DaemonId::from_json(&v));
                (r.get(0), owner)
            })
            .collect())
    }

    /// Marks a RUNNING trial FAIL (kind `interrupted`) and enqueues a WAITING copy of it, in one
    /// transaction. Returns the trial's number, or `None` if it was no longer RUNNING.
    pub async fn interrupt(
        &self,
        study: &Study,
        trial_id: i64,
        reason: &str,
    ) -> Result<Option<i64>> {
        let failure = Failure {
            kind: FailureKind::Interrupted,
            reason: reason.to_owned(),
            stderr_tail: None,
            retry: true,
        };
        self.finish(study, trial_id, &Finish::Fail(failure), &[])
            .await
    }

    /// Re-enqueues a trial already recorded as a final FAIL (a WAITING copy, as a retry is),
    /// so that it no longer spends the budget. Returns the copy's number, or `None` when the
    /// trial is not a FAIL without a copy.
    pub async fn requeue_failed(&self, study: &Study, trial_id: i64) -> Result<Option<i64>> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT t.number, (SELECT a.value_json FROM trial_system_attributes a \
               WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:fail_kind') \
             FROM trials t WHERE t.trial_id = ? AND t.state = 'FAIL' AND NOT EXISTS \
               (SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id \
                 AND a.key = 'sweepd:retried_as')",
        )
        .bind(trial_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.err())?;
        let Some(row) = row else {
            tx.rollback().await.map_err(self.err())?;
            return Ok(None);
        };
        let number: i64 = row.get(0);
        let kind = row
            .get::<Option<String>, _>(1)
            .and_then(|k| serde_json::from_str::<FailureKind>(&k).ok())
            .unwrap_or(FailureKind::UserError);
        let copy = self
            .enqueue_retry(&mut tx, study, trial_id, number, kind)
            .await?;
        self.set_attr(&mut tx, trial_id, "sweepd:retried_as", &json!(copy))
            .await?;
        tx.commit().await.map_err(self.err())?;
        Ok(Some(copy))
    }

    /// The oldest WAITING trial and the params it already has (a retry copy's, or Optuna's
    /// `fixed_params` from `enqueue_trial`), without claiming it: the supervisor first decides
    /// where it can run. `problem` is set when a given param is outside the search space.
    pub async fn peek_waiting(
        &self,
        study: &Study,
        space: &SearchSpace,
        exclude: &[i64],
    ) -> Result<Option<Waiting>> {
        // Trials already in the supervisor's line are skipped (a short list).
        let skip = vec!["?"; exclude.len()].join(", ");
        let sql = format!(
            "SELECT trial_id, number FROM trials WHERE study_id = ? AND state = 'WAITING' {} \
             ORDER BY trial_id LIMIT 1",
            if exclude.is_empty() {
                String::new()
            } else {
                format!("AND trial_id NOT IN ({skip})")
            }
        );
        let mut q = sqlx::query(&sql).bind(study.id);
        for id in exclude {
            q = q.bind(id);
        }
        let Some(row) = q.fetch_optional(&self.pool).await.map_err(self.err())? else {
            return Ok(None);
        };
        let (trial_id, number): (i64, i64) = (row.get(0), row.get(1));
        let mut w = Waiting {
            trial_id,
            number,
            fixed: Params::new(),
            present: Vec::new(),
            problem: None,
            attempts: Attempts::new(),
        };
        let rows = sqlx::query(
            "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id = ?",
        )
        .bind(trial_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        for row in rows {
            let name: String = row.get(0);
            w.present.push(name.clone());
            let Some(spec) = space.get(&name) else {
                continue;
            };
            let theirs = Distribution::from_optuna_json(row.get(2)).ok();
            let value = theirs
                .as_ref()
                .and_then(|d| d.from_internal(row.get(1)).map(|v| d.external(&v)))
                .and_then(|ext| spec.dist.from_external(&ext));
            match value {
                Some(v) => {
                    w.fixed.insert(name, v);
                }
                None => w.problem = Some(format!("param `{name}` is outside the search space")),
            }
        }
        let attrs = sqlx::query(
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = ? \
             AND key IN ('sweepd:attempts', 'fixed_params', ?)",
        )
        .bind(trial_id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        let mut fixed_attr = None;
        for row in attrs {
            let text: String = row.get(1);
            match row.get::<&str, _>(0) {
                "sweepd:attempts" => w.attempts = serde_json::from_str(&text).unwrap_or_default(),
                "fixed_params" => fixed_attr = Some(text),
                _ => NegativeZeros::parse(Some(&text)).params(&mut w.fixed),
            }
        }
        if let Some(Ok(Value::Object(map))) = fixed_attr.map(|t| serde_json::from_str::<Value>(&t))
        {
            for (name, ext) in map {
                if w.fixed.contains_key(&name) {
                    continue;
                }
                match space.get(&name).map(|s| s.dist.from_external(&ext)) {
                    Some(Some(v)) => {
                        w.fixed.insert(name, v);
                    }
                    Some(None) => {
                        w.problem = Some(format!(
                            "enqueued param `{name}` = {ext} is outside the search space"
                        ))
                    }
                    None => {} // a param this study does not have: ignored, as Optuna does
                }
            }
        }
        Ok(Some(w))
    }

    /// Starts a trial, if the budget has room: checked in the start's own transaction against
    /// the study's trials as they are then, so no other writer can start one in between.
    /// `Taken` when another process claimed the WAITING trial first.
    pub async fn start(
        &self,
        space: &SearchSpace,
        op: StartOp<'_>,
        ctx: StartCtx<'_>,
    ) -> Result<Started> {
        let mut tx = self.begin_write().await?;
        let started = self.start_in(&mut tx, space, op, ctx).await?;
        match started {
            Started::Yes(_) => tx.commit().await.map_err(self.err())?,
            _ => tx.rollback().await.map_err(self.err())?,
        }
        Ok(started)
    }

    /// Finishes a RUNNING trial and starts the next one in one durable commit: when a slot's
    /// trial ends it usually starts another at once, and one sync of the log then serves both.
    /// The finish is written whatever becomes of the start.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_and_start(
        &self,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
        space: &SearchSpace,
        op: StartOp<'_>,
        ctx: StartCtx<'_>,
    ) -> Result<(Option<i64>, Started)> {
        let mut tx = self.begin_write().await?;
        let finished = self.finish_in(&mut tx, study, trial_id, how, attrs).await?;
        let started = self.start_in(&mut tx, space, op, ctx).await?;
        tx.commit().await.map_err(self.err())?;
        Ok((finished, started))
    }

    /// The writes of [`Store::start`], in `tx`. Writes nothing unless it returns `Yes`.
    async fn start_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        space: &SearchSpace,
        op: StartOp<'_>,
        ctx: StartCtx<'_>,
    ) -> Result<Started> {
        self.refresh_tally_on(tx, ctx.study, ctx.tally).await?;
        if !ctx.tally.room(ctx.budget) {
            return Ok(Started::NoRoom);
        }
        let (claimed, skip) = match op {
            StartOp::New(params) => {
                let (trial_id, number) =
                    Self::insert_trial(tx, ctx.study, TrialState::Running, &self.path).await?;
                ctx.tally.started_new(trial_id);
                let claimed = Claimed {
                    trial_id,
                    number,
                    params: params.clone(),
                    attempts: Attempts::new(),
                };
                (claimed, &[][..])
            }
            StartOp::Claim(w, params) => {
                let claimed = sqlx::query(
                    "UPDATE trials SET state = 'RUNNING', datetime_start = ? \
                     WHERE trial_id = ? AND state = 'WAITING'",
                )
                .bind(now_text())
                .bind(w.trial_id)
                .execute(&mut **tx)
                .await
                .map_err(self.err())?
                .rows_affected();
                if claimed != 1 {
                    return Ok(Started::Taken);
                }
                ctx.tally.started(w.trial_id);
                let claimed = Claimed {
                    trial_id: w.trial_id,
                    number: w.number,
                    params: params.clone(),
                    attempts: w.attempts.clone(),
                };
                (claimed, &w.present[..])
            }
        };
        self.set_attr(tx, claimed.trial_id, OWNER_ATTR, &ctx.owner.json())
            .await?;
        for (name, v) in &claimed.params {
            if skip.contains(name) {
                continue;
            }
            let spec = space.get(name).expect("sampled params are in the space");
            self.insert_param(tx, claimed.trial_id, name, &spec.dist, v)
                .await?;
        }
        Ok(Started::Yes(claimed))
    }

    /// Records which worker runs a trial (`sweepd:worker_id`, `sweepd:worker_pid`) and on which
    /// GPU, once the worker is known.
    pub async fn set_runner(&self, trial_id: i64, runner: Runner, gpu: Option<u32>) -> Result<()> {
        let mut tx = self.pool.begin().await.map_err(self.err())?;
        self.write_runner(&mut tx, trial_id, runner).await?;
        if let Some(gpu) = gpu {
            self.set_attr(&mut tx, trial_id, "sweepd:gpu", &json!(gpu))
                .await?;
        }
        tx.commit().await.map_err(self.err())?;
        Ok(())
    }

    /// The number the next trial created in this study will get (a hint for seeding).
    pub async fn next_number(&self, study: &Study) -> Result<i64> {
        sqlx::query_scalar("SELECT COALESCE(MAX(number), -1) + 1 FROM trials WHERE study_id = ?")
            .bind(study.id)
            .fetch_one(&self.pool)
            .await
            .map_err(self.err())
    }

    /// Inserts a trial row and gives it Optuna's number (the count of the study's earlier
    /// trials), computed inside the write transaction so concurrent writers never share one.
    async fn insert_trial(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        study: &Study,
        state: TrialState,
        path: &Path,
    ) -> Result<(i64, i64)> {
        let err = |source| sql_error(path, source);
        let start = (state == TrialState::Running).then(now_text);
        // Optuna's number is the count of the study's earlier trials; numbers are dense, so
        // that is MAX(number) + 1: an index lookup, computed in the insert itself, inside the
        // write transaction, so concurrent writers never share a number.
        let row = sqlx::query(
            "INSERT INTO trials (number, study_id, state, datetime_start) \
             SELECT COALESCE(MAX(number), -1) + 1, ?, ?, ? FROM trials WHERE study_id = ? \
             RETURNING trial_id, number",
        )
        .bind(study.id)
        .bind(state.as_str())
        .bind(start)
        .bind(study.id)
        .fetch_one(&mut **tx)
        .await
        .map_err(err)?;
        let (trial_id, number): (i64, i64) = (row.get(0), row.get(1));
        Ok((trial_id, number))
    }

    async fn insert_param(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        trial_id: i64,
        name: &str,
        dist: &Distribution,
        v: &ParamValue,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             VALUES (?, ?, ?, ?)",
        )
        .bind(trial_id)
        .bind(name)
        .bind(dist.to_internal(v))
        .bind(dist.optuna_json())
        .execute(&mut **tx)
        .await
        .map_err(self.err())?;
        if matches!(v, ParamValue::Float(x) if is_negative_zero(*x)) {
            self.note_negative_zeros(tx, trial_id, |z| z.params.push(name.to_owned()))
                .await?;
        }
        Ok(())
    }

    async fn write_runner(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        trial_id: i64,
        runner: Runner,
    ) -> Result<()> {
        self.set_attr(tx, trial_id, "sweepd:worker_id", &json!(runner.worker_id))
            .await?;
        self.set_attr(tx, trial_id, "sweepd:worker_pid", &json!(runner.pid))
            .await
    }

    /// Adds to a trial's record of negative zeros (see [`NEGATIVE_ZERO_ATTR`]).
    async fn note_negative_zeros(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        trial_id: i64,
        add: impl FnOnce(&mut NegativeZeros),
    ) -> Result<()> {
        let old: Option<String> = sqlx::query_scalar(
            "SELECT value_json FROM trial_system_attributes WHERE trial_id = ? AND key = ?",
        )
        .bind(trial_id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_optional(&mut **tx)
        .await
        .map_err(self.err())?;
        let mut zeros = NegativeZeros::parse(old.as_deref());
        add(&mut zeros);
        let value = serde_json::to_value(&zeros).expect("serializable");
        self.set_attr(tx, trial_id, NEGATIVE_ZERO_ATTR, &value)
            .await
    }

    async fn set_attr(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        trial_id: i64,
        key: &str,
        value: &Value,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?, ?, ?) \
             ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
        )
        .bind(trial_id)
        .bind(key)
        .bind(value.to_string())
        .execute(&mut **tx)
        .await
        .map_err(self.err())?;
        Ok(())
    }

    /// Records an intermediate value. A repeated step keeps the first value, as Optuna does.
    pub async fn report(&self, trial_id: i64, step: i64, value: f64) -> Result<()> {
        let (v, t) = encode_value(value);
        let insert = sqlx::query(
            "INSERT INTO trial_intermediate_values \
             (trial_id, step, intermediate_value, intermediate_value_type) VALUES (?, ?, ?, ?) \
             ON CONFLICT (trial_id, step) DO NOTHING",
        )
        .bind(trial_id)
        .bind(step)
        .bind(v)
        .bind(t);
        if !is_negative_zero(value) {
            insert.execute(&self.pool).await.map_err(self.err())?;
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(self.err())?;
        if insert
            .execute(&mut *tx)
            .await
            .map_err(self.err())?
            .rows_affected()
            == 1
        {
            self.note_negative_zeros(&mut tx, trial_id, |z| z.intermediate.push(step))
                .await?;
        }
        tx.commit().await.map_err(self.err())?;
        Ok(())
    }

    /// Ends a RUNNING trial, in one transaction with everything that goes with it (value,
    /// failure attributes, the retry copy). Returns the trial's number, or `None` if the trial
    /// was no longer RUNNING (already finished: never finish a trial twice).
    pub async fn finish(
        &self,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
    ) -> Result<Option<i64>> {
        let mut tx = self.begin_write().await?;
        let number = self.finish_in(&mut tx, study, trial_id, how, attrs).await?;
        match number {
            Some(_) => tx.commit().await.map_err(self.err())?,
            None => tx.rollback().await.map_err(self.err())?,
        }
        Ok(number)
    }

    /// The writes of [`Store::finish`], in `tx`. Writes nothing when it returns `None`.
    async fn finish_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
    ) -> Result<Option<i64>> {
        let state = match how {
            Finish::Complete(_) => TrialState::Complete,
            Finish::Pruned => TrialState::Pruned,
            Finish::Fail(_) => TrialState::Fail,
        };
        // The conditional update is what makes finishing happen once: `None` if not RUNNING.
        let number: Option<i64> = sqlx::query_scalar(
            "UPDATE trials SET state = ?, datetime_complete = ? \
             WHERE trial_id = ? AND state = 'RUNNING' RETURNING number",
        )
        .bind(state.as_str())
        .bind(now_text())
        .bind(trial_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(self.err())?;
        let Some(number) = number else {
            return Ok(None);
        };
        let value = match how {
            Finish::Complete(v) => Some(*v),
            // Optuna records a pruned trial's last intermediate value as its value.
            Finish::Pruned => sqlx::query(
                "SELECT intermediate_value, intermediate_value_type FROM trial_intermediate_values \
                 WHERE trial_id = ? ORDER BY step DESC LIMIT 1",
            )
            .bind(trial_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(self.err())?
            .and_then(|r| match r.get::<String, _>(1).as_str() {
                "FINITE" => r.get::<Option<f64>, _>(0),
                "INF_POS" => Some(f64::INFINITY),
                "INF_NEG" => Some(f64::NEG_INFINITY),
                _ => None,
            }),
            Finish::Fail(_) => None,
        };
        if let Some(v) = value {
            let (v, t) = encode_value(v);
            sqlx::query(
                "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, 0, ?, ?)",
            )
            .bind(trial_id)
            .bind(v)
            .bind(t)
            .execute(&mut **tx)
            .await
            .map_err(self.err())?;
        }
        if value.is_some_and(is_negative_zero) {
            self.note_negative_zeros(tx, trial_id, |z| z.values.push(0))
                .await?;
        }
        for (key, value) in attrs {
            self.set_attr(tx, trial_id, key, value).await?;
        }
        if let Finish::Fail(f) = how {
            self.set_attr(tx, trial_id, "fail_reason", &json!(f.reason))
                .await?;
            self.set_attr(tx, trial_id, "sweepd:fail_kind", &json!(f.kind))
                .await?;
            if let Some(tail) = &f.stderr_tail {
                self.set_attr(tx, trial_id, "sweepd:stderr_tail", &json!(tail))
                    .await?;
            }
            if f.retry {
                let copy = self
                    .enqueue_retry(tx, study, trial_id, number, f.kind)
                    .await?;
                self.set_attr(tx, trial_id, "sweepd:retried_as", &json!(copy))
                    .await?;
            }
        }
        Ok(Some(number))
    }

    /// A WAITING copy of a failed trial, with the system attributes Optuna's
    /// RetryFailedTrialCallback writes (`failed_trial`: the first attempt's number,
    /// `retry_history`: every failed attempt's number). Returns the copy's number.
    async fn enqueue_retry(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        study: &Study,
        failed_id: i64,
        failed_number: i64,
        kind: FailureKind,
    ) -> Result<i64> {
        let attrs = sqlx::query(
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = ? \
             AND key IN ('failed_trial', 'retry_history', 'fixed_params', 'sweepd:attempts', ?)",
        )
        .bind(failed_id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_all(&mut **tx)
        .await
        .map_err(self.err())?;
        let mut first = failed_number;
        let mut history: Vec<Value> = Vec::new();
        let mut fixed = None;
        let mut attempts = Attempts::new();
        let mut zero_params = Vec::new();
        for row in attrs {
            let key: String = row.get(0);
            let value: Value = serde_json::from_str(row.get(1)).unwrap_or(Value::Null);
            match key.as_str() {
                "failed_trial" => first = value.as_i64().unwrap_or(first),
                "retry_history" => history = value.as_array().cloned().unwrap_or_default(),
                "sweepd:attempts" => attempts = serde_json::from_value(value).unwrap_or_default(),
                "fixed_params" => fixed = Some(value),
                _ => zero_params = NegativeZeros::parse(Some(row.get(1))).params,
            }
        }
        *attempts.entry(kind).or_default() += 1;
        history.push(json!(failed_number));
        let (copy_id, copy_number) =
            Self::insert_trial(tx, study, TrialState::Waiting, &self.path).await?;
        sqlx::query(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             SELECT ?, param_name, param_value, distribution_json FROM trial_params WHERE trial_id = ?",
        )
        .bind(copy_id)
        .bind(failed_id)
        .execute(&mut **tx)
        .await
        .map_err(self.err())?;
        self.set_attr(tx, copy_id, "failed_trial", &json!(first))
            .await?;
        self.set_attr(tx, copy_id, "retry_history", &Value::Array(history))
            .await?;
        if let Some(fixed) = fixed {
            self.set_attr(tx, copy_id, "fixed_params", &fixed).await?;
        }
        self.set_attr(tx, copy_id, "sweepd:attempts", &json!(attempts))
            .await?;
        if !zero_params.is_empty() {
            self.note_negative_zeros(tx, copy_id, |z| z.params = zero_params)
                .await?;
        }
        Ok(copy_number)
    }

    /// Trials for display, oldest first; optionally only one state and only the last `limit`.
    pub async fn trials(
        &self,
        study: &Study,
        state: Option<TrialState>,
        limit: Option<u64>,
    ) -> Result<Vec<TrialView>> {
        let mut sql = format!("{TRIAL_COLUMNS} WHERE t.study_id = ?");
        if state.is_some() {
            sql.push_str(" AND t.state = ?");
        }
        sql.push_str(" ORDER BY t.number DESC");
        if limit.is_some() {
            sql.push_str(" LIMIT ?");
        }
        let mut q = sqlx::query(&sql).bind(study.id);
        if let Some(s) = state {
            q = q.bind(s.as_str());
        }
        if let Some(l) = limit {
            q = q.bind(l as i64);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(self.err())?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows.into_iter().rev() {
            out.push(self.view(&row).await?);
        }
        Ok(out)
    }

    /// The best COMPLETE trial for the study's direction.
    pub async fn best(&self, study: &Study) -> Result<Option<TrialView>> {
        // INF_NEG/INF_POS rows have a NULL value: order them by type first.
        let order = match study.direction {
            Direction::Minimize => {
                "CASE v.value_type WHEN 'INF_NEG' THEN 0 WHEN 'FINITE' THEN 1 ELSE 2 END, v.value ASC"
            }
            Direction::Maximize => {
                "CASE v.value_type WHEN 'INF_POS' THEN 0 WHEN 'FINITE' THEN 1 ELSE 2 END, v.value DESC"
            }
        };
        let sql = format!(
            "SELECT t.trial_id FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id \
             AND v.objective = 0 WHERE t.study_id = ? AND t.state = 'COMPLETE' \
             ORDER BY {order}, t.number LIMIT 1"
        );
        let id: Option<i64> = sqlx::query_scalar(&sql)
            .bind(study.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.err())?;
        match id {
            Some(id) => self.trial(id).await.map(Some),
            None => Ok(None),
        }
    }

    /// One trial by id.
    pub async fn trial(&self, trial_id: i64) -> Result<TrialView> {
        let row = sqlx::query(&format!("{TRIAL_COLUMNS} WHERE t.trial_id = ?"))
            .bind(trial_id)
            .fetch_one(&self.pool)
            .await
            .map_err(self.err())?;
        self.view(&row).await
    }

    /// A `TrialView` from a row of `TRIAL_COLUMNS`, with its params and attributes.
    async fn view(&self, row: &sqlx::sqlite::SqliteRow) -> Result<TrialView> {
        let vt: Option<String> = row.get(4);
        let mut view = TrialView {
            trial_id: row.get(0),
            number: row.get(1),
            state: row.get(2),
            value: decode_value(row.get(3), vt.as_deref().unwrap_or("")),
            params: serde_json::Map::new(),
            datetime_start: row.get(5),
            datetime_complete: row.get(6),
            worker_id: None,
            worker_pid: None,
            fail_kind: None,
            fail_reason: None,
        };
        self.fill_details(&mut view).await?;
        Ok(view)
    }

    async fn fill_details(&self, view: &mut TrialView) -> Result<()> {
        let params = sqlx::query(
            "SELECT param_name, param_value, distribution_json FROM trial_params \
             WHERE trial_id = ? ORDER BY param_id",
        )
        .bind(view.trial_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        for row in params {
            let internal: f64 = row.get(1);
            let ext = Distribution::from_optuna_json(row.get(2))
                .ok()
                .and_then(|d| d.from_internal(internal).map(|v| d.external(&v)))
                .unwrap_or(json!(internal));
            view.params.insert(row.get(0), ext);
        }
        let attrs = sqlx::query(
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = ? AND key IN \
             ('sweepd:worker_id', 'sweepd:worker_pid', 'sweepd:fail_kind', 'fail_reason', ?)",
        )
        .bind(view.trial_id)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        for row in attrs {
            let key: String = row.get(0);
            let value: Value = serde_json::from_str(row.get(1)).unwrap_or(Value::Null);
            match key.as_str() {
                "sweepd:worker_id" => view.worker_id = value.as_i64(),
                "sweepd:worker_pid" => view.worker_pid = value.as_i64(),
                "sweepd:fail_kind" => view.fail_kind = value.as_str().map(str::to_owned),
                "fail_reason" => view.fail_reason = value.as_str().map(str::to_owned),
                _ => {
                    let zeros = NegativeZeros::parse(Some(row.get(1)));
                    if let Some(v) = view.value.as_f64() {
                        view.value = json!(zeros.value(0, v));
                    }
                    for name in &zeros.params {
                        if view.params.get(name).and_then(Value::as_f64) == Some(0.0) {
                            view.params.insert(name.clone(), json!(-0.0));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    // --- sweepd's own tables -----------------------------------------------------------------

    /// Registers a worker before it is spawned; its id is the worker's `SWEEPD_WORKER_ID`.
    pub async fn worker_created(&self, study: &Study, slot: usize, host: &str) -> Result<i64> {
        sqlx::query_scalar(
            "INSERT INTO sweepd_workers (study_id, slot, host, state, started_at) \
             VALUES (?, ?, ?, 'STARTING', ?) RETURNING worker_id",
        )
        .bind(study.id)
        .bind(slot as i64)
        .bind(host)
        .bind(now_text())
        .fetch_one(&self.pool)
        .await
        .map_err(self.err())
    }

    /// Records the pid and its start time, so a later instance can kill exactly this process.
    pub async fn worker_spawned(
        &self,
        worker_id: i64,
        pid: u32,
        start_time: Option<u64>,
        log: &Path,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE sweepd_workers SET pid = ?, pid_start_time = ?, log_path = ? WHERE worker_id = ?",
        )
        .bind(pid as i64)
        .bind(start_time.map(|t| t as i64))
        .bind(log.to_string_lossy().into_owned())
        .bind(worker_id)
        .execute(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(())
    }

    pub async fn worker_state(&self, worker_id: i64, state: &str) -> Result<()> {
        sqlx::query("UPDATE sweepd_workers SET state = ? WHERE worker_id = ?")
            .bind(state)
            .bind(worker_id)
            .execute(&self.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    pub async fn worker_exited(
        &self,
        worker_id: i64,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE sweepd_workers SET state = 'EXITED', ended_at = ?, exit_code = ?, \
             exit_signal = ? WHERE worker_id = ?",
        )
        .bind(now_text())
        .bind(exit_code)
        .bind(signal)
        .bind(worker_id)
        .execute(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(())
    }

    /// Counts a successful trial of a worker (shown by `status`, used for recycling).
    pub async fn worker_trial_done(&self, worker_id: i64) -> Result<()> {
        sqlx::query("UPDATE sweepd_workers SET trials_done = trials_done + 1 WHERE worker_id = ?")
            .bind(worker_id)
            .execute(&self.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    pub async fn event(
        &self,
        worker_id: Option<i64>,
        trial_id: Option<i64>,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO sweepd_worker_events (worker_id, trial_id, at, kind, detail) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(worker_id)
        .bind(trial_id)
        .bind(now_text())
        .bind(kind)
        .bind(detail)
        .execute(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(())
    }

    /// Workers of this study that no instance marked EXITED: (worker_id, pid, pid start time).
    pub async fn unfinished_workers(
        &self,
        study: &Study,
    ) -> Result<Vec<(i64, Option<i64>, Option<i64>)>> {
        let rows = sqlx::query(
            "SELECT worker_id, pid, pid_start_time FROM sweepd_workers \
             WHERE study_id = ? AND state <> 'EXITED'",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Live workers for `status`: (worker_id, slot, pid, state, trials_done, started_at).
    pub async fn live_workers(&self, study: &Study) -> Result<Vec<WorkerView>> {
        let rows = sqlx::query(
            "SELECT worker_id, slot, pid, state, trials_done, started_at FROM sweepd_workers \
             WHERE study_id = ? AND state <> 'EXITED' ORDER BY slot",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(rows
            .into_iter()
            .map(|r| WorkerView {
                worker_id: r.get(0),
                slot: r.get(1),
                pid: r.get(2),
                state: r.get(3),
                trials_done: r.get(4),
                started_at: r.get(5),
            })
            .collect())
    }

    /// Intermediate values of every finished trial, for the pruner on start:
    /// (number, completed, [(step, value)]) with non-finite values left out.
    pub async fn intermediate_history(
        &self,
        study: &Study,
    ) -> Result<Vec<(i64, bool, Vec<(i64, f64)>)>> {
        let rows = sqlx::query(
            "SELECT t.number, t.state, i.step, i.intermediate_value FROM trial_intermediate_values i \
             JOIN trials t ON t.trial_id = i.trial_id \
             WHERE t.study_id = ? AND t.state IN ('COMPLETE', 'PRUNED', 'FAIL') \
               AND i.intermediate_value_type = 'FINITE' ORDER BY t.number, i.step",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        let mut out: Vec<Curve> = Vec::new();
        for row in rows {
            let number: i64 = row.get(0);
            if out.last().is_none_or(|l| l.0 != number) {
                out.push((number, row.get::<String, _>(1) == "COMPLETE", Vec::new()));
            }
            out.last_mut()
                .expect("pushed")
                .2
                .push((row.get(2), row.get(3)));
        }
        Ok(out)
    }

    /// Measured peaks of finished trials (`sweepd:peak_memory_mib`) with their params, so the
    /// memory model survives a restart.
    pub async fn peaks(&self, study: &Study) -> Result<Vec<(Params, u64)>> {
        let rows = sqlx::query(
            "SELECT a.trial_id, a.value_json, p.param_name, p.param_value, p.distribution_json \
             FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id \
             JOIN trial_params p ON p.trial_id = a.trial_id \
             WHERE t.study_id = ? AND a.key = 'sweepd:peak_memory_mib' AND t.state <> 'FAIL' \
             ORDER BY a.trial_id",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        let mut out: Vec<(i64, Params, u64)> = Vec::new();
        for row in rows {
            let id: i64 = row.get(0);
            if out.last().is_none_or(|l| l.0 != id) {
                let mib: f64 = serde_json::from_str::<Value>(row.get(1))
                    .ok()
                    .and_then(|v| v.as_f64())
                    .unwrap_or(0.0);
                out.push((id, Params::new(), (mib * 1048576.0) as u64));
            }
            if let Some(v) = Distribution::from_optuna_json(row.get(4))
                .ok()
                .and_then(|d| d.from_internal(row.get(3)))
            {
                out.last_mut().expect("pushed").1.insert(row.get(2), v);
            }
        }
        Ok(out.into_iter().map(|(_, p, b)| (p, b)).collect())
    }

    // --- the daemon row: single-instance lock, state for `status`, commands ----------------

    /// Takes the study's daemon row, refusing when another live daemon holds it. A row left by
    /// a daemon that died (its pid gone or reused on this host, or no heartbeat for
    /// `stale_after` from another host) is taken over.
    pub async fn lock_daemon(
        &self,
        study: &Study,
        me: &DaemonId,
        stale_after: Duration,
    ) -> Result<(), DaemonLockError> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT pid, pid_start, host, started_at, heartbeat_at, state FROM sweepd_daemon WHERE study_id = ?",
        )
        .bind(study.id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.err())?;
        if let Some(row) = row {
            let holder = DaemonId {
                pid: row.get::<i64, _>(0) as u32,
                pid_start: row.get::<Option<i64>, _>(1).map(|v| v as u64),
                host: row.get(2),
            };
            let since: String = row.get(3);
            let heartbeat: String = row.get(4);
            let state: String = row.get(5);
            let alive = state != "STOPPED"
                && if holder.host == me.host {
                    holder.pid != me.pid
                        && crate::worker::proc_stat(holder.pid as i32)
                            .is_some_and(|s| Some(s.start_time) == holder.pid_start)
                } else {
                    chrono::NaiveDateTime::parse_from_str(&heartbeat, "%Y-%m-%d %H:%M:%S%.f")
                        .map(|t| {
                            let age = chrono::Local::now().naive_local() - t;
                            age.num_milliseconds() < stale_after.as_millis() as i64
                        })
                        .unwrap_or(false)
                };
            if alive {
                return Err(DaemonLockError::Held {
                    pid: holder.pid,
                    host: holder.host,
                    since,
                });
            }
        }
        let now = now_text();
        sqlx::query(
            "INSERT INTO sweepd_daemon (study_id, pid, pid_start, host, started_at, heartbeat_at, state) \
             VALUES (?, ?, ?, ?, ?, ?, 'RUNNING') \
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
        .map_err(self.err())?;
        tx.commit().await.map_err(self.err())?;
        Ok(())
    }

    /// Heartbeat and state (`RUNNING`, `PAUSED`, `STOPPED`) of our daemon row.
    pub async fn daemon_state(
        &self,
        study: &Study,
        me: &DaemonId,
        state: &str,
        detail: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE sweepd_daemon SET heartbeat_at = ?, state = ?, detail = ? WHERE study_id = ? AND pid = ? AND host = ?",
        )
        .bind(now_text())
        .bind(state)
        .bind(detail)
        .bind(study.id)
        .bind(me.pid as i64)
        .bind(&me.host)
        .execute(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(())
    }

    /// The daemon row for `status`: (pid, host, started_at, heartbeat_at, state, detail).
    pub async fn daemon_view(&self, study: &Study) -> Result<Option<DaemonView>> {
        let row = sqlx::query(
            "SELECT pid, host, started_at, heartbeat_at, state, detail FROM sweepd_daemon WHERE study_id = ?",
        )
        .bind(study.id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(row.map(|r| DaemonView {
            pid: r.get(0),
            host: r.get(1),
            started_at: r.get(2),
            heartbeat_at: r.get(3),
            state: r.get(4),
            detail: r.get(5),
        }))
    }

    /// Queues a request for the running daemon (`resume`).
    pub async fn send_command(&self, study: &Study, command: &str) -> Result<()> {
        sqlx::query("INSERT INTO sweepd_commands (study_id, command, created_at) VALUES (?, ?, ?)")
            .bind(study.id)
            .bind(command)
            .bind(now_text())
            .execute(&self.pool)
            .await
            .map_err(self.err())?;
        Ok(())
    }

    /// Takes the queued requests (marks them done).
    pub async fn take_commands(&self, study: &Study) -> Result<Vec<String>> {
        let mut tx = self.begin_write().await?;
        let cmds: Vec<String> = sqlx::query_scalar(
            "SELECT command FROM sweepd_commands WHERE study_id = ? AND done_at IS NULL ORDER BY command_id",
        )
        .bind(study.id)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.err())?;
        if !cmds.is_empty() {
            sqlx::query(
                "UPDATE sweepd_commands SET done_at = ? WHERE study_id = ? AND done_at IS NULL",
            )
            .bind(now_text())
            .bind(study.id)
            .execute(&mut *tx)
            .await
            .map_err(self.err())?;
        }
        tx.commit().await.map_err(self.err())?;
        Ok(cmds)
    }

    // --- GPUs -----------------------------------------------------------------------------------

    /// Replaces the study's `sweepd_gpus` rows with the monitor's latest view.
    pub async fn write_gpus(&self, study: &Study, rows: &[GpuRow]) -> Result<()> {
        let mut tx = self.pool.begin().await.map_err(self.err())?;
        for r in rows {
            sqlx::query(
                "INSERT INTO sweepd_gpus (study_id, device, name, total, free, used, util_gpu, util_mem, \
                 running, par_estimate, expected_peak, wait, error, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (study_id, device) DO UPDATE SET name = excluded.name, total = excluded.total, \
                 free = excluded.free, used = excluded.used, util_gpu = excluded.util_gpu, \
                 util_mem = excluded.util_mem, running = excluded.running, par_estimate = excluded.par_estimate, \
                 expected_peak = excluded.expected_peak, wait = excluded.wait, error = excluded.error, \
                 updated_at = excluded.updated_at",
            )
            .bind(study.id)
            .bind(r.device as i64)
            .bind(&r.name)
            .bind(r.total.map(|v| v as i64))
            .bind(r.free.map(|v| v as i64))
            .bind(r.used.map(|v| v as i64))
            .bind(r.util_gpu.map(i64::from))
            .bind(r.util_mem.map(i64::from))
            .bind(r.running as i64)
            .bind(r.par_estimate.map(|v| v as i64))
            .bind(r.expected_peak.map(|v| v as i64))
            .bind(&r.wait)
            .bind(&r.error)
            .bind(now_text())
            .execute(&mut *tx)
            .await
            .map_err(self.err())?;
        }
        tx.commit().await.map_err(self.err())?;
        Ok(())
    }

    pub async fn gpus(&self, study: &Study) -> Result<Vec<GpuRow>> {
        let rows = sqlx::query(
            "SELECT device, name, total, free, used, util_gpu, util_mem, running, par_estimate, \
             expected_peak, wait, error, updated_at FROM sweepd_gpus WHERE study_id = ? ORDER BY device",
        )
        .bind(study.id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.err())?;
        Ok(rows
            .into_iter()
            .map(|r| GpuRow {
                device: r.get::<i64, _>(0) as u32,
                name: r.get(1),
                total: r.get::<Option<i64>, _>(2).map(|v| v as u64),
                free: r.get::<Option<i64>, _>(3).map(|v| v as u64),
                used: r.get::<Option<i64>, _>(4).map(|v| v as u64),
                util_gpu: r.get::<Option<i64>, _>(5).map(|v| v as u32),
                util_mem: r.get::<Option<i64>, _>(6).map(|v| v as u32),
                running: r.get::<i64, _>(7) as usize,
                par_estimate: r.get::<Option<i64>, _>(8).map(|v| v as usize),
                expected_peak: r.get::<Option<i64>, _>(9).map(|v| v as u64),
                wait: r.get(10),
                error: r.get(11),
                updated_at: r.get(12),
            })
            .collect())
    }

    /// Telemetry samples of trial memory.
    pub async fn write_samples(&self, samples: &[crate::gpu::monitor::Sample]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(self.err())?;
        let now = now_text();
        for s in samples {
            sqlx::query(
                "INSERT INTO sweepd_trial_memory (trial_id, at, device, used) VALUES (?, ?, ?, ?)",
            )
            .bind(s.trial_id)
            .bind(&now)
            .bind(s.device as i64)
            .bind(s.used as i64)
            .execute(&mut *tx)
            .await
            .map_err(self.err())?;
        }
        tx.commit().await.map_err(self.err())?;
        Ok(())
    }
}

/// A worker row for `status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerView {
    pub worker_id: i64,
    pub slot: i64,
    pub pid: Option<i64>,
    pub state: String,
    pub trials_done: i64,
    pub started_at: String,
}

/// A finished trial's intermediate values: (number, completed, [(step, value)]).
pub type Curve = (i64, bool, Vec<(i64, f64)>);

/// Identifies a daemon process: the single-instance lock compares these.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonId {
    pub pid: u32,
    pub pid_start: Option<u64>,
    pub host: String,
}

impl DaemonId {
    /// The value of [`OWNER_ATTR`].
    pub fn json(&self) -> Value {
        json!({"host": self.host, "pid": self.pid, "pid_start": self.pid_start})
    }

    fn from_json(v: &Value) -> Option<DaemonId> {
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
#[derive(Debug, Clone, serde::Serialize)]
pub struct DaemonView {
    pub pid: i64,
    pub host: String,
    pub started_at: String,
    pub heartbeat_at: String,
    pub state: String,
    pub detail: Option<String>,
}

/// One `sweepd_gpus` row.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GpuRow {
    pub device: u32,
    pub name: Option<String>,
    pub total: Option<u64>,
    pub free: Option<u64>,
    pub used: Option<u64>,
    pub util_gpu: Option<u32>,
    pub util_mem: Option<u32>,
    pub running: usize,
    pub par_estimate: Option<usize>,
    pub expected_peak: Option<u64>,
    pub wait: Option<String>,
    pub error: Option<String>,
    pub updated_at: String,
}
