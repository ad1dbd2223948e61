//! Notifications: the `[notify]` command, run on the events a person must hear of (the study
//! finished, the breaker stopped it, a fatal error, a device lost, a periodic summary), so that
//! a sweep that runs for days does not need watching.
//!
//! The daemon must never wait for it: a webhook that hangs or a mail server that is down may
//! not slow a trial down or stop the study. So [`Notifier::send`] only puts the event in a
//! bounded queue and returns; a task of its own runs the command, one event at a time, each run
//! bounded by `[notify] timeout` (past it the run's whole process group is killed). When the
//! queue is full the oldest event is dropped and counted, and the next event that goes out
//! carries the count (`dropped`). A run that fails is logged with the end of its stderr and
//! counted (`sweepd_notifications_failed`), and the next event runs as if nothing happened.
//!
//! The command is an argv, never a shell line. It gets the event twice: as one JSON object on
//! its stdin (for `curl --data-binary @-`), and in its environment (`SWEEPD_EVENT`,
//! `SWEEPD_STUDY`, `SWEEPD_HOST`, `SWEEPD_MESSAGE`, `SWEEPD_AT`) for a program that takes
//! arguments.

use crate::config::{NotifyConfig, NotifyEvent};
use crate::metrics::Metrics;
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};

/// Events waiting to go out; past this the oldest is dropped.
pub const QUEUE: usize = 64;
/// The end of a failed run's stderr that the log quotes.
const STDERR_TAIL: usize = 2048;
/// After a run exits, how long its stderr may stay open (a child it left behind holding it)
/// before the log quotes what came so far.
const STDERR_AFTER_EXIT: Duration = Duration::from_millis(500);

/// One thing to tell a person: its kind, a line for a person, and the figures that go with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: NotifyEvent,
    pub message: String,
    /// More fields of the JSON object (`finished`, `best_value`, `device`, ...).
    pub fields: Map<String, Value>,
}

/// Where a study stands, for the `finished` and `summary` events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Trials that spent the budget.
    pub finished: u64,
    pub n_trials: Option<u64>,
    pub running: u64,
    pub best_value: Option<f64>,
    pub best_trial: Option<i64>,
    /// GPU-hours spent so far, where counted.
    pub gpu_hours: Option<f64>,
}

impl Summary {
    fn fields(&self) -> Map<String, Value> {
        let v = json!({
            "finished": self.finished,
            "n_trials": self.n_trials,
            "running": self.running,
            "best_value": self.best_value.filter(|v| v.is_finite()),
            "best_trial": self.best_trial,
            "gpu_hours": self.gpu_hours,
        });
        match v {
            Value::Object(m) => m,
            _ => unreachable!("a JSON object"),
        }
    }

    /// "12/50 trials finished, 3 running, best 0.0412 (trial 9)".
    fn text(&self) -> String {
        let mut out = match self.n_trials {
            Some(n) => format!("{}/{n} trials finished", self.finished),
            None => format!("{} trials finished", self.finished),
        };
        out.push_str(&format!(", {} running", self.running));
        match (self.best_value, self.best_trial) {
            (Some(v), Some(t)) => out.push_str(&format!(", best {v} (trial {t})")),
            _ => out.push_str(", no COMPLETE trial yet"),
        }
        if let Some(h) = self.gpu_hours {
            out.push_str(&format!(", {h:.2} GPU-hours spent"));
        }
        out
    }
}

impl Event {
    /// The study ended; `why` is the budget's words (`study::budget::Ended`'s `Display`).
    pub fn finished(why: &str, summary: &Summary) -> Event {
        Event {
            kind: NotifyEvent::Finished,
            message: format!("{why}; {}", summary.text()),
            fields: summary.fields(),
        }
    }

    /// The circuit breaker quarantined every device (`detail`: the daemon's words for it).
    pub fn breaker(detail: &str) -> Event {
        Event {
            kind: NotifyEvent::Breaker,
            message: format!("the circuit breaker stopped the study's trials: {detail}"),
            fields: Map::new(),
        }
    }

    /// The daemon stops on `error`.
    pub fn fatal(error: &str) -> Event {
        Event {
            kind: NotifyEvent::Fatal,
            message: format!("sweepd stopped on an error: {error}"),
            fields: Map::new(),
        }
    }

    /// GPU `device`'s readings started failing with `error`.
    pub fn device_lost(device: u32, error: &str) -> Event {
        let mut fields = Map::new();
        fields.insert("device".into(), json!(device));
        Event {
            kind: NotifyEvent::DeviceLost,
            message: format!("GPU {device} stopped answering: {error}"),
            fields,
        }
    }

    /// The periodic summary.
    pub fn summary(summary: &Summary) -> Event {
        Event {
            kind: NotifyEvent::Summary,
            message: summary.text(),
            fields: summary.fields(),
        }
    }
}

/// Who sends: the study and the daemon's host, on every event.
#[derive(Debug, Clone)]
struct Sender {
    study: String,
    host: String,
}

/// An event as it goes out: the JSON on stdin and the environment.
fn rendered(
    event: &Event,
    from: &Sender,
    at: &str,
    dropped: u64,
) -> (String, Vec<(&'static str, String)>) {
    let mut object = Map::new();
    object.insert("event".into(), json!(event.kind.as_str()));
    object.insert("study".into(), json!(from.study));
    object.insert("host".into(), json!(from.host));
    object.insert("at".into(), json!(at));
    object.insert("message".into(), json!(event.message));
    object.insert("dropped".into(), json!(dropped));
    for (k, v) in &event.fields {
        object.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let env = vec![
        ("SWEEPD_EVENT", event.kind.as_str().to_owned()),
        ("SWEEPD_STUDY", from.study.clone()),
        ("SWEEPD_HOST", from.host.clone()),
        ("SWEEPD_MESSAGE", event.message.clone()),
        ("SWEEPD_AT", at.to_owned()),
    ];
    (Value::Object(object).to_string(), env)
}

/// The queue between `send` and the task: bounded, the oldest dropped first.
#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<(Event, String)>,
    /// Dropped since the last event taken.
    dropped: u64,
    /// Dropped in all.
    dropped_total: u64,
    closed: bool,
}

impl Queue {
    /// Adds `event` (made at `at`); whether the oldest had to go for it.
    fn push(&mut self, event: Event, at: String) -> bool {
        let full = self.events.len() >= QUEUE;
        if full {
            self.events.pop_front();
            self.dropped += 1;
            self.dropped_total += 1;
        }
        self.events.push_back((event, at));
        full
    }

    /// The next event, with how many were dropped before it.
    fn take(&mut self) -> Option<(Event, String, u64)> {
        let (e, at) = self.events.pop_front()?;
        Some((e, at, std::mem::take(&mut self.dropped)))
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    config: NotifyConfig,
    from: Sender,
    metrics: Arc<Metrics>,
}

/// The daemon's notifier: [`Notifier::send`] never waits; [`Notifier::close`] gives the events
/// still queued a last chance when the daemon exits.
pub struct Notifier {
    shared: Option<Arc<Shared>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Notifier {
    /// A notifier for `config` (none is run without a command), its runs counted in
    /// `metrics`. Spawns its task on the current tokio runtime.
    pub fn start(
        config: &NotifyConfig,
        study: &str,
        host: &str,
        metrics: Arc<Metrics>,
    ) -> Notifier {
        if config.command.is_empty() {
            return Notifier {
                shared: None,
                task: Mutex::new(None),
            };
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: tokio::sync::Notify::new(),
            config: config.clone(),
            from: Sender {
                study: study.to_owned(),
                host: host.to_owned(),
            },
            metrics,
        });
        let task = tokio::spawn(deliver(shared.clone()));
        Notifier {
            shared: Some(shared),
            task: Mutex::new(Some(task)),
        }
    }

    /// Queues `event` if `[notify] events` wants it, and returns at once: it never waits for
    /// the command, nor for an earlier run of it.
    pub fn send(&self, event: Event) {
        let Some(shared) = &self.shared else {
            return;
        };
        if !shared.config.wants(event.kind) {
            return;
        }
        let at = crate::store::time::now();
        let full = lock(&shared.queue).push(event, at);
        if full {
            shared.metrics.notification_dropped();
        }
        shared.wake.notify_one();
    }

    /// Events dropped from the full queue since the start.
    pub fn dropped(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| lock(&s.queue).dropped_total)
    }

    /// Lets the queued events go out, waiting up to `[notify] timeout` in all, then stops the
    /// task (a run still going is killed with its process group).
    /// Events sent after it are not run.
    pub async fn close(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (Some(shared), Some(mut task)) = (&self.shared, task) else {
            return;
        };
        lock(&shared.queue).closed = true;
        shared.wake.notify_one();
        if tokio::time::timeout(shared.config.timeout, &mut task)
            .await
            .is_err()
        {
            let left = lock(&shared.queue).events.len();
            warn!(
                left,
                "notify: the command did not get through the queued events before sweepd \
                 exits; those left are not sent"
            );
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            task.abort();
        }
    }
}

fn lock(q: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    // A panic while holding it leaves a queue that is still whole.
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// The task: takes the events one at a time and runs the command for each, until closed and
/// empty.
async fn deliver(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut q = lock(&shared.queue);
            match q.take() {
                Some(n) => Some(n),
                None if q.closed => return,
                None => None,
            }
        };
        let Some((event, at, dropped)) = next else {
            shared.wake.notified().await;
            continue;
        };
        if dropped > 0 {
            warn!(
                dropped,
                "notify: the queue was full ({QUEUE} events): the oldest were dropped unsent"
            );
        }
        let (stdin, env) = rendered(&event, &shared.from, &at, dropped);
        let kind = event.kind.as_str();
        match run(&shared.config.command, &env, &stdin, shared.config.timeout).await {
            Ok(()) => {
                info!(event = kind, "notify: sent");
                shared.metrics.notification(kind, true);
            }
            Err(why) => {
                warn!(event = kind, "notify: the command failed: {why}");
                shared.metrics.notification(kind, false);
            }
        }
    }
}

/// Kills a run's process group when dropped, unless it was seen to end.
struct Group(Option<i32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // SAFETY: a plain syscall; a group that is gone is ESRCH, which is fine.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// One run of `argv` with `env` added and `stdin` written to it, within `limit`: `Ok` when it
/// exits 0, else why not.
async fn run(
    argv: &[String],
    env: &[(&'static str, String)],
    stdin: &str,
    limit: Duration,
) -> Result<(), String> {
    let program = &argv[0];
    let mut child = tokio::process::Command::new(program)
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    let mut group = Group(child.id().map(|p| p as i32));
    let tail = Arc::new(Mutex::new(Vec::new()));
    let reader = child
        .stderr
        .take()
        .map(|err| tokio::spawn(read_tail(err, tail.clone())));
    let mut input = child.stdin.take();
    let started = Instant::now();
    let ran = tokio::time::timeout(limit, async {
        if let Some(mut pipe) = input.take() {
            // A command that does not read its stdin may close it: that is its business.
            let _ = pipe.write_all(stdin.as_bytes()).await;
            let _ = pipe.write_all(b"\n").await;
        }
        child.wait().await
    })
    .await;
    let status = match ran {
        Err(_) => {
            drop(group);
            let _ = child.wait().await;
            if let Some(r) = reader {
                r.abort();
            }
            return Err(format!(
                "`{program}` ran past its {} ([notify] timeout): its process group was killed",
                crate::units::format_duration(limit)
            ));
        }
        Ok(Err(e)) => return Err(format!("waiting for `{program}`: {e}")),
        Ok(Ok(status)) => status,
    };
    // It ended by itself: what it left running (a mailer delivering in the background) is
    // its own.
    group.0 = None;
    if status.success() {
        return Ok(());
    }
    if let Some(r) = reader {
        let _ = tokio::time::timeout(STDERR_AFTER_EXIT, r).await;
    }
    let text = String::from_utf8_lossy(&lock_bytes(&tail))
        .trim()
        .to_owned();
    let how = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "an unknown status".to_owned(),
    };
    let after = crate::units::format_elapsed(started.elapsed());
    Err(if text.is_empty() {
        format!("`{program}` ended with {how} after {after}")
    } else {
        format!("`{program}` ended with {how} after {after}: {text}")
    })
}

fn lock_bytes(m: &Mutex<Vec<u8>>) -> Vec<u8> {
    m.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Reads `err` to its end, keeping its last [`STDERR_TAIL`] bytes in `tail`.
async fn read_tail(mut err: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = err.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
        t.extend_from_slice(&buf[..n]);
        if t.len() > STDERR_TAIL {
            let cut = t.len() - STDERR_TAIL;
            t.drain(..cut);
        }
    }
}

/// When the next periodic summary is due (`[notify] summary_every`), for the daemon's
/// housekeeping tick to ask.
#[derive(Debug, Clone)]
pub struct SummaryClock {
    every: Option<Duration>,
    next: Option<Instant>,
}

impl SummaryClock {
    /// The first summary `every` after `start`; none without `every`.
    pub fn new(every: Option<Duration>, start: Instant) -> SummaryClock {
        SummaryClock {
            every,
            next: every.and_then(|e| start.checked_add(e)),
        }
    }

    /// Whether a summary is due at `now`; if so, the next one is due `every` later (not one
    /// per period missed while the daemon was busy or suspended).
    pub fn due(&mut self, now: Instant) -> bool {
        match (self.every, self.next) {
            (Some(every), Some(next)) if now >= next => {
                self.next = now.checked_add(every);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(command: Vec<String>, timeout: Duration) -> NotifyConfig {
        NotifyConfig {
            command,
            events: NotifyEvent::ALL.to_vec(),
            summary_every: Some(Duration::from_secs(3600)),
            timeout,
        }
    }

    fn sh(script: String) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script]
    }

    /// Waits (a hang guard, not a speed assertion) until `cond` holds.
    async fn until(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "waited a minute for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn counted(metrics: &Metrics, line: &str) -> bool {
        metrics.encode().lines().any(|l| l == line)
    }

    /// A process that is gone or a zombie (its group killed, not reaped yet).
    fn gone(pid: i32) -> bool {
        crate::process::proc_stat(pid).is_none_or(|s| s.state == 'Z')
    }

    fn pid_in(path: &Path) -> Option<i32> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_notify_command_that_hangs_holds_up_no_sender_and_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let bg = dir.path().join("bg.pid");
        // The command starts a child of its own in its group, then hangs.
        let script = format!("sleep 1000 & echo $! > {}; wait", bg.display());
        let metrics = Arc::new(Metrics::new("h"));
        let n = Notifier::start(
            &config(sh(script), Duration::from_secs(1)),
            "s",
            "h",
            metrics.clone(),
        );
        n.send(Event::fatal("first"));
        until("the command to run", || pid_in(&bg).is_some()).await;
        let child = pid_in(&bg).unwrap();
        // While it hangs, every send returns: the queue takes 64 and drops the oldest.
        for i in 0..100 {
            n.send(Event::device_lost(i, "gone"));
        }
        assert!(!gone(child), "the hanging run is still running");
        assert_eq!(n.dropped(), 100 - QUEUE as u64);
        assert!(counted(
            &metrics,
            r#"sweepd_notifications_dropped_total{host="h"} 36"#
        ));
        // Its timeout kills it, with the child it started, and counts it failed.
        until("the first run to time out", || {
            counted(
                &metrics,
                r#"sweepd_notifications_failed_total{host="h",event="fatal"} 1"#,
            )
        })
        .await;
        until("its child to be killed", || gone(child)).await;
        // Closing does not wait past the timeout for the 64 queued runs, each of which would
        // hang; the run it cuts short is killed too.
        until("the next run to start", || pid_in(&bg) != Some(child)).await;
        let next = pid_in(&bg).unwrap();
        n.close().await;
        until("the cut-short run's child to be killed", || gone(next)).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failing_notify_command_is_counted_and_the_next_event_still_goes_out() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        // Each run keeps its stdin and environment; "fatal" fails, with a word on stderr.
        let script = format!(
            "cat > {d}/$SWEEPD_EVENT.json; \
             printf '%s|%s|%s|%s' \"$SWEEPD_STUDY\" \"$SWEEPD_HOST\" \"$SWEEPD_MESSAGE\" \"$SWEEPD_AT\" \
               > {d}/$SWEEPD_EVENT.env; \
             echo 'no route to hooks.example.com' >&2; \
             test \"$SWEEPD_EVENT\" != fatal"
        );
        let metrics = Arc::new(Metrics::new("h"));
        let n = Notifier::start(
            &config(sh(script), Duration::from_secs(60)),
            "resnet",
            "gpu-1",
            metrics.clone(),
        );
        n.send(Event::fatal("disk full"));
        let summary = Summary {
            finished: 50,
            n_trials: Some(50),
            running: 0,
            best_value: Some(0.25),
            best_trial: Some(7),
            gpu_hours: None,
        };
        n.send(Event::finished(
            "study done: 50/50 trials finished",
            &summary,
        ));
        n.close().await;
        assert!(counted(
            &metrics,
            r#"sweepd_notifications_failed_total{host="h",event="fatal"} 1"#
        ));
        assert!(counted(
            &metrics,
            r#"sweepd_notifications_sent_total{host="h",event="finished"} 1"#
        ));
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let json: Value = serde_json::from_str(&read("finished.json")).unwrap();
        assert_eq!(json["event"], "finished");
        assert_eq!(json["study"], "resnet");
        assert_eq!(json["host"], "gpu-1");
        assert_eq!(json["best_value"], 0.25);
        assert_eq!(json["best_trial"], 7);
        assert_eq!(json["dropped"], 0);
        assert_eq!(
            json["message"],
            "study done: 50/50 trials finished; 50/50 trials finished, 0 running, best 0.25 (trial 7)"
        );
        let env = read("finished.env");
        let parts: Vec<&str> = env.split('|').collect();
        assert_eq!(
            &parts[..3],
            ["resnet", "gpu-1", json["message"].as_str().unwrap()]
        );
        assert_eq!(parts[3], json["at"].as_str().unwrap());
        let fatal: Value = serde_json::from_str(&read("fatal.json")).unwrap();
        assert_eq!(fatal["message"], "sweepd stopped on an error: disk full");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_notify_program_that_is_not_there_is_a_failure_counted_not_a_panic() {
        let metrics = Arc::new(Metrics::new("h"));
        let n = Notifier::start(
            &config(
                vec!["/nonexistent/notify-me".into()],
                Duration::from_secs(60),
            ),
            "s",
            "h",
            metrics.clone(),
        );
        n.send(Event::breaker("every device quarantined"));
        n.close().await;
        assert!(counted(
            &metrics,
            r#"sweepd_notifications_failed_total{host="h",event="breaker"} 1"#
        ));
        let err = run(
            &["/nonexistent/notify-me".into()],
            &[],
            "{}",
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(
            err.starts_with("cannot start `/nonexistent/notify-me`: "),
            "{err}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_the_events_asked_for_run_the_command_and_none_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let script = format!("cat > {}/$SWEEPD_EVENT.json", dir.path().display());
        let metrics = Arc::new(Metrics::new("h"));
        let mut c = config(sh(script), Duration::from_secs(60));
        c.events = vec![NotifyEvent::Finished];
        let n = Notifier::start(&c, "s", "h", metrics.clone());
        n.send(Event::fatal("x"));
        n.send(Event::summary(&Summary::default()));
        n.send(Event::finished("done", &Summary::default()));
        n.close().await;
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["finished.json"]);
        let off = Notifier::start(&NotifyConfig::default(), "s", "h", metrics);
        off.send(Event::fatal("x"));
        assert_eq!(off.dropped(), 0);
        off.close().await;
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_the_next_event_out_says_how_many() {
        let mut q = Queue::default();
        for i in 0..QUEUE as u32 + 3 {
            q.push(Event::device_lost(i, "x"), format!("t{i}"));
        }
        let (first, at, dropped) = q.take().unwrap();
        assert_eq!(first.fields["device"], 3, "the three oldest went");
        assert_eq!((at.as_str(), dropped), ("t3", 3));
        assert_eq!(q.take().unwrap().2, 0, "said once");
        assert_eq!(q.dropped_total, 3);
        let from = Sender {
            study: "s".into(),
            host: "h".into(),
        };
        let (json, env) = rendered(&first, &from, "t3", dropped);
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["event"], "device_lost");
        assert_eq!(v["dropped"], 3);
        assert_eq!(v["device"], 3);
        assert_eq!(v["message"], "GPU 3 stopped answering: x");
        assert!(env.contains(&("SWEEPD_EVENT", "device_lost".to_owned())));
    }

    #[test]
    fn a_summary_is_due_every_period_once_however_late_the_tick() {
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut c = SummaryClock::new(Some(hour), t0);
        assert!(!c.due(t0));
        assert!(!c.due(t0 + hour / 2));
        assert!(c.due(t0 + hour));
        assert!(!c.due(t0 + hour + Duration::from_secs(1)));
        // A tick five hours late sends one summary, not five.
        assert!(c.due(t0 + hour * 6));
        assert!(!c.due(t0 + hour * 6 + hour / 2));
        let mut never = SummaryClock::new(None, t0);
        assert!(!never.due(t0 + hour * 100));
    }
}
