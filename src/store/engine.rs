//! The engine seam: one store over two database engines, SQLite (one host) and PostgreSQL
//! (several hosts on one study), with every query written once.
//!
//! **How the queries stay written once.** The store holds an enum of pools ([`Pool`]) and its
//! write transactions are an enum too ([`Tx`]); a query runs through [`sql!`], which expands its
//! body once per engine, so `sqlx::query("…").bind(x).fetch_all(c)` is type-checked (and its
//! row types decoded) against SQLite's and PostgreSQL's own types, from one text. Generic
//! functions over `sqlx::Database` were the other way: every one of them would carry a dozen
//! higher-ranked bounds (`for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>`,
//! `i64: Type<DB> + Encode<DB>`, …) that the compiler does not infer, and `sqlx::Any` is ruled
//! out (it erases the types the two engines disagree on). The macro costs one match per query.
//!
//! **What the text must respect to run on both.** Optuna's PostgreSQL schema differs from its
//! SQLite one in types, not in names: ids and numbers are `INTEGER` (sqlx reads an `i64` only
//! from `BIGINT`), states, directions and value types are enum types, and times are
//! `TIMESTAMP`. So a query reads such a column as `CAST(x AS BIGINT)` or `CAST(x AS TEXT)`
//! (a no-op on SQLite), binds an enum value as [`Label`] and a time as [`Stamp`] (text on
//! SQLite, the column's own type on PostgreSQL), and compares them with literals (`state =
//! 'RUNNING'`), which both engines type from the column. sweepd's own tables use `BIGINT` and
//! `TEXT` on PostgreSQL, so they read as they do on SQLite.
//!
//! **What is the engine's alone** is here by name: opening ([`Pool::connect`] via `sqlite` and
//! `postgres`), the write transaction ([`Pool::begin_write`]: `BEGIN IMMEDIATE` on SQLite; a
//! plain `BEGIN` on PostgreSQL, whose writers serialise on the study's row instead, see
//! [`Tx::lock_study`]), looking a table up, the migrations (`migrations/` and
//! `migrations-postgres/`), and the clock of heartbeats ([`Engine::now`], [`Engine::age`]).

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, Postgres};
use sqlx::sqlite::{Sqlite, SqliteArgumentValue, SqliteTypeInfo};
use sqlx::{Encode, Type};

/// Which engine a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// SQL for "now" in a heartbeat column. Heartbeats are compared on the database's clock,
    /// never across hosts' clocks: on PostgreSQL the server's (`LOCALTIMESTAMP`, in the zone
    /// Optuna's sessions use, see `postgres::connect`), on SQLite the one host's.
    pub(super) fn now(self) -> &'static str {
        match self {
            Engine::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now', 'localtime')",
            Engine::Postgres => "LOCALTIMESTAMP",
        }
    }

    /// SQL for the age in seconds (a float) of the time in column `col`, on the same clock as
    /// [`Engine::now`]; NULL for a value that is not a time.
    pub(super) fn age(self, col: &str) -> String {
        match self {
            Engine::Sqlite => {
                format!("((julianday('now', 'localtime') - julianday({col})) * 86400.0)")
            }
            Engine::Postgres => {
                format!("CAST(EXTRACT(EPOCH FROM (LOCALTIMESTAMP - {col})) AS DOUBLE PRECISION)")
            }
        }
    }
}

/// A pool over either engine.
#[derive(Clone, Debug)]
pub(super) enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

/// A connection taken from the pool.
pub(super) enum PoolConn {
    Sqlite(sqlx::pool::PoolConnection<Sqlite>),
    Postgres(sqlx::pool::PoolConnection<Postgres>),
}

/// A connection kept out of the pool for the operations of a trial's start and finish, which
/// the supervisor's core runs one at a time (PostgreSQL; SQLite's pool has one connection, which
/// is never kept from it): a pooled connection costs a round trip to the server each time it
/// goes back (sqlx pings it then), twice a trial. Shared by
/// the store's clones; empty until first used, and again after an operation on it failed (the
/// connection then goes back to the pool, whose ping closes it if it is broken).
#[derive(Clone, Default)]
pub(super) struct Kept(std::sync::Arc<tokio::sync::Mutex<Option<PoolConn>>>);

impl Kept {
    /// The kept connection (or, while there is none, one from `pool`), held until the guard
    /// is dropped; [`KeptConn::keep`] after an operation that succeeded puts it back.
    pub(super) async fn take(&self, pool: &Pool) -> Result<KeptConn<'_>, sqlx::Error> {
        let mut slot = self.0.lock().await;
        let conn = match slot.take() {
            Some(c) => c,
            None => pool.acquire().await?,
        };
        Ok(KeptConn { slot, conn })
    }
}

/// A connection taken from [`Kept`].
pub(super) struct KeptConn<'a> {
    slot: tokio::sync::MutexGuard<'a, Option<PoolConn>>,
    conn: PoolConn,
}

impl KeptConn<'_> {
    pub(super) fn conn(&mut self) -> Conn<'_> {
        self.conn.conn()
    }

    /// Keeps the connection for the next operation (after one that succeeded on it). SQLite's
    /// goes back to its pool, which has that one connection.
    pub(super) fn keep(mut self) {
        if let PoolConn::Postgres(_) = self.conn {
            *self.slot = Some(self.conn);
        }
    }
}

/// A write transaction on either engine (see [`Pool::begin_write`]).
pub(super) enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

/// A borrowed connection of either engine: what [`sql!`] runs a query on.
pub(super) enum Conn<'a> {
    Sqlite(&'a mut sqlx::SqliteConnection),
    Postgres(&'a mut sqlx::PgConnection),
}

impl Conn<'_> {
    /// The same connection, borrowed again (to run several queries on one `Conn`).
    pub(super) fn reborrow(&mut self) -> Conn<'_> {
        match self {
            Conn::Sqlite(c) => Conn::Sqlite(c),
            Conn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

/// Runs `body` with `c` bound to the engine's own connection (`&mut SqliteConnection` or
/// `&mut PgConnection`): the body is written once and compiled once per engine.
macro_rules! sql {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::store::engine::Conn::Sqlite($c) => $body,
            $crate::store::engine::Conn::Postgres($c) => $body,
        }
    };
}
pub(super) use sql;

/// `sqlx::query_as(sql)` with the items of each of `binds` bound in turn, every row fetched: a
/// statement whose `IN (…)` lists are bound value by value.
macro_rules! fetch_bound {
    ($conn:expr, $sql:expr, $($binds:expr),+ $(,)?) => {
        $crate::store::engine::sql!($conn, |c| {
            let mut q = sqlx::query_as($sql);
            $(
                for b in $binds {
                    q = q.bind(b);
                }
            )+
            q.fetch_all(c).await
        })
    };
}
pub(super) use fetch_bound;

impl Pool {
    pub(super) fn engine(&self) -> Engine {
        match self {
            Pool::Sqlite(_) => Engine::Sqlite,
            Pool::Postgres(_) => Engine::Postgres,
        }
    }

    pub(super) async fn acquire(&self) -> Result<PoolConn, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => PoolConn::Sqlite(p.acquire().await?),
            Pool::Postgres(p) => PoolConn::Postgres(p.acquire().await?),
        })
    }

    /// A multi-statement write transaction. On SQLite it holds the write lock from its first
    /// statement (`BEGIN IMMEDIATE`), so nothing slips in between what it reads and writes; on
    /// PostgreSQL (READ COMMITTED) a transaction that numbers or counts a study's trials takes
    /// the study's row lock first ([`Tx::lock_study`]), as Optuna's own writers do.
    pub(super) async fn begin_write(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => Tx::Sqlite(super::sqlite::begin_write(p).await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// A transaction that needs no write lock up front (its writes are single rows).
    pub(super) async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    pub(super) async fn close(&self) {
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }
}

impl PoolConn {
    pub(super) fn conn(&mut self) -> Conn<'_> {
        match self {
            PoolConn::Sqlite(c) => Conn::Sqlite(c),
            PoolConn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

impl Tx {
    pub(super) fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Sqlite(t) => Conn::Sqlite(t),
            Tx::Postgres(t) => Conn::Postgres(t),
        }
    }

    pub(super) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }

    pub(super) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.rollback().await,
            Tx::Postgres(t) => t.rollback().await,
        }
    }

    /// Serialises this transaction with every other writer that numbers, claims against the
    /// budget or counts the study's trials: on PostgreSQL the study's row lock (`SELECT … FOR
    /// UPDATE`, what Optuna's `_create_new_trial` takes before it numbers a trial, so sweepd
    /// daemons and Optuna processes wait for each other); on SQLite the transaction already
    /// holds the one write lock.
    pub(super) async fn lock_study(&mut self, study_id: i64) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(_) => Ok(()),
            Tx::Postgres(t) => {
                sqlx::query("SELECT study_id FROM studies WHERE study_id = $1 FOR UPDATE")
                    .bind(study_id)
                    .fetch_optional(&mut **t)
                    .await
                    .map(|_| ())
            }
        }
    }
}

/// The label of one of Optuna's enums (a trial state, a direction, a value type), bound as
/// text on SQLite and as the enum type itself on PostgreSQL, which does not compare or store
/// `text` into an enum column without a cast.
#[derive(Debug, Clone, Copy)]
pub(super) struct Label {
    /// The PostgreSQL type, as Optuna's schema names it.
    pg_type: &'static str,
    text: &'static str,
}

impl Label {
    /// A `trialstate` (`trials.state`).
    pub(super) fn state(text: &'static str) -> Label {
        Label {
            pg_type: "trialstate",
            text,
        }
    }

    /// A `trialvaluetype` (`trial_values.value_type`).
    pub(super) fn value_type(text: &'static str) -> Label {
        Label {
            pg_type: "trialvaluetype",
            text,
        }
    }

    /// A `trialintermediatevaluetype` (`trial_intermediate_values.intermediate_value_type`).
    pub(super) fn intermediate_type(text: &'static str) -> Label {
        Label {
            pg_type: "trialintermediatevaluetype",
            text,
        }
    }

    /// A `studydirection` (`study_directions.direction`).
    pub(super) fn direction(text: &'static str) -> Label {
        Label {
            pg_type: "studydirection",
            text,
        }
    }
}

impl Type<Sqlite> for Label {
    fn type_info() -> SqliteTypeInfo {
        <&str as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for Label {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <&str as Encode<'q, Sqlite>>::encode(self.text, buf)
    }
}

impl Type<Postgres> for Label {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_name("text")
    }
}

impl Encode<'_, Postgres> for Label {
    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_name(self.pg_type))
    }

    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        // An enum's binary form is its label.
        <&str as Encode<Postgres>>::encode(self.text, buf)
    }
}

/// A time as `store::time` writes it, bound as text on SQLite (Optuna's format there) and as
/// a `TIMESTAMP` on PostgreSQL (Optuna's `DateTime` columns).
#[derive(Debug, Clone)]
pub(super) struct Stamp(pub(super) String);

impl Stamp {
    pub(super) fn now() -> Stamp {
        Stamp(super::time::now())
    }
}

impl Type<Sqlite> for Stamp {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }
}

impl<'q> Encode<'q, Sqlite> for Stamp {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(self.0.clone(), buf)
    }
}

impl Type<Postgres> for Stamp {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_name("timestamp")
    }
}

impl Encode<'_, Postgres> for Stamp {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        // The binary form of a TIMESTAMP: microseconds since 2000-01-01 00:00:00.
        let t = super::time::parse(&self.0).ok_or_else(|| format!("not a time: {}", self.0))?;
        let epoch = chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .expect("a valid date");
        let micros = (t - epoch)
            .num_microseconds()
            .ok_or("a time out of PostgreSQL's range")?;
        <i64 as Encode<Postgres>>::encode(micros, buf)
    }
}
