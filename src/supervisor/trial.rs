//! One trial on one worker: the protocol conversation (the trial sent, reports answered with
//! the pruner's decision, protocol 2's suggests answered with the param's value and its user
//! attributes recorded, the result, the error report), the limits (`trial_timeout`,
//! `heartbeat_timeout`, `shutdown_grace`, a second Ctrl-C, a deleted study, a stop from
//! housekeeping: the trial ended by another process or the study cancelled) and, when the
//! worker dies, the classification of how. Oneshot workers end a trial by exiting, with their
//! result in a file.

use super::checkpoint;
use super::decide::Outcome;
use super::events::WorkerEvent;
use super::policy::Fate;
use super::shared::Shared;
use super::stops::Stop;
use super::workers::{kill_group, took_memory, KILL_GRACE};
use crate::classify;
use crate::clock;
use crate::config::Config;
use crate::process::{self, Event, FrameworkMemory, Message, Worker};
use crate::study::{rules, Claimed, FailureKind};
use crate::units;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a oneshot worker may take to exit after it reported its result.
const ONESHOT_EXIT_GRACE: Duration = Duration::from_secs(30);

/// How a trial ran: its outcome, what it does to its worker, and what the worker's framework
/// said of its memory.
type Ended = (Outcome, Fate, Option<FrameworkMemory>);

/// One trial's conversation with its worker, as it goes.
struct Conversation<'a> {
    sh: &'a Shared,
    c: &'a Claimed,
    /// Set in oneshot mode.
    result_file: Option<&'a PathBuf>,
    /// One snapshot for the trial: its limits do not change halfway through by a SIGHUP.
    cfg: Arc<Config>,
    /// Oneshot: how the trial ended, known before the process has exited.
    outcome: Option<Outcome>,
    /// The last error report, for classifying a process that then died.
    last_report: Option<(String, String, String)>,
    /// What the framework said of the trial's memory, with its final message.
    framework: Option<FrameworkMemory>,
    /// Housekeeping's stop: the trial ended by another process, or the study cancelled.
    stop: Stop,
}

/// What a message from the worker comes to.
enum Heard {
    /// The conversation goes on.
    On,
    /// A oneshot worker gave its outcome: its process has `ONESHOT_EXIT_GRACE` to exit.
    Exiting,
    /// The trial ended so.
    End(Outcome, Fate),
}

fn failed(kind: FailureKind, reason: String, tail: Option<String>) -> Outcome {
    Outcome::Failed {
        kind,
        reason,
        tail: tail.filter(|t| !t.is_empty()),
        error: None,
    }
}

fn judged(v: classify::Verdict, tail: String) -> Outcome {
    Outcome::Failed {
        kind: v.kind,
        reason: v.reason,
        tail: Some(tail).filter(|t| !t.is_empty()),
        error: v.error,
    }
}

/// The worker is killed (with the usual grace) for `why`, and the trial fails as `kind`.
async fn killed(w: &mut Worker, kind: FailureKind, why: String) -> (Outcome, Fate) {
    w.kill_group(KILL_GRACE).await;
    (
        failed(kind, why.clone(), Some(w.stderr_tail())),
        Fate::Replace(why),
    )
}

/// Runs one claimed trial on `w` and decides how it ended, with what the worker's framework
/// said of its memory (persistent workers whose helper reports it). `result_file` is set in
/// oneshot mode, where the process exiting is the normal end of the trial. The limits:
/// `trial_timeout`, `heartbeat_timeout`, `shutdown_grace`, a second Ctrl-C, a deleted study,
/// a stop from housekeeping (`stops`). `cap`: the memory cap a persistent worker is told with
/// the trial (`memory_cap`).
pub(super) async fn run_trial(
    sh: &Shared,
    w: &mut Worker,
    c: &Claimed,
    result_file: Option<&PathBuf>,
    cap: Option<u64>,
) -> Ended {
    let cfg = sh.cfg();
    let params = cfg.space.external_json(&c.params);
    w.reset_tail();
    w.mark(&format!(
        "trial {} (trial_id {}) start: {params}",
        c.number, c.trial_id
    ))
    .await;
    if result_file.is_none() {
        let mut msg = json!({"type": "trial", "trial_id": c.trial_id, "number": c.number,
            "params": params, "memory_cap": cap});
        let dir = checkpoint::prepare(&cfg, c);
        let best = sh.best_value();
        if let Some(m) = msg.as_object_mut() {
            m.extend(checkpoint::message_fields(&cfg, c, dir.as_ref(), best));
        }
        if let Err(e) = w.send(&msg).await {
            let why = format!("could not send the trial to the worker: {e}");
            return (
                failed(FailureKind::WorkerDied, why.clone(), Some(w.stderr_tail())),
                Fate::Replace(why),
                None,
            );
        }
    }
    let started = Instant::now();
    let mut talk = Conversation {
        sh,
        c,
        result_file,
        cfg,
        outcome: None,
        last_report: None,
        framework: None,
        stop: sh.stops.watch(c.trial_id),
    };
    let (result, fate) = talk.until_it_ends(w).await;
    sh.stops.forget(c.trial_id);
    w.trial_ended(c.trial_id);
    let end = match &result {
        Outcome::Complete(v) => format!("COMPLETE {}", values_text(v)),
        Outcome::Pruned => "PRUNED".into(),
        Outcome::Failed { kind, reason, .. } => format!("FAIL {}: {reason}", kind.as_str()),
    };
    w.mark(&format!(
        "trial {} end after {:.2}s: {end}",
        c.number,
        started.elapsed().as_secs_f64()
    ))
    .await;
    if let Outcome::Failed { kind, reason, .. } = &result {
        let failed = WorkerEvent::TrialFailed {
            kind: *kind,
            reason,
        };
        let _ = failed.record(&sh.store, Some(w.id), Some(c.trial_id)).await;
    }
    (result, fate, talk.framework)
}

impl Conversation<'_> {
    /// Listens to the worker until the trial ends, or one of its limits does.
    async fn until_it_ends(&mut self, w: &mut Worker) -> (Outcome, Fate) {
        let (sh, cfg) = (self.sh, self.cfg.clone());
        let far = Duration::from_secs(86400 * 365);
        let timeout = tokio::time::sleep(cfg.worker.trial_timeout.unwrap_or(far));
        tokio::pin!(timeout);
        let heartbeat_limit = cfg.worker.heartbeat_timeout.unwrap_or(far);
        let heartbeat = tokio::time::sleep(heartbeat_limit);
        tokio::pin!(heartbeat);
        let grace = tokio::time::sleep(far);
        tokio::pin!(grace);
        let mut stopping = false;
        let stop = self.stop.clone();
        loop {
            tokio::select! {
                ev = w.next_event() => {
                    heartbeat.as_mut().reset(clock::deadline(heartbeat_limit));
                    match self.heard(w, ev).await {
                        Heard::On => {}
                        Heard::Exiting => timeout.as_mut().reset(clock::deadline(ONESHOT_EXIT_GRACE)),
                        Heard::End(o, fate) => return (o, fate),
                    }
                }
                _ = &mut timeout => {
                    if let Some(o) = self.outcome.take() {
                        w.kill_group(KILL_GRACE).await;
                        return (o, Fate::Replace("oneshot worker did not exit after its result".into()));
                    }
                    let limit = cfg.worker.trial_timeout.unwrap_or(far);
                    let why = format!("trial exceeded trial_timeout ({})", units::format_duration(limit));
                    return killed(w, FailureKind::Timeout, why).await;
                }
                _ = &mut heartbeat, if self.outcome.is_none() => {
                    let why = format!(
                        "hang: no protocol traffic for heartbeat_timeout ({})",
                        units::format_duration(heartbeat_limit)
                    );
                    return killed(w, FailureKind::Hang, why).await;
                }
                _ = sh.shutdown.cancelled(), if !stopping => {
                    stopping = true;
                    // A deleted study (cancelled before `shutdown`) gets no grace: the next turn
                    // of the loop kills the trial.
                    if !sh.abandon.is_cancelled() {
                        info!(trial = self.c.number, "shutting down: giving the running trial {}", units::format_duration(cfg.worker.shutdown_grace));
                        grace.as_mut().reset(clock::deadline(cfg.worker.shutdown_grace));
                    }
                }
                _ = sh.abandon.cancelled() => {
                    let why = "interrupted: the study was deleted from the database".to_owned();
                    return killed(w, FailureKind::Interrupted, why).await;
                }
                why = stop.stopped() => {
                    warn!(trial = self.c.number, "{why}");
                    kill_group(sh, w).await;
                    let reason = format!("interrupted: {why}");
                    return (failed(FailureKind::Interrupted, reason, Some(w.stderr_tail())), Fate::Replace(why));
                }
                _ = &mut grace => {
                    let why = "interrupted: sweepd was stopped and the trial did not finish within shutdown_grace".to_owned();
                    kill_group(sh, w).await;
                    return (failed(FailureKind::Interrupted, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
                }
                _ = sh.kill_now.cancelled() => {
                    w.kill_group_now().await;
                    // A oneshot trial that already reported keeps its result.
                    if let Some(o) = self.outcome.take() {
                        return (o, Fate::Replace("sweepd was stopped at once".into()));
                    }
                    let why = "interrupted: sweepd was stopped at once (a second Ctrl-C or SIGTERM) before the trial finished".to_owned();
                    return (failed(FailureKind::Interrupted, why.clone(), Some(w.stderr_tail())), Fate::Replace(why));
                }
            }
        }
    }

    /// What the worker said, or that its channel closed or its process exited.
    async fn heard(&mut self, w: &mut Worker, ev: Event) -> Heard {
        let (c, result_file) = (self.c, self.result_file);
        let n_objectives = self.cfg.study.directions.len();
        let end = |o: Outcome, fate: Fate| Heard::End(o, fate);
        match ev {
            Event::Msg(
                m @ (Message::Report { trial_id, .. }
                | Message::Suggest { trial_id, .. }
                | Message::UserAttr { trial_id, .. }
                | Message::Constraint { trial_id, .. }),
            ) if trial_id == c.trial_id && self.outcome.is_none() => {
                asked(self.sh, w, c, n_objectives, m).await;
                Heard::On
            }
            Event::Msg(Message::Result {
                trial_id,
                value,
                memory,
            }) if trial_id == c.trial_id => {
                self.framework = memory;
                let o = match value {
                    Ok(values) => judge_values(values, n_objectives, "the objective returned"),
                    Err(text) => failed(
                        FailureKind::BadValue,
                        format!("the objective returned a non-number: {text}"),
                        None,
                    ),
                };
                if result_file.is_none() {
                    return end(o, Fate::Keep);
                }
                self.outcome = Some(o);
                Heard::Exiting
            }
            Event::Msg(Message::Pruned { trial_id, memory }) if trial_id == c.trial_id => {
                self.framework = memory;
                if result_file.is_none() {
                    return end(Outcome::Pruned, Fate::Keep);
                }
                self.outcome = Some(Outcome::Pruned);
                Heard::On
            }
            Event::Msg(Message::Error {
                trial_id,
                exc_type,
                message,
                traceback,
                memory,
            }) if trial_id == c.trial_id => {
                self.framework = memory;
                let verdict = classify::classify_report(&classify::Report {
                    exc_type: &exc_type,
                    message: &message,
                    traceback: &traceback,
                });
                let tail = if traceback.is_empty() {
                    w.stderr_tail()
                } else {
                    process::clip(&traceback, 8000)
                };
                let poisons = verdict.kind.poisons_context();
                let kind = verdict.kind;
                let o = judged(verdict, tail);
                self.last_report = Some((exc_type, message, traceback));
                if result_file.is_some() {
                    self.outcome = Some(o);
                    Heard::On
                } else if poisons {
                    // The CUDA context is unusable: the process must go, now.
                    w.kill_group(KILL_GRACE).await;
                    let why = format!("{}: its CUDA context is unusable", kind.as_str());
                    end(o, Fate::Replace(why))
                } else {
                    end(o, Fate::Keep)
                }
            }
            Event::Msg(
                m @ (Message::Report { trial_id, .. }
                | Message::Result { trial_id, .. }
                | Message::Pruned { trial_id, .. }
                | Message::Error { trial_id, .. }
                | Message::Suggest { trial_id, .. }
                | Message::UserAttr { trial_id, .. }
                | Message::Constraint { trial_id, .. }),
            ) => {
                // For a trial that already ended (this one once a oneshot worker gave its
                // outcome, or one this worker ran before): dropped, charged to no trial.
                if trial_id == c.trial_id || w.ran(trial_id) {
                    warn!(
                        trial = c.number,
                        "dropped a late `{}` for trial_id {trial_id}, which already ended",
                        m.kind()
                    );
                    return Heard::On;
                }
                let why = format!(
                    "worker sent a message for trial_id {trial_id} while running trial_id {}",
                    c.trial_id
                );
                let (o, fate) = killed(w, FailureKind::Protocol, why).await;
                end(o, fate)
            }
            Event::Msg(Message::Memory {
                trial_id,
                reserved,
                peak_reserved,
                worker,
            }) => {
                took_memory(self.sh, w, Some(&worker));
                // Figures of this trial's allocator (a late one of an ended trial is dropped).
                if let (Some(m), true) =
                    (&self.sh.monitor, trial_id.is_none_or(|t| t == c.trial_id))
                {
                    m.framework(c.trial_id, reserved, peak_reserved, worker.context);
                }
                Heard::On
            }
            Event::Msg(_) => Heard::On,
            // A persistent worker without its channel can never deliver this trial's outcome:
            // it is as good as dead, whatever its process does (a oneshot worker may not use
            // the channel at all; its exit ends the trial).
            Event::Closed if result_file.is_none() => {
                let why =
                    "the worker closed its protocol channel during the trial and kept running"
                        .to_owned();
                w.kill_group(KILL_GRACE).await;
                let reason = format!("{why}; its process group was killed");
                let tail = Some(w.stderr_tail());
                end(
                    failed(FailureKind::WorkerDied, reason, tail),
                    Fate::Replace(why),
                )
            }
            Event::Closed => Heard::On,
            Event::Garbage(what) => {
                let why = format!("worker sent garbage on the protocol channel: {what}");
                let (o, fate) = killed(w, FailureKind::Protocol, why).await;
                end(o, fate)
            }
            Event::Exited(status) => {
                let (o, fate) = self.exited(w, status);
                end(o, fate)
            }
        }
    }

    /// The worker's process exited: the outcome a oneshot worker gave (on the channel, or in
    /// its result file), else how it died.
    fn exited(&mut self, w: &mut Worker, status: std::process::ExitStatus) -> (Outcome, Fate) {
        let how = process::describe_exit(status);
        let fate = Fate::Replace(format!("worker {how}"));
        if let Some(o) = self.outcome.take() {
            return (o, fate);
        }
        if let Some(file) = self.result_file {
            match read_result_file(file, self.cfg.study.directions.len()) {
                Some(o) if status.success() => return (o, fate),
                None if status.success() => {
                    let why =
                        "worker exited 0 without writing a result to SWEEPD_RESULT_FILE".to_owned();
                    return (
                        failed(FailureKind::WorkerDied, why, Some(w.stderr_tail())),
                        fate,
                    );
                }
                _ => {}
            }
        }
        let (code, signal) = process::code_and_signal(status);
        let tail = w.stderr_tail();
        let report = self
            .last_report
            .as_ref()
            .map(|(t, m, tb)| classify::Report {
                exc_type: t,
                message: m,
                traceback: tb,
            });
        let verdict = classify::classify_exit(
            &classify::Exit {
                code,
                signal,
                signalled_by_us: false,
            },
            &tail,
            report.as_ref(),
        );
        (judged(verdict, tail), fate)
    }
}

/// A message of the running trial that asks for something: a report (answered with the
/// pruner's decision), a suggest (the param's value), a user attribute or a constraint
/// (recorded). What `study::rules` refuses, and what cannot be kept exactly, is not recorded:
/// the reason goes back to the worker (in the answer; a user attribute or a constraint has
/// none, so `user_attr_refused` or `constraint_refused`) and to the log. The trial goes on:
/// the objective raises it as Optuna would.
async fn asked(sh: &Shared, w: &mut Worker, c: &Claimed, n_objectives: usize, m: Message) {
    let refused = |what: String, why: &str| {
        warn!(trial = c.number, "refused {what}: {why}");
    };
    let answer = match m {
        Message::Report {
            trial_id,
            step,
            value,
        } => {
            // As Optuna's `Trial.report`: refused, nothing recorded; the helper raises the
            // first as NotImplementedError.
            let why = if n_objectives > 1 {
                Some(report_refused(n_objectives))
            } else {
                rules::report_step(step).err()
            };
            match why {
                Some(why) => {
                    if n_objectives == 1 {
                        refused(format!("a report at step {step}"), &why);
                    }
                    json!({"type": "prune", "trial_id": trial_id, "step": step, "prune": false, "error": why})
                }
                None => {
                    let prune = sh.core.lock().await.report(c, step, value).await;
                    json!({"type": "prune", "trial_id": trial_id, "step": step, "prune": prune})
                }
            }
        }
        Message::Suggest {
            trial_id,
            name,
            distribution,
            inexact,
        } => {
            let got = match inexact {
                Some(int) => Err(inexact_refused(&int)),
                None => sh.core.lock().await.suggest(c, &name, &distribution).await,
            };
            match got {
                Ok(value) => {
                    json!({"type": "param", "trial_id": trial_id, "name": name, "value": value})
                }
                Err(error) => {
                    refused(format!("suggest {:?}", process::clip(&name, 100)), &error);
                    json!({"type": "param", "trial_id": trial_id, "name": name, "error": error})
                }
            }
        }
        Message::UserAttr {
            trial_id,
            key,
            value,
            inexact,
        } => {
            let why = rules::user_attr_key(&key)
                .err()
                .or_else(|| inexact.map(|int| inexact_refused(&int)));
            let Some(why) = why else {
                if let Err(e) = sh.store.set_user_attr(trial_id, &key, &value).await {
                    warn!(
                        trial = c.number,
                        "could not record user attribute `{key}`: {e}"
                    );
                }
                return;
            };
            refused(
                format!("user attribute {:?}", process::clip(&key, 100)),
                &why,
            );
            json!({"type": "user_attr_refused", "trial_id": trial_id, "key": key, "error": why})
        }
        Message::Constraint {
            trial_id,
            key,
            value,
        } => {
            let Err(why) = sh.core.lock().await.constraint(c, &key, value).await else {
                return;
            };
            refused(format!("constraint {:?}", process::clip(&key, 100)), &why);
            json!({"type": "constraint_refused", "trial_id": trial_id, "key": key, "error": why})
        }
        _ => return,
    };
    let _ = w.send(&answer).await;
}

/// Why a message holding an integer past 64 bits is refused.
fn inexact_refused(int: &str) -> String {
    format!(
        "the integer {} is beyond what sweepd keeps exactly (-2^63 to 2^64-1): it would be \
         stored and come back as a float",
        process::clip(int, 100)
    )
}

/// The answer to a `report` from a study with several objectives (Optuna refuses
/// `Trial.report` there too).
pub(super) fn report_refused(n_objectives: usize) -> String {
    format!(
        "Trial.report is not supported for multi-objective optimization (this study has \
         {n_objectives} objectives): nothing was recorded, and such a study cannot be pruned"
    )
}

/// One value, or several as `[a, b]`, for log lines.
pub(super) fn values_text(values: &[f64]) -> String {
    match values {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The values a worker returned, judged: one per objective, none NaN (infinities are values,
/// stored as Optuna stores them), else the trial fails as `bad_value`. `what` begins the
/// reason ("the objective returned", "the result file holds").
pub(super) fn judge_values(values: Vec<f64>, n_objectives: usize, what: &str) -> Outcome {
    let bad = |reason: String| Outcome::Failed {
        kind: FailureKind::BadValue,
        reason,
        tail: None,
        error: None,
    };
    if values.len() != n_objectives {
        return bad(format!(
            "{what} {} value{} but the study has {n_objectives} objective{}",
            values.len(),
            if values.len() == 1 { "" } else { "s" },
            if n_objectives == 1 { "" } else { "s" },
        ));
    }
    match values.iter().position(|v| v.is_nan()) {
        Some(_) if n_objectives == 1 => bad(format!("{what} NaN")),
        Some(i) => bad(format!("{what} NaN for objective {i}")),
        None => Outcome::Complete(values),
    }
}

/// A oneshot result file: a bare number, `{"value": x}`, a JSON array of one number per
/// objective or `{"values": [...]}`. `None` when absent or empty. Read up to
/// [`process::MAX_LINE`], as a protocol line is: a larger file is not a result, and is not read
/// into memory whole.
pub(super) fn read_result_file(path: &PathBuf, n_objectives: usize) -> Option<Outcome> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(process::MAX_LINE as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() > process::MAX_LINE {
        return Some(Outcome::Failed {
            kind: FailureKind::BadValue,
            reason: format!(
                "the result file holds more than {} (a result is a number, or one per \
                 objective)",
                units::format_size(process::MAX_LINE as u64)
            ),
            tail: None,
            error: None,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => m
            .get("values")
            .or_else(|| m.get("value"))
            .cloned()
            .unwrap_or_default(),
        Ok(v) => v,
        Err(_) => serde_json::Value::String(text.to_owned()),
    };
    // A number written as text ("1.5", Python's repr of a float) is a number too.
    let parsed = match &value {
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok().map(|v| vec![v]),
        v => process::numbers(v).ok(),
    };
    Some(match parsed {
        Some(values) => judge_values(values, n_objectives, "the result file holds"),
        None => Outcome::Failed {
            kind: FailureKind::BadValue,
            reason: format!(
                "the result file holds a non-number: {}",
                process::clip(text, 200)
            ),
            tail: None,
            error: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(o: Outcome) -> Result<Vec<f64>, String> {
        match o {
            Outcome::Complete(v) => Ok(v),
            Outcome::Failed {
                kind: FailureKind::BadValue,
                reason,
                ..
            } => Err(reason),
            _ => panic!("neither complete nor bad_value"),
        }
    }

    #[test]
    fn values_are_one_per_objective_and_never_nan() {
        let j = |v: Vec<f64>, n| judged(judge_values(v, n, "the objective returned"));
        assert_eq!(j(vec![1.0, -2.0], 2), Ok(vec![1.0, -2.0]));
        assert_eq!(
            j(vec![f64::INFINITY, f64::NEG_INFINITY], 2).unwrap().len(),
            2
        );
        assert_eq!(
            j(vec![1.0], 2),
            Err("the objective returned 1 value but the study has 2 objectives".into())
        );
        assert_eq!(
            j(vec![1.0, 2.0, 3.0], 1),
            Err("the objective returned 3 values but the study has 1 objective".into())
        );
        assert_eq!(
            j(vec![1.0, f64::NAN], 2),
            Err("the objective returned NaN for objective 1".into())
        );
        assert_eq!(
            j(vec![f64::NAN], 1),
            Err("the objective returned NaN".into())
        );
        assert_eq!(
            j(vec![], 2).unwrap_err(),
            "the objective returned 0 values but the study has 2 objectives"
        );
    }

    #[test]
    fn result_files_in_every_form() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let read = |text: &str, n| {
            std::fs::write(&path, text).unwrap();
            read_result_file(&path, n).map(judged)
        };
        assert_eq!(read("1.5\n", 1), Some(Ok(vec![1.5])));
        assert_eq!(read(r#"{"value": 2}"#, 1), Some(Ok(vec![2.0])));
        assert_eq!(read("[0.5, 3]", 2), Some(Ok(vec![0.5, 3.0])));
        assert_eq!(
            read(r#"{"values": [0.5, "-inf"]}"#, 2),
            Some(Ok(vec![0.5, f64::NEG_INFINITY]))
        );
        assert_eq!(read(r#"{"value": [1, 2]}"#, 2), Some(Ok(vec![1.0, 2.0])));
        assert_eq!(read("", 2), None);
        let count = read("[1.0]", 2).unwrap().unwrap_err();
        assert_eq!(
            count,
            "the result file holds 1 value but the study has 2 objectives"
        );
        let nan = read(r#"[1.0, "nan"]"#, 2).unwrap().unwrap_err();
        assert_eq!(nan, "the result file holds NaN for objective 1");
        let junk = read(r#"[1.0, "fast"]"#, 2).unwrap().unwrap_err();
        assert!(junk.contains("non-number"), "{junk}");
        assert_eq!(
            read("nan", 1),
            Some(Err("the result file holds NaN".into()))
        );
        // Read up to a protocol line's length, never whole: a larger file is not a result.
        let just = format!("{}1.5", " ".repeat(process::MAX_LINE - 3));
        assert_eq!(read(&just, 1), Some(Ok(vec![1.5])));
        let past = format!("{}1.5", " ".repeat(process::MAX_LINE - 2));
        let why = read(&past, 1).unwrap().unwrap_err();
        assert!(why.contains("more than 1 MiB"), "{why}");
    }
}
