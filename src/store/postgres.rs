//! What the store does on PostgreSQL alone, the twin of `sqlite`: the connection (the URL and
//! the usual `PG*` variables, TLS, the session's settings), looking a table up, and the
//! migrations (`migrations-postgres/`: Optuna's schema as Optuna 5.0 creates it on PostgreSQL,
//! then sweepd's tables and view).
//!
//! Nothing here replaces SQLite's `sync` (a PostgreSQL commit is durable when it returns) or
//! its `mirror` triggers: `sweepd_trials` is a view here, and ids are never reused (they come
//! from sequences), so a deleted study's leftover rows cannot become a new study's; they are
//! purged at start instead.

use sqlx::migrate::MigrateError;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

pub(super) type Pool = sqlx::PgPool;

/// How long a caller waits for a connection before the store reports the database
/// unreachable: a daemon then waits and tries the whole operation again (`store::outage`),
/// rather than every task hanging on a server that is gone.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server keeps one of our sessions that sits idle inside a transaction before
/// it ends it (`idle_in_transaction_session_timeout`). sweepd's transactions never wait on
/// anything but the database; a session idle that long is one whose host was cut off mid-
/// transaction, and it would otherwise hold the study's row lock, and every other host with it,
/// until the server's TCP gives up on it (hours). Ended by mistake (a process stalled that
/// long), the transaction is rolled back and run again (`store::outage`).
const IDLE_IN_TRANSACTION: &str = "10s";

/// The planner's price of an index's page read against a sequential one, for sweepd's sessions
/// (PostgreSQL's default is 4, a disk's seek; a lower value set for the server is kept). A
/// study's rows are read again and again and sit in memory: at the default, the planner scanned
/// the whole `trial_params` table of a study of a few thousand trials for the params of the 40
/// trials other hosts had run since a daemon's last read, 5 ms per read instead of 0.5, on the
/// path of that daemon's next start (the coordination benchmark: 0.88 of ideal at 4 hosts
/// instead of 0.90). 1.1 is the value commonly set for SSDs and memory.
const RANDOM_PAGE_COST: f64 = 1.1;

/// Connections per daemon: the core's transactions are one at a time, besides them the
/// housekeeping task and the slots' reports.
pub(super) const MAX_CONNECTIONS: u32 = 4;

/// Connects to `url` (`postgres://` or `postgresql://`; `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT` and `~/.pgpass` fill in what it
/// leaves out, as libpq does). The pool is lazy: connections are made when first used, and
/// again after the server restarts.
pub(super) async fn connect(url: &str) -> Result<Pool, sqlx::Error> {
    let opts = PgConnectOptions::from_str(url)?.application_name("sweepd");
    let pool = PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // sqlx pings a pooled connection (a round trip to the server) before handing it out,
        // by default: two of a trial's four round trips, on the path every host's next trial
        // waits on. A connection the server closed while it sat in the pool fails in use
        // instead, and the operation runs again at once on another (`outage::Retry::settle`);
        // the pool still pings a connection when it comes back, off that path.
        .test_before_acquire(false)
        .after_connect(|conn, _| {
            Box::pin(async move {
                // sqlx starts every session in UTC; Optuna's sessions (psycopg2) are in the
                // server's zone, or $PGTZ. Heartbeats are times in that zone (Optuna's
                // `fail_stale_trials` compares them with its own `now()`), so sweepd's session
                // takes the same one. The server's configured zone is not visible to a client
                // that set its own; `log_timezone` is, and initdb writes both from the system's.
                let zone = std::env::var("PGTZ").ok().filter(|z| !z.is_empty());
                sqlx::query(
                    "SELECT set_config('TimeZone', COALESCE($1, current_setting('log_timezone')), false), \
                     set_config('idle_in_transaction_session_timeout', $2, false), \
                     set_config('random_page_cost', \
                       LEAST(current_setting('random_page_cost')::FLOAT8, $3)::TEXT, false)",
                )
                .bind(zone)
                .bind(IDLE_IN_TRANSACTION)
                .bind(RANDOM_PAGE_COST)
                .execute(&mut *conn)
                .await?;
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    // Fail now (a wrong password, no such database) rather than at the first query.
    pool.acquire().await?;
    Ok(pool)
}

/// Whether the current schema has a table of that name.
pub(super) async fn has_table(
    conn: &mut sqlx::PgConnection,
    table: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query(
        "SELECT 1 FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = $1",
    )
    .bind(table)
    .fetch_optional(conn)
    .await
    .map(|r| r.is_some())
}

/// Applies sweepd's PostgreSQL migrations. sqlx holds an advisory lock while it does, so
/// daemons starting at once on several hosts apply each migration once.
pub(super) async fn migrate(pool: &Pool) -> Result<(), MigrateError> {
    sqlx::migrate!("./migrations-postgres").run(pool).await
}
