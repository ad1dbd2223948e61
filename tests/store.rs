//! The store called directly, on a real SQLite file and a real PostgreSQL server (a throwaway
//! cluster per test, `common::PgServer`): sweepd's PostgreSQL functions as the migrator installs
//! them, and the budget's rule, which is written twice (`Tally`, and `sweepd_step`), deciding
//! alike on both engines.

mod common;

use common::*;
use sweepd::store::{DaemonId, StartCtx, StartOp, Started, Store, Target};
use sweepd::study::attrs::{OWNER_ATTR, RETRIED_AS_ATTR, WORKER_ID_ATTR};
use sweepd::study::{Direction, Distribution, ParamSpec, ParamValue, Params, SearchSpace, Tally};

fn pg_target(url: &str) -> Target {
    Target::Postgres {
        url: url.to_owned(),
        label: url.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// sweepd's functions: one file each, installed by the migrator.

/// sweepd's functions as a database holds them: name, definition (as the server prints it),
/// comment (the mark of the file it was installed from).
fn functions(url: &str) -> Vec<String> {
    pg_column(
        url,
        "SELECT p.proname || E'\\n' || pg_get_functiondef(p.oid) || E'\\n' \
                || COALESCE(obj_description(p.oid, 'pg_proc'), '(no comment)') \
         FROM pg_proc p WHERE p.proname LIKE 'sweepd\\_%' ORDER BY p.proname",
    )
}

/// The body of the function a file of `migrations-postgres/` defines: the text between its
/// dollar quotes, as the server keeps it (`pg_proc.prosrc`).
fn body_of(file: &str) -> String {
    let text = std::fs::read_to_string(repo().join("migrations-postgres").join(file)).unwrap();
    let open = text.find(" $sweepd_").expect("a dollar-quoted body") + 1;
    let tag_end = open + 1 + text[open + 1..].find('$').unwrap() + 1;
    let tag = &text[open..tag_end];
    let close = tag_end + text[tag_end..].find(tag).unwrap();
    text[tag_end..close].to_owned()
}

/// The body of `name` in the database at `url` (none where there is no such function).
fn installed_body(url: &str, name: &str) -> Vec<String> {
    pg_column(
        url,
        &format!("SELECT prosrc FROM pg_proc WHERE proname = '{name}'"),
    )
}

fn open_and_close(url: &str) {
    block_on(async {
        let store = Store::open_target(&pg_target(url)).await.unwrap();
        store.close().await;
    })
}

const OLD_STEP: &str = "0007_sweepd_step_finish_before_lock.sql";

/// A database that an older sweepd migrated (migrations 0005-0007 each created or replaced
/// `sweepd_step`, and there was no `sweepd_tally`) ends, once a daemon opens it, with the same
/// functions as a new database: the files' text, marked as installed from them. Opened again,
/// nothing is replaced; a version another sweepd installed is replaced by the files' again.
#[test]
fn a_database_an_older_sweepd_migrated_ends_with_the_functions_a_new_one_has() {
    let pg = PgServer::start();
    let fresh = pg.create_db("fresh");
    let old = pg.create_db("old");
    // What an older sweepd left: its numbered migrations, which are these files unchanged.
    block_on(async {
        let pool = sqlx::PgPool::connect(&old).await.unwrap();
        sqlx::migrate::Migrator::new(repo().join("migrations-postgres"))
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    assert_eq!(installed_body(&old, "sweepd_step"), [body_of(OLD_STEP)]);
    assert!(installed_body(&old, "sweepd_tally").is_empty());

    open_and_close(&fresh);
    open_and_close(&old);
    let installed = functions(&fresh);
    assert_eq!(installed.len(), 2, "{installed:#?}");
    assert_eq!(functions(&old), installed);
    for name in ["sweepd_step", "sweepd_tally"] {
        let body = body_of(&format!("functions/{name}.sql"));
        assert_eq!(
            installed_body(&old, name),
            [body],
            "{name} is its file's text"
        );
    }
    assert_ne!(body_of("functions/sweepd_step.sql"), body_of(OLD_STEP));

    // Opened again: the functions are the files' already, and are left alone.
    let versions = |url: &str| {
        pg_column(
            url,
            "SELECT xmin::TEXT FROM pg_proc WHERE proname LIKE 'sweepd\\_%' ORDER BY proname",
        )
    };
    let before = versions(&old);
    open_and_close(&old);
    assert_eq!(
        versions(&old),
        before,
        "not replaced when already the files'"
    );

    // Another sweepd's version (0007's) is replaced by the file's again.
    let text = std::fs::read_to_string(repo().join("migrations-postgres").join(OLD_STEP));
    pg_exec(&fresh, &text.unwrap());
    assert_eq!(installed_body(&fresh, "sweepd_step"), [body_of(OLD_STEP)]);
    open_and_close(&fresh);
    assert_eq!(functions(&fresh), installed);

    // `sweepd_tally` is inlined into the query that calls it (planned with it, as the same
    // statement written out was), not run apart at each call.
    let plan = pg_column(&fresh, "EXPLAIN SELECT * FROM sweepd_tally(1, 0, '{2}')").join("\n");
    assert!(!plan.contains("Function Scan"), "{plan}");
    assert!(plan.contains("trials_pkey"), "{plan}");
}

// ---------------------------------------------------------------------------------------------
// The budget's rule, in `Tally` and in `sweepd_step`.

/// The cases, one a line: name | the trials the daemon's tally read | what became of some of
/// them since (index: trial) | trials created since | the budget | the start | what it says.
///
/// A trial is its state, with `+retried` for a FAIL with a retry copy, and `@other` (an Optuna
/// script's) or `@old` (a sweepd's that wrote only its worker attribute); else this sweepd's.
/// The start is `new` (a new trial, whose line of WAITING trials is the ones the tally read),
/// `new-no-line` (a new trial, no line), or `claim` (the oldest WAITING trial).
const BUDGET_CASES: &[&str] = &[
    "empty             | -                              | -                             | -             | 1 | new         | yes",
    "budget_0          | -                              | -                             | -             | 0 | new         | noroom",
    "final_spend       | COMPLETE PRUNED@other          | -                             | FAIL@other    | 3 | new         | noroom",
    "final_below       | COMPLETE PRUNED@other          | -                             | FAIL@other    | 4 | new         | yes",
    "retried_fail      | FAIL+retried                   | -                             | FAIL+retried  | 1 | new         | yes",
    "ours_reserve      | RUNNING                        | -                             | -             | 1 | new         | noroom",
    "old_reserve       | -                              | -                             | RUNNING@old   | 1 | new         | noroom",
    "others_do_not     | RUNNING@other                  | -                             | RUNNING@other | 1 | new         | yes",
    "waiting_holds     | COMPLETE WAITING@other         | -                             | -             | 2 | new         | noroom",
    "its_claim_fits    | COMPLETE WAITING@other         | -                             | -             | 2 | claim       | yes",
    "claim_needs_room  | COMPLETE RUNNING WAITING@other | -                             | -             | 2 | claim       | noroom",
    "waiting_first     | -                              | -                             | WAITING@other | 9 | new         | waiting",
    "even_if_full      | COMPLETE@other                 | -                             | WAITING@other | 1 | new         | waiting",
    "no_line           | -                              | -                             | WAITING@other | 2 | new-no-line | yes",
    "open_ended        | RUNNING RUNNING@other          | 0:FAIL+retried 1:PRUNED@other | -             | 2 | new         | yes",
    "open_filled       | RUNNING RUNNING@other          | 0:COMPLETE 1:PRUNED@other     | -             | 2 | new         | noroom",
    "claimed_by_host   | COMPLETE@other WAITING@other   | 1:RUNNING                     | -             | 2 | new-no-line | noroom",
    "claimed_by_script | COMPLETE@other WAITING@other   | 1:RUNNING@other               | -             | 2 | new-no-line | yes",
];

/// A trial of a case: its state, a FAIL with a retry copy, the attribute of its runner.
struct Trial {
    state: String,
    retried: bool,
    runner: Option<&'static str>,
}

fn trial(spec: &str) -> Trial {
    let (spec, runner) = match spec.split_once('@') {
        Some((s, "other")) => (s, None),
        Some((s, "old")) => (s, Some(WORKER_ID_ATTR)),
        Some((_, r)) => panic!("runner {r}"),
        None => (spec, Some(OWNER_ATTR)),
    };
    let (state, retried) = match spec.split_once('+') {
        Some((s, "retried")) => (s, true),
        Some((_, f)) => panic!("flag {f}"),
        None => (spec, false),
    };
    Trial {
        state: state.to_owned(),
        retried,
        runner,
    }
}

fn trials(list: &str) -> Vec<Trial> {
    list.split_whitespace()
        .filter(|t| *t != "-")
        .map(trial)
        .collect()
}

/// Runs [`BUDGET_CASES`] on `target`, each in a study of its own. For each, what the start
/// said, and what `Tally` says of the same trials read afresh (`waiting` where the start of a
/// new trial is refused for a WAITING trial outside its line, before the budget is judged).
async fn run_budget_cases(target: &Target) -> Vec<(String, String)> {
    let store = Store::open_target(target).await.unwrap();
    let mut db = RawDb::connect(target).await;
    let owner = DaemonId {
        pid: 4242,
        pid_start: Some(1),
        host: "me".into(),
    };
    let space = SearchSpace {
        params: vec![ParamSpec {
            name: "x".into(),
            dist: Distribution::Float {
                low: 0.0,
                high: 1.0,
                step: None,
                log: false,
            },
        }],
    };
    let params = Params::from([("x".to_owned(), ParamValue::Float(0.5))]);
    let mut out = Vec::new();
    for case in BUDGET_CASES {
        let cols: Vec<&str> = case.split('|').map(str::trim).collect();
        let [name, before, changed, after, budget, start, _] = cols[..] else {
            panic!("case {case}")
        };
        let study = store
            .ensure_study(name, &[Direction::Minimize], None)
            .await
            .unwrap();
        let mut ids = Vec::new();
        for t in trials(before) {
            ids.push(db.add(study.id, ids.len() as i64, &t).await);
        }
        let mut tally = Tally::default();
        store.refresh_tally(&study, &mut tally).await.unwrap();
        let line: Vec<i64> = tally.waiting_ids().collect();
        for change in changed.split_whitespace().filter(|c| *c != "-") {
            let (i, t) = change.split_once(':').expect("index:trial");
            db.change(ids[i.parse::<usize>().unwrap()], &trial(t)).await;
        }
        for (n, t) in trials(after).iter().enumerate() {
            db.add(study.id, (ids.len() + n) as i64, t).await;
        }

        let budget = Some(budget.parse().unwrap());
        let mut afresh = tally.clone();
        store.refresh_tally(&study, &mut afresh).await.unwrap();
        let room = match start {
            "new" if afresh.waiting_ids().any(|id| !line.contains(&id)) => None,
            "new" | "new-no-line" => Some(afresh.room_for_new(budget)),
            "claim" => Some(afresh.room(budget)),
            other => panic!("start {other}"),
        };
        let by_tally = match room {
            None => "waiting",
            Some(true) => "yes",
            Some(false) => "noroom",
        };

        let waiting;
        let op = if start == "claim" {
            waiting = store.peek_waiting(&study, &space, &[]).await.unwrap();
            StartOp::Claim(waiting.as_ref().expect("a WAITING trial"), &params)
        } else {
            StartOp::New(&params)
        };
        let ctx = StartCtx {
            study: &study,
            owner: &owner,
            budget,
            tally: &mut tally,
            runner: None,
            skip_waiting: (start == "new").then_some(&line[..]),
        };
        let said = match store.start(&space, op, ctx).await.unwrap() {
            Started::Yes(_) => "yes",
            Started::NoRoom => "noroom",
            Started::Waiting => "waiting",
            Started::Taken => "taken",
        };
        out.push((format!("{name}: {said}"), format!("{name}: {by_tally}")));
    }
    store.close().await;
    out
}

/// A connection that writes trials as another writer would, on either engine.
enum RawDb {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

/// A statement run on whichever connection `db` is (the two are different types to sqlx): the
/// ids it returns.
macro_rules! on {
    ($db:expr, $sql:expr, |$q:ident| $bind:expr) => {
        match $db {
            RawDb::Sqlite(c) => {
                let $q = sqlx::query_scalar::<_, i64>($sql);
                $bind.fetch_all(c).await
            }
            RawDb::Postgres(c) => {
                let $q = sqlx::query_scalar::<_, i64>($sql);
                $bind.fetch_all(c).await
            }
        }
        .unwrap()
    };
}

impl RawDb {
    async fn connect(target: &Target) -> RawDb {
        use sqlx::Connection;
        match target {
            Target::Sqlite(path) => RawDb::Sqlite(
                sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                    .await
                    .unwrap(),
            ),
            Target::Postgres { url, .. } => {
                RawDb::Postgres(sqlx::PgConnection::connect(url).await.unwrap())
            }
        }
    }

    /// How a bound state is written into `trials.state` (an enum on PostgreSQL).
    fn state(&self, n: usize) -> String {
        match self {
            RawDb::Sqlite(_) => format!("${n}"),
            RawDb::Postgres(_) => format!("CAST(${n} AS trialstate)"),
        }
    }

    /// Adds trial number `number` to the study, with its attributes; returns its id.
    async fn add(&mut self, study: i64, number: i64, t: &Trial) -> i64 {
        let sql = format!(
            "INSERT INTO trials (number, study_id, state) VALUES ($1, $2, {}) \
             RETURNING CAST(trial_id AS BIGINT)",
            self.state(3)
        );
        let id = on!(self, &sql, |q| q.bind(number).bind(study).bind(&t.state))[0];
        self.attrs(id, t).await;
        id
    }

    /// Changes trial `id` into `t`: its state, and the attributes `t` has (those it had stay).
    async fn change(&mut self, id: i64, t: &Trial) {
        let sql = format!(
            "UPDATE trials SET state = {} WHERE trial_id = $2 RETURNING CAST(trial_id AS BIGINT)",
            self.state(1)
        );
        on!(self, &sql, |q| q.bind(&t.state).bind(id));
        self.attrs(id, t).await;
    }

    async fn attrs(&mut self, id: i64, t: &Trial) {
        let sql = "INSERT INTO trial_system_attributes (trial_id, key, value_json) \
                   VALUES ($1, $2, '1') ON CONFLICT (trial_id, key) DO NOTHING \
                   RETURNING CAST(trial_id AS BIGINT)";
        for key in t
            .runner
            .into_iter()
            .chain(t.retried.then_some(RETRIED_AS_ATTR))
        {
            on!(self, sql, |q| q.bind(id).bind(key));
        }
    }
}

/// The budget's rule is written twice: in `Tally` (SQLite's starts, and every refresh on
/// either engine) and in `sweepd_step` (PostgreSQL's starts, decided under the study's lock
/// within the call's one round trip). A table of cases, run on both engines, holds them
/// together: each start says what its case expects, and `Tally` says the same of the same
/// trials read afresh.
#[test]
fn the_budget_is_decided_alike_by_sweepd_step_and_by_the_tally_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let pg = PgServer::start();
    let url = pg.create_db("budget");
    let sqlite = Target::Sqlite(dir.path().join("budget.db"));
    let expected: Vec<String> = BUDGET_CASES
        .iter()
        .map(|c| {
            let cols: Vec<&str> = c.split('|').map(str::trim).collect();
            format!("{}: {}", cols[0], cols[6])
        })
        .collect();
    for (engine, target) in [("SQLite", sqlite), ("PostgreSQL", pg_target(&url))] {
        let (said, by_tally): (Vec<String>, Vec<String>) =
            block_on(run_budget_cases(&target)).into_iter().unzip();
        assert_eq!(said, expected, "{engine}: the starts");
        assert_eq!(by_tally, expected, "{engine}: the tally's rule");
    }
}
