//! A worker's output: stdout and stderr copied into its log file (trial boundaries marked), the
//! tail of stderr kept in memory to explain a failure, the log's rotation and the cap on the whole
//! log directory. Log files are created 0640 in directories created 0750 (what a program prints is
//! its owner's business), without touching the umask the worker inherits.
//!
//! The file work (writes, rotation, trimming the directory) is done by one thread per worker, never
//! on the async runtime: the pump tasks only read the pipes, keep the stderr tail, and queue what
//! they read for that thread, in order, with markers queued among it. The queue is bounded: when the
//! disk falls behind, the pumps stop reading and the worker waits on its pipe, while the daemon
//! goes on. Nothing read is dropped. The directory is trimmed to its cap when a log rotates and
//! when a new one starts (a oneshot worker's log, one per trial, rarely rotates).

use super::{clip, SpawnSpec};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

/// Lines of stderr kept in memory to explain a failure.
const TAIL_LINES: usize = 40;
const TAIL_LINE_CHARS: usize = 2000;
/// The most a pump reads at once.
const CHUNK: usize = 16 * 1024;
/// Chunks read but not yet written: past this (1 MiB), the pumps wait for the writer.
const QUEUED_CHUNKS: usize = 64;
/// How long a marker waits to be written: a disk that hangs delays a trial's start by this much,
/// no more.
const MARK_WAIT: Duration = Duration::from_secs(2);
/// How long [`Output::settled`] waits: a forked child may keep the pipes open for ever.
const SETTLE_WAIT: Duration = Duration::from_millis(500);
/// The writer thread's stack: it formats a line or two and lists a directory.
const WRITER_STACK: usize = 256 * 1024;
/// How far past `log_max_bytes` a log may grow to end the line in progress before it rotates:
/// a line longer than this is split between the two files.
const LINE_SLACK: u64 = 64 * 1024;

/// What the writer thread is asked to do, in the order asked.
enum Entry {
    /// Bytes read from a pipe, and the room they hold in the queue until written.
    Output(Vec<u8>, OwnedSemaphorePermit),
    /// A marker line, and whoever waits for it to be written.
    Mark(String, oneshot::Sender<()>),
    /// One pipe reached end of file.
    Eof,
}

/// A worker's output, shared by the `Worker` and its two pump tasks.
pub(super) struct Output {
    queue: mpsc::UnboundedSender<Entry>,
    /// Room in the queue for pipe output (markers take none: they are few, and must never wait
    /// behind a worker's flood to be queued).
    room: Arc<Semaphore>,
    tail: Mutex<Tail>,
    /// How many pipes the writer has seen the end of, everything before it written.
    eofs_written: watch::Receiver<usize>,
}

impl Output {
    /// Starts the writer thread for `file`, the log at `spec.log_path`.
    pub(super) fn start(file: std::fs::File, spec: &SpawnSpec) -> std::io::Result<Arc<Output>> {
        let log = LogFile {
            written: file.metadata().map(|m| m.len()).unwrap_or(0),
            at_line_start: true,
            file,
            path: spec.log_path.clone(),
            max_bytes: spec.log_max_bytes,
            max_total: spec.log_max_total,
        };
        let (queue, entries) = mpsc::unbounded_channel();
        let (eofs, eofs_written) = watch::channel(0);
        std::thread::Builder::new()
            .name("sweepd-log".into())
            .stack_size(WRITER_STACK)
            .spawn(move || log.run(entries, eofs))?;
        Ok(Arc::new(Output {
            queue,
            room: Arc::new(Semaphore::new(QUEUED_CHUNKS)),
            tail: Mutex::new(Tail::default()),
            eofs_written,
        }))
    }

    /// Writes a marker line into the log after everything read so far, and waits (bounded) until
    /// it is written: a marker the daemon logged is in the file even if the daemon exits next.
    pub(super) async fn mark(&self, text: &str) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Entry::Mark(text.to_owned(), done)).is_ok() {
            let _ = tokio::time::timeout(MARK_WAIT, written).await;
        }
    }

    /// Waits until both pipes reached end of file and all they carried is in the log and the
    /// tail: what a dead worker wrote just before dying is read before anyone classifies the
    /// death from the stderr tail. Bounded by [`SETTLE_WAIT`].
    pub(super) async fn settled(&self) {
        let mut eofs = self.eofs_written.clone();
        let _ = tokio::time::timeout(SETTLE_WAIT, eofs.wait_for(|n| *n >= 2)).await;
    }

    /// Whether both pipes reached end of file and all they carried is written.
    #[cfg(test)]
    pub(super) fn written(&self) -> bool {
        *self.eofs_written.borrow() >= 2
    }

    pub(super) fn reset_tail(&self) {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub(super) fn tail(&self) -> String {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).text()
    }
}

/// The last lines of stderr, each clipped.
#[derive(Default)]
struct Tail {
    lines: VecDeque<String>,
    /// The line being written (no newline yet).
    partial: String,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for (i, piece) in text.split('\n').enumerate() {
            if i > 0 {
                let line = std::mem::take(&mut self.partial);
                self.lines.push_back(line);
                if self.lines.len() > TAIL_LINES {
                    self.lines.pop_front();
                }
            }
            if self.partial.len() < TAIL_LINE_CHARS {
                let room = TAIL_LINE_CHARS - self.partial.len();
                self.partial.push_str(&clip(piece, room));
            }
        }
    }

    fn clear(&mut self) {
        self.lines.clear();
        self.partial.clear();
    }

    fn text(&self) -> String {
        let mut lines: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        if !self.partial.is_empty() {
            lines.push(&self.partial);
        }
        lines.join("\n")
    }
}

/// The log file, owned by the writer thread.
struct LogFile {
    file: std::fs::File,
    path: PathBuf,
    written: u64,
    /// Whether the last byte written ended a line (or nothing was written yet).
    at_line_start: bool,
    max_bytes: u64,
    max_total: u64,
}

impl LogFile {
    /// Writes what is queued, in order, until every sender is gone and the queue is empty.
    /// First the directory is trimmed to `max_total`: a oneshot worker's log, short and
    /// written once, never rotates, and a new log for each trial would otherwise pile up.
    fn run(mut self, mut entries: mpsc::UnboundedReceiver<Entry>, eofs: watch::Sender<usize>) {
        self.trim();
        while let Some(entry) = entries.blocking_recv() {
            match entry {
                // The room is given back once the bytes are written (the permit drops here).
                Entry::Output(bytes, _room) => self.write(&bytes),
                Entry::Mark(text, done) => {
                    self.mark(&text);
                    let _ = done.send(());
                }
                Entry::Eof => eofs.send_modify(|n| *n += 1),
            }
        }
    }

    fn write(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            // A pipe's reads cut lines anywhere, and a line split between two files is found by
            // neither's grep: the line in progress ends in this file before it rotates (no room
            // left: cut after its end).
            let in_line =
                !self.at_line_start && self.written < self.max_bytes.saturating_add(LINE_SLACK);
            if self.written >= self.max_bytes && !in_line {
                self.rotate();
            }
            // A read can bring many lines at once (a worker that floods its pipe while we are
            // busy): what goes past this file's room waits for the next file, cut after the
            // line that crosses it, so that no file holds much more than `max_bytes`.
            let room = self.max_bytes.saturating_sub(self.written) as usize;
            let end = if bytes.len() <= room {
                bytes.len()
            } else {
                bytes[room..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |e| room + e + 1)
            };
            self.append(&bytes[..end]);
            bytes = &bytes[end..];
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        // Logging is best effort: a full disk must not stop the trial.
        let _ = self.file.write_all(bytes);
        self.written += bytes.len() as u64;
        self.at_line_start = bytes.ends_with(b"\n");
    }

    fn mark(&mut self, text: &str) {
        let _ = writeln!(self.file, "\n=== sweepd: {text} ===");
        self.at_line_start = true;
    }

    /// `worker-N.log` becomes `worker-N.log.1` (replacing an older one) and a fresh file
    /// starts; then the directory is trimmed to `max_total`, oldest files first.
    fn rotate(&mut self) {
        let rotated = self.path.with_extension("log.1");
        let _ = std::fs::rename(&self.path, &rotated);
        match open_log(&self.path) {
            Ok(f) => {
                self.file = f;
                self.written = 0;
                self.at_line_start = true;
                let _ = writeln!(
                    self.file,
                    "=== sweepd: log rotated, earlier output in {} ===",
                    rotated.display()
                );
            }
            // Keep writing to the renamed file rather than lose output.
            Err(_) => self.written = 0,
        }
        self.trim();
    }

    /// Deletes the oldest worker logs of the directory while they total more than `max_total`.
    fn trim(&self) {
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
pub(super) fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
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

/// Copies a pipe into the log until EOF, stderr into the tail as well. Room in the queue comes
/// first: with the writer behind, the bytes wait in the pipe (and the worker on it), not in our
/// memory.
pub(super) async fn pump(
    mut pipe: Box<dyn AsyncRead + Send + Unpin>,
    output: Arc<Output>,
    is_err: bool,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let Ok(room) = output.room.clone().acquire_owned().await else {
            break;
        };
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if is_err {
            output
                .tail
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(&buf[..n]);
        }
        // A writer gone (it cannot be, short of a panic) gives the entry back: dropped, with its
        // room, and the pipe is still drained.
        let _ = output.queue.send(Entry::Output(buf[..n].to_vec(), room));
    }
    let _ = output.queue.send(Entry::Eof);
}

/// The log file for a worker.
pub fn log_path(dir: &Path, worker_id: i64) -> PathBuf {
    dir.join(format!("worker-{worker_id}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::process::{Event, Worker};

    fn python(code: &str, dir: &Path, log_max_bytes: u64, log_max_total: u64) -> SpawnSpec {
        SpawnSpec {
            argv: vec!["python3".into(), "-c".into(), code.into()],
            env: Vec::new(),
            cwd: dir.to_owned(),
            log_path: log_path(dir, 1),
            log_max_bytes,
            log_max_total,
        }
    }

    #[test]
    fn the_tail_keeps_the_last_lines_each_clipped_without_the_final_newline() {
        let long = "y".repeat(TAIL_LINE_CHARS + 10);
        let many: String = (0..TAIL_LINES + 5).map(|i| format!("line {i}\n")).collect();
        let cases: [(&[&str], String); 5] = [
            (&["no newline yet"], "no newline yet".into()),
            (&["a\nb", "c\n"], "a\nbc".into()),
            (&["half", " a line\nnext"], "half a line\nnext".into()),
            (
                &[&many],
                (5..TAIL_LINES + 5)
                    .map(|i| format!("line {i}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            (
                &[&long, &long, "\n"],
                format!("{}…", &long[..TAIL_LINE_CHARS]),
            ),
        ];
        for (pushes, want) in cases {
            let mut tail = Tail::default();
            for p in pushes {
                tail.push(p.as_bytes());
            }
            assert_eq!(tail.text(), want, "{pushes:?}");
            tail.clear();
            assert_eq!(tail.text(), "");
        }
    }

    #[tokio::test]
    async fn last_words_on_stderr_are_in_the_tail_when_the_exit_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        // More than one read of the pipe, then an exit with no flush left to do.
        let code = "import os, sys\nsys.stderr.write('x' * 100000 + '\\nCUDA error: last words\\n')\nsys.stderr.flush()\nos._exit(3)";
        let mut w = Worker::spawn(1, &python(code, dir.path(), 1 << 30, 1 << 30)).unwrap();
        while !matches!(w.next_event().await, Event::Exited(_)) {}
        assert!(
            w.stderr_tail().ends_with("\nCUDA error: last words"),
            "{:?}",
            &w.stderr_tail()[w.stderr_tail().len().saturating_sub(100)..]
        );
    }

    /// A log that takes no more writes (a disk that hangs) may hold up the worker on its pipe,
    /// never the runtime; once it takes writes again, every line arrives, in order.
    #[test]
    fn a_stalled_log_holds_up_the_worker_not_the_runtime_and_loses_no_line() {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        const LINES: usize = 20_000; // 2 MB: past the FIFO's buffer and the queue together
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(dir.path(), 1);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        // A reader that reads nothing yet: the log opens, and fills after 64 KiB.
        let stalled = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let code = format!("for i in range({LINES}): print('%06d' % i + 'x' * 93)");
        let spec = python(&code, dir.path(), u64::MAX, u64::MAX);
        let (said, hear) = std::sync::mpsc::channel();
        let daemon = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut w = Worker::spawn(1, &spec).unwrap();
                // The worker can neither finish nor say anything: its output has nowhere to go.
                let held = tokio::time::timeout(Duration::from_secs(2), w.next_event()).await;
                said.send(held.is_err()).unwrap();
                let ended = tokio::time::timeout(Duration::from_secs(60), async {
                    while !matches!(w.next_event().await, Event::Exited(_)) {}
                })
                .await;
                assert!(
                    ended.is_ok(),
                    "the worker never finished once the log took writes"
                );
            });
        });
        // Were the runtime's thread writing the log, it would be stuck in write(2) by now.
        let held = hear
            .recv_timeout(Duration::from_secs(30))
            .expect("the runtime stopped with the log");
        assert!(
            held,
            "the worker finished although its output could not be written"
        );
        let mut reader = std::fs::File::open(&path).unwrap();
        drop(stalled);
        let mut text = String::new();
        // End of file once the worker is gone and its log writer with it.
        reader.read_to_string(&mut text).unwrap();
        daemon.join().unwrap();
        let numbers: Vec<usize> = text.lines().map(|l| l[..6].parse().unwrap()).collect();
        assert_eq!(numbers, (0..LINES).collect::<Vec<_>>());
    }

    /// Regression: a log rotated between two reads of the pipe that cut a line in two, so the
    /// line's start was in `worker-N.log.1` and its end in `worker-N.log` (seen as a flaky
    /// `flooding_worker_logs_rotate_and_the_directory_stays_under_its_cap`: the last line's
    /// number was not in the current file). Lines end in the file they began in, unless longer
    /// than `LINE_SLACK`; a rotation waits for something to write to the new file.
    #[test]
    fn logs_rotate_between_lines_not_inside_one() {
        let long = "y".repeat(LINE_SLACK as usize);
        let split = format!("012345678x{long}");
        // (reads of the pipe, with log_max_bytes 8) -> (the rotated file, the current file
        // after its header line; None: no rotation, the first is the current file)
        let cases: Vec<(Vec<&str>, &str, Option<&str>)> = vec![
            (
                vec!["0123456789", "ab\nnext\n"],
                "0123456789ab\n",
                Some("next\n"),
            ),
            (vec!["012345678\n", "next\n"], "012345678\n", Some("next\n")),
            (vec!["0123456789", "ab", "cd\n"], "0123456789abcd\n", None),
            (
                vec!["0123456789", "ab\n", "next\n"],
                "0123456789ab\n",
                Some("next\n"),
            ),
            // One read of several lines past the room: they go on in the next file.
            (vec!["0123\n5678\nabcd\n"], "0123\n5678\n", Some("abcd\n")),
            // Past the slack: the long line is split where the log rotated.
            (vec!["012345678x", &long, "z\n"], &split, Some("z\n")),
        ];
        for (i, (reads, old, new)) in cases.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let path = log_path(dir.path(), 1);
            let mut log = LogFile {
                file: open_log(&path).unwrap(),
                path: path.clone(),
                written: 0,
                at_line_start: true,
                max_bytes: 8,
                max_total: u64::MAX,
            };
            for r in reads {
                log.write(r.as_bytes());
            }
            let current = std::fs::read_to_string(&path).unwrap();
            let rotated = std::fs::read_to_string(path.with_extension("log.1"));
            match new {
                None => {
                    assert_eq!(current, *old, "case {i}");
                    assert!(rotated.is_err(), "case {i}: rotated");
                }
                Some(new) => {
                    let (header, body) = current.split_once('\n').unwrap();
                    assert!(header.contains("log rotated"), "case {i}: {header}");
                    assert_eq!(body, *new, "case {i}");
                    assert_eq!(rotated.unwrap(), *old, "case {i}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_new_log_trims_the_directory_to_its_cap_oldest_first() {
        // Oneshot workers: a short log each, none rotating. Before, only a rotation trimmed.
        let dir = tempfile::tempdir().unwrap();
        let old = |id: i64| log_path(dir.path(), id);
        for id in 1..=10 {
            std::fs::write(old(id), vec![b'o'; 4000]).unwrap();
            let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + id as u64);
            std::fs::File::options()
                .write(true)
                .open(old(id))
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        let spec = SpawnSpec {
            log_path: log_path(dir.path(), 11),
            ..python("print('hello')", dir.path(), 16_000, 16_000)
        };
        let mut w = Worker::spawn(11, &spec).unwrap();
        while !matches!(w.next_event().await, Event::Exited(_)) {}
        for _ in 0..120 {
            if w.output.written() {
                break;
            }
            w.output.settled().await;
        }
        let left: Vec<bool> = (1..=10).map(|id| old(id).exists()).collect();
        // 16 000 bytes hold the four newest of the old logs beside the new, empty one.
        assert_eq!(left, [&[false; 6][..], &[true; 4]].concat(), "{left:?}");
        assert!(std::fs::read_to_string(log_path(dir.path(), 11))
            .unwrap()
            .contains("hello"));
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
        // The exit is reported once the output is written, or after SETTLE_WAIT: on a loaded
        // machine the writer (300 lines, rotations, the directory's cap) can take longer.
        for _ in 0..120 {
            if w.output.written() {
                break;
            }
            w.output.settled().await;
        }
        assert!(w.output.written(), "the writer finished within a minute");
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
}
