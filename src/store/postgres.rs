//! What the store does on PostgreSQL alone, the twin of `sqlite`: the connection (the URL and
//! the usual `PG*` variables, TLS, the session's settings), looking a table up, and the
//! migrations (`migrations-postgres/`: Optuna's schema as Optuna 5.0 creates it on PostgreSQL,
//! then sweepd's tables and view), and sweepd's functions (`migrations-postgres/functions/`,
//! one file each, installed after the migrations wherever the database's version is not the
//! file's; see [`install_functions`]).
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

/// Applies sweepd's PostgreSQL migrations, then installs its functions. sqlx holds an advisory
/// lock while it migrates, so daemons starting at once on several hosts apply each migration
/// once.
pub(super) async fn migrate(pool: &Pool) -> Result<(), MigrateError> {
    sqlx::migrate!("./migrations-postgres").run(pool).await?;
    install_functions(pool).await.map_err(MigrateError::Execute)
}

/// sweepd's server-side functions, by name, each defined by one file that is its only
/// definition, in the order they are installed (`sweepd_step` calls `sweepd_tally`).
pub(super) const FUNCTIONS: [(&str, &str); 2] = [
    (
        "sweepd_tally",
        include_str!("../../migrations-postgres/functions/sweepd_tally.sql"),
    ),
    (
        "sweepd_step",
        include_str!("../../migrations-postgres/functions/sweepd_step.sql"),
    ),
];

/// The advisory lock the installation of [`FUNCTIONS`] holds: two sessions replacing one
/// function at once fail ("tuple concurrently updated").
const FUNCTIONS_LOCK: i64 = 0x7377_6565_7064_0001;

/// SQL: the SHA-256, in hex, of the text `expr`.
fn sha256_sql(expr: &str) -> String {
    format!("encode(sha256(convert_to({expr}, 'UTF8')), 'hex')")
}

/// SQL: the mark of the installed function `p` (its comment) as the file whose SHA-256 is `$2`
/// installed it: the file, its hash, and the hash of the definition that installing it made
/// (as `pg_get_functiondef` prints it), so that a definition replaced by other means than this
/// file (by hand, by a migration) keeps no mark that matches.
fn mark_sql(name: &str) -> String {
    format!(
        "'sweepd: migrations-postgres/functions/{name}.sql, sha256 ' || $2 \
         || ', definition ' || {}",
        sha256_sql("pg_get_functiondef(p.oid)")
    )
}

/// Installs each of [`FUNCTIONS`] whose installed version is not its file's text (a database
/// that migrations 0005-0007 left with their versions of `sweepd_step`, or one an older or newer
/// sweepd installed), in one transaction under [`FUNCTIONS_LOCK`], and marks it as its file's
/// (its comment: [`mark_sql`]). A function already its file's is left alone: replacing it would
/// make every session compile it again, and would need its owner's role, which the other
/// hosts' daemons need not have.
async fn install_functions(pool: &Pool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FUNCTIONS_LOCK)
        .execute(&mut *tx)
        .await?;
    let this_schema = "p.proname = $1 AND p.pronamespace = to_regnamespace(current_schema())";
    for (name, text) in FUNCTIONS {
        let sha256: String = sqlx::query_scalar(&format!("SELECT {}", sha256_sql("$1")))
            .bind(text)
            .fetch_one(&mut *tx)
            .await?;
        let current: bool = sqlx::query_scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_proc p WHERE {this_schema} \
             AND obj_description(p.oid, 'pg_proc') = {})",
            mark_sql(name)
        ))
        .bind(name)
        .bind(&sha256)
        .fetch_one(&mut *tx)
        .await?;
        if current {
            continue;
        }
        sqlx::raw_sql(text).execute(&mut *tx).await?;
        // COMMENT takes a literal only: the mark is made, then set.
        let mark: String = sqlx::query_scalar(&format!(
            "SELECT {} FROM pg_proc p WHERE {this_schema}",
            mark_sql(name)
        ))
        .bind(name)
        .bind(&sha256)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::raw_sql(&format!(
            "COMMENT ON FUNCTION {name} IS '{}'",
            mark.replace('\'', "''")
        ))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::attrs::{OWNER_ATTR, RETRIED_AS_ATTR, TRIAL_SYSTEM_ATTRS, WORKER_ID_ATTR};

    /// The quoted `sweepd:` names in a function's text.
    fn sweepd_names(text: &str) -> Vec<&str> {
        text.match_indices("'sweepd:")
            .map(|(at, _)| {
                let name = &text[at + 1..];
                &name[..name.find('\'').expect("a closing quote")]
            })
            .collect()
    }

    /// The functions' SQL names attributes as literals: each must be the name `study::attrs`
    /// gives, and the tally's read must ask for the attributes SQLite's read asks for.
    #[test]
    fn the_functions_name_attributes_as_study_attrs_does() {
        for (name, text) in FUNCTIONS {
            for key in sweepd_names(text) {
                assert!(TRIAL_SYSTEM_ATTRS.contains(&key), "{name}: {key}");
            }
        }
        let mut tally = sweepd_names(FUNCTIONS[0].1);
        tally.sort();
        tally.dedup();
        let mut wanted = vec![RETRIED_AS_ATTR, OWNER_ATTR, WORKER_ID_ATTR];
        wanted.sort();
        assert_eq!(tally, wanted);
    }
}
