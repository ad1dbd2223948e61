//! Trials changing state: started (a new one, or a WAITING one claimed) under the budget,
//! finished once with a retry copy where a failure asks for one, re-enqueued, their
//! intermediate reports, and the RUNNING trials of sweepd daemons for reconciling at start.

use super::attrs::{is_negative_zero, NegativeZeros};
use super::daemon::DaemonId;
use super::engine::{sql, Engine, Label, Stamp, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::rows::{
    attr_texts, param_row, runner_attrs, start_rows_of, FinishWrite, ParamRow, Runner, StartCtx,
    StartOp, StartRec, Started, Waiting,
};
use super::{encode_value, placeholders, read_value, Result, SqlContext, Store, Study};
use crate::study::attrs::{
    ATTEMPTS_ATTR, FAILED_TRIAL_ATTR, FAIL_KIND_ATTR, FAIL_REASON_ATTR, FAIL_REASON_USER_ATTR,
    FIXED_PARAMS_ATTR, KILLED_BY_HAND_ATTR, NEGATIVE_ZERO_ATTR, OWNER_ATTR, RETRIED_AS_ATTR,
    RETRY_HISTORY_ATTR, STDERR_TAIL_ATTR, WORKER_ID_ATTR,
};
use crate::study::{
    Attempts, Distribution, Failure, FailureKind, Finish, ParamValue, Params, RetryOf, SearchSpace,
    TrialState,
};
use serde_json::{json, Value};

impl Store {
    /// The study's RUNNING trials that a sweepd daemon started, with that daemon (`None` for
    /// trials of sweepd versions that did not record it: they only named the worker). RUNNING
    /// trials of anyone else (an Optuna script) are not listed: sweepd leaves them alone.
    pub async fn sweepd_running(&self, study: &Study) -> Result<Vec<(i64, Option<DaemonId>)>> {
        let rows: Vec<(i64, Option<String>)> = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT CAST(t.trial_id AS BIGINT), \
               (SELECT a.value_json FROM trial_system_attributes a \
                 WHERE a.trial_id = t.trial_id AND a.key = $1) \
             FROM trials t WHERE t.study_id = $2 AND t.state = 'RUNNING' AND EXISTS \
               (SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id \
                 AND a.key IN ($1, $3)) \
             ORDER BY t.trial_id",
            )
            .bind(OWNER_ATTR)
            .bind(study.id)
            .bind(WORKER_ID_ATTR)
            .fetch_all(c)
            .await)
            .at(&self.path)
        })?;
        Ok(rows
            .into_iter()
            .map(|(trial_id, owner)| {
                let owner = owner
                    .and_then(|j| serde_json::from_str::<Value>(&j).ok())
                    .and_then(|v| DaemonId::from_json(&v));
                (trial_id, owner)
            })
            .collect())
    }

    /// Marks a RUNNING trial FAIL (kind `interrupted`) and enqueues a WAITING copy of it, in one
    /// transaction. Returns the trial's number, or `None` if it was no longer RUNNING.
    pub async fn interrupt(
        &self,
        study: &Study,
        trial_id: i64,
        reason: &str,
    ) -> Result<Option<i64>> {
        let failure = Failure {
            kind: FailureKind::Interrupted,
            reason: reason.to_owned(),
            stderr_tail: None,
            retry: true,
            counts: true,
        };
        self.finish(study, trial_id, &Finish::Fail(failure), &[])
            .await
    }

    /// Re-enqueues a trial already recorded as a final FAIL (a WAITING copy, as a retry is),
    /// so that it no longer spends the budget. Returns the copy's number, or `None` when the
    /// trial is not a FAIL without a copy, or was killed by hand (`sweepd kill`: final).
    pub async fn requeue_failed(&self, study: &Study, trial_id: i64) -> Result<Option<i64>> {
        once!(self, study.id, |tx| {
            self.requeue_failed_in(tx, study, trial_id).await
        })
    }

    /// The writes of [`Store::requeue_failed`], in `tx`.
    async fn requeue_failed_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        trial_id: i64,
    ) -> Result<Commit<Option<i64>>> {
        let row: Option<(i64, Option<String>)> = sql!(tx.conn(), |c| {
            sqlx::query_as(
            "SELECT CAST(t.number AS BIGINT), (SELECT a.value_json FROM trial_system_attributes a \
               WHERE a.trial_id = t.trial_id AND a.key = $2) \
             FROM trials t WHERE t.trial_id = $1 AND t.state = 'FAIL' AND NOT EXISTS \
               (SELECT 1 FROM trial_system_attributes a WHERE a.trial_id = t.trial_id \
                 AND a.key IN ($3, $4))",
        )
        .bind(trial_id)
        .bind(FAIL_KIND_ATTR)
        .bind(RETRIED_AS_ATTR)
        .bind(KILLED_BY_HAND_ATTR)
        .fetch_optional(c)
        .await
        })
        .at(&self.path)?;
        let Some((number, kind)) = row else {
            return Ok(Commit::No(None));
        };
        let kind = kind
            .and_then(|k| serde_json::from_str::<FailureKind>(&k).ok())
            .unwrap_or(FailureKind::UserError);
        let copy = self
            .enqueue_retry(tx, study, trial_id, number, Some(kind))
            .await?;
        self.set_attr(tx, trial_id, RETRIED_AS_ATTR, &json!(copy))
            .await?;
        Ok(Commit::Yes(Some(copy)))
    }

    /// The oldest WAITING trial and the params it already has (a retry copy's, or Optuna's
    /// `fixed_params` from `enqueue_trial`), without claiming it: the supervisor first decides
    /// where it can run. `problem` is set when a given param is outside the search space.
    pub async fn peek_waiting(
        &self,
        study: &Study,
        space: &SearchSpace,
        exclude: &[i64],
    ) -> Result<Option<Waiting>> {
        retrying!(self, {
            self.peek_waiting_attempt(study, space, exclude).await
        })
    }

    async fn peek_waiting_attempt(
        &self,
        study: &Study,
        space: &SearchSpace,
        exclude: &[i64],
    ) -> Result<Option<Waiting>> {
        // Trials already in the supervisor's line are skipped (a short list).
        let skip = placeholders(2, exclude.len());
        let sql = format!(
            "SELECT CAST(trial_id AS BIGINT), CAST(number AS BIGINT) FROM trials \
             WHERE study_id = $1 AND state = 'WAITING' {} \
             ORDER BY trial_id LIMIT 1",
            if exclude.is_empty() {
                String::new()
            } else {
                format!("AND trial_id NOT IN ({skip})")
            }
        );
        // On the connection a trial's start uses next (see `engine::Kept`).
        let mut kept = self.kept.take(&self.pool).await.at(&self.path)?;
        let found: Option<(i64, i64)> = sql!(kept.conn(), |c| {
            let mut q = sqlx::query_as(&sql).bind(study.id);
            for id in exclude {
                q = q.bind(id);
            }
            q.fetch_optional(c).await
        })
        .at(&self.path)?;
        kept.keep();
        let Some((trial_id, number)) = found else {
            return Ok(None);
        };
        let mut w = Waiting {
            trial_id,
            number,
            fixed: Params::new(),
            extra: Vec::new(),
            enqueued: serde_json::Map::new(),
            present: Vec::new(),
            problem: None,
            attempts: Attempts::new(),
            retry_of: None,
        };
        let rows: Vec<(String, f64, String)> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id = $1",
        )
        .bind(trial_id)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        for (name, internal, dist) in rows {
            w.present.push(name.clone());
            let theirs = Distribution::from_optuna_json(&dist).ok();
            let Some(spec) = space.get(&name) else {
                if let Some(d) = theirs {
                    if let Some(v) = d.from_internal(internal) {
                        w.extra.push((name, d, v));
                    }
                }
                continue;
            };
            let value = theirs
                .as_ref()
                .and_then(|d| d.from_internal(internal).map(|v| d.external(&v)))
                .and_then(|ext| spec.dist.from_external(&ext));
            match value {
                Some(v) => {
                    w.fixed.insert(name, v);
                }
                None => w.problem = Some(format!("param `{name}` is outside the search space")),
            }
        }
        let attrs: Vec<(String, String)> = sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = $1 \
             AND key IN ($2, $3, $4, $5, $6)",
        )
        .bind(trial_id)
        .bind(ATTEMPTS_ATTR)
        .bind(FIXED_PARAMS_ATTR)
        .bind(NEGATIVE_ZERO_ATTR)
        .bind(FAILED_TRIAL_ATTR)
        .bind(RETRY_HISTORY_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut fixed_attr = None;
        let (mut failed, mut history) = (None, None);
        for (key, text) in attrs {
            match key.as_str() {
                ATTEMPTS_ATTR => w.attempts = serde_json::from_str(&text).unwrap_or_default(),
                FAILED_TRIAL_ATTR => failed = serde_json::from_str::<Value>(&text).ok(),
                RETRY_HISTORY_ATTR => history = serde_json::from_str::<Value>(&text).ok(),
                FIXED_PARAMS_ATTR => fixed_attr = Some(text),
                _ => {
                    let zeros = NegativeZeros::parse(Some(&text));
                    zeros.params(&mut w.fixed);
                    for (name, _, v) in &mut w.extra {
                        if let ParamValue::Float(x) = v {
                            if *x == 0.0 && zeros.params.contains(name) {
                                *x = -0.0;
                            }
                        }
                    }
                }
            }
        }
        w.retry_of = RetryOf::from_attrs(failed.as_ref(), history.as_ref());
        if let Some(Ok(Value::Object(map))) = fixed_attr.map(|t| serde_json::from_str::<Value>(&t))
        {
            for (name, ext) in map {
                if w.fixed.contains_key(&name) {
                    continue;
                }
                match space.get(&name).map(|s| s.dist.from_external(&ext)) {
                    Some(Some(v)) => {
                        w.fixed.insert(name, v);
                    }
                    Some(None) => {
                        w.problem = Some(format!(
                            "enqueued param `{name}` = {ext} is outside the search space"
                        ))
                    }
                    // Not in the static space: the objective may suggest it.
                    None if !w.present.contains(&name) => {
                        w.enqueued.insert(name, ext);
                    }
                    None => {}
                }
            }
        }
        Ok(Some(w))
    }

    /// Starts a trial, if the budget has room: checked in the start's own transaction against
    /// the study's trials as they are then, so no other writer can start one in between.
    /// `Taken` when another process claimed the WAITING trial first.
    pub async fn start(
        &self,
        space: &SearchSpace,
        op: StartOp<'_>,
        mut ctx: StartCtx<'_>,
    ) -> Result<Started> {
        if let Some(stepped) = self
            .step(ctx.study, None, Some((space, op, &mut ctx)))
            .await?
        {
            return Ok(stepped.started.unwrap_or(StartRec::NoRoom).started(op));
        }
        let started = once!(self, ctx.study.id, |tx| {
            Ok(self.start_in(tx, space, op, &mut ctx).await?.commit())
        })?;
        Ok(started.started(op))
    }

    /// Finishes a RUNNING trial and starts the next one in one durable commit: when a slot's
    /// trial ends it usually starts another at once, and one sync of the log then serves both.
    /// The finish is written whatever becomes of the start.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_and_start(
        &self,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
        done_by: Option<i64>,
        space: &SearchSpace,
        op: StartOp<'_>,
        mut ctx: StartCtx<'_>,
    ) -> Result<(Option<i64>, Started)> {
        let finish = FinishWrite {
            trial_id,
            how,
            attrs,
            done_by,
        };
        if let Some(stepped) = self
            .step(study, Some(finish), Some((space, op, &mut ctx)))
            .await?
        {
            return Ok((
                stepped.finished.flatten(),
                stepped.started.unwrap_or(StartRec::NoRoom).started(op),
            ));
        }
        if self.engine() == Engine::Postgres {
            // A finish `sweepd_step` does not write (a pruned trial, a negative zero): each in
            // a commit of its own, as a finish without a next start is. A commit is durable
            // when it returns there, so sharing one saves no sync, as it does on SQLite.
            let finished = self.finish_by(study, trial_id, how, attrs, done_by).await?;
            return Ok((finished, self.start(space, op, ctx).await?));
        }
        let (finished, started) = once!(self, study.id, |tx| {
            let finished = self
                .finish_in(tx, study, trial_id, how, attrs, done_by)
                .await?;
            let started = self.start_in(tx, space, op, &mut ctx).await?;
            Ok(Commit::Yes((finished, started)))
        })?;
        Ok((finished, started.started(op)))
    }

    /// The writes of [`Store::start`], in `tx`. Writes nothing unless it returns `Yes`. What it
    /// changes in the tally is redone by the next refresh if the transaction is rolled back.
    async fn start_in(
        &self,
        tx: &mut Tx,
        space: &SearchSpace,
        op: StartOp<'_>,
        ctx: &mut StartCtx<'_>,
    ) -> Result<StartRec> {
        self.refresh_tally_on(tx.conn(), ctx.study, ctx.tally)
            .await?;
        // The refreshed tally knows every WAITING trial (`sweepd_step` applies the same rule).
        if let (StartOp::New(_), Some(skip)) = (op, ctx.skip_waiting) {
            if ctx.tally.waiting_ids().any(|id| !skip.contains(&id)) {
                return Ok(StartRec::Waiting);
            }
        }
        let room = match op {
            StartOp::New(_) => ctx.tally.room_for_new(ctx.budget),
            StartOp::Claim(..) => ctx.tally.room(ctx.budget),
        };
        if !room {
            return Ok(StartRec::NoRoom);
        }
        let (attrs, rows) = start_rows_of(space, op, ctx.owner, ctx.runner);
        let Some((trial_id, number)) = self.start_rows(tx, op, &attrs, &rows, ctx).await? else {
            return Ok(StartRec::Taken);
        };
        match op {
            StartOp::New(_) => ctx.tally.started_new(trial_id),
            StartOp::Claim(..) => ctx.tally.started(trial_id),
        }
        Ok(StartRec::Yes { trial_id, number })
    }

    /// The writes of a start, a statement per row (`sweepd_step` does them in one call where
    /// it can). `None`: the WAITING trial was claimed by another process first.
    async fn start_rows(
        &self,
        tx: &mut Tx,
        op: StartOp<'_>,
        attrs: &[(&str, String)],
        rows: &[ParamRow],
        ctx: &mut StartCtx<'_>,
    ) -> Result<Option<(i64, i64)>> {
        let (trial_id, number) = match op {
            StartOp::New(_) => {
                self.insert_trial(tx, ctx.study, TrialState::Running)
                    .await?
            }
            StartOp::Claim(w, _) => {
                let claimed = sql!(tx.conn(), |c| sqlx::query(
                    "UPDATE trials SET state = 'RUNNING', datetime_start = $1 \
                     WHERE trial_id = $2 AND state = 'WAITING'",
                )
                .bind(Stamp::now())
                .bind(w.trial_id)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
                .at(&self.path)?;
                if claimed != 1 {
                    return Ok(None);
                }
                (w.trial_id, w.number)
            }
        };
        for (key, value) in attrs {
            self.set_attr_text(tx, trial_id, key, value).await?;
        }
        for row in rows {
            self.insert_param_row(tx, trial_id, row).await?;
        }
        Ok(Some((trial_id, number)))
    }

    /// Records which worker runs a trial (`sweepd:worker_id`, `sweepd:worker_pid`) and on which
    /// GPU, once the worker is known.
    pub async fn set_runner(&self, trial_id: i64, runner: Runner, gpu: Option<u32>) -> Result<()> {
        retrying!(self, {
            let mut tx = self.begin().await?;
            for (key, value) in runner_attrs(runner, gpu) {
                self.set_attr_text(&mut tx, trial_id, key, &value).await?;
            }
            tx.commit().await.at(&self.path)
        })
    }

    /// The number the next trial created in this study will get (a hint for seeding).
    pub async fn next_number(&self, study: &Study) -> Result<i64> {
        retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(
                "SELECT CAST(COALESCE(MAX(number), -1) + 1 AS BIGINT) FROM trials WHERE study_id = $1",
            )
            .bind(study.id)
            .fetch_one(c)
            .await)
            .at(&self.path)
        })
    }

    /// Inserts a trial row and gives it Optuna's number (the count of the study's earlier
    /// trials), computed inside the write transaction so concurrent writers never share one.
    pub(super) async fn insert_trial(
        &self,
        tx: &mut Tx,
        study: &Study,
        state: TrialState,
    ) -> Result<(i64, i64)> {
        let start = (state == TrialState::Running).then(Stamp::now);
        // Optuna's number is the count of the study's earlier trials; numbers are dense, so
        // that is MAX(number) + 1: an index lookup, computed in the insert itself, inside the
        // write transaction, so concurrent writers never share a number.
        sql!(tx.conn(), |c| sqlx::query_as(
            "INSERT INTO trials (number, study_id, state, datetime_start) \
             SELECT COALESCE(MAX(number), -1) + 1, $1, $2, $3 FROM trials WHERE study_id = $1 \
             RETURNING CAST(trial_id AS BIGINT), CAST(number AS BIGINT)",
        )
        .bind(study.id)
        .bind(Label::state(state.as_str()))
        .bind(start)
        .fetch_one(c)
        .await)
        .at(&self.path)
    }

    pub(super) async fn insert_param(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        name: &str,
        dist: &Distribution,
        v: &ParamValue,
    ) -> Result<()> {
        self.insert_param_row(tx, trial_id, &param_row(name, dist, v))
            .await
    }

    /// [`Store::insert_param`] of a row already in Optuna's form.
    async fn insert_param_row(&self, tx: &mut Tx, trial_id: i64, row: &ParamRow) -> Result<()> {
        let (name, internal, distribution_json) = row;
        sql!(tx.conn(), |c| sqlx::query(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(trial_id)
        .bind(name)
        .bind(internal)
        .bind(distribution_json)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        // Only a float can be a negative zero: an int or a choice index is +0.0 here.
        if is_negative_zero(*internal) {
            self.note_negative_zeros(tx, trial_id, |z| z.params.push(name.clone()))
                .await?;
        }
        Ok(())
    }

    /// Records an intermediate value. A repeated step keeps the first value, as Optuna does
    /// (which also makes it safe to write again after a lost connection).
    pub async fn report(&self, trial_id: i64, step: i64, value: f64) -> Result<()> {
        retrying!(self, { self.report_attempt(trial_id, step, value).await })
    }

    async fn report_attempt(&self, trial_id: i64, step: i64, value: f64) -> Result<()> {
        let (v, t) = encode_value(value);
        let sql = "INSERT INTO trial_intermediate_values \
             (trial_id, step, intermediate_value, intermediate_value_type) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (trial_id, step) DO NOTHING";
        // Written on a pooled connection, or with the negative-zero note in one transaction.
        macro_rules! insert {
            ($conn:expr) => {
                sql!($conn, |c| sqlx::query(sql)
                    .bind(trial_id)
                    .bind(step)
                    .bind(v)
                    .bind(Label::intermediate_type(t))
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected()))
                .at(&self.path)?
            };
        }
        if !is_negative_zero(value) {
            insert!(self.acquire().await?.conn());
            return Ok(());
        }
        let mut tx = self.begin().await?;
        if insert!(tx.conn()) == 1 {
            self.note_negative_zeros(&mut tx, trial_id, |z| z.intermediate.push(step))
                .await?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    /// Ends a RUNNING trial, in one transaction with everything that goes with it (value,
    /// failure attributes, the retry copy). Returns the trial's number, or `None` if the trial
    /// was no longer RUNNING (already finished: never finish a trial twice).
    pub async fn finish(
        &self,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
    ) -> Result<Option<i64>> {
        self.finish_by(study, trial_id, how, attrs, None).await
    }

    /// [`Store::finish`] of a trial that worker `done_by` ran to a success: its count of
    /// trials done goes up in the finish's own commit (`count_trial_done`), not in a commit
    /// of its own.
    pub async fn finish_by(
        &self,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
        done_by: Option<i64>,
    ) -> Result<Option<i64>> {
        let finish = FinishWrite {
            trial_id,
            how,
            attrs,
            done_by,
        };
        if let Some(stepped) = self.step(study, Some(finish), None).await? {
            return Ok(stepped.finished.flatten());
        }
        once!(self, study.id, |tx| {
            Ok(
                match self
                    .finish_in(tx, study, trial_id, how, attrs, done_by)
                    .await?
                {
                    Some(number) => Commit::Yes(Some(number)),
                    None => Commit::No(None),
                },
            )
        })
    }

    /// The writes of [`Store::finish`], in `tx`. Writes nothing when it returns `None`.
    pub(super) async fn finish_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        trial_id: i64,
        how: &Finish,
        attrs: &[(&str, Value)],
        done_by: Option<i64>,
    ) -> Result<Option<i64>> {
        let texts = attr_texts(attrs);
        let state = how.state();
        // The conditional update is what makes finishing happen once: `None` if not RUNNING.
        let number: Option<i64> = sql!(tx.conn(), |c| sqlx::query_scalar(
            "UPDATE trials SET state = $1, datetime_complete = $2 \
             WHERE trial_id = $3 AND state = 'RUNNING' RETURNING CAST(number AS BIGINT)",
        )
        .bind(Label::state(state.as_str()))
        .bind(Stamp::now())
        .bind(trial_id)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        let Some(number) = number else {
            return Ok(None);
        };
        let values = match how {
            Finish::Complete(values) => values.clone(),
            // Optuna records a pruned trial's last intermediate value as its value.
            Finish::Pruned => self
                .last_intermediate(tx, trial_id)
                .await?
                .into_iter()
                .collect(),
            Finish::Fail(_) => Vec::new(),
        };
        self.write_values(tx, trial_id, &values).await?;
        for (key, value) in &texts {
            self.set_attr_text(tx, trial_id, key, value).await?;
        }
        if let Some(worker_id) = done_by {
            self.count_trial_done(tx, worker_id).await?;
        }
        if let Finish::Fail(f) = how {
            self.set_attr(tx, trial_id, FAIL_REASON_ATTR, &json!(f.reason))
                .await?;
            // Where optuna-dashboard shows it: it lists user attributes, not system ones.
            let shown = crate::study::pyjson::dumps(&json!(format!("{}: {}", f.kind, f.reason)));
            sql!(tx.conn(), |c| {
                sqlx::query(
                "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES ($1, $2, $3) \
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
            )
            .bind(trial_id)
            .bind(FAIL_REASON_USER_ATTR)
            .bind(&shown)
            .execute(c)
            .await
            .map(|r| r.rows_affected())
            })
            .at(&self.path)?;
            self.set_attr(tx, trial_id, FAIL_KIND_ATTR, &json!(f.kind))
                .await?;
            if let Some(tail) = &f.stderr_tail {
                self.set_attr(tx, trial_id, STDERR_TAIL_ATTR, &json!(tail))
                    .await?;
            }
            if f.retry {
                let counted = Some(f.kind).filter(|_| f.counts);
                let copy = self
                    .enqueue_retry(tx, study, trial_id, number, counted)
                    .await?;
                self.set_attr(tx, trial_id, RETRIED_AS_ATTR, &json!(copy))
                    .await?;
            }
        }
        Ok(Some(number))
    }

    /// A trial's last intermediate value (the highest step's), which Optuna records as a
    /// pruned trial's value; `None` without one, or for NaN.
    pub(super) async fn last_intermediate(
        &self,
        tx: &mut Tx,
        trial_id: i64,
    ) -> Result<Option<f64>> {
        Ok(
            sql!(tx.conn(), |c| sqlx::query_as::<_, (Option<f64>, String)>(
                "SELECT intermediate_value, CAST(intermediate_value_type AS TEXT) \
             FROM trial_intermediate_values \
             WHERE trial_id = $1 ORDER BY step DESC LIMIT 1",
            )
            .bind(trial_id)
            .fetch_optional(c)
            .await)
            .at(&self.path)?
            .and_then(|(value, value_type)| read_value(value, Some(&value_type))),
        )
    }

    /// A final trial's `trial_values`, one row per objective, infinities as Optuna stores them
    /// (NULL and INF_POS/INF_NEG), negative zeros noted.
    pub(super) async fn write_values(
        &self,
        tx: &mut Tx,
        trial_id: i64,
        values: &[f64],
    ) -> Result<()> {
        let mut negative_zeros = Vec::new();
        for (objective, v) in values.iter().enumerate() {
            let (stored, value_type) = encode_value(*v);
            sql!(tx.conn(), |c| sqlx::query(
                "INSERT INTO trial_values (trial_id, objective, value, value_type) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(trial_id)
            .bind(objective as i64)
            .bind(stored)
            .bind(Label::value_type(value_type))
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?;
            if is_negative_zero(*v) {
                negative_zeros.push(objective as i64);
            }
        }
        if !negative_zeros.is_empty() {
            self.note_negative_zeros(tx, trial_id, |z| z.values = negative_zeros)
                .await?;
        }
        Ok(())
    }

    /// A WAITING copy of a failed trial, with the system attributes Optuna's
    /// RetryFailedTrialCallback writes (`failed_trial`: the first attempt's number,
    /// `retry_history`: every failed attempt's number), and the failed attempts by kind
    /// (`sweepd:attempts`) with this one counted under `kind` (`None`: it does not count).
    /// Returns the copy's number.
    async fn enqueue_retry(
        &self,
        tx: &mut Tx,
        study: &Study,
        failed_id: i64,
        failed_number: i64,
        kind: Option<FailureKind>,
    ) -> Result<i64> {
        let attrs: Vec<(String, String)> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = $1 \
             AND key IN ($2, $3, $4, $5, $6)",
        )
        .bind(failed_id)
        .bind(FAILED_TRIAL_ATTR)
        .bind(RETRY_HISTORY_ATTR)
        .bind(FIXED_PARAMS_ATTR)
        .bind(ATTEMPTS_ATTR)
        .bind(NEGATIVE_ZERO_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let mut first = failed_number;
        let mut history: Vec<Value> = Vec::new();
        let mut fixed = None;
        let mut attempts = Attempts::new();
        let mut zero_params = Vec::new();
        for (key, json) in attrs {
            let value: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
            match key.as_str() {
                FAILED_TRIAL_ATTR => first = value.as_i64().unwrap_or(first),
                RETRY_HISTORY_ATTR => history = value.as_array().cloned().unwrap_or_default(),
                ATTEMPTS_ATTR => attempts = serde_json::from_value(value).unwrap_or_default(),
                FIXED_PARAMS_ATTR => fixed = Some(value),
                _ => zero_params = NegativeZeros::parse(Some(&json)).params,
            }
        }
        if let Some(kind) = kind {
            *attempts.entry(kind).or_default() += 1;
        }
        history.push(json!(failed_number));
        let (copy_id, copy_number) = self.insert_trial(tx, study, TrialState::Waiting).await?;
        sql!(tx.conn(), |c| sqlx::query(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) \
             SELECT $1, param_name, param_value, distribution_json FROM trial_params WHERE trial_id = $2",
        )
        .bind(copy_id)
        .bind(failed_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))
        .at(&self.path)?;
        self.set_attr(tx, copy_id, FAILED_TRIAL_ATTR, &json!(first))
            .await?;
        self.set_attr(tx, copy_id, RETRY_HISTORY_ATTR, &Value::Array(history))
            .await?;
        if let Some(fixed) = fixed {
            self.set_attr(tx, copy_id, FIXED_PARAMS_ATTR, &fixed)
                .await?;
        }
        self.set_attr(tx, copy_id, ATTEMPTS_ATTR, &json!(attempts))
            .await?;
        if !zero_params.is_empty() {
            self.note_negative_zeros(tx, copy_id, |z| z.params = zero_params)
                .await?;
        }
        Ok(copy_number)
    }
}
