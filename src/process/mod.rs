//! Worker processes: a `Worker` from its start to its end.
//!
//! A worker is the user's program, started as argv (never through a shell) in a process group
//! of its own, so that the processes it forks (DataLoader children, a stray `subprocess`) can
//! be found and killed with it. It talks to sweepd over a Unix socket inherited as fd 3
//! (`SWEEPD_FD`), never over stdout: the user's prints go to a per-worker log file and cannot
//! corrupt the protocol.
//!
//! The parts, each in its file: `spawn.rs` starts the process, `channel.rs` is the protocol and
//! sweepd's end of the socket, `output.rs` captures stdout and stderr (log, rotation, stderr
//! tail), `procfs.rs` reads /proc and ends process groups. This file ties them into the
//! lifecycle: the next event (message, garbage, channel closed, exit), sends, and the kills.
//!
//! Nothing a worker does may take the daemon down: lines are length-bounded, the log file is
//! size-capped and written off the async runtime, every wait is bounded, and a `Worker` dropped
//! in any state kills its group.

mod channel;
mod output;
mod procfs;
mod spawn;

pub use channel::{
    numbers, parse_line, Event, FrameworkMemory, Message, WorkerMemory, CHANNEL_FD, MAX_LINE,
};
pub use output::{create_private_dir, log_path};
pub use procfs::{
    group_members, group_members_off_runtime, kill_pid, kill_stale_group, proc_identity, proc_stat,
    ProcStat,
};
pub use spawn::SpawnSpec;

use channel::Channel;
use nix::sys::signal::Signal;
use output::{open_log, pump, Output};
use serde_json::Value;
use std::collections::VecDeque;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncRead;

/// How long a worker whose channel reached end of file has to exit before it counts as one that
/// dropped its channel and lives on.
const EXIT_AFTER_CLOSE: Duration = Duration::from_millis(500);
/// How long the leader's exit may take to be seen once its group is gone.
const EXIT_AFTER_KILL: Duration = Duration::from_secs(5);
/// How many of its last trials a worker remembers, to tell a late message for one of them
/// from a message for a trial it never ran.
const ENDED_KEPT: usize = 64;

/// A running worker process and its end of the channel.
pub struct Worker {
    pub id: i64,
    pub pid: u32,
    pub log_path: PathBuf,
    child: spawn::Child,
    channel: Channel,
    output: Arc<Output>,
    /// Events already read but not yet handed out (messages drained after the process exited).
    pending: VecDeque<Event>,
    exit: Option<ExitStatus>,
    /// The trial ids of the last trials it ran ([`ENDED_KEPT`]), newest last.
    ended: VecDeque<i64>,
    /// What its framework said of its process's memory (`ready`, `memory` messages), and what
    /// sweepd measured of it: the supervisor's to keep, the caps of its trials come from it.
    pub memory: WorkerMemory,
    /// The memory cap it was started with (in its environment: fixed for its life where the
    /// framework reads it once, as JAX and TensorFlow do).
    pub spawn_cap: Option<u64>,
}

impl Worker {
    /// Starts `spec` as worker `id`.
    pub fn spawn(id: i64, spec: &SpawnSpec) -> std::io::Result<Worker> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        if let Some(dir) = spec.log_path.parent() {
            create_private_dir(dir)?;
        }
        let output = Output::start(open_log(&spec.log_path)?, spec)?;
        let channel = Channel::new(ours)?;
        // All that can fail is done by now: a child without its Worker would have no one to
        // kill it.
        let mut child = spawn::start(spec, theirs)?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let pipes: [(Option<Box<dyn AsyncRead + Send + Unpin>>, bool); 2] = [
            (child.stdout().take().map(|p| Box::new(p) as _), false),
            (child.stderr().take().map(|p| Box::new(p) as _), true),
        ];
        for (pipe, is_err) in pipes {
            if let Some(pipe) = pipe {
                tokio::spawn(pump(pipe, output.clone(), is_err));
            }
        }
        Ok(Worker {
            id,
            pid,
            log_path: spec.log_path.clone(),
            child,
            channel,
            output,
            pending: VecDeque::new(),
            exit: None,
            ended: VecDeque::new(),
            memory: WorkerMemory::default(),
            spawn_cap: None,
        })
    }

    /// Trial `trial_id` ended on this worker: a message for it from now on is late.
    pub fn trial_ended(&mut self, trial_id: i64) {
        if self.ended.len() == ENDED_KEPT {
            self.ended.pop_front();
        }
        self.ended.push_back(trial_id);
    }

    /// Whether this worker ran trial `trial_id` (one of its last [`ENDED_KEPT`]) and it ended.
    pub fn ran(&self, trial_id: i64) -> bool {
        self.ended.contains(&trial_id)
    }

    /// The next message, garbage line, channel close or exit. Cancel-safe: dropping the future
    /// loses nothing.
    pub async fn next_event(&mut self) -> Event {
        if let Some(e) = self.pending.pop_front() {
            return e;
        }
        if let Some(status) = self.exit {
            return Event::Exited(status);
        }
        if self.channel.is_closed() {
            return self.wait_exit().await;
        }
        tokio::select! {
            event = self.channel.recv() => match event {
                Some(event) => event,
                // The worker closed its end: it is exiting, or it dropped the channel and lives
                // on. A process that exits closes it a moment before its exit is seen.
                None => match tokio::time::timeout(EXIT_AFTER_CLOSE, self.wait_child()).await {
                    Ok(status) => self.exited(status).await,
                    Err(_) => Event::Closed,
                },
            },
            status = Box::into_pin(self.child.wait()) => {
                let status = self.exited(status).await;
                self.drain_after_exit().await;
                self.pending.pop_front().unwrap_or(status)
            }
        }
    }

    /// Records the exit seen by `child.wait()`.
    async fn exited(&mut self, waited: std::io::Result<ExitStatus>) -> Event {
        let status = exit_status_of_wait(waited);
        self.exit = Some(status);
        // What it wrote just before dying may still be in its pipes.
        self.output.settled().await;
        Event::Exited(status)
    }

    /// The leader's exit, reaped by tokio. Never `try_wait` on this child: process-wrap's would
    /// reap the leader behind tokio's back, and tokio's wait would then fail.
    fn wait_child(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<ExitStatus>> + Send + '_>> {
        Box::into_pin(self.child.wait())
    }

    async fn wait_exit(&mut self) -> Event {
        let status = self.wait_child().await;
        self.exited(status).await
    }

    /// Messages sent just before exiting are still in the socket: read them, briefly (a forked
    /// grandchild may hold the channel open forever). Queued before the exit already recorded.
    async fn drain_after_exit(&mut self) {
        let exit = self.exit.map(Event::Exited);
        let left = self.channel.drain(Duration::from_millis(300)).await;
        self.pending.extend(left);
        self.pending.extend(exit);
    }

    /// Sends one message. Bounded: a worker that stops reading must not wedge the supervisor.
    pub async fn send(&mut self, msg: &Value) -> std::io::Result<()> {
        self.channel.send(msg).await
    }

    /// Writes a marker line into the worker's log (trial boundaries), after all it has printed so
    /// far, and waits (bounded) until it is written.
    pub async fn mark(&self, text: &str) {
        self.output.mark(text).await;
    }

    /// Forgets the stderr kept so far: called at each trial start, so that a trial's failure is
    /// classified from what it wrote, not from a traceback an earlier trial printed.
    pub fn reset_tail(&self) {
        self.output.reset_tail();
    }

    /// The last lines the worker wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.output.tail()
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// Waits up to `grace` for the worker to exit on its own (after a `shutdown` message).
    pub async fn wait_for_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(status) = tokio::time::timeout(grace, self.wait_child()).await {
                self.exited(status).await;
            }
        }
        self.exit
    }

    /// Ends the whole process group: SIGTERM, then SIGKILL after `grace`, and waits until no
    /// member is left (bounded). Returns the pids that were still alive at SIGKILL time.
    pub async fn kill_group(&mut self, grace: Duration) -> Vec<i32> {
        let survivors = procfs::end_group(self.pgid(), Some(grace), self.exit.is_some()).await;
        self.wait_for_exit(EXIT_AFTER_KILL).await;
        survivors
    }

    /// Ends the whole process group with SIGKILL, no grace (sweepd was told to stop now), and
    /// waits until no member is left (bounded). Returns the pids alive at SIGKILL time.
    pub async fn kill_group_now(&mut self) -> Vec<i32> {
        let members = procfs::end_group(self.pgid(), None, self.exit.is_some()).await;
        self.wait_for_exit(EXIT_AFTER_KILL).await;
        members
    }

    /// The worker leads its own group.
    fn pgid(&self) -> i32 {
        self.pid as i32
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Whatever path dropped us, leave no process of the group behind: process-wrap's
        // `start_kill` is a SIGKILL to the whole group. A group with no member left gives ESRCH,
        // and zombies do not mind a signal, so no /proc scan decides it first. (process-wrap's
        // `KillOnDrop` would not do: it is tokio's `kill_on_drop`, a SIGKILL to the leader alone.)
        let _ = self.child.start_kill();
    }
}

/// The status a wait on the leader stands for. A wait that failed (the child was reaped
/// elsewhere) has no status to give: the worker is gone and nobody saw how, which is read as a
/// kill by SIGKILL, never as the clean exit 0 a defaulted status would say.
fn exit_status_of_wait(waited: std::io::Result<ExitStatus>) -> ExitStatus {
    waited.unwrap_or_else(|_| ExitStatus::from_raw(Signal::SIGKILL as i32))
}

/// `s` cut to at most `max` bytes (on a char boundary), with an ellipsis if it was cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `(exit code, signal)` of a status.
pub fn code_and_signal(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

/// A status as a person reads it: "exit code 3", "killed by signal 9 (SIGKILL)".
pub fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (_, Some(s)) => {
            let name = nix::sys::signal::Signal::try_from(s)
                .map(|s| s.as_str().to_owned())
                .unwrap_or_else(|_| "?".into());
            format!("killed by signal {s} ({name})")
        }
        _ => "ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("ééé", 3), "é…");
    }

    #[test]
    fn a_failed_wait_reads_as_killed_by_sigkill_never_as_exit_0() {
        let reaped_elsewhere = || std::io::Error::from_raw_os_error(nix::libc::ECHILD);
        let cases = [
            (Ok(ExitStatus::from_raw(0)), "exit code 0"),
            (Ok(ExitStatus::from_raw(3 << 8)), "exit code 3"),
            (
                Ok(ExitStatus::from_raw(15)),
                "killed by signal 15 (SIGTERM)",
            ),
            (Err(reaped_elsewhere()), "killed by signal 9 (SIGKILL)"),
        ];
        for (waited, want) in cases {
            let status = exit_status_of_wait(waited);
            assert_eq!(describe_exit(status), want);
        }
        assert!(!exit_status_of_wait(Err(reaped_elsewhere())).success());
    }

    #[tokio::test]
    async fn a_dropped_worker_leaves_no_process_of_its_group_even_one_ignoring_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SpawnSpec {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "trap '' TERM; sleep 60 & sleep 60 & wait".into(),
            ],
            env: Vec::new(),
            cwd: dir.path().to_owned(),
            log_path: log_path(dir.path(), 1),
            log_max_bytes: 1 << 20,
            log_max_total: 1 << 20,
        };
        let w = Worker::spawn(1, &spec).unwrap();
        let pgid = w.pid as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let before = loop {
            let members = group_members(pgid);
            if members.len() >= 3 || std::time::Instant::now() > deadline {
                break members;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(before.len(), 3, "the shell and its two sleeps: {before:?}");
        drop(w);
        let alive =
            |pid: &i32| proc_stat(*pid).is_some_and(|st| st.state != 'Z' && st.state != 'X');
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while (before.iter().any(alive) || !group_members(pgid).is_empty())
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left: Vec<i32> = before.iter().copied().filter(alive).collect();
        assert!(left.is_empty(), "still alive after the drop: {left:?}");
        assert!(group_members(pgid).is_empty());
    }
}
