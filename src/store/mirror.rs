//! What sweepd attaches to Optuna's tables, so that its own rows follow Optuna's: the table
//! `sweepd_trials` (one row per trial, for `sqlite3` users) kept current by triggers, and the
//! triggers that delete sweepd's rows of a study or trial when Optuna deletes it.
//!
//! Optuna must be able to do anything to its tables with sweepd's objects present:
//! `optuna.delete_study` (with foreign keys enforced or not) and its alembic migrations, which
//! on SQLite rebuild a table as CREATE tmp / copy / DROP t / `ALTER TABLE tmp RENAME TO t`.
//! That RENAME re-checks every view and trigger in the file (SQLite >= 3.26), so nothing here
//! may *name* an Optuna table other than the one a trigger is attached to: a trigger body uses
//! NEW/OLD, sweepd's tables and its own table only (which a rebuild drops along with the
//! trigger). Trigger bodies never fail on odd data (malformed JSON, a negative choice index):
//! a failing trigger would fail Optuna's write.
//!
//! A rebuild of one of Optuna's tables drops the triggers on it, and Optuna may write while
//! they are missing, so [`Store::ensure_mirror`] runs at every start (and in the daemon's
//! housekeeping): when the triggers in the file are not exactly these, it re-creates them and
//! re-fills `sweepd_trials` from Optuna's tables, in one transaction. The tables themselves
//! are created by migration 0005.
//!
//! SQLite only (triggers and JSON functions), like the view they replace.

use super::engine::{sql, Pool};
use super::{sqlite, Result, SqlContext, Store};
use crate::study::attrs::{FAIL_REASON_ATTR, WORKER_ID_ATTR, WORKER_PID_ATTR};

/// The value of the `trial_params` row `p` as the user's code saw it: the choice for a
/// categorical (JSON true/false kept as booleans), an integer for int distributions, the float
/// otherwise. Guards make malformed rows show the internal value instead of failing.
fn external_value(p: &str) -> String {
    format!(
        "CASE
        WHEN NOT json_valid({p}.distribution_json) THEN {p}.param_value
        WHEN json_extract({p}.distribution_json, '$.name') = 'CategoricalDistribution' THEN
            CASE
                WHEN CAST({p}.param_value AS INTEGER) < 0 THEN NULL
                ELSE CASE json_type({p}.distribution_json,
                                    '$.attributes.choices[' || CAST({p}.param_value AS INTEGER) || ']')
                    WHEN 'true' THEN json('true')
                    WHEN 'false' THEN json('false')
                    ELSE json_extract({p}.distribution_json,
                                      '$.attributes.choices[' || CAST({p}.param_value AS INTEGER) || ']')
                END
            END
        WHEN json_extract({p}.distribution_json, '$.name')
             IN ('IntDistribution', 'IntUniformDistribution', 'IntLogUniformDistribution') THEN
            CAST({p}.param_value AS INTEGER)
        ELSE {p}.param_value
    END"
    )
}

/// The `params` column of trial `trial`: its params in the order they were set.
fn params_of(trial: &str) -> String {
    format!(
        "(SELECT json_group_object(p.param_name, {})
       FROM (SELECT param_name, param_value, distribution_json FROM trial_params
              WHERE trial_params.trial_id = {trial} AND param_name IS NOT NULL
              ORDER BY param_id) AS p)",
        external_value("p")
    )
}

/// `params` with the new row NEW appended: what `params_of` gives after an insert (a new row
/// has the largest param_id of its trial), without reading the trial's other rows. Members are
/// rendered by json_quote, as json_group_object renders them.
fn params_plus_new() -> String {
    format!(
        "CASE WHEN NEW.param_name IS NULL THEN params
              ELSE substr(params, 1, length(params) - 1)
                   || CASE WHEN params = '{{}}' THEN '' ELSE ',' END
                   || json_quote(NEW.param_name) || ':' || json_quote({}) || '}}'
         END",
        external_value("NEW")
    )
}

/// A trial system attribute of trial `trial`, as its JSON value.
fn attr_of(trial: &str, key: &str) -> String {
    format!(
        "(SELECT CASE WHEN json_valid(a.value_json) THEN json_extract(a.value_json, '$') END
       FROM trial_system_attributes AS a
      WHERE a.trial_id = {trial} AND a.\"key\" = '{key}')"
    )
}

/// Seconds from start to completion of the trial row `t`, NULL while it has not completed.
fn duration_of(t: &str) -> String {
    format!("(julianday({t}.datetime_complete) - julianday({t}.datetime_start)) * 86400.0")
}

/// The trial system attributes `sweepd_trials` shows, as a SQL list.
fn shown_attrs() -> String {
    format!("('{WORKER_ID_ATTR}', '{WORKER_PID_ATTR}', '{FAIL_REASON_ATTR}')")
}

/// Statements deleting sweepd's rows of study `id` (a trigger body fragment).
fn forget_study(id: &str) -> String {
    format!(
        "DELETE FROM sweepd_worker_events
     WHERE worker_id IN (SELECT worker_id FROM sweepd_workers WHERE study_id = {id});
    DELETE FROM sweepd_workers WHERE study_id = {id};
    DELETE FROM sweepd_daemon WHERE study_id = {id};
    DELETE FROM sweepd_gpus WHERE study_id = {id};
    DELETE FROM sweepd_commands WHERE study_id = {id};
    DELETE FROM sweepd_control WHERE study_id = {id};
    DELETE FROM sweepd_studies WHERE study_id = {id};"
    )
}

/// Statements deleting sweepd's rows of trial `id` other than its `sweepd_trials` row.
fn forget_trial(id: &str) -> String {
    format!(
        "DELETE FROM sweepd_worker_events WHERE trial_id = {id};
    DELETE FROM sweepd_trial_memory WHERE trial_id = {id};"
    )
}

/// Every trigger sweepd keeps, by name, with the exact text SQLite stores for it.
fn triggers() -> Vec<(&'static str, String)> {
    [
        study_triggers(),
        trial_triggers(),
        value_triggers(),
        param_triggers(),
        attr_triggers(),
        worker_triggers(),
    ]
    .concat()
}

/// A trigger `name` run `on` (its timing, event and table), and its text as SQLite stores it.
fn trigger(name: &'static str, on: &str, body: String) -> (&'static str, String) {
    (
        name,
        format!("CREATE TRIGGER {name} {on}\nBEGIN\n    {body}\nEND"),
    )
}

/// On `studies`: `sweepd_studies` follows it, and a deleted study's rows go.
fn study_triggers() -> Vec<(&'static str, String)> {
    vec![
        // A new study's id may be one SQLite reuses: rows of a study deleted while these
        // triggers were missing must not become the new study's.
        trigger(
            "sweepd_studies_insert",
            "AFTER INSERT ON studies",
            format!(
                "{}\n    INSERT INTO sweepd_studies (study_id, study_name) VALUES (NEW.study_id, NEW.study_name);",
                forget_study("NEW.study_id")
            ),
        ),
        trigger(
            "sweepd_studies_update",
            "AFTER UPDATE OF study_id, study_name ON studies",
            "DELETE FROM sweepd_studies WHERE study_id IN (OLD.study_id, NEW.study_id);
    INSERT INTO sweepd_studies (study_id, study_name) VALUES (NEW.study_id, NEW.study_name);
    UPDATE sweepd_trials SET study_name = NEW.study_name WHERE study_name = OLD.study_name;"
                .into(),
        ),
        trigger(
            "sweepd_studies_delete",
            "AFTER DELETE ON studies",
            format!(
                "{}\n    DELETE FROM sweepd_trials WHERE study_name = OLD.study_name;",
                forget_study("OLD.study_id")
            ),
        ),
    ]
}

/// On `trials`: its `sweepd_trials` row follows it, and a deleted trial's rows go.
fn trial_triggers() -> Vec<(&'static str, String)> {
    vec![
        // Only NEW and sweepd's tables: the trial's params, value and attributes arrive with
        // their own rows, whose triggers fill them in.
        trigger(
            "sweepd_trials_insert",
            "AFTER INSERT ON trials",
            format!(
                "{}
    DELETE FROM sweepd_trials WHERE trial_id = NEW.trial_id;
    INSERT INTO sweepd_trials (study_name, trial_id, number, state, value, value_type, params,
                               datetime_start, datetime_complete, duration_s,
                               worker_id, worker_pid, fail_reason)
    VALUES ((SELECT study_name FROM sweepd_studies WHERE study_id = NEW.study_id),
            NEW.trial_id, NEW.number, NEW.state, NULL, NULL, '{{}}',
            NEW.datetime_start, NEW.datetime_complete, {},
            NULL, NULL, NULL);",
                forget_trial("NEW.trial_id"),
                duration_of("NEW")
            ),
        ),
        trigger(
            "sweepd_trials_update",
            "AFTER UPDATE ON trials",
            format!(
                "UPDATE sweepd_trials SET
        study_name = CASE WHEN NEW.study_id IS OLD.study_id THEN study_name
                          ELSE (SELECT study_name FROM sweepd_studies WHERE study_id = NEW.study_id) END,
        number = NEW.number, state = NEW.state,
        datetime_start = NEW.datetime_start, datetime_complete = NEW.datetime_complete,
        duration_s = {}
     WHERE trial_id = NEW.trial_id;",
                duration_of("NEW")
            ),
        ),
        trigger(
            "sweepd_trials_delete",
            "AFTER DELETE ON trials",
            format!(
                "{}\n    DELETE FROM sweepd_trials WHERE trial_id = OLD.trial_id;",
                forget_trial("OLD.trial_id")
            ),
        ),
    ]
}

/// On `trial_values`: the first objective's value in `sweepd_trials`.
fn value_triggers() -> Vec<(&'static str, String)> {
    vec![
        trigger(
            "sweepd_trial_values_insert",
            "AFTER INSERT ON trial_values WHEN NEW.objective = 0",
            "UPDATE sweepd_trials SET value = NEW.value, value_type = NEW.value_type
     WHERE trial_id = NEW.trial_id;"
                .into(),
        ),
        trigger(
            "sweepd_trial_values_update",
            "AFTER UPDATE ON trial_values WHEN OLD.objective = 0 OR NEW.objective = 0",
            "UPDATE sweepd_trials SET value = NULL, value_type = NULL
     WHERE trial_id = OLD.trial_id AND OLD.objective = 0;
    UPDATE sweepd_trials SET value = NEW.value, value_type = NEW.value_type
     WHERE trial_id = NEW.trial_id AND NEW.objective = 0;"
                .into(),
        ),
        trigger(
            "sweepd_trial_values_delete",
            "AFTER DELETE ON trial_values WHEN OLD.objective = 0",
            "UPDATE sweepd_trials SET value = NULL, value_type = NULL
     WHERE trial_id = OLD.trial_id;"
                .into(),
        ),
    ]
}

/// On `trial_params`: the `params` column of `sweepd_trials`.
fn param_triggers() -> Vec<(&'static str, String)> {
    let set_params = format!("params = {}", params_of("sweepd_trials.trial_id"));
    vec![
        // Inserts append (sweepd writes trials at up to ~1000/s); an update or a delete
        // rebuilds the object from the trial's rows (this trigger's own table).
        trigger(
            "sweepd_trial_params_insert",
            "AFTER INSERT ON trial_params",
            format!(
                "UPDATE sweepd_trials SET params = {} WHERE trial_id = NEW.trial_id;",
                params_plus_new()
            ),
        ),
        trigger(
            "sweepd_trial_params_update",
            "AFTER UPDATE ON trial_params",
            format!(
                "UPDATE sweepd_trials SET {set_params} WHERE trial_id IN (OLD.trial_id, NEW.trial_id);"
            ),
        ),
        trigger(
            "sweepd_trial_params_delete",
            "AFTER DELETE ON trial_params",
            format!("UPDATE sweepd_trials SET {set_params} WHERE trial_id = OLD.trial_id;"),
        ),
    ]
}

/// On `trial_system_attributes`: the attributes `sweepd_trials` shows.
fn attr_triggers() -> Vec<(&'static str, String)> {
    let shown = shown_attrs();
    let set_attrs = format!(
        "worker_id = {}, worker_pid = {}, fail_reason = {}",
        attr_of("sweepd_trials.trial_id", WORKER_ID_ATTR),
        attr_of("sweepd_trials.trial_id", WORKER_PID_ATTR),
        attr_of("sweepd_trials.trial_id", FAIL_REASON_ATTR),
    );
    let set_attr_from_new = |column: &str, key: &str| {
        format!(
            "UPDATE sweepd_trials SET {column} = \
             CASE WHEN json_valid(NEW.value_json) THEN json_extract(NEW.value_json, '$') END \
             WHERE trial_id = NEW.trial_id AND NEW.\"key\" = '{key}';"
        )
    };
    vec![
        trigger(
            "sweepd_trial_attrs_insert",
            &format!("AFTER INSERT ON trial_system_attributes WHEN NEW.\"key\" IN {shown}"),
            format!(
                "{}\n    {}\n    {}",
                set_attr_from_new("worker_id", WORKER_ID_ATTR),
                set_attr_from_new("worker_pid", WORKER_PID_ATTR),
                set_attr_from_new("fail_reason", FAIL_REASON_ATTR),
            ),
        ),
        trigger(
            "sweepd_trial_attrs_update",
            &format!(
                "AFTER UPDATE ON trial_system_attributes \
                 WHEN OLD.\"key\" IN {shown} OR NEW.\"key\" IN {shown}"
            ),
            format!(
                "UPDATE sweepd_trials SET {set_attrs} WHERE trial_id IN (OLD.trial_id, NEW.trial_id);"
            ),
        ),
        trigger(
            "sweepd_trial_attrs_delete",
            &format!("AFTER DELETE ON trial_system_attributes WHEN OLD.\"key\" IN {shown}"),
            format!("UPDATE sweepd_trials SET {set_attrs} WHERE trial_id = OLD.trial_id;"),
        ),
    ]
}

/// On sweepd's own `sweepd_workers`.
fn worker_triggers() -> Vec<(&'static str, String)> {
    vec![
        // sweepd's own table: a reused worker id does not inherit a deleted worker's events.
        trigger(
            "sweepd_workers_insert",
            "AFTER INSERT ON sweepd_workers",
            "DELETE FROM sweepd_worker_events WHERE worker_id = NEW.worker_id;".into(),
        ),
    ]
}

/// sweepd's indexes on Optuna's tables (migration 0004): a rebuild of `trials` may drop them.
const OPTUNA_TABLE_INDEXES: [(&str, &str); 2] = [
    (
        "ix_sweepd_trials_study_state",
        "CREATE INDEX IF NOT EXISTS ix_sweepd_trials_study_state ON trials (study_id, state, trial_id)",
    ),
    (
        "ix_sweepd_trials_study_number",
        "CREATE INDEX IF NOT EXISTS ix_sweepd_trials_study_number ON trials (study_id, number)",
    ),
];

/// Refills `sweepd_studies` and `sweepd_trials` from Optuna's tables.
fn refill() -> [String; 4] {
    [
        "DELETE FROM sweepd_studies".into(),
        "INSERT INTO sweepd_studies (study_id, study_name) SELECT study_id, study_name FROM studies"
            .into(),
        "DELETE FROM sweepd_trials".into(),
        format!(
            "INSERT INTO sweepd_trials (study_name, trial_id, number, state, value, value_type, params,
                           datetime_start, datetime_complete, duration_s,
                           worker_id, worker_pid, fail_reason)
SELECT s.study_name, t.trial_id, t.number, t.state, v.value, v.value_type, {},
       t.datetime_start, t.datetime_complete, {},
       {}, {}, {}
  FROM trials AS t
  JOIN studies AS s ON s.study_id = t.study_id
  LEFT JOIN trial_values AS v ON v.trial_id = t.trial_id AND v.objective = 0",
            params_of("t.trial_id"),
            duration_of("t"),
            attr_of("t.trial_id", WORKER_ID_ATTR),
            attr_of("t.trial_id", WORKER_PID_ATTR),
            attr_of("t.trial_id", FAIL_REASON_ATTR),
        ),
    ]
}

/// Deletes sweepd's rows of studies and trials that no longer exist.
const PURGE: [&str; 7] = [
    "DELETE FROM sweepd_workers WHERE study_id NOT IN (SELECT study_id FROM studies)",
    "DELETE FROM sweepd_daemon WHERE study_id NOT IN (SELECT study_id FROM studies)",
    "DELETE FROM sweepd_gpus WHERE study_id NOT IN (SELECT study_id FROM studies)",
    "DELETE FROM sweepd_commands WHERE study_id NOT IN (SELECT study_id FROM studies)",
    "DELETE FROM sweepd_control WHERE study_id NOT IN (SELECT study_id FROM studies)",
    "DELETE FROM sweepd_worker_events \
     WHERE worker_id NOT IN (SELECT worker_id FROM sweepd_workers) \
        OR trial_id NOT IN (SELECT trial_id FROM trials)",
    "DELETE FROM sweepd_trial_memory WHERE trial_id NOT IN (SELECT trial_id FROM trials)",
];

impl Store {
    /// Makes sure sweepd's triggers and indexes on Optuna's tables are in place. When they
    /// are not (a new database, a table rebuilt by an Optuna migration, an older sweepd's
    /// triggers), re-creates them, refills `sweepd_trials` and deletes rows of studies and
    /// trials deleted meanwhile, in one transaction. Returns whether it had to.
    ///
    /// On PostgreSQL there is nothing to keep: `sweepd_trials` is a view there, created by its
    /// migration, and ids are never reused.
    pub async fn ensure_mirror(&self) -> Result<bool> {
        let Pool::Sqlite(pool) = &self.pool else {
            return Ok(false);
        };
        let wanted = triggers();
        if self.mirror_in_place(&wanted, pool).await? {
            return Ok(false);
        }
        let mut tx = sqlite::begin_write(pool).await.at(&self.path)?;
        // Another sweepd may have done it while we waited for the write lock.
        if self.mirror_in_place(&wanted, &mut *tx).await? {
            tx.rollback().await.at(&self.path)?;
            return Ok(false);
        }
        let present: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'sweepd\\_%' ESCAPE '\\'",
        )
        .fetch_all(&mut *tx)
        .await
        .at(&self.path)?;
        for name in present {
            // Names come from sqlite_master and match sweepd_[A-Za-z0-9_]* only if ours;
            // quote anyway.
            sqlx::query(&format!("DROP TRIGGER \"{}\"", name.replace('"', "\"\"")))
                .execute(&mut *tx)
                .await
                .at(&self.path)?;
        }
        for (_, sql) in OPTUNA_TABLE_INDEXES {
            sqlx::query(sql).execute(&mut *tx).await.at(&self.path)?;
        }
        for sql in refill().iter().map(String::as_str).chain(PURGE) {
            sqlx::query(sql).execute(&mut *tx).await.at(&self.path)?;
        }
        for (_, sql) in &wanted {
            sqlx::query(sql).execute(&mut *tx).await.at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(true)
    }

    /// Whether the file holds exactly sweepd's triggers (by name and text) and its indexes.
    async fn mirror_in_place<'c, E>(&self, wanted: &[(&str, String)], conn: E) -> Result<bool>
    where
        E: sqlx::Executor<'c, Database = super::sqlite::Db>,
    {
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
            "SELECT type, name, sql FROM sqlite_master \
             WHERE (type = 'trigger' AND name LIKE 'sweepd\\_%' ESCAPE '\\') \
                OR (type = 'index' AND name IN ($1, $2))",
        )
        .bind(OPTUNA_TABLE_INDEXES[0].0)
        .bind(OPTUNA_TABLE_INDEXES[1].0)
        .fetch_all(conn)
        .await
        .at(&self.path)?;
        let mut triggers: Vec<(String, String)> = Vec::new();
        let mut indexes = 0;
        for (kind, name, sql) in rows {
            if kind == "index" {
                indexes += 1;
            } else {
                triggers.push((name, sql.unwrap_or_default()));
            }
        }
        triggers.sort();
        let mut want: Vec<(String, String)> = wanted
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect();
        want.sort();
        Ok(indexes == OPTUNA_TABLE_INDEXES.len() && triggers == want)
    }

    /// Deletes sweepd's rows of studies and trials that no longer exist: after a study was
    /// deleted under a running daemon, whose last writes (worker exits, events) came after
    /// the triggers had deleted its rows.
    pub async fn purge_orphans(&self) -> Result<()> {
        super::outage::retrying!(self, { self.purge_orphans_attempt().await })
    }

    async fn purge_orphans_attempt(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        for q in PURGE {
            sql!(tx.conn(), |c| sqlx::query(q)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
            .at(&self.path)?;
        }
        tx.commit().await.at(&self.path)?;
        Ok(())
    }

    /// Whether `study` is gone from the database: deleted (`optuna.delete_study`), or its id
    /// now names another study.
    pub async fn study_deleted(&self, study: &super::Study) -> Result<bool> {
        super::outage::retrying!(self, { self.study_deleted_attempt(study).await })
    }

    async fn study_deleted_attempt(&self, study: &super::Study) -> Result<bool> {
        let name: Option<String> = sql!(self.acquire().await?.conn(), |c| {
            sqlx::query_scalar("SELECT study_name FROM studies WHERE study_id = $1")
                .bind(study.id)
                .fetch_optional(c)
                .await
        })
        .at(&self.path)?;
        Ok(name.as_deref() != Some(study.name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;

    async fn fresh() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        (dir, store)
    }

    async fn exec(store: &Store, sql: &str) {
        sqlx::query(sql)
            .execute(store.sqlite_pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn mirror_rows(store: &Store) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT json_array(study_name, trial_id, number, state, value, value_type, params, \
             datetime_start, datetime_complete, round(duration_s, 3), worker_id, worker_pid, \
             fail_reason) FROM sweepd_trials ORDER BY trial_id",
        )
        .fetch_all(store.sqlite_pool())
        .await
        .unwrap()
    }

    /// Rows the way Optuna writes them, plus a few it never writes but another tool might.
    async fn write_trials(store: &Store) {
        for sql in [
            "INSERT INTO studies (study_id, study_name) VALUES (1, 's')",
            "INSERT INTO trials (trial_id, number, study_id, state, datetime_start) \
             VALUES (1, 0, 1, 'RUNNING', '2026-01-01 10:00:00.000000')",
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES \
             (1, 'lr', 0.01, '{\"name\": \"FloatDistribution\", \"attributes\": {\"low\": 0.001, \"high\": 0.1, \"log\": true, \"step\": null}}'), \
             (1, 'n', 4.0, '{\"name\": \"IntDistribution\", \"attributes\": {\"low\": 0, \"high\": 8, \"log\": false, \"step\": 2}}'), \
             (1, 'flag', 1.0, '{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [false, true]}}'), \
             (1, 'opt', 2.0, '{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [\"adam\", \"sgd\", \"rmsprop\"]}}')",
            "INSERT INTO trial_system_attributes (trial_id, \"key\", value_json) VALUES \
             (1, 'sweepd:worker_id', '3'), (1, 'sweepd:worker_pid', '4242'), (1, 'other', '1')",
            "UPDATE trials SET state = 'COMPLETE', datetime_complete = '2026-01-01 10:00:01.500000' \
             WHERE trial_id = 1",
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (1, 0, 0.25, 'FINITE')",
            "INSERT INTO trials (trial_id, number, study_id, state, datetime_start) \
             VALUES (2, 1, 1, 'FAIL', '2026-01-01 10:00:02.000000')",
            "INSERT INTO trial_system_attributes (trial_id, \"key\", value_json) VALUES \
             (2, 'fail_reason', '\"worker died\"')",
            "INSERT INTO trials (trial_id, number, study_id, state) VALUES (3, 2, 1, 'WAITING')",
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (3, 0, NULL, 'INF_NEG')",
        ] {
            exec(store, sql).await;
        }
    }

    #[tokio::test]
    async fn a_second_start_finds_the_mirror_in_place() {
        let (dir, store) = fresh().await;
        assert!(!store.ensure_mirror().await.unwrap());
        drop(store);
        let again = Store::open(&dir.path().join("t.db")).await.unwrap();
        assert!(!again.ensure_mirror().await.unwrap());
    }

    #[tokio::test]
    async fn the_triggers_and_a_refill_agree() {
        let (_dir, store) = fresh().await;
        write_trials(&store).await;
        let by_triggers = mirror_rows(&store).await;
        assert_eq!(
            by_triggers[0],
            r#"["s",1,0,"COMPLETE",0.25,"FINITE","{\"lr\":0.01,\"n\":4,\"flag\":true,\"opt\":\"rmsprop\"}","2026-01-01 10:00:00.000000","2026-01-01 10:00:01.500000",1.5,3,4242,null]"#
        );
        assert_eq!(
            by_triggers[1],
            r#"["s",2,1,"FAIL",null,null,"{}","2026-01-01 10:00:02.000000",null,null,null,null,"worker died"]"#
        );
        assert_eq!(
            by_triggers[2],
            r#"["s",3,2,"WAITING",null,"INF_NEG","{}",null,null,null,null,null,null]"#
        );
        // What an Optuna migration leaves: the triggers gone; the refill must give the same.
        exec(&store, "DROP TRIGGER sweepd_trials_update").await;
        exec(&store, "DELETE FROM sweepd_trials").await;
        assert!(store.ensure_mirror().await.unwrap());
        assert_eq!(mirror_rows(&store).await, by_triggers);
        // Changes and deletions follow.
        exec(&store, "DELETE FROM trial_params WHERE param_name = 'n'").await;
        exec(
            &store,
            "UPDATE trial_system_attributes SET value_json = '7' WHERE \"key\" = 'sweepd:worker_id'",
        )
        .await;
        exec(&store, "DELETE FROM trial_values WHERE trial_id = 3").await;
        let rows = mirror_rows(&store).await;
        assert!(rows[0].contains(r#"{\"lr\":0.01,\"flag\":true,\"opt\":\"rmsprop\"}","#));
        assert!(rows[0].ends_with("1.5,7,4242,null]"), "{}", rows[0]);
        assert!(rows[2].contains(r#""WAITING",null,null,"#), "{}", rows[2]);
        exec(
            &store,
            "DELETE FROM trial_system_attributes WHERE trial_id = 2",
        )
        .await;
        exec(&store, "DELETE FROM trials WHERE trial_id = 2").await;
        assert_eq!(mirror_rows(&store).await.len(), 2);
    }

    #[tokio::test]
    async fn a_database_of_an_older_sweepd_is_upgraded_in_place() {
        // Migrations 0001-0004 (the view sweepd_trials, foreign keys to Optuna's tables) and
        // rows an older sweepd wrote, among them rows a delete_study left behind.
        use sqlx::migrate::Migrate;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .foreign_keys(false);
        let mut conn = sqlx::SqliteConnection::connect_with(&opts).await.unwrap();
        conn.ensure_migrations_table().await.unwrap();
        for m in sqlx::migrate!("./migrations")
            .iter()
            .filter(|m| m.version <= 4)
        {
            conn.apply(m).await.unwrap();
        }
        for sql in [
            "INSERT INTO studies (study_id, study_name) VALUES (1, 's')",
            "INSERT INTO trials (trial_id, number, study_id, state) VALUES (1, 0, 1, 'COMPLETE')",
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (1, 0, 2.5, 'FINITE')",
            "INSERT INTO sweepd_workers (worker_id, study_id, slot, host, pid, state, started_at, trials_done) \
             VALUES (1, 1, 0, 'h', 10, 'EXITED', '2026-01-01 00:00:00', 1), \
                    (2, 2, 0, 'h', 11, 'EXITED', '2026-01-01 00:00:00', 0)",
            "INSERT INTO sweepd_worker_events (worker_id, trial_id, at, kind, detail) VALUES \
             (1, 1, '2026-01-01 00:00:01', 'trial_failed', 'kept'), \
             (2, NULL, '2026-01-01 00:00:01', 'spawned', 'of the deleted study'), \
             (1, 99, '2026-01-01 00:00:01', 'trial_failed', 'of a deleted trial')",
            "INSERT INTO sweepd_daemon (study_id, pid, host, started_at, heartbeat_at, state) VALUES \
             (1, 5, 'h', '2026-01-01', '2026-01-01', 'STOPPED'), (2, 6, 'h', '2026-01-01', '2026-01-01', 'STOPPED')",
        ] {
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();

        let store = Store::open(&path).await.unwrap();
        let kind: String =
            sqlx::query_scalar("SELECT type FROM sqlite_master WHERE name = 'sweepd_trials'")
                .fetch_one(store.sqlite_pool())
                .await
                .unwrap();
        assert_eq!(kind, "table");
        assert_eq!(
            mirror_rows(&store).await,
            [r#"["s",1,0,"COMPLETE",2.5,"FINITE","{}",null,null,null,null,null,null]"#]
        );
        let kept: Vec<String> = sqlx::query_scalar(
            "SELECT json_array('worker', worker_id, study_id, pid, trials_done) FROM sweepd_workers \
             UNION ALL SELECT json_array('event', worker_id, trial_id, detail) FROM sweepd_worker_events \
             UNION ALL SELECT json_array('daemon', study_id, pid) FROM sweepd_daemon",
        )
        .fetch_all(store.sqlite_pool())
        .await
        .unwrap();
        assert_eq!(
            kept,
            [
                r#"["worker",1,1,10,1]"#,
                r#"["event",1,1,"kept"]"#,
                r#"["daemon",1,5]"#
            ]
        );
        for table in [
            "sweepd_workers",
            "sweepd_worker_events",
            "sweepd_gpus",
            "sweepd_trial_memory",
            "sweepd_daemon",
            "sweepd_commands",
            "sweepd_control",
        ] {
            let fks: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT \"table\" FROM pragma_foreign_key_list('{table}')"
            ))
            .fetch_all(store.sqlite_pool())
            .await
            .unwrap();
            assert!(fks.is_empty(), "{table} references {fks:?}");
        }
        assert!(!store.ensure_mirror().await.unwrap(), "triggers in place");
    }

    #[tokio::test]
    async fn malformed_rows_do_not_fail_the_writes_that_fire_the_triggers() {
        // A trigger that errors fails the write that fired it: Optuna's, or another tool's.
        let (_dir, store) = fresh().await;
        write_trials(&store).await;
        for sql in [
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES \
             (3, 'a', 1.0, 'not json'), \
             (3, 'b', -1.0, '{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [1]}}'), \
             (3, 'c', NULL, '{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [1]}}'), \
             (3, 'd', 9.0, '{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [1]}}'), \
             (3, NULL, 1.0, NULL)",
            "INSERT INTO trial_system_attributes (trial_id, \"key\", value_json) VALUES \
             (3, 'fail_reason', 'not json'), (3, 'sweepd:worker_id', NULL)",
            "INSERT INTO trials (number, study_id, state, datetime_start) VALUES (3, 1, 'RUNNING', 'yesterday')",
        ] {
            exec(&store, sql).await;
        }
        let rows = mirror_rows(&store).await;
        assert!(
            rows[2].contains(r#""{\"a\":1.0,\"b\":null,\"c\":null,\"d\":null}""#),
            "{}",
            rows[2]
        );
    }
}
