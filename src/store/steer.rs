//! A person's hand on a study's trials: a trial ended by hand (`sweepd kill`), trials added
//! with chosen params (`sweepd enqueue`, Optuna's `enqueue_trial`), where a trial's worker log
//! is (`sweepd logs`), and for the running daemon, which of its trials another process ended
//! (`Store::ended_elsewhere`: a kill, optuna-dashboard's fail, an Optuna script's `tell`).

use super::engine::{sql, Label, Stamp, Tx};
use super::once::{once, Commit};
use super::outage::retrying;
use super::{placeholders, Result, SqlContext, Store, Study};
use crate::study::attrs::{
    FAIL_REASON_ATTR, FAIL_REASON_USER_ATTR, FIXED_PARAMS_ATTR, KILLED_BY_HAND_ATTR,
    RETRIED_AS_ATTR, WORKER_ID_ATTR,
};
use crate::study::{pyjson, Distribution, TrialState, WorkerState};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The reason a trial killed by hand fails with (Optuna's `fail_reason`, and the user
/// attribute optuna-dashboard shows).
pub const KILLED_BY_HAND: &str = "killed by hand (sweepd kill)";

/// A trial ended by `sweepd kill`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Killed {
    pub trial_id: i64,
    pub number: i64,
    /// RUNNING or WAITING.
    pub was: TrialState,
    /// FAIL, or PRUNED with `--prune`.
    pub now: TrialState,
    /// A pruned trial's value: its last intermediate value, as Optuna records it.
    pub value: Option<f64>,
}

/// Why `sweepd kill` ended nothing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum KillRefused {
    /// The study has no trial of that number.
    NoTrial(i64),
    /// The trial is final already; a retried FAIL names its copy.
    Final {
        number: i64,
        state: TrialState,
        retried_as: Option<i64>,
    },
}

/// What `sweepd enqueue` did with one set of params.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Enqueued {
    /// A WAITING trial was added.
    Added { trial_id: i64, number: i64 },
    /// `skip_if_exists`: trial `like` has these params already (its `fixed_params`, else its
    /// params).
    Skipped { like: i64 },
}

/// `skip_if_exists`'s rule: whether new params (first) repeat a trial's (second).
pub type Repeats = dyn Fn(&Map<String, Value>, &Map<String, Value>) -> bool + Sync;

/// A trial of the daemon's that another process ended (or deleted) while the daemon ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedElsewhere {
    pub trial_id: i64,
    /// Its state now: `None` when the trial is gone (its study deleted) or its state unknown.
    pub state: Option<TrialState>,
    /// Who killed it by hand (`sweepd kill`: `user@host`), if it was.
    pub killed_by: Option<String>,
}

/// Where a trial's output is: the worker that ran it, on which host, in which file.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialLog {
    pub trial_id: i64,
    pub number: i64,
    pub state: TrialState,
    /// `sweepd:worker_id`: `None` until a sweepd worker takes the trial (or for a trial of an
    /// Optuna script).
    pub worker_id: Option<i64>,
    pub host: Option<String>,
    /// The worker's log file as its daemon wrote it.
    pub log_path: Option<String>,
    pub worker_state: Option<WorkerState>,
}

impl Store {
    /// Ends trial `number` of the study by hand, if it is RUNNING or WAITING: FAIL with the
    /// reason [`KILLED_BY_HAND`] and no retry copy, or PRUNED with its last intermediate value
    /// (`prune`); marked [`KILLED_BY_HAND_ATTR`] (`by`: `user@host`), so that nothing retries
    /// it. One transaction on the study's lock. The daemon running it notices through
    /// [`Store::ended_elsewhere`].
    pub async fn kill_trial(
        &self,
        study: &Study,
        number: i64,
        prune: bool,
        by: &str,
    ) -> Result<Result<Killed, KillRefused>> {
        once!(self, study.id, |tx| {
            let killed = self.kill_in(tx, study, number, prune, by).await?;
            Ok(match killed {
                Ok(k) => Commit::Yes(Ok(k)),
                Err(why) => Commit::No(Err(why)),
            })
        })
    }

    async fn kill_in(
        &self,
        tx: &mut Tx,
        study: &Study,
        number: i64,
        prune: bool,
        by: &str,
    ) -> Result<Result<Killed, KillRefused>> {
        let row: Option<(i64, String)> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT CAST(trial_id AS BIGINT), CAST(state AS TEXT) FROM trials \
             WHERE study_id = $1 AND number = $2",
        )
        .bind(study.id)
        .bind(number)
        .fetch_optional(c)
        .await)
        .at(&self.path)?;
        let Some((trial_id, state)) = row else {
            return Ok(Err(KillRefused::NoTrial(number)));
        };
        let was = state.parse::<TrialState>().unwrap_or(TrialState::Fail);
        let now = if prune {
            TrialState::Pruned
        } else {
            TrialState::Fail
        };
        // Conditional: a finish another process wrote first (a daemon's finish takes no lock
        // before it writes) wins, and this kill is refused as of a final trial.
        let ended = if was.is_final() {
            0
        } else {
            let stamp = Stamp::now();
            sql!(tx.conn(), |c| sqlx::query(
                "UPDATE trials SET state = $1, datetime_complete = $2, \
                 datetime_start = COALESCE(datetime_start, $2) \
                 WHERE trial_id = $3 AND state IN ('RUNNING', 'WAITING')",
            )
            .bind(Label::state(now.as_str()))
            .bind(stamp)
            .bind(trial_id)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .at(&self.path)?
        };
        if ended != 1 {
            return Ok(Err(self.refused_final(tx, trial_id, number).await?));
        }
        let value = if prune {
            self.last_intermediate(tx, trial_id).await?
        } else {
            None
        };
        self.write_values(tx, trial_id, value.as_slice()).await?;
        let mark =
            json!({"by": by, "at": super::time::now(), "as": now.as_str(), "was": was.as_str()});
        self.set_attr(tx, trial_id, KILLED_BY_HAND_ATTR, &mark)
            .await?;
        if !prune {
            self.set_attr(tx, trial_id, FAIL_REASON_ATTR, &json!(KILLED_BY_HAND))
                .await?;
            sql!(tx.conn(), |c| {
                sqlx::query(
                "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES ($1, $2, $3) \
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
            )
            .bind(trial_id)
            .bind(FAIL_REASON_USER_ATTR)
            .bind(pyjson::dumps(&json!(KILLED_BY_HAND)))
            .execute(c)
            .await
            .map(|r| r.rows_affected())
            })
            .at(&self.path)?;
        }
        Ok(Ok(Killed {
            trial_id,
            number,
            was,
            now,
            value,
        }))
    }

    /// Why a final trial cannot be killed: its state, and the retry copy of a retried FAIL.
    async fn refused_final(&self, tx: &mut Tx, trial_id: i64, number: i64) -> Result<KillRefused> {
        let (state, copy): (String, Option<String>) = sql!(tx.conn(), |c| {
            sqlx::query_as(
            "SELECT CAST(t.state AS TEXT), (SELECT a.value_json FROM trial_system_attributes a \
               WHERE a.trial_id = t.trial_id AND a.key = $2) FROM trials t WHERE t.trial_id = $1",
        )
        .bind(trial_id)
        .bind(RETRIED_AS_ATTR)
        .fetch_one(c)
        .await
        })
        .at(&self.path)?;
        Ok(KillRefused::Final {
            number,
            state: state.parse().unwrap_or(TrialState::Fail),
            retried_as: copy.and_then(|c| c.parse().ok()),
        })
    }

    /// Which of `trial_ids` (the trials a daemon runs) are no longer RUNNING: ended by another
    /// process (`sweepd kill`, optuna-dashboard, an Optuna script's `tell`, a host that failed
    /// this one over) or deleted with their study. The daemon stops their workers; a trial it
    /// is finishing itself at the same moment may show here too, and is its own to tell apart.
    pub async fn ended_elsewhere(&self, trial_ids: &[i64]) -> Result<Vec<EndedElsewhere>> {
        if trial_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT CAST(t.trial_id AS BIGINT), CAST(t.state AS TEXT), \
             (SELECT a.value_json FROM trial_system_attributes a \
               WHERE a.trial_id = t.trial_id AND a.key = $1) \
             FROM trials t WHERE t.trial_id IN ({})",
            placeholders(2, trial_ids.len())
        );
        let rows: Vec<(i64, String, Option<String>)> = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| {
                let mut q = sqlx::query_as(&sql).bind(KILLED_BY_HAND_ATTR);
                for id in trial_ids {
                    q = q.bind(id);
                }
                q.fetch_all(c).await
            })
            .at(&self.path)
        })?;
        let found: BTreeMap<i64, (String, Option<String>)> =
            rows.into_iter().map(|(id, s, k)| (id, (s, k))).collect();
        Ok(trial_ids
            .iter()
            .filter_map(|id| {
                let Some((state, killed)) = found.get(id) else {
                    return Some(EndedElsewhere {
                        trial_id: *id,
                        state: None,
                        killed_by: None,
                    });
                };
                let state = state.parse::<TrialState>().ok();
                if state == Some(TrialState::Running) {
                    return None;
                }
                let killed_by = killed
                    .as_deref()
                    .and_then(|k| serde_json::from_str::<Value>(k).ok())
                    .and_then(|k| k["by"].as_str().map(str::to_owned));
                Some(EndedElsewhere {
                    trial_id: *id,
                    state,
                    killed_by,
                })
            })
            .collect())
    }

    /// The distribution each of `names` had in the study's latest trial that used it (the
    /// space of a define-by-run study as its objective last asked for it); names no trial used
    /// are left out.
    pub async fn latest_distributions(
        &self,
        study: &Study,
        names: &[String],
    ) -> Result<BTreeMap<String, Distribution>> {
        let mut out = BTreeMap::new();
        for name in names {
            let json: Option<String> = retrying!(self, {
                sql!(self.acquire().await?.conn(), |c| sqlx::query_scalar(
                    "SELECT p.distribution_json FROM trial_params p \
                     JOIN trials t ON t.trial_id = p.trial_id \
                     WHERE t.study_id = $1 AND p.param_name = $2 \
                     ORDER BY p.param_id DESC LIMIT 1",
                )
                .bind(study.id)
                .bind(name)
                .fetch_optional(c)
                .await)
                .at(&self.path)
            })?;
            if let Some(d) = json.and_then(|j| Distribution::from_optuna_json(&j).ok()) {
                out.insert(name.clone(), d);
            }
        }
        Ok(out)
    }

    /// Adds a WAITING trial per set of params (external form), as Optuna's `enqueue_trial`
    /// writes it: no `datetime_start`, no params rows, the `fixed_params` system attribute as
    /// `json.dumps` writes it. With `skip_if` (Optuna's `skip_if_exists`: the caller's rule of
    /// whether new params repeat a trial's), a set that repeats a trial of the study, or one
    /// added before it in this call, is skipped. One transaction on the study's lock.
    pub async fn enqueue(
        &self,
        study: &Study,
        sets: &[Map<String, Value>],
        skip_if: Option<&Repeats>,
    ) -> Result<Vec<Enqueued>> {
        once!(self, study.id, |tx| {
            let mut known = match skip_if {
                Some(_) => self.param_sets(tx, study).await?,
                None => Vec::new(),
            };
            let mut done = Vec::with_capacity(sets.len());
            for params in sets {
                let like = skip_if.and_then(|repeats| {
                    known
                        .iter()
                        .find(|(_, old)| repeats(params, old))
                        .map(|(n, _)| *n)
                });
                if let Some(like) = like {
                    done.push(Enqueued::Skipped { like });
                    continue;
                }
                let (trial_id, number) = self.insert_trial(tx, study, TrialState::Waiting).await?;
                let text = pyjson::dumps(&Value::Object(params.clone()));
                self.set_attr_text(tx, trial_id, FIXED_PARAMS_ATTR, &text)
                    .await?;
                known.push((number, params.clone()));
                done.push(Enqueued::Added { trial_id, number });
            }
            Ok(Commit::Yes(done))
        })
    }

    /// Every trial's params as `skip_if_exists` compares them: its `fixed_params`, else its
    /// params in external form; by number.
    async fn param_sets(
        &self,
        tx: &mut Tx,
        study: &Study,
    ) -> Result<Vec<(i64, Map<String, Value>)>> {
        let fixed: Vec<(i64, String)> = sql!(tx.conn(), |c| sqlx::query_as(
            "SELECT CAST(t.number AS BIGINT), a.value_json FROM trials t \
             JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = $2 \
             WHERE t.study_id = $1",
        )
        .bind(study.id)
        .bind(FIXED_PARAMS_ATTR)
        .fetch_all(c)
        .await)
        .at(&self.path)?;
        let rows: Vec<(i64, String, f64, String)> = sql!(tx.conn(), |c| {
            sqlx::query_as(
            "SELECT CAST(t.number AS BIGINT), p.param_name, p.param_value, p.distribution_json \
             FROM trials t JOIN trial_params p ON p.trial_id = t.trial_id \
             WHERE t.study_id = $1 ORDER BY t.number, p.param_id",
        )
        .bind(study.id)
        .fetch_all(c)
        .await
        })
        .at(&self.path)?;
        let mut sets: BTreeMap<i64, Map<String, Value>> = BTreeMap::new();
        let mut from_fixed = std::collections::BTreeSet::new();
        for (number, text) in fixed {
            if let Ok(Value::Object(map)) = serde_json::from_str(&text) {
                sets.insert(number, map);
                from_fixed.insert(number);
            }
        }
        for (number, name, internal, dist) in rows {
            if from_fixed.contains(&number) {
                continue;
            }
            let ext = Distribution::from_optuna_json(&dist)
                .ok()
                .and_then(|d| d.from_internal(internal).map(|v| d.external(&v)))
                .unwrap_or(json!(internal));
            sets.entry(number).or_default().insert(name, ext);
        }
        Ok(sets.into_iter().collect())
    }

    /// Where trial `number`'s output is (`None`: the study has no such trial).
    pub async fn trial_log(&self, study: &Study, number: i64) -> Result<Option<TrialLog>> {
        let row: Option<(i64, String, Option<String>)> = retrying!(self, {
            sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                "SELECT CAST(t.trial_id AS BIGINT), CAST(t.state AS TEXT), \
                 (SELECT a.value_json FROM trial_system_attributes a \
                   WHERE a.trial_id = t.trial_id AND a.key = $3) \
                 FROM trials t WHERE t.study_id = $1 AND t.number = $2",
            )
            .bind(study.id)
            .bind(number)
            .bind(WORKER_ID_ATTR)
            .fetch_optional(c)
            .await)
            .at(&self.path)
        })?;
        let Some((trial_id, state, worker)) = row else {
            return Ok(None);
        };
        let worker_id = worker.and_then(|w| w.trim().parse::<i64>().ok());
        let mut log = TrialLog {
            trial_id,
            number,
            state: state.parse().unwrap_or(TrialState::Fail),
            worker_id,
            host: None,
            log_path: None,
            worker_state: None,
        };
        if let Some(id) = worker_id {
            let w: Option<(String, Option<String>, String)> = retrying!(self, {
                sql!(self.acquire().await?.conn(), |c| sqlx::query_as(
                    "SELECT host, log_path, state FROM sweepd_workers WHERE worker_id = $1",
                )
                .bind(id)
                .fetch_optional(c)
                .await)
                .at(&self.path)
            })?;
            if let Some((host, path, state)) = w {
                log.host = Some(host);
                log.log_path = path;
                log.worker_state = state.parse().ok();
            }
        }
        Ok(Some(log))
    }
}
