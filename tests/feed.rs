//! Samplers and pruners see every process's trials while the daemon runs, on SQLite and on
//! PostgreSQL (a throwaway cluster per test, `common::PgServer`).
//!
//! - The store's read of "what changed since the last read" (`Store::changes`) returns the other
//!   processes' new and changed trials only, and reads only their rows: counted, row by row.
//! - A running daemon's TPE learns trials that another process finishes after the daemon started
//!   (an Optuna process on SQLite; another host's daemon on PostgreSQL) and proposes where they
//!   were best; its median pruner prunes against their curves.
//! - Define-by-run and several objectives run on PostgreSQL with two hosts.
//!
//! `cargo test --test feed -- --ignored --nocapture feed_cost` prints what one read costs at
//! 1k and 10k trials (see `docs/benchmarks.md`); it asserts nothing about time.

mod common;

use common::*;
use sweepd::store::{Changes, DaemonId, Feed, StartCtx, StartOp, Started, Store, Study, Target};
use sweepd::study::{
    Direction, Distribution, Finish, ParamSpec, ParamValue, Params, SearchSpace, Tally, TrialState,
};

// ---------------------------------------------------------------------------------------------
// The store's read, on both engines.

fn space() -> SearchSpace {
    SearchSpace {
        params: vec![ParamSpec {
            name: "x".into(),
            dist: Distribution::Float {
                low: -2.0,
                high: 2.0,
                step: None,
                log: false,
            },
        }],
    }
}

fn daemon(host: &str) -> DaemonId {
    DaemonId {
        pid: 4242,
        pid_start: Some(1),
        host: host.into(),
    }
}

/// A process writing trials as a daemon does: started with its owner attribute, one report,
/// finished.
struct Writer<'a> {
    store: &'a Store,
    study: &'a Study,
    owner: DaemonId,
    tally: Tally,
}

impl Writer<'_> {
    async fn start(&mut self, x: f64) -> (i64, i64) {
        let params = Params::from([("x".to_owned(), ParamValue::Float(x))]);
        let ctx = StartCtx {
            study: self.study,
            owner: &self.owner,
            budget: None,
            tally: &mut self.tally,
        };
        match self
            .store
            .start(&space(), StartOp::New(&params), ctx)
            .await
            .unwrap()
        {
            Started::Yes(c) => (c.trial_id, c.number),
            other => panic!("not started: {other:?}"),
        }
    }

    async fn complete(&mut self, trial_id: i64, value: f64) {
        self.store.report(trial_id, 0, value + 1.0).await.unwrap();
        let done = self
            .store
            .finish(self.study, trial_id, &Finish::Complete(vec![value]), &[])
            .await
            .unwrap();
        assert!(done.is_some());
    }

    async fn trial(&mut self, x: f64) -> i64 {
        let (id, _) = self.start(x).await;
        self.complete(id, x * x).await;
        id
    }
}

async fn open(target: &Target) -> (Store, Study) {
    let store = Store::open_target(target).await.unwrap();
    let study = store
        .ensure_study("feed", &[Direction::Minimize], None)
        .await
        .unwrap();
    (store, study)
}

fn states(c: &Changes) -> Vec<TrialState> {
    c.trials.iter().map(|t| t.record.state).collect()
}

/// The read returns other processes' trials only, and after the first read only what changed:
/// its row count is that of the changes, whatever the study's size.
async fn a_read_returns_and_costs_only_what_changed(target: Target) {
    let (store, study) = open(&target).await;
    let me = daemon("me");
    let mut other = Writer {
        store: &store,
        study: &study,
        owner: daemon("other"),
        tally: Tally::default(),
    };
    let mut mine = Writer {
        store: &store,
        study: &study,
        owner: me.clone(),
        tally: Tally::default(),
    };
    for i in 0..1000 {
        other.trial(-1.0 + i as f64 / 1000.0).await;
    }
    let (running_a, _) = other.start(0.5).await;
    let (_running_b, _) = other.start(0.6).await;
    for _ in 0..3 {
        mine.trial(1.5).await;
    }

    // The first read: the whole study but this daemon's own trials.
    let mut feed = Feed::default();
    let first = store.changes(&study, &me, &mut feed, true).await.unwrap();
    assert_eq!(first.trials.len(), 1002);
    let complete = states(&first)
        .iter()
        .filter(|s| **s == TrialState::Complete)
        .count();
    assert_eq!(complete, 1000);
    assert_eq!(feed.open(), 2);
    let t = &first.trials[10];
    assert_eq!(t.record.number, 10);
    let x = -1.0 + 10.0 / 1000.0;
    assert_eq!(t.record.params["x"], ParamValue::Float(x));
    assert_eq!(t.record.values, [x * x]);
    assert_eq!(t.curve, [(0, x * x + 1.0)]);
    assert!(first.rows > 4000, "{}", first.rows);

    // Nothing changed: one row per trial still open, nothing else.
    let again = store.changes(&study, &me, &mut feed, true).await.unwrap();
    assert!(again.trials.is_empty());
    assert_eq!(again.rows, 2);

    // Ten new trials of the other process, one of its running trials finished, five trials of
    // this daemon's own.
    for _ in 0..10 {
        other.trial(0.1).await;
    }
    other.complete(running_a, 0.25).await;
    for _ in 0..5 {
        mine.trial(1.5).await;
    }
    let changed = store.changes(&study, &me, &mut feed, true).await.unwrap();
    assert_eq!(changed.trials.len(), 11);
    assert!(changed.trials.iter().all(|t| t.record.state.is_final()));
    assert_eq!(changed.trials[0].trial_id, running_a, "in trial id order");
    assert_eq!(changed.trials[0].record.values, [0.25]);
    // 15 new trials' states (10 of the other's, 5 own), 2 open ones', and for the 11 that
    // changed one row each of params, values and intermediate values.
    assert_eq!(changed.rows, 15 + 2 + 3 * 11);
    assert_eq!(feed.open(), 1);

    // A running trial whose objective suggests another param is read again, with it.
    let lr = Distribution::Float {
        low: 1e-3,
        high: 1.0,
        step: None,
        log: true,
    };
    let running_b = _running_b;
    store
        .set_param(&study, running_b, "lr", &lr, &ParamValue::Float(0.01))
        .await
        .unwrap()
        .unwrap();
    let grown = store.changes(&study, &me, &mut feed, false).await.unwrap();
    assert_eq!(grown.trials.len(), 1);
    let t = &grown.trials[0].record;
    assert_eq!(t.state, TrialState::Running);
    assert_eq!(t.params["lr"], ParamValue::Float(0.01));
    assert_eq!(t.distributions["lr"], lr);
    assert_eq!(grown.rows, 1 + 2, "its state, then its two params");
    let quiet = store.changes(&study, &me, &mut feed, false).await.unwrap();
    assert!(quiet.trials.is_empty());
    assert_eq!(quiet.rows, 1);
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn sqlite_target(dir: &tempfile::TempDir) -> Target {
    Target::Sqlite(dir.path().join("feed.db"))
}

fn pg_target(url: &str) -> Target {
    Target::Postgres {
        url: url.to_owned(),
        label: url.to_owned(),
    }
}

#[test]
fn a_read_returns_and_costs_only_what_changed_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(a_read_returns_and_costs_only_what_changed(sqlite_target(
        &dir,
    )));
}

#[test]
fn a_read_returns_and_costs_only_what_changed_on_postgresql() {
    let pg = PgServer::start();
    let url = pg.create_db("rows");
    rt().block_on(a_read_returns_and_costs_only_what_changed(pg_target(&url)));
}
