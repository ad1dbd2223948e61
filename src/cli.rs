//! Commands and their rendering: `run`, `check`, `status`, `trials`, `best`.
//!
//! Every data-printing command has `--json` and `--csv` (the CSV rendering is `cli/csv.rs`).
//! `status`, `trials` and `best` only read the database, so they work while `run` is going and
//! after it, and from a storage URL and a study name without a config (`--storage`, `--study`),
//! as Optuna's own tools are pointed at a study. Errors become exit codes here and
//! nowhere else: 0 ok, 1 runtime failure, 2 bad config or usage, 3 database problem,
//! 4 another daemon already runs the study, 5 the study was deleted from the database while
//! `run` was running it, 6 the study's trials keep failing with the same error in the objective.

use crate::config::{parse_storage_url, Config, ConfigError, Overrides, SamplerKind, WorkerMode};
use crate::store::{time, Candidate, Store, StoreError, Target, TrialView};
use crate::study::{DaemonCommand, DaemonState, Distribution, TrialState};
use crate::supervisor::{self, RunError};
use crate::units;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "sweepd",
    version,
    about = "Runs hyperparameter sweeps of trial worker processes unattended"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

mod csv;
mod internals;

#[derive(Args, Debug, Clone)]
pub struct ConfigArg {
    /// The study's config file.
    #[arg(short = 'c', long = "config", default_value = "supervisor.toml")]
    pub config: PathBuf,
}

/// Which study a reading command looks at: the config's, or one named by storage URL.
#[derive(Args, Debug, Clone)]
pub struct StudyArg {
    /// The study's config file.
    #[arg(short = 'c', long = "config", default_value = "supervisor.toml")]
    pub config: PathBuf,
    /// Read the study from this storage URL instead of a config's: `sqlite:///NAME.db`
    /// (relative to the current directory, as Optuna reads it) or `sqlite:////ABS/PATH`.
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    pub storage: Option<String>,
    /// The study's name: with --storage, needed when the database holds more than one study;
    /// with a config, another study in the config's database.
    #[arg(long, value_name = "NAME")]
    pub study: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the study until its budget is spent (or SIGINT/SIGTERM), then exit 0.
    Run {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Override `[worker] max_par`, the number of trials run at once (PAR=N in make).
        #[arg(long = "par", value_name = "N")]
        par: Option<usize>,
        /// Log line format on stderr.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Validate the config and print the resolved study; non-zero exit on any error.
    Check {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// The static params (`[params]`) as CSV.
        #[arg(long)]
        csv: bool,
    },
    /// Trials by state, running trials, best so far, progress against the budget.
    Status {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        #[arg(long)]
        csv: bool,
    },
    /// List trials, oldest first.
    Trials {
        #[command(flatten)]
        cfg: StudyArg,
        /// Only trials in this state.
        #[arg(long, value_enum, ignore_case = true)]
        state: Option<StateArg>,
        /// Only the last N trials.
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        #[arg(long)]
        csv: bool,
    },
    /// The best COMPLETE trial; with several objectives, the Pareto front (Optuna's
    /// `study.best_trials`), in trial order.
    Best {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        #[arg(long)]
        csv: bool,
    },
    /// GPUs as the running daemon last read them: memory, PAR per device, why it waits.
    Gpus {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        #[arg(long)]
        csv: bool,
    },
    /// Lift the circuit breaker's quarantines of a paused study now.
    Resume {
        #[command(flatten)]
        cfg: StudyArg,
    },
    /// The constants and defaults the bench scripts read (`cli/internals.rs`); not for users.
    #[command(hide = true)]
    Internals {
        #[arg(long, required = true)]
        json: bool,
    },
}

/// A trial state on the command line, spelled as Optuna stores it (any case).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "UPPER")]
pub enum StateArg {
    Running,
    Waiting,
    Complete,
    Pruned,
    Fail,
}

impl From<StateArg> for TrialState {
    fn from(s: StateArg) -> TrialState {
        match s {
            StateArg::Running => TrialState::Running,
            StateArg::Waiting => TrialState::Waiting,
            StateArg::Complete => TrialState::Complete,
            StateArg::Pruned => TrialState::Pruned,
            StateArg::Fail => TrialState::Fail,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Everything that can end a command with a non-zero status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Run(#[from] RunError),
}

impl CliError {
    /// The one place errors become exit codes.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Usage(_) | CliError::Run(RunError::HostId(_)) => 2,
            CliError::Store(_) | CliError::Run(RunError::Store(_)) => 3,
            CliError::Run(RunError::Locked(_)) => 4,
            CliError::Run(RunError::StudyDeleted { .. }) => 5,
            CliError::Run(RunError::SameError(_)) => 6,
            CliError::Run(RunError::HostIdInUse(_)) => 7,
            CliError::Run(_) => 1,
        }
    }
}

/// Runs a parsed command line and returns the process exit code.
pub fn main(cli: Cli) -> ExitCode {
    if !matches!(cli.command, Command::Run { .. }) {
        // `sweepd trials | head` should end quietly, as Unix tools do. Not for `run`: there a
        // write to a dead worker's socket must be an error to handle, not a fatal signal.
        // SAFETY: setting a signal disposition before any thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed stderr (a detached terminal) must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "sweepd: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn dispatch(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Run {
            cfg,
            par,
            log_format,
        } => {
            let config = Config::load_with(&cfg.config, &Overrides { max_par: par })?;
            let display = wants_display(log_format).then(crate::progress::Display::new);
            init_logging(log_format, display.as_ref().map(|d| d.log_writer()));
            if let Some(w) = &config.storage.warning {
                tracing::warn!("{w}");
            }
            let control = supervisor::Control {
                par_override: par,
                ..Default::default()
            };
            tokio::spawn(forward_signals(
                control.clone(),
                config.worker.shutdown_grace,
            ));
            let drawn = tokio_util::sync::CancellationToken::new();
            let drawing = display.clone().map(|d| {
                let (rx, c, done) = (control.progress.subscribe(), control.clone(), drawn.clone());
                tokio::spawn(async move { d.run(rx, c.shutdown, c.kill_now, done).await })
            });
            let result = supervisor::run(config, control.clone()).await;
            drawn.cancel();
            if let (Some(d), Some(task)) = (&display, drawing) {
                let _ = task.await;
                d.finish(&control.progress.borrow());
            }
            let summary = result?;
            let c = summary.counts;
            let _ = writeln!(
                std::io::stderr(),
                "sweepd: study {}: {} COMPLETE, {} PRUNED, {} FAIL, {} WAITING",
                if control.kill_now.is_cancelled() {
                    "stopped at once by a second signal"
                } else if summary.interrupted {
                    "stopped by signal"
                } else {
                    "done"
                },
                c.complete,
                c.pruned,
                c.fail,
                c.waiting
            );
            Ok(())
        }
        Command::Check { cfg, json, csv } => {
            let config = Config::load(&cfg.config)?;
            if csv {
                csv::params(&config.space);
            } else {
                print_check(&config, json);
            }
            Ok(())
        }
        Command::Status { cfg, json, csv } => status(&cfg, json, csv).await,
        Command::Gpus { cfg, json, csv } => {
            let Opened { store, study, .. } = open_study(&cfg).await?;
            let rows = store.gpus(&study).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("serializable")
                );
            } else if csv {
                csv::gpus(&rows);
            } else if rows.is_empty() {
                println!(
                    "no GPU readings: the study runs CPU-only, or its daemon has not read NVML yet"
                );
            } else {
                print_gpus(&rows);
            }
            Ok(())
        }
        Command::Internals { .. } => {
            let text = serde_json::to_string_pretty(&internals::internals()).expect("JSON");
            println!("{text}");
            Ok(())
        }
        Command::Resume { cfg } => {
            let Opened { store, study, .. } = open_study(&cfg).await?;
            store.send_command(&study, DaemonCommand::Resume).await?;
            println!("resume requested: the running daemon lifts its quarantines within a second");
            Ok(())
        }
        Command::Trials {
            cfg,
            state,
            limit,
            json,
            csv,
        } => {
            let state = state.map(TrialState::from);
            let opened = open_study(&cfg).await?;
            let trials = opened.store.trials(&opened.study, state, limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&trials).expect("serializable")
                );
            } else if csv {
                csv::trials(&opened.study, &trials, opened.static_names());
            } else {
                print_table(&trials);
            }
            Ok(())
        }
        Command::Best { cfg, json, csv } => {
            let opened = open_study(&cfg).await?;
            let (store, study) = (&opened.store, &opened.study);
            if study.is_multi_objective() {
                let front: Vec<TrialView> = store
                    .best_trials(study)
                    .await?
                    .into_iter()
                    .map(|t| t.1)
                    .collect();
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&front).expect("serializable")
                    );
                } else if csv {
                    csv::trials(study, &front, opened.static_names());
                } else if front.is_empty() {
                    println!("no feasible COMPLETE trial yet: the Pareto front is empty");
                } else {
                    println!(
                        "Pareto front: {} trials ({})",
                        front.len(),
                        objectives_text(study)
                    );
                    print_table(&front);
                }
                return Ok(());
            }
            let best = store.best(study).await?;
            if csv {
                csv::trials(study, best.as_slice(), opened.static_names());
                return Ok(());
            }
            match (best, json) {
                (b, true) => println!(
                    "{}",
                    serde_json::to_string_pretty(&b).expect("serializable")
                ),
                (Some(b), false) => println!(
                    "best: trial {} value {} params {}",
                    b.number,
                    b.value,
                    Value::Object(b.params)
                ),
                (None, false) => println!("no COMPLETE trial yet"),
            }
            Ok(())
        }
    }
}

/// "loss MINIMIZE, latency_ms MAXIMIZE".
fn objectives_text(study: &crate::store::Study) -> String {
    study
        .directions
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{} {}", study.objective_name(i), d.as_optuna()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Per objective of a study with several: (name, direction, best value on the front, its
/// trial), as `status` shows them.
fn front_bests(study: &crate::store::Study, front: &[Candidate]) -> Vec<Value> {
    study
        .directions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let best = front
                .iter()
                .filter_map(|c| Some((c.number, *c.values.get(i)?)))
                .fold(None::<(i64, f64)>, |b, (n, v)| match b {
                    Some((_, bv)) if !d.better(v, bv) => b,
                    _ => Some((n, v)),
                });
            json!({
                "objective": i,
                "name": study.objective_name(i),
                "direction": d.as_optuna(),
                "value": best.map(|b| b.1),
                "trial": best.map(|b| b.0),
            })
        })
        .collect()
}

/// A study opened for reading, with its config when it was named by one.
struct Opened {
    store: Store,
    study: crate::store::Study,
    config: Option<Config>,
    /// The database file, or the PostgreSQL URL without its password.
    path: PathBuf,
}

impl Opened {
    /// The `[params]` names, in the order the config declares them (none without a config):
    /// columns come in the order the space defines them.
    fn static_names(&self) -> Vec<String> {
        self.config.as_ref().map_or_else(Vec::new, |c| {
            c.space.params.iter().map(|p| p.name.clone()).collect()
        })
    }
}

/// The study a reading command names: the config's (or `--study` in the config's database),
/// or `--study` in the database of `--storage` (the only study there when not named).
async fn open_study(arg: &StudyArg) -> Result<Opened, CliError> {
    let (config, target) = match &arg.storage {
        Some(url) => {
            let cwd = std::env::current_dir()
                .map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
            let target = match crate::config::postgres_url(url) {
                Some(pg) => {
                    let url = pg.map_err(CliError::Usage)?;
                    Target::Postgres {
                        label: crate::config::redact(&url),
                        url,
                    }
                }
                None => {
                    let parsed = parse_storage_url(url, &cwd).map_err(CliError::Usage)?;
                    if let Some(w) = &parsed.warning {
                        let _ = writeln!(std::io::stderr(), "sweepd: warning: {w}");
                    }
                    Target::Sqlite(parsed.path)
                }
            };
            (None, target)
        }
        None => {
            let config = Config::load(&arg.config)?;
            let target = supervisor::target(&config);
            (Some(config), target)
        }
    };
    let path = target.label();
    let store = Store::open_existing_target(&target).await?;
    let name = match (&arg.study, &config) {
        (Some(name), _) => name.clone(),
        (None, Some(c)) => c.study.name.clone(),
        (None, None) => {
            let names = store.study_names().await?;
            match names.as_slice() {
                [only] => only.clone(),
                [] => {
                    return Err(CliError::Usage(format!(
                        "{} holds no study",
                        path.display()
                    )))
                }
                many => {
                    return Err(CliError::Usage(format!(
                        "{} holds {} studies ({}): name one with --study",
                        path.display(),
                        many.len(),
                        many.join(", ")
                    )))
                }
            }
        }
    };
    let study = store.find_study(&name).await?;
    Ok(Opened {
        store,
        study,
        config,
        path,
    })
}

/// Whether `sweepd run` draws the live progress display: for a person, i.e. stderr is a
/// terminal, not the journal, and text logs (who asks for JSON lines wants lines only).
fn wants_display(format: LogFormat) -> bool {
    use std::io::IsTerminal;
    format == LogFormat::Text
        && std::io::stderr().is_terminal()
        && std::env::var_os("JOURNAL_STREAM").is_none()
}

/// Logs to stderr: plain text without colours unless stderr is a terminal (journald shows
/// escape codes verbatim), or one JSON object per line. With the progress display up, every
/// line goes through it (`display`), so that lines appear above it and never tear it.
fn init_logging(format: LogFormat, display: Option<crate::progress::LogWriter>) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWEEPD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        // PostgreSQL's notices ("relation … already exists, skipping" from the idempotent
        // migrations at every start) are the server's chatter, not the study's.
        .add_directive(
            "sqlx::postgres::notice=warn"
                .parse()
                .expect("a valid directive"),
        );
    if let Some(writer) = display {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .with_ansi(true)
            .try_init();
        return;
    }
    // systemd sets JOURNAL_STREAM when stderr is the journal: there each line gets its syslog
    // priority as a `<N>` prefix (which journald strips), and journald adds the timestamp.
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !journal);
    let _ = match (format, journal) {
        (LogFormat::Text, false) => builder.try_init(),
        (LogFormat::Json, false) => builder.json().try_init(),
        (LogFormat::Text, true) => builder
            .event_format(Journald(tracing_subscriber::fmt::format().without_time()))
            .try_init(),
        (LogFormat::Json, true) => builder
            .event_format(Journald(tracing_subscriber::fmt::format().json()))
            .try_init(),
    };
}

/// Prefixes each log line with its syslog priority for journald (`<3>` error .. `<7>` debug).
struct Journald<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Journald<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}

/// SIGINT and SIGTERM both mean: stop starting trials and wind down within the grace period.
/// A second one (either) means: stop now, SIGKILL the workers' groups, record their trials
/// as interrupted and re-enqueue them. SIGHUP means: re-read the config file.
async fn forward_signals(control: supervisor::Control, grace: std::time::Duration) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    let first = loop {
        tokio::select! {
            _ = int.recv() => break "SIGINT",
            _ = term.recv() => break "SIGTERM",
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                control.reload.notify_one();
            }
        }
    };
    // Said on every SIGINT, not only at a terminal: whoever sent it may want to send another.
    let again = if first == "SIGINT" {
        "press Ctrl-C again to stop now"
    } else {
        "a second SIGTERM or SIGINT stops now"
    };
    tracing::info!(
        "{first}: stopping; running trials get shutdown_grace ({}) to finish; {again}",
        units::format_duration(grace)
    );
    control.shutdown.cancel();
    let second = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    tracing::warn!(
        "{second} again: stopping now; killing the workers' process groups, their trials are \
         re-enqueued"
    );
    control.kill_now.cancel();
}

fn print_check(config: &Config, as_json: bool) {
    let w = &config.worker;
    let params: Vec<Value> = config
        .space
        .params
        .iter()
        .map(|p| {
            json!({"name": p.name, "distribution": serde_json::from_str::<Value>(&p.dist.optuna_json()).expect("valid JSON")})
        })
        .collect();
    let dur = |d: Option<std::time::Duration>| d.map(|d| units::format_duration(d).to_string());
    let resolved = json!({
        "config": config.path,
        "study": {
            "name": config.study.name,
            "direction": (!config.study.is_multi_objective()).then(|| config.study.directions[0].as_optuna()),
            "directions": config.study.directions.iter().map(|d| d.as_optuna()).collect::<Vec<_>>(),
            "metric_names": config.study.metric_names,
            "n_trials": config.study.n_trials,
            "timeout": dur(config.study.timeout),
            "sampler": match config.study.sampler { SamplerKind::Random => "random", SamplerKind::Grid => "grid", SamplerKind::Tpe => "tpe", SamplerKind::Nsga2 => "nsga2", SamplerKind::Gp => "gp" },
            "seed": config.study.seed,
        },
        "storage": {"url": config.storage.url, "path": config.storage.path, "warning": config.storage.warning},
        "worker": {
            "command": w.command,
            "mode": match w.mode { WorkerMode::Persistent => "persistent", WorkerMode::Oneshot => "oneshot" },
            "recycle_after": w.recycle_after,
            "max_par": w.max_par,
            "trial_timeout": dur(w.trial_timeout),
            "startup_timeout": dur(Some(w.startup_timeout)),
            "shutdown_grace": dur(Some(w.shutdown_grace)),
            "log_dir": w.log_dir,
            "cwd": w.cwd,
            "env": w.env,
            "final_env": final_env(config),
        },
        "params": params,
        "params_note": params_note(config),
    });
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&resolved).expect("serializable")
        );
        return;
    }
    println!("config ok: {}", config.path.display());
    println!(
        "study     {} ({}), sampler {}, budget {}",
        config.study.name,
        config
            .study
            .directions
            .iter()
            .enumerate()
            .map(|(i, d)| match &config.study.metric_names {
                Some(names) => format!("{} {}", names[i], d.as_optuna()),
                None => d.as_optuna().to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        resolved["study"]["sampler"].as_str().unwrap_or_default(),
        budget_text(config)
    );
    println!("storage   {}", config.storage.path.display());
    if let Some(w) = &config.storage.warning {
        println!("          warning: {w}");
    }
    println!(
        "worker    {:?} ({}), max_par {}, recycle_after {}",
        w.command,
        resolved["worker"]["mode"].as_str().unwrap_or_default(),
        w.max_par,
        w.recycle_after.map_or("never".into(), |n| n.to_string())
    );
    println!("logs      {}", w.log_dir.display());
    println!("env       (what every worker gets besides SWEEPD_* and the device)");
    for (k, v) in final_env(config) {
        println!("  {k}={v}");
    }
    println!("params    {}", params_note(config));
    for p in &config.space.params {
        println!("  {:<16} {}", p.name, describe_dist(&p.dist));
    }
}

/// What `check` says of the search space: the static part is all it can know.
fn params_note(config: &Config) -> &'static str {
    match (config.space.params.is_empty(), config.study.sampler) {
        (true, _) => "none in [params]: the objective defines every param as it runs (suggest_*)",
        (false, SamplerKind::Grid) => "the grid, sampled before each trial starts",
        (false, _) => "sampled before each trial starts; the objective may suggest more as it runs",
    }
}

/// The allocator settings and `[worker.env]` as a worker receives them (user values win).
fn final_env(config: &Config) -> std::collections::BTreeMap<String, String> {
    let mut env: std::collections::BTreeMap<String, String> =
        config.worker.allocator.env().into_iter().collect();
    env.extend(config.worker.env.clone());
    env
}

fn budget_text(config: &Config) -> String {
    match (config.study.n_trials, config.study.timeout) {
        (Some(n), Some(t)) => format!("{n} trials or {}", units::format_duration(t)),
        (Some(n), None) => format!("{n} trials"),
        (None, Some(t)) => units::format_duration(t).to_string(),
        (None, None) => "none (runs until stopped)".into(),
    }
}

fn describe_dist(d: &Distribution) -> String {
    match d {
        Distribution::Float {
            low,
            high,
            step,
            log,
        } => format!(
            "float [{low}, {high}]{}{}",
            step.map(|s| format!(" step {s}")).unwrap_or_default(),
            if *log { " log" } else { "" }
        ),
        Distribution::Int {
            low,
            high,
            step,
            log,
        } => format!(
            "int [{low}, {high}]{}{}",
            if *step != 1 {
                format!(" step {step}")
            } else {
                String::new()
            },
            if *log { " log" } else { "" }
        ),
        Distribution::Categorical { choices } => {
            format!("one of {}", Value::Array(choices.clone()))
        }
    }
}

async fn status(cfg: &StudyArg, as_json: bool, as_csv: bool) -> Result<(), CliError> {
    let Opened {
        store,
        study,
        config,
        path,
    } = open_study(cfg).await?;
    let n_trials = config.as_ref().and_then(|c| c.study.n_trials);
    let counts = store.counts(&study).await?;
    let running = store
        .trials(&study, Some(TrialState::Running), None)
        .await?;
    let best = store.best(&study).await?;
    let front: Option<Vec<Candidate>> = if study.is_multi_objective() {
        let front = store.best_trials(&study).await?;
        Some(front.into_iter().map(|t| t.0).collect())
    } else {
        None
    };
    let front_best = front.as_ref().map(|f| front_bests(&study, f));
    let workers = store.live_workers(&study).await?;
    let hosts = store.hosts(&study).await?;
    let several_hosts = store.engine() == crate::store::Engine::Postgres;
    let gone_after = if several_hosts {
        config
            .as_ref()
            .map_or(crate::config::DEFAULT_HOST_TIMEOUT, |c| {
                c.storage.host_timeout
            })
    } else {
        supervisor::DAEMON_GONE_AFTER
    };
    let alive = |d: &crate::store::DaemonView| {
        !matches!(d.state, DaemonState::Stopped | DaemonState::Gone)
            && supervisor::heartbeat_fresh(d.age_s, gone_after)
    };
    let number_of: std::collections::HashMap<i64, i64> =
        running.iter().map(|t| (t.trial_id, t.number)).collect();
    // The row `daemon` shows: the live one, else the latest (one host: the only one).
    let daemon = hosts
        .iter()
        .map(|h| &h.daemon)
        .filter(|d| alive(d))
        .chain(hosts.iter().map(|h| &h.daemon).rev())
        .next()
        .cloned();
    let gpus = store.gpus(&study).await?;
    let elapsed = |t: &TrialView| {
        t.datetime_start
            .as_deref()
            .and_then(time::age)
            .map(|a| a.as_millis() as f64 / 1000.0)
    };
    if as_csv {
        csv::status(
            &study,
            &path,
            &counts,
            n_trials,
            best.as_ref(),
            daemon.as_ref(),
            alive,
        );
        return Ok(());
    }
    if as_json {
        let running: Vec<Value> = running
            .iter()
            .map(|t| json!({"number": t.number, "trial_id": t.trial_id, "worker_id": t.worker_id,
                            "worker_pid": t.worker_pid, "elapsed_s": elapsed(t), "params": t.params}))
            .collect();
        let out = json!({
            "study": study.name,
            "direction": (!study.is_multi_objective()).then(|| study.directions[0].as_optuna()),
            "directions": study.directions.iter().map(|d| d.as_optuna()).collect::<Vec<_>>(),
            "metric_names": study.metric_names,
            "database": path,
            "counts": counts,
            "finished": counts.finished(),
            "n_trials": n_trials,
            "running": running,
            "best": if study.is_multi_objective() { None } else { best.as_ref() },
            "pareto_front": front.as_ref().map(|f| json!({
                "size": f.len(),
                "trials": f.iter().map(|c| c.number).collect::<Vec<_>>(),
                "best": front_best,
            })),
            "workers": workers,
            "daemon": daemon,
            "daemon_alive": daemon.as_ref().is_some_and(alive),
            "hosts": hosts.iter().map(|h| {
                let number = |id: &i64| number_of.get(id).copied();
                json!({
                    "host": h.daemon.host,
                    "daemon": h.daemon,
                    "alive": alive(&h.daemon),
                    "running": h.running.iter().filter_map(number).collect::<Vec<_>>(),
                    "workers": workers.iter().filter(|w| w.host == h.daemon.host).count(),
                    "gpus": gpus.iter().filter(|g| g.host == h.daemon.host).map(|g| g.device).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
            "gpus": gpus,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializable")
        );
        return Ok(());
    }
    let objectives = if study.is_multi_objective() {
        objectives_text(&study)
    } else {
        study.directions[0].as_optuna().to_owned()
    };
    println!("study {} ({objectives}) in {}", study.name, path.display());
    if several_hosts {
        for h in &hosts {
            let d = &h.daemon;
            let numbers: Vec<String> = h
                .running
                .iter()
                .filter_map(|id| running.iter().find(|t| t.trial_id == *id))
                .map(|t| t.number.to_string())
                .collect();
            let state =
                if d.state != DaemonState::Stopped && d.state != DaemonState::Gone && !alive(d) {
                    "SILENT".to_owned()
                } else {
                    d.state.to_string()
                };
            println!(
                "host      {:<20} {state:<8} pid {} since {}, heartbeat {}s ago; running [{}], workers {}, gpus {}{}",
                d.host,
                d.pid,
                d.started_at,
                d.age_s.map_or("?".into(), |a| format!("{:.0}", a.max(0.0))),
                numbers.join(", "),
                workers.iter().filter(|w| w.host == d.host).count(),
                gpus.iter().filter(|g| g.host == d.host).count(),
                d.detail
                    .as_deref()
                    .map(|x| format!("\n          {x}"))
                    .unwrap_or_default()
            );
        }
    }
    match &daemon {
        _ if several_hosts => {}
        Some(d) if d.state != DaemonState::Stopped && !alive(d) => println!(
            "daemon    GONE: pid {} on {} stopped sending heartbeats at {} (killed?); \
             the next `sweepd run` takes over and re-enqueues its trials",
            d.pid, d.host, d.heartbeat_at
        ),
        Some(d) => println!(
            "daemon    {} (pid {} on {}, since {}){}",
            d.state,
            d.pid,
            d.host,
            d.started_at,
            d.detail
                .as_deref()
                .map(|x| format!("\n          {x}"))
                .unwrap_or_default()
        ),
        None => println!("daemon    none has run this study yet"),
    }
    let progress = match n_trials {
        Some(n) => format!("{}/{n} finished", counts.finished()),
        None => format!("{} finished", counts.finished()),
    };
    println!(
        "progress  {progress}: COMPLETE {}, PRUNED {}, FAIL {} ({} re-enqueued), RUNNING {}, WAITING {}",
        counts.complete, counts.pruned, counts.fail, counts.fail_retried, counts.running, counts.waiting
    );
    match (&front, &front_best, &best) {
        (Some(f), _, _) if f.is_empty() => {
            println!("front     (no feasible COMPLETE trial yet)")
        }
        (Some(f), Some(bests), _) => {
            println!(
                "front     {} trials on the Pareto front (`sweepd best`)",
                f.len()
            );
            for b in bests {
                println!(
                    "          best {} ({}): {} (trial {})",
                    b["name"].as_str().unwrap_or_default(),
                    b["direction"].as_str().unwrap_or_default(),
                    b["value"],
                    b["trial"]
                );
            }
        }
        (_, _, Some(b)) => println!(
            "best      trial {}: {} {}",
            b.number,
            b.value,
            Value::Object(b.params.clone())
        ),
        _ => println!("best      (no COMPLETE trial yet)"),
    }
    if !running.is_empty() {
        println!(
            "running   {:>7} {:>7} {:>8} {:>9}",
            "trial", "worker", "pid", "elapsed"
        );
        for t in &running {
            println!(
                "          {:>7} {:>7} {:>8} {:>8.1}s",
                t.number,
                t.worker_id.map_or("-".into(), |v| v.to_string()),
                t.worker_pid.map_or("-".into(), |v| v.to_string()),
                elapsed(t).unwrap_or(0.0)
            );
        }
    }
    if !workers.is_empty() {
        println!("workers   {}", workers.len());
        for w in &workers {
            println!(
                "          worker {} slot {} pid {} {} ({} trials done)",
                w.worker_id,
                w.slot,
                w.pid.map_or("-".into(), |p| p.to_string()),
                w.state,
                w.trials_done
            );
        }
    }
    if !gpus.is_empty() {
        print_gpus(&gpus);
    }
    Ok(())
}

fn mib(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| units::whole_mib(b).to_string())
}

fn print_gpus(rows: &[crate::store::GpuRow]) {
    println!(
        "{:>4}  {:<22} {:>9} {:>9} {:>9} {:>5} {:>7} {:>4}  {:>10}  wait",
        "gpu", "name", "total MiB", "free MiB", "used MiB", "util", "running", "PAR", "next trial"
    );
    for r in rows {
        println!(
            "{:>4}  {:<22} {:>9} {:>9} {:>9} {:>5} {:>7} {:>4}  {:>10}  {}",
            r.device,
            worker_clip(r.name.as_deref().unwrap_or("-"), 22),
            mib(r.total),
            mib(r.free),
            mib(r.used),
            r.util_gpu.map_or("-".into(), |u| format!("{u}%")),
            r.running,
            r.par_estimate.map_or("-".into(), |p| p.to_string()),
            r.expected_peak
                .map_or("-".into(), |e| format!("{} MiB", units::whole_mib(e))),
            r.error
                .as_deref()
                .map(|e| format!("NVML error: {e}"))
                .or_else(|| r.wait.clone())
                .unwrap_or_else(|| "admits".into())
        );
    }
    // The estimate in words: the same for every device (it is the next trial's), said once.
    if let Some(why) = rows.iter().find_map(|r| r.expected_why.as_deref()) {
        println!("next trial's expected peak: {why}");
    }
    if let Some(r) = rows.first() {
        println!("(read at {})", r.updated_at);
    }
}

fn worker_clip(s: &str, n: usize) -> String {
    crate::process::clip(s, n)
}

/// A trial's value, or its values as `[a, b]` in a study with several objectives.
fn values_text(t: &TrialView) -> String {
    match &t.values {
        Some(Value::Array(vs)) => format!(
            "[{}]",
            vs.iter()
                .map(csv::value_text)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(_) => String::new(),
        None => csv::value_text(&t.value),
    }
}

fn print_table(trials: &[TrialView]) {
    let column = if trials.iter().any(|t| t.values.is_some()) {
        "values"
    } else {
        "value"
    };
    println!("{:>6}  {:<8}  {:>14}  params", "number", "state", column);
    for t in trials {
        let mut line = format!(
            "{:>6}  {:<8}  {:>14}  {}",
            t.number,
            t.state,
            values_text(t),
            Value::Object(t.params.clone())
        );
        if let Some(reason) = &t.fail_reason {
            line.push_str(&format!(
                "\n        {} {}",
                t.fail_kind.as_deref().unwrap_or("fail"),
                reason
            ));
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trial_state_has_its_command_line_spelling() {
        for s in TrialState::ALL {
            let arg = StateArg::from_str(s.as_str(), true).expect("a value for every state");
            assert_eq!(TrialState::from(arg), *s);
            let lower = StateArg::from_str(&s.as_str().to_lowercase(), true).unwrap();
            assert_eq!(TrialState::from(lower), *s);
        }
        assert!(StateArg::from_str("DONE", true).is_err());
    }
}
