//! Samplers and pruners see every process's trials while the daemon runs, on SQLite and on
//! PostgreSQL (a throwaway cluster per test, `common::PgServer`).
//!
//! - The store's read of "what changed since the last read" (`Store::changes`) returns the other
//!   processes' new and changed trials only, and reads only their rows: counted, row by row.
//! - A running daemon's TPE learns trials that another process finishes after the daemon started
//!   (an Optuna process on SQLite; another host's daemon on PostgreSQL) and proposes where they
//!   were best; its median pruner prunes against their curves; the best value it shows (its
//!   metrics) is theirs.
//! - Define-by-run and several objectives run on PostgreSQL with two hosts.
//!
//! `cargo test --test feed -- --ignored --nocapture feed_cost` prints what one read costs at
//! 1k and 10k trials (see `docs/benchmarks.md`); it asserts nothing about time.

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};
use sweepd::store::{Changes, DaemonId, Feed, StartCtx, StartOp, Started, Store, Study, Target};
use sweepd::study::{
    Direction, Distribution, Failure, FailureKind, Finish, ParamSpec, ParamValue, Params,
    SearchSpace, Tally, TrialState,
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

impl<'a> Writer<'a> {
    fn new(store: &'a Store, study: &'a Study, owner: DaemonId) -> Writer<'a> {
        Writer {
            store,
            study,
            owner,
            tally: Tally::default(),
        }
    }

    async fn start(&mut self, x: f64) -> (i64, i64) {
        let params = Params::from([("x".to_owned(), ParamValue::Float(x))]);
        let ctx = StartCtx {
            study: self.study,
            owner: &self.owner,
            budget: None,
            tally: &mut self.tally,
            runner: None,
            skip_waiting: None,
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

    /// Trial `i` over `space` (x, lr, n, opt) with 10 intermediate values, left RUNNING or
    /// COMPLETE.
    async fn wide(&mut self, space: &SearchSpace, i: u64, running: bool) {
        let params = Params::from([
            (
                "x".to_owned(),
                ParamValue::Float((i % 400) as f64 / 100.0 - 2.0),
            ),
            ("lr".to_owned(), ParamValue::Float(1e-3)),
            ("n".to_owned(), ParamValue::Int(2 * (i % 6) as i64)),
            ("opt".to_owned(), ParamValue::Choice((i % 3) as usize)),
        ]);
        let ctx = StartCtx {
            study: self.study,
            owner: &self.owner,
            budget: None,
            tally: &mut self.tally,
            runner: None,
            skip_waiting: None,
        };
        let Started::Yes(c) = self
            .store
            .start(space, StartOp::New(&params), ctx)
            .await
            .unwrap()
        else {
            panic!("not started")
        };
        if running {
            return;
        }
        for step in 0..10 {
            let v = 1.0 / (step + 1) as f64;
            self.store.report(c.trial_id, step, v).await.unwrap();
        }
        self.store
            .finish(self.study, c.trial_id, &Finish::Complete(vec![0.5]), &[])
            .await
            .unwrap();
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
    let mut other = Writer::new(&store, &study, daemon("other"));
    let mut mine = Writer::new(&store, &study, me.clone());
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

/// Constraints an objective sets (Optuna 5's `trial.set_constraint`) are recorded while the
/// trial runs, the first value of a key kept, and read back with the trial by key, beside the
/// out-of-memory mark's list, whatever the engine.
async fn constraints_are_recorded_and_read_back_by_key(target: Target) {
    let (store, study) = open(&target).await;
    let me = daemon("me");
    let mut other = Writer::new(&store, &study, daemon("other"));
    let (id, _) = other.start(0.5).await;
    assert!(store.set_constraint(id, "mem", 2.0).await.unwrap());
    assert!(
        !store.set_constraint(id, "mem", -5.0).await.unwrap(),
        "a second value"
    );
    assert!(store
        .set_constraint(id, "lat", f64::NEG_INFINITY)
        .await
        .unwrap());
    other.complete(id, 0.25).await;
    assert!(
        !store.set_constraint(id, "late", 1.0).await.unwrap(),
        "a finished trial"
    );
    let (failed, _) = other.start(0.7).await;
    store.set_constraint(failed, "mem", -1.0).await.unwrap();
    let oom = [("constraints", serde_json::json!([1.0]))];
    let failure = Failure {
        kind: FailureKind::Oom,
        reason: "out of memory alone on its device".into(),
        stderr_tail: None,
        retry: false,
        counts: true,
    };
    store
        .finish(&study, failed, &Finish::Fail(failure), &oom)
        .await
        .unwrap();
    let read = store
        .changes(&study, &me, &mut Feed::default(), false)
        .await
        .unwrap();
    let records: Vec<_> = read
        .trials
        .iter()
        .map(|t| (t.record.constraints.clone(), t.listed_infeasible))
        .collect();
    assert_eq!(
        records,
        [
            (vec![f64::NEG_INFINITY, 2.0], false),
            (vec![-1.0, 1.0], true)
        ]
    );
}

/// `trials` once read each trial's params and attributes with statements of its own, three or
/// four per trial: thousands of round trips for a large study over PostgreSQL. It now reads
/// them for many trials per statement; past one statement's share (500 trials) each trial must
/// still show its own params, user attributes and step.
async fn the_trials_listing_shows_each_trial_its_own_details(target: Target) {
    let (store, study) = open(&target).await;
    let mut w = Writer::new(&store, &study, daemon("me"));
    let n = 1100;
    for i in 0..n {
        let x = -1.0 + i as f64 / n as f64;
        let (id, _) = w.start(x).await;
        store
            .set_user_attr(id, "i", &serde_json::json!(i))
            .await
            .unwrap();
        w.complete(id, x * x).await;
    }
    let (running, _) = w.start(0.25).await;
    store.report(running, 0, 3.0).await.unwrap();
    store.report(running, 7, 2.0).await.unwrap();
    let views = store.trials(&study, None, None).await.unwrap();
    assert_eq!(views.len(), n + 1);
    for (i, v) in views[..n].iter().enumerate() {
        let x = -1.0 + i as f64 / n as f64;
        assert_eq!(v.number, i as i64);
        assert_eq!(v.params["x"], serde_json::json!(x), "trial {i}");
        assert_eq!(v.user_attrs["i"], serde_json::json!(i), "trial {i}");
        assert_eq!(v.value, serde_json::json!(x * x), "trial {i}");
        assert_eq!(v.step, None, "a COMPLETE trial shows no step");
    }
    let last = &views[n];
    assert_eq!(last.state, "RUNNING");
    assert_eq!(last.step, Some(7));
    assert_eq!(last.params["x"], serde_json::json!(0.25));
    // The last few alone, as `trials --last 3` reads them.
    let tail = store.trials(&study, None, Some(3)).await.unwrap();
    let numbers: Vec<i64> = tail.iter().map(|v| v.number).collect();
    assert_eq!(numbers, [n as i64 - 2, n as i64 - 1, n as i64]);
    assert_eq!(tail[0].user_attrs["i"], serde_json::json!(n - 2));
}

/// The tests `$sqlite` and `$pg`: `$body(target)` on a SQLite file and on database `$db` of a
/// PostgreSQL server of its own.
macro_rules! on_both_engines {
    ($body:ident, $sqlite:ident, $pg:ident, $db:literal) => {
        #[test]
        fn $sqlite() {
            let dir = tempfile::tempdir().unwrap();
            rt().block_on($body(sqlite_target(&dir)));
        }

        #[test]
        fn $pg() {
            let pg = PgServer::start();
            let url = pg.create_db($db);
            rt().block_on($body(pg_target(&url)));
        }
    };
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

on_both_engines!(
    the_trials_listing_shows_each_trial_its_own_details,
    the_trials_listing_shows_each_trial_its_own_details_on_sqlite,
    the_trials_listing_shows_each_trial_its_own_details_on_postgresql,
    "listing"
);

on_both_engines!(
    a_read_returns_and_costs_only_what_changed,
    a_read_returns_and_costs_only_what_changed_on_sqlite,
    a_read_returns_and_costs_only_what_changed_on_postgresql,
    "rows"
);

on_both_engines!(
    constraints_are_recorded_and_read_back_by_key,
    constraints_are_recorded_and_read_back_by_key_on_sqlite,
    constraints_are_recorded_and_read_back_by_key_on_postgresql,
    "constraints"
);

/// A WAITING trial created since a daemon last looked (a retry copy here; an Optuna
/// `enqueue_trial` or another host's failover alike) goes before the daemon's next new trial:
/// the new start is refused in its own transaction unless the WAITING trial is already in the
/// daemon's line, and nothing is written for it. (The daemon no longer looks for WAITING
/// trials before every start; this refusal is what keeps them first.)
async fn a_new_trial_waits_for_a_waiting_trial_created_since_the_last_look(target: Target) {
    let (store, study) = open(&target).await;
    let mut w = Writer::new(&store, &study, daemon("me"));
    let (failed, _) = w.start(0.1).await;
    let fail = Finish::Fail(sweepd::study::Failure {
        kind: sweepd::study::FailureKind::Oom,
        reason: "out of memory".into(),
        stderr_tail: None,
        retry: true,
        counts: true,
    });
    store
        .finish(&study, failed, &fail, &[])
        .await
        .unwrap()
        .unwrap();
    let trials = || async {
        store
            .trials(&study, None, None)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.state)
            .collect::<Vec<_>>()
    };
    assert_eq!(trials().await, ["FAIL", "WAITING"]);
    let params = Params::from([("x".to_owned(), ParamValue::Float(0.5))]);
    let space = space();
    macro_rules! start {
        ($skip:expr) => {
            store.start(
                &space,
                StartOp::New(&params),
                StartCtx {
                    study: &study,
                    owner: &w.owner,
                    budget: Some(10),
                    tally: &mut w.tally,
                    runner: None,
                    skip_waiting: $skip,
                },
            )
        };
    }
    assert!(matches!(start!(Some(&[])).await.unwrap(), Started::Waiting));
    assert_eq!(trials().await, ["FAIL", "WAITING"]);
    // In the daemon's line already (its id is the one after the failed trial's): no wait.
    let copy = [failed + 1];
    assert!(matches!(
        start!(Some(&copy)).await.unwrap(),
        Started::Yes(_)
    ));
    assert!(matches!(start!(None).await.unwrap(), Started::Yes(_)));
    assert_eq!(trials().await, ["FAIL", "WAITING", "RUNNING", "RUNNING"]);
}

on_both_engines!(
    a_new_trial_waits_for_a_waiting_trial_created_since_the_last_look,
    a_new_trial_waits_for_a_waiting_trial_created_since_the_last_look_on_sqlite,
    a_new_trial_waits_for_a_waiting_trial_created_since_the_last_look_on_postgresql,
    "waiting"
);

// ---------------------------------------------------------------------------------------------
// Daemons learning other processes' trials while they run.

const LIMIT: Duration = Duration::from_secs(300);

/// The daemon that learns: TPE (random for its first 5 trials) and a median pruner that waits
/// for 25 COMPLETE trials, over one param x; its own objective is x^2 (faulty_worker), one
/// trial at a time, a second each (so every proposal follows a fresh read, and the other
/// process has time to write its trials while the learner still has budget left). Its budget
/// leaves it 25 trials at most: its own never start the pruner.
const LEARNER: &str = r#"
[params.x]
type = "float"
low = -2.0
high = 2.0

[sampler]
n_startup_trials = 5

[pruner]
type = "median"
n_startup_trials = 25
"#;

/// The learner's log: info, and the feed's debug lines ("learnt trials of other processes").
const LEARNER_LOG: &str = "info,sweepd::supervisor::learn=debug";

fn learner(n_trials: u64, storage: Option<String>) -> Cfg {
    Cfg {
        name: "learn".into(),
        n_trials: Some(n_trials),
        max_par: 1,
        sampler: "tpe",
        params: LEARNER.into(),
        storage,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "1.0")
}

/// How many final trials the daemon's log says its sampler was told of other processes.
fn told(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("learnt trials of other processes"))
        .map(|l| {
            let at = l.find("told=").expect("told=") + "told=".len();
            let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<usize>().unwrap()
        })
        .sum()
}

/// What a learner did with the other process's trials (numbered `others.0` to `others.1`,
/// spread over x, all far better than its own and best near x = 1.8): it was told each of them once
/// (`others_final`), its later proposals went there, and its median pruner, which its own
/// trials alone never start (fewer than 25 COMPLETE), pruned its later trials against their
/// curves.
fn assert_learnt(trials: &[Value], log: &str, others: (i64, i64), others_final: usize) {
    let (others_first, others_last) = others;
    assert_eq!(told(log), others_final, "told each trial once:\n{log}");
    let own: Vec<&Value> = trials.iter().filter(|t| t["worker_id"].is_i64()).collect();
    // Ended before the other process's first trial (the learner's trial running then may
    // well be pruned against the other's first curves as they come in).
    let mut before: Vec<&Value> = own
        .iter()
        .copied()
        .filter(|t| t["number"].as_i64().unwrap() < others_first)
        .collect();
    before.pop();
    // Proposed after every trial of the other process was in (one trial of slack for a
    // proposal made just before the last read).
    let after: Vec<&Value> = own
        .iter()
        .copied()
        .filter(|t| t["number"].as_i64().unwrap() > others_last + 1)
        .collect();
    let xs: Vec<f64> = after
        .iter()
        .map(|t| t["params"]["x"].as_f64().unwrap())
        .collect();
    assert!(after.len() >= 5, "too few trials after the others': {xs:?}");
    eprintln!("x of the proposals after the others' trials: {xs:?}");
    let near = xs.iter().filter(|x| **x > 1.0).count();
    // Its own trials alone lead TPE to x near 0; the others' lead it near 1.8.
    assert!(
        near * 4 >= xs.len() * 3,
        "TPE proposed near the other process's best trials only {near} times of {}: {xs:?}",
        xs.len()
    );
    assert!(
        before.iter().all(|t| t["state"] != "PRUNED"),
        "pruned before the others' curves were in: {before:#?}"
    );
    // The pruner waits for 25 COMPLETE trials: until its own 25th, only the other process's
    // curves can have started it.
    let own_25th = own
        .iter()
        .filter(|t| t["state"] == "COMPLETE")
        .nth(24)
        .map_or(i64::MAX, |t| t["number"].as_i64().unwrap());
    let unprimed: Vec<&Value> = after
        .iter()
        .copied()
        .filter(|t| t["number"].as_i64().unwrap() < own_25th)
        .collect();
    let pruned = unprimed.iter().filter(|t| t["state"] == "PRUNED").count();
    assert!(
        unprimed.len() >= 5 && pruned * 4 >= unprimed.len() * 3,
        "pruned {pruned} of {} trials after the others' curves came and before its own 25th \
         COMPLETE trial: {unprimed:#?}",
        unprimed.len()
    );
}

fn wait_exit(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < LIMIT, "{what} did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Optuna optimizing the same SQLite study beside a running daemon: the daemon's TPE and
/// median pruner learn its trials as they finish (before, a daemon read the study once, at
/// its start).
/// The `sweepd_best_value` the daemon's metrics endpoint on `port` shows (`None` while there is none,
/// or the endpoint cannot be read).
fn best_value(port: u16) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.starts_with("sweepd_best_value{"))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn an_optuna_process_beside_the_daemon_teaches_its_tpe_and_pruner_on_sqlite() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = Cfg {
        params: format!("{LEARNER}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        ..learner(45, None)
    };
    let mut sweep = Sweep::new(&cfg);
    sweep.env.push(("SWEEPD_LOG".into(), LEARNER_LOG.into()));
    let mut daemon = sweep.spawn_run();
    wait_until(LIMIT, "6 trials of the daemon's own", || {
        finished(&sweep) >= 6
    });
    let out = std::process::Command::new(python())
        .arg(repo().join("tests/py/optuna_region.py"))
        .arg(&sweep.db)
        .args(["learn", "20", "-2.0", "2.0", "1.8"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "optuna: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<i64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), 20);
    // The best value the daemon shows (its metrics, display and status line) is Optuna's:
    // about -100, where its own trials give 0 at best.
    wait_until(LIMIT, "the daemon's best value to be Optuna's", || {
        best_value(port).is_some_and(|b| b < -99.0)
    });
    let status = wait_exit(&mut daemon, "the daemon");
    assert!(status.success(), "{}", sweep.daemon_stderr());
    assert_learnt(
        &sweep.trials(),
        &sweep.daemon_stderr(),
        (*theirs.iter().min().unwrap(), *theirs.iter().max().unwrap()),
        20,
    );
}

// ---------------------------------------------------------------------------------------------
// On PostgreSQL, hosts.

/// A host of the study at `url`: a study dir whose daemon runs as `SWEEPD_HOST_ID=host`.
fn host(cfg: &Cfg, url: &str, host: &str) -> Sweep {
    let cfg = Cfg {
        storage: Some(format!("url = \"{url}\"\nhost_timeout = \"60s\"")),
        ..cfg.clone()
    };
    let mut sweep = Sweep::new(&cfg);
    sweep.env.push(("SWEEPD_HOST_ID".into(), host.into()));
    sweep
}

/// Two daemons as two hosts: host A's TPE and median pruner learn host B's trials as B
/// finishes them (B started after A, so A's start-up read had none of them). B's objective
/// is (x - 1.8)^2 - 100 over random proposals: far better than A's own x^2, best near 1.8.
#[test]
fn host_a_learns_host_b_trials_while_both_run_on_postgresql() {
    let pg = PgServer::start();
    let url = pg.create_db("learn");
    let mut a = host(&learner(65, None), &url, "a");
    a.env.push(("SWEEPD_LOG".into(), LEARNER_LOG.into()));
    let mut daemon_a = a.spawn_run();
    let finished = || {
        pg_try_column(
            &url,
            "SELECT count(*) FROM trials WHERE state IN ('COMPLETE', 'PRUNED', 'FAIL')",
        )
        .and_then(|c| c[0].parse::<u64>().ok())
        .unwrap_or(0)
    };
    wait_until(LIMIT, "6 trials of host a", || finished() >= 6);
    // B stops once the study holds 40 more final trials than now (a few of them A's).
    let b_cfg = Cfg {
        sampler: "random",
        max_par: 2,
        n_trials: Some(finished() + 40),
        params: LEARNER
            .replace("n_startup_trials = 5\n", "")
            .replace("[pruner]\ntype = \"median\"\nn_startup_trials = 25\n", ""),
        env: Vec::new(),
        ..learner(0, None)
    }
    .env("SWEEPD_TEST_SLEEP", "0.05")
    .env("SWEEPD_TEST_TARGET_X", "1.8")
    .env("SWEEPD_TEST_OFFSET", "-100");
    let b = host(&b_cfg, &url, "b");
    let out = b.run(&[], LIMIT);
    assert!(out.status.success(), "host b: {}", stderr(&out));
    let status = wait_exit(&mut daemon_a, "host a");
    assert!(status.success(), "host a: {}", a.daemon_stderr());
    let trials = optuna_dump(&url, "learn")["trials"]
        .as_array()
        .unwrap()
        .clone();
    let of = |h: &str| -> Vec<&Value> {
        trials
            .iter()
            .filter(|t| t["system_attrs"]["sweepd:daemon"]["host"].as_str() == Some(h))
            .collect()
    };
    let b_trials = of("b");
    assert!(b_trials.len() >= 10, "host b ran {} trials", b_trials.len());
    let b_numbers = b_trials.iter().map(|t| t["number"].as_i64().unwrap());
    let b_span = (b_numbers.clone().min().unwrap(), b_numbers.max().unwrap());
    // `assert_learnt` reads trials as `sweepd trials --json` shows them: A's have a worker.
    let a_numbers: Vec<i64> = of("a")
        .iter()
        .map(|t| t["number"].as_i64().unwrap())
        .collect();
    let shown: Vec<Value> = a
        .trials()
        .into_iter()
        .map(|mut t| {
            if !a_numbers.contains(&t["number"].as_i64().unwrap()) {
                t["worker_id"] = Value::Null;
            }
            t
        })
        .collect();
    assert_learnt(&shown, &a.daemon_stderr(), b_span, b_trials.len());
}

// ---------------------------------------------------------------------------------------------
// What arrived after PostgreSQL, on PostgreSQL: define-by-run and several objectives, each with
// two hosts learning each other's trials.

/// Runs `cfg` as hosts a and b on the study at `url` at once, both to their end.
fn two_hosts(cfg: &Cfg, url: &str) -> (Sweep, Sweep) {
    run_both(host(cfg, url, "a"), host(cfg, url, "b"))
}

/// Runs hosts `a` and `b` at once, both to their end, each running trials: a's trials wait
/// (`tests/workers/gate.py`) until b has started one. Without the gate, a on its own could
/// take the whole budget while b was still starting: CI saw it on 2 cores.
fn run_both(mut a: Sweep, mut b: Sweep) -> (Sweep, Sweep) {
    let gate = b.path("b-started");
    a.env
        .push(("SWEEPD_TEST_GATE".into(), gate.to_str().unwrap().into()));
    b.env
        .push(("SWEEPD_TEST_OPEN".into(), gate.to_str().unwrap().into()));
    let mut daemon_a = a.spawn_run();
    let out = b.run(&[], LIMIT);
    assert!(out.status.success(), "host b: {}", stderr(&out));
    let status = wait_exit(&mut daemon_a, "host a");
    assert!(status.success(), "host a: {}", a.daemon_stderr());
    (a, b)
}

fn script(name: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(python())
        .arg(repo().join("tests/py").join(name))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Define-by-run (protocol 2) on PostgreSQL: the "models" objective of
/// `tests/workers/define_by_run.py` under TPE on two hosts; each trial's params follow its
/// branch, and Optuna, running the same objective with every trial's params enqueued, records
/// what sweepd recorded: state, values, params with their distributions, intermediate values,
/// user attributes.
#[test]
fn define_by_run_on_postgresql_with_two_hosts_records_what_optuna_records() {
    let pg = PgServer::start();
    let url = pg.create_db("dbr");
    let cfg = Cfg {
        name: "models".into(),
        n_trials: Some(16),
        max_par: 2,
        sampler: "tpe",
        command: vec![
            python(),
            repo()
                .join("tests/workers/define_by_run.py")
                .to_string_lossy()
                .into_owned(),
        ],
        params: "[sampler]\nn_startup_trials = 4\n".into(),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_OBJECTIVE", "models");
    let (a, _b) = two_hosts(&cfg, &url);
    let ours = optuna_dump(&url, "models")["trials"]
        .as_array()
        .unwrap()
        .clone();
    assert!(ours.len() >= 16);
    let hosts: std::collections::BTreeSet<&str> = ours
        .iter()
        .filter_map(|t| t["system_attrs"]["sweepd:daemon"]["host"].as_str())
        .collect();
    assert_eq!(hosts.len(), 2, "both hosts ran trials");
    for t in &ours {
        let p = t["params"].as_object().unwrap();
        let model = p["model"].as_str().unwrap();
        let others: &[&str] = match model {
            "svc" => &["rf_max_depth", "n_layers", "dropout"],
            "forest" => &["svc_c", "n_layers", "dropout"],
            _ => &["svc_c", "rf_max_depth"],
        };
        for o in others {
            assert!(
                !p.contains_key(*o),
                "trial {}: {model} has {o}",
                t["number"]
            );
        }
    }
    let replay = a.path("replay.db");
    let n: usize = script(
        "optuna_replay.py",
        &[&url, "models", "models", replay.to_str().unwrap()],
    )
    .trim()
    .parse()
    .unwrap();
    assert_eq!(n, ours.len());
    let theirs = optuna_dump(replay.to_str().unwrap(), "replay")["trials"]
        .as_array()
        .unwrap()
        .clone();
    let user_attrs = |t: &Value| -> Value {
        let mut a = t["user_attrs"].clone();
        a.as_object_mut()
            .unwrap()
            .retain(|k, _| !k.starts_with("sweepd:"));
        a
    };
    for (o, t) in ours.iter().zip(&theirs) {
        let n = &o["number"];
        assert_eq!(o["number"], t["number"]);
        for key in [
            "state",
            "values",
            "params",
            "distributions",
            "intermediate_values",
        ] {
            assert_eq!(o[key], t[key], "trial {n}: {key}");
        }
        assert_eq!(user_attrs(o), user_attrs(t), "trial {n}: user attributes");
    }
    let states: Vec<&str> = ours.iter().map(|t| t["state"].as_str().unwrap()).collect();
    assert!(states.contains(&"PRUNED"), "{states:?}");
    assert!(
        states.iter().all(|s| *s == "COMPLETE" || *s == "PRUNED"),
        "{states:?}"
    );
}

/// Several objectives on PostgreSQL: (loss, accuracy) of `tests/workers/multi_worker.py`
/// under multi-objective TPE on two hosts (trial 3's values infinite); Optuna reads the
/// directions and every trial's values, and `sweepd best` is Optuna's `study.best_trials`.
#[test]
fn several_objectives_on_postgresql_with_two_hosts_are_what_optuna_reads() {
    let pg = PgServer::start();
    let url = pg.create_db("mo");
    let cfg = Cfg {
        name: "mo".into(),
        n_trials: Some(20),
        max_par: 2,
        sampler: "tpe",
        command: vec![
            python(),
            repo()
                .join("tests/workers/multi_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        params: "[sampler]\nn_startup_trials = 6\n".into(),
        storage: Some(format!("url = \"{url}\"\nhost_timeout = \"60s\"")),
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.05")
    .env("SWEEPD_TEST_MULTI", "3:inf");
    let text = cfg.to_toml().replace(
        "direction = \"minimize\"\n",
        "directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\", \"accuracy\"]\n",
    );
    let [a, b] = ["a", "b"].map(|h| {
        let mut s = Sweep::with_toml(&text);
        s.env.push(("SWEEPD_HOST_ID".into(), h.into()));
        s
    });
    let (a, b) = run_both(a, b);
    let hosts = [a, b];

    let d = optuna_dump(&url, "mo");
    assert_eq!(d["directions"], serde_json::json!(["MINIMIZE", "MAXIMIZE"]));
    let theirs = d["trials"].as_array().unwrap();
    let mine = hosts[0].trials();
    assert_eq!(mine.len(), theirs.len());
    let complete = theirs.iter().filter(|t| t["state"] == "COMPLETE").count();
    assert_eq!(complete, 20, "the shared budget, all COMPLETE");
    for (a, b) in mine.iter().zip(theirs) {
        assert_eq!(a["number"], b["number"]);
        assert_eq!(a["state"], b["state"]);
        assert_eq!(a["values"], b["values"], "trial {}", a["number"]);
        assert_eq!(b["values"].as_array().map(Vec::len), Some(2));
    }
    // Infinities as Optuna stores them (NULL and the enum INF_POS / INF_NEG).
    assert_eq!(theirs[3]["values"], serde_json::json!(["inf", "-inf"]));
    let front: Value = serde_json::from_str(&script("optuna_front.py", &[&url, "mo"])).unwrap();
    assert_eq!(
        front["metric_names"],
        serde_json::json!(["loss", "accuracy"])
    );
    let optunas: Vec<(i64, Value)> = front["best_trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["number"].as_i64().unwrap(), t["values"].clone()))
        .collect();
    let best = hosts[1].sweepd(&["best", "--json"]).output().unwrap();
    assert!(best.status.success(), "{}", stderr(&best));
    let best: Value = serde_json::from_slice(&best.stdout).unwrap();
    let ours: Vec<(i64, Value)> = best
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["number"].as_i64().unwrap(), t["values"].clone()))
        .collect();
    assert!(!optunas.is_empty());
    assert_eq!(ours, optunas);
    for h in ["a", "b"] {
        assert!(
            theirs
                .iter()
                .any(|t| t["system_attrs"]["sweepd:daemon"]["host"] == h),
            "host {h} ran no trial"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// What a read costs (printed, never asserted): `docs/benchmarks.md`, "The feed".

/// "median [min-max]" of `xs`, in milliseconds.
fn median_ms(mut xs: Vec<Duration>) -> String {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{:.3} [{:.3}-{:.3}]",
        ms(xs[xs.len() / 2]),
        ms(xs[0]),
        ms(xs[xs.len() - 1])
    )
}

/// At `n` trials of another process in the study (4 params, 10 intermediate values each, 4 of
/// its trials running): the first read (the whole study, as at a daemon's start), a read when
/// nothing changed, and a read after 10 trials of the other process finished.
async fn feed_cost_at(target: Target, engine: &str, n: usize) {
    let (store, study) = open(&target).await;
    let space = SearchSpace {
        params: vec![
            ParamSpec {
                name: "x".into(),
                dist: Distribution::Float {
                    low: -2.0,
                    high: 2.0,
                    step: None,
                    log: false,
                },
            },
            ParamSpec {
                name: "lr".into(),
                dist: Distribution::Float {
                    low: 1e-5,
                    high: 1e-1,
                    step: None,
                    log: true,
                },
            },
            ParamSpec {
                name: "n".into(),
                dist: Distribution::Int {
                    low: 0,
                    high: 10,
                    step: 2,
                    log: false,
                },
            },
            ParamSpec {
                name: "opt".into(),
                dist: Distribution::Categorical {
                    choices: vec!["adam".into(), "sgd".into(), "rmsprop".into()],
                },
            },
        ],
    };
    let mut other = Writer::new(&store, &study, daemon("other"));
    let mut i = 0;
    for _ in 0..n {
        i += 1;
        other.wide(&space, i, false).await;
    }
    for _ in 0..4 {
        i += 1;
        other.wide(&space, i, true).await;
    }
    let me = daemon("me");
    let mut feed = Feed::default();
    let at = Instant::now();
    let first = store.changes(&study, &me, &mut feed, true).await.unwrap();
    let whole = at.elapsed();
    let mut idle = Vec::new();
    let mut idle_rows = 0;
    for _ in 0..50 {
        let at = Instant::now();
        let c = store.changes(&study, &me, &mut feed, true).await.unwrap();
        idle.push(at.elapsed());
        idle_rows = c.rows;
    }
    let mut ten = Vec::new();
    let mut ten_rows = 0;
    for _ in 0..30 {
        for _ in 0..10 {
            i += 1;
            other.wide(&space, i, false).await;
        }
        let at = Instant::now();
        let c = store.changes(&study, &me, &mut feed, true).await.unwrap();
        ten.push(at.elapsed());
        ten_rows = c.rows;
    }
    println!(
        "feed_cost {engine:10} {n:>6} trials | whole study: {:>8.2} ms, {:>7} rows | nothing changed: {} ms, {} rows | 10 finished: {} ms, {} rows",
        whole.as_secs_f64() * 1000.0,
        first.rows,
        median_ms(idle),
        idle_rows,
        median_ms(ten),
        ten_rows,
    );
}

/// `cargo test --release --test feed -- --ignored --nocapture feed_cost`: the cost of one
/// read at 1k and 10k trials, on SQLite and PostgreSQL (medians and ranges of 50 and 30
/// reads).
#[test]
#[ignore = "a measurement: run it by name, see docs/benchmarks.md"]
fn feed_cost() {
    let pg = PgServer::start();
    for n in [1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        rt().block_on(feed_cost_at(sqlite_target(&dir), "sqlite", n));
        let url = pg.create_db(&format!("cost{n}"));
        rt().block_on(feed_cost_at(pg_target(&url), "postgresql", n));
    }
}
