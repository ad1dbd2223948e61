//! What `sweepd run` shows a person at a terminal: a live progress display on stderr, below
//! the log lines, drawn from a snapshot the supervisor publishes (never from the database).
//!
//! The supervisor's `Core` keeps a [`Tracker`] and publishes a [`Progress`] on a
//! `tokio::sync::watch` channel whenever a trial starts or ends (and on every housekeeping
//! tick). [`Display`] redraws from the latest one: finished/budget, running per GPU, failures
//! by kind, the best value and its trial, elapsed time and ETA. While it is up, log lines go
//! through [`Display::log_writer`], which lifts the display, writes the line and draws the
//! display again below it, so the two never tear. Under journald or a pipe there is no
//! display at all (`cli` decides): stderr gets the log lines as before.

use crate::study::pareto::Front;
use crate::study::Direction;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A snapshot of a running study, as the supervisor's decision point knows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// When this daemon's run began; `None` until the supervisor has published.
    pub started: Option<Instant>,
    /// The study's trials with a final outcome (what `n_trials` counts, across restarts).
    pub finished: u64,
    /// Of those, the ones this run finished: the rate the ETA comes from.
    pub finished_here: u64,
    pub budget: Option<u64>,
    pub timeout: Option<Duration>,
    pub running: u64,
    pub max_par: usize,
    /// Running trials per GPU, every scheduled GPU listed; empty for a CPU-only study.
    pub gpus: BTreeMap<u32, usize>,
    /// Failures this run recorded, by kind (`classify::Kind` names), retried ones included.
    pub failures: BTreeMap<String, u64>,
    /// The best value so far and its trial number (one objective).
    pub best: Option<(i64, f64)>,
    /// Several objectives: the Pareto front's size and, per objective, its name and best value.
    pub front: Option<FrontSummary>,
    /// Every device is quarantined by the circuit breaker.
    pub paused: bool,
}

/// A Pareto front in brief: its size and each objective's (name, best value).
pub type FrontSummary = (usize, Vec<(String, Option<f64>)>);

/// The part of the snapshot only outcomes change (failures, best), and the channel.
#[derive(Debug)]
pub struct Tracker {
    tx: watch::Sender<Progress>,
    /// Snapshots in the order they were taken (`snapshot`), and the newest one sent: a
    /// snapshot sent after a newer one (by another slot, outside the core's lock) is dropped,
    /// so the display never steps back.
    taken: AtomicU64,
    sent: Arc<Mutex<u64>>,
    direction: Direction,
    failures: BTreeMap<String, u64>,
    best: Option<(i64, f64)>,
    /// Several objectives: the front, and each objective's name.
    front: Option<(Front, Vec<String>)>,
    /// One objective: its name (for the metrics).
    name: String,
    finished_at_start: u64,
}

impl Tracker {
    /// `best`: the study's best trial when the run starts (number, value).
    pub fn new(
        tx: watch::Sender<Progress>,
        direction: Direction,
        best: Option<(i64, f64)>,
        finished_at_start: u64,
    ) -> Tracker {
        Tracker {
            tx,
            taken: AtomicU64::new(0),
            sent: Arc::default(),
            direction,
            failures: BTreeMap::new(),
            best,
            front: None,
            name: "values_0".to_owned(),
            finished_at_start,
        }
    }

    /// Names the single objective (its metric name).
    pub fn named(self, name: String) -> Tracker {
        Tracker { name, ..self }
    }

    /// A tracker for a study with several objectives, named `names`, whose front is `front`
    /// when the run starts.
    pub fn several(
        tx: watch::Sender<Progress>,
        front: Front,
        names: Vec<String>,
        finished_at_start: u64,
    ) -> Tracker {
        Tracker {
            front: Some((front, names)),
            ..Tracker::new(tx, Direction::Minimize, None, finished_at_start)
        }
    }

    pub fn failed(&mut self, kind: &str) {
        *self.failures.entry(kind.to_owned()).or_default() += 1;
    }

    pub fn completed(&mut self, number: i64, values: &[f64]) {
        if let Some((front, _)) = &mut self.front {
            front.insert(number, values);
            return;
        }
        let Some(&value) = values.first() else {
            return;
        };
        if self
            .best
            .is_none_or(|(_, b)| self.direction.better(value, b))
        {
            self.best = Some((number, value));
        }
    }

    /// Several objectives: the front's size and each objective's (name, best value).
    pub fn front(&self) -> Option<FrontSummary> {
        self.front.as_ref().map(|(front, names)| {
            let best = names.iter().cloned().zip(front.best()).collect();
            (front.len(), best)
        })
    }

    /// One objective: the best trial so far (number, value).
    pub fn best(&self) -> Option<(i64, f64)> {
        self.best
    }

    /// Per objective, its name and best value so far (the front's, with several objectives).
    pub fn bests(&self) -> Vec<(String, Option<f64>)> {
        match self.front() {
            Some((_, best)) => best,
            None => vec![(self.name.clone(), self.best.map(|b| b.1))],
        }
    }

    /// The best value(s) so far in a few words, for the daemon's status line.
    pub fn best_text(&self) -> String {
        match (self.front(), self.best) {
            (Some((0, _)), _) | (None, None) => "no result yet".to_owned(),
            (Some((n, best)), _) => format!("Pareto front {n} trials ({})", bests_text(&best)),
            (None, Some((_, b))) => format!("best {b:.6}"),
        }
    }

    /// Sends `p` with this tracker's part filled in. Nobody listening is fine.
    pub fn publish(&self, p: Progress) {
        self.snapshot(p).send();
    }

    /// `p` with this tracker's part filled in, to be sent later (see [`Snapshot`]).
    pub fn snapshot(&self, mut p: Progress) -> Snapshot {
        p.finished_here = p.finished.saturating_sub(self.finished_at_start);
        p.failures = self.failures.clone();
        p.best = self.best;
        p.front = self.front();
        Snapshot {
            seq: self.taken.fetch_add(1, Ordering::Relaxed) + 1,
            bests: self.bests(),
            progress: p,
            tx: self.tx.clone(),
            sent: self.sent.clone(),
        }
    }
}

/// A [`Progress`] taken where its state is consistent (under the supervisor's core lock) and
/// sent where sending costs no one a wait (a finished trial's, once its commit is durable,
/// outside that lock, so that the other slots' starts do not wait for a display update).
#[derive(Debug)]
pub struct Snapshot {
    seq: u64,
    progress: Progress,
    /// Per objective, its name and best value, as [`Tracker::bests`] had them.
    pub bests: Vec<(String, Option<f64>)>,
    tx: watch::Sender<Progress>,
    sent: Arc<Mutex<u64>>,
}

impl Snapshot {
    /// Several objectives: the front's size, as [`Tracker::front`] had it.
    pub fn front_len(&self) -> Option<usize> {
        self.progress.front.as_ref().map(|f| f.0)
    }

    /// Sends it, unless a newer one was sent already: `false` then, and it is dropped.
    pub fn send(self) -> bool {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        if *sent > self.seq {
            return false;
        }
        *sent = self.seq;
        let p = self.progress;
        self.tx.send_if_modified(|old| {
            let changed = *old != p;
            *old = p;
            changed
        });
        true
    }
}

/// "loss 0.31, latency_ms 12": each objective's best.
fn bests_text(best: &[(String, Option<f64>)]) -> String {
    best.iter()
        .map(|(name, b)| format!("{name} {}", b.map_or("-".into(), |b| b.to_string())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the run stands with respect to stopping, for the display's first line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopping {
    No,
    /// First SIGINT/SIGTERM: running trials get their grace.
    Gracefully,
    /// Second one: the workers are being killed.
    Now,
    /// The run is over (the last frame, left on the screen): no ETA.
    Ended,
}

/// The display's text: two or three lines, the first with a bar when there is a budget.
pub fn render(p: &Progress, now: Instant, stopping: Stopping, spinner: &str) -> String {
    let elapsed = p.started.map_or(Duration::ZERO, |s| now.duration_since(s));
    let mut first = match stopping {
        Stopping::No if p.paused => "PAUSED (every device quarantined) ".to_owned(),
        Stopping::No | Stopping::Ended => String::new(),
        Stopping::Gracefully => "stopping: press Ctrl-C again to stop now. ".to_owned(),
        Stopping::Now => "stopping now: killing the workers. ".to_owned(),
    };
    match p.budget {
        Some(n) => {
            const WIDTH: u64 = 24;
            let filled = (p.finished.min(n) * WIDTH).checked_div(n).unwrap_or(WIDTH);
            first.push_str(&format!(
                "{}/{n} finished [{}{}]",
                p.finished,
                "#".repeat(filled as usize),
                "-".repeat((WIDTH - filled) as usize)
            ));
        }
        None => first.push_str(&format!("{} finished", p.finished)),
    }
    first.push_str(&format!("  elapsed {}", short(elapsed)));
    if stopping != Stopping::Ended {
        first.push_str(&format!("  {}", eta(p, elapsed)));
    }
    let running = if p.gpus.is_empty() {
        format!("running {}/{}", p.running, p.max_par)
    } else {
        let per: Vec<String> = p.gpus.iter().map(|(d, n)| format!("gpu{d} {n}")).collect();
        format!("running {}/{} ({})", p.running, p.max_par, per.join(", "))
    };
    let best = match (&p.front, p.best) {
        (Some((0, _)), _) | (None, None) => "best: no COMPLETE trial yet".to_owned(),
        (Some((n, best)), _) => format!("Pareto front {n} trials, best {}", bests_text(best)),
        (None, Some((number, v))) => format!("best {v} (trial {number})"),
    };
    let failures = if p.failures.is_empty() {
        "failures: none".to_owned()
    } else {
        let by: Vec<String> = p.failures.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!("failures: {}", by.join(", "))
    };
    format!("{spinner}{first}\n  {running}  {best}\n  {failures}")
}

/// The remaining budget at this run's rate, or the timeout left, whichever ends first.
fn eta(p: &Progress, elapsed: Duration) -> String {
    let by_budget = p.budget.map(|n| {
        let left = n.saturating_sub(p.finished);
        if left == 0 {
            Some(Duration::ZERO)
        } else if p.finished_here == 0 {
            None // no rate yet
        } else {
            Some(elapsed.mul_f64(left as f64 / p.finished_here as f64))
        }
    });
    let by_timeout = p.timeout.map(|t| t.saturating_sub(elapsed));
    match (by_budget, by_timeout) {
        (None, None) => "ETA: no budget".to_owned(),
        (None, Some(t)) => format!("ETA {} (timeout)", short(t)),
        (Some(None), None) => "ETA ? (no trial finished yet)".to_owned(),
        (Some(None), Some(t)) => format!("ETA {} at most (timeout)", short(t)),
        (Some(Some(d)), Some(t)) if t < d => format!("ETA {} (timeout)", short(t)),
        (Some(Some(d)), _) => format!("ETA {}", short(d)),
    }
}

/// "12s", "3m07s", "1h02m", "2d03h".
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

/// The live display on stderr. Cloning shares it.
#[derive(Clone)]
pub struct Display {
    bar: ProgressBar,
}

const SPINNER: &[&str] = &["|", "/", "-", "\\"];

impl Default for Display {
    fn default() -> Display {
        Display::new()
    }
}

impl Display {
    pub fn new() -> Display {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template("{msg}").expect("a valid template"));
        Display { bar }
    }

    /// A `tracing` writer that puts each log line above the display.
    pub fn log_writer(&self) -> LogWriter {
        LogWriter {
            bar: self.bar.clone(),
        }
    }

    /// Redraws from `rx` until `done`: on every new snapshot, and twice a second for the
    /// clock and the spinner (which stops turning if the runtime wedges).
    pub async fn run(
        &self,
        mut rx: watch::Receiver<Progress>,
        shutdown: CancellationToken,
        kill_now: CancellationToken,
        done: CancellationToken,
    ) {
        let mut turn = 0usize;
        loop {
            let stopping = stopping(&shutdown, &kill_now);
            let p = rx.borrow_and_update().clone();
            if p.started.is_some() {
                let spin = format!("{} ", SPINNER[turn % SPINNER.len()]);
                self.bar
                    .set_message(render(&p, Instant::now(), stopping, &spin));
            }
            turn += 1;
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = done.cancelled() => return,
            }
        }
    }

    /// Draws the last snapshot once more and leaves it on the screen, above the summary line
    /// that follows; a run that ended before its study started (a locked study, say) leaves
    /// nothing.
    pub fn finish(&self, p: &Progress) {
        if p.started.is_none() {
            self.bar.finish_and_clear();
            return;
        }
        self.bar
            .set_message(render(p, Instant::now(), Stopping::Ended, ""));
        self.bar.abandon();
    }
}

fn stopping(shutdown: &CancellationToken, kill_now: &CancellationToken) -> Stopping {
    if kill_now.is_cancelled() {
        Stopping::Now
    } else if shutdown.is_cancelled() {
        Stopping::Gracefully
    } else {
        Stopping::No
    }
}

/// `tracing`'s writer while the display is up: one formatted event per writer, written in
/// one piece with the display lifted.
#[derive(Clone)]
pub struct LogWriter {
    bar: ProgressBar,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine {
            bar: self.bar.clone(),
            buf: Vec::new(),
        }
    }
}

/// One log event being formatted; written out when dropped.
pub struct LogLine {
    bar: ProgressBar,
    buf: Vec<u8>,
}

impl Write for LogLine {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        // A closed terminal must not turn a log line into a panic.
        self.bar.suspend(|| {
            let _ = std::io::stderr().write_all(&buf);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> (Progress, Instant) {
        let start = Instant::now();
        let p = Progress {
            started: Some(start),
            finished: 30,
            finished_here: 20,
            budget: Some(60),
            running: 2,
            max_par: 4,
            ..Progress::default()
        };
        (p, start)
    }

    #[test]
    fn a_snapshot_sent_after_a_newer_one_is_dropped_so_the_display_never_steps_back() {
        let (tx, rx) = watch::channel(Progress::default());
        let tracker = Tracker::new(tx, Direction::Minimize, None, 0);
        let at = |finished| Progress {
            finished,
            ..Progress::default()
        };
        // Two slots take their snapshots in the core's order, and send them outside it in
        // the other order.
        let older = tracker.snapshot(at(5));
        let newer = tracker.snapshot(at(6));
        assert!(newer.send());
        assert!(!older.send());
        assert_eq!(rx.borrow().finished, 6);
        // Sent in order, both go through.
        let (a, b) = (tracker.snapshot(at(7)), tracker.snapshot(at(8)));
        assert!(a.send());
        assert_eq!(rx.borrow().finished, 7);
        assert!(b.send());
        assert_eq!(rx.borrow().finished, 8);
    }

    #[test]
    fn eta_comes_from_this_runs_rate_and_the_remaining_budget() {
        let (p, start) = snapshot();
        // 20 trials in 100 s here, 30 left: 150 s.
        let text = render(&p, start + Duration::from_secs(100), Stopping::No, "");
        assert!(
            text.contains("30/60 finished [############------------]"),
            "{text}"
        );
        assert!(text.contains("elapsed 1m40s"), "{text}");
        assert!(text.contains("ETA 2m30s"), "{text}");
    }

    #[test]
    fn eta_without_a_budget_says_so_and_a_timeout_caps_it() {
        let (mut p, start) = snapshot();
        p.budget = None;
        let at = start + Duration::from_secs(100);
        assert!(render(&p, at, Stopping::No, "").contains("ETA: no budget"));
        p.timeout = Some(Duration::from_secs(160));
        assert!(render(&p, at, Stopping::No, "").contains("ETA 1m00s (timeout)"));
        p.budget = Some(60);
        p.finished_here = 0;
        let text = render(&p, at, Stopping::No, "");
        assert!(text.contains("ETA 1m00s at most (timeout)"), "{text}");
    }

    #[test]
    fn the_display_names_gpus_failures_best_and_stopping() {
        let (mut p, start) = snapshot();
        p.gpus = [(0, 1), (1, 1)].into_iter().collect();
        p.failures = [("oom".to_owned(), 2), ("timeout".to_owned(), 1)]
            .into_iter()
            .collect();
        p.best = Some((17, 0.388));
        let text = render(&p, start, Stopping::Gracefully, "");
        assert!(text.starts_with("stopping: press Ctrl-C again"), "{text}");
        assert!(text.contains("running 2/4 (gpu0 1, gpu1 1)"), "{text}");
        assert!(text.contains("best 0.388 (trial 17)"), "{text}");
        assert!(text.contains("failures: oom 2, timeout 1"), "{text}");
        p.gpus.clear();
        assert!(render(&p, start, Stopping::No, "").contains("running 2/4  best"));
    }

    #[test]
    fn the_tracker_keeps_the_best_in_the_studys_direction() {
        let (tx, rx) = watch::channel(Progress::default());
        let mut t = Tracker::new(tx, Direction::Maximize, Some((3, 1.0)), 5);
        t.completed(4, &[0.5]);
        t.completed(6, &[2.0]);
        t.failed("oom");
        t.failed("oom");
        t.publish(Progress {
            finished: 9,
            ..Progress::default()
        });
        let p = rx.borrow().clone();
        assert_eq!(p.best, Some((6, 2.0)));
        assert_eq!(p.finished_here, 4);
        assert_eq!(p.failures.get("oom"), Some(&2));
    }

    #[test]
    fn several_objectives_show_the_front_and_each_best() {
        let (tx, rx) = watch::channel(Progress::default());
        let d = [Direction::Minimize, Direction::Maximize];
        let names = vec!["loss".to_owned(), "acc".to_owned()];
        let mut t = Tracker::several(tx, Front::new(&d), names, 0);
        assert_eq!(t.best_text(), "no result yet");
        t.completed(0, &[1.0, 0.5]);
        t.completed(1, &[0.5, 0.9]); // dominates trial 0
        t.completed(2, &[0.2, 0.1]);
        t.publish(Progress::default());
        let p = rx.borrow().clone();
        let want = vec![
            ("loss".to_owned(), Some(0.2)),
            ("acc".to_owned(), Some(0.9)),
        ];
        assert_eq!(p.front, Some((2, want)));
        let (start, now) = (Instant::now(), Instant::now());
        let text = render(
            &Progress {
                started: Some(start),
                ..p
            },
            now,
            Stopping::No,
            "",
        );
        assert!(
            text.contains("Pareto front 2 trials, best loss 0.2, acc 0.9"),
            "{text}"
        );
        assert_eq!(t.best_text(), "Pareto front 2 trials (loss 0.2, acc 0.9)");
    }
}
