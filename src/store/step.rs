//! PostgreSQL: a trial's finish, the next trial's start, or both, in one round trip.
//!
//! Every writer of a study's trials holds the study's row lock from its `SELECT … FOR UPDATE`
//! to its commit (`Tx::lock_study`), so the study's trials per second, over all hosts, are at
//! most one over that hold. Sent statement by statement (lock, finish, the tally's read, start,
//! the `once!` record, commit), a finish and the next start held it for six round trips between
//! sweepd and the server, about a millisecond on one machine: every host's slots waited in
//! that line (the coordination bench's ~900 trials/s at 1, 2 and 4 hosts alike). Here they are
//! one call of the server-side function `sweepd_step` in a statement of its own, so the lock is
//! held for as long as the server takes to run it, less the finish, which it writes before it
//! takes the lock. Its one definition is `migrations-postgres/functions/sweepd_step.sql`,
//! installed by `postgres::migrate`. A writer that holds the lock and then takes that trial's
//! row (a failover of this host while it runs) deadlocks with it; the server rolls one back,
//! and `retrying!` runs it again.
//!
//! The function writes the rows the statement-per-row path (`trials`) writes (both built by
//! `rows`), under the same conditions, and decides the budget by [`Tally`]'s rule over the
//! trials it reads (`sweepd_tally`, the read a refresh makes); it returns those trials, which
//! the daemon's tally takes in as a refresh would, and the daemon checks (in debug builds) that
//! its tally agrees with the decision. The rule is written twice, in `Tally` and in the
//! function, because it is decided under the lock within the call's one round trip; a table of
//! cases run on both engines holds the two together (tests/postgres.rs). The function records
//! what it wrote in `sweepd_ops`, as `once!` does, and answers a call it already ran (whose
//! commit the daemon could not confirm) from that record.
//!
//! Rare cases keep the statement-per-row path (the callers use it when [`Store::step`] returns
//! `None`): SQLite, negative zeros (their note is read and rewritten), and finishes other than
//! COMPLETE (a pruned trial's value is read from its reports, a failure may get a retry copy).

use super::attrs::is_negative_zero;
use super::engine::{Conn, Pool, Stamp};
use super::outage::retrying;
use super::rows::{attr_texts, start_rows_of, FinishWrite, ParamRow, StartCtx, StartOp, StartRec};
use super::tally::{apply_read, TallyRow};
use super::{encode_value, Result, SqlContext, Store, Study};
use crate::study::{Finish, SearchSpace, Tally};

/// A start to write: what it starts in which space, and who starts it against which budget.
pub(super) type StartWrite<'a, 'c> = (&'a SearchSpace, StartOp<'a>, &'a mut StartCtx<'c>);

/// A start as `sweepd_step` takes it: the WAITING trial claimed (`None`: a new trial), its
/// system attributes as JSON texts and its param rows, against the budget `budget` as `tally`
/// counts it.
struct Start<'a> {
    claim: Option<i64>,
    attrs: Vec<(&'static str, String)>,
    params: Vec<ParamRow>,
    budget: Option<u64>,
    tally: &'a mut Tally,
    /// A new trial waits for any WAITING trial but these (`p_skip`); `None`: it does not.
    skip: Option<&'a [i64]>,
}

/// What a step did: the finish (`Some(None)`: the trial was not RUNNING) and the start, each
/// where one was asked for.
#[derive(Debug, Default)]
pub(super) struct Stepped {
    pub(super) finished: Option<Option<i64>>,
    pub(super) started: Option<StartRec>,
}

/// One row `sweepd_step` returns (see its header for the kinds).
#[derive(sqlx::FromRow)]
struct StepRow {
    r_kind: String,
    r_trial: Option<i64>,
    r_number: Option<i64>,
    r_state: Option<String>,
    r_retried: Option<bool>,
    r_sweepd: Option<bool>,
}

/// What `sweepd_step` records of a call that wrote something, in `sweepd_ops`.
#[derive(serde::Deserialize)]
struct Recorded {
    finish: Option<i64>,
    start: Option<String>,
    trial_id: Option<i64>,
    number: Option<i64>,
}

/// The start's outcome as the function spells it.
fn start_rec(state: Option<&str>, trial: Option<i64>, number: Option<i64>) -> Option<StartRec> {
    match (state?, trial, number) {
        ("yes", Some(trial_id), Some(number)) => Some(StartRec::Yes { trial_id, number }),
        ("taken", ..) => Some(StartRec::Taken),
        ("noroom", ..) => Some(StartRec::NoRoom),
        ("waiting", ..) => Some(StartRec::Waiting),
        _ => None,
    }
}

impl Store {
    /// Writes `finish`, then `start`, in one call of `sweepd_step` (see the module's header).
    /// `None` where the statement-per-row path must do it: SQLite, a finish other than
    /// COMPLETE, a negative zero.
    pub(super) async fn step(
        &self,
        study: &Study,
        finish: Option<FinishWrite<'_>>,
        start: Option<StartWrite<'_, '_>>,
    ) -> Result<Option<Stepped>> {
        let Pool::Postgres(_) = &self.pool else {
            return Ok(None);
        };
        // Decided before any row is built: the statement-per-row path builds its own.
        let values: &[f64] = match &finish {
            Some(FinishWrite {
                how: Finish::Complete(values),
                ..
            }) => values,
            Some(_) => return Ok(None),
            None => &[],
        };
        if values.iter().any(|v| is_negative_zero(*v)) {
            return Ok(None);
        }
        let fin_attrs = finish
            .as_ref()
            .map_or_else(Vec::new, |f| attr_texts(f.attrs));
        let mut start = start.map(|(space, op, ctx)| {
            let (attrs, params) = start_rows_of(space, op, ctx.owner, ctx.runner);
            let (claim, skip) = match op {
                StartOp::New(_) => (None, ctx.skip_waiting),
                StartOp::Claim(w, _) => (Some(w.trial_id), None),
            };
            Start {
                claim,
                attrs,
                params,
                budget: ctx.budget,
                tally: &mut *ctx.tally,
                skip,
            }
        });
        let params = start.as_ref().map_or(&[][..], |s| &s.params[..]);
        if params.iter().any(|(_, v, _)| is_negative_zero(*v)) {
            return Ok(None);
        }
        let encoded: Vec<(Option<f64>, &str)> = values.iter().map(|v| encode_value(*v)).collect();
        let start_attrs = start.as_ref().map_or(&[][..], |s| &s.attrs[..]);
        let (seen, open, finished) = match &start {
            Some(s) => (s.tally.seen(), s.tally.open(), s.tally.finished),
            None => (0, Vec::new(), 0),
        };
        let op = self.begin_op();
        let rows: Vec<StepRow> = retrying!(self, {
            let mut kept = self.kept.take(&self.pool).await.at(&self.path)?;
            let Conn::Postgres(c) = kept.conn() else {
                unreachable!("a PostgreSQL pool gives PostgreSQL connections");
            };
            let rows: Vec<StepRow> = sqlx::query_as(
                "SELECT r_kind, r_trial, r_number, r_state, r_retried, r_sweepd \
                     FROM sweepd_step($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                     $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
            )
            .bind(study.id)
            .bind(self.ops.writer())
            .bind(op.seq as i64)
            .bind(self.ops.oldest_in_progress() as i64)
            .bind(Stamp::now())
            .bind(finish.as_ref().map(|f| f.trial_id))
            .bind(encoded.iter().map(|(v, _)| *v).collect::<Vec<_>>())
            .bind(encoded.iter().map(|(_, t)| *t).collect::<Vec<_>>())
            .bind(fin_attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>())
            .bind(
                fin_attrs
                    .iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(finish.as_ref().and_then(|f| f.done_by))
            .bind(start.is_some())
            .bind(start.as_ref().and_then(|s| s.claim))
            .bind(start.as_ref().and_then(|s| s.budget).map(|b| b as i64))
            .bind(finished as i64)
            .bind(seen)
            .bind(&open)
            .bind(start_attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>())
            .bind(
                start_attrs
                    .iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                params
                    .iter()
                    .map(|(n, _, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(params.iter().map(|(_, v, _)| *v).collect::<Vec<_>>())
            .bind(
                params
                    .iter()
                    .map(|(_, _, d)| d.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(start.as_ref().and_then(|s| s.skip))
            .fetch_all(c)
            .await
            .at(&self.path)?;
            kept.keep();
            Ok(rows)
        })?;
        let mut stepped = Stepped::default();
        let mut read = Vec::new();
        for row in rows {
            match row.r_kind.as_str() {
                "tally" => read.push(TallyRow {
                    trial_id: row.r_trial.unwrap_or_default(),
                    state: row.r_state.unwrap_or_default(),
                    retried: row.r_retried.unwrap_or_default(),
                    sweepd: row.r_sweepd.unwrap_or_default(),
                }),
                "finish" => stepped.finished = Some(row.r_number),
                "start" => {
                    stepped.started = start_rec(row.r_state.as_deref(), row.r_trial, row.r_number)
                }
                // An earlier attempt committed: its record, and nothing read (the tally's
                // next refresh reads what it would have).
                "replay" => {
                    let r: Recorded = row
                        .r_state
                        .as_deref()
                        .and_then(|json| serde_json::from_str(json).ok())
                        .expect("a result sweepd_step recorded reads back");
                    if finish.is_some() {
                        stepped.finished = Some(r.finish);
                    }
                    if start.is_some() {
                        stepped.started = start_rec(r.start.as_deref(), r.trial_id, r.number)
                            .or(Some(StartRec::NoRoom));
                    }
                    return Ok(Some(stepped));
                }
                other => unreachable!("sweepd_step returns no rows of kind {other}"),
            }
        }
        if let Some(s) = start.as_mut() {
            apply_read(s.tally, open, read);
            let room = match s.claim {
                None => s.tally.room_for_new(s.budget),
                Some(_) => s.tally.room(s.budget),
            };
            // A start refused for a WAITING trial was not judged against the budget.
            if !matches!(stepped.started, Some(StartRec::Waiting)) {
                let decided = !matches!(stepped.started, Some(StartRec::NoRoom));
                debug_assert_eq!(
                    room, decided,
                    "sweepd_step and the tally disagree on the budget: {:?}",
                    s.tally
                );
            }
            match stepped.started {
                Some(StartRec::Yes { trial_id, .. }) if s.claim.is_none() => {
                    s.tally.started_new(trial_id)
                }
                Some(StartRec::Yes { trial_id, .. }) => s.tally.started(trial_id),
                _ => {}
            }
        }
        Ok(Some(stepped))
    }
}
