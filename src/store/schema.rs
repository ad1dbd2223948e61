//! Opening the database: the file created private, the connection, Optuna's schema version
//! checked, sweepd's migrations applied (see `sqlite` and `postgres` for what is the engine's).

use super::engine::{self, sql, Pool};
use super::{postgres, sqlite, sync, Result, SqlContext, Store, StoreError, Target};
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
    /// Opens (creating if needed) the SQLite database for `sweepd run`: WAL, migrations
    /// applied.
    pub async fn open(path: &Path) -> Result<Store> {
        Store::open_target(&Target::Sqlite(path.to_owned())).await
    }

    /// Opens the database for `sweepd run` (a SQLite file is created if needed), migrations
    /// applied.
    pub async fn open_target(target: &Target) -> Result<Store> {
        let store = Store::connect(target, true).await?;
        store.check_schema().await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Opens an existing database for a command that writes sweepd's tables (`pause`, `stop`,
    /// `kill`, `enqueue`, …): as [`Store::open_existing_target`], then sweepd's migrations
    /// applied, as `sweepd run` applies them (a database an older sweepd made has no
    /// `sweepd_control` yet).
    pub async fn open_existing_migrated(target: &Target) -> Result<Store> {
        let store = Store::open_existing_target(target).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// sweepd's migrations, and its triggers on Optuna's tables (SQLite).
    async fn migrate(&self) -> Result<()> {
        let migrated = match &self.pool {
            Pool::Sqlite(p) => sqlite::migrate(p).await,
            Pool::Postgres(p) => postgres::migrate(p).await,
        };
        migrated.map_err(|source| StoreError::Migrate {
            path: self.path.clone(),
            source,
        })?;
        self.ensure_mirror().await?;
        Ok(())
    }

    /// Opens an existing database without changing it, for `status`, `trials` and `best`.
    pub async fn open_existing_target(target: &Target) -> Result<Store> {
        if let Target::Sqlite(path) = target {
            if !path.exists() {
                return Err(StoreError::Missing(path.to_owned()));
            }
        }
        let store = Store::connect(target, false).await?;
        store.check_schema().await?;
        if !store.has_table("studies").await? {
            return Err(StoreError::NoSchema(store.path.clone()));
        }
        Ok(store)
    }

    /// Whether sweepd's own tables are in the database: a file only Optuna has written has
    /// none until `sweepd run` (or a command that writes them) migrates it, and the commands
    /// that only read show its trials without them.
    pub async fn has_sweepd_tables(&self) -> Result<bool> {
        self.has_table("sweepd_daemon").await
    }

    async fn has_table(&self, table: &str) -> Result<bool> {
        match self.acquire().await?.conn() {
            engine::Conn::Sqlite(c) => sqlite::has_table(c, table).await,
            engine::Conn::Postgres(c) => postgres::has_table(c, table).await,
        }
        .at(&self.path)
    }

    async fn connect(target: &Target, create: bool) -> Result<Store> {
        let label = target.label();
        match target {
            Target::Sqlite(path) => {
                if create {
                    create_private(path).map_err(sqlx::Error::Io).at(path)?;
                }
                let pool = sqlite::connect(path, create).await.at(path)?;
                Ok(Store {
                    pool: Pool::Sqlite(pool),
                    path: label,
                    syncer: Some(std::sync::Arc::new(sync::Syncer::new(path))),
                    outages: Default::default(),
                    ops: Default::default(),
                    kept: Default::default(),
                })
            }
            Target::Postgres { url, .. } => {
                let pool = postgres::connect(url).await.at(&label)?;
                Ok(Store {
                    pool: Pool::Postgres(pool),
                    path: label,
                    syncer: None,
                    outages: Default::default(),
                    ops: Default::default(),
                    kept: Default::default(),
                })
            }
        }
    }

    /// Closes the pool's connections (tests restarting a server; the bench).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Refuses a database whose Optuna schema is another version than the one we write.
    async fn check_schema(&self) -> Result<()> {
        if self.has_table("alembic_version").await? {
            let versions: Vec<String> = sql!(self.acquire().await?.conn(), |c| {
                sqlx::query_scalar("SELECT version_num FROM alembic_version")
                    .fetch_all(c)
                    .await
            })
            .at(&self.path)?;
            if versions.iter().any(|v| v != ALEMBIC_HEAD) {
                return Err(StoreError::IncompatibleSchema {
                    path: self.path.clone(),
                    found: format!("alembic revision {}", versions.join(", ")),
                });
            }
        }
        if self.has_table("version_info").await? {
            let v: Option<i64> = sql!(self.acquire().await?.conn(), |c| {
                sqlx::query_scalar(
                    "SELECT CAST(schema_version AS BIGINT) FROM version_info WHERE version_info_id = 1",
                )
                .fetch_optional(c)
                .await
            })
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

#[cfg(test)]
mod tests {
    /// A migration that a released sweepd applied is never edited: sqlx keeps each applied
    /// migration's checksum and refuses a database whose migration differs ("previously applied
    /// but has been modified"), on every host. A change is a new migration, or for a function,
    /// its file in `migrations-postgres/functions/`. (The first 8 bytes of each SHA-384.)
    #[test]
    fn a_released_migration_is_never_edited() {
        let released: [(&str, &[&str]); 2] = [
            (
                "sqlite",
                &[
                    "14a739edfc62eec7",
                    "a7ff08c2be2b6d00",
                    "dfda4abdeb652e9e",
                    "890af7eb1ff0dbb3",
                    "65fa988f1e781270",
                    "bb43168233169e69",
                    "d526dacc8782b20b",
                    "c4a4518107caca7e",
                ],
            ),
            (
                "postgres",
                &[
                    "4bb4bf5fc4670db1",
                    "7a63f6e8a2decccc",
                    "e20c808dce52bcf8",
                    "740dfaddd70cfed7",
                    "82ddec8bf638c544",
                    "71c9f420226e232b",
                    "2469cd762849c4bb",
                    "0be1f2fdd88e2eb0",
                ],
            ),
        ];
        for (engine, sums) in released {
            let migrator = match engine {
                "sqlite" => sqlx::migrate!("./migrations"),
                _ => sqlx::migrate!("./migrations-postgres"),
            };
            for (m, sum) in migrator.iter().zip(sums) {
                let hex: String = m.checksum[..8].iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(&hex, sum, "{engine} migration {} was edited", m.version);
            }
            assert!(
                migrator.iter().count() >= sums.len(),
                "{engine}: one went missing"
            );
        }
    }
}
