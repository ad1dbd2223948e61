//! Writes that take effect once even when the acknowledgement of their commit is lost.
//!
//! A connection lost while its `COMMIT` was on the way leaves the client not knowing whether
//! the transaction took effect (see `outage`). Running such a write again blindly could start a
//! second trial for one start (a RUNNING trial that no worker runs), read a claim this daemon
//! made as one "taken" by another, or take a finish it wrote for one written by someone else.
//! So each of them (a trial's start, its finish, both in one, a re-enqueue, a failover, the
//! commands taken, a worker registered) goes through `once!`: its transaction records
//! an id with its result in `sweepd_ops`, and every attempt after one that reached its commit
//! looks the id up first, *after* taking the study's row lock, so that an earlier attempt
//! still alive on a connection the server has not dropped yet has ended by then, one way or
//! the other. Found: the recorded result is returned and nothing is written again.
//!
//! The rows are deleted by the same store's later writes once no attempt can look for them
//! any more (ids below the oldest operation still in progress), and a starting daemon deletes
//! rows older than a day (those a killed daemon left). PostgreSQL only: SQLite does not run an
//! operation again (see `outage`), so it records nothing.

use super::engine::{sql, Engine, Tx};
use super::{Result, SqlContext, Store};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a write transaction decided: commit it, or roll it back (it wrote nothing that
/// matters); with the result its caller gets either way.
pub(super) enum Commit<R> {
    Yes(R),
    No(R),
}

/// The ids of this store's writes: who writes (one random id per store, so per daemon run),
/// the next number, and the numbers of the writes in progress.
pub(super) struct Ops {
    writer: String,
    next: AtomicU64,
    in_progress: Mutex<BTreeSet<u64>>,
}

impl Default for Ops {
    fn default() -> Ops {
        Ops {
            writer: format!("{:016x}", rand::random::<u64>()),
            next: AtomicU64::new(1),
            in_progress: Mutex::default(),
        }
    }
}

/// A write in progress: its number, released when the write is over however it ends (also
/// when its future is dropped).
pub(super) struct OpId<'a> {
    ops: &'a Ops,
    pub(super) seq: u64,
}

impl Ops {
    fn begin(&self) -> OpId<'_> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        self.in_progress.lock().expect("not poisoned").insert(seq);
        OpId { ops: self, seq }
    }

    /// Who writes: this store's id in `sweepd_ops`.
    pub(super) fn writer(&self) -> &str {
        &self.writer
    }

    /// Rows below this number belong to writes that are over.
    pub(super) fn oldest_in_progress(&self) -> u64 {
        let in_progress = self.in_progress.lock().expect("not poisoned");
        in_progress
            .first()
            .copied()
            .unwrap_or_else(|| self.next.load(Ordering::Relaxed))
    }
}

impl Drop for OpId<'_> {
    fn drop(&mut self) {
        if let Ok(mut in_progress) = self.ops.in_progress.lock() {
            in_progress.remove(&self.seq);
        }
    }
}

/// Runs `$body` (the contents of an async block with `$tx: &mut Tx` that evaluates to
/// `Result<Commit<R>>`) in a write transaction serialised on study `$study_id` (see
/// `Store::begin_study_write`), through an outage (`retrying!`) and exactly once: after an
/// attempt whose commit was sent, the next looks for the result that attempt recorded and
/// returns it instead of running the body again. The body writes nothing outside the
/// transaction; what it changes in memory (a tally) it must be able to redo.
macro_rules! once {
    ($store:expr, $study_id:expr, |$tx:ident| $body:block) => {{
        let store: &$crate::store::Store = $store;
        let study_id: i64 = $study_id;
        let op = store.begin_op();
        // Whether an earlier attempt sent its commit (and may have recorded its result).
        let mut committed_maybe = false;
        $crate::store::outage::retrying!(store, {
            let mut tx = store.begin_study_write(study_id).await?;
            if committed_maybe {
                if let Some(result) = store.recorded(&mut tx, op.seq).await? {
                    tx.rollback().await.at(&store.path)?;
                    return Ok(result);
                }
            }
            let decided = async {
                let $tx: &mut $crate::store::engine::Tx = &mut tx;
                $body
            }
            .await?;
            store
                .end_op(tx, study_id, op.seq, decided, &mut committed_maybe)
                .await
        })
    }};
}
pub(super) use once;

impl Store {
    /// A write that must take effect once begins: its id.
    pub(super) fn begin_op(&self) -> OpId<'_> {
        self.ops.begin()
    }

    /// Commits (recording the result first, on PostgreSQL) or rolls back what the body decided.
    pub(super) async fn end_op<R: Serialize>(
        &self,
        mut tx: Tx,
        study_id: i64,
        seq: u64,
        decided: Commit<R>,
        committed_maybe: &mut bool,
    ) -> Result<R> {
        match decided {
            Commit::Yes(result) => {
                if self.engine() == Engine::Postgres {
                    self.record(&mut tx, study_id, seq, &result).await?;
                }
                *committed_maybe = true;
                tx.commit().await.at(&self.path)?;
                Ok(result)
            }
            Commit::No(result) => {
                tx.rollback().await.at(&self.path)?;
                Ok(result)
            }
        }
    }

    /// The result an earlier attempt of write `seq` recorded, if it committed.
    pub(super) async fn recorded<R: DeserializeOwned>(
        &self,
        tx: &mut Tx,
        seq: u64,
    ) -> Result<Option<R>> {
        let row: Option<String> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT result FROM sweepd_ops WHERE writer = $1 AND seq = $2"
        )
        .bind(&self.ops.writer)
        .bind(seq as i64)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        Ok(row.map(|json| {
            serde_json::from_str(&json).expect("a result this version recorded reads back")
        }))
    }

    /// Records write `seq`'s result in its own transaction, and deletes the rows of this
    /// store's writes that are over (in the same statement: no extra round trip).
    async fn record<R: Serialize>(
        &self,
        tx: &mut Tx,
        study_id: i64,
        seq: u64,
        result: &R,
    ) -> Result<()> {
        let json = serde_json::to_string(result).expect("serializable");
        sql!(tx.conn(), |c| sqlx::query(
            "WITH done AS (DELETE FROM sweepd_ops WHERE writer = $1 AND seq < $5) \
             INSERT INTO sweepd_ops (writer, seq, study_id, result) VALUES ($1, $2, $3, $4)"
        )
        .bind(&self.ops.writer)
        .bind(seq as i64)
        .bind(study_id)
        .bind(json)
        .bind(self.ops.oldest_in_progress() as i64)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }

    /// Deletes the records of writes older than a day: those of daemons that were killed
    /// before their later writes could delete them (a starting daemon, on PostgreSQL).
    pub(super) async fn forget_old_ops(&self, tx: &mut Tx) -> Result<()> {
        if self.engine() != Engine::Postgres {
            return Ok(());
        }
        sql!(tx.conn(), |c| sqlx::query(
            "DELETE FROM sweepd_ops WHERE created_at < LOCALTIMESTAMP - INTERVAL '1 day'"
        )
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_kept_while_their_write_is_in_progress() {
        let ops = Ops::default();
        let a = ops.begin();
        let b = ops.begin();
        assert_eq!(ops.oldest_in_progress(), a.seq);
        drop(a);
        assert_eq!(ops.oldest_in_progress(), b.seq);
        let b_seq = b.seq;
        drop(b);
        // None in progress: every row so far is over.
        assert_eq!(ops.oldest_in_progress(), b_seq + 1);
    }
}
