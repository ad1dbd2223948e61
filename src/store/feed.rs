//! What changed in a study since a daemon last read it: the trials of every other process
//! (other hosts' daemons, an Optuna script, a previous instance of this daemon), so that the
//! sampler, the pruner and the memory model learn them while the daemon runs, not only when it
//! starts.
//!
//! A read costs in proportion to what changed, not to the study, by the rule the budget's tally
//! follows (`tally`): trial ids grow in commit order within a study (every writer of trials takes
//! the study's row lock before inserting one, Optuna's `_create_new_trial` included; SQLite has
//! one writer at a time), and a final trial never changes again. So a read asks for the trials
//! above the highest id read so far ([`Feed`]'s watermark) and for the ones that were not final
//! then, and reads the params, values, attributes and intermediate values of those alone that
//! are new or changed.
//!
//! It is not the tally's read, though both follow one rule, for three reasons: the tally is read
//! inside a start's transaction, under the study's lock on PostgreSQL, where every extra row
//! holds up every host's starts, while this read runs before the sampler proposes, outside any
//! lock; the tally needs a few flags per trial and this one a trial's whole record; and they
//! skip different trials (the tally counts this daemon's own, this read leaves them out: the
//! supervisor learnt them as it wrote them).

use super::attrs::NegativeZeros;
use super::daemon::DaemonId;
use super::engine::{fetch_bound, sql, Conn};
use super::outage::retrying;
use super::{placeholders, read_value, Result, SqlContext, Store, Study, IDS_PER_STATEMENT};
use crate::study::attrs::{
    CONSTRAINTS_ATTR, CONSTRAINT_KEY_PREFIX, NEGATIVE_ZERO_ATTR, OWNER_ATTR, PEAK_MEMORY_ATTR,
};
use crate::study::{ConstraintAttrs, Distribution, Params, TrialRecord, TrialState};
use serde_json::Value;
use std::collections::HashMap;

/// The columns of a [`StateRow`]; `$1` is the owner attribute's key, `$2` this daemon's
/// [`DaemonId::json`] text.
const STATE_COLUMNS: &str = "SELECT CAST(t.trial_id AS BIGINT) AS trial_id, \
     CAST(t.number AS BIGINT) AS number, CAST(t.state AS TEXT) AS state, \
     CAST((SELECT COUNT(*) FROM trial_params p WHERE p.trial_id = t.trial_id) AS BIGINT) \
       AS n_params, \
     EXISTS (SELECT 1 FROM trial_system_attributes a \
             WHERE a.trial_id = t.trial_id AND a.key = $1 AND a.value_json = $2) AS mine \
     FROM trials t";

/// A trial as a read first sees it.
#[derive(sqlx::FromRow)]
struct StateRow {
    trial_id: i64,
    number: Option<i64>,
    state: String,
    n_params: i64,
    /// Started by this daemon (its owner attribute names it).
    mine: bool,
}

/// Where a daemon's reading of its study stands: the highest trial id read, and the trials of
/// other processes that were not final then, each with how many params it had (an objective
/// suggests more as it runs).
#[derive(Debug, Default, Clone)]
pub struct Feed {
    seen: i64,
    open: HashMap<i64, i64>,
}

impl Feed {
    /// Trials of other processes not final at the last read.
    pub fn open(&self) -> usize {
        self.open.len()
    }
}

/// One trial of another process that is new or changed since the last read.
#[derive(Debug, Clone)]
pub struct Changed {
    pub trial_id: i64,
    /// Its state, number, params with their distributions, values (by objective) and
    /// constraints, as samplers learn it. A trial not final yet has its params so far.
    pub record: TrialRecord,
    /// A final trial's finite intermediate values by step (when asked for): the pruner's.
    pub curve: Vec<(i64, f64)>,
    /// A COMPLETE or PRUNED trial's measured memory peak in bytes (`sweepd:peak_memory_mib`).
    pub peak: Option<u64>,
    /// A value above 0 in its `constraints` list: the mark sweepd puts on a trial that ran out
    /// of memory alone on its device (or an Optuna script's `constraints_func`), not the
    /// constraints an objective sets (`constraints:<key>`).
    pub listed_infeasible: bool,
}

/// What one read found.
#[derive(Debug, Default)]
pub struct Changes {
    /// In trial id order.
    pub trials: Vec<Changed>,
    /// Rows the read returned, over every query: what it cost.
    pub rows: usize,
}

impl Store {
    /// The trials of other processes that are new or changed since `feed` was last read (this
    /// daemon's own, named by `me` in their owner attribute, are left out), and `feed` brought
    /// up to date. New trials, and open ones whose state or params changed, come with their
    /// record; final ones also with their curve (`curves`) and peak. A fresh `Feed` reads the
    /// whole study (a daemon's start). On an error `feed` is left as it was: the next read
    /// finds the same changes.
    pub async fn changes(
        &self,
        study: &Study,
        me: &DaemonId,
        feed: &mut Feed,
        curves: bool,
    ) -> Result<Changes> {
        // Read-only, and `feed` changes only when an attempt succeeds: run again whole after a
        // lost connection.
        retrying!(self, {
            self.changes_attempt(study, me, feed, curves).await
        })
    }

    async fn changes_attempt(
        &self,
        study: &Study,
        me: &DaemonId,
        feed: &mut Feed,
        curves: bool,
    ) -> Result<Changes> {
        let mut conn = self.acquire().await?;
        let mut conn = conn.conn();
        let me = me.json().to_string();
        let mut rows = 0;
        let new: Vec<StateRow> = {
            let sql = format!(
                "{STATE_COLUMNS} WHERE t.study_id = $3 AND t.trial_id > $4 ORDER BY t.trial_id"
            );
            sql!(conn.reborrow(), |c| sqlx::query_as(&sql)
                .bind(OWNER_ATTR)
                .bind(&me)
                .bind(study.id)
                .bind(feed.seen)
                .fetch_all(c)
                .await)
            .at(&self.path)?
        };
        rows += new.len();
        let mut next = feed.clone();
        // What to read in full: (trial_id, number, state, how many params it had).
        let mut wanted: Vec<(i64, i64, TrialState, i64)> = Vec::new();
        for row in &new {
            next.seen = next.seen.max(row.trial_id);
            if row.mine {
                continue;
            }
            if let Ok(state) = row.state.parse::<TrialState>() {
                wanted.push((row.trial_id, row.number.unwrap_or(0), state, row.n_params));
            }
        }
        let open: Vec<i64> = feed.open.keys().copied().collect();
        for chunk in open.chunks(IDS_PER_STATEMENT) {
            let sql = format!(
                "{STATE_COLUMNS} WHERE t.trial_id IN ({})",
                placeholders(3, chunk.len())
            );
            let found: Vec<StateRow> = sql!(conn.reborrow(), |c| {
                let mut q = sqlx::query_as(&sql).bind(OWNER_ATTR).bind(&me);
                for id in chunk {
                    q = q.bind(id);
                }
                q.fetch_all(c).await
            })
            .at(&self.path)?;
            rows += found.len();
            for id in chunk {
                // Gone (the study deleted under us) or claimed by this daemon: not ours to
                // follow any more.
                next.open.remove(id);
            }
            for row in found {
                let Ok(state) = row.state.parse::<TrialState>() else {
                    continue;
                };
                let had = feed.open.get(&row.trial_id).copied().unwrap_or(0);
                if row.mine {
                    continue;
                }
                if state.is_final() || row.n_params != had {
                    wanted.push((row.trial_id, row.number.unwrap_or(0), state, row.n_params));
                } else {
                    next.open.insert(row.trial_id, had);
                }
            }
        }
        wanted.sort_by_key(|w| w.0);
        for &(trial_id, _, state, n_params) in &wanted {
            // Params added after the count was read are read again next time: never missed.
            if !state.is_final() {
                next.open.insert(trial_id, n_params);
            }
        }
        let mut trials = Vec::with_capacity(wanted.len());
        for chunk in wanted.chunks(IDS_PER_STATEMENT) {
            let chunk: Vec<(i64, i64, TrialState)> =
                chunk.iter().map(|&(id, n, s, _)| (id, n, s)).collect();
            let (read, n) = self.records(conn.reborrow(), &chunk, curves).await?;
            rows += n;
            trials.extend(read);
        }
        *feed = next;
        Ok(Changes { trials, rows })
    }

    /// The records of `trials` (trial_id, number, state as read), in that order, and how many
    /// rows it took: every trial's params; a final trial's values, attributes and (when
    /// `curves`) intermediate values.
    async fn records(
        &self,
        mut conn: Conn<'_>,
        trials: &[(i64, i64, TrialState)],
        curves: bool,
    ) -> Result<(Vec<Changed>, usize)> {
        let mut batch = Batch::new(trials);
        let all: Vec<i64> = trials.iter().map(|t| t.0).collect();
        let finals: Vec<i64> = trials
            .iter()
            .filter(|t| t.2.is_final())
            .map(|t| t.0)
            .collect();
        self.feed_params(conn.reborrow(), &all, &mut batch).await?;
        if finals.is_empty() {
            return Ok((batch.out, batch.rows));
        }
        let marks = placeholders(1, finals.len());
        self.feed_values(conn.reborrow(), &finals, &marks, &mut batch)
            .await?;
        self.feed_attrs(conn.reborrow(), &finals, &marks, &mut batch)
            .await?;
        if curves {
            self.feed_curves(conn.reborrow(), &finals, &marks, &mut batch)
                .await?;
        }
        Ok((batch.out, batch.rows))
    }

    /// The params of trials `ids`, with their distributions.
    async fn feed_params(&self, conn: Conn<'_>, ids: &[i64], batch: &mut Batch) -> Result<()> {
        let sql = format!(
            "SELECT CAST(trial_id AS BIGINT), param_name, param_value, distribution_json \
             FROM trial_params WHERE trial_id IN ({}) ORDER BY param_id",
            placeholders(1, ids.len())
        );
        let params: Vec<(i64, String, f64, String)> =
            fetch_bound!(conn, &sql, ids).at(&self.path)?;
        batch.rows += params.len();
        for (trial_id, name, internal, dist) in params {
            let record = &mut batch.get(trial_id).record;
            let Ok(d) = Distribution::from_optuna_json(&dist) else {
                continue;
            };
            if let Some(v) = d.from_internal(internal) {
                record.params.insert(name.clone(), v);
                record.distributions.insert(name, d);
            }
        }
        Ok(())
    }

    /// The values of trials `ids` (`marks`: their placeholders), by objective.
    async fn feed_values(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
        marks: &str,
        batch: &mut Batch,
    ) -> Result<()> {
        let sql = format!(
            "SELECT CAST(trial_id AS BIGINT), value, CAST(value_type AS TEXT) FROM trial_values \
             WHERE trial_id IN ({marks}) ORDER BY trial_id, objective"
        );
        let values: Vec<(i64, Option<f64>, Option<String>)> =
            fetch_bound!(conn, &sql, ids).at(&self.path)?;
        batch.rows += values.len();
        for (trial_id, value, value_type) in values {
            // A NaN stored by another writer reads as NaN.
            let v = read_value(value, value_type.as_deref()).unwrap_or(f64::NAN);
            batch.get(trial_id).record.values.push(v);
        }
        Ok(())
    }

    /// The constraints, memory peak and negative zeros of trials `ids` (`marks`: their
    /// placeholders), read after their values (a negative zero rewrites a value).
    async fn feed_attrs(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
        marks: &str,
        batch: &mut Batch,
    ) -> Result<()> {
        let n = ids.len();
        let sql = format!(
            "SELECT CAST(trial_id AS BIGINT), key, value_json FROM trial_system_attributes \
             WHERE trial_id IN ({marks}) \
             AND (key IN (${}, ${}, ${}) OR key LIKE ${})",
            n + 1,
            n + 2,
            n + 3,
            n + 4
        );
        let attrs: Vec<(i64, String, String)> = sql!(conn, |c| {
            let mut q = sqlx::query_as(&sql);
            for id in ids {
                q = q.bind(id);
            }
            q.bind(CONSTRAINTS_ATTR)
                .bind(PEAK_MEMORY_ATTR)
                .bind(NEGATIVE_ZERO_ATTR)
                .bind(format!("{CONSTRAINT_KEY_PREFIX}%"))
                .fetch_all(c)
                .await
        })
        .at(&self.path)?;
        batch.rows += attrs.len();
        let mut constraints: HashMap<i64, ConstraintAttrs> = HashMap::new();
        for (trial_id, key, json) in attrs {
            if constraints.entry(trial_id).or_default().take(&key, &json) {
                continue;
            }
            let changed = batch.get(trial_id);
            match key.as_str() {
                PEAK_MEMORY_ATTR => {
                    let mib = serde_json::from_str::<Value>(&json)
                        .ok()
                        .and_then(|v| v.as_f64());
                    if changed.record.state != TrialState::Fail {
                        changed.peak = mib.map(|m| (m * 1048576.0) as u64).filter(|b| *b > 0);
                    }
                }
                _ => {
                    let zeros = NegativeZeros::parse(Some(&json));
                    let record = &mut changed.record;
                    for (objective, v) in record.values.iter_mut().enumerate() {
                        *v = zeros.value(objective as i64, *v);
                    }
                    zeros.params(&mut record.params);
                }
            }
        }
        for (trial_id, c) in constraints {
            let changed = batch.get(trial_id);
            changed.listed_infeasible = c.listed.iter().any(|v| *v > 0.0);
            changed.record.constraints = c.values();
        }
        Ok(())
    }

    /// The finite intermediate values of trials `ids` (`marks`: their placeholders), by step.
    async fn feed_curves(
        &self,
        conn: Conn<'_>,
        ids: &[i64],
        marks: &str,
        batch: &mut Batch,
    ) -> Result<()> {
        let sql = format!(
            "SELECT CAST(trial_id AS BIGINT), CAST(step AS BIGINT), intermediate_value \
             FROM trial_intermediate_values WHERE trial_id IN ({marks}) \
             AND intermediate_value_type = 'FINITE' ORDER BY trial_id, step"
        );
        let steps: Vec<(i64, i64, f64)> = fetch_bound!(conn, &sql, ids).at(&self.path)?;
        batch.rows += steps.len();
        for (trial_id, step, value) in steps {
            batch.get(trial_id).curve.push((step, value));
        }
        Ok(())
    }
}

/// The records one read builds, in the order asked for, and how many rows it took.
struct Batch {
    out: Vec<Changed>,
    /// Where each trial's record is in `out`.
    index: HashMap<i64, usize>,
    rows: usize,
}

impl Batch {
    /// Empty records of `trials` (trial_id, number, state as read).
    fn new(trials: &[(i64, i64, TrialState)]) -> Self {
        let out: Vec<Changed> = trials
            .iter()
            .map(|&(trial_id, number, state)| Changed {
                trial_id,
                record: TrialRecord {
                    number,
                    params: Params::new(),
                    state,
                    values: Vec::new(),
                    constraints: Vec::new(),
                    distributions: Default::default(),
                },
                curve: Vec::new(),
                peak: None,
                listed_infeasible: false,
            })
            .collect();
        let index = out
            .iter()
            .enumerate()
            .map(|(i, c)| (c.trial_id, i))
            .collect();
        Batch {
            out,
            index,
            rows: 0,
        }
    }

    /// The record of trial `trial_id`, one of those asked for.
    fn get(&mut self, trial_id: i64) -> &mut Changed {
        &mut self.out[self.index[&trial_id]]
    }
}
