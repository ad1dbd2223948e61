//! Opening the database: the file created private, the connection, Optuna's schema version
//! checked, sweepd's migrations applied (see `sqlite` for what is the engine's).

use super::{sqlite, sync, Result, SqlContext, Store, StoreError};
use std::path::Path;

/// The Optuna schema revision sweepd reads and writes.
pub const ALEMBIC_HEAD: &str = "v3.2.0.a";

pub const SCHEMA_VERSION: i64 = 12;

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
        sqlite::migrate(&store.pool)
            .await
            .map_err(|source| StoreError::Migrate {
                path: path.to_owned(),
                source,
            })?;
        store.ensure_mirror().await?;
        Ok(store)
    }

    /// Starts a multi-statement write transaction. It commits lazily: whoever reports what it
    /// wrote (a trial started or finished) waits for [`Store::sync`] first. It holds the write
    /// lock from the start, so no other writer can slip in between what the transaction reads
    /// and what it writes.
    pub(super) async fn begin_write(&self) -> Result<sqlite::Tx<'static>> {
        sqlite::begin_write(&self.pool).await.at(&self.path)
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
        sqlite::has_table(&self.pool, table).await.at(&self.path)
    }

    async fn connect(path: &Path, create: bool) -> Result<Store> {
        if create {
            create_private(path).map_err(sqlx::Error::Io).at(path)?;
        }
        let pool = sqlite::connect(path, create).await.at(path)?;
        Ok(Store {
            pool,
            path: path.to_owned(),
            syncer: std::sync::Arc::new(sync::Syncer::new(path)),
        })
    }

    /// Refuses a database whose Optuna schema is another version than the one we write.
    async fn check_schema(&self) -> Result<()> {
        if self.has_table("alembic_version").await? {
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
        if self.has_table("version_info").await? {
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
