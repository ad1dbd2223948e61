//! `sweepd status`: the study at a glance, read from the database alone (so it works while `run`
//! goes and after it): its daemons or hosts, progress against the budget, the best trial or the
//! Pareto front, running trials, live workers and GPUs. Read once into a [`Status`], then
//! rendered as text, JSON or CSV.

use super::args::{Output, StudyArg};
use super::budgets::Budgets;
use super::csv;
use super::error::CliError;
use super::liveness::{gone_text, liveness, Here, Liveness};
use super::open::{open_study, Opened};
use super::reasons::{self, Reasons};
use super::render::{gpus_table, objectives_text, print_json};
use crate::store::WorkerView;
use crate::store::{time, Candidate, DaemonView, Engine, GpuRow, HostView, Study, TrialView};
use crate::study::{Counts, DaemonState, TrialState};
use crate::supervisor;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Reads the study `arg` names and prints its status as `output` says.
pub(super) async fn status(arg: &StudyArg, output: Output) -> Result<(), CliError> {
    let s = Status::read(arg).await?;
    match output {
        Output::Csv => csv::status(
            &s.study,
            &s.path,
            &s.counts,
            s.n_trials,
            s.best.as_ref(),
            s.daemon(),
            |d| s.alive(d),
        ),
        Output::Json => print_json(&s.json()),
        Output::Text => print!("{}", s.text()),
    }
    Ok(())
}

/// Everything `status` shows, as the database had it.
struct Status {
    study: Study,
    /// The database file, or the PostgreSQL URL without its password.
    path: PathBuf,
    /// The budget, when the study was named by its config.
    n_trials: Option<u64>,
    counts: Counts,
    running: Vec<TrialView>,
    best: Option<TrialView>,
    /// A study with several objectives: its Pareto front.
    front: Option<Vec<Candidate>>,
    workers: Vec<WorkerView>,
    hosts: Vec<HostView>,
    /// PostgreSQL: the study may run on several hosts, each shown.
    several_hosts: bool,
    /// A daemon whose heartbeat is older than this is gone.
    gone_after: Duration,
    /// Each host's daemon as [`liveness`] found it (a host not in it: by its heartbeat).
    seen: HashMap<String, Liveness>,
    gpus: Vec<GpuRow>,
    /// The limits beside `n_trials` the config sets, and what was spent of them.
    budgets: Option<Budgets>,
    /// WAITING trials a live daemon says why it holds, then retry copies (at most
    /// [`WAITING_SHOWN`]), with their reasons, and its candidates not numbered yet.
    waiting: Vec<TrialView>,
    unnumbered: Vec<String>,
}

/// The most WAITING trials `status` lists.
const WAITING_SHOWN: usize = 20;

impl Status {
    async fn read(arg: &StudyArg) -> Result<Status, CliError> {
        let Opened {
            store,
            study,
            config,
            path,
        } = open_study(arg).await?;
        let counts = store.counts(&study).await?;
        let mut running = store
            .trials(&study, Some(TrialState::Running), None)
            .await?;
        let best = store.best(&study).await?;
        let front = if study.is_multi_objective() {
            let front = store.best_trials(&study).await?;
            Some(front.into_iter().map(|t| t.0).collect())
        } else {
            None
        };
        // A file only Optuna has written: no daemon ever ran it, so no workers, hosts, GPUs or
        // budgets spent.
        let ours = store.has_sweepd_tables().await?;
        let (workers, hosts, gpus, budgets) = if ours {
            (
                store.live_workers(&study).await?,
                store.hosts(&study).await?,
                store.gpus(&study).await?,
                Budgets::read(&store, &study, config.as_ref()).await?,
            )
        } else {
            Default::default()
        };
        let several_hosts = store.engine() == Engine::Postgres;
        let gone_after = reasons::gone_after(&store, config.as_ref());
        let here = Here::read();
        let seen = hosts
            .iter()
            .map(|h| {
                let l = liveness(&h.daemon, &here, gone_after, supervisor::pid_runs);
                (h.daemon.host.clone(), l)
            })
            .collect();
        let reasons = if ours {
            Reasons::read(&store, &study, &hosts, gone_after, config.as_ref()).await?
        } else {
            Reasons::default()
        };
        reasons.fill(&mut running);
        let mut waiting = Vec::new();
        for id in reasons.trial_ids(WAITING_SHOWN) {
            let t = store.trial(&study, id).await?;
            if t.state == "WAITING" {
                waiting.push(t);
            }
        }
        reasons.fill(&mut waiting);
        Ok(Status {
            n_trials: config.as_ref().and_then(|c| c.study.n_trials),
            study,
            path,
            counts,
            running,
            best,
            front,
            workers,
            hosts,
            several_hosts,
            gone_after,
            seen,
            gpus,
            budgets,
            waiting,
            unnumbered: reasons.unnumbered(),
        })
    }

    /// How long the live daemon has run (the time its `timeout` counts), where one runs.
    fn ran(&self) -> Option<Duration> {
        let d = self.daemon().filter(|d| self.alive(d))?;
        time::age(&d.started_at)
    }

    /// How a daemon is: as [`liveness`] found it, else by its state and heartbeat.
    fn liveness(&self, d: &DaemonView) -> Liveness {
        self.seen.get(&d.host).copied().unwrap_or_else(|| {
            if matches!(d.state, DaemonState::Stopped | DaemonState::Gone) {
                Liveness::Stopped
            } else if supervisor::heartbeat_fresh(d.age_s, self.gone_after) {
                Liveness::Runs
            } else {
                Liveness::Silent
            }
        })
    }

    /// Whether a daemon runs.
    fn alive(&self, d: &DaemonView) -> bool {
        self.liveness(d).runs()
    }

    /// Seconds a running trial has run: until now while its daemon runs, else until that
    /// daemon's last heartbeat (a dead daemon's trial runs no more).
    fn elapsed(&self, t: &TrialView) -> Option<f64> {
        let owner = self
            .hosts
            .iter()
            .find(|h| h.running.contains(&t.trial_id))
            .map(|h| &h.daemon)
            .or_else(|| self.daemon());
        match owner.filter(|d| !self.alive(d)) {
            Some(d) => {
                let start = time::parse(t.datetime_start.as_deref()?)?;
                let end = time::parse(&d.heartbeat_at)?;
                Some(((end - start).num_milliseconds().max(0) as f64) / 1000.0)
            }
            None => elapsed(t),
        }
    }

    /// A worker as `status` shows it: BUSY with the trial it runs, STALE where its daemon
    /// does not run (whatever its row says), else its row's state; and the trial.
    fn worker_shown(&self, w: &WorkerView) -> (String, Option<i64>) {
        let daemon = self.hosts.iter().find(|h| h.daemon.host == w.host);
        let trial = self
            .running
            .iter()
            .find(|t| t.worker_id == Some(w.worker_id))
            .map(|t| t.number);
        let shown = match (daemon.map(|h| self.liveness(&h.daemon)), trial) {
            (Some(l), _) if !l.runs() => "STALE".to_owned(),
            (_, Some(_)) => "BUSY".to_owned(),
            _ => w.state.to_string(),
        };
        (shown, trial)
    }

    /// The row `daemon` shows: the live one, else the latest (one host: the only one).
    fn daemon(&self) -> Option<&DaemonView> {
        let daemons = || self.hosts.iter().map(|h| &h.daemon);
        daemons()
            .filter(|d| self.alive(d))
            .chain(daemons().rev())
            .next()
    }

    /// Per objective of a study with several: (name, direction, best value on the front, its
    /// trial).
    fn front_bests(&self) -> Option<Vec<Value>> {
        let front = self.front.as_ref()?;
        let study = &self.study;
        let bests = study.directions.iter().enumerate().map(|(i, d)| {
            let best = front
                .iter()
                .filter_map(|c| Some((c.number, *c.values.get(i)?)))
                .fold(None::<(i64, f64)>, |b, (n, v)| match b {
                    Some((_, bv)) if !d.better(v, bv) => b,
                    _ => Some((n, v)),
                });
            json!({
                "objective": i,
                "name": study.objective_name(i),
                "direction": d.as_optuna(),
                "value": best.map(|b| b.1),
                "trial": best.map(|b| b.0),
            })
        });
        Some(bests.collect())
    }

    /// `status --json`.
    fn json(&self) -> Value {
        let study = &self.study;
        let running: Vec<Value> = self
            .running
            .iter()
            .map(|t| {
                json!({"number": t.number, "trial_id": t.trial_id, "worker_id": t.worker_id,
                            "worker_pid": t.worker_pid, "elapsed_s": self.elapsed(t), "params": t.params,
                            "gpu": t.gpu, "step": t.step, "reason": t.reason})
            })
            .collect();
        let number_of: HashMap<i64, i64> = self
            .running
            .iter()
            .map(|t| (t.trial_id, t.number))
            .collect();
        let hosts: Vec<Value> = self.hosts.iter().map(|h| {
            let number = |id: &i64| number_of.get(id).copied();
            json!({
                "host": h.daemon.host,
                "daemon": h.daemon,
                "alive": self.alive(&h.daemon),
                "running": h.running.iter().filter_map(number).collect::<Vec<_>>(),
                "workers": self.workers.iter().filter(|w| w.host == h.daemon.host).count(),
                "gpus": self.gpus.iter().filter(|g| g.host == h.daemon.host).map(|g| g.device).collect::<Vec<_>>(),
            })
        }).collect();
        let daemon = self.daemon();
        json!({
            "study": study.name,
            "direction": (!study.is_multi_objective()).then(|| study.directions[0].as_optuna()),
            "directions": study.directions.iter().map(|d| d.as_optuna()).collect::<Vec<_>>(),
            "metric_names": study.metric_names,
            "database": self.path,
            "counts": self.counts,
            "finished": self.counts.finished(),
            "n_trials": self.n_trials,
            "running": running,
            "best": if study.is_multi_objective() { None } else { self.best.as_ref() },
            "pareto_front": self.front.as_ref().map(|f| json!({
                "size": f.len(),
                "trials": f.iter().map(|c| c.number).collect::<Vec<_>>(),
                "best": self.front_bests(),
            })),
            "workers": self.workers.iter().map(|w| {
                let (shown, trial) = self.worker_shown(w);
                let mut v = json!(w);
                v["shown"] = json!(shown);
                v["trial"] = json!(trial);
                v
            }).collect::<Vec<_>>(),
            "daemon": daemon,
            "daemon_alive": daemon.is_some_and(|d| self.alive(d)),
            "hosts": hosts,
            "gpus": self.gpus,
            "budgets": self.budgets.as_ref().map(|b| b.json(self.ran())),
            "waiting": self.waiting.iter()
                .map(|t| json!({"number": t.number, "trial_id": t.trial_id, "reason": t.reason}))
                .chain(self.unnumbered.iter().map(|r| json!({"number": null, "trial_id": null, "reason": r})))
                .collect::<Vec<_>>(),
        })
    }

    /// `status` for a person.
    fn text(&self) -> String {
        let study = &self.study;
        let objectives = if study.is_multi_objective() {
            objectives_text(study)
        } else {
            study.directions[0].as_optuna().to_owned()
        };
        let mut out = format!(
            "study {} ({objectives}) in {}\n",
            study.name,
            self.path.display()
        );
        if self.several_hosts {
            self.hosts_text(&mut out);
        } else {
            self.daemon_text(&mut out);
        }
        let c = &self.counts;
        let progress = match self.n_trials {
            Some(n) => format!("{}/{n} finished", c.finished()),
            None => format!("{} finished", c.finished()),
        };
        let _ = writeln!(
            out,
            "progress  {progress}: COMPLETE {}, PRUNED {}, FAIL {} ({} re-enqueued), RUNNING {}, WAITING {}",
            c.complete, c.pruned, c.fail, c.fail_retried, c.running, c.waiting
        );
        if let Some(b) = &self.budgets {
            let _ = writeln!(out, "budgets   {}", b.text(self.ran()));
        }
        self.best_text(&mut out);
        self.running_text(&mut out);
        self.waiting_text(&mut out);
        self.workers_text(&mut out);
        if !self.gpus.is_empty() {
            out.push_str(&gpus_table(&self.gpus, |host| {
                self.hosts
                    .iter()
                    .any(|h| h.daemon.host == host && self.alive(&h.daemon))
            }));
        }
        out
    }

    /// Several hosts: one line each (a daemon that stopped beating is SILENT).
    fn hosts_text(&self, out: &mut String) {
        for h in &self.hosts {
            let d = &h.daemon;
            let numbers: Vec<String> = h
                .running
                .iter()
                .filter_map(|id| self.running.iter().find(|t| t.trial_id == *id))
                .map(|t| t.number.to_string())
                .collect();
            let state = match self.liveness(d) {
                Liveness::Exited => "EXITED".to_owned(),
                Liveness::Rebooted => "REBOOTED".to_owned(),
                Liveness::Silent => "SILENT".to_owned(),
                Liveness::Runs | Liveness::Stopped => d.state.to_string(),
            };
            let _ = writeln!(
                out,
                "host      {:<20} {state:<8} pid {} since {}, heartbeat {}s ago; running [{}], workers {}, gpus {}{}",
                d.host,
                d.pid,
                d.started_at,
                d.age_s.map_or("?".into(), |a| format!("{:.0}", a.max(0.0))),
                numbers.join(", "),
                self.workers.iter().filter(|w| w.host == d.host).count(),
                self.gpus.iter().filter(|g| g.host == d.host).count(),
                detail_text(d)
            );
        }
    }

    /// One host: its daemon, or that it is gone, or that none has run the study.
    fn daemon_text(&self, out: &mut String) {
        let _ = match self.daemon() {
            Some(d) if d.state != DaemonState::Stopped && !self.alive(d) => writeln!(
                out,
                "daemon    GONE: pid {} on {} {}; \
                 the next `sweepd run` takes over and re-enqueues its trials",
                d.pid,
                d.host,
                gone_text(self.liveness(d), d)
            ),
            Some(d) => writeln!(
                out,
                "daemon    {} (pid {} on {}, since {}){}",
                d.state,
                d.pid,
                d.host,
                d.started_at,
                detail_text(d)
            ),
            None => writeln!(out, "daemon    none has run this study yet"),
        };
    }

    /// The best trial, or the Pareto front's size and each objective's best on it.
    fn best_text(&self, out: &mut String) {
        let _ = match (&self.front, self.front_bests(), &self.best) {
            (Some(f), _, _) if f.is_empty() => {
                writeln!(out, "front     (no feasible COMPLETE trial yet)")
            }
            (Some(f), Some(bests), _) => {
                let _ = writeln!(
                    out,
                    "front     {} trials on the Pareto front (`sweepd best`)",
                    f.len()
                );
                for b in bests {
                    let _ = writeln!(
                        out,
                        "          best {} ({}): {} (trial {})",
                        b["name"].as_str().unwrap_or_default(),
                        b["direction"].as_str().unwrap_or_default(),
                        b["value"],
                        b["trial"]
                    );
                }
                Ok(())
            }
            (_, _, Some(b)) => writeln!(
                out,
                "best      trial {}: {} {}",
                b.number,
                b.value,
                Value::Object(b.params.clone())
            ),
            _ => writeln!(out, "best      (no COMPLETE trial yet)"),
        };
    }

    fn running_text(&self, out: &mut String) {
        if self.running.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "running   {:>7} {:>7} {:>8} {:>9}  reason",
            "trial", "worker", "pid", "elapsed"
        );
        for t in &self.running {
            let _ = writeln!(
                out,
                "          {:>7} {:>7} {:>8} {:>8.1}s  {}",
                t.number,
                t.worker_id.map_or("-".into(), |v| v.to_string()),
                t.worker_pid.map_or("-".into(), |v| v.to_string()),
                self.elapsed(t).unwrap_or(0.0),
                t.reason.as_deref().unwrap_or("-")
            );
        }
    }

    /// The WAITING trials and candidates a live daemon says why it holds, and retry copies.
    fn waiting_text(&self, out: &mut String) {
        for t in &self.waiting {
            let reason = t.reason.as_deref().unwrap_or("-");
            let _ = writeln!(out, "waiting   trial {}: {reason}", t.number);
        }
        for r in &self.unnumbered {
            let _ = writeln!(out, "waiting   next new trial: {r}");
        }
    }

    fn workers_text(&self, out: &mut String) {
        if self.workers.is_empty() {
            return;
        }
        let _ = writeln!(out, "workers   {}", self.workers.len());
        for w in &self.workers {
            let state = match self.worker_shown(w) {
                (s, Some(n)) if s == "BUSY" => format!("BUSY (trial {n})"),
                (s, _) if s == "STALE" => "STALE (its daemon does not run)".to_owned(),
                (s, _) => s,
            };
            let _ = writeln!(
                out,
                "          worker {} slot {} pid {} {state} ({} trials done)",
                w.worker_id,
                w.slot,
                w.pid.map_or("-".into(), |p| p.to_string()),
                w.trials_done
            );
        }
    }
}

/// A daemon's detail on a line of its own under it, or nothing.
fn detail_text(d: &DaemonView) -> String {
    d.detail
        .as_deref()
        .map(|x| format!("\n          {x}"))
        .unwrap_or_default()
}

/// Seconds since a running trial started, by this machine's clock.
fn elapsed(t: &TrialView) -> Option<f64> {
    t.datetime_start
        .as_deref()
        .and_then(time::age)
        .map(|a| a.as_millis() as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::{Direction, WorkerState};

    fn daemon(host: &str, state: DaemonState, age_s: f64) -> DaemonView {
        DaemonView {
            pid: 100,
            host: host.into(),
            started_at: "2026-01-01 10:00:00".into(),
            heartbeat_at: "2026-01-01 10:05:00".into(),
            age_s: Some(age_s),
            state,
            detail: None,
            pid_start: None,
            instance: Default::default(),
        }
    }

    fn running_trial(trial_id: i64, number: i64) -> TrialView {
        TrialView {
            trial_id,
            number,
            state: "RUNNING".into(),
            value: Value::Null,
            worker_id: Some(7),
            ..TrialView::default()
        }
    }

    fn status(hosts: Vec<HostView>) -> Status {
        Status {
            study: Study {
                id: 1,
                name: "s".into(),
                directions: vec![Direction::Minimize],
                metric_names: None,
            },
            path: PathBuf::from("/db/s.db"),
            n_trials: Some(20),
            counts: Counts {
                complete: 3,
                running: 1,
                ..Counts::default()
            },
            running: vec![running_trial(11, 3)],
            best: None,
            front: None,
            workers: vec![],
            hosts,
            several_hosts: false,
            gone_after: Duration::from_secs(60),
            seen: HashMap::new(),
            gpus: vec![],
            budgets: None,
            waiting: vec![],
            unnumbered: vec![],
        }
    }

    #[test]
    fn several_hosts_are_shown_each_and_one_that_stopped_beating_is_silent() {
        let mut s = status(vec![
            HostView {
                daemon: daemon("a", DaemonState::Running, 1.4),
                running: vec![11],
            },
            HostView {
                daemon: DaemonView {
                    detail: Some("every device quarantined".into()),
                    ..daemon("b", DaemonState::Paused, 500.0)
                },
                running: vec![],
            },
        ]);
        s.several_hosts = true;
        s.workers = vec![WorkerView {
            worker_id: 7,
            host: "a".into(),
            slot: 0,
            pid: Some(4242),
            state: WorkerState::Ready,
            trials_done: 2,
            started_at: "2026-01-01 10:00:01".into(),
        }];
        s.gpus = vec![GpuRow {
            host: "b".into(),
            ..GpuRow::default()
        }];
        let text = s.text();
        let lines: Vec<&str> = text.lines().take(7).collect();
        assert_eq!(
            lines,
            [
                "study s (MINIMIZE) in /db/s.db",
                "host      a                    RUNNING  pid 100 since 2026-01-01 10:00:00, \
                 heartbeat 1s ago; running [3], workers 1, gpus 0",
                "host      b                    SILENT   pid 100 since 2026-01-01 10:00:00, \
                 heartbeat 500s ago; running [], workers 0, gpus 1",
                "          every device quarantined",
                "progress  3/20 finished: COMPLETE 3, PRUNED 0, FAIL 0 (0 re-enqueued), \
                 RUNNING 1, WAITING 0",
                "best      (no COMPLETE trial yet)",
                "running     trial  worker      pid   elapsed  reason",
            ]
        );
        assert!(
            text.contains("          worker 7 slot 0 pid 4242 BUSY (trial 3) (2 trials done)\n"),
            "{text}"
        );
        let json = s.json();
        assert_eq!(
            json["daemon"]["host"], "a",
            "the live daemon is the one shown"
        );
        assert_eq!(json["hosts"][0]["running"], json!([3]));
        assert_eq!(json["hosts"][1]["alive"], false);
        assert_eq!(json["hosts"][1]["gpus"], json!([0]));
    }

    #[test]
    fn one_host_s_daemon_is_gone_once_its_heartbeat_is_stale_and_none_before_any_ran() {
        let stale = status(vec![HostView {
            daemon: daemon("a", DaemonState::Running, 61.0),
            running: vec![11],
        }]);
        assert!(stale.text().lines().nth(1).unwrap().starts_with(
            "daemon    GONE: pid 100 on a stopped sending heartbeats at 2026-01-01 10:05:00"
        ));
        assert_eq!(stale.json()["daemon_alive"], false);
        let stopped = status(vec![HostView {
            daemon: daemon("a", DaemonState::Stopped, 3600.0),
            running: vec![],
        }]);
        assert_eq!(
            stopped.text().lines().nth(1),
            Some("daemon    STOPPED (pid 100 on a, since 2026-01-01 10:00:00)")
        );
        let never = status(vec![]);
        assert_eq!(
            never.text().lines().nth(1),
            Some("daemon    none has run this study yet")
        );
        assert_eq!(never.json()["daemon"], Value::Null);
    }

    #[test]
    fn a_study_of_several_objectives_shows_its_front_and_each_objective_s_best_on_it() {
        let mut s = status(vec![]);
        s.study.directions = vec![Direction::Minimize, Direction::Maximize];
        s.study.metric_names = Some(vec!["loss".into(), "fps".into()]);
        let candidate = |number, values: Vec<f64>| Candidate {
            trial_id: number + 1,
            number,
            values,
            constraints: vec![],
        };
        s.front = Some(vec![
            candidate(2, vec![0.5, 10.0]),
            candidate(5, vec![0.25, 4.0]),
        ]);
        let text = s.text();
        assert!(text.starts_with("study s (loss MINIMIZE, fps MAXIMIZE) in /db/s.db\n"));
        assert!(
            text.contains(
                "front     2 trials on the Pareto front (`sweepd best`)\n          \
                 best loss (MINIMIZE): 0.25 (trial 5)\n          \
                 best fps (MAXIMIZE): 10.0 (trial 2)\n"
            ),
            "{text}"
        );
        let json = s.json();
        assert_eq!(json["pareto_front"]["trials"], json!([2, 5]));
        assert_eq!(json["pareto_front"]["best"][1]["trial"], 2);
        assert_eq!(json["best"], Value::Null);
        s.front = Some(vec![]);
        assert!(s
            .text()
            .contains("front     (no feasible COMPLETE trial yet)\n"));
    }
}
