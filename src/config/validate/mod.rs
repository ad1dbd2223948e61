//! Validation: the raw structs into the [`Config`](super::Config) types, collecting every
//! problem, each with its file, line, column and dotted key, instead of stopping at the first.
//!
//! Here: the [`Validator`] (how problems are reported and located), the readers every table
//! shares (bounded integers, sizes, durations, keywords), the bounds themselves (one list, which
//! docs/configuration.md mirrors), and the small tables `[study]`, `[storage]`, `[sampler]` and
//! `[metrics]`. `[worker]`, `[gpu]`/`[retry]`, `[pruner]`, `[notify]` and the study's budgets
//! beside `n_trials` (`budget`) have a file each below this one; the search space is
//! `config::params`.

mod budget;
mod gpu;
mod notify;
mod pruner;
mod worker;

pub use worker::helper_dir;

use super::raw::{line_col, KeyIndex, RawMetrics, RawPruner, RawSampler, RawStorage, RawStudy};
use super::storage::{self, absolute_hint, parse_storage_url, DEFAULT_STORAGE_URL};
use super::{
    ConfigError, MetricsConfig, Problem, PrunerConfig, SamplerConfig, SamplerKind, StorageConfig,
    StudyConfig,
};
use crate::study::Direction;
use crate::units::{format_duration, format_size, parse_config_size, parse_duration, KIB};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

pub(crate) const DIRECTIONS: &str = "\"minimize\", \"maximize\"";
pub(crate) const SAMPLERS: &str = "\"random\", \"grid\", \"tpe\", \"nsga2\", \"gp\"";
pub(crate) const MODES: &str = "\"persistent\", \"oneshot\"";
pub(crate) const PARAM_TYPES: &str = "\"float\", \"int\", \"categorical\"";
/// The most trials `[worker] max_par` (or `sweepd run --par`) and `[gpu] max_par_per_device`
/// allow at once.
pub(crate) const MAX_PAR: usize = 1024;
pub(crate) const MAX_PAR_LIMIT: i64 = MAX_PAR as i64;
pub(crate) const PRESETS: &str = "\"default\", \"none\"";
pub(crate) const PRUNERS: &str = "\"none\", \"median\", \"asha\", \"hyperband\"";
/// The keys PyTorch documents for `PYTORCH_CUDA_ALLOC_CONF`; older releases abort at startup on
/// any other.
pub(crate) const PYTORCH_ALLOC_KEYS: [&str; 10] = [
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
pub(crate) const MIN_POLL_INTERVAL: Duration = Duration::from_millis(50);
pub(crate) const MIN_LOG_MAX_BYTES: u64 = 4 * KIB;

// Upper bounds. Every duration and size has one, so that no value the file can hold makes the
// daemon's timer or byte arithmetic overflow (a panic at `run` after `check` said ok), and so
// that a typo of a few orders of magnitude is caught rather than waited out. Each is far above
// any real use; docs/configuration.md lists them.
pub(crate) const DAY: Duration = Duration::from_secs(86_400);
/// humantime's year (365.25 days), so that `"1y"` is exactly this and prints as "1year".
pub(crate) const YEAR: Duration = Duration::from_secs(31_557_600);
/// `[study] timeout`: a study may legitimately run for months.
pub(crate) const MAX_STUDY_TIMEOUT: Duration = Duration::from_secs(10 * 31_557_600);
pub(crate) const MAX_TRIAL_TIMEOUT: Duration = YEAR;
/// Time between two messages of one trial (an epoch without a report).
pub(crate) const MAX_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);
pub(crate) const MAX_STARTUP_TIMEOUT: Duration = DAY;
/// The least `[worker] startup_timeout`: a worker starts a process, its interpreter (tens of
/// milliseconds for Python on an idle machine, several times that on a loaded one), imports
/// the helper and sends `ready`. Below a second that fails for no fault of the worker, and a
/// value that small is a slip of the unit ("1ns", "5ms").
pub(crate) const MIN_STARTUP_TIMEOUT: Duration = Duration::from_secs(1);
pub(crate) const MAX_SHUTDOWN_GRACE: Duration = DAY;
/// The loop that polls the GPUs also feeds the systemd watchdog (`WatchdogSec=60s` in the
/// shipped unit): a longer interval would get the daemon killed as hung.
pub(crate) const MAX_POLL_INTERVAL: Duration = Duration::from_secs(30);
pub(crate) const MAX_IDLE_WORKER_TIMEOUT: Duration = DAY;
pub(crate) const MAX_BREAKER_BACKOFF: Duration = DAY;
pub(crate) const MAX_OOM_RECOVERY: Duration = DAY;
/// Every size (`[gpu] headroom`, `trial_memory`, `[worker] recycle_on_growth`, log sizes):
/// 1 PiB, a thousand times the largest GPU and still far from overflowing a sum of
/// `max_par` of them.
pub(crate) const MAX_SIZE: u64 = 1 << 50;
/// `studies.study_name` and `trial_params.param_name` are VARCHAR(512) in Optuna's schema.
pub(crate) const MAX_NAME_CHARS: usize = crate::study::rules::MAX_NAME_CHARS;
/// One string choice of a categorical param.
pub(crate) const MAX_CHOICE_BYTES: usize = 4 * KIB as usize;
/// The params of one trial as JSON, at their longest: they travel in one protocol line (at most
/// 1 MiB) and, for a oneshot worker, in one environment variable (the kernel's limit for one
/// is 128 KiB) beside `--name=value` arguments.
pub(crate) const MAX_PARAMS_JSON_BYTES: usize = 64 * KIB as usize;
/// One param's `distribution_json` (every choice of a categorical): Optuna's `trial_params` holds
/// it for every trial, and sweepd parses it back for each on every start.
pub(crate) const MAX_DISTRIBUTION_JSON_BYTES: usize = 1 << 20;
/// One argument of `[worker] command`, one `[worker.env]` entry (`NAME=value`) or the
/// allocator setting: well under the kernel's 128 KiB limit for one string passed to exec.
pub(crate) const MAX_EXEC_STRING_BYTES: usize = 64 * KIB as usize;
/// `[sampler] n_ei_candidates`: TPE draws and scores this many candidates per proposal (Optuna's
/// default is 24); far more only costs time and memory.
pub(crate) const MAX_EI_CANDIDATES: i64 = 100_000;
/// `[sampler] population_size`: NSGA-II ranks a generation and its parents (twice this many
/// trials) on every new generation.
pub(crate) const MAX_POPULATION: i64 = 100_000;
/// The largest integer a `usize` setting may take, as the `i64` TOML reads.
pub(crate) const USIZE_MAX: i64 = if usize::BITS >= 64 {
    i64::MAX
} else {
    usize::MAX as i64
};
pub(crate) const U32_MAX: i64 = u32::MAX as i64;

pub(crate) struct Validator<'a> {
    pub(crate) file: &'a Path,
    pub(crate) text: &'a str,
    /// Built on first use: only problems without a value span need it.
    pub(crate) index: Option<KeyIndex>,
    pub(crate) problems: Vec<Problem>,
}

impl Validator<'_> {
    pub(crate) fn into_error(self) -> ConfigError {
        ConfigError {
            problems: self.problems,
        }
    }

    pub(crate) fn report(
        &mut self,
        span: Option<Range<usize>>,
        key: Option<String>,
        message: String,
    ) {
        let (line, column) = match span {
            Some(s) => {
                let (l, c) = line_col(self.text, s.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        self.problems.push(Problem {
            file: Some(self.file.to_path_buf()),
            line,
            column,
            key,
            message,
        });
    }

    /// Reports a problem about the value `at`, under the dotted `key`.
    pub(crate) fn at<T>(&mut self, at: &Spanned<T>, key: &str, message: impl Into<String>) {
        self.report(Some(at.span()), Some(key.to_owned()), message.into());
    }

    /// Reports a problem about a key that has no value to point at (a missing key, a default):
    /// it points at the nearest enclosing key the file does have, if any.
    pub(crate) fn at_key(&mut self, key: &str, message: impl Into<String>) {
        let text = self.text;
        let index = self.index.get_or_insert_with(|| KeyIndex::build(text));
        let span = index.nearest_ancestor(key);
        self.report(span, Some(key.to_owned()), message.into());
    }

    pub(crate) fn missing(&mut self, key: &str) {
        self.at_key(key, "missing required key");
    }

    /// A toml syntax or serde error: one problem, naming the key its span falls on.
    pub(crate) fn toml_error(&mut self, e: &toml::de::Error) {
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
}

impl Validator<'_> {
    pub(crate) fn study(&mut self, raw: Option<&RawStudy>) -> Option<StudyConfig> {
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
        let directions = self.directions(raw);
        let metric_names = self.metric_names(raw, directions.len());
        let sampler = self
            .choice(
                raw.sampler.as_ref(),
                "study.sampler",
                SAMPLERS,
                |s| match s {
                    "random" => Some(SamplerKind::Random),
                    "grid" => Some(SamplerKind::Grid),
                    "tpe" => Some(SamplerKind::Tpe),
                    "nsga2" => Some(SamplerKind::Nsga2),
                    "gp" => Some(SamplerKind::Gp),
                    _ => None,
                },
            )
            .unwrap_or(SamplerKind::Random);
        if let (SamplerKind::Gp, Some(span), 2..) = (sampler, &raw.sampler, directions.len()) {
            self.at(
                span,
                "study.sampler",
                super::gp_objectives(directions.len()),
            );
        }
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
        let (gpu_hours, patience) = self.budgets(raw);
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
            directions,
            metric_names,
            n_trials,
            timeout,
            gpu_hours,
            patience,
            sampler,
            seed,
        })
    }

    /// `direction` (one objective, the default "minimize") or `directions` (several), never
    /// both.
    fn directions(&mut self, raw: &RawStudy) -> Vec<Direction> {
        let parse = |s: &str| match s {
            "minimize" => Some(Direction::Minimize),
            "maximize" => Some(Direction::Maximize),
            _ => None,
        };
        let Some(list) = &raw.directions else {
            let one = self.choice(raw.direction.as_ref(), "study.direction", DIRECTIONS, parse);
            return vec![one.unwrap_or(Direction::Minimize)];
        };
        if raw.direction.is_some() {
            self.at(
                list,
                "study.directions",
                "`direction` and `directions` are exclusive: give one objective's `direction`, \
                 or every objective's in `directions`",
            );
        }
        if list.get_ref().is_empty() {
            self.at(
                list,
                "study.directions",
                format!("must name at least one direction ({DIRECTIONS})"),
            );
            return vec![Direction::Minimize];
        }
        list.get_ref()
            .iter()
            .enumerate()
            .map(|(i, d)| {
                self.choice(
                    Some(d),
                    &format!("study.directions[{i}]"),
                    DIRECTIONS,
                    parse,
                )
                .unwrap_or(Direction::Minimize)
            })
            .collect()
    }

    /// `metric_names`: one distinct, non-empty name per objective.
    fn metric_names(&mut self, raw: &RawStudy, n_objectives: usize) -> Option<Vec<String>> {
        let list = raw.metric_names.as_ref()?;
        let names: Vec<String> = list.get_ref().iter().map(|n| n.get_ref().clone()).collect();
        if names.len() != n_objectives {
            let which = if raw.directions.is_some() {
                "`directions`"
            } else {
                "`direction` (one objective)"
            };
            self.at(
                list,
                "study.metric_names",
                format!(
                    "names {} metrics but {which} gives {n_objectives} objective{}: one name per \
                     objective",
                    names.len(),
                    if n_objectives == 1 { "" } else { "s" }
                ),
            );
        }
        for (i, n) in list.get_ref().iter().enumerate() {
            let key = format!("study.metric_names[{i}]");
            if n.get_ref().trim().is_empty() {
                self.at(n, &key, "must not be empty");
            } else if let Err(message) = check_name(n.get_ref()) {
                self.at(n, &key, message);
            } else if names[..i].contains(n.get_ref()) {
                self.at(n, &key, format!("{:?} is named twice", n.get_ref()));
            }
        }
        Some(names)
    }

    /// What several objectives rule out: pruning (Optuna refuses `Trial.report` with several
    /// objectives, and so does the protocol).
    pub(crate) fn several_objectives(
        &mut self,
        study: &StudyConfig,
        pruner: &PrunerConfig,
        raw: Option<&RawPruner>,
    ) {
        if !study.is_multi_objective() || *pruner == PrunerConfig::None {
            return;
        }
        let message = format!(
            "pruning is not supported with several objectives (the study has {}), as in Optuna: \
             remove [pruner] or set `type = \"none\"`",
            study.directions.len()
        );
        match raw.and_then(|r| r.kind.as_ref()) {
            Some(kind) => self.at(kind, "pruner.type", message),
            None => self.at_key("pruner", message),
        }
    }

    pub(crate) fn storage(
        &mut self,
        raw: Option<&RawStorage>,
        base_dir: &Path,
    ) -> Option<StorageConfig> {
        let written = raw.and_then(|r| r.url.as_ref());
        let url = written.map_or(DEFAULT_STORAGE_URL, |u| u.get_ref().as_str());
        let report = |v: &mut Self, message: String| match written {
            Some(u) => v.at(u, "storage.url", message),
            None => v.at_key("storage.url", message),
        };
        let host_timeout = self
            .duration(
                raw.and_then(|r| r.host_timeout.as_ref()),
                "storage.host_timeout",
                storage::MAX_HOST_TIMEOUT,
            )
            .unwrap_or(storage::DEFAULT_HOST_TIMEOUT);
        if let Some(pg) = storage::postgres_url(url) {
            return match pg {
                Ok(connect) => Some(StorageConfig {
                    url: url.to_owned(),
                    path: PathBuf::from(storage::redact(&connect)),
                    postgres: Some(connect),
                    host_timeout,
                    warning: None,
                }),
                Err(message) => {
                    report(self, message);
                    None
                }
            };
        }
        let parsed = match parse_storage_url(url, base_dir) {
            Ok(p) => p,
            Err(message) => {
                report(self, message);
                return None;
            }
        };
        let path = parsed.path;
        if let Some(dir) = path.parent() {
            if !dir.is_dir() {
                let hint = absolute_hint(url)
                    .map(|abs| {
                        format!(
                            "; `sqlite:///` is relative, as in SQLAlchemy: for the absolute \
                             path write `{abs}` (four slashes)"
                        )
                    })
                    .unwrap_or_default();
                report(
                    self,
                    format!(
                        "directory {} for the database does not exist{hint}",
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
            postgres: None,
            host_timeout,
            warning: parsed.warning,
        })
    }

    pub(crate) fn sampler(&mut self, raw: Option<&RawSampler>) -> SamplerConfig {
        let d = SamplerConfig::default();
        let Some(raw) = raw else {
            return d;
        };
        // Unset, multivariate is on for one objective (see `SamplerConfig::multivariate`):
        // `group` is refused only where it is turned off by hand.
        let multivariate = raw.multivariate.as_ref().is_none_or(|b| *b.get_ref());
        let group = match &raw.group {
            Some(g) if *g.get_ref() && !multivariate => {
                self.at(
                    g,
                    "sampler.group",
                    "needs multivariate = true (Optuna refuses group without multivariate too)",
                );
                false
            }
            Some(g) => *g.get_ref(),
            None => d.group,
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
            multivariate: raw.multivariate.as_ref().map(|b| *b.get_ref()),
            group,
            constant_liar: raw
                .constant_liar
                .as_ref()
                .map_or(d.constant_liar, |b| *b.get_ref()),
            deterministic_objective: raw
                .deterministic_objective
                .as_ref()
                .map_or(d.deterministic_objective, |b| *b.get_ref()),
            seed: raw
                .seed
                .as_ref()
                .map(|s| self.int(Some(s), "sampler.seed", 0..=i64::MAX, 0)),
            population_size: self.int(
                raw.population_size.as_ref(),
                "sampler.population_size",
                2..=MAX_POPULATION,
                d.population_size,
            ),
            crossover_prob: self
                .probability(raw.crossover_prob.as_ref(), "sampler.crossover_prob")
                .unwrap_or(d.crossover_prob),
            swapping_prob: self
                .probability(raw.swapping_prob.as_ref(), "sampler.swapping_prob")
                .unwrap_or(d.swapping_prob),
            mutation_prob: self.probability(raw.mutation_prob.as_ref(), "sampler.mutation_prob"),
        }
    }

    pub(crate) fn metrics(&mut self, raw: Option<&RawMetrics>) -> MetricsConfig {
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
    pub(crate) fn int<T: TryFrom<i64>>(
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
    /// [`parse_config_size`]).
    pub(crate) fn size(&mut self, raw: &Spanned<toml::Value>, key: &str) -> Option<u64> {
        let result = match raw.get_ref() {
            toml::Value::Integer(i) => {
                u64::try_from(*i).map_err(|_| format!("must not be negative (got {i})"))
            }
            toml::Value::String(s) => parse_config_size(s),
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
    pub(crate) fn size_at_least(
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

    /// A keyword setting: the parsed value, or `None` (and a problem) if it is not one of `allowed`.
    /// A number between 0 and 1.
    pub(crate) fn probability(
        &mut self,
        raw: Option<&Spanned<toml::Value>>,
        key: &str,
    ) -> Option<f64> {
        let raw = raw?;
        match float_value(raw.get_ref()) {
            Ok(p) if (0.0..=1.0).contains(&p) => Some(p),
            Ok(p) => {
                self.at(raw, key, format!("must be between 0 and 1 (got {p})"));
                None
            }
            Err(message) => {
                self.at(raw, key, message);
                None
            }
        }
    }

    pub(crate) fn choice<T>(
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
    pub(crate) fn duration(
        &mut self,
        raw: Option<&Spanned<String>>,
        key: &str,
        max: Duration,
    ) -> Option<Duration> {
        let raw = raw?;
        match parse_duration(raw.get_ref()) {
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
                        format_duration(max)
                    ),
                );
                None
            }
            Ok(d) => Some(d),
            Err(message) => {
                self.at(raw, key, message);
                None
            }
        }
    }
}

/// A study or param name: no NUL byte (it cannot reach a worker's argv or environment) and at
/// most [`MAX_NAME_CHARS`] characters (Optuna's column is VARCHAR(512)). The message completes
/// "the name ...".
pub(crate) fn check_name(name: &str) -> Result<(), String> {
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

/// A path written in the file: a NUL byte cannot reach the operating system.
pub(crate) fn check_path(p: &str) -> Result<(), String> {
    if p.contains('\0') {
        return Err("may not contain NUL bytes".to_owned());
    }
    Ok(())
}

pub(crate) fn float_value(v: &toml::Value) -> Result<f64, String> {
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

pub(crate) fn is_loopback(addr: &SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(a) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `p` against `base` unless absolute, without `.` components; `..` is kept, since resolving it
/// lexically is wrong across symlinks and resolving it on disk would require the path to exist.
pub(crate) fn resolve(base: &Path, p: &Path) -> PathBuf {
    let joined = base.join(p);
    // `base` is absolute, so this only normalizes and never consults the current directory.
    std::path::absolute(&joined).unwrap_or(joined)
}
