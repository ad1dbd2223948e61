//! The command line: `run`, `check`, `status`, `trials`, `best`, `gpus`, the steering commands
//! `pause`, `resume`, `stop`, `cancel`, `kill`, `enqueue`, `logs` (and the hidden `internals`),
//! parsed by clap and handed each to its own file.
//!
//! Every data-printing command has `--json` and `--csv`; the steering commands but `logs` have
//! `--json`.
//! `status`, `trials`, `best` and `gpus` only read the database, so they work while `run` is
//! going and after it, and from a storage URL and a study name without a config (`--storage`,
//! `--study`), as Optuna's own tools are pointed at a study. The steering commands reach the
//! study the same way, through the database, from any host, whether a daemon runs or not.
//! Errors become exit codes in one place (`cli/error.rs`): 0 ok, 1 runtime failure (or a
//! steering command the study's state refuses: a trial final already, a spent budget), 2 bad
//! config or usage, 3 database problem, 4 another daemon already runs the study,
//! 5 the study was deleted from the database while `run` was running it, 6 the study's trials
//! keep failing with the same error in the objective, 7 the host id is in use by a live daemon
//! on another machine or container.
//!
//! The files of `cli/`, in layers (a file imports only files of the layers below it):
//! 1. `args` (the shared clap arguments), `error` (`CliError`, the exit codes), `csv`
//!    (`--csv`), `internals` (`internals --json`), `liveness` (whether a daemon row's daemon
//!    runs): they import nothing of this folder;
//! 2. `open` (the study a command names), `render` (text shared by commands: `--json`, the
//!    trials and GPU tables), `logging` (`run`'s log lines), `budgets` (`status`'s limits
//!    beside `n_trials` and what was spent of them), `reasons` (why each trial waits or what it
//!    does, as the live daemons published it);
//! 3. `steering` (who asks, which daemons run the study: shared by the steering commands);
//! 4. one file per command: `run`, `check`, `status`, `trials`, `best`, `gpus`, `control`
//!    (`pause`, `resume`, `stop`, `cancel`), `kill`, `enqueue`, `logs`;
//! 5. this file: the command enum, `main` and the dispatch, which none of them imports.

mod args;
mod best;
mod budgets;
mod check;
mod control;
mod csv;
mod enqueue;
mod error;
mod gpus;
mod internals;
mod kill;
mod liveness;
mod logging;
mod logs;
mod open;
mod reasons;
mod render;
mod run;
mod status;
mod steering;
mod trials;

pub use args::{ConfigArg, LogFormat, StateArg, StudyArg};
pub use error::CliError;

use crate::study::ControlState;
use args::Output;
use clap::{Parser, Subcommand};
use std::io::Write;
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
    /// Pause the study: no trial starts, running trials go on to their end, daemons wait.
    ///
    /// Every daemon of the study, on every host, reads it through the database; a daemon
    /// started later starts paused: the study stays paused across restarts until `sweepd
    /// resume` (W&B's `sweep --pause`, pueue's `pause` without killing).
    Pause {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// Run the study again after pause, stop or cancel, and lift the circuit breaker's
    /// quarantines now.
    ///
    /// A daemon that runs the study starts trials again within a second; after `stop` or
    /// `cancel`, start one (`sweepd run`, `systemctl start`).
    Resume {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// Stop the study gracefully: no trial starts, running trials finish, then every daemon of
    /// the study exits 0.
    ///
    /// The study stays stopped: `sweepd run` (or a restart by systemd) exits 0 at once, saying
    /// so, until `sweepd resume` (W&B's `sweep --stop`, Optuna's `study.stop()` for every
    /// process of the study).
    Stop {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// Cancel the study: running trials are killed and re-enqueued, every daemon exits 0.
    ///
    /// The killed trials are FAIL (`interrupted`) with a WAITING copy each, run first after
    /// `sweepd resume`; until then `sweepd run` exits 0 at once (W&B's `sweep --cancel`).
    Cancel {
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// End one RUNNING or WAITING trial by hand: FAIL, never retried (or PRUNED with --prune).
    ///
    /// The daemon that runs it stops its worker when it sees the trial ended; the slot moves
    /// on (pueue's `kill`, Slurm's `scancel` of one job).
    Kill {
        /// The trial's number, as `sweepd trials` shows it.
        #[arg(value_name = "TRIAL")]
        trial: i64,
        /// Mark it PRUNED (its value: its last report, as Optuna records a pruned trial)
        /// instead of FAIL.
        #[arg(long)]
        prune: bool,
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// Add a trial with chosen params, run before any new sample (Optuna's
    /// `study.enqueue_trial`).
    ///
    /// Each value is checked against the study's space: the config's [params], else the
    /// distribution the study's trials last used for that name. Params left out are sampled.
    #[command(group(clap::ArgGroup::new("given").required(true).args(["param", "file"])))]
    Enqueue {
        /// A param of the trial, NAME=VALUE (`lr=0.001`, `optimizer=adam`); repeat it for
        /// each param.
        #[arg(long, value_name = "NAME=VALUE")]
        param: Vec<String>,
        /// Trials from a JSON-lines file: one JSON object of params per line, one trial each.
        #[arg(long, value_name = "PARAMS.jsonl", conflicts_with = "param")]
        file: Option<std::path::PathBuf>,
        /// Add nothing for params a trial of the study already has (Optuna's
        /// `skip_if_exists`).
        #[arg(long)]
        skip_if_exists: bool,
        #[command(flatten)]
        cfg: StudyArg,
        #[arg(long)]
        json: bool,
    },
    /// A trial's worker output from its first line; with -f, follow it until the trial ends.
    ///
    /// Read from the log of the worker that ran it, on this host (a trial run on another host
    /// says which host holds its log). -f on a WAITING trial waits for it to start.
    Logs {
        /// The trial's number, as `sweepd trials` shows it.
        #[arg(value_name = "TRIAL")]
        trial: i64,
        /// Follow the output while the trial runs; end when it ends (pueue's `follow`).
        #[arg(short = 'f', long)]
        follow: bool,
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
        } => run::run(&cfg.config, par, log_format).await,
        Command::Check { cfg, json, csv } => check::check(&cfg.config, Output::of(json, csv)),
        Command::Status { cfg, json, csv } => status::status(&cfg, Output::of(json, csv)).await,
        Command::Trials {
            cfg,
            state,
            limit,
            json,
            csv,
        } => trials::trials(&cfg, state.map(Into::into), limit, Output::of(json, csv)).await,
        Command::Best { cfg, json, csv } => best::best(&cfg, Output::of(json, csv)).await,
        Command::Gpus { cfg, json, csv } => gpus::gpus(&cfg, Output::of(json, csv)).await,
        Command::Pause { cfg, json } => control::set(&cfg, ControlState::Paused, json).await,
        Command::Resume { cfg, json } => control::set(&cfg, ControlState::Running, json).await,
        Command::Stop { cfg, json } => control::set(&cfg, ControlState::Stopping, json).await,
        Command::Cancel { cfg, json } => control::set(&cfg, ControlState::Cancelling, json).await,
        Command::Kill {
            trial,
            prune,
            cfg,
            json,
        } => kill::kill(&cfg, trial, prune, json).await,
        Command::Enqueue {
            param,
            file,
            skip_if_exists,
            cfg,
            json,
        } => {
            let given = match &file {
                Some(path) => enqueue::Given::File(path),
                None => enqueue::Given::Params(&param),
            };
            enqueue::enqueue(&cfg, given, skip_if_exists, json).await
        }
        Command::Logs { trial, follow, cfg } => logs::logs(&cfg, trial, follow).await,
        Command::Internals { .. } => {
            render::print_json(&internals::internals());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn internals_parses_with_json_and_is_left_out_of_help() {
        let cli = Cli::try_parse_from(["sweepd", "internals", "--json"]).expect("parses");
        assert!(matches!(cli.command, Command::Internals { json: true }));
        assert!(Cli::try_parse_from(["sweepd", "internals"]).is_err());
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains("internals"), "{help}");
    }

    #[test]
    fn the_storage_help_names_postgresql_urls_beside_sqlite_ones() {
        let mut cli = Cli::command();
        for name in [
            "status", "trials", "best", "gpus", "pause", "resume", "stop", "cancel", "kill",
            "enqueue", "logs",
        ] {
            let help = cli
                .find_subcommand_mut(name)
                .expect("a reading command")
                .render_long_help()
                .to_string();
            for form in ["sqlite:///NAME.db", "sqlite:////ABS/PATH", "postgresql://"] {
                assert!(help.contains(form), "{name} --help lacks {form}: {help}");
            }
        }
    }
}
