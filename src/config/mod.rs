//! `supervisor.toml`: what a sweep is (study, storage, worker, search space), checked up front.
//!
//! A daemon that runs unattended for hours must refuse a bad config before it starts, and tell the
//! user everything that is wrong at once, each problem pointing at the file, line and key. So
//! loading happens in two layers, as ripgrep does it: serde reads the text into raw structs that
//! keep every value's span (`toml::Spanned`) and reject unknown keys (`raw`), then validation
//! turns those into the types the rest of sweepd uses, collecting every problem it finds
//! (`validate`, and `params` for the search space). `reload` says what a new file may change in
//! a running daemon.
//!
//! Besides the required `[study]` and `[worker]`, every table is optional with documented
//! defaults: `[params.*]` (the static part of the search space: the objective may define the
//! rest as it runs), `[storage]`, `[worker.env]`, `[worker.allocator]`, `[gpu]`, `[retry]`,
//! `[sampler]`, `[pruner]`, `[metrics]`, `[notify]`. Sizes (`gpu.headroom`, `worker.log_max_bytes`, ...) are
//! a TOML integer of bytes or a string with a unit, see [`crate::units`].
//!
//! What `check` accepts, `run` must be able to run: every duration and size has a maximum (named
//! in the message), so no timer or byte arithmetic downstream can overflow; strings that reach a
//! worker's argv or environment, a path or the database are refused where they could not travel
//! there (a NUL byte, a length past the kernel's, the protocol's or Optuna's limit); and the
//! directories `run` creates must be creatable. Otherwise such a value fails only after the
//! study exists and a trial has been claimed.
//!
//! Loading has no side effects: it checks that directories and files exist but creates nothing.

mod params;
mod raw;
mod reload;
mod storage;
mod validate;

pub use validate::helper_dir;

pub use storage::{
    parse_storage_url, postgres_url, redact, StorageUrl, DEFAULT_HOST_TIMEOUT, DEFAULT_STORAGE_URL,
};

use crate::study::budget::{Limits, Patience};
use crate::study::{Direction, FailureKind, SearchSpace};
use crate::units::GIB;
use raw::RawConfig;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use validate::Validator;

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
    /// `[params]` in the order the file declares them: the static part of the search space,
    /// sampled before a trial starts (empty when the objective defines every param as it runs).
    pub space: SearchSpace,
    pub gpu: GpuConfig,
    pub retry: RetryConfig,
    pub sampler: SamplerConfig,
    pub pruner: PrunerConfig,
    pub metrics: MetricsConfig,
    pub notify: NotifyConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StudyConfig {
    pub name: String,
    /// One per objective, never empty: `[study] direction` gives one, `directions` several.
    pub directions: Vec<Direction>,
    /// `[study] metric_names`: one per objective, stored as Optuna's `set_metric_names` does.
    pub metric_names: Option<Vec<String>>,
    pub n_trials: Option<u64>,
    pub timeout: Option<Duration>,
    /// `[study] gpu_hours`: GPU time the study may spend, trial-seconds times the share of a
    /// GPU each held, across restarts and hosts; needs GPUs. > 0.
    pub gpu_hours: Option<f64>,
    /// `[study] patience` and `min_delta`: stop once the best value has not improved by more
    /// than `min_delta` of it (relative, default 0) in `patience` finished trials in a row; one
    /// objective only.
    pub patience: Option<Patience>,
    pub sampler: SamplerKind,
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    Random,
    Grid,
    /// Tree-structured Parzen Estimator, tuned by [`SamplerConfig`]; Optuna's multi-objective
    /// TPE with several objectives.
    Tpe,
    /// NSGA-II, Optuna's `NSGAIISampler`, tuned by [`SamplerConfig`].
    Nsga2,
    /// Gaussian-process Bayesian optimization, Optuna's `GPSampler` (one objective).
    Gp,
}

/// Why the GP sampler refuses a study of `n` objectives (`check`, and the sampler's `build`).
pub fn gp_objectives(n: usize) -> String {
    format!(
        "the GP sampler optimizes one objective, and the study has {n}: use \"tpe\" or \"nsga2\" \
         with several"
    )
}

impl StudyConfig {
    /// Whether the study has several objectives.
    pub fn is_multi_objective(&self) -> bool {
        self.directions.len() > 1
    }

    /// The study's limits, for `study::budget::ended` and `status`.
    pub fn limits(&self) -> Limits {
        Limits {
            n_trials: self.n_trials,
            timeout: self.timeout,
            gpu_hours: self.gpu_hours,
            patience: self.patience,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// As written in the file (or the default).
    pub url: String,
    /// The SQLite file the URL names, absolute; for PostgreSQL, the URL without its password
    /// (what messages and `check` show).
    pub path: PathBuf,
    /// For PostgreSQL: the URL to connect with (`postgresql+psycopg2://` made `postgresql://`).
    pub postgres: Option<String>,
    /// How long another host's daemon may stay silent before this one fails its trials over
    /// (PostgreSQL, several hosts).
    pub host_timeout: Duration,
    /// Set when the URL is in sweepd's old two-slash form: `check` prints it and `run` logs it.
    pub warning: Option<String>,
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
    /// Absolute; the root of the per-trial checkpoint directories (`trial-<first attempt's
    /// number>`), `log_dir/checkpoints` unless set. May not exist yet.
    pub checkpoint_dir: PathBuf,
    /// Leave a trial's checkpoint directory when it reaches a final state (default: removed).
    pub keep_checkpoints: bool,
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
    /// A persistent worker left idle this long is retired, giving its device memory back;
    /// default 60s, at most a day.
    pub idle_worker_timeout: Duration,
    /// Studies on this host of the same group (and worker command and params) learn their
    /// trials' memory from each other's measured peaks (`gpu::peak_log`); default none.
    pub memory_group: Option<String>,
    /// Each trial's framework allocator is held to the memory it was admitted with (its
    /// "cap", `docs/gpu-memory-model.md`); default true.
    pub caps: bool,
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
            idle_worker_timeout: Duration::from_secs(60),
            memory_group: None,
            caps: true,
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

impl RetryConfig {
    /// The re-enqueues a failure of `kind` is allowed, counted with the kinds that share its
    /// limit (`crash`: a timeout, hang, kill or dead worker); `None` where no limit applies (an
    /// interrupted trial or one that reached its cap is always run again; a user error never).
    /// The supervisor's `policy::retry_allowed` applies the same limits.
    pub fn limit(&self, kind: FailureKind) -> Option<u32> {
        match kind {
            FailureKind::Oom => Some(self.oom),
            FailureKind::CudaFatal => Some(self.cuda_fatal),
            FailureKind::Killed
            | FailureKind::Timeout
            | FailureKind::Hang
            | FailureKind::WorkerDied => Some(self.crash),
            FailureKind::Interrupted
            | FailureKind::Cap
            | FailureKind::UserError
            | FailureKind::BadValue
            | FailureKind::Protocol => None,
        }
    }
}

/// `[sampler]`: TPE's, NSGA-II's and the GP's knobs; the random and grid samplers use only
/// `seed`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Trials sampled at random before TPE (or the GP) takes over; default 10.
    pub n_startup_trials: usize,
    /// Default 24; at least 1.
    pub n_ei_candidates: usize,
    /// TPE models the params jointly. Unset: Optuna's default, true with one objective and
    /// false with several.
    pub multivariate: Option<bool>,
    /// Optuna's `group=True`: with a search space the objective defines as it runs, each group
    /// of params that always occur together (a branch) is modelled jointly. Default false, as
    /// Optuna's; needs `multivariate`.
    pub group: bool,
    /// Default true. TPE: running trials count as bad; the GP: its acquisition is conditioned
    /// on fantasies of the running trials' values (false: running trials are ignored).
    pub constant_liar: bool,
    /// GP: the objective has no noise (its noise variance is held at the minimum); default
    /// false, as Optuna's `deterministic_objective`.
    pub deterministic_objective: bool,
    /// Overrides `[study] seed` when set.
    pub seed: Option<u64>,
    /// NSGA-II: trials in a generation; default 50, at least 2.
    pub population_size: usize,
    /// NSGA-II: probability that a child is a crossover of two parents; default 0.9.
    pub crossover_prob: f64,
    /// NSGA-II: probability that uniform crossover takes a param from the second parent;
    /// default 0.5.
    pub swapping_prob: f64,
    /// NSGA-II: probability that a param of a child is drawn anew; unset: `1 / number of
    /// params`, as Optuna.
    pub mutation_prob: Option<f64>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            multivariate: None,
            group: false,
            constant_liar: true,
            deterministic_objective: false,
            seed: None,
            population_size: 50,
            crossover_prob: 0.9,
            swapping_prob: 0.5,
            mutation_prob: None,
        }
    }
}

/// `[pruner]`: `type = "none"` (the default), `"median"`, `"asha"` or `"hyperband"`; keys that
/// belong to another type are errors.
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
    /// Optuna's `HyperbandPruner`: one successive halving per bracket, bracket `k` with
    /// `min_early_stopping_rate = k`.
    Hyperband {
        /// Default 1; at least 1.
        min_resource: i64,
        /// Default `Auto`; a number of steps is at least `min_resource`.
        max_resource: MaxResource,
        /// Default 3; at least 2.
        reduction_factor: u32,
        /// Default 0; above 0 only with a number of steps as `max_resource`.
        bootstrap_count: usize,
    },
}

/// Hyperband's `max_resource`: the steps a full-length trial reports, given or (`Auto`, Optuna's
/// default) taken from the first trials to complete: their largest last step, plus one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxResource {
    #[default]
    Auto,
    Steps(i64),
}

/// `[metrics]`: an optional Prometheus endpoint. A `listen` address that is not loopback is
/// refused unless `allow_remote = true`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    pub listen: Option<SocketAddr>,
    pub allow_remote: bool,
}

/// `[notify]`: a command run on the events a person must hear of. Without the table (an
/// empty `command`) nothing is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// argv, no shell: the event is on its stdin as JSON and in its environment.
    pub command: Vec<String>,
    /// The events that run it, in [`NotifyEvent::ALL`] order; every one when not given (a
    /// summary only with `summary_every`).
    pub events: Vec<NotifyEvent>,
    /// A summary of the study this often; default none.
    pub summary_every: Option<Duration>,
    /// One run of the command may take this long before its process group is killed; default
    /// 30s, at most 10m.
    pub timeout: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            command: Vec::new(),
            events: Vec::new(),
            summary_every: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl NotifyConfig {
    /// Whether `event` runs the command.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        !self.command.is_empty() && self.events.contains(&event)
    }
}

/// An event `[notify] events` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NotifyEvent {
    /// The study ended: its budget, time limit, GPU-hours or a stall.
    Finished,
    /// The circuit breaker stopped the study's trials (every device quarantined).
    Breaker,
    /// The daemon stops on an error a person must fix.
    Fatal,
    /// A GPU stopped answering (its readings fail).
    DeviceLost,
    /// The periodic summary (`summary_every`).
    Summary,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 5] = [
        NotifyEvent::Finished,
        NotifyEvent::Breaker,
        NotifyEvent::Fatal,
        NotifyEvent::DeviceLost,
        NotifyEvent::Summary,
    ];

    /// The name in `events`, in the JSON's `event` and in `SWEEPD_EVENT`.
    pub fn as_str(&self) -> &'static str {
        match self {
            NotifyEvent::Finished => "finished",
            NotifyEvent::Breaker => "breaker",
            NotifyEvent::Fatal => "fatal",
            NotifyEvent::DeviceLost => "device_lost",
            NotifyEvent::Summary => "summary",
        }
    }
}

impl fmt::Display for NotifyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

/// One thing wrong with a config file (or an option that overrides it), located as precisely
/// as the parser allows.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The file as given to [`Config::load`] / [`Config::parse`]; `None` for a problem with a
    /// command-line option ([`Overrides`]), which the message names.
    pub file: Option<PathBuf>,
    /// 1-based.
    pub line: Option<usize>,
    /// 1-based, in characters.
    pub column: Option<usize>,
    /// Dotted key path, e.g. `params.lr.low`.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    /// `FILE[:LINE[:COL]]: [`KEY`: ]MESSAGE`, the shape editors and terminals make clickable;
    /// just `MESSAGE` for a command-line option.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(file) = &self.file else {
            return write!(f, "{}", self.message);
        };
        write!(f, "{}", file.display())?;
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

/// Settings from the command line that take the place of the file's. They are checked by the
/// rules of the keys they replace, with the file's other problems, and a reload applies them
/// again: the command line wins over the file for as long as the daemon runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `sweepd run --par N`: `[worker] max_par`.
    pub max_par: Option<usize>,
}

impl Config {
    /// Reads and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, &Overrides::default())
    }

    /// Reads and validates the config file at `path`, with `overrides` in place of the keys
    /// they name.
    pub fn load_with(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![Problem {
                file: Some(path.to_path_buf()),
                line: None,
                column: None,
                key: None,
                message: format!("cannot read config file: {e}"),
            }],
        })?;
        Config::parse_with(&text, path, overrides)
    }

    /// Validates config `text` as if read from `path`, which names the file in problems and
    /// anchors relative paths. The filesystem is consulted only to check that directories exist.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::parse_with(text, path, &Overrides::default())
    }

    /// [`Config::parse`], with `overrides` in place of the keys they name.
    pub fn parse_with(
        text: &str,
        path: &Path,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
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
        let mut worker = v.worker(raw.worker.as_ref().map(|t| &t.0), &base_dir);
        v.overrides(overrides, worker.as_mut());
        let space = v.space(raw.params.as_ref());
        let gpu = v.gpu(raw.gpu.as_ref().map(|t| &t.0), &base_dir);
        let retry = v.retry(raw.retry.as_ref().map(|t| &t.0));
        let sampler = v.sampler(raw.sampler.as_ref().map(|t| &t.0));
        let pruner = v.pruner(raw.pruner.as_ref().map(|t| &t.0));
        if let Some(study) = &study {
            v.several_objectives(study, &pruner, raw.pruner.as_ref().map(|t| &t.0));
        }
        let metrics = v.metrics(raw.metrics.as_ref().map(|t| &t.0));
        let notify = v.notify(raw.notify.as_ref().map(|t| &t.0));
        if let Some(study) = &study {
            v.budgets_fit(study, &gpu, raw_study);
        }
        if let (Some(g), Some(space)) = (
            raw.gpu.as_ref().and_then(|t| t.0.memory_group.as_ref()),
            &space,
        ) {
            if space.params.is_empty() {
                v.at(
                    g,
                    "gpu.memory_group",
                    "studies share peaks by the params declared in [params.NAME] tables: the \
                     params an objective suggests as it runs are not known before it runs",
                );
            }
        }
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
                    notify,
                })
            }
            _ => Err(v.into_error()),
        }
    }
}

#[cfg(test)]
mod problem_tests;
#[cfg(test)]
mod tests;
