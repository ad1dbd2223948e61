//! Riding out an outage of the PostgreSQL server (a restart, a crash, a network cut) in the
//! middle of a run.
//!
//! **Which errors.** A store operation fails for one of two reasons: the server refused what
//! was asked (a constraint, a type: an error to report), or the connection was lost (the server
//! shut down or crashed, SQLSTATE 57P01/57P02; it is starting, 57P03; class 08; a socket error;
//! no connection to be had from the pool within its timeout; a session the server ended for
//! idling inside a transaction, 25P03). Only the second is waited through ([`connection_lost`]).
//!
//! **What is run again.** The whole operation, never one statement of it: a transaction whose
//! connection was lost before its commit took effect is rolled back by the server, so running
//! it again from its `BEGIN` on a fresh connection is the same as running it once. The one case
//! where that is not known is a connection lost *during* the commit: it may or may not have
//! taken effect. The writes for which that matters (a trial's start and finish, ...) record an
//! id in their own transaction and look it up before writing again (`once`); the others are
//! idempotent as written (upserts, conditional updates, `ON CONFLICT DO NOTHING`).
//!
//! **Rolled back by the server.** A transaction the server ended to break a deadlock (40P01)
//! or a serialization failure (40001) wrote nothing: it is run again whole, at once, up to
//! [`ROLLED_BACK_RETRIES`] times, on either kind of daemon or CLI store. `sweepd_step` writes
//! a trial's finish before it takes the study's lock, so a writer that holds that lock and
//! then updates the same trial (another host failing this one's trials over while it still
//! runs) closes a cycle; one of the two is rolled back and runs again.
//!
//! **Who waits.** A daemon, once it holds its study ([`Store::wait_through_outages`]): the
//! core's call into the store waits, so no trial starts; workers go on, and what they finish is
//! held by their slots and written when the server is back. The CLI's commands do not wait:
//! they fail at once, saying the server cannot be reached. SQLite never waits here: a file has
//! no connection to lose (its lock has its own busy timeout).
//!
//! **What is said.** One warning when an outage starts, a reminder every 30 s while it lasts,
//! one line when it ends, whichever of the daemon's tasks meets it first; the state is
//! published ([`Outage`], [`Store::outage`]) for the supervisor's status line, watchdog, daemon
//! row and metrics.

use super::engine::Engine;
use super::{Result, Store, StoreError};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long one attempt may go without an answer before its connection is given up for lost:
/// after a network cut a socket can wait forever for a reply that will never come. Doubled for
/// each attempt of the same operation that runs out, so that an operation that is only slow
/// (the history of a very large study) is not cut off for good.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(20);

/// How many times in a row one operation is run again after the server rolled it back
/// (deadlock, serialization failure) before the error is reported.
const ROLLED_BACK_RETRIES: u32 = 10;

/// How often a lasting outage is logged again.
const REMIND_EVERY: Duration = Duration::from_secs(30);

/// The wait before the `n`th attempt after the first that failed: 250 ms, doubling to 8 s (the
/// pool adds its own wait for a connection, up to 5 s, while the server refuses them).
fn backoff(n: u32) -> Duration {
    Duration::from_millis(250u64 << n.saturating_sub(1).min(5))
}

/// Whether an error says the connection to the server was lost, or none can be had now, as
/// opposed to a query the server refused.
pub(super) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| lost_sqlstate(&c)),
        _ => false,
    }
}

/// The SQLSTATEs of a lost connection: class 08 (connection exception); 57P01-57P03 (admin
/// shutdown, crash shutdown, cannot connect now: a restart); 25P03 and 57P05 (the server ended
/// a session idle in a transaction, or idle); 53300 (too many connections, as every host
/// reconnects at once).
fn lost_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "57P05" | "25P03" | "53300"
        )
}

/// The SQLSTATEs of a transaction the server rolled back on its own, which wrote nothing and
/// may simply run again: a deadlock broken (40P01), a serialization failure (40001).
fn rolled_back_sqlstate(code: &str) -> bool {
    matches!(code, "40P01" | "40001")
}

impl StoreError {
    /// Whether this is a lost connection to a database server (see [`connection_lost`]).
    pub fn connection_lost(&self) -> bool {
        matches!(self, StoreError::Sql { source, .. } if connection_lost(source))
    }

    /// Whether the server rolled the transaction back itself (see [`rolled_back_sqlstate`]).
    fn rolled_back(&self) -> bool {
        matches!(self, StoreError::Sql { source: sqlx::Error::Database(d), .. }
            if d.code().is_some_and(|c| rolled_back_sqlstate(&c)))
    }
}

/// The database's availability as the daemon's store meets it.
#[derive(Debug, Clone, Default)]
pub struct Outage {
    /// When the server stopped answering; `None` while it answers.
    pub since: Option<Instant>,
    /// The last error of the outage in progress.
    pub error: Option<String>,
    /// The last outage that ended.
    pub last: Option<Ended>,
    /// When the outage in progress was last logged.
    reminded: Option<Instant>,
}

/// An outage that ended.
#[derive(Debug, Clone)]
pub struct Ended {
    pub at: Instant,
    /// The same moment on the wall clock, for people (`2026-01-31 14:02:11`).
    pub at_wall: String,
    pub lasted: Duration,
}

/// The store's shared outage state: whether it waits at all, and the outage in progress.
pub(super) struct Outages {
    wait: AtomicBool,
    state: watch::Sender<Outage>,
}

impl Default for Outages {
    fn default() -> Outages {
        Outages {
            wait: AtomicBool::new(false),
            state: watch::Sender::new(Outage::default()),
        }
    }
}

impl Outages {
    fn in_progress(&self) -> bool {
        self.state.borrow().since.is_some()
    }

    /// An attempt failed on a lost connection: the outage starts, or goes on.
    fn failed(&self, db: &std::path::Path, e: &StoreError) {
        let cause = match e {
            StoreError::Sql { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        self.state.send_modify(|o| {
            let now = Instant::now();
            match o.since {
                None => {
                    tracing::warn!(
                        "database {} cannot be reached ({cause}): no trial starts until it is back; running trials go on and their results are written then",
                        db.display()
                    );
                    o.since = Some(now);
                    o.reminded = Some(now);
                }
                Some(since) if o.reminded.is_none_or(|r| r.elapsed() >= REMIND_EVERY) => {
                    tracing::warn!(
                        "database {} still cannot be reached after {}s ({cause}); retrying",
                        db.display(),
                        since.elapsed().as_secs()
                    );
                    o.reminded = Some(now);
                }
                Some(_) => {}
            }
            o.error = Some(cause);
        });
    }

    /// The server answered (a result, or an error of its own): an outage in progress is over.
    fn answered(&self, db: &std::path::Path) {
        if !self.in_progress() {
            return;
        }
        self.state.send_if_modified(|o| {
            let Some(since) = o.since.take() else {
                return false; // another task said it first
            };
            let lasted = since.elapsed();
            tracing::info!(
                "database {} is back after {}s: writing what finished meanwhile, starting trials again",
                db.display(),
                lasted.as_secs()
            );
            o.error = None;
            o.reminded = None;
            o.last = Some(Ended {
                at: Instant::now(),
                at_wall: chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string(),
                lasted,
            });
            true
        });
    }
}

impl Store {
    /// From now on, an operation whose connection to the PostgreSQL server is lost waits for
    /// the server and runs again, instead of failing (a daemon holding its study; the CLI's
    /// commands fail instead). Shared by every clone of this store.
    pub fn wait_through_outages(&self) {
        self.outages.wait.store(true, Ordering::Relaxed);
    }

    /// The outage in progress, if any, and the last one, as they change.
    pub fn outage(&self) -> watch::Receiver<Outage> {
        self.outages.state.subscribe()
    }

    /// The state of one operation run through [`retrying!`].
    pub(super) fn retry(&self) -> Retry<'_> {
        let wait = self.engine() == Engine::Postgres && self.outages.wait.load(Ordering::Relaxed);
        Retry {
            store: self,
            wait,
            failures: 0,
            rolled_back: 0,
            limit: ATTEMPT_LIMIT,
        }
    }
}

/// Runs `$body` (the contents of an async block that evaluates to a store `Result`: one whole
/// operation, a statement or a transaction from its `BEGIN` to its commit) until it ends in
/// anything but a lost connection: at once again while each failure may have been a pooled
/// connection that the server closed while it sat in the pool (the usual first sign of a
/// restart; at most one per connection of the pool), then after a growing wait.
/// Once on SQLite, and on PostgreSQL until [`Store::wait_through_outages`]. A `?` in the body
/// ends the attempt, not the function. (A macro rather than a function taking an async
/// closure: the futures of such closures are not `Send` for the slots' tasks.)
macro_rules! retrying {
    ($store:expr, $body:block) => {{
        let mut retry = $store.retry();
        loop {
            let attempt = retry.limit(async $body).await;
            if let Some(done) = retry.settle(attempt).await {
                break done;
            }
        }
    }};
}
pub(super) use retrying;

/// One operation's attempts (see [`retrying!`]).
pub(super) struct Retry<'a> {
    store: &'a Store,
    /// Whether this operation waits through an outage at all.
    wait: bool,
    failures: u32,
    /// Attempts the server rolled back (deadlock, serialization failure).
    rolled_back: u32,
    /// The limit of the next attempt.
    limit: Duration,
}

impl Retry<'_> {
    /// Runs one attempt, giving its connection up for lost past the limit.
    pub(super) async fn limit<T>(&mut self, attempt: impl Future<Output = Result<T>>) -> Result<T> {
        if !self.wait {
            return attempt.await;
        }
        match tokio::time::timeout(self.limit, attempt).await {
            Ok(result) => result,
            Err(_) => {
                let waited = self.limit;
                self.limit = self.limit.saturating_mul(2);
                Err(StoreError::Sql {
                    path: self.store.path.clone(),
                    source: sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer for {}s", waited.as_secs()),
                    )),
                })
            }
        }
    }

    /// The operation's result, or `None` once it is time for the next attempt.
    pub(super) async fn settle<T>(&mut self, result: Result<T>) -> Option<Result<T>> {
        let outages = &self.store.outages;
        match result {
            Err(e) if e.rolled_back() && self.rolled_back < ROLLED_BACK_RETRIES => {
                self.rolled_back += 1;
                if self.wait {
                    outages.answered(&self.store.path);
                }
                // Rare (a failover of a host that still runs), and the server logs its side:
                // said where an operator reading both logs sees it.
                tracing::info!("the database rolled a write back ({e}); running it again");
                None
            }
            Err(e) if self.wait && e.connection_lost() => {
                self.failures += 1;
                // A connection the server closed while it sat in the pool (the first sign of
                // a restart, or one long over) fails once, is dropped, and the next answers:
                // no outage yet, as long as each of the pool's connections may have been such
                // a one (the pool hands them out untested). No connection to be had for the
                // pool's whole wait is an outage.
                let stale = !matches!(
                    e,
                    StoreError::Sql {
                        source: sqlx::Error::PoolTimedOut,
                        ..
                    }
                );
                if self.failures <= super::postgres::MAX_CONNECTIONS
                    && stale
                    && !outages.in_progress()
                {
                    tracing::debug!("lost a connection to the database ({e}); trying again");
                    return None;
                }
                outages.failed(&self.store.path, &e);
                tokio::time::sleep(backoff(self.failures - 1)).await;
                None
            }
            other => {
                if self.wait {
                    outages.answered(&self.store.path);
                }
                Some(other)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_grows_to_eight_seconds() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
    }

    #[test]
    fn a_lost_connection_is_told_from_a_refused_query() {
        assert!(connection_lost(&sqlx::Error::PoolTimedOut));
        assert!(connection_lost(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))));
        assert!(!connection_lost(&sqlx::Error::RowNotFound));
        assert!(!connection_lost(&sqlx::Error::PoolClosed));
        assert!(!connection_lost(&sqlx::Error::ColumnNotFound("x".into())));
    }

    #[rstest::rstest]
    #[case::admin_shutdown("57P01", true)]
    #[case::crash_shutdown("57P02", true)]
    #[case::starting_up("57P03", true)]
    #[case::idle_in_transaction("25P03", true)]
    #[case::idle_session("57P05", true)]
    #[case::too_many_connections("53300", true)]
    #[case::connection_failure("08006", true)]
    #[case::connection_does_not_exist("08003", true)]
    #[case::unique_violation("23505", false)]
    #[case::query_canceled("57014", false)]
    #[case::serialization_failure("40001", false)]
    #[case::deadlock_detected("40P01", false)]
    #[case::undefined_table("42P01", false)]
    fn sqlstates_of_a_lost_connection(#[case] code: &str, #[case] lost: bool) {
        assert_eq!(lost_sqlstate(code), lost, "{code}");
    }

    #[rstest::rstest]
    #[case::deadlock_detected("40P01", true)]
    #[case::serialization_failure("40001", true)]
    #[case::lock_not_available("55P03", false)]
    #[case::unique_violation("23505", false)]
    #[case::admin_shutdown("57P01", false)]
    fn sqlstates_of_a_transaction_the_server_rolled_back(#[case] code: &str, #[case] rolled: bool) {
        assert_eq!(rolled_back_sqlstate(code), rolled, "{code}");
    }
}
