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
    assert_eq!(out.status.code(), Some(2), "expected exit 2; stderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(&format!("`{key}`")), "should name `{key}`:\n{err}");
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
fn absurd_duration_is_rejected_by_check_not_a_panic_in_run(
    #[case] table: &str,
    #[case] key: &str,
) {
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
#[case::storage_url_with_nul(edit(|_| quick().to_toml().replace("sqlite://study.db", "sqlite://st\\u0000udy.db")), "storage.url", "NUL")]
#[case::nvml_lib_with_nul(edit(|_| with_table("gpu", "nvml_lib = \"lib\\u0000.so\"")), "gpu.nvml_lib", "NUL")]
// Integers whose extremes would make the daemon allocate without bound.
#[case::n_ei_candidates(edit(|_| with_table("sampler", "n_ei_candidates = 9223372036854775807")), "sampler.n_ei_candidates", "between 1 and 100000")]
fn check_rejects_what_run_could_not_run(
    #[case] edit: Edit,
    #[case] key: &str,
    #[case] what: &str,
) {
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
