//! `sweepd logs TRIAL [-f]`: one trial's worker output, from its first line, read from the log
//! of the worker that ran it (`sweepd:worker_id` → `sweepd_workers.log_path`), between the
//! markers the daemon writes around each trial (`process::output`): `=== sweepd: trial N
//! (trial_id I) start: … ===` and `=== sweepd: trial N end after …s: … ===`. With `-f` it follows
//! the log while the trial runs (waiting for a WAITING trial to start) and ends when the trial
//! ends, as `pueue follow` does. A log rotated meanwhile (`worker-N.log.1`) is read on into the
//! new file. A trial run on another host says which host holds its log, unless the file is
//! reachable here too (a shared file system).

use super::args::StudyArg;
use super::error::CliError;
use super::open::{open_study, Opened};
use crate::store::TrialLog;
use crate::supervisor;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often `-f` looks at the file, and at the trial's state.
const FILE_POLL: Duration = Duration::from_millis(200);
const STATE_POLL: Duration = Duration::from_secs(1);
/// After the trial is final, how long `-f` waits for its end marker (the daemon writes it
/// before it records the end; a trial ended by another process gets it when its worker stops).
const END_GRACE: Duration = Duration::from_secs(5);

pub(super) async fn logs(arg: &StudyArg, number: i64, follow: bool) -> Result<(), CliError> {
    let opened = open_study(arg).await?;
    let log = located(&opened, number, follow).await?;
    let path = log_file(&log)?;
    let mut out = std::io::stdout().lock();
    let mut scan = Scanner::new(log.number, log.trial_id);
    let mut tail = Tail::open(&path)?;
    let mut text = String::new();
    tail.read_all(&mut text)?;
    scan.feed(&text, &mut out);
    if !follow || scan.phase == Phase::Done {
        return finish(&mut scan, &log, &path, &mut out);
    }
    let mut final_since: Option<Instant> = None;
    let mut looked = Instant::now();
    loop {
        tokio::time::sleep(FILE_POLL).await;
        text.clear();
        tail.read_new(&mut text)?;
        scan.feed(&text, &mut out);
        let _ = out.flush();
        if scan.phase == Phase::Done {
            break;
        }
        if looked.elapsed() >= STATE_POLL {
            looked = Instant::now();
            let now = opened.store.trial_log(&opened.study, number).await?;
            if final_since.is_none() && now.is_none_or(|l| l.state.is_final()) {
                final_since = Some(Instant::now());
            }
        }
        if final_since.is_some_and(|t| t.elapsed() >= END_GRACE) {
            break;
        }
    }
    finish(&mut scan, &log, &path, &mut out)
}

/// Where trial `number`'s output is; with `follow`, waits for a WAITING trial to start.
async fn located(opened: &Opened, number: i64, follow: bool) -> Result<TrialLog, CliError> {
    let study = &opened.study;
    loop {
        let Some(log) = opened.store.trial_log(study, number).await? else {
            return Err(CliError::Usage(format!(
                "study `{}` has no trial {number} (numbers as `sweepd trials` shows them)",
                study.name
            )));
        };
        if log.worker_id.is_some() && log.log_path.is_some() {
            return Ok(log);
        }
        if log.state.is_final() {
            return Err(CliError::Refused(match log.worker_id {
                None => format!(
                    "trial {number} ({}) did not run on a sweepd worker (an Optuna script's, or \
                     ended before it started): it has no log",
                    log.state
                ),
                Some(w) => format!("trial {number}: worker {w} has no log file recorded"),
            }));
        }
        if !follow {
            return Err(CliError::Refused(format!(
                "trial {number} is {} and has not started on a worker yet: `sweepd logs \
                 {number} -f` waits for it",
                log.state
            )));
        }
        tokio::time::sleep(STATE_POLL).await;
    }
}

/// The log file of the trial's worker, if it can be read here.
fn log_file(log: &TrialLog) -> Result<PathBuf, CliError> {
    let path = PathBuf::from(log.log_path.as_deref().unwrap_or_default());
    let rotated = path.with_extension("log.1");
    if path.exists() || rotated.exists() {
        return Ok(path);
    }
    let here = supervisor::host_id().ok();
    let worker = log.worker_id.unwrap_or_default();
    Err(CliError::Refused(match &log.host {
        Some(host) if Some(host) != here.as_ref() => format!(
            "trial {} ran on host {host} (worker {worker}): its log is {host}:{}; run `sweepd \
             logs {}` there",
            log.number,
            path.display(),
            log.number
        ),
        _ => format!(
            "trial {}'s log {} is gone (deleted, or trimmed to [worker] log_max_total)",
            log.number,
            path.display()
        ),
    }))
}

/// The end of the output: what is left (the lines held before a possible marker), and a note
/// on stderr when the trial's lines are not all there.
fn finish(
    scan: &mut Scanner,
    log: &TrialLog,
    path: &Path,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let phase = scan.phase;
    scan.flush(out);
    let _ = out.flush();
    match phase {
        Phase::Done => Ok(()),
        Phase::In if !log.state.is_final() => Ok(()),
        Phase::In => {
            let _ = writeln!(
                std::io::stderr(),
                "sweepd: trial {}'s output ends without its end marker: its worker was killed \
                 or its daemon is gone",
                log.number
            );
            Ok(())
        }
        Phase::Before => Err(CliError::Refused(format!(
            "trial {}'s first lines are no longer in {} or its .1 (rotated away: [worker] \
             log_max_bytes)",
            log.number,
            path.display()
        ))),
    }
}

/// A worker log read from where it was last read, on into the new file when it rotates.
struct Tail {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Bytes read but not yet a whole line.
    partial: Vec<u8>,
}

impl Tail {
    fn open(path: &Path) -> Result<Tail, CliError> {
        Ok(Tail {
            path: path.to_owned(),
            file: None,
            partial: Vec::new(),
        })
    }

    /// The rotated file, then the current one, whole lines only.
    fn read_all(&mut self, text: &mut String) -> Result<(), CliError> {
        let mut bytes = Vec::new();
        if let Ok(mut old) = std::fs::File::open(self.path.with_extension("log.1")) {
            old.read_to_end(&mut bytes).map_err(|e| self.error(e))?;
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                bytes.push(b'\n');
            }
        }
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            f.read_to_end(&mut bytes).map_err(|e| self.error(e))?;
            self.file = Some(f);
        }
        self.take_lines(bytes, text);
        Ok(())
    }

    /// What was written since the last read: the rest of the file read so far (renamed to
    /// `.1` if the log rotated), then the new file from its start.
    fn read_new(&mut self, text: &mut String) -> Result<(), CliError> {
        let mut bytes = Vec::new();
        if let Some(f) = &mut self.file {
            f.read_to_end(&mut bytes)
                .map_err(|e| Tail::err(&self.path, e))?;
        }
        let current = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let ours = self
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| (m.dev(), m.ino()));
        if current.is_some() && current != ours {
            if let Ok(mut f) = std::fs::File::open(&self.path) {
                f.seek(SeekFrom::Start(0)).map_err(|e| self.error(e))?;
                f.read_to_end(&mut bytes).map_err(|e| self.error(e))?;
                self.file = Some(f);
            }
        }
        self.take_lines(bytes, text);
        Ok(())
    }

    fn take_lines(&mut self, bytes: Vec<u8>, text: &mut String) {
        self.partial.extend_from_slice(&bytes);
        if let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') {
            let rest = self.partial.split_off(end + 1);
            text.push_str(&String::from_utf8_lossy(&self.partial));
            self.partial = rest;
        }
    }

    fn error(&self, e: std::io::Error) -> CliError {
        Tail::err(&self.path, e)
    }

    fn err(path: &Path, e: std::io::Error) -> CliError {
        CliError::Refused(format!("cannot read {}: {e}", path.display()))
    }
}

/// Where a scan of a worker log is, relative to the trial's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the trial's start marker.
    Before,
    /// Inside: each line is the trial's output.
    In,
    /// Past its end (its end marker, or the next trial's start, or its worker's retirement).
    Done,
}

/// Picks one trial's lines out of a worker log fed to it in whole lines. Pure.
struct Scanner {
    start: String,
    end: String,
    phase: Phase,
    /// Empty lines seen inside, not yet written: the daemon writes one before each marker.
    blanks: usize,
}

impl Scanner {
    fn new(number: i64, trial_id: i64) -> Scanner {
        Scanner {
            start: format!("=== sweepd: trial {number} (trial_id {trial_id}) start: "),
            end: format!("=== sweepd: trial {number} end after "),
            phase: Phase::Before,
            blanks: 0,
        }
    }

    /// Writes the trial's lines among `text`'s (whole lines).
    fn feed(&mut self, text: &str, out: &mut impl Write) {
        for line in text.lines() {
            if self.phase == Phase::Done {
                return;
            }
            let marker = line.starts_with("=== sweepd: ") && line.ends_with(" ===");
            match self.phase {
                Phase::Before if marker && line.starts_with(&self.start) => {
                    self.phase = Phase::In;
                }
                Phase::In if marker && line.starts_with("=== sweepd: log rotated, ") => {}
                Phase::In if marker && (line.starts_with(&self.end) || boundary(line)) => {
                    // The empty line the daemon wrote before its marker is not the trial's.
                    self.blanks = self.blanks.saturating_sub(1);
                    self.flush(out);
                    self.phase = Phase::Done;
                }
                Phase::In if line.is_empty() => self.blanks += 1,
                Phase::In => {
                    self.flush(out);
                    let _ = writeln!(out, "{line}");
                }
                _ => {}
            }
        }
    }

    /// Writes the empty lines held back.
    fn flush(&mut self, out: &mut impl Write) {
        for _ in 0..std::mem::take(&mut self.blanks) {
            let _ = writeln!(out);
        }
    }
}

/// A marker that ends any trial's lines: another trial's start, the worker's retirement.
fn boundary(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("=== sweepd: ") else {
        return false;
    };
    let number = |s: &str| -> Option<usize> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then_some(n)
    };
    if let Some(r) = rest.strip_prefix("trial ") {
        let Some(n) = number(r) else { return false };
        let Some(r) = r[n..].strip_prefix(" (trial_id ") else {
            return false;
        };
        let Some(n) = number(r) else { return false };
        return r[n..].starts_with(") start: ");
    }
    if let Some(r) = rest.strip_prefix("worker ") {
        let Some(n) = number(r) else { return false };
        return r[n..].starts_with(" retired: ");
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the daemon writes: `mark` puts a newline before each marker.
    const LOG: &str = "\
ready line of the worker

=== sweepd: trial 3 (trial_id 4) start: {\"x\": 1} ===
three a
three b

=== sweepd: trial 3 end after 0.50s: COMPLETE 1.0 ===

=== sweepd: trial 5 (trial_id 6) start: {\"x\": 2} ===
five a

five b, after an empty line of its own
no newline at the end
=== sweepd: trial 5 end after 0.20s: COMPLETE 4.0 ===

=== sweepd: trial 7 (trial_id 8) start: {\"x\": 3} ===
seven, whose worker was then retired

=== sweepd: worker 1 retired: oom ===
";

    fn lines_of(number: i64, trial_id: i64, chunks: &[&str]) -> (String, Phase) {
        let mut scan = Scanner::new(number, trial_id);
        let mut out = Vec::new();
        for c in chunks {
            scan.feed(c, &mut out);
        }
        (String::from_utf8(out).unwrap(), scan.phase)
    }

    #[test]
    fn a_trial_s_lines_are_those_between_its_markers_without_the_daemon_s_blank_line() {
        assert_eq!(
            lines_of(3, 4, &[LOG]),
            ("three a\nthree b\n".into(), Phase::Done)
        );
        assert_eq!(
            lines_of(5, 6, &[LOG]),
            (
                "five a\n\nfive b, after an empty line of its own\nno newline at the end\n".into(),
                Phase::Done
            )
        );
        assert_eq!(
            lines_of(7, 8, &[LOG]),
            ("seven, whose worker was then retired\n".into(), Phase::Done)
        );
        // Another study's trial 3 (another trial_id) is not this one.
        assert_eq!(lines_of(3, 99, &[LOG]), (String::new(), Phase::Before));
    }

    #[test]
    fn a_trial_followed_while_it_runs_is_written_as_it_comes_and_ends_at_its_marker() {
        let (head, tail) = LOG.split_at(LOG.find("three b").unwrap());
        let mut scan = Scanner::new(3, 4);
        let mut out = Vec::new();
        scan.feed(head, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "three a\n");
        assert_eq!(scan.phase, Phase::In);
        scan.feed(tail, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "three a\nthree b\n");
        assert_eq!(scan.phase, Phase::Done);
    }

    #[test]
    fn a_rotated_log_is_read_on_into_the_new_file() {
        let old = "=== sweepd: trial 2 (trial_id 2) start: {} ===\nbefore\n";
        let new = "=== sweepd: log rotated, earlier output in /l/worker-1.log.1 ===\nafter\n\n\
                   === sweepd: trial 2 end after 9.00s: PRUNED ===\n";
        assert_eq!(
            lines_of(2, 2, &[old, new]),
            ("before\nafter\n".into(), Phase::Done)
        );
    }

    #[test]
    fn only_the_daemon_s_own_markers_end_a_trial() {
        assert!(boundary("=== sweepd: trial 12 (trial_id 40) start: {} ==="));
        assert!(boundary("=== sweepd: worker 3 retired: study stopped ==="));
        assert!(!boundary("=== sweepd: trial x (trial_id 40) start: {} ==="));
        assert!(!boundary(
            "=== sweepd: log rotated, earlier output in a ==="
        ));
        assert!(!boundary("=== sweepd: worker three retired: x ==="));
        // A line the worker printed that looks almost like one is output.
        let (lines, _) = lines_of(
            1,
            1,
            &["=== sweepd: trial 1 (trial_id 1) start: {} ===\n=== sweepd: hello ===\n"],
        );
        assert_eq!(lines, "=== sweepd: hello ===\n");
    }
}
