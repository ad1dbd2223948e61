//! `[worker]`, `[worker.env]` and `[worker.allocator]`: what reaches a worker process's argv,
//! environment and directories, checked against what exec and the kernel accept, so that a
//! worker that cannot be started is refused by `check` rather than hours into `run`.

use super::*;
use crate::config::raw::{dotted, Entries, RawAllocator, RawWorker};
use crate::config::{AllocatorConfig, AllocatorPreset, Overrides, WorkerConfig, WorkerMode};
use crate::units::{GIB, MIB};
use std::collections::BTreeMap;

impl Validator<'_> {
    pub(crate) fn worker(
        &mut self,
        raw: Option<&RawWorker>,
        base_dir: &Path,
    ) -> Option<WorkerConfig> {
        let Some(raw) = raw else {
            self.at_key("worker", "missing required table [worker]");
            return None;
        };
        let before = self.problems.len();
        let command = match &raw.command {
            None => {
                self.missing("worker.command");
                Vec::new()
            }
            Some(c) => self.command(c),
        };
        let mode = self.worker_mode(raw);
        let recycle_after = self.recycle_after(raw);
        let max_par = self.worker_max_par(raw);
        let trial_timeout = self.duration(
            raw.trial_timeout.as_ref(),
            "worker.trial_timeout",
            MAX_TRIAL_TIMEOUT,
        );
        let startup_timeout = self.startup_timeout(raw);
        let shutdown_grace = self
            .duration(
                raw.shutdown_grace.as_ref(),
                "worker.shutdown_grace",
                MAX_SHUTDOWN_GRACE,
            )
            .unwrap_or(Duration::from_secs(30));
        let log_dir = self.worker_log_dir(raw, base_dir, mode);
        let cwd = self.worker_cwd(raw, base_dir);
        let env = self.env(raw.env.as_ref());
        self.pythonpath(raw.env.as_ref(), &env, &cwd);
        let heartbeat_timeout = self.duration(
            raw.heartbeat_timeout.as_ref(),
            "worker.heartbeat_timeout",
            MAX_HEARTBEAT_TIMEOUT,
        );
        let recycle_on_growth = self.recycle_on_growth(raw);
        let (log_max_bytes, log_max_total) = self.log_limits(raw);
        let allocator = self.allocator(raw.allocator.as_ref().map(|t| &t.0));
        let checkpoint_dir = self.checkpoint_dir(raw, base_dir, &log_dir);
        let keep_checkpoints = raw.keep_checkpoints.as_ref().is_some_and(|k| *k.get_ref());
        (self.problems.len() == before).then_some(WorkerConfig {
            command,
            mode,
            recycle_after,
            max_par,
            trial_timeout,
            startup_timeout,
            shutdown_grace,
            log_dir,
            cwd,
            env,
            heartbeat_timeout,
            recycle_on_growth,
            log_max_bytes,
            log_max_total,
            allocator,
            checkpoint_dir,
            keep_checkpoints,
        })
    }

    /// `worker.checkpoint_dir`, resolved against the config's directory (`log_dir/checkpoints`
    /// when unset): a directory that can be created, as the supervisor creates each trial's
    /// under it when the trial starts.
    fn checkpoint_dir(&mut self, raw: &RawWorker, base_dir: &Path, log_dir: &Path) -> PathBuf {
        let dir = match &raw.checkpoint_dir {
            None => log_dir.join("checkpoints"),
            Some(d) => resolve(base_dir, Path::new(d.get_ref())),
        };
        let ok = raw
            .checkpoint_dir
            .as_ref()
            .map_or(Ok(()), |d| check_path(d.get_ref()))
            .and_then(|()| check_dir_creatable(&dir));
        if let Err(message) = ok {
            match &raw.checkpoint_dir {
                Some(d) => self.at(d, "worker.checkpoint_dir", message),
                None => self.at_key("worker.checkpoint_dir", message),
            }
        }
        dir
    }

    /// `worker.mode`: persistent unless it says oneshot.
    fn worker_mode(&mut self, raw: &RawWorker) -> WorkerMode {
        self.choice(raw.mode.as_ref(), "worker.mode", MODES, |s| match s {
            "persistent" => Some(WorkerMode::Persistent),
            "oneshot" => Some(WorkerMode::Oneshot),
            _ => None,
        })
        .unwrap_or(WorkerMode::Persistent)
    }

    /// `worker.recycle_after`: 0 (never) is `None`.
    fn recycle_after(&mut self, raw: &RawWorker) -> Option<u32> {
        raw.recycle_after.as_ref().and_then(|r| {
            let v = *r.get_ref();
            match u32::try_from(v) {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => {
                    self.at(
                        r,
                        "worker.recycle_after",
                        format!("must be between 0 (never) and {} (got {v})", u32::MAX),
                    );
                    None
                }
            }
        })
    }

    /// `worker.max_par`, 1 when left out.
    fn worker_max_par(&mut self, raw: &RawWorker) -> usize {
        match &raw.max_par {
            None => 1,
            Some(m) => max_par(i128::from(*m.get_ref())).unwrap_or_else(|message| {
                self.at(m, "worker.max_par", message);
                1
            }),
        }
    }

    /// `worker.startup_timeout`: long enough for a worker to start its interpreter.
    fn startup_timeout(&mut self, raw: &RawWorker) -> Duration {
        self.duration(
            raw.startup_timeout.as_ref(),
            "worker.startup_timeout",
            MAX_STARTUP_TIMEOUT,
        )
        .filter(|d| {
            let short = *d < MIN_STARTUP_TIMEOUT;
            if let (true, Some(t)) = (short, &raw.startup_timeout) {
                self.at(
                    t,
                    "worker.startup_timeout",
                    format!(
                        "{:?} is too short: at least {} (a worker has to start its \
                         interpreter, import the helper and send `ready` in that time)",
                        t.get_ref(),
                        format_duration(MIN_STARTUP_TIMEOUT)
                    ),
                );
            }
            !short
        })
        .unwrap_or(Duration::from_secs(120))
    }

    /// `worker.log_dir`, resolved against the config's directory.
    fn worker_log_dir(&mut self, raw: &RawWorker, base_dir: &Path, mode: WorkerMode) -> PathBuf {
        let log_dir = resolve(
            base_dir,
            Path::new(raw.log_dir.as_ref().map_or("sweepd-logs", |l| l.get_ref())),
        );
        // The supervisor creates log_dir (and log_dir/results for oneshot workers) when the
        // first worker starts: what cannot be created must fail here, not after the study
        // has been created and a trial claimed.
        let log_dir_ok = raw
            .log_dir
            .as_ref()
            .map_or(Ok(()), |l| check_path(l.get_ref()))
            .and_then(|()| check_dir_creatable(&log_dir))
            .and_then(|()| match mode {
                WorkerMode::Oneshot => check_dir_creatable(&log_dir.join("results")),
                WorkerMode::Persistent => Ok(()),
            });
        if let Err(message) = log_dir_ok {
            match &raw.log_dir {
                Some(l) => self.at(l, "worker.log_dir", message),
                None => self.at_key("worker.log_dir", message),
            }
        }
        log_dir
    }

    /// `worker.cwd`, resolved against the config's directory: an existing directory.
    fn worker_cwd(&mut self, raw: &RawWorker, base_dir: &Path) -> PathBuf {
        let cwd = match &raw.cwd {
            None => base_dir.to_path_buf(),
            Some(c) => resolve(base_dir, Path::new(c.get_ref())),
        };
        if let Some(Err(message)) = raw.cwd.as_ref().map(|c| check_path(c.get_ref())) {
            self.at(raw.cwd.as_ref().expect("checked"), "worker.cwd", message);
        } else if !cwd.is_dir() {
            let message = format!(
                "working directory {} does not exist or is not a directory",
                cwd.display()
            );
            match &raw.cwd {
                Some(c) => self.at(c, "worker.cwd", message),
                None => self.at_key("worker.cwd", message),
            }
        }
        cwd
    }

    /// `worker.recycle_on_growth`: a size greater than zero.
    fn recycle_on_growth(&mut self, raw: &RawWorker) -> Option<u64> {
        raw.recycle_on_growth.as_ref().and_then(|r| {
            let v = self.size(r, "worker.recycle_on_growth")?;
            if v == 0 {
                self.at(
                    r,
                    "worker.recycle_on_growth",
                    "must be greater than zero (leave it out to never recycle on growth)",
                );
                return None;
            }
            Some(v)
        })
    }

    /// `worker.log_max_bytes` and `worker.log_max_total` (at least the first).
    fn log_limits(&mut self, raw: &RawWorker) -> (u64, u64) {
        let log_max_bytes = self.size_at_least(
            raw.log_max_bytes.as_ref(),
            "worker.log_max_bytes",
            MIN_LOG_MAX_BYTES,
        );
        let log_max_total =
            self.size_at_least(raw.log_max_total.as_ref(), "worker.log_max_total", 0);
        match (log_max_bytes, log_max_total) {
            (Some(bytes), Some(total)) => {
                let (bytes, total) = (bytes.unwrap_or(64 * MIB), total.unwrap_or(GIB));
                if total < bytes {
                    let message = format!(
                        "must be at least log_max_bytes ({}), got {}",
                        format_size(bytes),
                        format_size(total)
                    );
                    match &raw.log_max_total {
                        Some(t) => self.at(t, "worker.log_max_total", message),
                        None => {
                            self.at_key("worker.log_max_total", format!("{message} (the default)"))
                        }
                    }
                }
                (bytes, total)
            }
            _ => (64 * MIB, GIB),
        }
    }

    /// The command line's settings, checked by the rules of the keys they replace; a problem
    /// names the option, not the file. `worker` is `None` when `[worker]` has problems.
    pub(crate) fn overrides(&mut self, overrides: &Overrides, worker: Option<&mut WorkerConfig>) {
        let Overrides { max_par: par } = overrides;
        if let Some(par) = par {
            match max_par(i128::try_from(*par).unwrap_or(i128::MAX)) {
                Ok(par) => {
                    if let Some(w) = worker {
                        w.max_par = par;
                    }
                }
                Err(message) => self.problems.push(Problem {
                    file: None,
                    line: None,
                    column: None,
                    key: None,
                    message: format!("--par {message}"),
                }),
            }
        }
    }

    pub(crate) fn allocator(&mut self, raw: Option<&RawAllocator>) -> AllocatorConfig {
        let Some(raw) = raw else {
            return AllocatorConfig::default();
        };
        let preset = self
            .choice(
                raw.preset.as_ref(),
                "worker.allocator.preset",
                PRESETS,
                |s| match s {
                    "default" => Some(AllocatorPreset::Default),
                    "none" => Some(AllocatorPreset::None),
                    _ => None,
                },
            )
            .unwrap_or_default();
        let pytorch = raw.pytorch.as_ref().map(|p| {
            if let Err(message) = check_pytorch_alloc_conf(p.get_ref())
                .and_then(|()| check_exec_string(p.get_ref()).map_err(|m| format!("the value {m}")))
            {
                self.at(p, "worker.allocator.pytorch", message);
            }
            p.get_ref().clone()
        });
        AllocatorConfig {
            preset,
            pytorch,
            jax_preallocate: raw.jax_preallocate.as_ref().map(|b| *b.get_ref()),
            tf_allow_growth: raw.tf_allow_growth.as_ref().map(|b| *b.get_ref()),
        }
    }

    pub(crate) fn command(&mut self, raw: &Spanned<Vec<Spanned<String>>>) -> Vec<String> {
        let Some(first) = raw.get_ref().first() else {
            self.at(
                raw,
                "worker.command",
                "must not be empty: give the worker's argv, e.g. [\"python3\", \"worker.py\"]",
            );
            return Vec::new();
        };
        if first.get_ref().is_empty() {
            self.at(
                first,
                "worker.command",
                "the program (first element) is empty",
            );
        }
        for arg in raw.get_ref() {
            // exec cannot pass a NUL byte; catching it here beats a spawn failure hours in.
            if arg.get_ref().contains('\0') {
                self.at(arg, "worker.command", "arguments may not contain NUL bytes");
            } else if let Err(message) = check_exec_string(arg.get_ref()) {
                self.at(arg, "worker.command", format!("an argument {message}"));
            }
        }
        raw.get_ref().iter().map(|a| a.get_ref().clone()).collect()
    }

    pub(crate) fn env(
        &mut self,
        raw: Option<&Entries<Spanned<toml::Value>>>,
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (name, value) in raw.map_or(&[][..], |e| &e.0) {
            let key = dotted(&["worker", "env", name.get_ref()]);
            if name.get_ref().is_empty() {
                self.at(name, &key, "environment variable names must not be empty");
            } else if name.get_ref().contains(['=', '\0']) {
                self.at(
                    name,
                    &key,
                    "environment variable names may not contain '=' or NUL",
                );
            }
            let text = match value.get_ref() {
                toml::Value::String(s) => s.clone(),
                // Their TOML text, so `X = 1.0` reaches the worker as "1.0", not "1".
                v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)) => {
                    v.to_string()
                }
                other => {
                    self.at(
                        value,
                        &key,
                        format!(
                            "must be a string, number or boolean, not {}",
                            other.type_str()
                        ),
                    );
                    continue;
                }
            };
            if text.contains('\0') {
                self.at(value, &key, "environment values may not contain NUL bytes");
                continue;
            }
            if let Err(message) = check_exec_string(&format!("{}={text}", name.get_ref())) {
                self.at(value, &key, format!("the variable {message}"));
                continue;
            }
            env.insert(name.get_ref().clone(), text);
        }
        env
    }
}

impl Validator<'_> {
    /// A `[worker.env] PYTHONPATH` replaces the one sweepd gives its workers, which holds the
    /// helper (`sweepd_worker.py`, [`helper_dir`]): one where no directory holds it would have
    /// every Python worker fail at `import sweepd_worker`, so it must name the helper's
    /// directory (or another that holds the helper). Relative entries are the workers'
    /// (`cwd`). Nothing to check when sweepd has no helper to give.
    pub(crate) fn pythonpath(
        &mut self,
        raw: Option<&Entries<Spanned<toml::Value>>>,
        env: &BTreeMap<String, String>,
        cwd: &Path,
    ) {
        let (Some(path), Some(dir)) = (env.get("PYTHONPATH"), helper_dir()) else {
            return;
        };
        let holds = |entry: &str| resolve(cwd, Path::new(entry)).join(HELPER).is_file();
        if path.split(':').any(holds) {
            return;
        }
        let message = format!(
            "replaces the PYTHONPATH sweepd gives its workers, and none of its directories \
             holds the helper {HELPER}, so `import sweepd_worker` would fail: add sweepd's \
             {} to it, e.g. PYTHONPATH = \"{}:{path}\"",
            dir.display(),
            dir.display()
        );
        let at = raw
            .map_or(&[][..], |e| &e.0)
            .iter()
            .find(|(name, _)| name.get_ref() == "PYTHONPATH");
        match at {
            Some((_, value)) => self.at(value, "worker.env.PYTHONPATH", message),
            None => self.at_key("worker.env.PYTHONPATH", message),
        }
    }
}

/// The Python helper's file name.
const HELPER: &str = "sweepd_worker.py";

/// Where the Python helper lives, put on the workers' PYTHONPATH so that scripts need no
/// install: `$SWEEPD_PYTHON_DIR`, else `<prefix>/share/sweepd/python` beside an installed
/// binary, else the source tree this binary was built from. `None` when none holds it.
pub fn helper_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("SWEEPD_PYTHON_DIR").map(PathBuf::from),
        std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("share/sweepd/python"))),
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python"
        ))),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join(HELPER).is_file())
}

/// `[worker] max_par` and `--par`: each slot is a task and a worker, at most [`MAX_PAR`].
pub(crate) fn max_par(v: i128) -> Result<usize, String> {
    match usize::try_from(v) {
        Ok(n) if (1..=MAX_PAR).contains(&n) => Ok(n),
        _ => Err(format!("must be between 1 and {MAX_PAR} (got {v})")),
    }
}

/// A string passed to exec as one argument or one `NAME=value`: at most
/// [`MAX_EXEC_STRING_BYTES`]. The message completes "the argument ...".
pub(crate) fn check_exec_string(s: &str) -> Result<(), String> {
    if s.len() > MAX_EXEC_STRING_BYTES {
        return Err(format!(
            "is too long: at most {} (got {})",
            format_size(MAX_EXEC_STRING_BYTES as u64),
            format_size(s.len() as u64)
        ));
    }
    Ok(())
}

/// Whether the directory `dir` is or can be created: the nearest part of it that exists must be
/// a directory (`create_dir_all` fails on a file or a dangling symlink, and only at `run`).
pub(crate) fn check_dir_creatable(dir: &Path) -> Result<(), String> {
    for part in dir.ancestors() {
        match std::fs::metadata(part) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(if part == dir {
                    format!("{} exists and is not a directory", dir.display())
                } else {
                    format!(
                        "{} cannot be created: {} is not a directory",
                        dir.display(),
                        part.display()
                    )
                })
            }
            // ENOTDIR: a part further up is a file, found on a later turn.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                if std::fs::symlink_metadata(part).is_ok() {
                    return Err(format!(
                        "{} cannot be created: {} is a broken symbolic link",
                        dir.display(),
                        part.display()
                    ));
                }
            }
            // Unreadable (permissions): `run` reports it with the OS's reason.
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Checks a `PYTORCH_CUDA_ALLOC_CONF` value: comma-separated `key:value` pairs (a value may be
/// a bracketed list with commas of its own, as `roundup_power2_divisions:[256:1,>:8]`) whose keys
/// PyTorch documents.
pub(crate) fn check_pytorch_alloc_conf(conf: &str) -> Result<(), String> {
    if conf.contains('\0') {
        return Err("may not contain NUL bytes".to_owned());
    }
    if conf.trim().is_empty() {
        return Ok(());
    }
    let mut entries = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced ']' in {conf:?}"))?;
            }
            ',' if depth == 0 => {
                entries.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '[' in {conf:?}"));
    }
    entries.push(&conf[start..]);
    for entry in entries {
        let entry = entry.trim();
        let Some((key, value)) = entry.split_once(':') else {
            return Err(if entry.is_empty() {
                format!("empty entry in {conf:?} (a stray comma?)")
            } else {
                format!("entry {entry:?} is not `key:value`")
            });
        };
        let key = key.trim();
        if !PYTORCH_ALLOC_KEYS.contains(&key) {
            return Err(format!(
                "unknown PyTorch allocator key {key:?} (torch aborts at startup on it); \
                 expected one of {}",
                PYTORCH_ALLOC_KEYS.join(", ")
            ));
        }
        if value.trim().is_empty() {
            return Err(format!("key {key:?} has no value"));
        }
    }
    Ok(())
}
