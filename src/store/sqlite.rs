//! What the store does on SQLite alone (see `engine` for how the rest is written once): the
//! connection (options, pragmas), the write transaction (`BEGIN IMMEDIATE`), looking a table
//! up, and the migrations with their retry while the file is busy. `postgres` is its twin.
//!
//! SQLite-only outside this file, by nature: `sync` (an `fdatasync` of the write-ahead log;
//! PostgreSQL's commit is durable by itself) and `mirror` (triggers and JSON functions in
//! SQLite's dialect).

use sqlx::migrate::MigrateError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::time::Duration;

pub(super) type Db = sqlx::Sqlite;
pub(super) type Pool = sqlx::Pool<Db>;
pub(super) type Tx<'c> = sqlx::Transaction<'c, Db>;

/// How long a statement waits for another writer (an Optuna script, say) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Attempts at connecting or applying migrations while other writers keep the database busy.
const MIGRATE_BUSY_RETRIES: u32 = 100;

/// The pool over the database file: WAL, lazy commits (`Store::sync` makes them durable),
/// foreign keys enforced, a page cache sized for large studies. Creates the file if `create`.
pub(super) async fn connect(path: &Path, create: bool) -> Result<Pool, sqlx::Error> {
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
    let mut attempt = 0u32;
    loop {
        // One connection: sweepd's writes are serialised anyway, and a single connection
        // cannot deadlock against itself on SQLite's one write lock.
        match SqlitePoolOptions::new()
            .max_connections(1)
            .before_acquire(|conn, _| Box::pin(async move { Ok(sound(conn)) }))
            .connect_with(opts.clone())
            .await
        {
            // Switching an Optuna-made file (rollback journal) to WAL needs the exclusive
            // lock while holding the shared one; when an Optuna process holds the reserved
            // lock to commit, SQLite sees a deadlock and answers "busy" at once instead of
            // waiting `BUSY_TIMEOUT`. A fresh connection lets the writer finish first.
            Err(e) if is_busy_error(&e) && attempt < MIGRATE_BUSY_RETRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt.min(10)))).await;
            }
            other => return other,
        }
    }
}

/// Whether a connection going out of the pool is outside any transaction, as sqlx counts them.
///
/// SQLite rolls a transaction back by itself when a statement or the commit in it fails with an
/// I/O error, a full disk or too little memory (a file system turned read-only says
/// `SQLITE_IOERR`). sqlx does not know: its `ROLLBACK` of the transaction it still counts then
/// fails ("no transaction is active") and it keeps counting it, so every later `begin_with` on
/// that connection fails with "attempted to call begin_with at non-zero transaction depth",
/// which hides the error that mattered behind one nobody can act on. Such a connection is
/// closed instead of given out; the pool opens a fresh one, whose error, if the cause is still
/// there, is the real one.
fn sound(conn: &sqlx::SqliteConnection) -> bool {
    use sqlx::Connection;
    !conn.is_in_transaction()
}

/// Starts a multi-statement write transaction holding the write lock from its first statement
/// (`BEGIN IMMEDIATE`), so no other writer can slip in between what it reads and what it
/// writes.
pub(super) async fn begin_write(pool: &Pool) -> Result<Tx<'static>, sqlx::Error> {
    pool.begin_with("BEGIN IMMEDIATE").await
}

/// Whether the database has a table of that name.
pub(super) async fn has_table<'c>(
    conn: impl sqlx::Executor<'c, Database = Db>,
    table: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1")
        .bind(table)
        .fetch_optional(conn)
        .await
        .map(|r| r.is_some())
}

/// Applies sweepd's migrations (`migrations/`), retried while other writers keep the file busy.
pub(super) async fn migrate(pool: &Pool) -> Result<(), MigrateError> {
    let migrator = sqlx::migrate!("./migrations");
    let mut attempt = 0u32;
    loop {
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            // A migration whose statements only read (IF NOT EXISTS on Optuna's existing
            // tables) before it writes its record cannot wait for the write lock: SQLite
            // answers "busy" at once when another writer (an Optuna script optimizing the
            // study) committed after that read. A fresh attempt takes a fresh snapshot.
            Err(e) if is_busy(&e) && attempt < MIGRATE_BUSY_RETRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt.min(10)))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a migration failed only because another connection was writing (SQLITE_BUSY and its
/// extended codes, such as BUSY_SNAPSHOT).
fn is_busy(e: &MigrateError) -> bool {
    match e {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => is_busy_error(e),
        _ => false,
    }
}

/// SQLITE_BUSY or one of its extended codes.
fn is_busy_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_transaction_sqlite_rolled_back_by_itself_leaves_the_next_one_a_sound_connection() {
        let dir = tempfile::tempdir().unwrap();
        let pool = connect(&dir.path().join("t.db"), true).await.unwrap();
        let mut tx = begin_write(&pool).await.unwrap();
        sqlx::query("CREATE TABLE t (x)")
            .execute(&mut *tx)
            .await
            .unwrap();
        // What SQLite does on its own when a write in the transaction fails with an I/O error
        // (a file system turned read-only): the transaction is gone, sqlx still counts it.
        sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
        let failed = tx.commit().await.unwrap_err();
        assert!(
            failed.to_string().contains("no transaction is active"),
            "{failed}"
        );
        // Before, this failed: "attempted to call begin_with at non-zero transaction depth".
        let mut tx = begin_write(&pool)
            .await
            .expect("the next transaction begins");
        sqlx::query("CREATE TABLE u (x)")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let tables: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'u'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(tables, 1);
    }
}
