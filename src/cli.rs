//! Commands and their rendering: `run`, `check`, `status`, `trials`, `best`.
//!
//! Every data-printing command has `--json`. `status`, `trials` and `best` only read the
//! database, so they work while `run` is going and after it. Errors become exit codes here and
//! nowhere else: 0 ok, 1 runtime failure, 2 bad config or usage, 3 database problem,
//! 4 another daemon already runs the study, 5 the study was deleted from the database while
//! `run` was running it, 6 the study's trials keep failing with the same error in the objective.

use crate::config::{Config, ConfigError, Overrides, SamplerKind, WorkerMode};
use crate::store::{time, Store, StoreError, TrialView};
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

#[derive(Args, Debug, Clone)]
pub struct ConfigArg {
    /// The study's config file.
    #[arg(short = 'c', long = "config", default_value = "supervisor.toml")]
    pub config: PathBuf,
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
        #[arg(long)]
        json: bool,
    },
    /// Trials by state, running trials, best so far, progress against the budget.
    Status {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// List trials, oldest first.
    Trials {
        #[command(flatten)]
        cfg: ConfigArg,
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
    /// The best COMPLETE trial.
    Best {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// GPUs as the running daemon last read them: memory, PAR per device, why it waits.
    Gpus {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// Lift the circuit breaker's quarantines of a paused study now.
    Resume {
        #[command(flatten)]
        cfg: ConfigArg,
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
            CliError::Config(_) | CliError::Usage(_) => 2,
            CliError::Store(_) | CliError::Run(RunError::Store(_)) => 3,
            CliError::Run(RunError::Locked(_)) => 4,
            CliError::Run(RunError::StudyDeleted { .. }) => 5,
            CliError::Run(RunError::SameError(_)) => 6,
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
        Command::Check { cfg, json } => {
            let config = Config::load(&cfg.config)?;
            print_check(&config, json);
            Ok(())
        }
        Command::Status { cfg, json } => status(&cfg, json).await,
        Command::Gpus { cfg, json } => {
            let (store, study) = open_study(&cfg).await?;
            let rows = store.gpus(&study).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("serializable")
                );
            } else if rows.is_empty() {
                println!(
                    "no GPU readings: the study runs CPU-only, or its daemon has not read NVML yet"
                );
            } else {
                print_gpus(&rows);
            }
            Ok(())
        }
        Command::Resume { cfg } => {
            let (store, study) = open_study(&cfg).await?;
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
            let (store, study) = open_study(&cfg).await?;
            let trials = store.trials(&study, state, limit).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&trials).expect("serializable")
                );
            } else if csv {
                print_csv(&trials);
            } else {
                print_table(&trials);
            }
            Ok(())
        }
        Command::Best { cfg, json } => {
            let (store, study) = open_study(&cfg).await?;
            let best = store.best(&study).await?;
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

async fn open_study(cfg: &ConfigArg) -> Result<(Store, crate::store::Study), CliError> {
    let config = Config::load(&cfg.config)?;
    let store = Store::open_existing(&config.storage.path).await?;
    let study = store.find_study(&config.study.name).await?;
    Ok((store, study))
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
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
            "direction": config.study.direction.as_optuna(),
            "n_trials": config.study.n_trials,
            "timeout": dur(config.study.timeout),
            "sampler": match config.study.sampler { SamplerKind::Random => "random", SamplerKind::Grid => "grid", SamplerKind::Tpe => "tpe" },
            "seed": config.study.seed,
        },
        "storage": {"url": config.storage.url, "path": config.storage.path},
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
        config.study.direction.as_optuna(),
        resolved["study"]["sampler"].as_str().unwrap_or_default(),
        budget_text(config)
    );
    println!("storage   {}", config.storage.path.display());
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
    println!("params");
    for p in &config.space.params {
        println!("  {:<16} {}", p.name, describe_dist(&p.dist));
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

async fn status(cfg: &ConfigArg, as_json: bool) -> Result<(), CliError> {
    let config = Config::load(&cfg.config)?;
    let store = Store::open_existing(&config.storage.path).await?;
    let study = store.find_study(&config.study.name).await?;
    let counts = store.counts(&study).await?;
    let running = store
        .trials(&study, Some(TrialState::Running), None)
        .await?;
    let best = store.best(&study).await?;
    let workers = store.live_workers(&study).await?;
    let daemon = store.daemon_view(&study).await?;
    let gpus = store.gpus(&study).await?;
    let elapsed = |t: &TrialView| {
        t.datetime_start
            .as_deref()
            .and_then(time::age)
            .map(|a| a.as_millis() as f64 / 1000.0)
    };
    if as_json {
        let running: Vec<Value> = running
            .iter()
            .map(|t| json!({"number": t.number, "trial_id": t.trial_id, "worker_id": t.worker_id,
                            "worker_pid": t.worker_pid, "elapsed_s": elapsed(t), "params": t.params}))
            .collect();
        let out = json!({
            "study": study.name,
            "direction": study.direction.as_optuna(),
            "database": config.storage.path,
            "counts": counts,
            "finished": counts.finished(),
            "n_trials": config.study.n_trials,
            "running": running,
            "best": best,
            "workers": workers,
            "daemon": daemon,
            "daemon_alive": daemon.as_ref().is_some_and(|d| d.state != DaemonState::Stopped && heartbeat_fresh(d)),
            "gpus": gpus,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serializable")
        );
        return Ok(());
    }
    println!(
        "study {} ({}) in {}",
        study.name,
        study.direction.as_optuna(),
        config.storage.path.display()
    );
    match &daemon {
        Some(d) if d.state != DaemonState::Stopped && !heartbeat_fresh(d) => println!(
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
    let progress = match config.study.n_trials {
        Some(n) => format!("{}/{n} finished", counts.finished()),
        None => format!("{} finished", counts.finished()),
    };
    println!(
        "progress  {progress}: COMPLETE {}, PRUNED {}, FAIL {} ({} re-enqueued), RUNNING {}, WAITING {}",
        counts.complete, counts.pruned, counts.fail, counts.fail_retried, counts.running, counts.waiting
    );
    match &best {
        Some(b) => println!(
            "best      trial {}: {} {}",
            b.number,
            b.value,
            Value::Object(b.params.clone())
        ),
        None => println!("best      (no COMPLETE trial yet)"),
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

/// A running daemon updates its heartbeat every second or so; a silence of
/// `supervisor::DAEMON_GONE_AFTER`, the same `run` waits before taking its row over, means it
/// is gone.
fn heartbeat_fresh(d: &crate::store::DaemonView) -> bool {
    crate::supervisor::heartbeat_fresh(&d.heartbeat_at)
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

fn value_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_table(trials: &[TrialView]) {
    println!("{:>6}  {:<8}  {:>14}  params", "number", "state", "value");
    for t in trials {
        let mut line = format!(
            "{:>6}  {:<8}  {:>14}  {}",
            t.number,
            t.state,
            value_text(&t.value),
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

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn print_csv(trials: &[TrialView]) {
    let mut names: Vec<&String> = trials.iter().flat_map(|t| t.params.keys()).collect();
    names.sort();
    names.dedup();
    let mut header = vec![
        "number",
        "state",
        "value",
        "datetime_start",
        "datetime_complete",
        "fail_kind",
        "fail_reason",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    header.extend(names.iter().map(|n| format!("params_{n}")));
    println!(
        "{}",
        header
            .iter()
            .map(|h| csv_field(h))
            .collect::<Vec<_>>()
            .join(",")
    );
    for t in trials {
        let mut row = vec![
            t.number.to_string(),
            t.state.clone(),
            value_text(&t.value),
            t.datetime_start.clone().unwrap_or_default(),
            t.datetime_complete.clone().unwrap_or_default(),
            t.fail_kind.clone().unwrap_or_default(),
            t.fail_reason.clone().unwrap_or_default(),
        ];
        row.extend(
            names
                .iter()
                .map(|n| t.params.get(*n).map(value_text).unwrap_or_default()),
        );
        println!(
            "{}",
            row.iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(",")
        );
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
