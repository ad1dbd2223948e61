//! What `sweepd check` accepts, `sweepd run` can run: every value a config file can hold is
//! either rejected up front (exit 2, naming the key) or runs without a panic. Through the real
//! binary, plus generated configs fed to the parser in-process by the thousand.

mod common;

use common::*;
use rstest::rstest;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// A small valid study: two quick trials, one at a time.
fn quick() -> Cfg {
    Cfg {
        n_trials: Some(2),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_SLEEP", "0.01")
}

/// `text` with `line` added under the `[table]` header (TOML keeps a table's keys under it),
/// replacing the lines that set the same keys (such as `Cfg`'s `shutdown_grace`).
fn under(text: &str, table: &str, line: &str) -> String {
    let header = format!("[{table}]\n");
    assert!(text.contains(&header), "no [{table}] in\n{text}");
    let keys: Vec<String> = line
        .lines()
        .filter_map(|l| Some(format!("{} =", l.split_once(" =")?.0)))
        .collect();
    let kept: String = text
        .lines()
        .filter(|l| !keys.iter().any(|k| l.starts_with(k.as_str())))
        .map(|l| format!("{l}\n"))
        .collect();
    kept.replacen(&header, &format!("{header}{line}\n"), 1)
}

/// Asserts that `out` is a config rejection (exit 2) naming `key` and saying `what`, with no
/// panic.
fn assert_rejected(out: &Output, key: &str, what: &str) {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected exit 2; stderr:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!("`{key}`")),
        "should name `{key}`:\n{err}"
    );
    assert!(err.contains(what), "should say {what:?}:\n{err}");
}

/// `check` and `run` both refuse `sweep` naming `key`, and `run` creates no database: nothing
/// is claimed that could be left RUNNING or retried forever.
fn assert_refused_before_the_study_starts(sweep: &Sweep, key: &str, what: &str) {
    let check = sweep.sweepd(&["check"]).output().expect("sweepd check");
    assert_rejected(&check, key, what);
    let run = sweep.run(&[], LIMIT);
    assert_rejected(&run, key, what);
    assert!(!sweep.db.exists(), "run created the database");
}

// ---- the failures of the issue, one regression test each

#[rstest]
#[case::heartbeat_timeout("worker", "heartbeat_timeout")]
#[case::shutdown_grace("worker", "shutdown_grace")]
#[case::breaker_backoff("retry", "breaker_backoff")]
#[case::breaker_max_backoff("retry", "breaker_max_backoff")]
fn absurd_duration_is_rejected_by_check_not_a_panic_in_run(#[case] table: &str, #[case] key: &str) {
    let mut text = quick().to_toml();
    if table == "retry" {
        text.push_str("\n[retry]\n");
    }
    let text = under(&text, table, &format!("{key} = \"300000000000y\""));
    let sweep = Sweep::with_toml(&text);
    assert_refused_before_the_study_starts(&sweep, &format!("{table}.{key}"), "too long");
}

#[test]
fn nul_in_a_categorical_choice_is_rejected_by_check_not_retried_forever_by_oneshot_run() {
    let cfg = Cfg {
        mode: "oneshot",
        params: "[params.opt]\ntype = \"categorical\"\nchoices = [\"a\\u0000b\"]\n".into(),
        ..quick()
    };
    let sweep = Sweep::new(&cfg);
    assert_refused_before_the_study_starts(&sweep, "params.opt.choices", "NUL");
}

#[test]
fn nul_in_the_study_name_is_rejected_by_check_not_blamed_on_the_worker_command() {
    let cfg = Cfg {
        name: "a\0b".into(),
        ..quick()
    };
    let sweep = Sweep::new(&cfg);
    assert_refused_before_the_study_starts(&sweep, "study.name", "NUL");
    let run = sweep.run(&[], LIMIT);
    assert!(!stderr(&run).contains("worker command"), "{}", stderr(&run));
}

#[rstest]
fn log_dir_naming_an_existing_file_is_rejected_by_check(
    #[values("persistent", "oneshot")] mode: &'static str,
) {
    let sweep = Sweep::new(&Cfg { mode, ..quick() });
    std::fs::write(sweep.path("logs"), "not a directory").unwrap();
    assert_refused_before_the_study_starts(&sweep, "worker.log_dir", "not a directory");
}

#[test]
fn ten_megabyte_study_name_is_rejected_by_check() {
    let cfg = Cfg {
        name: "s".repeat(10 << 20),
        ..quick()
    };
    let sweep = Sweep::new(&cfg);
    assert_refused_before_the_study_starts(&sweep, "study.name", "at most 512 characters");
}

// ---- every bound and every string that must travel, through `sweepd check`

/// A config edit: the config text for a study in `dir` (where the case may create files).
type Edit = fn(&Path) -> String;

/// Gives a case's closure its type (rstest binds case arguments untyped).
fn edit(f: Edit) -> Edit {
    f
}

fn with_worker(line: &str) -> String {
    under(&quick().to_toml(), "worker", line)
}

fn with_table(table: &str, line: &str) -> String {
    format!("{}\n[{table}]\n{line}\n", quick().to_toml())
}

fn with_params(params: &str) -> String {
    Cfg {
        params: params.into(),
        ..quick()
    }
    .to_toml()
}

#[rstest]
// Durations: each has a maximum, named in the message.
#[case::study_timeout(edit(|_| under(&quick().to_toml(), "study", "timeout = \"11y\"")), "study.timeout", "at most 10years")]
#[case::trial_timeout(edit(|_| with_worker("trial_timeout = \"2y\"")), "worker.trial_timeout", "at most 1year")]
#[case::heartbeat_timeout(edit(|_| with_worker("heartbeat_timeout = \"8days\"")), "worker.heartbeat_timeout", "at most 7days")]
#[case::startup_timeout(edit(|_| with_worker("startup_timeout = \"25h\"")), "worker.startup_timeout", "at most 1day")]
#[case::shutdown_grace(edit(|_| with_worker("shutdown_grace = \"25h\"")), "worker.shutdown_grace", "at most 1day")]
#[case::poll_interval(edit(|_| with_table("gpu", "poll_interval = \"31s\"")), "gpu.poll_interval", "at most 30s")]
#[case::breaker_backoff(edit(|_| with_table("retry", "breaker_backoff = \"2d\"")), "retry.breaker_backoff", "at most 1day")]
#[case::breaker_max_backoff(edit(|_| with_table("retry", "breaker_max_backoff = \"2d\"")), "retry.breaker_max_backoff", "at most 1day")]
#[case::oom_recovery(edit(|_| with_table("retry", "oom_recovery = \"2d\"")), "retry.oom_recovery", "at most 1day")]
// Sizes: at most 1 PiB each.
#[case::headroom(edit(|_| with_table("gpu", "headroom = \"1025TiB\"")), "gpu.headroom", "at most 1024 TiB")]
#[case::trial_memory(edit(|_| with_table("gpu", "trial_memory = 9223372036854775807")), "gpu.trial_memory", "at most 1024 TiB")]
#[case::recycle_on_growth(edit(|_| with_worker("recycle_on_growth = \"16777215TiB\"")), "worker.recycle_on_growth", "too large")]
#[case::log_max_bytes(edit(|_| with_worker("log_max_bytes = \"2000TB\"")), "worker.log_max_bytes", "too large")]
#[case::log_max_total(edit(|_| with_worker("log_max_total = 1125899906842625")), "worker.log_max_total", "too large")]
// Names: no NUL, at most Optuna's 512 characters.
#[case::study_name_of_513_chars(edit(|_| Cfg { name: "n".repeat(513), ..quick() }.to_toml()), "study.name", "at most 512 characters")]
#[case::param_name_with_nul(edit(|_| with_params("[params.\"a\\u0000b\"]\ntype = \"int\"\nlow = 0\nhigh = 1\n")), "params.\"a\\0b\"", "NUL")]
#[case::param_name_of_513_chars(edit(|_| with_params(&format!("[params.{}]\ntype = \"int\"\nlow = 0\nhigh = 1\n", "p".repeat(513)))), "params.pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp…", "at most 512 characters")]
// Choices: no NUL, at most 4 KiB each, and one trial's params at most 64 KiB as JSON.
#[case::choice_with_nul(edit(|_| with_params("[params.c]\ntype = \"categorical\"\nchoices = [\"ok\", \"\\u0000\"]\n")), "params.c.choices", "NUL")]
#[case::choice_of_5_kib(edit(|_| with_params(&format!("[params.c]\ntype = \"categorical\"\nchoices = [\"{}\"]\n", "c".repeat(5 << 10)))), "params.c.choices", "at most 4 KiB")]
#[case::choices_of_1_mib(edit(|_| with_params(&format!("[params.c]\ntype = \"categorical\"\nchoices = [{}]\n", (0..300).map(|i| format!("\"{i:04}{}\"", "c".repeat(4000))).collect::<Vec<_>>().join(", ")))), "params.c.choices", "at most 1 MiB")]
#[case::params_of_80_kib(edit(|_| with_params(&(0..20).map(|i| format!("[params.c{i}]\ntype = \"categorical\"\nchoices = [\"{}\"]\n", "c".repeat(4000))).collect::<String>())), "params", "more than the 64 KiB")]
// What reaches exec: argv and environment.
#[case::command_argument_with_nul(edit(|_| Cfg { command: vec!["py\0thon".into()], ..quick() }.to_toml()), "worker.command", "NUL")]
#[case::command_argument_of_65_kib(edit(|_| Cfg { command: vec!["python3".into(), "a".repeat(65 << 10)], ..quick() }.to_toml()), "worker.command", "at most 64 KiB")]
#[case::env_name_with_nul(edit(|_| quick().env("\"A\\u0000B\"", "x").to_toml()), "worker.env.\"A\\0B\"", "NUL")]
#[case::env_name_with_equals(edit(|_| quick().env("\"A=B\"", "x").to_toml()), "worker.env.\"A=B\"", "'='")]
#[case::env_value_with_nul(edit(|_| quick().env("A", "x\0y").to_toml()), "worker.env.A", "NUL")]
#[case::env_value_of_65_kib(edit(|_| quick().env("A", &"v".repeat(65 << 10)).to_toml()), "worker.env.A", "at most 64 KiB")]
#[case::allocator_setting_of_65_kib(edit(|_| with_table("worker.allocator", &format!("pytorch = \"backend:{}\"", "n".repeat(65 << 10)))), "worker.allocator.pytorch", "at most 64 KiB")]
// Paths: no NUL; directories sweepd creates must be creatable.
#[case::log_dir_with_nul(edit(|_| quick().to_toml().replace("log_dir = \"logs\"", "log_dir = \"lo\\u0000gs\"")), "worker.log_dir", "NUL")]
#[case::log_dir_under_a_file(edit(|d| { std::fs::write(d.join("f"), "").unwrap(); quick().to_toml().replace("log_dir = \"logs\"", "log_dir = \"f/logs\"") }), "worker.log_dir", "is not a directory")]
#[case::log_dir_a_broken_symlink(edit(|d| { std::os::unix::fs::symlink(d.join("gone"), d.join("logs")).unwrap(); quick().to_toml() }), "worker.log_dir", "broken symbolic link")]
#[case::oneshot_results_a_file(edit(|d| { std::fs::create_dir(d.join("logs")).unwrap(); std::fs::write(d.join("logs/results"), "").unwrap(); Cfg { mode: "oneshot", ..quick() }.to_toml() }), "worker.log_dir", "is not a directory")]
#[case::cwd_with_nul(edit(|_| with_worker("cwd = \"a\\u0000b\"")), "worker.cwd", "NUL")]
#[case::storage_url_with_nul(edit(|_| quick().to_toml().replace("sqlite:///study.db", "sqlite:///st\\u0000udy.db")), "storage.url", "NUL")]
#[case::nvml_lib_with_nul(edit(|_| with_table("gpu", "nvml_lib = \"lib\\u0000.so\"")), "gpu.nvml_lib", "NUL")]
// Integers whose extremes would make the daemon allocate without bound.
#[case::n_ei_candidates(edit(|_| with_table("sampler", "n_ei_candidates = 9223372036854775807")), "sampler.n_ei_candidates", "between 1 and 100000")]
fn check_rejects_what_run_could_not_run(#[case] edit: Edit, #[case] key: &str, #[case] what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(&config, edit(dir.path())).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sweepd"))
        .args(["check", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert_rejected(&out, key, what);
}

#[test]
fn values_at_their_maximum_pass_check() {
    let text = under(
        &under(
            &format!(
                "{}\n[gpu]\npoll_interval = \"30s\"\nheadroom = \"1024TiB\"\n\
                 trial_memory = 1125899906842624\n\
                 [retry]\nbreaker_backoff = \"1d\"\nbreaker_max_backoff = \"24h\"\n\
                 oom_recovery = \"1day\"\n[sampler]\nn_ei_candidates = 100000\n",
                Cfg {
                    name: "n".repeat(512),
                    ..quick()
                }
                .to_toml()
            ),
            "worker",
            "trial_timeout = \"1y\"\nheartbeat_timeout = \"7d\"\nstartup_timeout = \"1d\"\n\
             recycle_on_growth = \"1024TiB\"\nlog_max_bytes = \"1024TiB\"\n\
             log_max_total = \"1024TiB\"",
        ),
        "study",
        "timeout = \"10y\"",
    );
    let text = under(&text, "worker", "shutdown_grace = \"1d\"");
    let sweep = Sweep::with_toml(&text);
    let out = sweep.sweepd(&["check"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[rstest]
#[case::zero("0")]
#[case::above_max_par("1025")]
fn par_outside_max_par_bounds_is_a_usage_error(#[case] par: &str) {
    let sweep = Sweep::new(&quick());
    let out = sweep.run(&["--par", par], LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--par must be between 1 and 1024"), "{err}");
    assert!(!sweep.db.exists());
}

// ---- generated configs: never a panic

/// A config as (table, key, value) entries, rendered table by table in order of first
/// appearance, so that mutations can set, drop or duplicate any of them.
#[derive(Clone)]
struct Doc(Vec<(String, String, String)>);

impl Doc {
    /// A valid quick study: the faulty worker, two float/int/categorical params.
    fn base(n_trials: u64) -> Doc {
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let worker = repo().join("tests/workers/faulty_worker.py");
        let rows: Vec<(&str, &str, String)> = vec![
            ("study", "name", q("g")),
            ("study", "direction", q("minimize")),
            ("study", "n_trials", n_trials.to_string()),
            ("study", "sampler", q("random")),
            ("study", "seed", "7".into()),
            ("storage", "url", q("sqlite:///study.db")),
            (
                "worker",
                "command",
                format!("[{}, {}]", q(&python()), q(&worker.to_string_lossy())),
            ),
            ("worker", "mode", q("persistent")),
            ("worker", "max_par", "1".into()),
            ("worker", "shutdown_grace", q("5s")),
            ("worker", "log_dir", q("logs")),
            ("worker.env", "SWEEPD_TEST_SLEEP", q("0.01")),
            ("params.x", "type", q("float")),
            ("params.x", "low", "-2.0".into()),
            ("params.x", "high", "2.0".into()),
            ("params.n", "type", q("int")),
            ("params.n", "low", "0".into()),
            ("params.n", "high", "10".into()),
            ("params.n", "step", "2".into()),
            ("params.c", "type", q("categorical")),
            ("params.c", "choices", "[\"a\", \"b\", 3]".into()),
        ];
        Doc(rows
            .into_iter()
            .map(|(t, k, v)| (t.to_owned(), k.to_owned(), v))
            .collect())
    }

    /// Sets `table.key` (replacing every entry of it, or adding one).
    fn set(&mut self, table: &str, key: &str, value: &str) -> &mut Doc {
        self.0.retain(|(t, k, _)| !(t == table && k == key));
        self.0.push((table.into(), key.into(), value.into()));
        self
    }

    fn render(&self) -> String {
        let mut tables: Vec<&str> = Vec::new();
        for (t, _, _) in &self.0 {
            if !tables.contains(&t.as_str()) {
                tables.push(t);
            }
        }
        let mut out = String::new();
        for t in tables {
            out.push_str(&format!("[{t}]\n"));
            for (_, k, v) in self.0.iter().filter(|(tt, _, _)| tt == t) {
                out.push_str(&format!("{k} = {v}\n"));
            }
            out.push('\n');
        }
        out
    }
}

/// Every key a config may hold, by table, with what it takes.
const KEYS: &[(&str, &[(&str, Kind)])] = &[
    (
        "study",
        &[
            ("name", Kind::Str),
            ("direction", Kind::Word),
            ("n_trials", Kind::Int),
            ("timeout", Kind::Duration),
            ("sampler", Kind::Word),
            ("seed", Kind::Int),
        ],
    ),
    ("storage", &[("url", Kind::Path)]),
    (
        "worker",
        &[
            ("command", Kind::Argv),
            ("mode", Kind::Word),
            ("recycle_after", Kind::Int),
            ("max_par", Kind::Int),
            ("trial_timeout", Kind::Duration),
            ("startup_timeout", Kind::Duration),
            ("shutdown_grace", Kind::Duration),
            ("heartbeat_timeout", Kind::Duration),
            ("log_dir", Kind::Path),
            ("cwd", Kind::Path),
            ("recycle_on_growth", Kind::Size),
            ("log_max_bytes", Kind::Size),
            ("log_max_total", Kind::Size),
        ],
    ),
    (
        "worker.env",
        &[
            ("A", Kind::Str),
            ("\"B=C\"", Kind::Str),
            ("\"\\u0000\"", Kind::Str),
        ],
    ),
    (
        "worker.allocator",
        &[
            ("preset", Kind::Word),
            ("pytorch", Kind::Str),
            ("jax_preallocate", Kind::Bool),
            ("tf_allow_growth", Kind::Bool),
        ],
    ),
    (
        "params.x",
        &[
            ("type", Kind::Word),
            ("low", Kind::Number),
            ("high", Kind::Number),
            ("step", Kind::Number),
            ("log", Kind::Bool),
            ("choices", Kind::Choices),
        ],
    ),
    (
        "params.n",
        &[
            ("type", Kind::Word),
            ("low", Kind::Int),
            ("high", Kind::Int),
            ("step", Kind::Int),
            ("log", Kind::Bool),
        ],
    ),
    (
        "params.c",
        &[("type", Kind::Word), ("choices", Kind::Choices)],
    ),
    (
        "gpu",
        &[
            ("devices", Kind::Devices),
            ("headroom", Kind::Size),
            ("trial_memory", Kind::Size),
            ("max_par_per_device", Kind::Int),
            ("gpus_per_trial", Kind::Int),
            ("poll_interval", Kind::Duration),
            ("nvml_lib", Kind::Path),
        ],
    ),
    (
        "retry",
        &[
            ("oom", Kind::Int),
            ("cuda_fatal", Kind::Int),
            ("crash", Kind::Int),
            ("breaker_threshold", Kind::Int),
            ("breaker_backoff", Kind::Duration),
            ("breaker_max_backoff", Kind::Duration),
            ("oom_admission_factor", Kind::Number),
            ("oom_recovery", Kind::Duration),
        ],
    ),
    (
        "sampler",
        &[
            ("n_startup_trials", Kind::Int),
            ("n_ei_candidates", Kind::Int),
            ("multivariate", Kind::Bool),
            ("constant_liar", Kind::Bool),
            ("seed", Kind::Int),
        ],
    ),
    (
        "pruner",
        &[
            ("type", Kind::Word),
            ("n_startup_trials", Kind::Int),
            ("n_warmup_steps", Kind::Int),
            ("interval_steps", Kind::Int),
            ("min_resource", Kind::Int),
            ("reduction_factor", Kind::Int),
            ("min_early_stopping_rate", Kind::Int),
        ],
    ),
    (
        "metrics",
        &[("listen", Kind::Str), ("allow_remote", Kind::Bool)],
    ),
];

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Word,
    Path,
    Argv,
    Int,
    Number,
    Bool,
    Duration,
    Size,
    Choices,
    Devices,
}

fn pool(kind: Kind) -> Vec<String> {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let strs = || {
        vec![
            q(""),
            q(" "),
            q("a\0b"),
            q("x"),
            q("ünïcödé ✓"),
            q(&"L".repeat(600)),
            q(&"M".repeat(70_000)),
            q("a=b"),
            q("\u{7f}\u{1}"),
            q("127.0.0.1:0"),
            q("127.0.0.1:9464"),
        ]
    };
    let ints = || {
        [
            i64::MAX,
            i64::MIN,
            -1,
            0,
            1,
            2,
            3,
            1024,
            1025,
            100_000,
            100_001,
            u32::MAX as i64,
            u32::MAX as i64 + 1,
        ]
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
    };
    match kind {
        Kind::Str => strs(),
        Kind::Word => [
            "minimize",
            "maximize",
            "random",
            "grid",
            "tpe",
            "persistent",
            "oneshot",
            "default",
            "none",
            "median",
            "asha",
            "hyperband",
            "float",
            "int",
            "categorical",
            "MINIMIZE",
            "",
        ]
        .iter()
        .map(|s| q(s))
        .collect(),
        Kind::Path => {
            let mut v = strs();
            v.extend(
                [
                    "logs",
                    ".",
                    "..",
                    "/",
                    "/dev/null",
                    "supervisor.toml",
                    "sqlite://",
                    "sqlite://study.db",
                    "sqlite:///study.db",
                    "sqlite://no/such/dir/x.db",
                    "sqlite:////dev/null",
                    "sqlite:///:memory:",
                ]
                .iter()
                .map(|s| q(s)),
            );
            v
        }
        Kind::Argv => vec![
            "[]".into(),
            format!("[{}]", q("")),
            format!("[{}]", q("a\0b")),
            format!("[{}, {}]", q(&python()), q(&"A".repeat(70_000))),
            format!("[{}, 3]", q("x")),
        ],
        Kind::Int => ints(),
        Kind::Number => {
            let mut v = ints();
            v.extend(
                [
                    "0.5",
                    "-0.0",
                    "1e308",
                    "-1.7976931348623157e308",
                    "1.7976931348623157e308",
                    "5e-324",
                    "nan",
                    "inf",
                    "-inf",
                    "0.1",
                    "1e-9",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            v
        }
        Kind::Bool => vec!["true".into(), "false".into()],
        Kind::Duration => [
            "300000000000y",
            "18446744073709551615s",
            "99999999999999999999999s",
            "1ns",
            "0s",
            "-1s",
            "",
            "soon",
            "１秒",
            "1y",
            "10y",
            "10years 1s",
            "7d",
            "1d",
            "24h 1ns",
            "30s",
            "31s",
            "49ms",
            "50ms",
            "2m",
        ]
        .iter()
        .map(|s| q(s))
        .chain(["60".to_owned(), "1.5".to_owned()])
        .collect(),
        Kind::Size => {
            let mut v = ints();
            v.extend(
                [
                    "1024TiB",
                    "1025TiB",
                    "1125899906842624B",
                    "1125899906842625B",
                    "16777215TiB",
                    "16777216TiB",
                    "99999999999999999999999999TB",
                    "0.5B",
                    "1.5 GiB",
                    "4KiB",
                    "-1GiB",
                    "1 GiX",
                    "1e9B",
                ]
                .iter()
                .map(|s| q(s)),
            );
            v
        }
        Kind::Choices => vec![
            "[]".into(),
            "[1, 1.0]".into(),
            format!("[{}]", q("a\0")),
            format!("[{}]", q(&"c".repeat(4096))),
            format!("[{}]", q(&"c".repeat(4097))),
            "[nan]".into(),
            "[[1], {a = 1}]".into(),
            "[1979-05-27]".into(),
            "[true, false, -9223372036854775808, 9223372036854775807, 1e308]".into(),
        ],
        Kind::Devices => vec![
            q("all"),
            q("none"),
            q("some"),
            "[]".into(),
            "[0, 0]".into(),
            "[-1]".into(),
            "[4294967295]".into(),
            "[4294967296]".into(),
            "0".into(),
        ],
    }
}

/// Any value at all: wrong types included.
fn any_value(rng: &mut impl rand::Rng) -> String {
    let kinds = [
        Kind::Str,
        Kind::Int,
        Kind::Number,
        Kind::Bool,
        Kind::Duration,
        Kind::Size,
        Kind::Choices,
        Kind::Devices,
    ];
    let mut v = pool(kinds[rng.gen_range(0..kinds.len())]);
    v.extend([
        "{}".into(),
        "{ a = 1 }".into(),
        "1979-05-27T07:32:00Z".into(),
        "[[]]".into(),
    ]);
    v.swap_remove(rng.gen_range(0..v.len()))
}

/// One mutation of `doc`: a key set to a value of its kind or of any kind, a key or table
/// dropped, a key duplicated, an unknown key added.
fn mutate(doc: &mut Doc, rng: &mut impl rand::Rng) {
    use rand::seq::SliceRandom;
    let (table, keys) = *KEYS.choose(rng).unwrap();
    let (key, kind) = *keys.choose(rng).unwrap();
    match rng.gen_range(0..10) {
        0..=5 => {
            let value = pool(kind).choose(rng).unwrap().clone();
            doc.set(table, key, &value);
        }
        6 => {
            let value = any_value(rng);
            doc.set(table, key, &value);
        }
        7 if !doc.0.is_empty() => {
            let i = rng.gen_range(0..doc.0.len());
            if rng.gen_bool(0.5) {
                doc.0.remove(i);
            } else {
                let t = doc.0[i].0.clone();
                doc.0.retain(|(tt, _, _)| *tt != t);
            }
        }
        8 if !doc.0.is_empty() => {
            let i = rng.gen_range(0..doc.0.len());
            let dup = doc.0[i].clone();
            doc.0.push(dup);
        }
        _ => doc.0.push((table.into(), "unknown_key".into(), "1".into())),
    }
}

/// What the daemon does with an accepted config before and while it runs trials, in-process:
/// build the sampler, propose and learn, estimate memory, prune.
fn exercise(c: &sweepd::config::Config) {
    use sweepd::sampler;
    use sweepd::study::{TrialRecord, TrialState};
    let seed = c.sampler.seed.or(c.study.seed);
    let Ok(mut s) = sampler::build(
        c.study.sampler,
        &c.space,
        seed,
        &c.study.directions,
        &c.sampler,
    ) else {
        return;
    };
    let mut model = sweepd::gpu::MemoryModel::new(&c.space, c.gpu.trial_memory);
    let mut pruner =
        sweepd::pruner::Pruner::new(c.pruner.clone(), c.study.directions[0], &c.study.name);
    for number in 0..4 {
        let Some(params) = s.sample(&c.space, &Default::default(), number) else {
            break;
        };
        let _ = c.space.external_json(&params).to_string();
        let _ = model.expected(&params);
        model.record(&params, u64::MAX / 3);
        for step in [0, 1, i64::MAX] {
            pruner.report(number as i64, step, number as f64);
        }
        pruner.finish(number as i64, true);
        s.tell(&TrialRecord {
            number: number as i64,
            params,
            state: TrialState::Complete,
            values: vec![number as f64; c.study.directions.len()],
            constraints: Vec::new(),
            distributions: Default::default(),
        });
    }
    for p in &c.space.params {
        let _ = p.dist.optuna_json();
    }
}

#[test]
fn generated_configs_never_panic_the_parser() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("supervisor.toml");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20_261_123);
    let (mut accepted, mut rejected) = (0, 0);
    for case in 0..3000 {
        let mut doc = Doc::base(2);
        for _ in 0..rng.gen_range(1..=3) {
            mutate(&mut doc, &mut rng);
        }
        let mut text = doc.render();
        // Now and then, not even TOML: cut anywhere, or a stray byte.
        if rng.gen_ratio(1, 20) {
            let mut cut = rng.gen_range(0..=text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        } else if rng.gen_ratio(1, 20) {
            let mut at = rng.gen_range(0..=text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert(at, ['"', '[', '=', '\n', '\0', '\''][rng.gen_range(0..6)]);
        }
        let result =
            std::panic::catch_unwind(|| match sweepd::config::Config::parse(&text, &path) {
                Ok(c) => {
                    exercise(&c);
                    true
                }
                Err(e) => {
                    assert!(!e.problems.is_empty(), "an error with no problem");
                    false
                }
            });
        match result {
            Ok(true) => accepted += 1,
            Ok(false) => rejected += 1,
            Err(_) => panic!("case {case}: a panic on this config:\n{text}"),
        }
    }
    // The generator must keep reaching both sides, or it tests nothing.
    assert!(
        accepted > 300 && rejected > 300,
        "{accepted} accepted, {rejected} rejected"
    );
}

/// Settings each valid on its own at an extreme (most at the maximum validation allows).
fn extremes() -> Vec<(&'static str, &'static str, String)> {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    vec![
        ("study", "timeout", q("10years")),
        ("study", "seed", i64::MAX.to_string()),
        ("study", "name", q(&"n".repeat(512))),
        ("study", "direction", q("maximize")),
        ("worker", "trial_timeout", q("1y")),
        ("worker", "heartbeat_timeout", q("7days")),
        ("worker", "startup_timeout", q("1day")),
        ("worker", "shutdown_grace", q("24h")),
        ("worker", "recycle_after", u32::MAX.to_string()),
        ("worker", "recycle_on_growth", q("1024TiB")),
        ("worker", "log_max_bytes", q("1024TiB")),
        ("worker", "log_max_total", (1u64 << 50).to_string()),
        ("worker", "max_par", "2".into()),
        ("worker", "mode", q("oneshot")),
        ("retry", "oom", u32::MAX.to_string()),
        ("retry", "crash", u32::MAX.to_string()),
        ("retry", "cuda_fatal", u32::MAX.to_string()),
        ("retry", "breaker_threshold", u32::MAX.to_string()),
        ("retry", "breaker_backoff", q("1d")),
        ("retry", "breaker_max_backoff", q("1d")),
        ("retry", "oom_recovery", q("1d")),
        ("retry", "oom_admission_factor", "5e-324".into()),
        ("sampler", "seed", i64::MAX.to_string()),
        ("sampler", "n_ei_candidates", "100000".into()),
        ("sampler", "n_startup_trials", i64::MAX.to_string()),
        ("pruner", "type", q("median")),
        ("params.n", "low", i64::MIN.to_string()),
        ("params.n", "high", i64::MAX.to_string()),
        ("params.x", "low", "-1.7976931348623157e308".into()),
        ("params.x", "high", "1.7976931348623157e308".into()),
        (
            "params.c",
            "choices",
            format!(
                "[{}, 1e308, -9223372036854775808, true]",
                q(&"c".repeat(4096))
            ),
        ),
    ]
}

/// One generated run of the real daemon.
struct Gen {
    name: String,
    doc: Doc,
    /// On the fake NVML, with a `[gpu]` table.
    gpus: bool,
    /// SIGTERM once a trial runs (what makes `shutdown_grace` count).
    sigterm: bool,
}

fn gen(name: &str, doc: Doc) -> Gen {
    Gen {
        name: name.into(),
        doc,
        gpus: false,
        sigterm: false,
    }
}

/// Runs `g` to its end; returns its exit code and stderr, after checking that the parser's
/// verdict and the daemon's agree: accepted runs to exit 0, rejected exits 2.
fn run_generated(g: &Gen) -> Result<(), String> {
    let text = g.doc.render();
    let mut sweep = Sweep::with_toml(&text);
    let _fake = g.gpus.then(|| {
        let fake = FakeGpus::new(sweep.dir.path(), &["24G Fake A10"]);
        sweep.env = fake.env();
        fake
    });
    let accepted = sweepd::config::Config::parse(&text, &sweep.config).is_ok();
    let (code, err) = if g.sigterm && accepted {
        let child = sweep.spawn_run();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        wait_until(LIMIT, "a running trial", || {
            sweep.db.exists()
                && sweep.sql("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'") != ["0"]
        });
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let out = wait_output(child, LIMIT);
        (out.status.code(), sweep.daemon_stderr())
    } else {
        let out = sweep.run(&[], LIMIT);
        (out.status.code(), stderr(&out))
    };
    let expected = if accepted { 0 } else { 2 };
    if code != Some(expected) || err.contains("panicked") {
        return Err(format!(
            "{}: exit {code:?}, expected {expected}; config:\n{text}\nstderr:\n{err}",
            g.name
        ));
    }
    Ok(())
}

#[test]
fn generated_configs_exit_0_or_2_never_panic() {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let mut gens = Vec::new();
    // Every duration at its maximum (it runs: exit 0) and absurd (rejected: exit 2), in a run
    // where the daemon combines it with the clock.
    for at_max in [true, false] {
        let v = |max: &str| q(if at_max { max } else { "300000000000y" });
        let tag = |what: &str| {
            let how = if at_max { "at the maximum" } else { "absurd" };
            format!("{what} {how}")
        };
        for (table, key, max) in [
            ("study", "timeout", "10y"),
            ("worker", "trial_timeout", "1y"),
            ("worker", "heartbeat_timeout", "7d"),
            ("worker", "startup_timeout", "1d"),
        ] {
            let mut doc = Doc::base(2);
            doc.set(table, key, &v(max));
            gens.push(gen(&tag(&format!("{table}.{key}")), doc));
        }
        let mut oneshot = Doc::base(2);
        oneshot
            .set("worker", "mode", &q("oneshot"))
            .set("worker", "heartbeat_timeout", &v("7d"))
            .set("worker", "trial_timeout", &v("1y"));
        gens.push(gen(&tag("oneshot timers"), oneshot));
        let mut grace = Doc::base(2);
        grace.set("worker", "shutdown_grace", &v("1d")).set(
            "worker.env",
            "SWEEPD_TEST_SLEEP",
            &q("2"),
        );
        gens.push(Gen {
            sigterm: true,
            ..gen(&tag("shutdown_grace, stopped mid-trial,"), grace)
        });
        let mut breaker = Doc::base(1);
        breaker
            .set("retry", "breaker_threshold", "1")
            .set("retry", "breaker_backoff", &v("1d"))
            .set("retry", "breaker_max_backoff", &v("1d"))
            .set("worker.env", "SWEEPD_TEST_RAISE_ON", &q("0"));
        gens.push(gen(&tag("circuit breaker tripped, backoffs"), breaker));
        let mut gpu = Doc::base(2);
        gpu.set("gpu", "poll_interval", &v("30s"))
            .set("retry", "oom_recovery", &v("1d"))
            .set("gpu", "headroom", &q("1024TiB"))
            .set("gpu", "trial_memory", &(1u64 << 50).to_string())
            .set("worker", "recycle_on_growth", &q("1024TiB"));
        gens.push(Gen {
            gpus: true,
            ..gen(&tag("GPU poll and recovery, sizes at the maximum,"), gpu)
        });
    }
    let mut tpe = Doc::base(2);
    tpe.set("study", "sampler", &q("tpe"))
        .set("sampler", "n_startup_trials", "0")
        .set("sampler", "n_ei_candidates", "100000")
        .set("sampler", "seed", &i64::MAX.to_string());
    gens.push(gen("TPE at its largest", tpe));
    let mut median = Doc::base(2);
    median
        .set("pruner", "type", &q("median"))
        .set("pruner", "n_startup_trials", "0")
        .set("pruner", "n_warmup_steps", &i64::MAX.to_string())
        .set("pruner", "interval_steps", &i64::MAX.to_string());
    gens.push(gen("median pruner at its extremes", median));
    let mut asha = Doc::base(2);
    asha.set("pruner", "type", &q("asha"))
        .set("pruner", "min_resource", &i64::MAX.to_string())
        .set("pruner", "reduction_factor", &u32::MAX.to_string())
        .set("pruner", "min_early_stopping_rate", &u32::MAX.to_string());
    gens.push(gen("ASHA at its extremes", asha));
    let mut hyperband = Doc::base(2);
    hyperband
        .set("pruner", "type", &q("hyperband"))
        .set("pruner", "min_resource", "1")
        .set("pruner", "max_resource", "2147483648")
        .set("pruner", "reduction_factor", "2")
        .set("pruner", "bootstrap_count", &i64::MAX.to_string());
    gens.push(gen("Hyperband with the most brackets", hyperband));
    let mut hyperband = Doc::base(2);
    hyperband
        .set("pruner", "type", &q("hyperband"))
        .set("pruner", "min_resource", &i64::MAX.to_string())
        .set("pruner", "reduction_factor", &u32::MAX.to_string());
    gens.push(gen("Hyperband with auto at its extremes", hyperband));
    let mut grid = Doc::base(2);
    grid.set("study", "sampler", &q("grid"))
        .set("params.x", "step", "1.0")
        .set("params.n", "low", &i64::MIN.to_string())
        .set("params.n", "high", &i64::MAX.to_string())
        .set("params.n", "step", &(1i64 << 62).to_string());
    gens.push(gen("grid over the whole i64 range", grid));
    // And random mixes of extremes, in both modes: the verdict decides the expected exit.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let all = extremes();
    for i in 0..14 {
        let mut doc = Doc::base(rng.gen_range(1..=2));
        let n = rng.gen_range(2..=6);
        for (table, key, value) in all.choose_multiple(&mut rng, n) {
            doc.set(table, key, value);
        }
        gens.push(gen(&format!("mix {i}"), doc));
    }
    // Rejected configs exit 2 as well (a few: they never start a worker).
    for i in 0..6 {
        let mut doc = Doc::base(1);
        let (table, key, value) = all.choose(&mut rng).unwrap();
        doc.set(table, key, value);
        mutate(&mut doc, &mut rng);
        gens.push(gen(&format!("mutant {i}"), doc));
    }
    // Four at a time: each is mostly waiting on a Python worker.
    let failures: Vec<String> = gens
        .chunks(4)
        .flat_map(|chunk| {
            std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|g| s.spawn(move || run_generated(g)))
                    .collect();
                handles
                    .into_iter()
                    .filter_map(|h| h.join().expect("a runner thread").err())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
