//! Worker processes: spawning, the protocol channel, output capture and group kills.
//!
//! A worker is the user's program, started as argv (never through a shell) in a process group
//! of its own, so that the processes it forks (DataLoader children, a stray `subprocess`) can
//! be found and killed with it. It talks to sweepd over a Unix socket inherited as fd 3
//! (`SWEEPD_FD`), never over stdout: the user's prints go to a per-worker log file and cannot
//! corrupt the protocol. The protocol itself is documented in `docs/protocol.md`. Log files
//! are created 0640 in directories created 0750 (what a program prints is its owner's
//! business), without touching the umask the worker inherits.
//!
//! Nothing a worker does may take the daemon down: lines are length-bounded, the log file is
//! size-capped, every wait is bounded by the caller, and a `Worker` dropped in any state kills
//! its group.

use futures::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// The fd number the channel has in every worker (`SWEEPD_FD`).
pub const CHANNEL_FD: i32 = 3;
/// The longest protocol line accepted; a longer one is a protocol error.
pub const MAX_LINE: usize = 1 << 20;
/// How long a worker whose channel reached end of file has to exit before it counts as one that
/// dropped its channel and lives on.
const EXIT_AFTER_CLOSE: Duration = Duration::from_millis(500);
/// Lines of stderr kept in memory to explain a failure.
const TAIL_LINES: usize = 40;
const TAIL_LINE_CHARS: usize = 2000;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log_path: PathBuf,
    /// The log file rotates (to `.1`) past this size.
    pub log_max_bytes: u64,
    /// All files in the log directory together: the oldest are deleted past this.
    pub log_max_total: u64,
}

/// A message from a worker (see docs/protocol.md).
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Ready,
    Report {
        trial_id: i64,
        step: i64,
        value: f64,
    },
    Result {
        trial_id: i64,
        value: Result<f64, String>,
    },
    Pruned {
        trial_id: i64,
    },
    Error {
        trial_id: i64,
        exc_type: String,
        message: String,
        traceback: String,
    },
    Heartbeat,
    /// A well-formed message of a type this version does not know: ignored.
    Other(String),
}

/// What happened next on a worker.
#[derive(Debug)]
pub enum Event {
    Msg(Message),
    /// A line that is not a protocol message; the text says why.
    Garbage(String),
    /// The worker closed its end of the channel but its process has not exited (yet). Said
    /// once; after it, only `Exited` follows. What it means is the caller's to decide: a
    /// persistent worker that keeps running without a channel can never finish its trial.
    Closed,
    Exited(ExitStatus),
}

/// A running worker process and its end of the channel.
pub struct Worker {
    pub id: i64,
    pub pid: u32,
    pub log_path: PathBuf,
    child: tokio::process::Child,
    reader: FramedRead<OwnedReadHalf, LinesCodec>,
    writer: OwnedWriteHalf,
    output: Arc<Output>,
    /// Events already read but not yet handed out (messages drained after the process exited).
    pending: VecDeque<Event>,
    exit: Option<ExitStatus>,
    /// The channel reached end of file: nothing more can be read from it.
    channel_closed: bool,
}

impl Worker {
    /// Starts `spec` as worker `id`.
    pub fn spawn(id: i64, spec: &SpawnSpec) -> std::io::Result<Worker> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        if let Some(dir) = spec.log_path.parent() {
            create_private_dir(dir)?;
        }
        let log = open_log(&spec.log_path)?;
        let mut cmd = tokio::process::Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..])
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("SWEEPD_FD", CHANNEL_FD.to_string())
            // systemd's notify socket is the daemon's, not its workers'.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let fd = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if fd == CHANNEL_FD {
                    // dup2 onto itself would keep close-on-exec set: clear it instead.
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, CHANNEL_FD) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(theirs);
        let pid = child.id().expect("a just-spawned child has a pid");
        let output = Arc::new(Output::new(log, spec));
        for (pipe, is_err) in [
            (
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
                true,
            ),
        ] {
            if let Some(pipe) = pipe {
                tokio::spawn(pump(pipe, output.clone(), is_err));
            }
        }
        ours.set_nonblocking(true)?;
        let (r, w) = tokio::net::UnixStream::from_std(ours)?.into_split();
        Ok(Worker {
            id,
            pid,
            log_path: spec.log_path.clone(),
            child,
            reader: FramedRead::new(r, LinesCodec::new_with_max_length(MAX_LINE)),
            writer: w,
            output,
            pending: VecDeque::new(),
            exit: None,
            channel_closed: false,
        })
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
        if self.channel_closed {
            return self.wait_exit().await;
        }
        tokio::select! {
            line = self.reader.next() => match line {
                Some(Ok(line)) => parse_line(&line),
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    Event::Garbage(format!("a protocol line longer than {MAX_LINE} bytes"))
                }
                Some(Err(e)) => Event::Garbage(e.to_string()),
                // The worker closed its end: it is exiting, or it dropped the channel and lives
                // on. A process that exits closes it a moment before its exit is seen.
                None => {
                    self.channel_closed = true;
                    match tokio::time::timeout(EXIT_AFTER_CLOSE, self.child.wait()).await {
                        Ok(status) => self.exited(status).await,
                        Err(_) => Event::Closed,
                    }
                }
            },
            status = self.child.wait() => {
                let status = self.exited(status).await;
                self.drain_after_exit().await;
                self.pending.pop_front().unwrap_or(status)
            }
        }
    }

    /// Records the exit seen by `child.wait()`. An error there (the child was reaped elsewhere)
    /// is not an exit status: it is reported as a kill by an unknown signal rather than read as
    /// a clean exit 0.
    async fn exited(&mut self, status: std::io::Result<ExitStatus>) -> Event {
        let status = status.unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL));
        self.exit = Some(status);
        self.settle_output().await;
        Event::Exited(status)
    }

    async fn wait_exit(&mut self) -> Event {
        let status = self.child.wait().await;
        self.exited(status).await
    }

    /// What a dead worker wrote just before dying may still be in its pipes: read it before
    /// anyone classifies the death from the stderr tail (bounded: a forked child may keep the
    /// pipes open).
    async fn settle_output(&self) {
        let pipes_closed = async {
            loop {
                let notified = self.output.closed_changed.notified();
                if self.output.closed.load(std::sync::atomic::Ordering::SeqCst) >= 2 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(500), pipes_closed).await;
    }

    /// Messages sent just before exiting are still in the socket: read them, briefly (a forked
    /// grandchild may hold the channel open forever). Queued before the exit already recorded.
    async fn drain_after_exit(&mut self) {
        let exit = self.exit.map(Event::Exited);
        let deadline = tokio::time::sleep(Duration::from_millis(300));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                line = self.reader.next() => match line {
                    Some(Ok(line)) => self.pending.push_back(parse_line(&line)),
                    Some(Err(e)) => self.pending.push_back(Event::Garbage(e.to_string())),
                    None => break,
                },
                _ = &mut deadline => break,
            }
        }
        self.pending.extend(exit);
    }

    /// Sends one message. Bounded: a worker that stops reading must not wedge the supervisor.
    pub async fn send(&mut self, msg: &Value) -> std::io::Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        match tokio::time::timeout(
            Duration::from_secs(10),
            self.writer.write_all(line.as_bytes()),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "worker does not read its channel",
            )),
        }
    }

    /// Writes a marker line into the worker's log (trial boundaries).
    pub fn mark(&self, text: &str) {
        self.output.mark(text);
    }

    /// Forgets the stderr kept so far: called at each trial start, so that a trial's failure is
    /// classified from what it wrote, not from a traceback an earlier trial printed.
    pub fn reset_tail(&self) {
        let mut o = self.output.inner.lock().unwrap_or_else(|p| p.into_inner());
        o.tail.clear();
        o.partial.clear();
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
            if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
                self.exited(status).await;
            }
        }
        self.exit
    }

    /// Ends the whole process group: SIGTERM, then SIGKILL after `grace`, and waits until no
    /// member is left (bounded). Returns the pids that were still alive at SIGKILL time.
    pub async fn kill_group(&mut self, grace: Duration) -> Vec<i32> {
        let pgid = self.pid as i32;
        let mut survivors = Vec::new();
        if !group_members(pgid).is_empty() || self.exit.is_none() {
            signal_group(pgid, libc::SIGTERM);
            if !wait_group_gone(pgid, grace).await {
                survivors = group_members(pgid);
                signal_group(pgid, libc::SIGKILL);
                wait_group_gone(pgid, Duration::from_secs(5)).await;
            }
        }
        self.wait_for_exit(Duration::from_secs(5)).await;
        survivors
    }

    /// Ends the whole process group with SIGKILL, no grace (sweepd was told to stop now), and
    /// waits until no member is left (bounded). Returns the pids alive at SIGKILL time.
    pub async fn kill_group_now(&mut self) -> Vec<i32> {
        let pgid = self.pid as i32;
        let members = group_members(pgid);
        if !members.is_empty() || self.exit.is_none() {
            signal_group(pgid, libc::SIGKILL);
            wait_group_gone(pgid, Duration::from_secs(5)).await;
        }
        self.wait_for_exit(Duration::from_secs(5)).await;
        members
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Whatever path dropped us, leave no process of the group behind.
        if self.exit.is_none() || !group_members(self.pid as i32).is_empty() {
            signal_group(self.pid as i32, libc::SIGKILL);
        }
    }
}

/// Parses one protocol line.
pub fn parse_line(line: &str) -> Event {
    let v: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Event::Garbage(format!("not a JSON object: {}", clip(line, 200))),
    };
    let trial_id = v["trial_id"].as_i64();
    let ty = v["type"].as_str().unwrap_or_default();
    let need_id = |m: fn(i64) -> Message| match trial_id {
        Some(id) => Event::Msg(m(id)),
        None => Event::Garbage(format!("`{ty}` without trial_id: {}", clip(line, 200))),
    };
    match ty {
        "ready" => Event::Msg(Message::Ready),
        "heartbeat" => Event::Msg(Message::Heartbeat),
        "pruned" => need_id(|trial_id| Message::Pruned { trial_id }),
        "report" => match (trial_id, v["step"].as_i64(), number(&v["value"])) {
            (Some(trial_id), Some(step), Ok(value)) => Event::Msg(Message::Report {
                trial_id,
                step,
                value,
            }),
            _ => Event::Garbage(format!("malformed report: {}", clip(line, 200))),
        },
        "result" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Result {
                trial_id,
                value: number(&v["value"]),
            }),
            None => Event::Garbage(format!("result without trial_id: {}", clip(line, 200))),
        },
        "error" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Error {
                trial_id,
                exc_type: v["exc_type"].as_str().unwrap_or("Exception").to_owned(),
                message: v["message"].as_str().unwrap_or_default().to_owned(),
                traceback: v["traceback"].as_str().unwrap_or_default().to_owned(),
            }),
            None => Event::Garbage(format!("error without trial_id: {}", clip(line, 200))),
        },
        "" => Event::Garbage(format!("message without a type: {}", clip(line, 200))),
        other => Event::Msg(Message::Other(other.to_owned())),
    }
}

/// A protocol number: JSON number, or "nan"/"inf"/"-inf" (JSON has no non-finite numbers).
fn number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| n.to_string()),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "nan" => Ok(f64::NAN),
            "inf" | "+inf" | "infinity" => Ok(f64::INFINITY),
            "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(clip(s, 200)),
        },
        other => Err(clip(&other.to_string(), 200)),
    }
}

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

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: plain syscall; a gone group gives ESRCH, which is fine.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

async fn wait_group_gone(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if group_members(pgid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Live (non-zombie) processes whose process group is `pgid`, from /proc.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|st| st.pgrp == pgid && st.state != 'Z' && st.state != 'X')
        })
        .collect()
}

/// The fields of /proc/PID/stat sweepd needs.
pub struct ProcStat {
    pub state: char,
    pub pgrp: i32,
    /// Clock ticks after boot: with the pid, identifies a process across pid reuse.
    pub start_time: u64,
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may hold spaces and parentheses: the fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        pgrp: f.get(2)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

/// Kills the process group led by `pid` if, and only if, that pid is still the process that
/// started at `start_time` (a pid reused by an unrelated process is left alone).
pub fn kill_stale_group(pid: i32, start_time: u64) -> bool {
    match proc_stat(pid) {
        Some(st) if st.start_time == start_time && st.pgrp == pid => {
            signal_group(pid, libc::SIGKILL);
            true
        }
        _ => false,
    }
}

/// The worker's log file and the tail of its stderr, shared with the pump tasks.
struct Output {
    inner: Mutex<OutputInner>,
    /// Pipes (stdout, stderr) that reached end of file, and a wake-up when one does: a process
    /// that wrote its CUDA error and died is classified only once that text is read.
    closed: std::sync::atomic::AtomicUsize,
    closed_changed: tokio::sync::Notify,
}

struct OutputInner {
    file: std::fs::File,
    path: PathBuf,
    written: u64,
    max_bytes: u64,
    max_total: u64,
    tail: VecDeque<String>,
    partial: String,
}

impl Output {
    fn new(file: std::fs::File, spec: &SpawnSpec) -> Output {
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Output {
            closed: std::sync::atomic::AtomicUsize::new(0),
            closed_changed: tokio::sync::Notify::new(),
            inner: Mutex::new(OutputInner {
                file,
                path: spec.log_path.clone(),
                written,
                max_bytes: spec.log_max_bytes,
                max_total: spec.log_max_total,
                tail: VecDeque::new(),
                partial: String::new(),
            }),
        }
    }

    fn write(&self, bytes: &[u8], is_err: bool) {
        let mut o = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if o.written >= o.max_bytes {
            o.rotate();
        }
        // Logging is best effort: a full disk must not stop the trial.
        let _ = o.file.write_all(bytes);
        o.written += bytes.len() as u64;
        if is_err {
            let text = String::from_utf8_lossy(bytes);
            for (i, piece) in text.split('\n').enumerate() {
                if i > 0 {
                    let line = std::mem::take(&mut o.partial);
                    o.tail.push_back(line);
                    if o.tail.len() > TAIL_LINES {
                        o.tail.pop_front();
                    }
                }
                if o.partial.len() < TAIL_LINE_CHARS {
                    let room = TAIL_LINE_CHARS - o.partial.len();
                    o.partial.push_str(&clip(piece, room));
                }
            }
        }
    }

    fn mark(&self, text: &str) {
        let mut o = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(o.file, "\n=== sweepd: {text} ===");
    }

    fn tail(&self) -> String {
        let o = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines: Vec<&str> = o.tail.iter().map(String::as_str).collect();
        if !o.partial.is_empty() {
            lines.push(&o.partial);
        }
        lines.join("\n")
    }
}

impl OutputInner {
    /// `worker-N.log` becomes `worker-N.log.1` (replacing an older one) and a fresh file
    /// starts; then the directory is trimmed to `max_total`, oldest files first.
    fn rotate(&mut self) {
        let rotated = self.path.with_extension("log.1");
        let _ = std::fs::rename(&self.path, &rotated);
        match open_log(&self.path) {
            Ok(f) => {
                self.file = f;
                self.written = 0;
                let _ = writeln!(
                    self.file,
                    "=== sweepd: log rotated, earlier output in {} ===",
                    rotated.display()
                );
            }
            // Keep writing to the renamed file rather than lose output.
            Err(_) => self.written = 0,
        }
        if let Some(dir) = self.path.parent() {
            trim_dir(dir, self.max_total, &self.path);
        }
    }
}

/// Creates `dir` (and missing parents) as 0750: what workers print, and their oneshot result
/// files, are for the service's user and group only. An existing directory is left alone.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
}

/// Opens a worker log for appending, creating it as 0640 (less under a stricter umask): the
/// process umask is left alone, since workers inherit it for their own files.
fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// Deletes the oldest worker log files in `dir` until they total at most `max_total`
/// (never the file in use).
fn trim_dir(dir: &Path, max_total: u64, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("worker-") {
                return None;
            }
            let m = e.metadata().ok()?;
            if !m.is_file() {
                return None;
            }
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max_total {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

/// Copies a pipe into the log until EOF. Never blocks the worker: the pipe is always drained.
async fn pump(mut pipe: Box<dyn AsyncRead + Send + Unpin>, output: Arc<Output>, is_err: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        output.write(&buf[..n], is_err);
    }
    output
        .closed
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    output.closed_changed.notify_waiters();
}

/// The log file for a worker.
pub fn log_path(dir: &Path, worker_id: i64) -> PathBuf {
    dir.join(format!("worker-{worker_id}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_message_kind() {
        assert!(matches!(
            parse_line(r#"{"type":"ready","pid":1,"protocol":1}"#),
            Event::Msg(Message::Ready)
        ));
        match parse_line(r#"{"type":"report","trial_id":3,"step":2,"value":"nan"}"#) {
            Event::Msg(Message::Report {
                trial_id: 3,
                step: 2,
                value,
            }) => assert!(value.is_nan()),
            e => panic!("{e:?}"),
        }
        match parse_line(r#"{"type":"result","trial_id":3,"value":"abc"}"#) {
            Event::Msg(Message::Result { value: Err(s), .. }) => assert_eq!(s, "abc"),
            e => panic!("{e:?}"),
        }
        assert!(matches!(
            parse_line(r#"{"type":"result","trial_id":3,"value":"-inf"}"#),
            Event::Msg(Message::Result { value: Ok(v), .. }) if v == f64::NEG_INFINITY
        ));
        assert!(matches!(
            parse_line(r#"{"type":"future_thing"}"#),
            Event::Msg(Message::Other(_))
        ));
    }

    #[test]
    fn garbage_is_reported_not_fatal() {
        assert!(matches!(parse_line("this is not json"), Event::Garbage(_)));
        assert!(matches!(parse_line("[1,2]"), Event::Garbage(_)));
        assert!(matches!(
            parse_line(r#"{"type":"result"}"#),
            Event::Garbage(_)
        ));
        assert!(matches!(
            parse_line(r#"{"type":"report","trial_id":1}"#),
            Event::Garbage(_)
        ));
    }

    #[test]
    fn proc_stat_reads_our_own_process() {
        let me = std::process::id() as i32;
        let st = proc_stat(me).expect("own stat");
        assert_eq!(st.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(st.start_time > 0);
    }

    #[tokio::test]
    async fn flooding_worker_logs_rotate_and_the_directory_stays_under_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        // An old log of another worker, the first to go when the directory is over its cap.
        let old = dir.path().join("worker-0.log");
        std::fs::write(&old, vec![b'o'; 30_000]).unwrap();
        let spec = SpawnSpec {
            argv: vec![
                "python3".into(),
                "-c".into(),
                "import sys\nfor i in range(300): sys.stdout.write('%05d' % i + 'x' * 995 + '\\n')"
                    .into(),
            ],
            env: Vec::new(),
            cwd: dir.path().to_owned(),
            log_path: log_path(dir.path(), 1),
            log_max_bytes: 16_000,
            log_max_total: 40_000,
        };
        let mut w = Worker::spawn(1, &spec).unwrap();
        while !matches!(w.next_event().await, Event::Exited(_)) {}
        // Let the pump tasks drain the pipe.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let current = std::fs::read_to_string(log_path(dir.path(), 1)).unwrap();
        assert!(
            current.contains("00299"),
            "the newest output is in the current file"
        );
        assert!(
            dir.path().join("worker-1.log.1").exists(),
            "rotated once at least"
        );
        assert!(
            !old.exists(),
            "the oldest file was deleted to respect the cap"
        );
        let total: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 40_000 + 16_000 + 2_000, "total {total}");
    }

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("ééé", 3), "é…");
    }
}
