//! `supervisor.toml`: what a sweep is (study, storage, worker, search space), checked up front.
//!
//! A daemon that runs unattended for hours must refuse a bad config before it starts, and tell the
//! user everything that is wrong at once, each problem pointing at the file, line and key. So
//! loading happens in two layers, as ripgrep does it: serde reads the text into raw structs that
//! keep every value's span (`toml::Spanned`) and reject unknown keys, then validation turns those
//! into the types the rest of sweepd uses, collecting every problem it finds.
//!
//! The raw layer never uses `#[serde(tag)]`, `untagged` or `flatten`: those buffer values and so
//! lose spans and silently disable `deny_unknown_fields`. That is why a param is one flat struct
//! with every field optional, checked by its `type` afterwards. Required keys are optional in the
//! raw layer too, so that a missing key is reported alongside all other problems rather than
//! ending the parse.
//!
//! Besides the required `[study]`, `[worker]` and `[params.*]`, every table is optional with
//! documented defaults: `[storage]`, `[worker.env]`, `[worker.allocator]`, `[gpu]`, `[retry]`,
//! `[sampler]`, `[pruner]`, `[metrics]`. Sizes (`gpu.headroom`, `worker.log_max_bytes`, ...) are
//! a TOML integer of bytes or a string with a unit, see [`parse_size`].
//!
//! What `check` accepts, `run` must be able to run: every duration and size has a maximum (named
//! in the message), so no timer or byte arithmetic downstream can overflow; strings that reach a
//! worker's argv or environment, a path or the database are refused where they could not travel
//! there (a NUL byte, a length past the kernel's, the protocol's or Optuna's limit); and the
//! directories `run` creates must be creatable. Otherwise such a value fails only after the
//! study exists and a trial has been claimed.
//!
//! Loading has no side effects: it checks that directories and files exist but creates nothing.

use crate::study::space::grid_points;
use crate::study::{Direction, Distribution, ParamSpec, SearchSpace, MAX_GRID_POINTS};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// A validated `supervisor.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The config file, as given, made absolute.
    pub path: PathBuf,
    /// The config file's directory: relative paths in the file resolve against it, so a sweep
    /// behaves the same whichever directory sweepd is started from.
    pub base_dir: PathBuf,
    pub study: StudyConfig,
    pub storage: StorageConfig,
    pub worker: WorkerConfig,
    /// Params in the order the file declares them.
    pub space: SearchSpace,
    pub gpu: GpuConfig,
    pub retry: RetryConfig,
    pub sampler: SamplerConfig,
    pub pruner: PrunerConfig,
    pub metrics: MetricsConfig,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudyConfig {
    pub name: String,
    pub direction: Direction,
    pub n_trials: Option<u64>,
    pub timeout: Option<Duration>,
    pub sampler: SamplerKind,
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    Random,
    Grid,
    /// Tree-structured Parzen Estimator, tuned by [`SamplerConfig`].
    Tpe,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// As written in the file (or the default).
    pub url: String,
    /// The SQLite file the URL names, absolute.
    pub path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMode {
    Persistent,
    Oneshot,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// argv of the worker; never empty, `command[0]` never empty.
    pub command: Vec<String>,
    pub mode: WorkerMode,
    /// Replace a persistent worker after this many successful trials. `recycle_after = 0` in the
    /// file is read as `None`, so that `Some(n)` always means a real limit.
    pub recycle_after: Option<u32>,
    pub max_par: usize,
    pub trial_timeout: Option<Duration>,
    /// Time a persistent worker gets to send `ready`.
    pub startup_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Absolute; may not exist yet (the supervisor creates it, loading does not).
    pub log_dir: PathBuf,
    /// Absolute; an existing directory.
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    /// No protocol traffic from the worker for this long during a trial means it hangs.
    pub heartbeat_timeout: Option<Duration>,
    /// Recycle a persistent worker whose idle GPU memory grew by more than this many bytes over
    /// its level after its first trial.
    pub recycle_on_growth: Option<u64>,
    /// A worker log file rotates once it grows past this many bytes; at least 4 KiB.
    pub log_max_bytes: u64,
    /// All worker logs together; the oldest files are deleted past this. At least
    /// `log_max_bytes`.
    pub log_max_total: u64,
    /// `[worker.allocator]`.
    pub allocator: AllocatorConfig,
}

/// `[worker.allocator]`: allocator settings injected into every worker unless `[worker.env]`
/// sets the same variable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocatorConfig {
    pub preset: AllocatorPreset,
    /// Value for both `PYTORCH_CUDA_ALLOC_CONF` and `PYTORCH_ALLOC_CONF`; overrides the preset's.
    /// Validated: comma-separated `key:value` pairs with keys PyTorch documents.
    pub pytorch: Option<String>,
    /// `XLA_PYTHON_CLIENT_PREALLOCATE`.
    pub jax_preallocate: Option<bool>,
    /// `TF_FORCE_GPU_ALLOW_GROWTH`.
    pub tf_allow_growth: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocatorPreset {
    /// Expandable segments for PyTorch, no preallocation for JAX, on-demand growth for
    /// TensorFlow: the settings under which several trials share a GPU without fragmenting it.
    #[default]
    Default,
    /// Inject nothing beyond the explicit fields.
    None,
}

impl AllocatorConfig {
    /// The variables to inject, in order: `PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`,
    /// `XLA_PYTHON_CLIENT_PREALLOCATE`, `TF_FORCE_GPU_ALLOW_GROWTH`, each from the explicit
    /// field if set, else from the preset (preset "default": `expandable_segments:True` for
    /// both PyTorch variables, "false", "true"; preset "none": nothing).
    pub fn env(&self) -> Vec<(String, String)> {
        let preset = self.preset == AllocatorPreset::Default;
        let flag = |b: bool| if b { "true" } else { "false" }.to_owned();
        let pytorch = self
            .pytorch
            .clone()
            .or_else(|| preset.then(|| "expandable_segments:True".to_owned()));
        let jax = self
            .jax_preallocate
            .map(flag)
            .or_else(|| preset.then(|| flag(false)));
        let tf = self
            .tf_allow_growth
            .map(flag)
            .or_else(|| preset.then(|| flag(true)));
        [
            ("PYTORCH_CUDA_ALLOC_CONF", pytorch.clone()),
            ("PYTORCH_ALLOC_CONF", pytorch),
            ("XLA_PYTHON_CLIENT_PREALLOCATE", jax),
            ("TF_FORCE_GPU_ALLOW_GROWTH", tf),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
        .collect()
    }
}

/// `[gpu]`. Without the table sweepd is CPU-only ([`Devices::None`], a fixed `worker.max_par`)
/// and the other fields keep their defaults; with it, `devices` defaults to [`Devices::All`].
/// [`GpuConfig::default`] is the table-absent configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    pub devices: Devices,
    /// Bytes kept free on every device; default 1 GiB.
    pub headroom: u64,
    /// Bytes a trial is assumed to need before it has been measured; default 6 GiB, never 0.
    pub trial_memory: u64,
    /// Default 8; 1..=1024.
    pub max_par_per_device: usize,
    /// Default 1; at least 1, and with a device list at most its length.
    pub gpus_per_trial: usize,
    /// Default 1s; at least 50ms.
    pub poll_interval: Duration,
    /// The NVML library to load instead of the system's, absolute (resolved against the config
    /// file's directory); an existing file.
    pub nvml_lib: Option<PathBuf>,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            devices: Devices::None,
            headroom: GIB,
            trial_memory: 6 * GIB,
            max_par_per_device: 8,
            gpus_per_trial: 1,
            poll_interval: Duration::from_secs(1),
            nvml_lib: None,
        }
    }
}

/// Which GPUs trials may use: `devices = "all" | "none" | [0, 2]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    All,
    /// Device indices: non-empty, no duplicates, in the order written.
    List(Vec<u32>),
    /// CPU only.
    None,
}

/// `[retry]`: how failures are retried (the supervisor's fault policies).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Re-enqueues of the same params after a CUDA out-of-memory; default 2.
    pub oom: u32,
    /// Re-enqueues after a device-side assert or illegal memory access; default 1.
    pub cuda_fatal: u32,
    /// Re-enqueues after a timeout, hang, kill by a signal or dead worker; default 1.
    pub crash: u32,
    /// Consecutive failures on a device with no success between that quarantine it; default 5,
    /// at least 1.
    pub breaker_threshold: u32,
    /// The first quarantine; default 1m, doubling each time.
    pub breaker_backoff: Duration,
    /// The longest quarantine; default 30m, at least `breaker_backoff`.
    pub breaker_max_backoff: Duration,
    /// Admission on a device is multiplied by this after an OOM; default 0.75, 0 < x < 1.
    pub oom_admission_factor: f64,
    /// Time for admission to recover fully after an OOM; default 10m.
    pub oom_recovery: Duration,
    /// Trials in a row failing with the same user error (or bad value), with no success since
    /// the daemon started, that stop the study with a message; default 5, 0 = never.
    pub stop_after_same_error: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            oom: 2,
            cuda_fatal: 1,
            crash: 1,
            breaker_threshold: 5,
            breaker_backoff: Duration::from_secs(60),
            breaker_max_backoff: Duration::from_secs(30 * 60),
            oom_admission_factor: 0.75,
            oom_recovery: Duration::from_secs(10 * 60),
            stop_after_same_error: 5,
        }
    }
}

/// `[sampler]`: TPE's knobs; the random and grid samplers use only `seed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Trials sampled at random before TPE takes over; default 10.
    pub n_startup_trials: usize,
    /// Default 24; at least 1.
    pub n_ei_candidates: usize,
    /// Default true.
    pub multivariate: bool,
    /// Default true.
    pub constant_liar: bool,
    /// Overrides `[study] seed` when set.
    pub seed: Option<u64>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            multivariate: true,
            constant_liar: true,
            seed: None,
        }
    }
}

/// `[pruner]`: `type = "none"` (the default), `"median"` or `"asha"`; keys that belong to
/// another type are errors.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PrunerConfig {
    #[default]
    None,
    Median {
        /// Default 5.
        n_startup_trials: usize,
        /// Default 0; not negative.
        n_warmup_steps: i64,
        /// Default 1; at least 1.
        interval_steps: i64,
    },
    Asha {
        /// Default 1; at least 1.
        min_resource: i64,
        /// Default 3; at least 2.
        reduction_factor: u32,
        /// Default 0.
        min_early_stopping_rate: u32,
    },
}

/// `[metrics]`: an optional Prometheus endpoint. A `listen` address that is not loopback is
/// refused unless `allow_remote = true`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    pub listen: Option<SocketAddr>,
    pub allow_remote: bool,
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Units a size may be written in, lower-cased, with their multipliers.
const SIZE_UNITS: [(&str, u64); 13] = [
    ("b", 1),
    ("kib", KIB),
    ("mib", MIB),
    ("gib", GIB),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("k", KIB),
    ("m", MIB),
    ("g", GIB),
    ("t", 1 << 40),
];
const SIZE_UNIT_NAMES: &str = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, K, M, G, T";

/// Parses a size such as `"1.5GiB"`, `"512 MiB"` or `"2GB"` into bytes: a non-negative decimal
/// number (fractions allowed), optional spaces, then a unit: B, KiB, MiB, GiB, TiB (powers of
/// 1024), KB, MB, GB, TB (powers of 1000), or K, M, G, T (= KiB, MiB, GiB, TiB), in any case. The
/// unit is required, so that "6" is not silently six bytes. Fractional bytes round to nearest.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("size {s:?} must not be negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!(
            "invalid size {s:?}: write a number and a unit, e.g. \"6GiB\" or \"1.5 GB\""
        ));
    }
    if unit.is_empty() {
        return Err(format!(
            "size {s:?} has no unit; write e.g. \"{number}B\" or \"{number}GiB\" \
             (units: {SIZE_UNIT_NAMES})"
        ));
    }
    let lower = unit.to_ascii_lowercase();
    let Some(&(_, mult)) = SIZE_UNITS.iter().find(|(u, _)| *u == lower) else {
        return Err(format!(
            "unknown unit {unit:?} in size {s:?}; expected one of {SIZE_UNIT_NAMES}"
        ));
    };
    let too_large = || format!("size {s:?} is too large");
    // Exact decimal arithmetic, so that "1.1GB" is 1_100_000_000 bytes, not a float's guess.
    // Digits past the 18th of the fraction are far below a byte even in TiB.
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let frac = &frac[..frac.len().min(18)];
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().expect("digits")
    };
    let scale = 10u128.pow(frac.len() as u32);
    let mult = u128::from(mult);
    let bytes = int
        .checked_mul(mult)
        .and_then(|b| b.checked_add((frac_value * mult + scale / 2) / scale))
        .ok_or_else(too_large)?;
    u64::try_from(bytes).map_err(|_| too_large())
}

/// Formats bytes for people, in the largest binary unit that fits, with at most two decimals:
/// "800 B", "512 MiB", "1.5 GiB".
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("B", 1),
        ("KiB", KIB),
        ("MiB", MIB),
        ("GiB", GIB),
        ("TiB", 1 << 40),
    ];
    let mut i = UNITS.iter().rposition(|&(_, m)| bytes >= m).unwrap_or(0);
    loop {
        let (name, m) = UNITS[i];
        let m = u128::from(m);
        let hundredths = (u128::from(bytes) * 100 + m / 2) / m;
        // 1023.999 KiB rounds to 1024.00 KiB: say 1 MiB instead.
        if hundredths >= 1024 * 100 && i + 1 < UNITS.len() {
            i += 1;
            continue;
        }
        let (whole, frac) = (hundredths / 100, hundredths % 100);
        return match frac {
            0 => format!("{whole} {name}"),
            f if f % 10 == 0 => format!("{whole}.{} {name}", f / 10),
            f => format!("{whole}.{f:02} {name}"),
        };
    }
}

/// Everything wrong with a config file, one [`Problem`] per line when displayed.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// One thing wrong with a config file, located as precisely as the parser allows.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The file as given to [`Config::load`] / [`Config::parse`].
    pub file: PathBuf,
    /// 1-based.
    pub line: Option<usize>,
    /// 1-based, in characters.
    pub column: Option<usize>,
    /// Dotted key path, e.g. `params.lr.low`.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    /// `FILE[:LINE[:COL]]: [`KEY`: ]MESSAGE`, the shape editors and terminals make clickable.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if let Some(key) = &self.key {
            write!(f, ": `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl Config {
    /// Reads and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![Problem {
                file: path.to_path_buf(),
                line: None,
                column: None,
                key: None,
                message: format!("cannot read config file: {e}"),
            }],
        })?;
        Config::parse(&text, path)
    }

    /// Validates config `text` as if read from `path`, which names the file in problems and
    /// anchors relative paths. The filesystem is consulted only to check that directories exist.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut v = Validator {
            file: path,
            text,
            index: None,
            problems: Vec::new(),
        };
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                v.toml_error(&e);
                return Err(v.into_error());
            }
        };
        let abs = match std::path::absolute(path) {
            Ok(p) => p,
            Err(e) => {
                v.report(
                    None,
                    None,
                    format!("cannot make the config path absolute: {e}"),
                );
                return Err(v.into_error());
            }
        };
        let base_dir = abs.parent().map_or_else(|| abs.clone(), Path::to_path_buf);

        let raw_study = raw.study.as_ref().map(|t| &t.0);
        let study = v.study(raw_study);
        let storage = v.storage(raw.storage.as_ref().map(|t| &t.0), &base_dir);
        let worker = v.worker(raw.worker.as_ref().map(|t| &t.0), &base_dir);
        let space = v.space(raw.params.as_ref());
        let gpu = v.gpu(raw.gpu.as_ref().map(|t| &t.0), &base_dir);
        let retry = v.retry(raw.retry.as_ref().map(|t| &t.0));
        let sampler = v.sampler(raw.sampler.as_ref().map(|t| &t.0));
        let pruner = v.pruner(raw.pruner.as_ref().map(|t| &t.0));
        let metrics = v.metrics(raw.metrics.as_ref().map(|t| &t.0));
        if let (Some(study), Some(space)) = (&study, &space) {
            if study.sampler == SamplerKind::Grid {
                v.grid(raw.params.as_ref(), raw_study, space);
            }
        }
        match (study, storage, worker, space) {
            (Some(study), Some(storage), Some(worker), Some(space)) if v.problems.is_empty() => {
                Ok(Config {
                    path: abs,
                    base_dir,
                    study,
                    storage,
                    worker,
                    space,
                    gpu,
                    retry,
                    sampler,
                    pruner,
                    metrics,
                })
            }
            _ => Err(v.into_error()),
        }
    }

    /// The dotted keys whose values differ in `new` and cannot change while sweepd runs, for a
    /// live reload (SIGHUP): empty means `new` may replace `self`. What may change: `worker.max_par`,
    /// `gpu.headroom`, `study.n_trials`, `study.timeout`, everything under `[retry]`,
    /// `worker.env`, `worker.allocator`, `worker.trial_timeout`, `worker.heartbeat_timeout`,
    /// `worker.recycle_after` and `worker.recycle_on_growth`. A changed param is reported as
    /// `params.NAME`, a changed pruner type as `pruner.type`.
    pub fn reload_diff(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |key: &str, same: bool| {
            if !same {
                out.push(key.to_owned());
            }
        };
        // Destructured without `..`, so that a field added later must be classified here.
        let Config {
            path: _,
            base_dir: _,
            study,
            storage,
            worker,
            space,
            gpu,
            retry: _,
            sampler,
            pruner,
            metrics,
        } = self;
        let StudyConfig {
            name,
            direction,
            n_trials: _,
            timeout: _,
            sampler: sampler_kind,
            seed,
        } = study;
        diff("study.name", *name == new.study.name);
        diff("study.direction", *direction == new.study.direction);
        diff("study.sampler", *sampler_kind == new.study.sampler);
        diff("study.seed", *seed == new.study.seed);
        diff("storage.url", *storage == new.storage);
        let WorkerConfig {
            command,
            mode,
            recycle_after: _,
            max_par: _,
            trial_timeout: _,
            startup_timeout,
            shutdown_grace,
            log_dir,
            cwd,
            env: _,
            heartbeat_timeout: _,
            recycle_on_growth: _,
            log_max_bytes,
            log_max_total,
            allocator: _,
        } = worker;
        let w = &new.worker;
        diff("worker.command", *command == w.command);
        diff("worker.mode", *mode == w.mode);
        diff(
            "worker.startup_timeout",
            *startup_timeout == w.startup_timeout,
        );
        diff("worker.shutdown_grace", *shutdown_grace == w.shutdown_grace);
        diff("worker.log_dir", *log_dir == w.log_dir);
        diff("worker.cwd", *cwd == w.cwd);
        diff("worker.log_max_bytes", *log_max_bytes == w.log_max_bytes);
        diff("worker.log_max_total", *log_max_total == w.log_max_total);
        let GpuConfig {
            devices,
            headroom: _,
            trial_memory,
            max_par_per_device,
            gpus_per_trial,
            poll_interval,
            nvml_lib,
        } = gpu;
        let g = &new.gpu;
        diff("gpu.devices", *devices == g.devices);
        diff("gpu.trial_memory", *trial_memory == g.trial_memory);
        diff(
            "gpu.max_par_per_device",
            *max_par_per_device == g.max_par_per_device,
        );
        diff("gpu.gpus_per_trial", *gpus_per_trial == g.gpus_per_trial);
        diff("gpu.poll_interval", *poll_interval == g.poll_interval);
        diff("gpu.nvml_lib", *nvml_lib == g.nvml_lib);
        let SamplerConfig {
            n_startup_trials,
            n_ei_candidates,
            multivariate,
            constant_liar,
            seed,
        } = sampler;
        let s = &new.sampler;
        diff(
            "sampler.n_startup_trials",
            *n_startup_trials == s.n_startup_trials,
        );
        diff(
            "sampler.n_ei_candidates",
            *n_ei_candidates == s.n_ei_candidates,
        );
        diff("sampler.multivariate", *multivariate == s.multivariate);
        diff("sampler.constant_liar", *constant_liar == s.constant_liar);
        diff("sampler.seed", *seed == s.seed);
        match (pruner, &new.pruner) {
            (
                PrunerConfig::Median {
                    n_startup_trials: a0,
                    n_warmup_steps: a1,
                    interval_steps: a2,
                },
                PrunerConfig::Median {
                    n_startup_trials: b0,
                    n_warmup_steps: b1,
                    interval_steps: b2,
                },
            ) => {
                diff("pruner.n_startup_trials", a0 == b0);
                diff("pruner.n_warmup_steps", a1 == b1);
                diff("pruner.interval_steps", a2 == b2);
            }
            (
                PrunerConfig::Asha {
                    min_resource: a0,
                    reduction_factor: a1,
                    min_early_stopping_rate: a2,
                },
                PrunerConfig::Asha {
                    min_resource: b0,
                    reduction_factor: b1,
                    min_early_stopping_rate: b2,
                },
            ) => {
                diff("pruner.min_resource", a0 == b0);
                diff("pruner.reduction_factor", a1 == b1);
                diff("pruner.min_early_stopping_rate", a2 == b2);
            }
            (a, b) => diff("pruner.type", a == b),
        }
        let MetricsConfig {
            listen,
            allow_remote,
        } = metrics;
        diff("metrics.listen", *listen == new.metrics.listen);
        diff(
            "metrics.allow_remote",
            *allow_remote == new.metrics.allow_remote,
        );
        if *space != new.space {
            let mut named = false;
            let old = &space.params;
            let new_params = &new.space.params;
            for p in old {
                let same = new_params.iter().find(|q| q.name == p.name) == Some(p);
                named |= !same;
                diff(&dotted(&["params", &p.name]), same);
            }
            for q in new_params {
                if !old.iter().any(|p| p.name == q.name) {
                    named = true;
                    diff(&dotted(&["params", &q.name]), false);
                }
            }
            // Only the order changed, which changes how trials are sampled.
            diff("params", named);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Raw layer: the file's shape, with spans. Every field is optional; validation decides.

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    // Tables are not wrapped in `Spanned`: an implicit table (`params` in `[params.lr]`) has no
    // span, and `Spanned` then fails with a confusing error. Key spans locate them instead.
    study: Option<Table<RawStudy>>,
    storage: Option<Table<RawStorage>>,
    worker: Option<Table<RawWorker>>,
    params: Option<Entries<Table<RawParam>>>,
    gpu: Option<Table<RawGpu>>,
    retry: Option<Table<RawRetry>>,
    sampler: Option<Table<RawSampler>>,
    pruner: Option<Table<RawPruner>>,
    metrics: Option<Table<RawMetrics>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudy {
    name: Option<Spanned<String>>,
    direction: Option<Spanned<String>>,
    // Integers are read as i64 (TOML's integer type) so that range errors become our own
    // problems, collected with the rest, instead of serde errors that stop the parse.
    n_trials: Option<Spanned<i64>>,
    timeout: Option<Spanned<String>>,
    sampler: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    url: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    command: Option<Spanned<Vec<Spanned<String>>>>,
    mode: Option<Spanned<String>>,
    recycle_after: Option<Spanned<i64>>,
    max_par: Option<Spanned<i64>>,
    trial_timeout: Option<Spanned<String>>,
    startup_timeout: Option<Spanned<String>>,
    shutdown_grace: Option<Spanned<String>>,
    log_dir: Option<Spanned<String>>,
    cwd: Option<Spanned<String>>,
    env: Option<Entries<Spanned<toml::Value>>>,
    heartbeat_timeout: Option<Spanned<String>>,
    // Sizes are an integer of bytes or a string with a unit, so they are taken untyped.
    recycle_on_growth: Option<Spanned<toml::Value>>,
    log_max_bytes: Option<Spanned<toml::Value>>,
    log_max_total: Option<Spanned<toml::Value>>,
    allocator: Option<Table<RawAllocator>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllocator {
    preset: Option<Spanned<String>>,
    pytorch: Option<Spanned<String>>,
    jax_preallocate: Option<Spanned<bool>>,
    tf_allow_growth: Option<Spanned<bool>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    devices: Option<Spanned<RawDevices>>,
    headroom: Option<Spanned<toml::Value>>,
    trial_memory: Option<Spanned<toml::Value>>,
    max_par_per_device: Option<Spanned<i64>>,
    gpus_per_trial: Option<Spanned<i64>>,
    poll_interval: Option<Spanned<String>>,
    nvml_lib: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    oom: Option<Spanned<i64>>,
    cuda_fatal: Option<Spanned<i64>>,
    crash: Option<Spanned<i64>>,
    breaker_threshold: Option<Spanned<i64>>,
    breaker_backoff: Option<Spanned<String>>,
    breaker_max_backoff: Option<Spanned<String>>,
    oom_admission_factor: Option<Spanned<toml::Value>>,
    oom_recovery: Option<Spanned<String>>,
    stop_after_same_error: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSampler {
    n_startup_trials: Option<Spanned<i64>>,
    n_ei_candidates: Option<Spanned<i64>>,
    multivariate: Option<Spanned<bool>>,
    constant_liar: Option<Spanned<bool>>,
    seed: Option<Spanned<i64>>,
}

/// Every pruner type's fields in one struct, like [`RawParam`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPruner {
    #[serde(rename = "type")]
    kind: Option<Spanned<String>>,
    n_startup_trials: Option<Spanned<i64>>,
    n_warmup_steps: Option<Spanned<i64>>,
    interval_steps: Option<Spanned<i64>>,
    min_resource: Option<Spanned<i64>>,
    reduction_factor: Option<Spanned<i64>>,
    min_early_stopping_rate: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<Spanned<String>>,
    allow_remote: Option<Spanned<bool>>,
}

/// `devices`: a keyword or a list of indices, each index keeping its span. A hand-written
/// visitor rather than `untagged`, which would buffer the value and lose the spans.
enum RawDevices {
    Word(String),
    List(Vec<Spanned<i64>>),
}

impl<'de> Deserialize<'de> for RawDevices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DevicesVisitor;
        impl<'de> Visitor<'de> for DevicesVisitor {
            type Value = RawDevices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"all\", \"none\" or a list of device indices such as [0, 1]")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawDevices, E> {
                Ok(RawDevices::Word(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawDevices, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(RawDevices::List(items))
            }
        }
        d.deserialize_any(DevicesVisitor)
    }
}

/// Every param type's fields in one struct; see the module docs for why.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(rename = "type")]
    kind: Option<Spanned<String>>,
    // Bounds may be written as TOML integers or floats, so they are taken untyped.
    low: Option<Spanned<toml::Value>>,
    high: Option<Spanned<toml::Value>>,
    step: Option<Spanned<toml::Value>>,
    log: Option<Spanned<bool>>,
    choices: Option<Spanned<Vec<Spanned<toml::Value>>>>,
}

/// A struct that must be written as a table. Serde's derived structs also accept a sequence
/// (fields by position), which would let `study = ["x"]` pass as a study named "x".
struct Table<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TableVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for TableVisitor<T> {
            type Value = Table<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Table<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Table)
            }
        }
        d.deserialize_map(TableVisitor(PhantomData))
    }
}

/// A table read in document order (params must keep theirs), with each key's span.
struct Entries<T>(Vec<(Spanned<String>, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<T>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(EntriesVisitor(PhantomData))
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: raw structs into the public types, collecting every problem.

const DIRECTIONS: &str = "\"minimize\", \"maximize\"";
const SAMPLERS: &str = "\"random\", \"grid\", \"tpe\"";
const MODES: &str = "\"persistent\", \"oneshot\"";
const PARAM_TYPES: &str = "\"float\", \"int\", \"categorical\"";
const DEFAULT_STORAGE_URL: &str = "sqlite://sweepd.db";
/// The most trials `[worker] max_par` (or `sweepd run --par`) and `[gpu] max_par_per_device`
/// allow at once.
pub const MAX_PAR: usize = 1024;
const MAX_PAR_LIMIT: i64 = MAX_PAR as i64;
const PRESETS: &str = "\"default\", \"none\"";
const PRUNERS: &str = "\"none\", \"median\", \"asha\"";
/// The keys PyTorch documents for `PYTORCH_CUDA_ALLOC_CONF`; older releases abort at startup on
/// any other.
const PYTORCH_ALLOC_KEYS: [&str; 10] = [
    "backend",
    "max_split_size_mb",
    "roundup_power2_divisions",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "expandable_segments",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "release_lock_on_cudamalloc",
    "pinned_use_background_threads",
];
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(50);
const MIN_LOG_MAX_BYTES: u64 = 4 * KIB;

// Upper bounds. Every duration and size has one, so that no value the file can hold makes the
// daemon's timer or byte arithmetic overflow (a panic at `run` after `check` said ok), and so
// that a typo of a few orders of magnitude is caught rather than waited out. Each is far above
// any real use; docs/configuration.md lists them.
const DAY: Duration = Duration::from_secs(86_400);
/// humantime's year (365.25 days), so that `"1y"` is exactly this and prints as "1year".
const YEAR: Duration = Duration::from_secs(31_557_600);
/// `[study] timeout`: a study may legitimately run for months.
const MAX_STUDY_TIMEOUT: Duration = Duration::from_secs(10 * 31_557_600);
const MAX_TRIAL_TIMEOUT: Duration = YEAR;
/// Time between two messages of one trial (an epoch without a report).
const MAX_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);
const MAX_STARTUP_TIMEOUT: Duration = DAY;
const MAX_SHUTDOWN_GRACE: Duration = DAY;
/// The loop that polls the GPUs also feeds the systemd watchdog (`WatchdogSec=60s` in the
/// shipped unit): a longer interval would get the daemon killed as hung.
const MAX_POLL_INTERVAL: Duration = Duration::from_secs(30);
const MAX_BREAKER_BACKOFF: Duration = DAY;
const MAX_OOM_RECOVERY: Duration = DAY;
/// Every size (`[gpu] headroom`, `trial_memory`, `[worker] recycle_on_growth`, log sizes):
/// 1 PiB, a thousand times the largest GPU and still far from overflowing a sum of
/// `max_par` of them.
const MAX_SIZE: u64 = 1 << 50;
/// `studies.study_name` and `trial_params.param_name` are VARCHAR(512) in Optuna's schema.
const MAX_NAME_CHARS: usize = 512;
/// One string choice of a categorical param.
const MAX_CHOICE_BYTES: usize = 4 * KIB as usize;
/// The params of one trial as JSON, at their longest: they travel in one protocol line (at most
/// 1 MiB) and, for a oneshot worker, in one environment variable (the kernel's limit for one
/// is 128 KiB) beside `--name=value` arguments.
const MAX_PARAMS_JSON_BYTES: usize = 64 * KIB as usize;
/// One param's `distribution_json` (every choice of a categorical): Optuna's `trial_params` holds
/// it for every trial, and sweepd parses it back for each on every start.
const MAX_DISTRIBUTION_JSON_BYTES: usize = 1 << 20;
/// One argument of `[worker] command`, one `[worker.env]` entry (`NAME=value`) or the
/// allocator setting: well under the kernel's 128 KiB limit for one string passed to exec.
const MAX_EXEC_STRING_BYTES: usize = 64 * KIB as usize;
/// `[sampler] n_ei_candidates`: TPE draws and scores this many candidates per proposal (Optuna's
/// default is 24); far more only costs time and memory.
const MAX_EI_CANDIDATES: i64 = 100_000;
/// The largest integer a `usize` setting may take, as the `i64` TOML reads.
const USIZE_MAX: i64 = if usize::BITS >= 64 {
    i64::MAX
} else {
    usize::MAX as i64
};
const U32_MAX: i64 = u32::MAX as i64;
/// Names Optuna and sweepd reserve for their own attributes.
const RESERVED_PARAM_PREFIX: &str = "sweepd:";

struct Validator<'a> {
    file: &'a Path,
    text: &'a str,
    /// Built on first use: only problems without a value span need it.
    index: Option<KeyIndex>,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn into_error(self) -> ConfigError {
        ConfigError {
            problems: self.problems,
        }
    }

    fn report(&mut self, span: Option<Range<usize>>, key: Option<String>, message: String) {
        let (line, column) = match span {
            Some(s) => {
                let (l, c) = line_col(self.text, s.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        self.problems.push(Problem {
            file: self.file.to_path_buf(),
            line,
            column,
            key,
            message,
        });
    }

    /// Reports a problem about the value `at`, under the dotted `key`.
    fn at<T>(&mut self, at: &Spanned<T>, key: &str, message: impl Into<String>) {
        self.report(Some(at.span()), Some(key.to_owned()), message.into());
    }

    /// Reports a problem about a key that has no value to point at (a missing key, a default):
    /// it points at the nearest enclosing key the file does have, if any.
    fn at_key(&mut self, key: &str, message: impl Into<String>) {
        let text = self.text;
        let index = self.index.get_or_insert_with(|| KeyIndex::build(text));
        let span = index.nearest_ancestor(key);
        self.report(span, Some(key.to_owned()), message.into());
    }

    fn missing(&mut self, key: &str) {
        self.at_key(key, "missing required key");
    }

    /// A toml syntax or serde error: one problem, naming the key its span falls on.
    fn toml_error(&mut self, e: &toml::de::Error) {
        let span = e.span();
        let key = span.as_ref().and_then(|s| {
            let index = KeyIndex::build(self.text);
            index.key_at(self.text, s.clone()).map(str::to_owned)
        });
        let mut message = e.message().trim_end().to_owned();
        // toml hands a datetime to serde as a map with a private key; say what the user wrote.
        let at_datetime = span
            .as_ref()
            .and_then(|s| self.text.get(s.clone()))
            .is_some_and(|t| t.trim().parse::<toml::value::Datetime>().is_ok());
        if at_datetime {
            message = if message.contains("$__toml_private_datetime") {
                "invalid type: datetime, expected a table".to_owned()
            } else {
                message.replace("invalid type: map", "invalid type: datetime")
            };
        }
        self.report(span, key, message);
    }

    fn study(&mut self, raw: Option<&RawStudy>) -> Option<StudyConfig> {
        let Some(raw) = raw else {
            self.at_key("study", "missing required table [study]");
            return None;
        };
        let before = self.problems.len();
        let name = match &raw.name {
            None => {
                self.missing("study.name");
                String::new()
            }
            Some(n) if n.get_ref().trim().is_empty() => {
                self.at(n, "study.name", "must not be empty");
                String::new()
            }
            Some(n) => {
                // The name reaches every worker's environment (SWEEPD_STUDY) and Optuna's
                // `studies` table.
                if let Err(message) = check_name(n.get_ref()) {
                    self.at(n, "study.name", message);
                }
                n.get_ref().clone()
            }
        };
        let direction = self
            .choice(
                raw.direction.as_ref(),
                "study.direction",
                DIRECTIONS,
                |s| match s {
                    "minimize" => Some(Direction::Minimize),
                    "maximize" => Some(Direction::Maximize),
                    _ => None,
                },
            )
            .unwrap_or(Direction::Minimize);
        let sampler = self
            .choice(
                raw.sampler.as_ref(),
                "study.sampler",
                SAMPLERS,
                |s| match s {
                    "random" => Some(SamplerKind::Random),
                    "grid" => Some(SamplerKind::Grid),
                    "tpe" => Some(SamplerKind::Tpe),
                    _ => None,
                },
            )
            .unwrap_or(SamplerKind::Random);
        let n_trials = raw.n_trials.as_ref().and_then(|n| {
            let v = *n.get_ref();
            if v < 1 {
                self.at(n, "study.n_trials", format!("must be at least 1 (got {v})"));
                None
            } else {
                Some(v as u64)
            }
        });
        let timeout = self.duration(raw.timeout.as_ref(), "study.timeout", MAX_STUDY_TIMEOUT);
        let seed = raw.seed.as_ref().and_then(|s| {
            let v = *s.get_ref();
            if v < 0 {
                self.at(s, "study.seed", format!("must not be negative (got {v})"));
                None
            } else {
                Some(v as u64)
            }
        });
        (self.problems.len() == before).then_some(StudyConfig {
            name,
            direction,
            n_trials,
            timeout,
            sampler,
            seed,
        })
    }

    fn storage(&mut self, raw: Option<&RawStorage>, base_dir: &Path) -> Option<StorageConfig> {
        let written = raw.and_then(|r| r.url.as_ref());
        let url = written.map_or(DEFAULT_STORAGE_URL, |u| u.get_ref().as_str());
        let report = |v: &mut Self, message: String| match written {
            Some(u) => v.at(u, "storage.url", message),
            None => v.at_key("storage.url", message),
        };
        let Some(rest) = url.strip_prefix("sqlite://") else {
            report(
                self,
                format!(
                    "unsupported storage URL `{url}`: only sqlite:// URLs are supported yet \
                     (e.g. \"sqlite://sweepd.db\", relative to the config file's directory)"
                ),
            );
            return None;
        };
        if rest.is_empty() {
            report(self, format!("storage URL `{url}` names no database file"));
            return None;
        }
        if let Err(message) = check_path(rest) {
            report(self, format!("the database path {message}"));
            return None;
        }
        let path = resolve(base_dir, Path::new(rest));
        if let Some(dir) = path.parent() {
            if !dir.is_dir() {
                report(
                    self,
                    format!(
                        "directory {} for the database does not exist",
                        dir.display()
                    ),
                );
                return None;
            }
        }
        if path.is_dir() {
            report(
                self,
                format!("{} is a directory, not a database file", path.display()),
            );
            return None;
        }
        Some(StorageConfig {
            url: url.to_owned(),
            path,
        })
    }

    fn worker(&mut self, raw: Option<&RawWorker>, base_dir: &Path) -> Option<WorkerConfig> {
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
        let mode = self
            .choice(raw.mode.as_ref(), "worker.mode", MODES, |s| match s {
                "persistent" => Some(WorkerMode::Persistent),
                "oneshot" => Some(WorkerMode::Oneshot),
                _ => None,
            })
            .unwrap_or(WorkerMode::Persistent);
        let recycle_after = raw.recycle_after.as_ref().and_then(|r| {
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
        });
        let max_par = match &raw.max_par {
            None => 1,
            Some(m) => {
                let v = *m.get_ref();
                if !(1..=MAX_PAR_LIMIT).contains(&v) {
                    self.at(
                        m,
                        "worker.max_par",
                        format!("must be between 1 and {MAX_PAR_LIMIT} (got {v})"),
                    );
                }
                v.clamp(1, MAX_PAR_LIMIT) as usize
            }
        };
        let trial_timeout = self.duration(
            raw.trial_timeout.as_ref(),
            "worker.trial_timeout",
            MAX_TRIAL_TIMEOUT,
        );
        let startup_timeout = self
            .duration(
                raw.startup_timeout.as_ref(),
                "worker.startup_timeout",
                MAX_STARTUP_TIMEOUT,
            )
            .unwrap_or(Duration::from_secs(120));
        let shutdown_grace = self
            .duration(
                raw.shutdown_grace.as_ref(),
                "worker.shutdown_grace",
                MAX_SHUTDOWN_GRACE,
            )
            .unwrap_or(Duration::from_secs(30));
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
        let env = self.env(raw.env.as_ref());
        let heartbeat_timeout = self.duration(
            raw.heartbeat_timeout.as_ref(),
            "worker.heartbeat_timeout",
            MAX_HEARTBEAT_TIMEOUT,
        );
        let recycle_on_growth = raw.recycle_on_growth.as_ref().and_then(|r| {
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
        });
        let log_max_bytes = self.size_at_least(
            raw.log_max_bytes.as_ref(),
            "worker.log_max_bytes",
            MIN_LOG_MAX_BYTES,
        );
        let log_max_total =
            self.size_at_least(raw.log_max_total.as_ref(), "worker.log_max_total", 0);
        let (log_max_bytes, log_max_total) = match (log_max_bytes, log_max_total) {
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
        };
        let allocator = self.allocator(raw.allocator.as_ref().map(|t| &t.0));
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
        })
    }

    fn allocator(&mut self, raw: Option<&RawAllocator>) -> AllocatorConfig {
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

    fn gpu(&mut self, raw: Option<&RawGpu>, base_dir: &Path) -> GpuConfig {
        let defaults = GpuConfig::default();
        let Some(raw) = raw else {
            return defaults;
        };
        let devices = match &raw.devices {
            None => Devices::All,
            Some(d) => self.devices(d),
        };
        let headroom = self
            .size_at_least(raw.headroom.as_ref(), "gpu.headroom", 0)
            .flatten()
            .unwrap_or(defaults.headroom);
        let trial_memory = self
            .size_at_least(raw.trial_memory.as_ref(), "gpu.trial_memory", 1)
            .flatten()
            .unwrap_or(defaults.trial_memory);
        let max_par_per_device = self.int(
            raw.max_par_per_device.as_ref(),
            "gpu.max_par_per_device",
            1..=MAX_PAR_LIMIT,
            defaults.max_par_per_device,
        );
        let gpus_per_trial = self.int(
            raw.gpus_per_trial.as_ref(),
            "gpu.gpus_per_trial",
            1..=USIZE_MAX,
            defaults.gpus_per_trial,
        );
        if let (true, Some(g)) = (gpus_per_trial > 1, &raw.gpus_per_trial) {
            // Refused here rather than at `run`, so that `sweepd check` tells the truth.
            self.at(
                g,
                "gpu.gpus_per_trial",
                format!("multi-GPU trials are not supported yet: set 1 (got {gpus_per_trial})"),
            );
        } else if let (Devices::List(list), Some(g)) = (&devices, &raw.gpus_per_trial) {
            if gpus_per_trial > list.len() {
                self.at(
                    g,
                    "gpu.gpus_per_trial",
                    format!(
                        "must be at most the number of devices listed ({}), got {gpus_per_trial}",
                        list.len()
                    ),
                );
            }
        }
        let poll_interval = match self.duration(
            raw.poll_interval.as_ref(),
            "gpu.poll_interval",
            MAX_POLL_INTERVAL,
        ) {
            Some(d) if d < MIN_POLL_INTERVAL => {
                let p = raw.poll_interval.as_ref().expect("parsed, so written");
                self.at(
                    p,
                    "gpu.poll_interval",
                    format!(
                        "must be at least {} (got {})",
                        humantime::format_duration(MIN_POLL_INTERVAL),
                        humantime::format_duration(d)
                    ),
                );
                defaults.poll_interval
            }
            d => d.unwrap_or(defaults.poll_interval),
        };
        let nvml_lib = raw.nvml_lib.as_ref().and_then(|n| {
            if n.get_ref().is_empty() {
                self.at(n, "gpu.nvml_lib", "must not be empty");
                return None;
            }
            if let Err(message) = check_path(n.get_ref()) {
                self.at(n, "gpu.nvml_lib", message);
                return None;
            }
            let path = resolve(base_dir, Path::new(n.get_ref()));
            if !path.is_file() {
                self.at(
                    n,
                    "gpu.nvml_lib",
                    format!(
                        "NVML library {} does not exist or is not a file",
                        path.display()
                    ),
                );
            }
            Some(path)
        });
        GpuConfig {
            devices,
            headroom,
            trial_memory,
            max_par_per_device,
            gpus_per_trial,
            poll_interval,
            nvml_lib,
        }
    }

    fn devices(&mut self, raw: &Spanned<RawDevices>) -> Devices {
        const KEY: &str = "gpu.devices";
        match raw.get_ref() {
            RawDevices::Word(w) => match w.as_str() {
                "all" => Devices::All,
                "none" => Devices::None,
                other => {
                    self.at(
                        raw,
                        KEY,
                        format!(
                            "unknown value {other:?}; expected \"all\", \"none\" \
                             or a list of device indices such as [0, 1]"
                        ),
                    );
                    Devices::All
                }
            },
            RawDevices::List(items) => {
                if items.is_empty() {
                    self.at(
                        raw,
                        KEY,
                        "the device list must not be empty (write \"none\" for CPU only)",
                    );
                }
                let mut list: Vec<u32> = Vec::new();
                for item in items {
                    let v = *item.get_ref();
                    match u32::try_from(v) {
                        Err(_) => self.at(
                            item,
                            KEY,
                            format!("device indices must be between 0 and {U32_MAX} (got {v})"),
                        ),
                        Ok(i) if list.contains(&i) => {
                            self.at(item, KEY, format!("duplicate device index {i}"));
                        }
                        Ok(i) => list.push(i),
                    }
                }
                Devices::List(list)
            }
        }
    }

    fn retry(&mut self, raw: Option<&RawRetry>) -> RetryConfig {
        let d = RetryConfig::default();
        let Some(raw) = raw else {
            return d;
        };
        let oom = self.int(raw.oom.as_ref(), "retry.oom", 0..=U32_MAX, d.oom);
        let cuda_fatal = self.int(
            raw.cuda_fatal.as_ref(),
            "retry.cuda_fatal",
            0..=U32_MAX,
            d.cuda_fatal,
        );
        let crash = self.int(raw.crash.as_ref(), "retry.crash", 0..=U32_MAX, d.crash);
        let breaker_threshold = self.int(
            raw.breaker_threshold.as_ref(),
            "retry.breaker_threshold",
            1..=U32_MAX,
            d.breaker_threshold,
        );
        let backoff = self.duration(
            raw.breaker_backoff.as_ref(),
            "retry.breaker_backoff",
            MAX_BREAKER_BACKOFF,
        );
        let max_backoff = self.duration(
            raw.breaker_max_backoff.as_ref(),
            "retry.breaker_max_backoff",
            MAX_BREAKER_BACKOFF,
        );
        let backoff_ok = raw.breaker_backoff.is_none() || backoff.is_some();
        let max_backoff_ok = raw.breaker_max_backoff.is_none() || max_backoff.is_some();
        let breaker_backoff = backoff.unwrap_or(d.breaker_backoff);
        let breaker_max_backoff = max_backoff.unwrap_or(d.breaker_max_backoff);
        if backoff_ok && max_backoff_ok && breaker_max_backoff < breaker_backoff {
            let message = format!(
                "must be at least breaker_backoff ({}), got {}",
                humantime::format_duration(breaker_backoff),
                humantime::format_duration(breaker_max_backoff)
            );
            match &raw.breaker_max_backoff {
                Some(m) => self.at(m, "retry.breaker_max_backoff", message),
                None => self.at_key(
                    "retry.breaker_max_backoff",
                    format!("{message} (the default)"),
                ),
            }
        }
        let oom_admission_factor = match &raw.oom_admission_factor {
            None => d.oom_admission_factor,
            Some(f) => match float_value(f.get_ref()) {
                Ok(x) if x > 0.0 && x < 1.0 => x,
                Ok(x) => {
                    self.at(
                        f,
                        "retry.oom_admission_factor",
                        format!("must be greater than 0 and less than 1 (got {x})"),
                    );
                    d.oom_admission_factor
                }
                Err(message) => {
                    self.at(f, "retry.oom_admission_factor", message);
                    d.oom_admission_factor
                }
            },
        };
        let oom_recovery = self
            .duration(
                raw.oom_recovery.as_ref(),
                "retry.oom_recovery",
                MAX_OOM_RECOVERY,
            )
            .unwrap_or(d.oom_recovery);
        let stop_after_same_error = self.int(
            raw.stop_after_same_error.as_ref(),
            "retry.stop_after_same_error",
            0..=U32_MAX,
            d.stop_after_same_error,
        );
        RetryConfig {
            oom,
            cuda_fatal,
            crash,
            breaker_threshold,
            breaker_backoff,
            breaker_max_backoff,
            oom_admission_factor,
            oom_recovery,
            stop_after_same_error,
        }
    }

    fn sampler(&mut self, raw: Option<&RawSampler>) -> SamplerConfig {
        let d = SamplerConfig::default();
        let Some(raw) = raw else {
            return d;
        };
        SamplerConfig {
            n_startup_trials: self.int(
                raw.n_startup_trials.as_ref(),
                "sampler.n_startup_trials",
                0..=USIZE_MAX,
                d.n_startup_trials,
            ),
            n_ei_candidates: self.int(
                raw.n_ei_candidates.as_ref(),
                "sampler.n_ei_candidates",
                1..=MAX_EI_CANDIDATES,
                d.n_ei_candidates,
            ),
            multivariate: raw
                .multivariate
                .as_ref()
                .map_or(d.multivariate, |b| *b.get_ref()),
            constant_liar: raw
                .constant_liar
                .as_ref()
                .map_or(d.constant_liar, |b| *b.get_ref()),
            seed: raw
                .seed
                .as_ref()
                .map(|s| self.int(Some(s), "sampler.seed", 0..=i64::MAX, 0)),
        }
    }

    fn pruner(&mut self, raw: Option<&RawPruner>) -> PrunerConfig {
        let Some(raw) = raw else {
            return PrunerConfig::None;
        };
        /// Which pruner type each setting belongs to.
        #[derive(Clone, Copy, PartialEq)]
        enum Kind {
            None,
            Median,
            Asha,
        }
        let written = self.choice(raw.kind.as_ref(), "pruner.type", PRUNERS, |s| match s {
            "none" => Some(Kind::None),
            "median" => Some(Kind::Median),
            "asha" => Some(Kind::Asha),
            _ => None,
        });
        let kind = match (&raw.kind, written) {
            (None, _) => Kind::None,
            (Some(_), Some(k)) => k,
            // Unknown type: which settings apply cannot be told.
            (Some(_), None) => return PrunerConfig::None,
        };
        let fields = [
            ("n_startup_trials", &raw.n_startup_trials, Kind::Median),
            ("n_warmup_steps", &raw.n_warmup_steps, Kind::Median),
            ("interval_steps", &raw.interval_steps, Kind::Median),
            ("min_resource", &raw.min_resource, Kind::Asha),
            ("reduction_factor", &raw.reduction_factor, Kind::Asha),
            (
                "min_early_stopping_rate",
                &raw.min_early_stopping_rate,
                Kind::Asha,
            ),
        ];
        let (type_name, hint) = match kind {
            Kind::None if raw.kind.is_none() => ("none", " (the default); set `type`"),
            Kind::None => ("none", ""),
            Kind::Median => ("median", ""),
            Kind::Asha => ("asha", ""),
        };
        for (name, value, owner) in fields {
            if let Some(v) = value {
                if owner != kind {
                    let owner = if owner == Kind::Median {
                        "median"
                    } else {
                        "asha"
                    };
                    self.at(
                        v,
                        &format!("pruner.{name}"),
                        format!(
                            "`{name}` is a setting of pruner type {owner:?} and does not apply \
                             to type {type_name:?}{hint}"
                        ),
                    );
                }
            }
        }
        match kind {
            Kind::None => PrunerConfig::None,
            Kind::Median => PrunerConfig::Median {
                n_startup_trials: self.int(
                    raw.n_startup_trials.as_ref(),
                    "pruner.n_startup_trials",
                    0..=USIZE_MAX,
                    5,
                ),
                n_warmup_steps: self.int(
                    raw.n_warmup_steps.as_ref(),
                    "pruner.n_warmup_steps",
                    0..=i64::MAX,
                    0,
                ),
                interval_steps: self.int(
                    raw.interval_steps.as_ref(),
                    "pruner.interval_steps",
                    1..=i64::MAX,
                    1,
                ),
            },
            Kind::Asha => PrunerConfig::Asha {
                min_resource: self.int(
                    raw.min_resource.as_ref(),
                    "pruner.min_resource",
                    1..=i64::MAX,
                    1,
                ),
                reduction_factor: self.int(
                    raw.reduction_factor.as_ref(),
                    "pruner.reduction_factor",
                    2..=U32_MAX,
                    3,
                ),
                min_early_stopping_rate: self.int(
                    raw.min_early_stopping_rate.as_ref(),
                    "pruner.min_early_stopping_rate",
                    0..=U32_MAX,
                    0,
                ),
            },
        }
    }

    fn metrics(&mut self, raw: Option<&RawMetrics>) -> MetricsConfig {
        let Some(raw) = raw else {
            return MetricsConfig::default();
        };
        let allow_remote = raw.allow_remote.as_ref().is_some_and(|b| *b.get_ref());
        let listen = raw.listen.as_ref().and_then(|l| {
            const KEY: &str = "metrics.listen";
            let Ok(addr) = l.get_ref().trim().parse::<SocketAddr>() else {
                self.at(
                    l,
                    KEY,
                    format!(
                        "invalid address {:?}: write an IP address and port, e.g. \
                         \"127.0.0.1:9464\" (host names are not resolved)",
                        l.get_ref()
                    ),
                );
                return None;
            };
            if addr.port() == 0 {
                self.at(
                    l,
                    KEY,
                    "must name a port other than 0, e.g. \"127.0.0.1:9464\"",
                );
                return None;
            }
            if !allow_remote && !is_loopback(&addr) {
                self.at(
                    l,
                    KEY,
                    format!(
                        "{addr} is not a loopback address, and the metrics endpoint has no \
                         authentication; set `allow_remote = true` in [metrics] to serve it \
                         beyond this machine"
                    ),
                );
                return None;
            }
            Some(addr)
        });
        MetricsConfig {
            listen,
            allow_remote,
        }
    }

    /// An integer setting within `range`, or `default` if absent (or invalid, after reporting).
    fn int<T: TryFrom<i64>>(
        &mut self,
        raw: Option<&Spanned<i64>>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
        default: T,
    ) -> T {
        let Some(r) = raw else {
            return default;
        };
        let v = *r.get_ref();
        if range.contains(&v) {
            if let Ok(t) = T::try_from(v) {
                return t;
            }
        }
        let (min, max) = (*range.start(), *range.end());
        // A maximum that is only the type's limit is named only when it was exceeded.
        let type_limit = [i64::MAX, U32_MAX, USIZE_MAX].contains(&max);
        let message = if !type_limit {
            format!("must be between {min} and {max} (got {v})")
        } else if v > max {
            format!("must be at most {max} (got {v})")
        } else if min == 0 {
            format!("must not be negative (got {v})")
        } else {
            format!("must be at least {min} (got {v})")
        };
        self.at(r, key, message);
        default
    }

    /// A size in bytes, at most [`MAX_SIZE`]: a TOML integer or a string with a unit (see
    /// [`parse_size`]).
    fn size(&mut self, raw: &Spanned<toml::Value>, key: &str) -> Option<u64> {
        let result = match raw.get_ref() {
            toml::Value::Integer(i) => {
                u64::try_from(*i).map_err(|_| format!("must not be negative (got {i})"))
            }
            toml::Value::String(s) => parse_size(s),
            other => Err(format!(
                "must be a size: an integer number of bytes or a string such as \"6GiB\", \
                 not {}",
                other.type_str()
            )),
        }
        .and_then(|v| {
            if v > MAX_SIZE {
                Err(format!(
                    "{} is too large: at most {}",
                    raw.get_ref(),
                    format_size(MAX_SIZE)
                ))
            } else {
                Ok(v)
            }
        });
        result.map_err(|message| self.at(raw, key, message)).ok()
    }

    /// An optional size of at least `min` bytes: `None` if it was written but is invalid
    /// (reported), `Some(None)` if absent.
    fn size_at_least(
        &mut self,
        raw: Option<&Spanned<toml::Value>>,
        key: &str,
        min: u64,
    ) -> Option<Option<u64>> {
        let Some(r) = raw else {
            return Some(None);
        };
        let v = self.size(r, key)?;
        if v < min {
            let message = if min == 1 {
                "must be greater than zero".to_owned()
            } else {
                format!(
                    "must be at least {} (got {})",
                    format_size(min),
                    format_size(v)
                )
            };
            self.at(r, key, message);
            return None;
        }
        Some(Some(v))
    }

    fn command(&mut self, raw: &Spanned<Vec<Spanned<String>>>) -> Vec<String> {
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

    fn env(&mut self, raw: Option<&Entries<Spanned<toml::Value>>>) -> BTreeMap<String, String> {
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

    /// A keyword setting: the parsed value, or `None` (and a problem) if it is not one of `allowed`.
    fn choice<T>(
        &mut self,
        raw: Option<&Spanned<String>>,
        key: &str,
        allowed: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        let raw = raw?;
        let parsed = parse(raw.get_ref());
        if parsed.is_none() {
            self.at(
                raw,
                key,
                format!(
                    "unknown value {:?}; expected one of {allowed}",
                    raw.get_ref()
                ),
            );
        }
        parsed
    }

    /// A duration greater than zero and at most `max`.
    fn duration(
        &mut self,
        raw: Option<&Spanned<String>>,
        key: &str,
        max: Duration,
    ) -> Option<Duration> {
        let raw = raw?;
        match humantime::parse_duration(raw.get_ref()) {
            Ok(d) if d.is_zero() => {
                self.at(raw, key, "must be greater than zero");
                None
            }
            Ok(d) if d > max => {
                self.at(
                    raw,
                    key,
                    format!(
                        "{:?} is too long: at most {}",
                        raw.get_ref(),
                        humantime::format_duration(max)
                    ),
                );
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.at(
                    raw,
                    key,
                    format!(
                        "invalid duration {:?}: {e} (write e.g. \"90s\", \"2h\", \"1h 30m\")",
                        raw.get_ref()
                    ),
                );
                None
            }
        }
    }

    fn space(&mut self, raw: Option<&Entries<Table<RawParam>>>) -> Option<SearchSpace> {
        let entries = raw.map_or(&[][..], |e| &e.0);
        if entries.is_empty() {
            self.at_key(
                "params",
                "the search space is empty: define at least one [params.NAME] table",
            );
            return None;
        }
        let before = self.problems.len();
        let mut params = Vec::new();
        for (name, raw) in entries {
            if let Some(dist) = self.param(name, &raw.0) {
                params.push(ParamSpec {
                    name: name.get_ref().clone(),
                    dist,
                });
            }
        }
        // `{"name":value,...}` with every value at its longest.
        let longest = |p: &ParamSpec| {
            serde_json::Value::from(p.name.as_str()).to_string().len()
                + max_value_json_len(&p.dist)
                + 2
        };
        let total: usize = 2 + params.iter().map(longest).sum::<usize>();
        if total > MAX_PARAMS_JSON_BYTES {
            let largest = params
                .iter()
                .max_by_key(|p| longest(p))
                .expect("a non-empty total");
            self.at_key(
                "params",
                format!(
                    "one trial's params can take {} as JSON, more than the {} a worker can be \
                     given (one protocol line, one environment variable); the largest is {} \
                     ({}): use shorter choices or names, or fewer params",
                    format_size(total as u64),
                    format_size(MAX_PARAMS_JSON_BYTES as u64),
                    dotted(&["params", &largest.name]),
                    format_size(longest(largest) as u64)
                ),
            );
        }
        (self.problems.len() == before).then_some(SearchSpace { params })
    }

    fn param(&mut self, name: &Spanned<String>, raw: &RawParam) -> Option<Distribution> {
        let before = self.problems.len();
        let base = dotted(&["params", name.get_ref()]);
        if name.get_ref().is_empty() {
            self.at(name, &base, "param names must not be empty");
        } else if let Err(message) = check_name(name.get_ref()) {
            // Names reach Optuna's `trial_params` and a oneshot worker's `--name=value`.
            self.at(name, &base, format!("param name {message}"));
        } else if name.get_ref().starts_with(RESERVED_PARAM_PREFIX) {
            self.at(
                name,
                &base,
                format!("param names may not start with {RESERVED_PARAM_PREFIX:?} (reserved)"),
            );
        }
        let p = ParamCtx {
            base: &base,
            name,
            raw,
        };
        let dist = match &raw.kind {
            None => {
                self.at(
                    name,
                    &p.key("type"),
                    format!("missing required key; expected one of {PARAM_TYPES}"),
                );
                None
            }
            Some(kind) => match kind.get_ref().as_str() {
                "float" => self.float_param(&p),
                "int" => self.int_param(&p),
                "categorical" => self.categorical_param(&p),
                other => {
                    self.at(
                        kind,
                        &p.key("type"),
                        format!("unknown param type {other:?}; expected one of {PARAM_TYPES}"),
                    );
                    None
                }
            },
        };
        dist.filter(|_| self.problems.len() == before)
    }

    fn float_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        if let Some(c) = &p.raw.choices {
            self.at(
                c,
                &p.key("choices"),
                "only categorical params take `choices`",
            );
        }
        let low = self.bound(p, "low", &p.raw.low, float_value);
        let high = self.bound(p, "high", &p.raw.high, float_value);
        let step = p.raw.step.as_ref().and_then(|s| {
            let v = self.value_of(p, "step", s, float_value)?;
            if v <= 0.0 {
                self.at(
                    s,
                    &p.key("step"),
                    format!("must be greater than 0 (got {v})"),
                );
                return None;
            }
            Some(v)
        });
        let log = p.raw.log.as_ref().is_some_and(|l| *l.get_ref());
        if let (true, Some(s)) = (log, &p.raw.step) {
            self.at(
                s,
                &p.key("step"),
                "cannot be combined with log = true (Optuna refuses a stepped log-scale float)",
            );
        }
        let (low, high) = (low?, high?);
        if !self.ordered(p, low, high) {
            return None;
        }
        if log && low <= 0.0 {
            self.log_needs_positive(p, low);
        }
        if let (Some(st), Some(s)) = (step, &p.raw.step) {
            let k = (high - low) / st;
            if (k - k.round()).abs() > 1e-8 * k.abs().max(1.0) {
                self.at(
                    s,
                    &p.key("step"),
                    format!("step ({st}) does not divide high - low ({})", high - low),
                );
            }
        }
        Some(Distribution::Float {
            low,
            high,
            step,
            log,
        })
    }

    fn int_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        if let Some(c) = &p.raw.choices {
            self.at(
                c,
                &p.key("choices"),
                "only categorical params take `choices`",
            );
        }
        let low = self.bound(p, "low", &p.raw.low, int_value);
        let high = self.bound(p, "high", &p.raw.high, int_value);
        let log = p.raw.log.as_ref().is_some_and(|l| *l.get_ref());
        let step = match &p.raw.step {
            None => Some(1),
            Some(s) => self.value_of(p, "step", s, int_value).and_then(|v| {
                if v <= 0 {
                    self.at(
                        s,
                        &p.key("step"),
                        format!("must be greater than 0 (got {v})"),
                    );
                    None
                } else if log && v != 1 {
                    self.at(
                        s,
                        &p.key("step"),
                        format!("must be 1 with log = true (got {v}; Optuna refuses other steps)"),
                    );
                    None
                } else {
                    Some(v)
                }
            }),
        };
        let (low, high) = (low?, high?);
        if !self.ordered(p, low as f64, high as f64) {
            return None;
        }
        if log && low <= 0 {
            self.log_needs_positive(p, low as f64);
        }
        let step = step?;
        // i128: high - low can overflow i64 for extreme bounds.
        let span = i128::from(high) - i128::from(low);
        if span % i128::from(step) != 0 {
            let s = p
                .raw
                .step
                .as_ref()
                .expect("a step other than 1 was written");
            self.at(
                s,
                &p.key("step"),
                format!("step ({step}) does not divide high - low ({span})"),
            );
        }
        Some(Distribution::Int {
            low,
            high,
            step,
            log,
        })
    }

    fn categorical_param(&mut self, p: &ParamCtx) -> Option<Distribution> {
        let numeric = [
            ("low", p.raw.low.as_ref().map(Spanned::span)),
            ("high", p.raw.high.as_ref().map(Spanned::span)),
            ("step", p.raw.step.as_ref().map(Spanned::span)),
            ("log", p.raw.log.as_ref().map(Spanned::span)),
        ];
        for (field, span) in numeric {
            if let Some(span) = span {
                self.report(
                    Some(span),
                    Some(p.key(field)),
                    format!("`{field}` does not apply to categorical params"),
                );
            }
        }
        let Some(raw_choices) = &p.raw.choices else {
            self.at(
                p.name,
                &p.key("choices"),
                "missing required key: categorical params need `choices`",
            );
            return None;
        };
        if raw_choices.get_ref().is_empty() {
            self.at(raw_choices, &p.key("choices"), "must not be empty");
            return None;
        }
        let mut choices: Vec<serde_json::Value> = Vec::new();
        for c in raw_choices.get_ref() {
            let json = match c.get_ref() {
                toml::Value::String(s) => Some(serde_json::Value::from(s.as_str())),
                toml::Value::Integer(i) => Some(serde_json::Value::from(*i)),
                toml::Value::Boolean(b) => Some(serde_json::Value::from(*b)),
                toml::Value::Float(f) => {
                    serde_json::Number::from_f64(*f).map(serde_json::Value::Number)
                }
                toml::Value::Datetime(_) | toml::Value::Array(_) | toml::Value::Table(_) => None,
            };
            let Some(json) = json else {
                self.at(
                    c,
                    &p.key("choices"),
                    format!(
                        "choices must be strings, integers, finite floats or booleans, not {}",
                        c.get_ref()
                    ),
                );
                continue;
            };
            if let Some(text) = json.as_str() {
                // A oneshot worker gets the choice as `--name=choice`, where NUL cannot travel.
                if text.contains('\0') {
                    self.at(
                        c,
                        &p.key("choices"),
                        "choices may not contain NUL bytes (a worker could not be given them)",
                    );
                    continue;
                }
                if text.len() > MAX_CHOICE_BYTES {
                    self.at(
                        c,
                        &p.key("choices"),
                        format!(
                            "a choice is too long: at most {} (got {})",
                            format_size(MAX_CHOICE_BYTES as u64),
                            format_size(text.len() as u64)
                        ),
                    );
                    continue;
                }
            }
            // Python's equality (1 == 1.0): Optuna would map both to the same index.
            if choices.iter().any(|seen| same_choice(seen, &json)) {
                self.at(c, &p.key("choices"), format!("duplicate choice {json}"));
                continue;
            }
            choices.push(json);
        }
        let dist = Distribution::Categorical { choices };
        let len = dist.optuna_json().len();
        if len > MAX_DISTRIBUTION_JSON_BYTES {
            self.at(
                raw_choices,
                &p.key("choices"),
                format!(
                    "the choices take {} as Optuna's distribution_json, stored with every \
                     trial: at most {} (use fewer or shorter choices)",
                    format_size(len as u64),
                    format_size(MAX_DISTRIBUTION_JSON_BYTES as u64)
                ),
            );
        }
        Some(dist)
    }

    /// A required low/high bound.
    fn bound<T>(
        &mut self,
        p: &ParamCtx,
        field: &str,
        raw: &Option<Spanned<toml::Value>>,
        convert: fn(&toml::Value) -> Result<T, String>,
    ) -> Option<T> {
        match raw {
            None => {
                self.at(p.name, &p.key(field), "missing required key");
                None
            }
            Some(v) => self.value_of(p, field, v, convert),
        }
    }

    fn value_of<T>(
        &mut self,
        p: &ParamCtx,
        field: &str,
        raw: &Spanned<toml::Value>,
        convert: fn(&toml::Value) -> Result<T, String>,
    ) -> Option<T> {
        convert(raw.get_ref())
            .map_err(|message| self.at(raw, &p.key(field), message))
            .ok()
    }

    fn ordered(&mut self, p: &ParamCtx, low: f64, high: f64) -> bool {
        if low < high {
            return true;
        }
        let at = p
            .raw
            .low
            .as_ref()
            .expect("low was converted, so it was written");
        self.at(
            at,
            &p.key("low"),
            format!("low ({low}) must be less than high ({high})"),
        );
        false
    }

    fn log_needs_positive(&mut self, p: &ParamCtx, low: f64) {
        let at = p.raw.log.as_ref().expect("log is true, so it was written");
        self.at(
            at,
            &p.key("log"),
            format!("a log scale needs low > 0 (got low = {low})"),
        );
    }

    /// Grid-specific checks, once every param is otherwise valid.
    fn grid(
        &mut self,
        raw_params: Option<&Entries<Table<RawParam>>>,
        raw_study: Option<&RawStudy>,
        space: &SearchSpace,
    ) {
        let names = raw_params.map_or(&[][..], |e| &e.0);
        match space.grid_lens() {
            Err(continuous) => {
                for i in continuous {
                    let (Some(spec), Some((name, _))) = (space.params.get(i), names.get(i)) else {
                        continue;
                    };
                    self.at(
                        name,
                        &dotted(&["params", &spec.name]),
                        "the grid sampler needs a `step` for continuous params \
                         (and so cannot search a log-scale float)",
                    );
                }
            }
            Ok(lens) => {
                let points = grid_points(&lens);
                if points > MAX_GRID_POINTS {
                    let message = format!(
                        "the grid has {points} points, more than the {MAX_GRID_POINTS} allowed; \
                         use larger steps, fewer params or the random sampler"
                    );
                    match raw_study.and_then(|s| s.sampler.as_ref()) {
                        Some(s) => self.at(s, "study.sampler", message),
                        None => self.at_key("study.sampler", message),
                    }
                }
            }
        }
    }
}

/// What a param's problems need to name and locate themselves.
struct ParamCtx<'a> {
    /// `params.NAME`
    base: &'a str,
    name: &'a Spanned<String>,
    raw: &'a RawParam,
}

impl ParamCtx<'_> {
    fn key(&self, field: &str) -> String {
        format!("{}.{field}", self.base)
    }
}

/// A study or param name: no NUL byte (it cannot reach a worker's argv or environment) and at
/// most [`MAX_NAME_CHARS`] characters (Optuna's column is VARCHAR(512)). The message completes
/// "the name ...".
fn check_name(name: &str) -> Result<(), String> {
    if name.contains('\0') {
        return Err("may not contain NUL bytes (it is passed to every worker)".to_owned());
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "is too long: at most {MAX_NAME_CHARS} characters (Optuna's limit), got {chars}"
        ));
    }
    Ok(())
}

/// A string passed to exec as one argument or one `NAME=value`: at most
/// [`MAX_EXEC_STRING_BYTES`]. The message completes "the argument ...".
fn check_exec_string(s: &str) -> Result<(), String> {
    if s.len() > MAX_EXEC_STRING_BYTES {
        return Err(format!(
            "is too long: at most {} (got {})",
            format_size(MAX_EXEC_STRING_BYTES as u64),
            format_size(s.len() as u64)
        ));
    }
    Ok(())
}

/// A path written in the file: a NUL byte cannot reach the operating system.
fn check_path(p: &str) -> Result<(), String> {
    if p.contains('\0') {
        return Err("may not contain NUL bytes".to_owned());
    }
    Ok(())
}

/// Whether the directory `dir` is or can be created: the nearest part of it that exists must be
/// a directory (`create_dir_all` fails on a file or a dangling symlink, and only at `run`).
fn check_dir_creatable(dir: &Path) -> Result<(), String> {
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

/// The longest a param's value can be as JSON, as a worker receives it: a float at most 24
/// characters (`-2.2250738585072014e-308`), an int 20 (`-9223372036854775808`), a choice its own.
fn max_value_json_len(dist: &Distribution) -> usize {
    match dist {
        Distribution::Float { .. } => 24,
        Distribution::Int { .. } => 20,
        Distribution::Categorical { choices } => choices
            .iter()
            .map(|c| c.to_string().len())
            .max()
            .unwrap_or(0),
    }
}

fn float_value(v: &toml::Value) -> Result<f64, String> {
    let x = match v {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        other => return Err(format!("must be a number, not {}", other.type_str())),
    };
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("must be finite (got {x})"))
    }
}

fn int_value(v: &toml::Value) -> Result<i64, String> {
    match v {
        toml::Value::Integer(i) => Ok(*i),
        toml::Value::Float(f) => Err(format!("int params need integer values (got {f})")),
        other => Err(format!(
            "int params need integer values, not {}",
            other.type_str()
        )),
    }
}

/// Checks a `PYTORCH_CUDA_ALLOC_CONF` value: comma-separated `key:value` pairs (a value may be
/// a bracketed list with commas of its own, as `roundup_power2_divisions:[256:1,>:8]`) whose keys
/// PyTorch documents.
fn check_pytorch_alloc_conf(conf: &str) -> Result<(), String> {
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

fn is_loopback(addr: &SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(a) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

fn same_choice(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// `p` against `base` unless absolute, without `.` components; `..` is kept, since resolving it
/// lexically is wrong across symlinks and resolving it on disk would require the path to exist.
fn resolve(base: &Path, p: &Path) -> PathBuf {
    let joined = base.join(p);
    // `base` is absolute, so this only normalizes and never consults the current directory.
    std::path::absolute(&joined).unwrap_or(joined)
}

/// Characters of one key shown in a dotted path; the rest is elided.
const MAX_KEY_SHOWN: usize = 64;

/// A dotted key path as TOML would write it: bare keys as is, others quoted (keys longer than
/// [`MAX_KEY_SHOWN`] characters are cut, with an ellipsis).
fn dotted(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        push_key(&mut out, part);
    }
    out
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    // A key megabytes long (rejected as such) is named by its start, not copied into every
    // message about it.
    let (key, cut) = match key.char_indices().nth(MAX_KEY_SHOWN) {
        Some((i, _)) => (&key[..i], "…"),
        None => (key, ""),
    };
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        path.push_str(key);
    } else {
        path.push_str(&format!("{key:?}"));
    }
    path.push_str(cut);
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

// ---------------------------------------------------------------------------------------------
// Naming the key a span falls on. toml's errors carry a span and say "unknown field `x`" or
// "invalid type", but not which table they are in; re-reading the document into a tree of keys
// with their spans recovers the full dotted path.

/// Every key in a document, as (dotted path, span of the key itself).
struct KeyIndex(Vec<(String, Range<usize>)>);

impl KeyIndex {
    /// Empty if the text does not parse as TOML (a syntax error has no key to name).
    fn build(text: &str) -> KeyIndex {
        let mut keys = Vec::new();
        if let Ok(root) = toml::from_str::<Node>(text) {
            root.collect_keys("", &mut keys);
        }
        KeyIndex(keys)
    }

    /// The dotted path of the key an error span points at.
    fn key_at(&self, text: &str, span: Range<usize>) -> Option<&str> {
        // Unknown fields: toml points at the key itself.
        if let Some((path, _)) = self.0.iter().find(|(_, k)| *k == span) {
            return Some(path);
        }
        // A table defined by a header (e.g. `[[study]]` where a table is expected): the span
        // starts at the header, which names the table last.
        let start = span.start;
        if !text.is_char_boundary(start) {
            return None;
        }
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let header = text[start..].starts_with('[') && text[line_start..start].trim().is_empty();
        if header {
            let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            if let Some((path, _)) = self
                .0
                .iter()
                .filter(|(_, k)| k.start >= start && k.end <= line_end)
                .max_by_key(|(_, k)| k.start)
            {
                return Some(path);
            }
        }
        // A value of the wrong type: the last key written before it is the one it belongs to.
        self.0
            .iter()
            .filter(|(_, k)| k.end <= start)
            .max_by_key(|(_, k)| k.start)
            .map(|(path, _)| path.as_str())
    }

    /// Span of the longest prefix of `key` the document has, e.g. the `[study]` header for a
    /// missing `study.name`.
    fn nearest_ancestor(&self, key: &str) -> Option<Range<usize>> {
        let mut candidate = key;
        loop {
            if let Some((_, span)) = self.0.iter().find(|(p, _)| p == candidate) {
                return Some(span.clone());
            }
            candidate = &candidate[..candidate.rfind('.')?];
        }
    }
}

/// A TOML document reduced to its keys.
enum Node {
    Table(Vec<(Spanned<String>, Node)>),
    Array(Vec<Node>),
    Leaf,
}

impl Node {
    fn collect_keys(&self, path: &str, out: &mut Vec<(String, Range<usize>)>) {
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    let mut p = path.to_owned();
                    push_key(&mut p, key.get_ref());
                    out.push((p.clone(), key.span()));
                    value.collect_keys(&p, out);
                }
            }
            Node::Array(items) => {
                for item in items {
                    item.collect_keys(path, out);
                }
            }
            Node::Leaf => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        loop {
            match map.next_key::<Spanned<String>>() {
                Ok(Some(key)) => {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(None) => return Ok(Node::Table(entries)),
                // toml hands a datetime to visitors as a one-entry map whose key has no span;
                // it holds no keys to index, so it is a leaf.
                Err(_) if entries.is_empty() => return Ok(Node::Leaf),
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FULL: &str = r#"[study]
name = "example"
direction = "maximize"
n_trials = 200
timeout = "1h 30m"
sampler = "random"
seed = 1

[storage]
url = "sqlite://sweepd.db"

[worker]
command = ["python3", "examples/quadratic_worker.py"]
mode = "persistent"
recycle_after = 50
max_par = 4
trial_timeout = "1h"
startup_timeout = "2m"
shutdown_grace = "30s"
log_dir = "sweepd-logs"
cwd = "."

[worker.env]
FOO = "bar"
THREADS = 4
SCALE = 1.5
DEBUG = true

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true

[params.layers]
type = "int"
low = 1
high = 9
step = 2

[params.dropout]
type = "float"
low = 0
high = 0.5
step = 0.1

[params.opt]
type = "categorical"
choices = ["adam", "sgd", 3, 0.5, true]
"#;

    /// A valid config with `study`, `worker` and `rest` spliced in (TOML keeps a table's keys
    /// under its header, so extra keys must go there, not at the end).
    fn cfg(study: &str, worker: &str, rest: &str) -> String {
        format!("[study]\nname = \"s\"\n{study}\n[worker]\ncommand = [\"w\"]\n{worker}\n{rest}")
    }

    const PX: &str = "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";

    fn parse_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, &dir.join("supervisor.toml"))
    }

    fn problems(text: &str) -> Vec<Problem> {
        let dir = tempfile::tempdir().unwrap();
        match parse_in(dir.path(), text) {
            Ok(c) => panic!("expected problems, parsed {c:?}"),
            Err(e) => e.problems,
        }
    }

    /// The single problem `text` has; it must name `key`.
    fn only_problem(text: &str, key: &str) -> Problem {
        let ps = problems(text);
        assert_eq!(ps.len(), 1, "expected one problem, got {ps:#?}");
        assert_eq!(ps[0].key.as_deref(), Some(key), "{:#?}", ps[0]);
        ps[0].clone()
    }

    fn param(text: &str) -> Distribution {
        let dir = tempfile::tempdir().unwrap();
        let c = parse_in(dir.path(), &cfg("", "", text)).unwrap();
        c.space.params[0].dist.clone()
    }

    #[test]
    fn parses_full_example() {
        let dir = tempfile::tempdir().unwrap();
        let c = parse_in(dir.path(), FULL).unwrap();
        assert_eq!(c.path, dir.path().join("supervisor.toml"));
        assert_eq!(c.base_dir, dir.path());

        assert_eq!(c.study.name, "example");
        assert_eq!(c.study.direction, Direction::Maximize);
        assert_eq!(c.study.n_trials, Some(200));
        assert_eq!(c.study.timeout, Some(Duration::from_secs(90 * 60)));
        assert_eq!(c.study.sampler, SamplerKind::Random);
        assert_eq!(c.study.seed, Some(1));

        assert_eq!(c.storage.url, "sqlite://sweepd.db");
        assert_eq!(c.storage.path, dir.path().join("sweepd.db"));

        let w = &c.worker;
        assert_eq!(w.command, ["python3", "examples/quadratic_worker.py"]);
        assert_eq!(w.mode, WorkerMode::Persistent);
        assert_eq!(w.recycle_after, Some(50));
        assert_eq!(w.max_par, 4);
        assert_eq!(w.trial_timeout, Some(Duration::from_secs(3600)));
        assert_eq!(w.startup_timeout, Duration::from_secs(120));
        assert_eq!(w.shutdown_grace, Duration::from_secs(30));
        assert_eq!(w.log_dir, dir.path().join("sweepd-logs"));
        assert_eq!(w.cwd, dir.path());
        let env: Vec<_> = w
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("DEBUG", "true"),
                ("FOO", "bar"),
                ("SCALE", "1.5"),
                ("THREADS", "4")
            ]
        );

        let names: Vec<_> = c.space.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["lr", "layers", "dropout", "opt"], "file order");
        let dists: Vec<_> = c.space.params.iter().map(|p| p.dist.clone()).collect();
        assert_eq!(
            dists,
            [
                Distribution::Float {
                    low: 1e-5,
                    high: 1e-1,
                    step: None,
                    log: true
                },
                Distribution::Int {
                    low: 1,
                    high: 9,
                    step: 2,
                    log: false
                },
                Distribution::Float {
                    low: 0.0,
                    high: 0.5,
                    step: Some(0.1),
                    log: false
                },
                Distribution::Categorical {
                    choices: vec![
                        json!("adam"),
                        json!("sgd"),
                        json!(3),
                        json!(0.5),
                        json!(true)
                    ]
                },
            ]
        );
    }

    #[test]
    fn applies_defaults_for_optional_keys() {
        let dir = tempfile::tempdir().unwrap();
        let c = parse_in(dir.path(), &cfg("", "", PX)).unwrap();
        assert_eq!(c.study.direction, Direction::Minimize);
        assert_eq!(c.study.sampler, SamplerKind::Random);
        assert_eq!(c.study.n_trials, None);
        assert_eq!(c.study.timeout, None);
        assert_eq!(c.study.seed, None);
        assert_eq!(c.storage.url, "sqlite://sweepd.db");
        assert_eq!(c.storage.path, dir.path().join("sweepd.db"));
        let w = &c.worker;
        assert_eq!(w.mode, WorkerMode::Persistent);
        assert_eq!(w.recycle_after, None);
        assert_eq!(w.max_par, 1);
        assert_eq!(w.trial_timeout, None);
        assert_eq!(w.startup_timeout, Duration::from_secs(120));
        assert_eq!(w.shutdown_grace, Duration::from_secs(30));
        assert_eq!(w.log_dir, dir.path().join("sweepd-logs"));
        assert_eq!(w.cwd, dir.path());
        assert!(w.env.is_empty());
        assert_eq!(param(PX).grid_len(), None);
    }

    #[test]
    fn int_step_defaults_to_one_and_accepts_integer_written_floats_for_float_params() {
        assert_eq!(
            param("[params.n]\ntype = \"int\"\nlow = 1\nhigh = 4\nlog = true\n"),
            Distribution::Int {
                low: 1,
                high: 4,
                step: 1,
                log: true
            }
        );
        assert_eq!(
            param("[params.x]\ntype = \"float\"\nlow = 1\nhigh = 2\n"),
            Distribution::Float {
                low: 1.0,
                high: 2.0,
                step: None,
                log: false
            }
        );
    }

    #[test]
    fn params_may_be_written_as_inline_or_dotted_tables() {
        let d = param("[params]\nx = { type = \"int\", low = 0, high = 3 }\n");
        assert!(matches!(
            d,
            Distribution::Int {
                low: 0,
                high: 3,
                ..
            }
        ));
        let d = param("[params]\nx.type = \"categorical\"\nx.choices = [\"a\"]\n");
        assert_eq!(
            d,
            Distribution::Categorical {
                choices: vec![json!("a")]
            }
        );
    }

    #[test]
    fn recycle_after_zero_means_never() {
        let dir = tempfile::tempdir().unwrap();
        let c = parse_in(dir.path(), &cfg("", "recycle_after = 0", PX)).unwrap();
        assert_eq!(c.worker.recycle_after, None);
    }

    #[test]
    fn resolves_paths_against_the_config_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        let text = cfg(
            "",
            "cwd = \"./run\"\nlog_dir = \"run/logs\"",
            &format!("[storage]\nurl = \"sqlite://run/s.db\"\n{PX}"),
        );
        let c = parse_in(dir.path(), &text).unwrap();
        assert_eq!(c.worker.cwd, dir.path().join("run"));
        assert_eq!(c.worker.log_dir, dir.path().join("run/logs"));
        assert_eq!(c.storage.path, dir.path().join("run/s.db"));
    }

    #[test]
    fn sqlite_url_with_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("abs.db");
        let text = cfg(
            "",
            "",
            &format!("[storage]\nurl = \"sqlite://{}\"\n{PX}", db.display()),
        );
        let c = parse_in(dir.path(), &text).unwrap();
        assert_eq!(c.storage.path, db);
    }

    #[test]
    fn relative_config_path_is_made_absolute() {
        let c = Config::parse(&cfg("", "", PX), Path::new("supervisor.toml")).unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(c.path, cwd.join("supervisor.toml"));
        assert_eq!(c.base_dir, cwd);
        assert_eq!(c.worker.cwd, cwd);
    }

    #[test]
    fn load_reads_the_file_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("supervisor.toml");
        std::fs::write(&file, FULL).unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(c.study.name, "example");
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(
            entries.len(),
            1,
            "loading must not create the db or log dir"
        );
    }

    #[test]
    fn load_names_an_unreadable_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("missing.toml");
        let e = Config::load(&file).unwrap_err();
        assert_eq!(e.problems.len(), 1);
        assert!(e.to_string().starts_with(&format!("{}: ", file.display())));
        assert!(e.to_string().contains("cannot read config file"), "{e}");
    }

    #[test]
    fn direction_helpers() {
        assert_eq!(Direction::Minimize.as_optuna(), "MINIMIZE");
        assert_eq!(Direction::Maximize.as_optuna(), "MAXIMIZE");
        assert!(Direction::Minimize.better(1.0, 2.0));
        assert!(!Direction::Minimize.better(2.0, 2.0));
        assert!(Direction::Maximize.better(2.0, 1.0));
        assert!(!Direction::Maximize.better(f64::NAN, 1.0));
    }

    #[test]
    fn problem_display_format() {
        let mut p = Problem {
            file: PathBuf::from("supervisor.toml"),
            line: Some(12),
            column: Some(7),
            key: Some("params.lr.low".into()),
            message: "low (0.5) must be less than high (0.1)".into(),
        };
        assert_eq!(
            p.to_string(),
            "supervisor.toml:12:7: `params.lr.low`: low (0.5) must be less than high (0.1)"
        );
        p.line = None;
        p.key = None;
        assert_eq!(
            p.to_string(),
            "supervisor.toml: low (0.5) must be less than high (0.1)"
        );
        let e = ConfigError {
            problems: vec![p.clone(), p],
        };
        assert_eq!(e.to_string().lines().count(), 2);
    }

    #[test]
    fn collects_every_problem() {
        let text = cfg(
            "n_trials = 0\ndirection = \"up\"",
            "max_par = 0",
            "[params.x]\ntype = \"int\"\nlow = 5\nhigh = 1\n",
        );
        let keys: Vec<_> = problems(&text).into_iter().filter_map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "study.direction",
                "study.n_trials",
                "worker.max_par",
                "params.x.low"
            ]
        );
    }

    // ---- TOML and serde errors

    #[test]
    fn syntax_error_is_one_problem_with_position() {
        let p = &problems("[study]\nname = \n")[..];
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].line, p[0].column), (Some(2), Some(8)));
        assert_eq!(p[0].key, None);
    }

    #[test]
    fn rejects_unknown_key_naming_its_table() {
        let text = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\ncolour = \"red\"\n";
        let p = only_problem(text, "worker.colour");
        assert_eq!((p.line, p.column), (Some(5), Some(1)));
        assert!(
            p.message.contains("unknown field `colour`"),
            "{}",
            p.message
        );
        assert!(p.message.contains("expected one of"), "{}", p.message);
    }

    #[test]
    fn rejects_unknown_key_in_a_param_table() {
        let p = only_problem(
            &cfg("", "", &format!("{PX}colour = 1\n")),
            "params.x.colour",
        );
        assert!(p.message.contains("unknown field `colour`"));
    }

    #[test]
    fn rejects_unknown_key_in_an_inline_table() {
        let text = cfg("", "", "[params]\nx = { type = \"float\", hue = 1 }\n");
        only_problem(&text, "params.x.hue");
    }

    #[test]
    fn rejects_unknown_top_level_table() {
        let p = only_problem(&cfg("", "", &format!("{PX}[extra]\na = 1\n")), "extra");
        assert!(p.message.contains("unknown field `extra`"));
    }

    #[test]
    fn rejects_wrong_type_naming_the_key() {
        let text = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\nmax_par = \"four\"\n";
        let p = only_problem(text, "worker.max_par");
        assert_eq!((p.line, p.column), (Some(5), Some(11)));
        assert!(p.message.contains("invalid type"), "{}", p.message);
    }

    #[test]
    fn rejects_wrong_type_in_an_array() {
        only_problem(
            &cfg("", "", PX).replace("[\"w\"]", "[\"w\", 3]"),
            "worker.command",
        );
    }

    #[test]
    fn rejects_wrong_type_for_a_table() {
        only_problem(&format!("study = 5\n{PX}"), "study");
    }

    #[test]
    fn rejects_an_array_written_for_a_table() {
        // Serde's derived structs would otherwise take the fields by position.
        let p = only_problem(&format!("study = [\"s\"]\n{PX}"), "study");
        assert!(p.message.contains("expected a table"), "{}", p.message);
        let text = cfg("", "", "[params]\nx = [\"float\", 0, 1]\n");
        only_problem(&text, "params.x");
    }

    #[test]
    fn calls_a_misplaced_datetime_a_datetime() {
        let p = only_problem(&format!("study = 1979-05-27\n{PX}"), "study");
        assert_eq!(p.message, "invalid type: datetime, expected a table");
        let p = only_problem(
            &format!("params = 1979-05-27\n{}", cfg("", "", "")),
            "params",
        );
        assert_eq!(p.message, "invalid type: datetime, expected a table");
        let p = only_problem(&cfg("timeout = 1979-05-27", "", PX), "study.timeout");
        assert!(
            p.message.contains("invalid type: datetime"),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_array_of_tables_where_a_table_is_expected() {
        let text = cfg("", "", PX).replace("[study]", "[[study]]");
        let p = only_problem(&text, "study");
        assert_eq!(p.line, Some(1));
    }

    #[test]
    fn wrong_type_error_survives_a_datetime_elsewhere() {
        let text = cfg("", "", &format!("{PX}[params.d]\ntype = \"categorical\"\nchoices = [1979-05-27]\nlow = []\nlog = 1\n"));
        only_problem(&text, "params.d.log");
    }

    #[test]
    fn rejects_missing_study_name() {
        let p = only_problem(&cfg("", "", PX).replace("name = \"s\"\n", ""), "study.name");
        assert_eq!(p.line, Some(1), "points at the [study] header");
    }

    #[test]
    fn rejects_empty_study_name() {
        only_problem(&cfg("", "", PX).replace("\"s\"", "\"\""), "study.name");
    }

    #[test]
    fn rejects_missing_study_table() {
        only_problem(&format!("[worker]\ncommand = [\"w\"]\n{PX}"), "study");
    }

    #[test]
    fn rejects_missing_worker_table() {
        only_problem(&format!("[study]\nname = \"s\"\n{PX}"), "worker");
    }

    #[test]
    fn rejects_missing_command() {
        only_problem(
            &cfg("", "", PX).replace("command = [\"w\"]", ""),
            "worker.command",
        );
    }

    // ---- search space

    #[test]
    fn rejects_missing_search_space() {
        only_problem(&cfg("", "", ""), "params");
    }

    #[test]
    fn rejects_empty_params_table() {
        let p = only_problem(&cfg("", "", "[params]\n"), "params");
        assert!(p.message.contains("empty"));
    }

    #[test]
    fn rejects_low_not_below_high() {
        let text = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\n\
                    [params.lr]\ntype = \"float\"\nlow =  0.5\nhigh = 0.1\n";
        let p = only_problem(text, "params.lr.low");
        assert_eq!((p.line, p.column), (Some(7), Some(8)));
        assert_eq!(p.message, "low (0.5) must be less than high (0.1)");
        only_problem(
            &cfg("", "", "[params.n]\ntype = \"int\"\nlow = 3\nhigh = 3\n"),
            "params.n.low",
        );
    }

    #[test]
    fn rejects_missing_bound() {
        only_problem(
            &cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\n"),
            "params.x.high",
        );
    }

    #[test]
    fn rejects_non_integer_int_bounds() {
        let p = only_problem(
            &cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0.5\nhigh = 4\n"),
            "params.n.low",
        );
        assert!(p.message.contains("integer"));
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 0\nhigh = \"4\"\n",
            ),
            "params.n.high",
        );
    }

    #[test]
    fn rejects_non_numeric_and_non_finite_float_bounds() {
        only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = \"0\"\nhigh = 1\n",
            ),
            "params.x.low",
        );
        only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = 0\nhigh = inf\n",
            ),
            "params.x.high",
        );
    }

    #[test]
    fn rejects_log_with_non_positive_low() {
        only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nlog = true\n",
            ),
            "params.x.log",
        );
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 8\nlog = true\n",
            ),
            "params.n.log",
        );
    }

    #[test]
    fn rejects_log_with_step_on_float() {
        let p = only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = 1\nhigh = 2\nlog = true\nstep = 0.5\n",
            ),
            "params.x.step",
        );
        assert!(p.message.contains("log"));
    }

    #[test]
    fn rejects_int_log_with_step_other_than_one() {
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 1\nhigh = 9\nlog = true\nstep = 2\n",
            ),
            "params.n.step",
        );
    }

    #[test]
    fn rejects_non_positive_step() {
        only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0\n",
            ),
            "params.x.step",
        );
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 4\nstep = -2\n",
            ),
            "params.n.step",
        );
    }

    #[test]
    fn rejects_step_not_dividing_the_range() {
        let p = only_problem(
            &cfg(
                "",
                "",
                "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0.3\n",
            ),
            "params.x.step",
        );
        assert!(p.message.contains("does not divide"));
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 5\nstep = 2\n",
            ),
            "params.n.step",
        );
    }

    #[test]
    fn accepts_float_step_despite_rounding_noise() {
        // 0.7 / 0.1 is 6.999999999999999 in binary floating point.
        let d = param("[params.x]\ntype = \"float\"\nlow = 0.1\nhigh = 0.8\nstep = 0.1\n");
        assert_eq!(d.grid_len(), Some(8));
    }

    #[test]
    fn rejects_categorical_without_choices() {
        only_problem(
            &cfg("", "", "[params.c]\ntype = \"categorical\"\n"),
            "params.c.choices",
        );
        only_problem(
            &cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = []\n"),
            "params.c.choices",
        );
    }

    #[test]
    fn rejects_non_scalar_choice() {
        for bad in ["[1, 2]", "{ a = 1 }", "1979-05-27T07:32:00Z", "nan"] {
            let text = cfg(
                "",
                "",
                &format!("[params.c]\ntype = \"categorical\"\nchoices = [\"a\", {bad}]\n"),
            );
            only_problem(&text, "params.c.choices");
        }
    }

    #[test]
    fn rejects_duplicate_choices() {
        let p = only_problem(
            &cfg(
                "",
                "",
                "[params.c]\ntype = \"categorical\"\nchoices = [1, \"a\", 1.0]\n",
            ),
            "params.c.choices",
        );
        assert!(p.message.contains("duplicate"));
        assert_eq!((p.line, p.column), (Some(9), Some(20)));
    }

    #[test]
    fn rejects_numeric_keys_on_categorical() {
        let text = cfg(
            "",
            "",
            "[params.c]\ntype = \"categorical\"\nchoices = [\"a\"]\nlow = 0\nlog = true\n",
        );
        let keys: Vec<_> = problems(&text).into_iter().filter_map(|p| p.key).collect();
        assert_eq!(keys, ["params.c.low", "params.c.log"]);
    }

    #[test]
    fn rejects_choices_on_numeric_params() {
        only_problem(
            &cfg("", "", &format!("{PX}choices = [1]\n")),
            "params.x.choices",
        );
        only_problem(
            &cfg(
                "",
                "",
                "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 1\nchoices = [1]\n",
            ),
            "params.n.choices",
        );
    }

    #[test]
    fn rejects_unknown_param_type() {
        let p = only_problem(
            &cfg("", "", "[params.x]\ntype = \"double\"\n"),
            "params.x.type",
        );
        assert!(p.message.contains("\"float\", \"int\", \"categorical\""));
        only_problem(&cfg("", "", "[params.x]\nlow = 1\n"), "params.x.type");
    }

    #[test]
    fn rejects_reserved_and_empty_param_names() {
        let p = only_problem(
            &cfg("", "", &PX.replace("[params.x]", "[params.\"sweepd:x\"]")),
            "params.\"sweepd:x\"",
        );
        assert!(p.message.contains("sweepd:"));
        only_problem(
            &cfg("", "", &PX.replace("[params.x]", "[params.\"\"]")),
            "params.\"\"",
        );
    }

    // ---- worker

    #[test]
    fn rejects_empty_command() {
        only_problem(&cfg("", "", PX).replace("[\"w\"]", "[]"), "worker.command");
    }

    #[test]
    fn rejects_empty_program() {
        only_problem(
            &cfg("", "", PX).replace("[\"w\"]", "[\"\", \"x\"]"),
            "worker.command",
        );
    }

    #[test]
    fn rejects_missing_cwd() {
        let p = only_problem(&cfg("", "cwd = \"nope\"", PX), "worker.cwd");
        assert!(p.message.contains("nope"));
    }

    #[test]
    fn rejects_cwd_that_is_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let e = parse_in(dir.path(), &cfg("", "cwd = \"f\"", PX)).unwrap_err();
        assert_eq!(e.problems.len(), 1);
        assert_eq!(e.problems[0].key.as_deref(), Some("worker.cwd"));
    }

    #[test]
    fn rejects_unparseable_duration() {
        only_problem(&cfg("timeout = \"soon\"", "", PX), "study.timeout");
        only_problem(
            &cfg("", "trial_timeout = \"1 fortnight\"", PX),
            "worker.trial_timeout",
        );
    }

    #[test]
    fn rejects_zero_duration() {
        let p = only_problem(
            &cfg("", "shutdown_grace = \"0s\"", PX),
            "worker.shutdown_grace",
        );
        assert!(p.message.contains("greater than zero"));
        only_problem(
            &cfg("", "startup_timeout = \"0m\"", PX),
            "worker.startup_timeout",
        );
    }

    #[test]
    fn rejects_out_of_range_max_par() {
        only_problem(&cfg("", "max_par = 0", PX), "worker.max_par");
        only_problem(&cfg("", "max_par = 1025", PX), "worker.max_par");
    }

    #[test]
    fn rejects_negative_recycle_after() {
        only_problem(&cfg("", "recycle_after = -1", PX), "worker.recycle_after");
    }

    #[test]
    fn rejects_zero_n_trials() {
        only_problem(&cfg("n_trials = 0", "", PX), "study.n_trials");
    }

    #[test]
    fn rejects_negative_seed() {
        only_problem(&cfg("seed = -1", "", PX), "study.seed");
    }

    #[test]
    fn rejects_unknown_direction_listing_allowed_values() {
        let p = only_problem(&cfg("direction = \"up\"", "", PX), "study.direction");
        assert!(
            p.message.contains("\"minimize\", \"maximize\""),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_unknown_sampler_listing_allowed_values() {
        let p = only_problem(&cfg("sampler = \"cmaes\"", "", PX), "study.sampler");
        assert!(
            p.message.contains("\"random\", \"grid\", \"tpe\""),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_unknown_mode_listing_allowed_values() {
        let p = only_problem(&cfg("", "mode = \"forking\"", PX), "worker.mode");
        assert!(
            p.message.contains("\"persistent\", \"oneshot\""),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_bad_env_entries() {
        only_problem(
            &cfg("", "", &format!("[worker.env]\nX = [1]\n{PX}")),
            "worker.env.X",
        );
        only_problem(
            &cfg("", "", &format!("[worker.env]\n\"A=B\" = \"x\"\n{PX}")),
            "worker.env.\"A=B\"",
        );
        only_problem(
            &cfg("", "", &format!("[worker.env]\n\"\" = \"x\"\n{PX}")),
            "worker.env.\"\"",
        );
    }

    // ---- grid sampler

    #[test]
    fn grid_accepts_finite_space() {
        let dir = tempfile::tempdir().unwrap();
        let text = cfg(
            "sampler = \"grid\"",
            "",
            "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0.25\n\
             [params.c]\ntype = \"categorical\"\nchoices = [\"a\", \"b\"]\n",
        );
        let c = parse_in(dir.path(), &text).unwrap();
        assert_eq!(c.study.sampler, SamplerKind::Grid);
    }

    #[test]
    fn rejects_grid_with_continuous_float() {
        let p = only_problem(&cfg("sampler = \"grid\"", "", PX), "params.x");
        assert!(
            p.message.contains("grid sampler needs a `step`"),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_grid_over_a_million_points() {
        let text = cfg(
            "sampler = \"grid\"",
            "",
            "[params.a]\ntype = \"int\"\nlow = 0\nhigh = 999\n\
             [params.b]\ntype = \"int\"\nlow = 0\nhigh = 1000\n",
        );
        only_problem(&text, "study.sampler");
    }

    // ---- storage

    #[test]
    fn rejects_non_sqlite_storage() {
        for url in ["postgresql://localhost/db", "mysql://h/db", "sweepd.db"] {
            let text = cfg("", "", &format!("[storage]\nurl = \"{url}\"\n{PX}"));
            let p = only_problem(&text, "storage.url");
            assert!(p.message.contains("only sqlite://"), "{}", p.message);
        }
    }

    #[test]
    fn rejects_storage_in_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let text = cfg(
            "",
            "",
            &format!("[storage]\nurl = \"sqlite://no/such/s.db\"\n{PX}"),
        );
        let e = parse_in(dir.path(), &text).unwrap_err();
        assert_eq!(e.problems.len(), 1);
        let p = &e.problems[0];
        assert_eq!(p.key.as_deref(), Some("storage.url"));
        let missing = dir.path().join("no/such");
        assert!(
            p.message.contains(&missing.display().to_string()),
            "{}",
            p.message
        );
    }

    // ---- [gpu], [retry], [sampler], [pruner], [metrics], worker additions

    fn parsed(text: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        parse_in(dir.path(), text).unwrap()
    }

    /// A valid config with `worker` spliced into [worker] and `tables` after the params.
    fn with(worker: &str, tables: &str) -> String {
        cfg("", worker, &format!("{PX}{tables}"))
    }

    #[test]
    fn defaults_when_new_tables_are_absent() {
        let c = parsed(&cfg("", "", PX));
        assert_eq!(
            c.gpu,
            GpuConfig {
                devices: Devices::None,
                headroom: 1 << 30,
                trial_memory: 6 << 30,
                max_par_per_device: 8,
                gpus_per_trial: 1,
                poll_interval: Duration::from_secs(1),
                nvml_lib: None,
            }
        );
        assert_eq!(
            c.retry,
            RetryConfig {
                oom: 2,
                cuda_fatal: 1,
                crash: 1,
                breaker_threshold: 5,
                breaker_backoff: Duration::from_secs(60),
                breaker_max_backoff: Duration::from_secs(1800),
                oom_admission_factor: 0.75,
                oom_recovery: Duration::from_secs(600),
                stop_after_same_error: 5,
            }
        );
        assert_eq!(
            c.sampler,
            SamplerConfig {
                n_startup_trials: 10,
                n_ei_candidates: 24,
                multivariate: true,
                constant_liar: true,
                seed: None,
            }
        );
        assert_eq!(c.pruner, PrunerConfig::None);
        assert_eq!(
            c.metrics,
            MetricsConfig {
                listen: None,
                allow_remote: false
            }
        );
        let w = &c.worker;
        assert_eq!(w.heartbeat_timeout, None);
        assert_eq!(w.recycle_on_growth, None);
        assert_eq!(w.log_max_bytes, 64 << 20);
        assert_eq!(w.log_max_total, 1 << 30);
        assert_eq!(
            w.allocator,
            AllocatorConfig {
                preset: AllocatorPreset::Default,
                pytorch: None,
                jax_preallocate: None,
                tf_allow_growth: None,
            }
        );
    }

    #[test]
    fn empty_gpu_table_means_all_devices_with_defaults() {
        let c = parsed(&with("", "[gpu]\n"));
        assert_eq!(
            c.gpu,
            GpuConfig {
                devices: Devices::All,
                ..GpuConfig::default()
            }
        );
    }

    #[test]
    fn empty_new_tables_give_their_defaults() {
        let c = parsed(&with(
            "",
            "[retry]\n[sampler]\n[pruner]\n[metrics]\n[worker.allocator]\n",
        ));
        assert_eq!(c.retry, RetryConfig::default());
        assert_eq!(c.sampler, SamplerConfig::default());
        assert_eq!(c.pruner, PrunerConfig::None);
        assert_eq!(c.metrics, MetricsConfig::default());
        assert_eq!(c.worker.allocator, AllocatorConfig::default());
    }

    #[test]
    fn parses_every_new_setting() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("libnvidia-ml.so.1"), "").unwrap();
        let text = cfg(
            "sampler = \"tpe\"",
            "heartbeat_timeout = \"5m\"\nrecycle_on_growth = \"512MiB\"\n\
             log_max_bytes = 1048576\nlog_max_total = \"10 MB\"",
            &format!(
                "[worker.allocator]\npreset = \"none\"\n\
                 pytorch = \"expandable_segments:True,max_split_size_mb:128\"\n\
                 jax_preallocate = true\ntf_allow_growth = false\n\
                 {PX}\
                 [gpu]\ndevices = [0, 2]\nheadroom = \"1.5 GiB\"\ntrial_memory = \"8G\"\n\
                 max_par_per_device = 4\ngpus_per_trial = 1\npoll_interval = \"250ms\"\n\
                 nvml_lib = \"libnvidia-ml.so.1\"\n\
                 [retry]\noom = 0\ncuda_fatal = 3\ncrash = 4\nbreaker_threshold = 2\n\
                 breaker_backoff = \"30s\"\nbreaker_max_backoff = \"1h\"\n\
                 oom_admission_factor = 0.5\noom_recovery = \"20m\"\n\
                 [sampler]\nn_startup_trials = 0\nn_ei_candidates = 48\nmultivariate = false\n\
                 constant_liar = false\nseed = 7\n\
                 [pruner]\ntype = \"median\"\nn_startup_trials = 3\nn_warmup_steps = 10\n\
                 interval_steps = 2\n\
                 [metrics]\nlisten = \"0.0.0.0:9464\"\nallow_remote = true\n"
            ),
        );
        let c = parse_in(dir.path(), &text).unwrap();
        assert_eq!(c.study.sampler, SamplerKind::Tpe);
        let w = &c.worker;
        assert_eq!(w.heartbeat_timeout, Some(Duration::from_secs(300)));
        assert_eq!(w.recycle_on_growth, Some(512 << 20));
        assert_eq!(w.log_max_bytes, 1 << 20);
        assert_eq!(w.log_max_total, 10_000_000);
        assert_eq!(
            w.allocator,
            AllocatorConfig {
                preset: AllocatorPreset::None,
                pytorch: Some("expandable_segments:True,max_split_size_mb:128".into()),
                jax_preallocate: Some(true),
                tf_allow_growth: Some(false),
            }
        );
        assert_eq!(
            c.gpu,
            GpuConfig {
                devices: Devices::List(vec![0, 2]),
                headroom: 1_610_612_736,
                trial_memory: 8 << 30,
                max_par_per_device: 4,
                gpus_per_trial: 1,
                poll_interval: Duration::from_millis(250),
                nvml_lib: Some(dir.path().join("libnvidia-ml.so.1")),
            }
        );
        assert_eq!(
            c.retry,
            RetryConfig {
                oom: 0,
                cuda_fatal: 3,
                crash: 4,
                breaker_threshold: 2,
                breaker_backoff: Duration::from_secs(30),
                breaker_max_backoff: Duration::from_secs(3600),
                oom_admission_factor: 0.5,
                oom_recovery: Duration::from_secs(1200),
                stop_after_same_error: 5,
            }
        );
        assert_eq!(
            c.sampler,
            SamplerConfig {
                n_startup_trials: 0,
                n_ei_candidates: 48,
                multivariate: false,
                constant_liar: false,
                seed: Some(7),
            }
        );
        assert_eq!(
            c.pruner,
            PrunerConfig::Median {
                n_startup_trials: 3,
                n_warmup_steps: 10,
                interval_steps: 2
            }
        );
        assert_eq!(c.metrics.listen, Some("0.0.0.0:9464".parse().unwrap()));
        assert!(c.metrics.allow_remote);
    }

    #[test]
    fn gpu_devices_keywords() {
        let c = parsed(&with("", "[gpu]\ndevices = \"none\"\n"));
        assert_eq!(c.gpu.devices, Devices::None);
        let c = parsed(&with("", "[gpu]\ndevices = \"all\"\n"));
        assert_eq!(c.gpu.devices, Devices::All);
    }

    #[test]
    fn pruner_defaults_per_type() {
        let c = parsed(&with("", "[pruner]\ntype = \"median\"\n"));
        assert_eq!(
            c.pruner,
            PrunerConfig::Median {
                n_startup_trials: 5,
                n_warmup_steps: 0,
                interval_steps: 1
            }
        );
        let c = parsed(&with("", "[pruner]\ntype = \"asha\"\n"));
        assert_eq!(
            c.pruner,
            PrunerConfig::Asha {
                min_resource: 1,
                reduction_factor: 3,
                min_early_stopping_rate: 0
            }
        );
        let c = parsed(&with(
            "",
            "[pruner]\ntype = \"asha\"\nmin_resource = 4\nreduction_factor = 2\n\
             min_early_stopping_rate = 1\n",
        ));
        assert_eq!(
            c.pruner,
            PrunerConfig::Asha {
                min_resource: 4,
                reduction_factor: 2,
                min_early_stopping_rate: 1
            }
        );
        let c = parsed(&with("", "[pruner]\ntype = \"none\"\n"));
        assert_eq!(c.pruner, PrunerConfig::None);
    }

    // ---- sizes

    #[test]
    fn parse_size_units() {
        assert_eq!(parse_size("1GiB"), Ok(1_073_741_824));
        assert_eq!(parse_size("1.5 GiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("512MiB"), Ok(536_870_912));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("800B"), Ok(800));
        assert_eq!(parse_size("4 KiB"), Ok(4096));
        assert_eq!(parse_size("1KB"), Ok(1000));
        assert_eq!(parse_size("3 TB"), Ok(3_000_000_000_000));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
    }

    #[test]
    fn parse_size_is_case_insensitive_and_takes_spaces_and_fractions() {
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("1GIB"), Ok(1 << 30));
        assert_eq!(parse_size("2gb"), Ok(2_000_000_000));
        assert_eq!(parse_size("  6 g  "), Ok(6 << 30));
        assert_eq!(parse_size("1.1GB"), Ok(1_100_000_000), "exact, not via f64");
        assert_eq!(parse_size(".5KiB"), Ok(512));
        assert_eq!(parse_size("0.3KiB"), Ok(307), "307.2 rounds to nearest");
        assert_eq!(parse_size("0B"), Ok(0));
    }

    #[test]
    fn parse_size_rejects_bad_input() {
        let e = parse_size("1 GiX").unwrap_err();
        assert!(e.contains("unknown unit \"GiX\""), "{e}");
        assert!(e.contains("KiB"), "lists the units: {e}");
        let e = parse_size("-1GiB").unwrap_err();
        assert!(e.contains("negative"), "{e}");
        let e = parse_size("1024").unwrap_err();
        assert!(e.contains("no unit"), "{e}");
        for bad in ["", "GiB", "1.2.3MB", ".", "1e9B", "+1B", "one GiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        let e = parse_size("16777216TiB").unwrap_err();
        assert!(e.contains("too large"), "{e}");
        assert!(parse_size("99999999999999999999999999999999999999999B").is_err());
        assert_eq!(parse_size("16777215TiB"), Ok(16_777_215 << 40));
    }

    #[test]
    fn format_size_picks_the_largest_binary_unit() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(800), "800 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(512 << 20), "512 MiB");
        assert_eq!(format_size(1_610_612_736), "1.5 GiB");
        assert_eq!(format_size((1 << 30) + (1 << 30) / 4), "1.25 GiB");
        assert_eq!(format_size(2_000_000_000), "1.86 GiB");
        assert_eq!(
            format_size((1 << 20) - 1),
            "1 MiB",
            "rounds up into the next unit"
        );
        assert_eq!(format_size(3 << 40), "3 TiB");
        assert_eq!(format_size(u64::MAX), "16777216 TiB");
    }

    #[test]
    fn sizes_in_the_file_take_integers_and_strings() {
        let c = parsed(&with(
            "",
            "[gpu]\nheadroom = 1073741824\ntrial_memory = \"2GB\"\n",
        ));
        assert_eq!(c.gpu.headroom, 1 << 30);
        assert_eq!(c.gpu.trial_memory, 2_000_000_000);
        let c = parsed(&with("", "[gpu]\nheadroom = 0\n"));
        assert_eq!(c.gpu.headroom, 0);
    }

    #[test]
    fn rejects_size_with_bad_unit() {
        let p = only_problem(&with("", "[gpu]\nheadroom = \"1 GiX\"\n"), "gpu.headroom");
        assert!(p.message.contains("unknown unit"), "{}", p.message);
    }

    #[test]
    fn rejects_negative_size() {
        only_problem(&with("", "[gpu]\nheadroom = -1\n"), "gpu.headroom");
        only_problem(&with("", "[gpu]\nheadroom = \"-1GiB\"\n"), "gpu.headroom");
    }

    #[test]
    fn rejects_size_of_wrong_type() {
        let p = only_problem(&with("", "[gpu]\nheadroom = 1.5\n"), "gpu.headroom");
        assert!(p.message.contains("must be a size"), "{}", p.message);
    }

    // ---- [gpu] rules

    #[test]
    fn rejects_unknown_devices_keyword() {
        let p = only_problem(&with("", "[gpu]\ndevices = \"some\"\n"), "gpu.devices");
        assert!(p.message.contains("\"all\", \"none\""), "{}", p.message);
    }

    #[test]
    fn rejects_devices_of_wrong_type() {
        let p = only_problem(&with("", "[gpu]\ndevices = 0\n"), "gpu.devices");
        assert!(
            p.message.contains("list of device indices"),
            "{}",
            p.message
        );
        only_problem(&with("", "[gpu]\ndevices = [0, \"1\"]\n"), "gpu.devices");
    }

    #[test]
    fn rejects_empty_device_list() {
        only_problem(&with("", "[gpu]\ndevices = []\n"), "gpu.devices");
    }

    #[test]
    fn rejects_negative_device_index() {
        let text = with("", "[gpu]\ndevices = [0, -1]\n");
        let p = only_problem(&text, "gpu.devices");
        let line = text.lines().position(|l| l.starts_with("devices")).unwrap() + 1;
        assert_eq!((p.line, p.column), (Some(line), Some(15)), "points at -1");
    }

    #[test]
    fn rejects_duplicate_device_index() {
        let p = only_problem(&with("", "[gpu]\ndevices = [1, 0, 1]\n"), "gpu.devices");
        assert!(
            p.message.contains("duplicate device index 1"),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_zero_trial_memory() {
        let p = only_problem(&with("", "[gpu]\ntrial_memory = 0\n"), "gpu.trial_memory");
        assert!(p.message.contains("greater than zero"), "{}", p.message);
    }

    #[test]
    fn rejects_out_of_range_max_par_per_device() {
        only_problem(
            &with("", "[gpu]\nmax_par_per_device = 0\n"),
            "gpu.max_par_per_device",
        );
        only_problem(
            &with("", "[gpu]\nmax_par_per_device = 1025\n"),
            "gpu.max_par_per_device",
        );
    }

    #[test]
    fn rejects_zero_gpus_per_trial() {
        only_problem(
            &with("", "[gpu]\ngpus_per_trial = 0\n"),
            "gpu.gpus_per_trial",
        );
    }

    #[test]
    fn rejects_multi_gpu_trials_until_they_are_supported() {
        let p = only_problem(
            &with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 2\n"),
            "gpu.gpus_per_trial",
        );
        assert!(p.message.contains("not supported yet"), "{}", p.message);
        parsed(&with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 1\n"));
    }

    #[test]
    fn rejects_poll_interval_below_50ms() {
        let p = only_problem(
            &with("", "[gpu]\npoll_interval = \"10ms\"\n"),
            "gpu.poll_interval",
        );
        assert!(p.message.contains("at least 50ms"), "{}", p.message);
        parsed(&with("", "[gpu]\npoll_interval = \"50ms\"\n"));
    }

    #[test]
    fn rejects_missing_nvml_lib() {
        let p = only_problem(
            &with("", "[gpu]\nnvml_lib = \"no/libnvidia-ml.so\"\n"),
            "gpu.nvml_lib",
        );
        assert!(p.message.contains("does not exist"), "{}", p.message);
        only_problem(&with("", "[gpu]\nnvml_lib = \"\"\n"), "gpu.nvml_lib");
    }

    #[test]
    fn rejects_unknown_key_in_gpu_table() {
        let p = only_problem(&with("", "[gpu]\nheadrom = 1\n"), "gpu.headrom");
        assert!(
            p.message.contains("unknown field `headrom`"),
            "{}",
            p.message
        );
    }

    // ---- [retry] rules

    #[test]
    fn rejects_negative_retry_counts() {
        for key in ["oom", "cuda_fatal", "crash"] {
            only_problem(
                &with("", &format!("[retry]\n{key} = -1\n")),
                &format!("retry.{key}"),
            );
        }
        let p = only_problem(&with("", "[retry]\noom = 4294967296\n"), "retry.oom");
        assert!(p.message.contains("at most 4294967295"), "{}", p.message);
    }

    #[test]
    fn rejects_zero_breaker_threshold() {
        let p = only_problem(
            &with("", "[retry]\nbreaker_threshold = 0\n"),
            "retry.breaker_threshold",
        );
        assert!(p.message.contains("at least 1"), "{}", p.message);
    }

    #[test]
    fn rejects_max_backoff_below_backoff() {
        only_problem(
            &with(
                "",
                "[retry]\nbreaker_backoff = \"10m\"\nbreaker_max_backoff = \"5m\"\n",
            ),
            "retry.breaker_max_backoff",
        );
        // Against the 30m default, too.
        let p = only_problem(
            &with("", "[retry]\nbreaker_backoff = \"1h\"\n"),
            "retry.breaker_max_backoff",
        );
        assert!(p.message.contains("default"), "{}", p.message);
    }

    #[test]
    fn rejects_oom_admission_factor_outside_zero_one() {
        for bad in ["0", "1", "1.5", "-0.5", "0.0"] {
            only_problem(
                &with("", &format!("[retry]\noom_admission_factor = {bad}\n")),
                "retry.oom_admission_factor",
            );
        }
        only_problem(
            &with("", "[retry]\noom_admission_factor = \"half\"\n"),
            "retry.oom_admission_factor",
        );
    }

    #[test]
    fn rejects_bad_retry_durations() {
        only_problem(
            &with("", "[retry]\noom_recovery = \"soon\"\n"),
            "retry.oom_recovery",
        );
        only_problem(
            &with("", "[retry]\nbreaker_backoff = \"0s\"\n"),
            "retry.breaker_backoff",
        );
    }

    // ---- worker additions

    #[test]
    fn rejects_bad_heartbeat_timeout() {
        only_problem(
            &with("heartbeat_timeout = \"0s\"", ""),
            "worker.heartbeat_timeout",
        );
    }

    #[test]
    fn rejects_zero_recycle_on_growth() {
        only_problem(
            &with("recycle_on_growth = 0", ""),
            "worker.recycle_on_growth",
        );
        only_problem(
            &with("recycle_on_growth = \"1 parsec\"", ""),
            "worker.recycle_on_growth",
        );
    }

    #[test]
    fn rejects_log_max_bytes_below_4kib() {
        let p = only_problem(&with("log_max_bytes = 4095", ""), "worker.log_max_bytes");
        assert!(p.message.contains("4 KiB"), "{}", p.message);
        let c = parsed(&with("log_max_bytes = \"4KiB\"", ""));
        assert_eq!(c.worker.log_max_bytes, 4096);
    }

    #[test]
    fn rejects_log_max_total_below_log_max_bytes() {
        only_problem(
            &with("log_max_bytes = \"10MiB\"\nlog_max_total = \"5MiB\"", ""),
            "worker.log_max_total",
        );
        let p = only_problem(
            &with("log_max_bytes = \"2GiB\"", ""),
            "worker.log_max_total",
        );
        assert!(p.message.contains("default"), "{}", p.message);
    }

    #[test]
    fn rejects_unknown_allocator_preset() {
        let p = only_problem(
            &with("", "[worker.allocator]\npreset = \"tuned\"\n"),
            "worker.allocator.preset",
        );
        assert!(p.message.contains("\"default\", \"none\""), "{}", p.message);
    }

    #[test]
    fn rejects_unknown_pytorch_allocator_key() {
        let p = only_problem(
            &with(
                "",
                "[worker.allocator]\npytorch = \"expandable_segments:True,max_splt_size_mb:64\"\n",
            ),
            "worker.allocator.pytorch",
        );
        assert!(p.message.contains("\"max_splt_size_mb\""), "{}", p.message);
    }

    #[test]
    fn rejects_malformed_pytorch_allocator_conf() {
        for bad in [
            "expandable_segments",
            "expandable_segments:True,",
            "backend:",
            "roundup_power2_divisions:[256:1",
        ] {
            only_problem(
                &with("", &format!("[worker.allocator]\npytorch = \"{bad}\"\n")),
                "worker.allocator.pytorch",
            );
        }
    }

    #[test]
    fn accepts_documented_pytorch_allocator_forms() {
        let conf = "backend:native, garbage_collection_threshold:0.6,\
                    roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:False";
        let c = parsed(&with(
            "",
            &format!("[worker.allocator]\npytorch = \"{conf}\"\n"),
        ));
        assert_eq!(c.worker.allocator.pytorch.as_deref(), Some(conf));
        let c = parsed(&with("", "[worker.allocator]\npytorch = \"\"\n"));
        assert_eq!(c.worker.allocator.pytorch.as_deref(), Some(""));
    }

    #[test]
    fn rejects_unknown_key_in_allocator_table() {
        only_problem(
            &with("", "[worker.allocator]\ncuda = \"x\"\n"),
            "worker.allocator.cuda",
        );
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn allocator_env_default_preset() {
        assert_eq!(
            AllocatorConfig::default().env(),
            pairs(&[
                ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
                ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
                ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
            ])
        );
    }

    #[test]
    fn allocator_env_none_preset() {
        let a = parsed(&with("", "[worker.allocator]\npreset = \"none\"\n"))
            .worker
            .allocator;
        assert!(a.env().is_empty());
        let a = AllocatorConfig {
            preset: AllocatorPreset::None,
            tf_allow_growth: Some(false),
            ..AllocatorConfig::default()
        };
        assert_eq!(a.env(), pairs(&[("TF_FORCE_GPU_ALLOW_GROWTH", "false")]));
    }

    #[test]
    fn allocator_env_explicit_fields_override_the_preset() {
        let a = parsed(&with(
            "",
            "[worker.allocator]\npytorch = \"backend:cudaMallocAsync\"\njax_preallocate = true\n",
        ))
        .worker
        .allocator;
        assert_eq!(
            a.env(),
            pairs(&[
                ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
                ("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync"),
                ("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
                ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
            ])
        );
    }

    // ---- [sampler] rules

    #[test]
    fn rejects_zero_n_ei_candidates() {
        only_problem(
            &with("", "[sampler]\nn_ei_candidates = 0\n"),
            "sampler.n_ei_candidates",
        );
    }

    #[test]
    fn rejects_negative_n_startup_trials() {
        only_problem(
            &with("", "[sampler]\nn_startup_trials = -1\n"),
            "sampler.n_startup_trials",
        );
    }

    #[test]
    fn rejects_negative_sampler_seed() {
        only_problem(&with("", "[sampler]\nseed = -3\n"), "sampler.seed");
    }

    // ---- [pruner] rules

    #[test]
    fn rejects_unknown_pruner_type() {
        let p = only_problem(
            &with("", "[pruner]\ntype = \"hyperband\"\nmin_resource = 1\n"),
            "pruner.type",
        );
        assert!(
            p.message.contains("\"none\", \"median\", \"asha\""),
            "{}",
            p.message
        );
    }

    #[test]
    fn rejects_pruner_keys_of_another_type() {
        let p = only_problem(
            &with("", "[pruner]\ntype = \"median\"\nmin_resource = 2\n"),
            "pruner.min_resource",
        );
        assert!(p.message.contains("\"asha\""), "{}", p.message);
        only_problem(
            &with("", "[pruner]\ntype = \"asha\"\nn_warmup_steps = 2\n"),
            "pruner.n_warmup_steps",
        );
        only_problem(
            &with("", "[pruner]\ntype = \"none\"\ninterval_steps = 2\n"),
            "pruner.interval_steps",
        );
        let p = only_problem(
            &with("", "[pruner]\nreduction_factor = 4\n"),
            "pruner.reduction_factor",
        );
        assert!(p.message.contains("set `type`"), "{}", p.message);
    }

    #[test]
    fn rejects_negative_n_warmup_steps() {
        only_problem(
            &with("", "[pruner]\ntype = \"median\"\nn_warmup_steps = -1\n"),
            "pruner.n_warmup_steps",
        );
    }

    #[test]
    fn rejects_zero_interval_steps() {
        only_problem(
            &with("", "[pruner]\ntype = \"median\"\ninterval_steps = 0\n"),
            "pruner.interval_steps",
        );
    }

    #[test]
    fn rejects_negative_median_n_startup_trials() {
        only_problem(
            &with("", "[pruner]\ntype = \"median\"\nn_startup_trials = -1\n"),
            "pruner.n_startup_trials",
        );
    }

    #[test]
    fn rejects_zero_min_resource() {
        only_problem(
            &with("", "[pruner]\ntype = \"asha\"\nmin_resource = 0\n"),
            "pruner.min_resource",
        );
    }

    #[test]
    fn rejects_reduction_factor_below_two() {
        let p = only_problem(
            &with("", "[pruner]\ntype = \"asha\"\nreduction_factor = 1\n"),
            "pruner.reduction_factor",
        );
        assert!(p.message.contains("at least 2 (got 1)"), "{}", p.message);
    }

    #[test]
    fn rejects_negative_min_early_stopping_rate() {
        only_problem(
            &with(
                "",
                "[pruner]\ntype = \"asha\"\nmin_early_stopping_rate = -1\n",
            ),
            "pruner.min_early_stopping_rate",
        );
    }

    // ---- [metrics] rules

    #[test]
    fn metrics_accepts_loopback_addresses() {
        let c = parsed(&with("", "[metrics]\nlisten = \"127.0.0.1:9464\"\n"));
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(!c.metrics.allow_remote);
        let c = parsed(&with("", "[metrics]\nlisten = \"[::1]:9464\"\n"));
        assert_eq!(c.metrics.listen, Some("[::1]:9464".parse().unwrap()));
    }

    #[test]
    fn rejects_non_loopback_metrics_address() {
        for addr in ["0.0.0.0:9464", "192.168.1.5:9464", "[::]:9464"] {
            let p = only_problem(
                &with("", &format!("[metrics]\nlisten = \"{addr}\"\n")),
                "metrics.listen",
            );
            assert!(p.message.contains("allow_remote"), "{}", p.message);
        }
        only_problem(
            &with(
                "",
                "[metrics]\nlisten = \"10.0.0.1:9464\"\nallow_remote = false\n",
            ),
            "metrics.listen",
        );
    }

    #[test]
    fn allows_non_loopback_metrics_address_with_allow_remote() {
        let c = parsed(&with(
            "",
            "[metrics]\nlisten = \"192.168.1.5:9464\"\nallow_remote = true\n",
        ));
        assert_eq!(c.metrics.listen, Some("192.168.1.5:9464".parse().unwrap()));
    }

    #[test]
    fn rejects_unparseable_metrics_address() {
        let p = only_problem(
            &with("", "[metrics]\nlisten = \"localhost:9464\"\n"),
            "metrics.listen",
        );
        assert!(p.message.contains("127.0.0.1:9464"), "{}", p.message);
        only_problem(
            &with("", "[metrics]\nlisten = \"9464\"\n"),
            "metrics.listen",
        );
    }

    #[test]
    fn rejects_metrics_port_zero() {
        only_problem(
            &with("", "[metrics]\nlisten = \"127.0.0.1:0\"\n"),
            "metrics.listen",
        );
    }

    #[test]
    fn collects_problems_across_new_tables() {
        let text = with(
            "log_max_bytes = 1",
            "[gpu]\ndevices = []\n[retry]\nbreaker_threshold = 0\n\
             [pruner]\ntype = \"median\"\nmin_resource = 1\n",
        );
        let keys: Vec<_> = problems(&text).into_iter().filter_map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "worker.log_max_bytes",
                "gpu.devices",
                "retry.breaker_threshold",
                "pruner.min_resource"
            ]
        );
    }

    // ---- reload_diff

    #[test]
    fn reload_diff_reports_command_but_not_max_par() {
        let dir = tempfile::tempdir().unwrap();
        let old = parse_in(dir.path(), &cfg("", "max_par = 2", PX)).unwrap();
        let new_text = cfg("", "max_par = 4", PX).replace("[\"w\"]", "[\"w2\"]");
        let new = parse_in(dir.path(), &new_text).unwrap();
        assert_eq!(old.reload_diff(&new), ["worker.command"]);
        assert!(old.reload_diff(&old).is_empty());
    }

    #[test]
    fn reload_diff_ignores_every_live_setting() {
        let dir = tempfile::tempdir().unwrap();
        let old = parse_in(dir.path(), &with("", "[gpu]\n")).unwrap();
        let text = cfg(
            "n_trials = 9\ntimeout = \"1h\"",
            "max_par = 3\ntrial_timeout = \"1h\"\nheartbeat_timeout = \"1m\"\n\
             recycle_after = 5\nrecycle_on_growth = \"1GiB\"\n\
             [worker.env]\nA = \"b\"\n[worker.allocator]\npreset = \"none\"",
            &format!(
                "{PX}[gpu]\nheadroom = \"2GiB\"\n[retry]\noom = 9\ncrash = 0\n\
                 breaker_threshold = 1\noom_recovery = \"1h\"\n"
            ),
        );
        let new = parse_in(dir.path(), &text).unwrap();
        assert_ne!(old, new);
        assert_eq!(old.reload_diff(&new), Vec::<String>::new());
    }

    #[test]
    fn reload_diff_reports_fixed_settings() {
        let dir = tempfile::tempdir().unwrap();
        let old = parse_in(dir.path(), &with("", "[gpu]\n")).unwrap();
        let text = cfg(
            "sampler = \"tpe\"",
            "log_max_bytes = \"1MiB\"",
            "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 2.0\n\
             [params.y]\ntype = \"int\"\nlow = 0\nhigh = 2\n\
             [gpu]\ndevices = [0]\n[sampler]\nseed = 3\n[pruner]\ntype = \"asha\"\n\
             [metrics]\nlisten = \"127.0.0.1:9000\"\n",
        );
        let new = parse_in(dir.path(), &text).unwrap();
        assert_eq!(
            old.reload_diff(&new),
            [
                "study.sampler",
                "worker.log_max_bytes",
                "gpu.devices",
                "sampler.seed",
                "pruner.type",
                "metrics.listen",
                "params.x",
                "params.y",
            ]
        );
    }

    #[test]
    fn reload_diff_reports_reordered_params() {
        let dir = tempfile::tempdir().unwrap();
        let a = "[params.a]\ntype = \"int\"\nlow = 0\nhigh = 2\n";
        let b = "[params.b]\ntype = \"int\"\nlow = 0\nhigh = 3\n";
        let old = parse_in(dir.path(), &cfg("", "", &format!("{a}{b}"))).unwrap();
        let new = parse_in(dir.path(), &cfg("", "", &format!("{b}{a}"))).unwrap();
        assert_eq!(old.reload_diff(&new), ["params"]);
    }

    #[test]
    fn reload_diff_reports_pruner_settings_of_the_same_type() {
        let dir = tempfile::tempdir().unwrap();
        let old = parse_in(dir.path(), &with("", "[pruner]\ntype = \"median\"\n")).unwrap();
        let new = parse_in(
            dir.path(),
            &with("", "[pruner]\ntype = \"median\"\nn_warmup_steps = 5\n"),
        )
        .unwrap();
        assert_eq!(old.reload_diff(&new), ["pruner.n_warmup_steps"]);
    }
}
