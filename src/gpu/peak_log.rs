//! Peaks measured by the daemons of this host whose studies run one program over the same
//! params: what the memory model learns from besides its own study.
//!
//! Two studies on one card (two `sweepd@` units) that run one program over the same search
//! space have one memory function: a trial's peak is a function of its params, whichever study
//! drew them. Learnt apart, each study's model goes through its own learning phase (the prior,
//! then wide bounds while few trials are measured), and with two studies sharing a card that
//! phase was most of a run of a few dozen trials (`docs/benchmarks.md`, the two-daemon
//! workload). Pooled, each learns from the trials of both. Only the user can say that two
//! studies run one program (the same `train.py` may read another dataset in each), so the
//! studies of one `[gpu] memory_group` share, and the supervisor adds to the group what it can
//! check (the command, the space) in the fingerprint it hands here.
//!
//! Each daemon appends to a file named after that fingerprint, next to the host's ledger, a line
//! when one of its trials settles at its level (what the model learns from while a trial runs)
//! and one when it ends (its peak, or that it failed), and before each admission round reads
//! what was appended since its last read. A line is written whole with one `write` on a file opened for appending, and a reader takes
//! only complete lines, so no lock is needed. Lines of its own study (its own, or an earlier
//! instance's, whose trials it reads from its database) are skipped: they would count twice.
//! Params travel in Optuna's internal representation (numbers; a categorical's choice index),
//! which the same space reads back; a line that does not read back is counted and skipped.
//! The file is not trimmed: a line per trial, and it lives in the runtime directory (a tmpfs
//! emptied at boot).
//!
//! The file is opened as the ledger is, relative to the runtime directory that was checked,
//! without following a link, and refused unless it is this user's alone (or its group's, in a
//! group's directory: `super::runtime_dir`). It is read [`CHUNK`] bytes at a time, so that a
//! huge line or file never takes more memory than that.
//!
//! A line also names the daemon that wrote it (pid and start time, as the ledger keys it): a
//! daemon killed or crashed never writes its running trials' ends, and their levels would count
//! in the others' models until those restarted. A reader drops the levels of a daemon gone.

use super::ledger::Owner;
use super::runtime_dir::RuntimeDir;
use crate::study::{Params, SearchSpace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most read at once: a line longer than this is skipped (counted as not reading back).
pub const CHUNK: u64 = 4 << 20;

/// A 64-bit FNV-1a hash: stable across builds and platforms (the standard library's hasher is
/// not), so two daemons of one host name the same program's file alike.
pub fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What a line says of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// It ended, measured at `peak`.
    #[default]
    Peak,
    /// It runs, settled at `peak` (`gpu::monitor::settled`).
    Level,
    /// It ended without a measured peak (it failed): its level no longer counts.
    Ended,
}

/// One line of the file.
#[derive(Serialize, Deserialize)]
struct Line {
    /// The study's key ([`fingerprint`] of where it is stored and its name), in hex.
    study: String,
    #[serde(default)]
    kind: Kind,
    /// The trial's id in its study's database, which a level's later peak or end names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trial: Option<i64>,
    #[serde(default)]
    peak: u64,
    #[serde(default)]
    params: BTreeMap<String, f64>,
    /// The daemon that wrote the line (absent where /proc could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
}

/// A trial of another study, as a line tells it. `key` names the trial among every study's
/// (negative, so never one of our own trial ids).
#[derive(Debug, Clone, PartialEq)]
pub enum Shared {
    /// It ended, measured at `peak`: it no longer runs at a level, if it did.
    Peak {
        key: Option<i64>,
        params: Params,
        peak: u64,
    },
    /// It runs, settled at `level`: it counts as measured at that level until it ends, or
    /// until `by`, the daemon that runs it, is gone.
    Level {
        key: i64,
        params: Params,
        level: u64,
        by: Option<Owner>,
    },
    /// It ended without a measured peak.
    Ended { key: i64 },
}

/// What a read brought: the other studies' trials, and the lines that did not read back (not
/// JSON, a param the space cannot hold, a level or end that names no trial).
#[derive(Debug, Default, PartialEq)]
pub struct Appended {
    pub trials: Vec<Shared>,
    pub bad: usize,
}

/// This daemon's view of its program's file.
#[derive(Debug)]
pub struct PeakLog {
    dir: Arc<RuntimeDir>,
    name: OsString,
    path: PathBuf,
    study: String,
    /// This daemon, named on every line it appends.
    me: Option<Owner>,
    /// Bytes read so far (up to the end of the last complete line).
    offset: u64,
}

impl PeakLog {
    /// The file for the program of fingerprint `program`, next to the ledger `ledger` in `dir`
    /// (`gpu-ledger.peaks-<hex>`), for the study of key `study`; created if missing.
    /// `me`: this daemon, named on its lines.
    pub fn open(
        dir: &Arc<RuntimeDir>,
        ledger: &OsStr,
        program: u64,
        study: u64,
        me: Option<Owner>,
    ) -> std::io::Result<PeakLog> {
        let mut name = ledger.to_os_string();
        name.push(format!(".peaks-{program:016x}"));
        let log = PeakLog {
            path: dir.path().join(&name),
            dir: dir.clone(),
            name,
            study: format!("{study:016x}"),
            me,
            offset: 0,
        };
        drop(log.file()?);
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self) -> std::io::Result<File> {
        let opened = self
            .dir
            .open_file(&self.name, true, "the file of a memory group's peaks")?;
        Ok(opened.file)
    }

    /// Appends one of our trials' measured peak.
    pub fn peak(
        &self,
        space: &SearchSpace,
        trial: i64,
        params: &Params,
        peak: u64,
    ) -> std::io::Result<()> {
        self.append(Kind::Peak, trial, internal(space, params), peak)
    }

    /// Appends the level one of our running trials has settled at.
    pub fn level(
        &self,
        space: &SearchSpace,
        trial: i64,
        params: &Params,
        level: u64,
    ) -> std::io::Result<()> {
        self.append(Kind::Level, trial, internal(space, params), level)
    }

    /// Appends that one of our trials whose level went out ended without a peak.
    pub fn ended(&self, trial: i64) -> std::io::Result<()> {
        self.append(Kind::Ended, trial, BTreeMap::new(), 0)
    }

    fn append(
        &self,
        kind: Kind,
        trial: i64,
        params: BTreeMap<String, f64>,
        peak: u64,
    ) -> std::io::Result<()> {
        let line = Line {
            study: self.study.clone(),
            kind,
            trial: Some(trial),
            peak,
            params,
            pid: self.me.map(|o| o.pid),
            start: self.me.map(|o| o.start),
        };
        let mut text = serde_json::to_string(&line).map_err(std::io::Error::other)?;
        text.push('\n');
        // One write: appends of whole lines do not interleave.
        self.file()?.write_all(text.as_bytes())
    }

    /// The other studies' trials appended since the last read, read back through `space`.
    pub fn read_new(&mut self, space: &SearchSpace) -> std::io::Result<Appended> {
        let mut file = self.file()?;
        let len = file.metadata()?.len();
        if len < self.offset {
            // Removed and made again (by hand, or a runtime directory emptied): read it anew.
            self.offset = 0;
        }
        let mut out = Appended::default();
        while self.offset < len {
            file.seek(SeekFrom::Start(self.offset))?;
            let mut bytes = Vec::new();
            (&file).take(CHUNK).read_to_end(&mut bytes)?;
            // A line still being written is read next time; one longer than a chunk never
            // reads back, and is skipped.
            let whole = match bytes.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if bytes.len() as u64 == CHUNK => {
                    out.bad += 1;
                    self.offset += CHUNK;
                    self.skip_to_line(&mut file)?;
                    continue;
                }
                None => break,
            };
            self.offset += whole as u64;
            for line in bytes[..whole].split(|b| *b == b'\n') {
                if line.is_empty() {
                    continue;
                }
                match parse(line, space) {
                    Some((study, _)) if study == self.study => {}
                    Some((_, shared)) => out.trials.push(shared),
                    None => out.bad += 1,
                }
            }
        }
        Ok(out)
    }

    /// Moves the offset past the end of the line it is in (to the end of the file, if that
    /// line has no end yet), a chunk at a time.
    fn skip_to_line(&mut self, file: &mut File) -> std::io::Result<()> {
        loop {
            file.seek(SeekFrom::Start(self.offset))?;
            let mut bytes = Vec::new();
            (&*file).take(CHUNK).read_to_end(&mut bytes)?;
            match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.offset += i as u64 + 1;
                    return Ok(());
                }
                None if bytes.is_empty() => return Ok(()),
                None => self.offset += bytes.len() as u64,
            }
        }
    }
}

/// `params` as Optuna stores them internally, by name.
fn internal(space: &SearchSpace, params: &Params) -> BTreeMap<String, f64> {
    space
        .params
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.dist.to_internal(params.get(&p.name)?))))
        .collect()
}

/// A line's study key and what it says; `None` where it does not read back.
fn parse(line: &[u8], space: &SearchSpace) -> Option<(String, Shared)> {
    let line: Line = serde_json::from_slice(line).ok()?;
    let key = line.trial.map(|t| {
        // Negative: never one of our own trial ids, which the model's running set also holds.
        -((fingerprint(&format!("{}\n{t}", line.study)) >> 1) as i64) - 1
    });
    let mut params = Params::new();
    for p in &space.params {
        if let Some(x) = line.params.get(&p.name) {
            params.insert(p.name.clone(), p.dist.from_internal(*x)?);
        }
    }
    if params.len() != line.params.len() {
        return None;
    }
    let shared = match line.kind {
        Kind::Peak if line.peak > 0 => Shared::Peak {
            key,
            params,
            peak: line.peak,
        },
        Kind::Level if line.peak > 0 => Shared::Level {
            key: key?,
            params,
            level: line.peak,
            by: line
                .pid
                .zip(line.start)
                .map(|(pid, start)| Owner { pid, start }),
        },
        Kind::Ended => Shared::Ended { key: key? },
        _ => return None,
    };
    Some((line.study, shared))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(dir: &Path) -> Arc<RuntimeDir> {
        Arc::new(RuntimeDir::open(dir, crate::gpu::runtime_dir::Origin::Named).unwrap())
    }
    use crate::study::space::test_util::{cat, float, int, spec};
    use crate::study::ParamValue;

    fn space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("width", int(64, 1024, 1, true)),
                spec("opt", cat(2)),
                spec("lr", float(1e-5, 1e-1, None, true)),
            ],
        }
    }

    fn params(w: i64, opt: usize, lr: f64) -> Params {
        [
            ("width".to_owned(), ParamValue::Int(w)),
            ("opt".to_owned(), ParamValue::Choice(opt)),
            ("lr".to_owned(), ParamValue::Float(lr)),
        ]
        .into_iter()
        .collect()
    }

    /// The peaks of a read, without their keys.
    fn peaks(read: &Appended) -> Vec<(Params, u64)> {
        read.trials
            .iter()
            .filter_map(|t| match t {
                Shared::Peak { params, peak, .. } => Some((params.clone(), *peak)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn another_study_reads_what_one_appends_bit_for_bit_and_its_own_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let program = fingerprint("python train.py");
        let mut a = PeakLog::open(&rt, OsStr::new("gpu-ledger"), program, 1, None).unwrap();
        let mut b = PeakLog::open(&rt, OsStr::new("gpu-ledger"), program, 2, None).unwrap();
        assert_eq!(a.path(), b.path());
        let p = params(663, 1, 7.942474088347347e-5);
        a.peak(&space(), 1, &p, 10_800_332_800).unwrap();
        b.peak(&space(), 1, &params(64, 0, 0.1), 1 << 30).unwrap();
        let read = b.read_new(&space()).unwrap();
        assert_eq!((peaks(&read), read.bad), (vec![(p, 10_800_332_800)], 0));
        // Read once: nothing new until more is appended.
        assert_eq!(b.read_new(&space()).unwrap(), Appended::default());
        assert_eq!(a.read_new(&space()).unwrap().trials.len(), 1);
        // A file removed and made again is read from its start.
        std::fs::remove_file(b.path()).unwrap();
        a.peak(&space(), 2, &params(64, 0, 0.1), 2 << 30).unwrap();
        assert_eq!(
            peaks(&b.read_new(&space()).unwrap()),
            vec![(params(64, 0, 0.1), 2 << 30)]
        );
        // Another program, another file.
        let mut c = PeakLog::open(
            &rt,
            OsStr::new("gpu-ledger"),
            fingerprint("python other.py"),
            3,
            None,
        )
        .unwrap();
        assert_ne!(c.path(), a.path());
        assert_eq!(c.read_new(&space()).unwrap(), Appended::default());
    }

    #[test]
    fn a_running_trials_level_then_its_peak_or_its_end_name_it_by_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let a = PeakLog::open(&rt, OsStr::new("gpu-ledger"), 7, 1, Owner::me()).unwrap();
        let mut b = PeakLog::open(&rt, OsStr::new("gpu-ledger"), 7, 2, None).unwrap();
        let p = params(256, 0, 0.01);
        a.level(&space(), 7, &p, 3 << 30).unwrap();
        a.peak(&space(), 7, &p, 4 << 30).unwrap();
        a.level(&space(), 8, &p, 5 << 30).unwrap();
        a.ended(8).unwrap();
        let t = b.read_new(&space()).unwrap().trials;
        let key = |i: usize| match &t[i] {
            Shared::Level { key, .. } | Shared::Ended { key } => *key,
            Shared::Peak { key, .. } => key.unwrap(),
        };
        assert!(matches!(&t[0], Shared::Level { level, .. } if *level == 3 << 30));
        // A level names the daemon that runs the trial, which is this test's process here.
        assert!(matches!(&t[0], Shared::Level { by: Some(o), .. } if o.alive()));
        assert!(matches!(&t[1], Shared::Peak { peak, .. } if *peak == 4 << 30));
        assert!(matches!(&t[3], Shared::Ended { .. }));
        assert_eq!((key(0), key(2)), (key(1), key(3)));
        // Negative, never one of our own ids; one per trial.
        assert!(key(0) < 0 && key(2) < 0 && key(0) != key(2), "{t:?}");
    }

    #[test]
    fn a_partial_line_waits_and_lines_that_do_not_read_back_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let mut log = PeakLog::open(&rt, OsStr::new("gpu-ledger"), 7, 1, None).unwrap();
        let mut raw = std::fs::OpenOptions::new()
            .append(true)
            .open(log.path())
            .unwrap();
        raw.write_all(
            b"not json\n\
              {\"study\":\"x\",\"peak\":5,\"params\":{\"opt\":9}}\n\
              {\"study\":\"x\",\"peak\":5,\"params\":{\"depth\":1}}\n\
              {\"study\":\"x\",\"peak\":0,\"params\":{\"opt\":1}}\n\
              {\"study\":\"x\",\"kind\":\"level\",\"peak\":5,\"params\":{\"opt\":1}}\n\
              {\"study\":\"x\",\"peak\":5,\"params\":{\"opt\"",
        )
        .unwrap();
        let first = log.read_new(&space()).unwrap();
        assert_eq!((first.trials.len(), first.bad), (0, 5));
        raw.write_all(b":1}}\n").unwrap();
        let second = log.read_new(&space()).unwrap();
        let opt: Params = [("opt".to_owned(), ParamValue::Choice(1))]
            .into_iter()
            .collect();
        assert_eq!((peaks(&second), second.bad), (vec![(opt, 5)], 0));
    }

    #[test]
    fn a_line_longer_than_a_chunk_is_skipped_and_the_lines_after_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let a = PeakLog::open(&rt, OsStr::new("gpu-ledger"), 7, 1, None).unwrap();
        let mut b = PeakLog::open(&rt, OsStr::new("gpu-ledger"), 7, 2, None).unwrap();
        let mut raw = std::fs::OpenOptions::new()
            .append(true)
            .open(a.path())
            .unwrap();
        raw.write_all(&vec![b'x'; 2 * CHUNK as usize + 10]).unwrap();
        raw.write_all(b"\n").unwrap();
        a.peak(&space(), 1, &params(64, 0, 0.1), 1 << 30).unwrap();
        let read = b.read_new(&space()).unwrap();
        assert_eq!(
            (peaks(&read), read.bad),
            (vec![(params(64, 0, 0.1), 1 << 30)], 1)
        );
    }

    #[test]
    fn a_peak_file_that_is_a_link_is_refused_and_its_target_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::os::unix::fs::symlink(
            &victim,
            dir.path().join("gpu-ledger.peaks-0000000000000007"),
        )
        .unwrap();
        let e = PeakLog::open(&runtime(dir.path()), OsStr::new("gpu-ledger"), 7, 1, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
    }
}
