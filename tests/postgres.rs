//! Several hosts, one study, on a real PostgreSQL server (a throwaway cluster per test, see
//! `common::PgServer`): the schema Optuna creates, Optuna reading and writing beside sweepd,
//! hosts killed and failed over, an exact shared budget, the server restarted mid-run.
//!
//! The "hosts" are daemons on this machine with distinct `SWEEPD_HOST_ID`s, each in its own
//! study directory (its own logs), all with the same `[storage] url` and study name.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Child;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);

/// A config for `url`: the default faulty_worker study with `[storage]` pointing there.
fn pg_cfg(url: &str, n_trials: u64, host_timeout: &str) -> Cfg {
    Cfg {
        name: "multi".into(),
        n_trials: Some(n_trials),
        max_par: 2,
        storage: Some(format!(
            "url = \"{url}\"\nhost_timeout = \"{host_timeout}\""
        )),
        ..Cfg::default()
    }
}

/// A host: a study dir whose daemon runs as `SWEEPD_HOST_ID=host`.
fn host(cfg: &Cfg, host: &str) -> Sweep {
    let mut sweep = Sweep::new(cfg);
    sweep.env.push(("SWEEPD_HOST_ID".into(), host.into()));
    sweep
}

/// Numbers 0..n-1 exactly once each, every trial final, no RUNNING left; the values are
/// the objective of the params (faulty_worker: sum of squares + lengths), as Optuna reads them.
fn assert_study_sound(url: &str, study: &str, n_final: usize) -> Vec<Value> {
    let d = optuna_dump(url, study);
    let trials = d["trials"].as_array().unwrap().clone();
    let numbers: Vec<i64> = trials
        .iter()
        .map(|t| t["number"].as_i64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (0..trials.len() as i64).collect::<Vec<_>>(),
        "numbers are 0..n-1"
    );
    let running: Vec<&Value> = trials.iter().filter(|t| t["state"] == "RUNNING").collect();
    assert!(running.is_empty(), "left RUNNING: {running:#?}");
    let spent = trials
        .iter()
        .filter(|t| match t["state"].as_str().unwrap() {
            "COMPLETE" | "PRUNED" => true,
            "FAIL" => t["system_attrs"].get("sweepd:retried_as").is_none(),
            _ => false,
        })
        .count();
    assert_eq!(
        spent,
        n_final,
        "the budget is exact; the trials:\n{}",
        trials_table(&trials)
    );
    for t in trials.iter().filter(|t| t["state"] == "COMPLETE") {
        let p = &t["params"];
        if t["system_attrs"].get("sweepd:daemon").is_none() {
            continue; // an Optuna process's trial, of its own objective
        }
        let expect = p["x"].as_f64().unwrap().powi(2)
            + p["lr"].as_f64().unwrap().powi(2)
            + (p["n"].as_i64().unwrap() as f64).powi(2)
            + p["opt"].as_str().unwrap().len() as f64;
        let got = t["value"].as_f64().unwrap();
        assert!(
            (got - expect).abs() <= 1e-12 * expect.abs().max(1.0),
            "trial {}: value {got} for params {p} (expected {expect})",
            t["number"]
        );
    }
    trials
}

/// One line per trial, for a failed assertion: number, state, who ran it (a host, or an Optuna
/// process), the copy it was retried as, start and end.
fn trials_table(trials: &[Value]) -> String {
    trials
        .iter()
        .map(|t| {
            let attrs = &t["system_attrs"];
            let who = attrs
                .get("sweepd:daemon")
                .map(|d| format!("host {}", d["host"].as_str().unwrap_or("?")))
                .unwrap_or_else(|| "optuna".into());
            format!(
                "{:>4} {:<8} {:<8} retried_as={} {} .. {}",
                t["number"],
                t["state"].as_str().unwrap_or("?"),
                who,
                attrs.get("sweepd:retried_as").unwrap_or(&Value::Null),
                t["datetime_start"].as_str().unwrap_or("-"),
                t["datetime_complete"].as_str().unwrap_or("-"),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What an outage the daemons waited through must leave: the study sound and exact
/// (`assert_study_sound`), each worker's runs counted once, and every trial COMPLETE: none was
/// interrupted, none found already ended by another process.
fn assert_exact_and_nothing_interrupted(url: &str, n: usize, logs: &str) {
    let trials = assert_study_sound(url, "multi", n);
    assert!(!logs.contains("already ended by another process"), "{logs}");
    assert_runs_counted_once(url);
    assert_eq!(
        trials.iter().filter(|t| t["state"] == "COMPLETE").count(),
        n,
        "every trial that ran completed, none was interrupted: {logs}"
    );
}

/// Each successful trial counted once for the worker that ran it (`sweepd_workers.trials_done`,
/// written in the finish's own commit) and named with that worker (`sweepd:worker_id`, written
/// in its start's commit when the slot's kept worker runs it, else in a commit of its own):
/// for every worker, its count equals the successful trials that name it.
fn assert_runs_counted_once(url: &str) {
    let one = |sql: &str| -> i64 {
        pg_try_column(url, sql).expect("query")[0]
            .parse()
            .expect("a count")
    };
    let unnamed = one(
        "SELECT count(*) FROM trials t WHERE t.state IN ('COMPLETE', 'PRUNED') \
         AND NOT EXISTS (SELECT 1 FROM trial_system_attributes a \
                         WHERE a.trial_id = t.trial_id AND a.key = 'sweepd:worker_id')",
    );
    assert_eq!(unnamed, 0, "successful trials without their worker");
    let miscounted = pg_try_column(
        url,
        "SELECT w.worker_id || ': ' || w.trials_done || ' counted, ' || \
                (SELECT count(*) FROM trials t JOIN trial_system_attributes a \
                   ON a.trial_id = t.trial_id AND a.key = 'sweepd:worker_id' \
                 WHERE t.state IN ('COMPLETE', 'PRUNED') \
                   AND a.value_json = CAST(w.worker_id AS TEXT)) || ' ran' \
         FROM sweepd_workers w \
         WHERE w.trials_done <> (SELECT count(*) FROM trials t JOIN trial_system_attributes a \
                   ON a.trial_id = t.trial_id AND a.key = 'sweepd:worker_id' \
                 WHERE t.state IN ('COMPLETE', 'PRUNED') \
                   AND a.value_json = CAST(w.worker_id AS TEXT))",
    )
    .expect("query");
    assert!(
        miscounted.is_empty(),
        "workers whose count of trials done is not the trials they ran: {miscounted:?}"
    );
    assert!(one("SELECT CAST(COALESCE(SUM(trials_done), 0) AS BIGINT) FROM sweepd_workers") > 0);
}

/// Database `db` with sweepd's schema and a study of two trials that one host ran: for tests
/// that call `sweepd_step` themselves.
fn study_of_two(pg: &PgServer, db: &str) -> String {
    let url = pg.create_db(db);
    let out = host(&pg_cfg(&url, 2, "60s"), "h1").run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    url
}

/// Whether a call of `sweepd_step` waits for a lock, or comes to within `within`, as
/// `pg_stat_activity` shows it on `watcher`.
async fn a_step_waits_for_a_lock(watcher: &mut sqlx::PgConnection, within: Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%sweepd_step%' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut *watcher)
        .await
        .unwrap();
        if waiting > 0 {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < LIMIT, "{what} did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn one_host_runs_a_study_that_optuna_reads_through_postgresql() {
    let pg = PgServer::start();
    let url = pg.create_db("one");
    let sweep = host(
        &pg_cfg(&url, 8, "60s").env("SWEEPD_TEST_RAISE_ON", "3"),
        "h1",
    );
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = assert_study_sound(&url, "multi", 8);
    assert_eq!(trials.iter().filter(|t| t["state"] == "FAIL").count(), 1);
    assert_runs_counted_once(&url);
    // sweepd's own commands read the same database.
    let ours = sweep.trials();
    assert_eq!(ours.len(), trials.len());
    for (a, b) in ours.iter().zip(&trials) {
        assert_eq!(a["number"], b["number"]);
        assert_eq!(a["state"], b["state"]);
        assert_eq!(a["value"], b["value"]);
        assert_eq!(a["params"], b["params"]);
    }
    let status: Value =
        serde_json::from_slice(&sweep.sweepd(&["status", "--json"]).output().unwrap().stdout)
            .unwrap();
    assert_eq!(status["finished"], 8);
    assert_eq!(status["hosts"][0]["host"], "h1");
    assert_eq!(status["hosts"][0]["daemon"]["state"], "STOPPED");
    // The view for psql users.
    assert_eq!(
        pg_column(
            &url,
            "SELECT count(*) FROM sweepd_trials WHERE state = 'COMPLETE'"
        ),
        ["7"]
    );
    trials_shows_what_optuna_wrote_beside_it(&sweep, &url);
}

/// Optuna adds to the study a PRUNED trial with a user attribute, and an out-of-memory FAIL
/// with a WAITING copy carrying the attributes sweepd's retry writes (`failed_trial`,
/// `retry_history`, `sweepd:attempts`): `trials` and `status` read them through PostgreSQL as
/// they do through SQLite (the pruned-at step, user attributes, `retry 1/2 after oom` against
/// the config's default `[retry] oom`).
fn trials_shows_what_optuna_wrote_beside_it(sweep: &Sweep, url: &str) {
    let out = std::process::Command::new(python())
        .arg("-c")
        .arg(
            "import sys, optuna\n\
             sys.path.insert(0, sys.argv[2])\n\
             from _common import storage_url\n\
             s = optuna.load_study(study_name='multi', storage=storage_url(sys.argv[1]))\n\
             t = s.ask()\n\
             t.suggest_float('x', -2.0, 2.0)\n\
             t.set_user_attr('note', 'by hand')\n\
             t.report(0.5, 3)\n\
             s.tell(t, state=optuna.trial.TrialState.PRUNED)\n\
             t = s.ask()\n\
             t.suggest_float('x', -2.0, 2.0)\n\
             s._storage.set_trial_system_attr(t._trial_id, 'sweepd:fail_kind', 'oom')\n\
             s.tell(t, state=optuna.trial.TrialState.FAIL)\n\
             s.enqueue_trial({'x': t.params['x']})\n\
             copy = s.get_trials(states=(optuna.trial.TrialState.WAITING,))[-1]\n\
             for k, v in [('failed_trial', t.number), ('retry_history', [t.number]),\n\
             \x20            ('sweepd:attempts', {'oom': 1})]:\n\
             \x20   s._storage.set_trial_system_attr(copy._trial_id, k, v)\n",
        )
        .arg(url)
        .arg(repo().join("tests/py"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let pruned = trials.iter().find(|t| t["state"] == "PRUNED").unwrap();
    assert_eq!(pruned["pruned_step"], 3, "{pruned}");
    assert_eq!(pruned["user_attrs"]["note"], "by hand", "{pruned}");
    assert!(pruned["duration_s"].is_number(), "{pruned}");
    let copy = trials.iter().find(|t| t["state"] == "WAITING").unwrap();
    assert_eq!(copy["reason"], "retry 1/2 after oom", "{copy}");
    let csv =
        String::from_utf8(sweep.sweepd(&["trials", "--csv"]).output().unwrap().stdout).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",PRUNED,"))
        .unwrap()
        .split(',')
        .collect();
    let cell = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(cell("pruned_step"), "3", "{csv}");
    assert_eq!(cell("user_attrs_note"), "by hand", "{csv}");
    // Every param of the study, though the PRUNED row has `x` alone.
    assert!(header.contains(&"params_opt"), "{csv}");
    let status: Value =
        serde_json::from_slice(&sweep.sweepd(&["status", "--json"]).output().unwrap().stdout)
            .unwrap();
    assert_eq!(status["waiting"][0]["number"], copy["number"], "{status}");
    assert_eq!(
        status["waiting"][0]["reason"], "retry 1/2 after oom",
        "{status}"
    );
}

/// The statements of a SQL script: split at each `;` that ends a line, except inside a
/// dollar-quoted string (`$tag$ … $tag$`, a function's body).
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<String> = None;
    for line in sql.split_inclusive('\n') {
        let mut rest = line;
        while let Some(at) = rest.find('$') {
            let tail = &rest[at + 1..];
            let Some(end) = tail.find('$') else { break };
            let tag = &tail[..end];
            if tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                let tag = format!("${tag}$");
                match &quote {
                    Some(open) if *open == tag => quote = None,
                    None => quote = Some(tag),
                    Some(_) => {}
                }
                rest = &tail[end + 1..];
            } else {
                rest = tail;
            }
        }
        current.push_str(line);
        if quote.is_none() && line.trim_end().ends_with(';') {
            out.push(
                std::mem::take(&mut current)
                    .trim_end()
                    .trim_end_matches(';')
                    .to_owned(),
            );
        }
    }
    out.push(current);
    out
}

/// The schema sweepd creates on an empty database is the one Optuna 5.0 creates, object for
/// object (`pg_dump --schema-only`, sweepd's own objects left out); and a study Optuna created
/// is continued by sweepd.
#[test]
fn the_schema_is_optunas_own_and_an_optuna_study_is_continued() {
    let pg = PgServer::start();
    let by_optuna = pg.create_db("by_optuna");
    let by_sweepd = pg.create_db("by_sweepd");
    let out = std::process::Command::new(python())
        .arg(repo().join("tests/py/optuna_create.py"))
        .args([by_optuna.as_str(), "multi", "minimize", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sweep = host(&pg_cfg(&by_sweepd, 2, "60s"), "h1");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let schema = |url: &str| -> Vec<String> {
        let out = std::process::Command::new(pg_bin("pg_dump"))
            .args(["--schema-only", "--no-owner", url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Statements, without comments, settings and sweepd's own objects.
        statements(&String::from_utf8_lossy(&out.stdout))
            .into_iter()
            .map(|s| {
                s.lines()
                    .filter(|l| !l.starts_with("--") && !l.starts_with('\\') && !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .filter(|s| {
                !s.is_empty()
                    && !s.contains("sweepd")
                    && !s.contains("_sqlx_migrations")
                    && !s.starts_with("SET ")
                    && !s.starts_with("SELECT pg_catalog.set_config")
            })
            .collect()
    };
    let theirs = schema(&by_optuna);
    let ours = schema(&by_sweepd);
    assert!(theirs.len() > 40, "{theirs:#?}");
    let extra: Vec<&String> = ours.iter().filter(|s| !theirs.contains(s)).collect();
    let missing: Vec<&String> = theirs.iter().filter(|s| !ours.contains(s)).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "sweepd's schema differs from Optuna's: extra {extra:#?}, missing {missing:#?}"
    );
    // pg_dump orders objects of one kind partly by creation order: compare as multisets.
    let (mut ours, mut theirs) = (ours, theirs);
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "the same statements, each as often");
    for url in [&by_optuna, &by_sweepd] {
        assert_eq!(
            pg_column(url, "SELECT version_num FROM alembic_version"),
            ["v3.2.0.a"]
        );
        assert_eq!(
            pg_column(url, "SELECT schema_version FROM version_info"),
            ["12"]
        );
    }
    // sweepd continues the study Optuna created (and adds its own tables beside).
    let sweep = host(&pg_cfg(&by_optuna, 3, "60s"), "h1");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_study_sound(&by_optuna, "multi", 3);
}

/// Three hosts on one study; one is killed with -9 mid-run and stays away longer than
/// `host_timeout`: the others fail its trials over and finish the study; the killed one comes
/// back and finds nothing to run. Optuna processes optimize the same study beside them.
///
/// The hosts' trials wait at a gate until the Optuna processes are done: an Optuna process
/// runs its own `n_trials`, which sweepd's budget cannot hold back, so one still running when
/// the hosts fill the budget takes the study past it (CI saw 62 of 60 when Optuna's start
/// came late). With the gate, every Optuna trial is final before the hosts' last starts, and
/// the budget must come out exact.
#[test]
fn three_hosts_one_killed_the_others_finish_and_it_returns_to_an_exact_study() {
    let pg = PgServer::start();
    let url = pg.create_db("three");
    const N: u64 = 60;
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("open");
    let cfg = pg_cfg(&url, N, "3s")
        .env("SWEEPD_TEST_SLEEP", "0.3")
        .env("SWEEPD_TEST_GATE", gate.to_str().unwrap());
    let hosts: Vec<Sweep> = ["a", "b", "c"].iter().map(|h| host(&cfg, h)).collect();
    let mut daemons: Vec<Child> = hosts.iter().map(|h| h.spawn_run()).collect();
    // Host c has trials RUNNING: kill it there.
    let c_running = || {
        pg_try_column(
            &url,
            "SELECT count(*) FROM trials t JOIN trial_system_attributes a \
             ON a.trial_id = t.trial_id AND a.key = 'sweepd:daemon' \
             WHERE t.state = 'RUNNING' AND a.value_json LIKE '%\"host\":\"c\"%'",
        )
        .and_then(|c| c[0].parse::<i64>().ok())
        .unwrap_or(0)
    };
    wait_until(LIMIT, "host c running trials", || c_running() > 0);
    // Optuna optimizing the same study beside them, two processes, numbering their trials
    // among the hosts' RUNNING ones.
    let optuna: Vec<Child> = (0..2)
        .map(|_| {
            std::process::Command::new(python())
                .arg(repo().join("tests/py/optuna_optimize.py"))
                .args([url.as_str(), "multi", "5", "0.1"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut o in optuna {
        let s = wait_exit(&mut o, "an Optuna process");
        let out = o.wait_with_output().unwrap();
        assert!(
            s.success(),
            "optuna: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let c_workers: Vec<i64> = pg_column(
        &url,
        "SELECT pid FROM sweepd_workers WHERE host = 'c' AND state <> 'EXITED' AND pid IS NOT NULL",
    )
    .iter()
    .map(|p| p.parse().unwrap())
    .collect();
    signal(&daemons[2], nix::sys::signal::Signal::SIGKILL);
    let _ = daemons[2].wait();
    std::fs::write(&gate, b"").unwrap();
    // Its workers die with their channel (the daemon's end is gone); none may linger.
    wait_until(LIMIT, "host c's workers gone", || {
        c_workers.iter().all(|p| !alive(*p as i32))
    });
    // The survivors fail c over after host_timeout and finish the study.
    for (i, d) in daemons.iter_mut().enumerate().take(2) {
        let s = wait_exit(d, "a surviving host");
        assert!(s.success(), "host {i}: {}", hosts[i].daemon_stderr());
    }
    let failed_over = hosts[0].daemon_stderr() + &hosts[1].daemon_stderr();
    assert!(
        failed_over.contains("host c sent no heartbeat"),
        "{failed_over}"
    );
    // c comes back: nothing to run, nothing run twice.
    let out = hosts[2].run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = assert_study_sound(&url, "multi", N as usize);
    let interrupted: Vec<&Value> = trials.iter().filter(|t| t["state"] == "FAIL").collect();
    assert!(!interrupted.is_empty(), "host c's trials were failed over");
    for t in &interrupted {
        let copy = t["system_attrs"]["sweepd:retried_as"].as_i64().unwrap();
        let copy = &trials[copy as usize];
        assert_eq!(copy["params"], t["params"], "the copy has the same params");
        assert_ne!(copy["state"], "WAITING");
    }
    // Optuna's heartbeats were kept for sweepd's running trials.
    let beats: i64 = pg_column(&url, "SELECT count(*) FROM trial_heartbeats")[0]
        .parse()
        .unwrap();
    assert!(beats > 0);
    // Hosts sampling at once draw different params (a seeded sampler keyed by the number each
    // expects would otherwise give every host the same proposals), and no trial's params
    // completed twice.
    let complete: BTreeSet<String> = trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE")
        .map(|t| t["params"].to_string())
        .collect();
    assert_eq!(
        complete.len(),
        trials.iter().filter(|t| t["state"] == "COMPLETE").count()
    );
}

/// The PostgreSQL server restarted mid-run under two hosts: they stop starting trials, keep
/// what their workers finish, reconnect, and write it then; nothing lost, nothing twice. The
/// restart kills connections in the middle of statements and of transactions (57P01, then
/// closed sockets): each operation is run again whole once the server is back.
#[test]
fn the_server_restarts_mid_run_and_nothing_is_lost_or_written_twice() {
    let pg = PgServer::start();
    let url = pg.create_db("restart");
    const N: u64 = 30;
    let cfg = pg_cfg(&url, N, "30s").env("SWEEPD_TEST_SLEEP", "0.5");
    let hosts: Vec<Sweep> = ["a", "b"].iter().map(|h| host(&cfg, h)).collect();
    let mut daemons: Vec<Child> = hosts.iter().map(|h| h.spawn_run()).collect();
    let complete = || {
        pg_try_column(&url, "SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
            .and_then(|c| c[0].parse::<u64>().ok())
            .unwrap_or(0)
    };
    wait_until(LIMIT, "a few trials done", || complete() >= 6);
    pg.stop();
    // Trials running now finish while the server is down (0.5 s each). Longer than the
    // store's wait for a connection (5 s), so the daemons go through their reconnect path, and
    // shorter than host_timeout.
    std::thread::sleep(Duration::from_secs(9));
    for (i, d) in daemons.iter_mut().enumerate() {
        assert!(
            d.try_wait().unwrap().is_none(),
            "host {i} exited during the outage: {}",
            hosts[i].daemon_stderr()
        );
    }
    pg.restart();
    for (i, d) in daemons.iter_mut().enumerate() {
        let s = wait_exit(d, "a host");
        assert!(s.success(), "host {i}: {}", hosts[i].daemon_stderr());
    }
    let logs = hosts[0].daemon_stderr() + &hosts[1].daemon_stderr();
    assert!(logs.contains("cannot be reached"), "{logs}");
    assert!(logs.contains("is back after"), "{logs}");
    let trials = assert_study_sound(&url, "multi", N as usize);
    // No host was failed over by another for the outage they shared.
    assert!(!logs.contains("failed over"), "{logs}");
    // `status` names the outage each host rode out.
    let status: Value = serde_json::from_slice(
        &hosts[0]
            .sweepd(&["status", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for h in status["hosts"].as_array().unwrap() {
        let detail = h["daemon"]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("the database could not be reached for"),
            "{status:#}"
        );
    }
    assert_eq!(
        trials.iter().filter(|t| t["state"] == "COMPLETE").count(),
        N as usize,
        "every trial that ran completed, none was interrupted"
    );
}

/// Two hosts whose connections lose the answer to every third commit (a `COMMIT`, or a call of
/// `sweepd_step`, through a proxy that lets the commit reach the server, then closes both
/// sockets): each write whose commit was
/// acknowledged or not is run again and takes effect once. Starts are not duplicated (no trial
/// left RUNNING, numbers 0..n-1), finishes are not mistaken for another process's (the budget
/// is exact, no result dropped as "already ended"), nothing is interrupted.
#[test]
fn a_commit_whose_acknowledgement_is_lost_takes_effect_once() {
    let pg = PgServer::start();
    let direct = pg.create_db("acks");
    let proxy = PgProxy::start(pg.port);
    let url = proxy.url("acks");
    // With 40 trials (about a second of them) and 4 rounds, a clean-clone run once counted 2
    // deadlocks: the daemon may end before the rounds do, and a round may close no cycle (a
    // step that waits while finishing nothing holds no trial's row). So more trials, and up to
    // 8 rounds for the 3 deadlocks asserted below.
    const N: u64 = 200;
    let cfg = pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.05");
    let hosts: Vec<Sweep> = ["a", "b"].iter().map(|h| host(&cfg, h)).collect();
    let mut daemons: Vec<Child> = hosts.iter().map(|h| h.spawn_run()).collect();
    wait_until(LIMIT, "the first trials done", || {
        pg_try_column(
            &direct,
            "SELECT count(*) FROM trials WHERE state = 'COMPLETE'",
        )
        .and_then(|c| c[0].parse::<u64>().ok())
        .is_some_and(|n| n >= 2)
    });
    proxy.lose_commit_acks(3);
    for (i, d) in daemons.iter_mut().enumerate() {
        let s = wait_exit(d, "a host");
        assert!(s.success(), "host {i}: {}", hosts[i].daemon_stderr());
    }
    let logs = hosts[0].daemon_stderr() + &hosts[1].daemon_stderr();
    assert!(
        proxy.lost() >= 10,
        "only {} acknowledgements lost",
        proxy.lost()
    );
    assert_exact_and_nothing_interrupted(&direct, N as usize, &logs);
}

/// The server ends sweepd's sessions again and again while two hosts run (an administrator's
/// `pg_terminate_backend`, 57P01, as a restart does to every session): statements and
/// transactions cut off in the middle are run again whole on a fresh connection, and the
/// study ends exact, with nothing interrupted.
#[test]
fn sessions_killed_mid_transaction_are_run_again_whole() {
    let pg = PgServer::start();
    let url = pg.create_db("killed");
    const N: u64 = 40;
    let cfg = pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.05");
    let hosts: Vec<Sweep> = ["a", "b"].iter().map(|h| host(&cfg, h)).collect();
    let mut daemons: Vec<Child> = hosts.iter().map(|h| h.spawn_run()).collect();
    wait_until(LIMIT, "the first trial done", || {
        pg_try_column(&url, "SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
            .and_then(|c| c[0].parse::<u64>().ok())
            .is_some_and(|n| n >= 1)
    });
    let mut killed = 0usize;
    while daemons.iter_mut().any(|d| d.try_wait().unwrap().is_none()) {
        killed += pg_try_column(
            &url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'sweepd' AND pid <> pg_backend_pid()",
        )
        .map_or(0, |v| v.len());
        std::thread::sleep(Duration::from_millis(30));
    }
    for (i, d) in daemons.iter_mut().enumerate() {
        let s = wait_exit(d, "a host");
        assert!(s.success(), "host {i}: {}", hosts[i].daemon_stderr());
    }
    assert!(killed >= 10, "only {killed} sessions ended");
    let logs = hosts[0].daemon_stderr() + &hosts[1].daemon_stderr();
    assert_exact_and_nothing_interrupted(&url, N as usize, &logs);
}

/// Every session of the host is ended once while it runs (the server stays up): each pooled
/// connection fails at its next use and the next one answers, with no outage in the logs. The
/// pool hands its connections out without pinging them first, so after such an event as many
/// may fail in a row as the pool holds; one retry only would have called the second failure an
/// outage and waited.
#[test]
fn pooled_connections_the_server_ended_are_replaced_without_an_outage() {
    let pg = PgServer::start();
    let url = pg.create_db("stale");
    const N: u64 = 30;
    let cfg = pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.1");
    let sweep = host(&cfg, "a");
    let mut daemon = sweep.spawn_run();
    let done = || {
        pg_try_column(&url, "SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
            .and_then(|c| c[0].parse::<u64>().ok())
            .unwrap_or(0)
    };
    wait_until(LIMIT, "a few trials done", || done() >= 4);
    let sessions = || {
        pg_try_column(
            &url,
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'sweepd'",
        )
        .map_or(0, |v| v.len())
    };
    wait_until(LIMIT, "the pool holding several connections", || {
        sessions() >= 2
    });
    let ended = pg_column(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'sweepd' AND pid <> pg_backend_pid()",
    );
    assert!(ended.len() >= 2, "{ended:?}");
    let s = wait_exit(&mut daemon, "the host");
    let logs = sweep.daemon_stderr();
    assert!(s.success(), "{logs}");
    assert!(!logs.contains("cannot be reached"), "{logs}");
    assert_exact_and_nothing_interrupted(&url, N as usize, &logs);
}

/// Regression: the tally's read of the trials created since the last one (`sweepd_step`'s
/// p_seen) walked every trial of the study at each call once the session had planned it while
/// the study was small, and kept that plan: in a run of 10k trials the last thousand went at
/// 0.6 of the first's pace. Counted in the server's buffers, not timed: after 50k more trials,
/// a call in the session that planned it touches a few pages, not the study's hundreds.
#[test]
fn the_step_reads_new_trials_without_walking_a_study_that_grew() {
    use sqlx::{Connection, Row};
    let pg = PgServer::start();
    let url = study_of_two(&pg, "grew");
    let (hit, plan) = block_on(async {
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        // As in a daemon's session before autovacuum's first ANALYZE (which would plan again).
        sqlx::raw_sql("ALTER TABLE trials SET (autovacuum_enabled = false)")
            .execute(&mut c)
            .await
            .unwrap();
        let study: i32 = sqlx::query_scalar("SELECT study_id FROM studies")
            .fetch_one(&mut c)
            .await
            .unwrap();
        let seen = || sqlx::query_scalar::<_, i32>("SELECT max(trial_id) FROM trials");
        // A start with no room in the budget (p_budget 0): the tally is read, nothing written.
        let call = |seq: i32, seen: i32| {
            format!(
                "SELECT * FROM sweepd_step({study}, 'test', {seq}, 1, now()::timestamp, \
                 NULL, NULL, NULL, NULL, NULL, NULL, true, NULL, 0, 0, {seen}, '{{}}', \
                 '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', NULL)"
            )
        };
        let small = seen().fetch_one(&mut c).await.unwrap();
        for seq in 1..=6 {
            let rows = sqlx::raw_sql(&call(seq, small))
                .fetch_all(&mut c)
                .await
                .unwrap();
            assert_eq!(rows.last().unwrap().get::<String, _>("r_state"), "noroom");
        }
        sqlx::raw_sql(&format!(
            "INSERT INTO trials (number, study_id, state, datetime_start) \
             SELECT 2 + g, {study}, 'COMPLETE', now() FROM generate_series(0, 49999) g"
        ))
        .execute(&mut c)
        .await
        .unwrap();
        let grown = seen().fetch_one(&mut c).await.unwrap();
        let plan: Vec<String> = sqlx::raw_sql(&format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) {}",
            call(7, grown)
        ))
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        // The function's node comes first: its buffers count its statements'.
        let buffers = plan
            .iter()
            .find(|l| l.contains("Buffers:"))
            .expect("buffers");
        let count = |key: &str| -> u64 {
            buffers
                .split(key)
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .map_or(0, |n| n.parse().unwrap())
        };
        (count("hit=") + count("read="), plan.join("\n"))
    });
    // 50k trials take some 400 pages of table and 150 of the study's index.
    assert!(hit < 50, "{hit} buffers:\n{plan}");
}

/// `sweepd_step` writes a trial's COMPLETE finish before it takes the study's row lock
/// (migration 0007): every writer of the study waits for that lock from its `SELECT … FOR
/// UPDATE` to its commit, so what the function does before it is off the one line all hosts
/// stand in. Pinned here by the lock the finish holds while the call waits for the study's: a
/// session holding the study's lock cannot take the trial's row (0006's function, lock first,
/// had not touched it yet).
#[test]
fn a_steps_finish_is_written_before_it_waits_for_the_study_lock() {
    use sqlx::{Connection, Row};
    let pg = PgServer::start();
    let url = study_of_two(&pg, "early");
    block_on(async {
        let connect = || sqlx::PgConnection::connect(&url);
        let (mut holder, mut watcher) = (connect().await.unwrap(), connect().await.unwrap());
        let study: i32 = sqlx::query_scalar("SELECT study_id FROM studies")
            .fetch_one(&mut holder)
            .await
            .unwrap();
        let trial: i32 = sqlx::query_scalar(
            "INSERT INTO trials (number, study_id, state, datetime_start) \
             VALUES (2, $1, 'RUNNING', now()) RETURNING trial_id",
        )
        .bind(study)
        .fetch_one(&mut holder)
        .await
        .unwrap();
        sqlx::raw_sql("BEGIN; SELECT study_id FROM studies FOR UPDATE")
            .execute(&mut holder)
            .await
            .unwrap();
        // A finish alone, of value 0.5, sent while the study's lock is held.
        let mut stepper = connect().await.unwrap();
        let sql = format!(
            "SELECT * FROM sweepd_step({study}, 'test', 1, 1, now()::timestamp, {trial}, \
             '{{0.5}}', '{{FINITE}}', '{{}}', '{{}}', NULL, false, NULL, NULL, 0, 0, '{{}}', \
             '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', NULL)"
        );
        let step = sqlx::raw_sql(&sql).fetch_all(&mut stepper);
        let check = async {
            assert!(
                a_step_waits_for_a_lock(&mut watcher, LIMIT).await,
                "the call never waited for the study's lock"
            );
            let taken = sqlx::query("SELECT 1 FROM trials WHERE trial_id = $1 FOR UPDATE NOWAIT")
                .bind(trial)
                .execute(&mut holder)
                .await;
            let code = match &taken {
                Err(sqlx::Error::Database(d)) => d.code().map(|c| c.into_owned()),
                _ => None,
            };
            sqlx::raw_sql("ROLLBACK")
                .execute(&mut holder)
                .await
                .unwrap();
            assert_eq!(
                code.as_deref(),
                Some("55P03"),
                "the trial's row was free while the call waited for the study's lock: {taken:?}"
            );
        };
        let (rows, ()) = tokio::join!(step, check);
        let rows = rows.unwrap();
        let finish = rows
            .iter()
            .find(|r| r.get::<String, _>("r_kind") == "finish")
            .expect("a finish row");
        assert_eq!(finish.get::<Option<i64>, _>("r_number"), Some(2));
        let (state, value): (String, f64) = sqlx::query_as(
            "SELECT CAST(t.state AS TEXT), v.value FROM trials t \
             JOIN trial_values v ON v.trial_id = t.trial_id WHERE t.trial_id = $1",
        )
        .bind(trial)
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        assert_eq!((state.as_str(), value), ("COMPLETE", 0.5));
    });
}

/// A step holds its trial's row while it waits for the study's lock, so a writer that holds
/// that lock and then takes the study's RUNNING trials (a host failing this one's trials over
/// while it still runs) closes a cycle, which the server breaks by rolling one of them back
/// (SQLSTATE 40P01). When that one is the step, the daemon runs it again (`store::outage`):
/// the study ends exact, nothing interrupted, where the error used to end the daemon.
#[test]
fn a_step_rolled_back_to_break_a_deadlock_is_run_again() {
    use sqlx::Connection;
    let pg = PgServer::start();
    let url = pg.create_db("deadlock");
    // The server looks for a cycle after a session has waited this long: sooner in the
    // daemon's sessions than in the test's (10 s, below), so the step is the one rolled back.
    pg_exec(
        &url,
        "ALTER DATABASE deadlock SET deadlock_timeout = '200ms'",
    );
    const N: u64 = 60;
    // Trials of 0.2 s leave the rounds below more of the daemon's run: with 0.05 s, one
    // full-suite run counted 2 deadlocks of the 3 asserted. Not every round makes one (the
    // step may hold no RUNNING trial's row when the failover's lock comes), and with a fixed
    // 8 rounds another run counted 1: the rounds go on until the server has broken 3, or the
    // daemon is done.
    let cfg = pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.2");
    let h = host(&cfg, "a");
    let mut daemon = h.spawn_run();
    // The deadlocks the server has broken in this database so far.
    const DEADLOCKS: &str = "SELECT deadlocks FROM pg_stat_database WHERE datname = 'deadlock'";
    let deadlocks = || -> i64 { pg_column(&url, DEADLOCKS)[0].parse().unwrap() };
    wait_until(LIMIT, "the first trial done", || {
        pg_try_column(&url, "SELECT count(*) FROM trials WHERE state = 'COMPLETE'")
            .and_then(|c| c[0].parse::<u64>().ok())
            .is_some_and(|n| n >= 1)
    });
    block_on(async {
        let connect = || sqlx::PgConnection::connect(&url);
        let (mut holder, mut watcher) = (connect().await.unwrap(), connect().await.unwrap());
        sqlx::raw_sql("SET deadlock_timeout = '10s'")
            .execute(&mut holder)
            .await
            .unwrap();
        let mut rounds = 0;
        loop {
            // On the watcher: `deadlocks` blocks on a runtime of its own.
            let broken: i64 = sqlx::query_scalar(DEADLOCKS)
                .fetch_one(&mut watcher)
                .await
                .unwrap();
            if broken >= 3 || rounds >= 40 || daemon.try_wait().unwrap().is_some() {
                break;
            }
            sqlx::raw_sql("BEGIN; SELECT study_id FROM studies FOR UPDATE")
                .execute(&mut holder)
                .await
                .unwrap();
            if a_step_waits_for_a_lock(&mut watcher, Duration::from_secs(5)).await {
                // What a failover takes next: the RUNNING trials, one of which the waiting
                // step has finished. This waits until the server rolls the step back.
                sqlx::query("SELECT trial_id FROM trials WHERE state = 'RUNNING' FOR UPDATE")
                    .execute(&mut holder)
                    .await
                    .unwrap();
                rounds += 1;
            }
            sqlx::raw_sql("ROLLBACK")
                .execute(&mut holder)
                .await
                .unwrap();
        }
    });
    let status = wait_exit(&mut daemon, "the host");
    let logs = h.daemon_stderr();
    assert!(status.success(), "{logs}");
    assert!(deadlocks() >= 3, "{} deadlocks broken", deadlocks());
    assert_exact_and_nothing_interrupted(&url, N as usize, &logs);
}

/// Regression: a host's read of the other hosts' new trials (`store::feed`, a few times a
/// second, before the sampler proposes) took their params by a scan of the whole `trial_params`
/// table once it held a few thousand rows: with PostgreSQL's default `random_page_cost`, the
/// planner prices 40 lookups of an index above a scan of 100 pages that sit in memory anyway.
/// It cost 5 ms per read at 4 hosts, on the path of the next start. Counted in the server's
/// statistics, not timed: two hosts share 1200 trials, and the hosts' scans of the table read
/// what scans of a small table read, not its rows at every read.
#[test]
fn hosts_read_each_others_new_params_by_index_not_by_scanning_the_table() {
    let pg = PgServer::start();
    let url = pg.create_db("scan");
    const N: u64 = 1200;
    let cfg = pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.005");
    let hosts: Vec<Sweep> = ["a", "b"].iter().map(|h| host(&cfg, h)).collect();
    let mut daemons: Vec<Child> = hosts.iter().map(|h| h.spawn_run()).collect();
    for (d, h) in daemons.iter_mut().zip(&hosts) {
        let s = wait_exit(d, "a host");
        assert!(s.success(), "{}", h.daemon_stderr());
    }
    let stat = |col: &str| -> u64 {
        pg_column(
            &url,
            &format!("SELECT {col} FROM pg_stat_user_tables WHERE relname = 'trial_params'"),
        )[0]
        .parse()
        .unwrap()
    };
    // The statistics are sent when a session ends or goes idle: wait for the index's count.
    wait_until(LIMIT, "the reads counted", || stat("idx_scan") > 0);
    let (seq, rows, idx) = (stat("seq_scan"), stat("seq_tup_read"), stat("idx_scan"));
    // 4 params a trial: some 10k rows, where a scan at every read took 115k.
    assert!(
        rows <= 5 * 4 * N,
        "{seq} scans of trial_params read {rows} rows (and {idx} reads by index)"
    );
    assert_study_sound(&url, "multi", N as usize);
}

/// A trial another process enqueues (Optuna's `enqueue_trial`) while a host runs is claimed
/// and run by that host with the params given.
#[test]
fn a_trial_enqueued_by_optuna_mid_run_is_run_by_the_host() {
    let pg = PgServer::start();
    let url = pg.create_db("enqueued");
    const N: u64 = 40;
    let sweep = host(
        &pg_cfg(&url, N, "60s").env("SWEEPD_TEST_SLEEP", "0.2"),
        "h1",
    );
    // Mid-run: once 4 trials are done. The script imports Optuna before the daemon starts
    // (the import can take longer than the whole run), watches the trials through its own
    // connection (Optuna's storage would create the tables it finds missing, racing the
    // daemon's migrations), then enqueues through Optuna.
    let mut script = std::process::Command::new(python())
        .arg("-c")
        .arg(
            "import sys, time, optuna, psycopg2\n\
             sys.path.insert(0, sys.argv[2])\n\
             from _common import storage_url\n\
             print('ready', flush=True)\n\
             deadline = time.monotonic() + 60\n\
             c = psycopg2.connect(sys.argv[1])\n\
             c.autocommit = True\n\
             done = 0\n\
             while done < 4:\n\
             \x20   assert time.monotonic() < deadline, 'no 4 trials done in 60 s'\n\
             \x20   time.sleep(0.005)\n\
             \x20   try:\n\
             \x20       with c.cursor() as q:\n\
             \x20           q.execute(\"SELECT count(*) FROM trials WHERE state = 'COMPLETE'\")\n\
             \x20           done = q.fetchone()[0]\n\
             \x20   except psycopg2.Error:\n\
             \x20       pass\n\
             assert done <= 20, 'the run got past half its budget before the enqueue'\n\
             s = optuna.load_study(study_name='multi', storage=storage_url(sys.argv[1]))\n\
             s.enqueue_trial({'x': 1.25, 'lr': 0.0625, 'n': 6, 'opt': 'sgd'})\n",
        )
        .arg(&url)
        .arg(repo().join("tests/py"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(script.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    let mut daemon = sweep.spawn_run();
    let out = script.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "enqueue: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = wait_exit(&mut daemon, "the host");
    assert!(s.success(), "{}", sweep.daemon_stderr());
    let trials = assert_study_sound(&url, "multi", N as usize);
    let enqueued: Vec<&Value> = trials
        .iter()
        .filter(|t| t["params"]["x"] == 1.25 && t["params"]["opt"] == "sgd")
        .collect();
    assert_eq!(enqueued.len(), 1, "{trials:#?}");
    assert_eq!(enqueued[0]["state"], "COMPLETE", "{:#?}", enqueued[0]);
    assert!(enqueued[0]["system_attrs"].get("sweepd:daemon").is_some());
    assert_runs_counted_once(&url);
}

/// optuna-dashboard (its own server, `optuna_dashboard.run_server`, over the PostgreSQL URL)
/// lists the study sweepd ran and shows every trial as Optuna reads it: numbers, states,
/// values, params, and the best trial.
#[test]
fn optuna_dashboard_reads_the_study_through_postgresql() {
    let pg = PgServer::start();
    let url = pg.create_db("dash");
    let sweep = host(
        &pg_cfg(&url, 6, "60s").env("SWEEPD_TEST_RAISE_ON", "2"),
        "h1",
    );
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = assert_study_sound(&url, "multi", 6);
    let out = std::process::Command::new(python())
        .arg(repo().join("tests/py/dashboard_read.py"))
        .args([url.as_str(), "multi"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dashboard_read: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let api: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let summary = &api["summary"];
    assert_eq!(
        summary["directions"],
        serde_json::json!(["minimize"]),
        "{summary}"
    );
    let shown = api["detail"]["trials"].as_array().unwrap();
    assert_eq!(shown.len(), trials.len(), "{api}");
    for (d, t) in shown.iter().zip(&trials) {
        assert_eq!(d["number"], t["number"], "{d}");
        assert_eq!(
            d["state"].as_str().unwrap().to_uppercase(),
            t["state"].as_str().unwrap(),
            "{d}"
        );
        if t["state"] == "COMPLETE" {
            assert_eq!(d["values"], serde_json::json!([t["value"]]), "{d}");
        }
        for p in d["params"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            let theirs = &t["params"][name];
            let shown = &p["param_external_value"];
            // The dashboard shows values as Python's str() of them.
            let same = match (shown.as_str(), theirs) {
                (Some(s), Value::Number(n)) => s.parse::<f64>().ok() == n.as_f64(),
                (Some(s), Value::String(t)) => s == t,
                _ => shown == theirs,
            };
            assert!(
                same,
                "trial {} param {name}: dashboard {shown}, Optuna {theirs}",
                t["number"]
            );
        }
    }
    let best = trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE")
        .min_by(|a, b| {
            a["value"]
                .as_f64()
                .partial_cmp(&b["value"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(
        api["detail"]["best_trials"][0]["number"], best["number"],
        "{api}"
    );
}

/// One host's link to the server is cut (through a proxy: nothing passes either way) for
/// longer than `host_timeout` while it has trials running. The other host fails it over (the
/// server ends the cut-off host's open transaction, which held the study's row lock, once it
/// has sat idle for 10 s) and goes on; when the link is mended, the cut-off host learns that
/// it was failed over, takes its row back and finishes with the other: the study is exact,
/// numbered 0..n-1, nothing left RUNNING, and no trial's params completed twice.
#[test]
fn a_host_cut_off_is_failed_over_and_rejoins_when_its_link_is_mended() {
    let pg = PgServer::start();
    let url = pg.create_db("cut");
    let proxy = PgProxy::start(pg.port);
    const N: u64 = 40;
    let cfg = pg_cfg(&url, N, "3s").env("SWEEPD_TEST_SLEEP", "0.3");
    let a = host(&cfg, "a");
    let b = host(
        &pg_cfg(&proxy.url("cut"), N, "3s").env("SWEEPD_TEST_SLEEP", "0.3"),
        "b",
    );
    let mut daemons = [a.spawn_run(), b.spawn_run()];
    let b_running = || {
        pg_try_column(
            &url,
            "SELECT count(*) FROM trials t JOIN trial_system_attributes x \
             ON x.trial_id = t.trial_id AND x.key = 'sweepd:daemon' \
             WHERE t.state = 'RUNNING' AND x.value_json LIKE '%\"host\":\"b\"%'",
        )
        .and_then(|c| c[0].parse::<i64>().ok())
        .unwrap_or(0)
    };
    wait_until(LIMIT, "host b running trials", || b_running() > 0);
    proxy.cut(true);
    wait_until(LIMIT, "host b failed over", || {
        pg_try_column(&url, "SELECT state FROM sweepd_daemon WHERE host = 'b'")
            .is_some_and(|s| s == ["GONE"])
    });
    proxy.cut(false);
    for (d, s) in daemons.iter_mut().zip([&a, &b]) {
        let status = wait_exit(d, "a host");
        assert!(status.success(), "{}", s.daemon_stderr());
    }
    let (la, lb) = (a.daemon_stderr(), b.daemon_stderr());
    assert!(la.contains("host b sent no heartbeat"), "{la}");
    assert!(lb.contains("daemon row was taken"), "{lb}");
    let trials = assert_study_sound(&url, "multi", N as usize);
    let complete: BTreeSet<String> = trials
        .iter()
        .filter(|t| t["state"] == "COMPLETE")
        .map(|t| t["params"].to_string())
        .collect();
    assert_eq!(
        complete.len(),
        trials.iter().filter(|t| t["state"] == "COMPLETE").count(),
        "a trial's params completed twice"
    );
}
