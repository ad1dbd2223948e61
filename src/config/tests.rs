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

pub(super) fn problems(text: &str) -> Vec<Problem> {
    let dir = tempfile::tempdir().unwrap();
    match parse_in(dir.path(), text) {
        Ok(c) => panic!("expected problems, parsed {c:?}"),
        Err(e) => e.problems,
    }
}

/// The single problem `text` has; it must name `key`.
pub(super) fn only_problem(text: &str, key: &str) -> Problem {
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
fn checkpoints_go_under_log_dir_unless_checkpoint_dir_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse_in(dir.path(), &cfg("", "log_dir = \"logs\"", PX)).unwrap();
    assert_eq!(c.worker.checkpoint_dir, dir.path().join("logs/checkpoints"));
    assert!(!c.worker.keep_checkpoints);
    let text = cfg("", "checkpoint_dir = \"ck\"\nkeep_checkpoints = true", PX);
    let c = parse_in(dir.path(), &text).unwrap();
    assert_eq!(c.worker.checkpoint_dir, dir.path().join("ck"));
    assert!(c.worker.keep_checkpoints);
}

#[test]
fn a_checkpoint_dir_with_a_file_in_the_way_is_refused_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ck"), "").unwrap();
    let text = cfg("", "checkpoint_dir = \"ck/sub\"", PX);
    let e = parse_in(dir.path(), &text).unwrap_err().to_string();
    assert!(e.contains("worker.checkpoint_dir"), "{e}");
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

pub(super) fn parsed(text: &str) -> Config {
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

#[test]
fn budgets_beside_n_trials_are_read_and_give_the_limits() {
    let c = parsed(&cfg(
        "n_trials = 50\ngpu_hours = 12.5\npatience = 20\nmin_delta = 0.01",
        "",
        &format!("{PX}[gpu]\n"),
    ));
    let limits = c.study.limits();
    assert_eq!(limits.n_trials, Some(50));
    assert_eq!(limits.gpu_hours, Some(12.5));
    assert_eq!(
        limits.patience,
        Some(crate::study::budget::Patience {
            patience: 20,
            min_delta: 0.01
        })
    );
    // min_delta defaults to 0: any strict improvement counts.
    let c = parsed(&cfg(
        "patience = 3\ngpu_hours = 1",
        "",
        &format!("{PX}[gpu]\n"),
    ));
    assert_eq!(c.study.patience.map(|p| p.min_delta), Some(0.0));
    assert_eq!(c.study.gpu_hours, Some(1.0));
    assert_eq!(parsed(&cfg("", "", PX)).study.limits(), Default::default());
}

#[test]
fn notify_takes_every_event_but_the_summary_unless_told_and_a_30s_timeout() {
    let c = parsed(&with(
        "",
        "[notify]\ncommand = [\"notify-me\", \"--quiet\"]\n",
    ));
    assert_eq!(c.notify.command, ["notify-me", "--quiet"]);
    assert_eq!(
        c.notify.events,
        [
            NotifyEvent::Finished,
            NotifyEvent::Breaker,
            NotifyEvent::Fatal,
            NotifyEvent::DeviceLost
        ]
    );
    assert_eq!(c.notify.timeout, Duration::from_secs(30));
    assert!(c.notify.wants(NotifyEvent::Fatal));
    assert!(!c.notify.wants(NotifyEvent::Summary));
    let c = parsed(&with(
        "",
        "[notify]\ncommand = [\"n\"]\nevents = [\"summary\", \"finished\"]\n\
         summary_every = \"6h\"\ntimeout = \"1m\"\n",
    ));
    assert_eq!(
        c.notify.events,
        [NotifyEvent::Finished, NotifyEvent::Summary]
    );
    assert_eq!(c.notify.summary_every, Some(Duration::from_secs(6 * 3600)));
    assert_eq!(c.notify.timeout, Duration::from_secs(60));
    let c = parsed(&with(
        "",
        "[notify]\ncommand = [\"n\"]\nsummary_every = \"1m\"\n",
    ));
    assert_eq!(c.notify.events.last(), Some(&NotifyEvent::Summary));
    let none = parsed(&with("", ""));
    assert!(none.notify.command.is_empty());
    assert!(!none.notify.wants(NotifyEvent::Finished));
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
    // The GP sampler and its key.
    let gp = parse_in(
        dir.path(),
        &cfg(
            "sampler = \"gp\"",
            "",
            &format!("{PX}[sampler]\ndeterministic_objective = true\n"),
        ),
    )
    .unwrap();
    assert_eq!(gp.study.sampler, SamplerKind::Gp);
    assert!(gp.sampler.deterministic_objective);
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
