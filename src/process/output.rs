//! A worker's output: stdout and stderr copied into its log file (trial boundaries marked), the
//! tail of stderr kept in memory to explain a failure, the log's rotation and the cap on the whole
//! log directory. Log files are created 0640 in directories created 0750 (what a program prints is
//! its owner's business), without touching the umask the worker inherits.

use super::{clip, SpawnSpec};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Lines of stderr kept in memory to explain a failure.
const TAIL_LINES: usize = 40;
const TAIL_LINE_CHARS: usize = 2000;

/// The worker's log file and the tail of its stderr, shared with the pump tasks.
pub(super) struct Output {
    pub(super) inner: Mutex<OutputInner>,
    /// Pipes (stdout, stderr) that reached end of file, and a wake-up when one does: a process
    /// that wrote its CUDA error and died is classified only once that text is read.
    pub(super) closed: std::sync::atomic::AtomicUsize,
    pub(super) closed_changed: tokio::sync::Notify,
}

pub(super) struct OutputInner {
    file: std::fs::File,
    path: PathBuf,
    written: u64,
    max_bytes: u64,
    max_total: u64,
    pub(super) tail: VecDeque<String>,
    pub(super) partial: String,
}

impl Output {
    pub(super) fn new(file: std::fs::File, spec: &SpawnSpec) -> Output {
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

    pub(super) fn mark(&self, text: &str) {
        let mut o = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(o.file, "\n=== sweepd: {text} ===");
    }

    pub(super) fn tail(&self) -> String {
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

/// Copies a pipe into the log until EOF. Never blocks the worker: the pipe is always drained.
pub(super) async fn pump(
    mut pipe: Box<dyn AsyncRead + Send + Unpin>,
    output: Arc<Output>,
    is_err: bool,
) {
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

    use crate::process::{Event, Worker};
    use std::time::Duration;

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
}
