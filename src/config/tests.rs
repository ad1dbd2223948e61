//! Whole config files through `Config::parse`: what is accepted, with which values, and every
//! problem a file can have, named by key and located.

use super::*;
use crate::study::Distribution;
use rstest::rstest;
use serde_json::json;

const FULL: &str = r#"[study]
name = "example"
direction = "maximize"
n_trials = 200
timeout = "1h 30m"
sampler = "random"
seed = 1

[storage]
url = "sqlite:///sweepd.db"

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
pub(super) fn cfg(study: &str, worker: &str, rest: &str) -> String {
    format!("[study]\nname = \"s\"\n{study}\n[worker]\ncommand = [\"w\"]\n{worker}\n{rest}")
}

pub(super) const PX: &str = "[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";

pub(super) fn parse_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
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
    assert_eq!(c.study.directions, [Direction::Maximize]);
    assert_eq!(c.study.n_trials, Some(200));
    assert_eq!(c.study.timeout, Some(Duration::from_secs(90 * 60)));
    assert_eq!(c.study.sampler, SamplerKind::Random);
    assert_eq!(c.study.seed, Some(1));

    assert_eq!(c.storage.url, "sqlite:///sweepd.db");
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
    assert_eq!(c.study.directions, [Direction::Minimize]);
    assert_eq!(c.study.sampler, SamplerKind::Random);
    assert_eq!(c.study.n_trials, None);
    assert_eq!(c.study.timeout, None);
    assert_eq!(c.study.seed, None);
    assert_eq!(c.storage.url, "sqlite:///sweepd.db");
    assert_eq!(c.storage.path, dir.path().join("sweepd.db"));
    assert_eq!(c.storage.warning, None);
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
        &format!("[storage]\nurl = \"sqlite:///run/s.db\"\n{PX}"),
    );
    let c = parse_in(dir.path(), &text).unwrap();
    assert_eq!(c.worker.cwd, dir.path().join("run"));
    assert_eq!(c.worker.log_dir, dir.path().join("run/logs"));
    assert_eq!(c.storage.path, dir.path().join("run/s.db"));
    assert_eq!(c.storage.warning, None);
}

#[test]
fn the_old_two_slash_storage_url_still_works_with_a_deprecation_warning() {
    let dir = tempfile::tempdir().unwrap();
    let text = cfg("", "", &format!("[storage]\nurl = \"sqlite://s.db\"\n{PX}"));
    let c = parse_in(dir.path(), &text).unwrap();
    assert_eq!(c.storage.path, dir.path().join("s.db"));
    let w = c.storage.warning.expect("a warning");
    assert!(w.contains("sqlite:///s.db"), "{w}");
}

#[test]
fn sqlite_three_slashes_meant_absolute_is_refused_with_the_four_slash_url() {
    // sweepd used to read sqlite:///abs as absolute; now, as SQLAlchemy, it is relative, and
    // <config dir>/tmp does not exist: the message names the URL that means /tmp.
    let dir = tempfile::tempdir().unwrap();
    let text = cfg(
        "",
        "",
        &format!("[storage]\nurl = \"sqlite:///tmp/s.db\"\n{PX}"),
    );
    let e = parse_in(dir.path(), &text).unwrap_err().to_string();
    assert!(e.contains("sqlite:////tmp/s.db"), "{e}");
}

#[test]
fn params_are_optional_the_objective_defines_them() {
    let dir = tempfile::tempdir().unwrap();
    for text in [cfg("", "", ""), cfg("", "", "[params]\n")] {
        let c = parse_in(dir.path(), &text).unwrap();
        assert!(c.space.params.is_empty());
    }
}

#[test]
fn sqlite_url_with_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("abs.db");
    let text = cfg(
        "",
        "",
        &format!("[storage]\nurl = \"sqlite:///{}\"\n{PX}", db.display()),
    );
    let c = parse_in(dir.path(), &text).unwrap();
    assert_eq!(c.storage.path, db);
}

#[test]
fn postgresql_urls_as_optuna_users_write_them() {
    let dir = tempfile::tempdir().unwrap();
    for (url, connect) in [
        (
            "postgresql://sweep:pw@db:5432/s",
            "postgresql://sweep:pw@db:5432/s",
        ),
        ("postgres://db/s", "postgres://db/s"),
        (
            "postgresql+psycopg2://sweep:pw@db/s",
            "postgresql://sweep:pw@db/s",
        ),
    ] {
        let text = cfg(
            "",
            "",
            &format!("[storage]\nurl = \"{url}\"\nhost_timeout = \"20s\"\n{PX}"),
        );
        let c = parse_in(dir.path(), &text).unwrap();
        assert_eq!(c.storage.url, url);
        assert_eq!(c.storage.postgres.as_deref(), Some(connect));
        assert!(
            !c.storage.path.to_string_lossy().contains("pw"),
            "{:?}",
            c.storage.path
        );
        assert_eq!(c.storage.host_timeout, std::time::Duration::from_secs(20));
    }
    let c = parse_in(dir.path(), &cfg("", "", PX)).unwrap();
    assert_eq!(c.storage.postgres, None);
    assert_eq!(c.storage.host_timeout, std::time::Duration::from_secs(60));
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
        file: Some(PathBuf::from("supervisor.toml")),
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
fn wrong_type_error_survives_a_datetime_elsewhere() {
    let text = cfg(
        "",
        "",
        &format!(
            "{PX}[params.d]\ntype = \"categorical\"\nchoices = [1979-05-27]\nlow = []\nlog = 1\n"
        ),
    );
    only_problem(&text, "params.d.log");
}

// ---- search space

#[test]
fn accepts_float_step_despite_rounding_noise() {
    // 0.7 / 0.1 is 6.999999999999999 in binary floating point.
    let d = param("[params.x]\ntype = \"float\"\nlow = 0.1\nhigh = 0.8\nstep = 0.1\n");
    assert_eq!(d.grid_len(), Some(8));
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

// ---- worker

#[test]
fn rejects_cwd_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "").unwrap();
    let e = parse_in(dir.path(), &cfg("", "cwd = \"f\"", PX)).unwrap_err();
    assert_eq!(e.problems.len(), 1);
    assert_eq!(e.problems[0].key.as_deref(), Some("worker.cwd"));
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

// ---- storage

#[test]
fn rejects_storage_in_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let text = cfg(
        "",
        "",
        &format!("[storage]\nurl = \"sqlite:///no/such/s.db\"\n{PX}"),
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
pub(super) fn with(worker: &str, tables: &str) -> String {
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
            idle_worker_timeout: Duration::from_secs(60),
            memory_group: None,
            caps: true,
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
            group: false,
            n_startup_trials: 10,
            n_ei_candidates: 24,
            multivariate: None,
            constant_liar: true,
            seed: None,
            ..SamplerConfig::default()
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
             nvml_lib = \"libnvidia-ml.so.1\"\nidle_worker_timeout = \"90s\"\n\
             memory_group = \"resnet\"\ncaps = false\n\
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
            idle_worker_timeout: Duration::from_secs(90),
            memory_group: Some("resnet".into()),
            caps: false,
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
            group: false,
            n_startup_trials: 0,
            n_ei_candidates: 48,
            multivariate: Some(false),
            constant_liar: false,
            seed: Some(7),
            ..SamplerConfig::default()
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
    let c = parsed(&with("", "[pruner]\ntype = \"hyperband\"\n"));
    assert_eq!(
        c.pruner,
        PrunerConfig::Hyperband {
            min_resource: 1,
            max_resource: MaxResource::Auto,
            reduction_factor: 3,
            bootstrap_count: 0
        }
    );
    let c = parsed(&with(
        "",
        "[pruner]\ntype = \"hyperband\"\nmin_resource = 2\nmax_resource = 100\n\
         reduction_factor = 4\nbootstrap_count = 3\n",
    ));
    assert_eq!(
        c.pruner,
        PrunerConfig::Hyperband {
            min_resource: 2,
            max_resource: MaxResource::Steps(100),
            reduction_factor: 4,
            bootstrap_count: 3
        }
    );
    let c = parsed(&with(
        "",
        "[pruner]\ntype = \"hyperband\"\nmax_resource = \"auto\"\nmin_resource = 7\n",
    ));
    assert_eq!(
        c.pruner,
        PrunerConfig::Hyperband {
            min_resource: 7,
            max_resource: MaxResource::Auto,
            reduction_factor: 3,
            bootstrap_count: 0
        }
    );
    // The most steps a worker can report, plus one; and max_resource = min_resource (one
    // bracket, which prunes at min_resource).
    let c = parsed(&with(
        "",
        "[pruner]\ntype = \"hyperband\"\nmax_resource = 2147483648\nmin_resource = 2147483648\n",
    ));
    assert!(matches!(
        c.pruner,
        PrunerConfig::Hyperband {
            max_resource: MaxResource::Steps(2147483648),
            ..
        }
    ));
    let c = parsed(&with("", "[pruner]\ntype = \"none\"\n"));
    assert_eq!(c.pruner, PrunerConfig::None);
}

// ---- sizes

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

// ---- [worker.allocator]

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

// ---- [metrics]

#[test]
fn metrics_accepts_loopback_addresses() {
    let c = parsed(&with("", "[metrics]\nlisten = \"127.0.0.1:9464\"\n"));
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert!(!c.metrics.allow_remote);
    let c = parsed(&with("", "[metrics]\nlisten = \"[::1]:9464\"\n"));
    assert_eq!(c.metrics.listen, Some("[::1]:9464".parse().unwrap()));
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

// ---- every problem a file can have: one table

/// A worker table with an unknown key, at line 5, column 1.
const UNKNOWN_KEY: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\ncolour = \"red\"\n";
/// A worker table with a string where an integer belongs, at line 5, column 11.
const WRONG_TYPE: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\nmax_par = \"four\"\n";
/// A float param with low above high, `low` at line 7, column 8.
const LOW_ABOVE_HIGH: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\n\
                              [params.lr]\ntype = \"float\"\nlow =  0.5\nhigh = 0.1\n";

/// The one problem in `text`: it names `key` and its message says each of `says`.
#[rstest]
// TOML and serde errors: they stop the parse, so each is the only problem.
#[case::unknown_key_naming_its_table(UNKNOWN_KEY.into(), "worker.colour", &["unknown field `colour`", "expected one of"])]
#[case::unknown_key_in_a_param_table(cfg("", "", &format!("{PX}colour = 1\n")), "params.x.colour", &["unknown field `colour`"])]
#[case::unknown_key_in_an_inline_table(cfg("", "", "[params]\nx = { type = \"float\", hue = 1 }\n"), "params.x.hue", &[])]
#[case::unknown_top_level_table(cfg("", "", &format!("{PX}[extra]\na = 1\n")), "extra", &["unknown field `extra`"])]
#[case::unknown_key_in_gpu_table(with("", "[gpu]\nheadrom = 1\n"), "gpu.headrom", &["unknown field `headrom`"])]
#[case::unknown_key_in_allocator_table(with("", "[worker.allocator]\ncuda = \"x\"\n"), "worker.allocator.cuda", &[])]
#[case::wrong_type_naming_the_key(WRONG_TYPE.into(), "worker.max_par", &["invalid type"])]
#[case::wrong_type_in_an_array(cfg("", "", PX).replace("[\"w\"]", "[\"w\", 3]"), "worker.command", &[])]
#[case::wrong_type_for_a_table(format!("study = 5\n{PX}"), "study", &[])]
// Serde's derived structs would otherwise take the fields by position.
#[case::array_written_for_a_table(format!("study = [\"s\"]\n{PX}"), "study", &["expected a table"])]
#[case::array_written_for_a_param_table(cfg("", "", "[params]\nx = [\"float\", 0, 1]\n"), "params.x", &[])]
#[case::array_of_tables_where_a_table_is_expected(cfg("", "", PX).replace("[study]", "[[study]]"), "study", &[])]
// [study] and [worker] are required, with their required keys.
#[case::missing_study_name(cfg("", "", PX).replace("name = \"s\"\n", ""), "study.name", &[])]
#[case::empty_study_name(cfg("", "", PX).replace("\"s\"", "\"\""), "study.name", &[])]
#[case::missing_study_table(format!("[worker]\ncommand = [\"w\"]\n{PX}"), "study", &[])]
#[case::missing_worker_table(format!("[study]\nname = \"s\"\n{PX}"), "worker", &[])]
#[case::missing_command(cfg("", "", PX).replace("command = [\"w\"]", ""), "worker.command", &[])]
// [study]
#[case::zero_n_trials(cfg("n_trials = 0", "", PX), "study.n_trials", &[])]
#[case::negative_seed(cfg("seed = -1", "", PX), "study.seed", &[])]
#[case::unknown_direction_listing_allowed_values(cfg("direction = \"up\"", "", PX), "study.direction", &["\"minimize\", \"maximize\""])]
#[case::unknown_sampler_listing_allowed_values(cfg("sampler = \"cmaes\"", "", PX), "study.sampler", &["\"random\", \"grid\", \"tpe\", \"nsga2\""])]
#[case::unparseable_study_timeout(cfg("timeout = \"soon\"", "", PX), "study.timeout", &[])]
// Several objectives.
#[case::direction_and_directions(cfg("direction = \"minimize\"\ndirections = [\"minimize\", \"maximize\"]", "", PX), "study.directions", &["exclusive"])]
#[case::no_directions(cfg("directions = []", "", PX), "study.directions", &["at least one"])]
#[case::unknown_second_direction(cfg("directions = [\"minimize\", \"up\"]", "", PX), "study.directions[1]", &["\"minimize\", \"maximize\""])]
#[case::a_metric_name_per_objective(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\"]", "", PX), "study.metric_names", &["names 1 metrics but `directions` gives 2 objectives"])]
#[case::metric_names_for_one_direction(cfg("metric_names = [\"a\", \"b\"]", "", PX), "study.metric_names", &["`direction` (one objective) gives 1 objective:"])]
#[case::metric_name_twice(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"a\", \"a\"]", "", PX), "study.metric_names[1]", &["named twice"])]
#[case::empty_metric_name(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"a\", \" \"]", "", PX), "study.metric_names[1]", &["empty"])]
#[case::pruner_with_several_objectives(cfg("directions = [\"minimize\", \"maximize\"]", "", &format!("{PX}[pruner]\ntype = \"median\"\n")), "pruner.type", &["not supported with several objectives", "the study has 2"])]
// The search space.
#[case::grid_without_params(cfg("sampler = \"grid\"", "", ""), "study.sampler", &["static space", "[params.NAME]"])]
#[case::group_without_multivariate(cfg("", "", &format!("[sampler]\nmultivariate = false\ngroup = true\n{PX}")), "sampler.group", &["multivariate = true"])]
#[case::low_not_below_high(LOW_ABOVE_HIGH.into(), "params.lr.low", &[])]
#[case::int_low_equal_to_high(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 3\nhigh = 3\n"), "params.n.low", &[])]
#[case::missing_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\n"), "params.x.high", &[])]
#[case::non_integer_int_bound(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0.5\nhigh = 4\n"), "params.n.low", &["integer"])]
#[case::string_int_bound(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = \"4\"\n"), "params.n.high", &[])]
#[case::non_numeric_float_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = \"0\"\nhigh = 1\n"), "params.x.low", &[])]
#[case::non_finite_float_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = inf\n"), "params.x.high", &[])]
#[case::float_log_with_non_positive_low(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nlog = true\n"), "params.x.log", &[])]
#[case::int_log_with_non_positive_low(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 8\nlog = true\n"), "params.n.log", &[])]
#[case::log_with_step_on_float(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 1\nhigh = 2\nlog = true\nstep = 0.5\n"), "params.x.step", &["log"])]
#[case::int_log_with_step_other_than_one(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 1\nhigh = 9\nlog = true\nstep = 2\n"), "params.n.step", &[])]
#[case::zero_float_step(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0\n"), "params.x.step", &[])]
#[case::negative_int_step(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 4\nstep = -2\n"), "params.n.step", &[])]
#[case::float_step_not_dividing_the_range(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0.3\n"), "params.x.step", &["does not divide"])]
#[case::float_step_not_dividing_the_range_in_decimals(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0.1\nhigh = 0.30000000000000004\nstep = 0.1\n"), "params.x.step", &["does not divide", "lower high to 0.3"])]
#[case::float_step_of_10_pow_28_steps(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 1e-30\n"), "params.x.step", &["decimal.InvalidOperation"])]
#[case::int_high_past_2_pow_53(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 3864557551897539457\n"), "params.n.high", &["2^53"])]
#[case::int_low_past_minus_2_pow_53(cfg("", "", "[params.n]\ntype = \"int\"\nlow = -9007199254740993\nhigh = 0\n"), "params.n.low", &["2^53"])]
#[case::int_step_not_dividing_the_range(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 5\nstep = 2\n"), "params.n.step", &[])]
#[case::categorical_without_choices(cfg("", "", "[params.c]\ntype = \"categorical\"\n"), "params.c.choices", &[])]
#[case::categorical_with_no_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = []\n"), "params.c.choices", &[])]
#[case::array_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", [1, 2]]\n"), "params.c.choices", &[])]
#[case::table_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", { a = 1 }]\n"), "params.c.choices", &[])]
#[case::datetime_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", 1979-05-27T07:32:00Z]\n"), "params.c.choices", &[])]
#[case::nan_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", nan]\n"), "params.c.choices", &[])]
#[case::duplicate_choices(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [1, \"a\", 1.0]\n"), "params.c.choices", &["duplicate"])]
#[case::choices_on_a_float(cfg("", "", &format!("{PX}choices = [1]\n")), "params.x.choices", &[])]
#[case::choices_on_an_int(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 1\nchoices = [1]\n"), "params.n.choices", &[])]
#[case::unknown_param_type(cfg("", "", "[params.x]\ntype = \"double\"\n"), "params.x.type", &["\"float\", \"int\", \"categorical\""])]
#[case::missing_param_type(cfg("", "", "[params.x]\nlow = 1\n"), "params.x.type", &[])]
#[case::reserved_param_name(cfg("", "", &PX.replace("[params.x]", "[params.\"sweepd:x\"]")), "params.\"sweepd:x\"", &["sweepd:"])]
#[case::empty_param_name(cfg("", "", &PX.replace("[params.x]", "[params.\"\"]")), "params.\"\"", &[])]
#[case::grid_with_continuous_float(cfg("sampler = \"grid\"", "", PX), "params.x", &["grid sampler needs a `step`"])]
#[case::grid_over_a_million_points(cfg("sampler = \"grid\"", "", "[params.a]\ntype = \"int\"\nlow = 0\nhigh = 999\n[params.b]\ntype = \"int\"\nlow = 0\nhigh = 1000\n"), "study.sampler", &[])]
// [storage]
#[case::postgresql_url_with_a_space(cfg("", "", &format!("[storage]\nurl = \"postgresql://u:secret@h/my db\"\n{PX}")), "storage.url", &["percent-encode"])]
#[case::zero_host_timeout(cfg("", "", &format!("[storage]\nhost_timeout = \"0s\"\n{PX}")), "storage.host_timeout", &["greater than zero"])]
#[case::mysql_storage(cfg("", "", &format!("[storage]\nurl = \"mysql://h/db\"\n{PX}")), "storage.url", &["only sqlite://"])]
#[case::storage_without_a_scheme(cfg("", "", &format!("[storage]\nurl = \"sweepd.db\"\n{PX}")), "storage.url", &["only sqlite://"])]
// [worker]
#[case::empty_command(cfg("", "", PX).replace("[\"w\"]", "[]"), "worker.command", &[])]
#[case::empty_program(cfg("", "", PX).replace("[\"w\"]", "[\"\", \"x\"]"), "worker.command", &[])]
#[case::unknown_mode_listing_allowed_values(cfg("", "mode = \"forking\"", PX), "worker.mode", &["\"persistent\", \"oneshot\""])]
#[case::missing_cwd(cfg("", "cwd = \"nope\"", PX), "worker.cwd", &["nope"])]
#[case::unparseable_trial_timeout(cfg("", "trial_timeout = \"1 fortnight\"", PX), "worker.trial_timeout", &[])]
#[case::zero_shutdown_grace(cfg("", "shutdown_grace = \"0s\"", PX), "worker.shutdown_grace", &["greater than zero"])]
#[case::startup_timeout_of_1ns(cfg("", "startup_timeout = \"1ns\"", PX), "worker.startup_timeout", &["too short", "at least 1s"])]
#[case::startup_timeout_of_500ms(cfg("", "startup_timeout = \"500ms\"", PX), "worker.startup_timeout", &["at least 1s"])]
#[case::pythonpath_without_the_helper(cfg("", "", &format!("{PX}[worker.env]\nPYTHONPATH = \"/nonexistent/lib\"\n")), "worker.env.PYTHONPATH", &["sweepd_worker.py", "/python:/nonexistent/lib"])]
#[case::empty_pythonpath(cfg("", "", &format!("{PX}[worker.env]\nPYTHONPATH = \"\"\n")), "worker.env.PYTHONPATH", &["import sweepd_worker"])]
#[case::zero_startup_timeout(cfg("", "startup_timeout = \"0m\"", PX), "worker.startup_timeout", &[])]
#[case::zero_heartbeat_timeout(with("heartbeat_timeout = \"0s\"", ""), "worker.heartbeat_timeout", &[])]
#[case::zero_max_par(cfg("", "max_par = 0", PX), "worker.max_par", &[])]
#[case::max_par_above_1024(cfg("", "max_par = 1025", PX), "worker.max_par", &[])]
#[case::negative_recycle_after(cfg("", "recycle_after = -1", PX), "worker.recycle_after", &[])]
#[case::zero_recycle_on_growth(with("recycle_on_growth = 0", ""), "worker.recycle_on_growth", &[])]
#[case::recycle_on_growth_in_an_unknown_unit(with("recycle_on_growth = \"1 parsec\"", ""), "worker.recycle_on_growth", &[])]
#[case::log_max_bytes_below_4kib(with("log_max_bytes = 4095", ""), "worker.log_max_bytes", &["4 KiB"])]
#[case::log_max_total_below_log_max_bytes(with("log_max_bytes = \"10MiB\"\nlog_max_total = \"5MiB\"", ""), "worker.log_max_total", &[])]
#[case::default_log_max_total_below_log_max_bytes(with("log_max_bytes = \"2GiB\"", ""), "worker.log_max_total", &["default"])]
#[case::env_value_of_a_wrong_type(cfg("", "", &format!("[worker.env]\nX = [1]\n{PX}")), "worker.env.X", &[])]
#[case::env_name_with_equals(cfg("", "", &format!("[worker.env]\n\"A=B\" = \"x\"\n{PX}")), "worker.env.\"A=B\"", &[])]
#[case::empty_env_name(cfg("", "", &format!("[worker.env]\n\"\" = \"x\"\n{PX}")), "worker.env.\"\"", &[])]
#[case::unknown_allocator_preset(with("", "[worker.allocator]\npreset = \"tuned\"\n"), "worker.allocator.preset", &["\"default\", \"none\""])]
#[case::unknown_pytorch_allocator_key(with("", "[worker.allocator]\npytorch = \"expandable_segments:True,max_splt_size_mb:64\"\n"), "worker.allocator.pytorch", &["\"max_splt_size_mb\""])]
#[case::pytorch_allocator_entry_without_a_value(with("", "[worker.allocator]\npytorch = \"expandable_segments\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_stray_comma(with("", "[worker.allocator]\npytorch = \"expandable_segments:True,\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_empty_value(with("", "[worker.allocator]\npytorch = \"backend:\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_unbalanced_bracket(with("", "[worker.allocator]\npytorch = \"roundup_power2_divisions:[256:1\"\n"), "worker.allocator.pytorch", &[])]
// Sizes.
#[case::size_in_an_unknown_unit(with("", "[gpu]\nheadroom = \"1 GiX\"\n"), "gpu.headroom", &["unknown unit"])]
#[case::negative_size_in_bytes(with("", "[gpu]\nheadroom = -1\n"), "gpu.headroom", &[])]
#[case::negative_size_with_a_unit(with("", "[gpu]\nheadroom = \"-1GiB\"\n"), "gpu.headroom", &[])]
#[case::size_of_a_wrong_type(with("", "[gpu]\nheadroom = 1.5\n"), "gpu.headroom", &["must be a size"])]
// [gpu]
#[case::unknown_devices_keyword(with("", "[gpu]\ndevices = \"some\"\n"), "gpu.devices", &["\"all\", \"none\""])]
#[case::devices_of_a_wrong_type(with("", "[gpu]\ndevices = 0\n"), "gpu.devices", &["list of device indices"])]
#[case::device_index_of_a_wrong_type(with("", "[gpu]\ndevices = [0, \"1\"]\n"), "gpu.devices", &[])]
#[case::empty_device_list(with("", "[gpu]\ndevices = []\n"), "gpu.devices", &[])]
#[case::negative_device_index(with("", "[gpu]\ndevices = [0, -1]\n"), "gpu.devices", &[])]
#[case::duplicate_device_index(with("", "[gpu]\ndevices = [1, 0, 1]\n"), "gpu.devices", &["duplicate device index 1"])]
#[case::zero_trial_memory(with("", "[gpu]\ntrial_memory = 0\n"), "gpu.trial_memory", &["greater than zero"])]
#[case::zero_max_par_per_device(with("", "[gpu]\nmax_par_per_device = 0\n"), "gpu.max_par_per_device", &[])]
#[case::max_par_per_device_above_1024(with("", "[gpu]\nmax_par_per_device = 1025\n"), "gpu.max_par_per_device", &[])]
#[case::zero_gpus_per_trial(with("", "[gpu]\ngpus_per_trial = 0\n"), "gpu.gpus_per_trial", &[])]
#[case::multi_gpu_trials_until_they_are_supported(with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 2\n"), "gpu.gpus_per_trial", &["not supported yet"])]
#[case::poll_interval_below_50ms(with("", "[gpu]\npoll_interval = \"10ms\"\n"), "gpu.poll_interval", &["at least 50ms"])]
#[case::missing_nvml_lib(with("", "[gpu]\nnvml_lib = \"no/libnvidia-ml.so\"\n"), "gpu.nvml_lib", &["does not exist"])]
#[case::empty_nvml_lib(with("", "[gpu]\nnvml_lib = \"\"\n"), "gpu.nvml_lib", &[])]
#[case::zero_idle_worker_timeout(with("", "[gpu]\nidle_worker_timeout = \"0s\"\n"), "gpu.idle_worker_timeout", &["greater than zero"])]
#[case::idle_worker_timeout_over_a_day(with("", "[gpu]\nidle_worker_timeout = \"2d\"\n"), "gpu.idle_worker_timeout", &["too long"])]
#[case::empty_memory_group(with("", "[gpu]\nmemory_group = \" \"\n"), "gpu.memory_group", &["must not be empty"])]
#[case::memory_group_without_declared_params(cfg("", "", "[gpu]\nmemory_group = \"resnet\"\n"), "gpu.memory_group", &["[params.NAME]"])]
// [retry]
#[case::negative_oom_retries(with("", "[retry]\noom = -1\n"), "retry.oom", &[])]
#[case::negative_cuda_fatal_retries(with("", "[retry]\ncuda_fatal = -1\n"), "retry.cuda_fatal", &[])]
#[case::negative_crash_retries(with("", "[retry]\ncrash = -1\n"), "retry.crash", &[])]
#[case::retries_past_u32(with("", "[retry]\noom = 4294967296\n"), "retry.oom", &["at most 4294967295"])]
#[case::zero_breaker_threshold(with("", "[retry]\nbreaker_threshold = 0\n"), "retry.breaker_threshold", &["at least 1"])]
#[case::max_backoff_below_backoff(with("", "[retry]\nbreaker_backoff = \"10m\"\nbreaker_max_backoff = \"5m\"\n"), "retry.breaker_max_backoff", &[])]
#[case::default_max_backoff_below_backoff(with("", "[retry]\nbreaker_backoff = \"1h\"\n"), "retry.breaker_max_backoff", &["default"])]
#[case::zero_breaker_backoff(with("", "[retry]\nbreaker_backoff = \"0s\"\n"), "retry.breaker_backoff", &[])]
#[case::oom_admission_factor_zero(with("", "[retry]\noom_admission_factor = 0\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_one(with("", "[retry]\noom_admission_factor = 1\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_above_one(with("", "[retry]\noom_admission_factor = 1.5\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_negative(with("", "[retry]\noom_admission_factor = -0.5\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_float_zero(with("", "[retry]\noom_admission_factor = 0.0\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_string(with("", "[retry]\noom_admission_factor = \"half\"\n"), "retry.oom_admission_factor", &[])]
#[case::unparseable_oom_recovery(with("", "[retry]\noom_recovery = \"soon\"\n"), "retry.oom_recovery", &[])]
// [sampler]
#[case::zero_n_ei_candidates(with("", "[sampler]\nn_ei_candidates = 0\n"), "sampler.n_ei_candidates", &[])]
#[case::negative_n_startup_trials(with("", "[sampler]\nn_startup_trials = -1\n"), "sampler.n_startup_trials", &[])]
#[case::negative_sampler_seed(with("", "[sampler]\nseed = -3\n"), "sampler.seed", &[])]
#[case::population_of_one(with("", "[sampler]\npopulation_size = 1\n"), "sampler.population_size", &["between 2 and"])]
#[case::crossover_prob_above_one(with("", "[sampler]\ncrossover_prob = 1.5\n"), "sampler.crossover_prob", &["between 0 and 1"])]
#[case::swapping_prob_negative(with("", "[sampler]\nswapping_prob = -0.1\n"), "sampler.swapping_prob", &[])]
#[case::mutation_prob_as_text(with("", "[sampler]\nmutation_prob = \"low\"\n"), "sampler.mutation_prob", &["must be a number"])]
// [pruner]
#[case::unknown_pruner_type(with("", "[pruner]\ntype = \"pbt\"\nmin_resource = 1\n"), "pruner.type", &["\"none\", \"median\", \"asha\", \"hyperband\""])]
#[case::asha_key_on_median(with("", "[pruner]\ntype = \"median\"\nmin_resource = 2\n"), "pruner.min_resource", &["\"asha\""])]
#[case::median_key_on_asha(with("", "[pruner]\ntype = \"asha\"\nn_warmup_steps = 2\n"), "pruner.n_warmup_steps", &[])]
#[case::median_key_on_none(with("", "[pruner]\ntype = \"none\"\ninterval_steps = 2\n"), "pruner.interval_steps", &[])]
#[case::pruner_key_without_a_type(with("", "[pruner]\nreduction_factor = 4\n"), "pruner.reduction_factor", &["set `type`"])]
#[case::negative_n_warmup_steps(with("", "[pruner]\ntype = \"median\"\nn_warmup_steps = -1\n"), "pruner.n_warmup_steps", &[])]
#[case::zero_interval_steps(with("", "[pruner]\ntype = \"median\"\ninterval_steps = 0\n"), "pruner.interval_steps", &[])]
#[case::negative_median_n_startup_trials(with("", "[pruner]\ntype = \"median\"\nn_startup_trials = -1\n"), "pruner.n_startup_trials", &[])]
#[case::zero_min_resource(with("", "[pruner]\ntype = \"asha\"\nmin_resource = 0\n"), "pruner.min_resource", &[])]
#[case::reduction_factor_below_two(with("", "[pruner]\ntype = \"asha\"\nreduction_factor = 1\n"), "pruner.reduction_factor", &["at least 2 (got 1)"])]
#[case::hyperband_key_on_asha(with("", "[pruner]\ntype = \"asha\"\nmax_resource = 27\n"), "pruner.max_resource", &["of pruner type \"hyperband\"", "type \"asha\""])]
#[case::bootstrap_count_on_median(with("", "[pruner]\ntype = \"median\"\nbootstrap_count = 2\n"), "pruner.bootstrap_count", &["\"hyperband\""])]
#[case::shared_key_on_median_names_both_types(with("", "[pruner]\ntype = \"median\"\nreduction_factor = 2\n"), "pruner.reduction_factor", &["pruner types \"asha\" and \"hyperband\""])]
#[case::min_early_stopping_rate_on_hyperband(with("", "[pruner]\ntype = \"hyperband\"\nmin_early_stopping_rate = 1\n"), "pruner.min_early_stopping_rate", &["bracket k the rate k"])]
#[case::hyperband_max_resource_as_other_text(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = \"max\"\n"), "pruner.max_resource", &["\"auto\""])]
#[case::hyperband_max_resource_as_float(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 27.0\n"), "pruner.max_resource", &["not float"])]
#[case::hyperband_max_resource_zero(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 0\n"), "pruner.max_resource", &["at least 1 (got 0)"])]
#[case::hyperband_max_resource_below_min_resource(with("", "[pruner]\ntype = \"hyperband\"\nmin_resource = 5\nmax_resource = 4\n"), "pruner.max_resource", &["below min_resource (5)", "never prune"])]
#[case::hyperband_max_resource_past_any_step(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 2147483649\n"), "pruner.max_resource", &["at most 2147483648"])]
#[case::hyperband_bootstrap_with_auto(with("", "[pruner]\ntype = \"hyperband\"\nbootstrap_count = 2\n"), "pruner.bootstrap_count", &["max_resource` unset", "number of steps"])]
#[case::hyperband_bootstrap_with_auto_written(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = \"auto\"\nbootstrap_count = 1\n"), "pruner.bootstrap_count", &["max_resource = \"auto\""])]
#[case::hyperband_negative_bootstrap_count(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 9\nbootstrap_count = -1\n"), "pruner.bootstrap_count", &["must not be negative"])]
#[case::hyperband_reduction_factor_below_two(with("", "[pruner]\ntype = \"hyperband\"\nreduction_factor = 1\n"), "pruner.reduction_factor", &["at least 2 (got 1)"])]
#[case::hyperband_zero_min_resource(with("", "[pruner]\ntype = \"hyperband\"\nmin_resource = 0\n"), "pruner.min_resource", &[])]
#[case::negative_min_early_stopping_rate(with("", "[pruner]\ntype = \"asha\"\nmin_early_stopping_rate = -1\n"), "pruner.min_early_stopping_rate", &[])]
// [metrics]
#[case::metrics_on_every_ipv4_address(with("", "[metrics]\nlisten = \"0.0.0.0:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_on_a_lan_address(with("", "[metrics]\nlisten = \"192.168.1.5:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_on_every_ipv6_address(with("", "[metrics]\nlisten = \"[::]:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_remote_with_allow_remote_false(with("", "[metrics]\nlisten = \"10.0.0.1:9464\"\nallow_remote = false\n"), "metrics.listen", &[])]
#[case::metrics_on_a_host_name(with("", "[metrics]\nlisten = \"localhost:9464\"\n"), "metrics.listen", &["127.0.0.1:9464"])]
#[case::metrics_port_without_an_address(with("", "[metrics]\nlisten = \"9464\"\n"), "metrics.listen", &[])]
#[case::metrics_port_zero(with("", "[metrics]\nlisten = \"127.0.0.1:0\"\n"), "metrics.listen", &[])]
fn rejects(#[case] text: String, #[case] key: &str, #[case] says: &[&str]) {
    let p = only_problem(&text, key);
    for s in says {
        assert!(p.message.contains(s), "should say {s:?}: {}", p.message);
    }
}

/// Where the one problem of `text` points: the line that starts with `line_start`, and the
/// column if given.
#[rstest]
#[case::unknown_key_at_the_key(UNKNOWN_KEY.into(), "worker.colour", "colour", Some(1))]
#[case::wrong_type_at_the_value(WRONG_TYPE.into(), "worker.max_par", "max_par", Some(11))]
#[case::array_of_tables_at_its_header(cfg("", "", PX).replace("[study]", "[[study]]"), "study", "[[study]]", None)]
#[case::missing_key_at_its_tables_header(cfg("", "", PX).replace("name = \"s\"\n", ""), "study.name", "[study]", None)]
#[case::low_above_high_at_low(LOW_ABOVE_HIGH.into(), "params.lr.low", "low", Some(8))]
#[case::duplicate_choice_at_the_duplicate(
    cfg(
        "",
        "",
        "[params.c]\ntype = \"categorical\"\nchoices = [1, \"a\", 1.0]\n"
    ),
    "params.c.choices",
    "choices",
    Some(20)
)]
#[case::negative_device_index_at_the_index(
    with("", "[gpu]\ndevices = [0, -1]\n"),
    "gpu.devices",
    "devices",
    Some(15)
)]
fn problem_points_at(
    #[case] text: String,
    #[case] key: &str,
    #[case] line_start: &str,
    #[case] column: Option<usize>,
) {
    let lines: Vec<usize> = (1..)
        .zip(text.lines())
        .filter(|(_, l)| l.starts_with(line_start))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines.len(), 1, "one line starts with {line_start:?}");
    let p = only_problem(&text, key);
    assert_eq!(p.line, Some(lines[0]), "{p}");
    if column.is_some() {
        assert_eq!(p.column, column, "{p}");
    }
}

#[test]
fn low_not_below_high_says_both() {
    let p = only_problem(LOW_ABOVE_HIGH, "params.lr.low");
    assert_eq!(p.message, "low (0.5) must be less than high (0.1)");
}

/// A check of a parsed config (rstest binds case arguments untyped).
type Check = fn(&Config) -> bool;

fn check(f: Check) -> Check {
    f
}

/// Values at the bound a `rejects` case crosses are accepted.
#[rstest]
#[case::one_gpu_per_trial_of_two_devices(with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 1\n"), check(|c| c.gpu.gpus_per_trial == 1))]
#[case::poll_interval_of_50ms(with("", "[gpu]\npoll_interval = \"50ms\"\n"), check(|c| c.gpu.poll_interval == Duration::from_millis(50)))]
#[case::log_max_bytes_of_4kib(with("log_max_bytes = \"4KiB\"", ""), check(|c| c.worker.log_max_bytes == 4096))]
fn accepts_the_bound(#[case] text: String, #[case] check: Check) {
    assert!(check(&parsed(&text)));
}

// ---- command-line overrides

fn with_par(text: &str, par: usize) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let overrides = Overrides { max_par: Some(par) };
    Config::parse_with(text, &dir.path().join("supervisor.toml"), &overrides)
}

#[rstest]
#[case::lower_than_the_file(1)]
#[case::higher_than_the_file(5)]
#[case::the_most(1024)]
fn par_replaces_the_files_max_par(#[case] par: usize) {
    let c = with_par(&cfg("", "max_par = 2", PX), par).unwrap();
    assert_eq!(c.worker.max_par, par);
}

#[rstest]
#[case::zero(0)]
#[case::above_max_par(1025)]
#[case::far_above(usize::MAX)]
fn par_is_bounded_as_max_par_is_and_named_as_the_option(#[case] par: usize) {
    let e = with_par(&cfg("", "", PX), par).unwrap_err();
    assert_eq!(e.problems.len(), 1, "{e}");
    assert_eq!(e.problems[0].file, None);
    assert_eq!(
        e.to_string(),
        format!("--par must be between 1 and 1024 (got {par})")
    );
}

#[test]
fn par_is_checked_with_the_files_problems_and_does_not_hide_them() {
    let e = with_par(&cfg("", "max_par = 0", PX), 0).unwrap_err();
    let keys: Vec<_> = e.problems.iter().map(|p| p.key.as_deref()).collect();
    assert_eq!(keys, [Some("worker.max_par"), None], "{e}");
    // A valid --par does not excuse an invalid max_par in the file: the file is still wrong.
    only_problem_with(&cfg("", "max_par = 0", PX), 3, "worker.max_par");
}

fn only_problem_with(text: &str, par: usize, key: &str) {
    let e = with_par(text, par).unwrap_err();
    assert_eq!(e.problems.len(), 1, "{e}");
    assert_eq!(e.problems[0].key.as_deref(), Some(key));
}

#[test]
fn reload_keeps_par_over_the_files_max_par() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("supervisor.toml");
    let overrides = Overrides { max_par: Some(5) };
    let running = Config::parse_with(&cfg("", "max_par = 2", PX), &path, &overrides).unwrap();
    let reloaded =
        Config::parse_with(&cfg("n_trials = 9", "max_par = 3", PX), &path, &overrides).unwrap();
    let applied = running.apply_live(&reloaded);
    assert_eq!(applied.worker.max_par, 5);
    assert_eq!(applied.study.n_trials, Some(9));
}

#[test]
fn several_objectives_with_names_and_nsga2_settings() {
    let dir = tempfile::tempdir().unwrap();
    let text = cfg(
        "directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\", \"acc\"]\n\
         sampler = \"nsga2\"",
        "",
        &format!(
            "{PX}[sampler]\npopulation_size = 20\ncrossover_prob = 1\nswapping_prob = 0.25\n\
             mutation_prob = 0.1\n[pruner]\ntype = \"none\"\n"
        ),
    );
    let c = parse_in(dir.path(), &text).unwrap();
    assert_eq!(
        c.study.directions,
        [Direction::Minimize, Direction::Maximize]
    );
    assert!(c.study.is_multi_objective());
    assert_eq!(
        c.study.metric_names,
        Some(vec!["loss".to_owned(), "acc".to_owned()])
    );
    assert_eq!(c.study.sampler, SamplerKind::Nsga2);
    assert_eq!(c.sampler.population_size, 20);
    assert_eq!(c.sampler.crossover_prob, 1.0);
    assert_eq!(c.sampler.swapping_prob, 0.25);
    assert_eq!(c.sampler.mutation_prob, Some(0.1));
    // One direction may be named too, as Optuna's set_metric_names allows.
    let one = parse_in(dir.path(), &cfg("metric_names = [\"loss\"]", "", PX)).unwrap();
    assert_eq!(one.study.directions, [Direction::Minimize]);
    assert_eq!(one.study.metric_names, Some(vec!["loss".to_owned()]));
}

#[test]
fn a_pythonpath_that_keeps_the_helper_is_accepted_relative_entries_from_cwd() {
    let helper = crate::config::helper_dir().expect("the source tree's python/");
    let text = |path: &str| {
        cfg(
            "",
            "",
            &format!("{PX}[worker.env]\nPYTHONPATH = \"{path}\"\n"),
        )
    };
    let c = parsed(&text(&format!("/nonexistent/lib:{}", helper.display())));
    assert!(c.worker.env["PYTHONPATH"].ends_with("/python"));
    // A relative entry is the workers' own: from `cwd`, the config's directory here.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("vendored")).unwrap();
    std::fs::write(dir.path().join("vendored/sweepd_worker.py"), "").unwrap();
    assert!(parse_in(dir.path(), &text("vendored")).is_ok());
    assert!(parse_in(dir.path(), &text("elsewhere")).is_err());
}
