//! Live reload (SIGHUP): one table of every config key and whether a running daemon takes its
//! new value. The table drives everything that needs the answer, so that it is written once:
//! which changed keys a reload reports as needing a restart ([`Config::reload_diff`]), the
//! config the daemon runs on after a reload ([`Config::apply_live`]), and a test that
//! docs/configuration.md lists exactly the live keys in its table and the others in its "needs
//! a restart" paragraph.
//!
//! What a live key's new value then does is the supervisor's: it keeps one copy of the config
//! in force (`supervisor::settings`), which the reload swaps and every decision reads.

use super::raw::dotted;
use super::{
    Config, GpuConfig, MetricsConfig, PrunerConfig, RetryConfig, SamplerConfig, StorageConfig,
    StudyConfig, WorkerConfig,
};

/// Whether a running daemon takes a key's new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Applied by the reload.
    Live,
    /// Kept at its running value (and named in the reload's warning) until the next start.
    Restart,
}

/// One row of [`KEYS`].
pub struct Key {
    /// The dotted key, as the reload's warning and the docs name it; `pruner` and `params` stand
    /// for every key of their tables.
    pub name: &'static str,
    pub when: When,
    /// Whether the running config and a new one differ in this key.
    differs: fn(&Config, &Config) -> bool,
    /// Names what differs, where that is more precise than `name` (the pruner setting, the
    /// param).
    report: Option<fn(&Config, &Config, &mut Vec<String>)>,
    /// Copies the key's value from a new config into the running one.
    copy: fn(&mut Config, &Config),
}

/// A row for one field of `Config`, compared with `==` and copied with `clone`.
macro_rules! field {
    ($name:literal, $when:ident, $($f:ident).+) => {
        Key {
            name: $name,
            when: When::$when,
            differs: |old, new| old.$($f).+ != new.$($f).+,
            report: None,
            copy: |running, new| running.$($f).+ = Clone::clone(&new.$($f).+),
        }
    };
}

/// Every key of `supervisor.toml`. A field added to the config needs a row here (the check
/// below the table fails to compile until it has one) and a line in docs/configuration.md (a
/// test fails until it has one). Restart keys are in the order the reload's warning lists them.
pub const KEYS: &[Key] = &[
    field!("study.name", Restart, study.name),
    // `direction` or `directions`: the one list of objectives either gives.
    field!("study.directions", Restart, study.directions),
    field!("study.metric_names", Restart, study.metric_names),
    field!("study.n_trials", Live, study.n_trials),
    field!("study.timeout", Live, study.timeout),
    field!("study.gpu_hours", Live, study.gpu_hours),
    // `patience` and its `min_delta`, one rule.
    field!("study.patience", Live, study.patience),
    field!("study.sampler", Restart, study.sampler),
    field!("study.seed", Restart, study.seed),
    // The URL and what it names: the file, or the server to connect to.
    Key {
        name: "storage.url",
        when: When::Restart,
        differs: |old, new| {
            (&old.storage.url, &old.storage.path, &old.storage.postgres)
                != (&new.storage.url, &new.storage.path, &new.storage.postgres)
        },
        report: None,
        copy: |running, new| {
            running.storage.url = new.storage.url.clone();
            running.storage.path = new.storage.path.clone();
            running.storage.postgres = new.storage.postgres.clone();
        },
    },
    field!("storage.host_timeout", Restart, storage.host_timeout),
    field!("worker.command", Restart, worker.command),
    field!("worker.mode", Restart, worker.mode),
    field!("worker.recycle_after", Live, worker.recycle_after),
    field!("worker.max_par", Live, worker.max_par),
    field!("worker.trial_timeout", Live, worker.trial_timeout),
    field!("worker.startup_timeout", Restart, worker.startup_timeout),
    field!("worker.shutdown_grace", Restart, worker.shutdown_grace),
    field!("worker.log_dir", Restart, worker.log_dir),
    field!("worker.cwd", Restart, worker.cwd),
    field!("worker.env", Live, worker.env),
    field!("worker.heartbeat_timeout", Live, worker.heartbeat_timeout),
    field!("worker.recycle_on_growth", Live, worker.recycle_on_growth),
    field!("worker.log_max_bytes", Restart, worker.log_max_bytes),
    field!("worker.log_max_total", Restart, worker.log_max_total),
    field!("worker.allocator", Live, worker.allocator),
    field!("worker.checkpoint_dir", Restart, worker.checkpoint_dir),
    field!("worker.keep_checkpoints", Live, worker.keep_checkpoints),
    field!("gpu.devices", Restart, gpu.devices),
    field!("gpu.headroom", Live, gpu.headroom),
    field!("gpu.trial_memory", Restart, gpu.trial_memory),
    field!("gpu.max_par_per_device", Restart, gpu.max_par_per_device),
    field!("gpu.gpus_per_trial", Restart, gpu.gpus_per_trial),
    field!("gpu.poll_interval", Restart, gpu.poll_interval),
    field!("gpu.nvml_lib", Restart, gpu.nvml_lib),
    field!("gpu.idle_worker_timeout", Live, gpu.idle_worker_timeout),
    field!("gpu.memory_group", Restart, gpu.memory_group),
    field!("gpu.caps", Restart, gpu.caps),
    field!(
        "sampler.n_startup_trials",
        Restart,
        sampler.n_startup_trials
    ),
    field!("sampler.n_ei_candidates", Restart, sampler.n_ei_candidates),
    field!("sampler.multivariate", Restart, sampler.multivariate),
    field!("sampler.group", Restart, sampler.group),
    field!("sampler.constant_liar", Restart, sampler.constant_liar),
    field!(
        "sampler.deterministic_objective",
        Restart,
        sampler.deterministic_objective
    ),
    field!("sampler.seed", Restart, sampler.seed),
    field!("sampler.population_size", Restart, sampler.population_size),
    field!("sampler.crossover_prob", Restart, sampler.crossover_prob),
    field!("sampler.swapping_prob", Restart, sampler.swapping_prob),
    field!("sampler.mutation_prob", Restart, sampler.mutation_prob),
    Key {
        name: "pruner",
        when: When::Restart,
        differs: |old, new| old.pruner != new.pruner,
        report: Some(pruner_changed),
        copy: |running, new| running.pruner = new.pruner.clone(),
    },
    field!("metrics.listen", Restart, metrics.listen),
    field!("metrics.allow_remote", Restart, metrics.allow_remote),
    // The notifier is started once, with its command and events.
    Key {
        name: "notify",
        when: When::Restart,
        differs: |old, new| old.notify != new.notify,
        report: None,
        copy: |running, new| running.notify = new.notify.clone(),
    },
    Key {
        name: "params",
        when: When::Restart,
        differs: |old, new| old.space != new.space,
        report: Some(params_changed),
        copy: |running, new| running.space = new.space.clone(),
    },
    field!("retry.oom", Live, retry.oom),
    field!("retry.cuda_fatal", Live, retry.cuda_fatal),
    field!("retry.crash", Live, retry.crash),
    field!("retry.breaker_threshold", Live, retry.breaker_threshold),
    field!("retry.breaker_backoff", Live, retry.breaker_backoff),
    field!("retry.breaker_max_backoff", Live, retry.breaker_max_backoff),
    // Admission's OOM back-off is set up once, at start.
    field!(
        "retry.oom_admission_factor",
        Restart,
        retry.oom_admission_factor
    ),
    field!("retry.oom_recovery", Restart, retry.oom_recovery),
    field!(
        "retry.stop_after_same_error",
        Live,
        retry.stop_after_same_error
    ),
];

// Fails to compile when a config struct gains a field: give it a row in `KEYS`, then add it
// here. (`path` and `base_dir` are where the file is, not keys: a reload reads the same file.)
const _: fn(&Config) = |c| {
    let Config {
        path: _,
        base_dir: _,
        study,
        storage,
        worker,
        space: _,
        gpu,
        retry,
        sampler,
        pruner: _,
        metrics,
        notify: _,
    } = c;
    let StudyConfig {
        name: _,
        directions: _,
        metric_names: _,
        n_trials: _,
        timeout: _,
        gpu_hours: _,
        patience: _,
        sampler: _,
        seed: _,
    } = study;
    let StorageConfig {
        url: _,
        path: _,
        postgres: _,
        host_timeout: _,
        warning: _,
    } = storage;
    let WorkerConfig {
        command: _,
        mode: _,
        recycle_after: _,
        max_par: _,
        trial_timeout: _,
        startup_timeout: _,
        shutdown_grace: _,
        log_dir: _,
        cwd: _,
        env: _,
        heartbeat_timeout: _,
        recycle_on_growth: _,
        log_max_bytes: _,
        log_max_total: _,
        allocator: _,
        checkpoint_dir: _,
        keep_checkpoints: _,
    } = worker;
    let GpuConfig {
        devices: _,
        headroom: _,
        trial_memory: _,
        max_par_per_device: _,
        gpus_per_trial: _,
        poll_interval: _,
        nvml_lib: _,
        idle_worker_timeout: _,
        memory_group: _,
        caps: _,
    } = gpu;
    let RetryConfig {
        oom: _,
        cuda_fatal: _,
        crash: _,
        breaker_threshold: _,
        breaker_backoff: _,
        breaker_max_backoff: _,
        oom_admission_factor: _,
        oom_recovery: _,
        stop_after_same_error: _,
    } = retry;
    let SamplerConfig {
        n_startup_trials: _,
        n_ei_candidates: _,
        multivariate: _,
        group: _,
        constant_liar: _,
        deterministic_objective: _,
        seed: _,
        population_size: _,
        crossover_prob: _,
        swapping_prob: _,
        mutation_prob: _,
    } = sampler;
    let MetricsConfig {
        listen: _,
        allow_remote: _,
    } = metrics;
};

impl Config {
    /// The dotted keys whose values differ in `new` and cannot change while sweepd runs, for a
    /// live reload (SIGHUP): empty means `new` may replace `self`. A changed param is reported
    /// as `params.NAME`, a reorder of the params as `params`, a changed pruner type as
    /// `pruner.type`, another pruner setting by its key.
    pub fn reload_diff(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        for key in KEYS.iter().filter(|k| k.when == When::Restart) {
            if (key.differs)(self, new) {
                match key.report {
                    Some(report) => report(self, new, &mut out),
                    None => out.push(key.name.to_owned()),
                }
            }
        }
        out
    }

    /// The running config with every live key taken from `new`, and every other key kept.
    pub fn apply_live(&self, new: &Config) -> Config {
        let mut running = self.clone();
        for key in KEYS.iter().filter(|k| k.when == When::Live) {
            (key.copy)(&mut running, new);
        }
        running
    }
}

/// A changed pruner type is `pruner.type`; a setting changed within the same type, its key.
fn pruner_changed(old: &Config, new: &Config, out: &mut Vec<String>) {
    let mut diff = |key: &str, same: bool| {
        if !same {
            out.push(key.to_owned());
        }
    };
    match (&old.pruner, &new.pruner) {
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
        (
            PrunerConfig::Hyperband {
                min_resource: a0,
                max_resource: a1,
                reduction_factor: a2,
                bootstrap_count: a3,
            },
            PrunerConfig::Hyperband {
                min_resource: b0,
                max_resource: b1,
                reduction_factor: b2,
                bootstrap_count: b3,
            },
        ) => {
            diff("pruner.min_resource", a0 == b0);
            diff("pruner.max_resource", a1 == b1);
            diff("pruner.reduction_factor", a2 == b2);
            diff("pruner.bootstrap_count", a3 == b3);
        }
        (a, b) => diff("pruner.type", a == b),
    }
}

/// Each param added, removed or changed is `params.NAME`; a change of order only, `params`.
fn params_changed(old: &Config, new: &Config, out: &mut Vec<String>) {
    let mut diff = |key: &str, same: bool| {
        if !same {
            out.push(key.to_owned());
        }
    };
    let mut named = false;
    let (old, new) = (&old.space.params, &new.space.params);
    for p in old {
        let same = new.iter().find(|q| q.name == p.name) == Some(p);
        named |= !same;
        diff(&dotted(&["params", &p.name]), same);
    }
    for q in new {
        if !old.iter().any(|p| p.name == q.name) {
            named = true;
            diff(&dotted(&["params", &q.name]), false);
        }
    }
    // Only the order changed, which changes how trials are sampled.
    diff("params", named);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{cfg, parse_in, with, PX};
    use std::collections::BTreeSet;
    use std::path::Path;

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
                 breaker_threshold = 1\nbreaker_backoff = \"2m\"\n\
                 breaker_max_backoff = \"2h\"\ncuda_fatal = 7\nstop_after_same_error = 0\n"
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
             [metrics]\nlisten = \"127.0.0.1:9000\"\n\
             [retry]\noom_admission_factor = 0.5\noom_recovery = \"1h\"\n",
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
                "retry.oom_admission_factor",
                "retry.oom_recovery",
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
        let hyperband = |rest: &str| {
            parse_in(
                dir.path(),
                &with("", &format!("[pruner]\ntype = \"hyperband\"\n{rest}")),
            )
            .unwrap()
        };
        let old = hyperband("max_resource = 27\n");
        assert_eq!(
            old.reload_diff(&hyperband("max_resource = 81\nbootstrap_count = 1\n")),
            ["pruner.max_resource", "pruner.bootstrap_count"]
        );
        assert_eq!(
            old.reload_diff(&hyperband("max_resource = 27\nreduction_factor = 2\n")),
            ["pruner.reduction_factor"]
        );
        assert_eq!(old.reload_diff(&hyperband("")), ["pruner.max_resource"]);
    }

    /// Two valid configs in `dir` that differ in every key a file can change.
    fn different_in_every_key(dir: &Path) -> (Config, Config) {
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("libnvidia-ml.so.1"), "").unwrap();
        let a = parse_in(dir, &cfg("", "", PX)).unwrap();
        let text = cfg(
            "direction = \"maximize\"\nmetric_names = [\"m\"]\nn_trials = 9\ntimeout = \"1h\"\n\
             sampler = \"tpe\"\nseed = 3\ngpu_hours = 2\npatience = 5\nmin_delta = 0.01",
            "mode = \"oneshot\"\nrecycle_after = 5\nmax_par = 3\ntrial_timeout = \"1h\"\n\
             startup_timeout = \"1m\"\nshutdown_grace = \"5s\"\nlog_dir = \"logs2\"\ncwd = \"sub\"\n\
             heartbeat_timeout = \"1m\"\nrecycle_on_growth = \"1GiB\"\nlog_max_bytes = \"1MiB\"\n\
             log_max_total = \"2GiB\"\ncheckpoint_dir = \"ck\"\nkeep_checkpoints = true\n\
             [worker.env]\nA = \"b\"\n[worker.allocator]\npreset = \"none\"",
            "[storage]\nurl = \"sqlite:///other.db\"\nhost_timeout = \"2m\"\n\
             [params.y]\ntype = \"int\"\nlow = 0\nhigh = 2\n\
             [gpu]\ndevices = [0]\nheadroom = \"2GiB\"\ntrial_memory = \"1GiB\"\n\
             max_par_per_device = 2\npoll_interval = \"2s\"\nnvml_lib = \"libnvidia-ml.so.1\"\n\
             idle_worker_timeout = \"5m\"\nmemory_group = \"g\"\ncaps = false\n\
             [retry]\noom = 0\ncuda_fatal = 3\ncrash = 4\nbreaker_threshold = 2\n\
             breaker_backoff = \"30s\"\nbreaker_max_backoff = \"1h\"\noom_admission_factor = 0.5\n\
             oom_recovery = \"20m\"\nstop_after_same_error = 2\n\
             [sampler]\nn_startup_trials = 0\nn_ei_candidates = 48\nmultivariate = false\n\
             constant_liar = false\ndeterministic_objective = true\nseed = 7\n\
             population_size = 10\ncrossover_prob = 0.8\n\
             swapping_prob = 0.4\nmutation_prob = 0.2\n\
             [pruner]\ntype = \"median\"\n\
             [metrics]\nlisten = \"127.0.0.1:9000\"\nallow_remote = true\n\
             [notify]\ncommand = [\"true\"]\n",
        )
        .replace("[\"w\"]", "[\"w2\"]")
        .replace("name = \"s\"", "name = \"t\"");
        let mut b = parse_in(dir, &text).unwrap();
        // 1 is the only value a valid file has (multi-GPU trials are refused for now).
        b.gpu.gpus_per_trial = 2;
        // `group` needs `multivariate`, which differs the other way (a has the defaults).
        b.sampler.group = true;
        (a, b)
    }

    #[test]
    fn every_row_copies_its_own_key_and_the_rows_cover_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = different_in_every_key(dir.path());
        for key in KEYS {
            assert!(
                (key.differs)(&a, &b),
                "the test configs agree on {}",
                key.name
            );
            let mut one = a.clone();
            (key.copy)(&mut one, &b);
            assert!(!(key.differs)(&one, &b), "{} was not copied", key.name);
        }
        let mut all = a.clone();
        for key in KEYS {
            (key.copy)(&mut all, &b);
        }
        assert_eq!(all, b, "a field no row copies");
    }

    #[test]
    fn apply_live_takes_exactly_the_live_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = different_in_every_key(dir.path());
        let applied = a.apply_live(&b);
        for key in KEYS {
            assert_eq!(
                (key.differs)(&applied, &b),
                key.when == When::Restart,
                "{} after apply_live",
                key.name
            );
        }
        assert_eq!(applied.reload_diff(&b), a.reload_diff(&b));
        assert_eq!(applied.worker.max_par, 3);
        assert_eq!(applied.retry.oom, 0);
        assert_eq!(applied.retry.oom_admission_factor, 0.75);
        assert_eq!(applied.worker.command, ["w"]);
    }

    #[test]
    fn reload_diff_names_every_restart_key_in_table_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = different_in_every_key(dir.path());
        let expected: Vec<String> = KEYS
            .iter()
            .filter(|k| k.when == When::Restart)
            .flat_map(|k| match k.name {
                "pruner" => vec!["pruner.type".to_owned()],
                "params" => vec!["params.x".to_owned(), "params.y".to_owned()],
                name => vec![name.to_owned()],
            })
            .collect();
        assert_eq!(a.reload_diff(&b), expected);
    }

    /// The rows each key a list in docs/configuration.md names stands for: `[table] key` and
    /// `table.key` name one row, a bare `key` is in the table named last, and a `[table]` (or
    /// `[table.*]`) followed by no key of its own stands for every row of that table.
    fn named_rows(text: &str) -> Vec<(String, Vec<&'static str>)> {
        let tokens: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
        let mut table = String::new();
        let mut out = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let key =
                if let Some((t, key)) = token.strip_prefix('[').and_then(|t| t.split_once(']')) {
                    table = t.trim_end_matches(".*").to_owned();
                    if !key.trim().is_empty() {
                        format!("{table}.{}", key.trim())
                    } else if tokens.get(i + 1).is_some_and(|next| !next.starts_with('[')) {
                        continue;
                    } else {
                        table.clone()
                    }
                } else if let Some((t, _)) = token.rsplit_once('.') {
                    table = t.to_owned();
                    (*token).to_owned()
                } else {
                    format!("{table}.{token}")
                };
            let rows = KEYS
                .iter()
                .map(|k| k.name)
                .filter(|n| *n == key || n.starts_with(&format!("{key}.")))
                .collect();
            out.push((key, rows));
        }
        out
    }

    #[test]
    fn docs_list_the_live_and_the_restart_keys_of_the_table() {
        let doc = include_str!("../../docs/configuration.md");
        let section = doc
            .split_once("## Changing the config while sweepd runs (SIGHUP)")
            .expect("the SIGHUP section")
            .1;
        let live_table = section
            .lines()
            .skip_while(|l| !l.starts_with("| change live |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split('|').nth(1).expect("a first cell"))
            .collect::<Vec<_>>()
            .join(" ");
        let restart_list = section
            .split_once("Everything else needs a restart:")
            .expect("the restart paragraph")
            .1
            .split("\n\n")
            .next()
            .expect("a paragraph");
        for (text, when) in [
            (live_table.as_str(), When::Live),
            (restart_list, When::Restart),
        ] {
            let mut listed = BTreeSet::new();
            for (key, rows) in named_rows(text) {
                assert!(!rows.is_empty(), "the docs name `{key}`, which is no key");
                for row in rows {
                    let k = KEYS.iter().find(|k| k.name == row).expect("a row");
                    assert_eq!(k.when, when, "the docs list `{key}` as {when:?}");
                    listed.insert(row);
                }
            }
            for k in KEYS.iter().filter(|k| k.when == when) {
                assert!(
                    listed.contains(k.name),
                    "the docs do not list {} as {when:?}",
                    k.name
                );
            }
        }
    }
}
