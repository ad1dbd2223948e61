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

impl<'a> Start<'a> {
    /// The start `sweepd_step` is asked for, its rows built as the statement-per-row path
    /// builds them.
    fn of((space, op, ctx): StartWrite<'a, '_>) -> Self {
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
    }

    /// Takes in what the call read of the study's trials (`open`: the trials open before it),
    /// checks (in debug builds) that the tally's rule agrees with the budget the function
    /// decided, and counts the trial it started.
    fn take_in(&mut self, open: Vec<i64>, read: Vec<TallyRow>, started: Option<&StartRec>) {
        apply_read(self.tally, open, read);
        let room = match self.claim {
            None => self.tally.room_for_new(self.budget),
            Some(_) => self.tally.room(self.budget),
        };
        // A start refused for a WAITING trial was not judged against the budget.
        if !matches!(started, Some(StartRec::Waiting)) {
            let decided = !matches!(started, Some(StartRec::NoRoom));
            debug_assert_eq!(
                room, decided,
                "sweepd_step and the tally disagree on the budget: {:?}",
                self.tally
            );
        }
        match started {
            Some(&StartRec::Yes { trial_id, .. }) if self.claim.is_none() => {
                self.tally.started_new(trial_id)
            }
            Some(&StartRec::Yes { trial_id, .. }) => self.tally.started(trial_id),
            _ => {}
        }
    }
}

/// The values of a finish `sweepd_step` can write (none for no finish); `None` where the
/// statement-per-row path must: a finish other than COMPLETE, a negative zero.
fn complete_values<'f>(finish: Option<&'f FinishWrite<'_>>) -> Option<&'f [f64]> {
    let values: &[f64] = match finish {
        Some(FinishWrite {
            how: Finish::Complete(values),
            ..
        }) => values,
        Some(_) => return None,
        None => &[],
    };
    (!values.iter().any(|v| is_negative_zero(*v))).then_some(values)
}

/// What the rows `sweepd_step` returned say: the step, and the trials it read for the tally;
/// `None` for those where it answered from the record of an earlier attempt that committed
/// (nothing read: the tally's next refresh reads what it would have). `finish` and `start`:
/// whether each was asked for.
fn stepped_of(rows: Vec<StepRow>, finish: bool, start: bool) -> (Stepped, Option<Vec<TallyRow>>) {
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
            "replay" => {
                let r: Recorded = row
                    .r_state
                    .as_deref()
                    .and_then(|json| serde_json::from_str(json).ok())
                    .expect("a result sweepd_step recorded reads back");
                if finish {
                    stepped.finished = Some(r.finish);
                }
                if start {
                    stepped.started = start_rec(r.start.as_deref(), r.trial_id, r.number)
                        .or(Some(StartRec::NoRoom));
                }
                return (stepped, None);
            }
            other => unreachable!("sweepd_step returns no rows of kind {other}"),
        }
    }
    (stepped, Some(read))
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
        let Some(values) = complete_values(finish.as_ref()) else {
            return Ok(None);
        };
        let mut start = start.map(Start::of);
        let params = start.as_ref().map_or(&[][..], |s| &s.params[..]);
        if params.iter().any(|(_, v, _)| is_negative_zero(*v)) {
            return Ok(None);
        }
        let open = start.as_ref().map_or_else(Vec::new, |s| s.tally.open());
        let op = self.begin_op();
        let rows = self
            .call_step(
                study,
                op.seq,
                finish.as_ref(),
                values,
                start.as_ref(),
                &open,
            )
            .await?;
        let (stepped, read) = stepped_of(rows, finish.is_some(), start.is_some());
        if let (Some(s), Some(read)) = (start.as_mut(), read) {
            s.take_in(open, read, stepped.started.as_ref());
        }
        Ok(Some(stepped))
    }

    /// The one round trip: `sweepd_step` called with the finish's and the start's rows, and
    /// the tally's count as it stands (`open`: its open trials), for write `seq`.
    async fn call_step(
        &self,
        study: &Study,
        seq: u64,
        finish: Option<&FinishWrite<'_>>,
        values: &[f64],
        start: Option<&Start<'_>>,
        open: &[i64],
    ) -> Result<Vec<StepRow>> {
        let fin_attrs = finish.map_or_else(Vec::new, |f| attr_texts(f.attrs));
        let encoded: Vec<(Option<f64>, &str)> = values.iter().map(|v| encode_value(*v)).collect();
        let start_attrs = start.map_or(&[][..], |s| &s.attrs[..]);
        let params = start.map_or(&[][..], |s| &s.params[..]);
        let (seen, finished) = start.map_or((0, 0), |s| (s.tally.seen(), s.tally.finished));
        retrying!(self, {
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
            .bind(seq as i64)
            .bind(self.ops.oldest_in_progress() as i64)
            .bind(Stamp::now())
            .bind(finish.map(|f| f.trial_id))
            .bind(encoded.iter().map(|(v, _)| *v).collect::<Vec<_>>())
            .bind(encoded.iter().map(|(_, t)| *t).collect::<Vec<_>>())
            .bind(fin_attrs.iter().map(|(k, _)| *k).collect::<Vec<_>>())
            .bind(
                fin_attrs
                    .iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(finish.and_then(|f| f.done_by))
            .bind(start.is_some())
            .bind(start.and_then(|s| s.claim))
            .bind(start.and_then(|s| s.budget).map(|b| b as i64))
            .bind(finished as i64)
            .bind(seen)
            .bind(open)
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
            .bind(start.and_then(|s| s.skip))
            .fetch_all(c)
            .await
            .at(&self.path)?;
            kept.keep();
            Ok(rows)
        })
    }
}
