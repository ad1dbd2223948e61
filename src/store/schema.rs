//! Opening the database: the file created private, the connection, Optuna's schema version
//! checked, sweepd's migrations applied (retried while other writers keep the file busy).

use super::{sync, Result, SqlContext, Store, StoreError};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::time::Duration;

/// The Optuna schema revision sweepd reads and writes.
pub const ALEMBIC_HEAD: &str = "v3.2.0.a";

pub const SCHEMA_VERSION: i64 = 12;

/// How long a statement waits for another writer (an Optuna script, say) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

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
    pub(super) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await.at(&self.path)
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

    pub(super) async fn has_table(&self, table: &str) -> Result<bool> {
        sqlx::query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
            .bind(table)
            .fetch_optional(&self.pool)
            .await
            .map(|r| r.is_some())
            .at(&self.path)
    }

    async fn connect(path: &Path, create: bool) -> Result<Store> {
        if create {
            create_private(path).map_err(sqlx::Error::Io).at(path)?;
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
            .at(path)?;
        Ok(Store {
            pool,
            path: path.to_owned(),
            syncer: std::sync::Arc::new(sync::Syncer::new(path)),
        })
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
        if has("alembic_version").await.at(&self.path)? {
            let versions: Vec<String> =
                sqlx::query_scalar("SELECT version_num FROM alembic_version")
                    .fetch_all(&self.pool)
                    .await
                    .at(&self.path)?;
            if versions.iter().any(|v| v != ALEMBIC_HEAD) {
                return Err(StoreError::IncompatibleSchema {
                    path: self.path.clone(),
                    found: format!("alembic revision {}", versions.join(", ")),
                });
            }
        }
        if has("version_info").await.at(&self.path)? {
            let v: Option<i64> = sqlx::query_scalar(
                "SELECT schema_version FROM version_info WHERE version_info_id = 1",
            )
            .fetch_optional(&self.pool)
            .await
            .at(&self.path)?;
            if let Some(v) = v.filter(|v| *v != SCHEMA_VERSION) {
                return Err(StoreError::IncompatibleSchema {
                    path: self.path.clone(),
                    found: format!("schema version {v}"),
                });
            }
        }
        Ok(())
    }
}
