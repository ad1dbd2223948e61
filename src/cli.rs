//! The command line: `run`, `check`, `status`, `trials`, `best`, `gpus`, `resume` (and the
//! hidden `internals`), parsed by clap and handed each to its own file.
//!
//! Every data-printing command has `--json` and `--csv`. `status`, `trials`, `best` and `gpus`
//! only read the database, so they work while `run` is going and after it, and from a storage
//! URL and a study name without a config (`--storage`, `--study`), as Optuna's own tools are
//! pointed at a study. Errors become exit codes in one place (`cli/error.rs`): 0 ok, 1 runtime
//! failure, 2 bad config or usage, 3 database problem, 4 another daemon already runs the study,
//! 5 the study was deleted from the database while `run` was running it, 6 the study's trials
//! keep failing with the same error in the objective, 7 the host id is in use by a live daemon
//! on another machine or container.
//!
//! The files of `cli/`, in layers (a file imports only files of the layers below it):
//! 1. `args` (the shared clap arguments), `error` (`CliError`, the exit codes), `csv`
//!    (`--csv`), `internals` (`internals --json`): they import nothing of this folder;
//! 2. `open` (the study a reading command names), `render` (text shared by commands: `--json`,
//!    the trials and GPU tables), `logging` (`run`'s log lines);
//! 3. one file per command: `run`, `check`, `status`, `trials`, `best`, `gpus`, `resume`;
//! 4. this file: the command enum, `main` and the dispatch, which none of them imports.

mod args;
mod best;
mod check;
mod csv;
mod error;
mod gpus;
mod internals;
mod logging;
mod open;
mod render;
mod resume;
mod run;
mod status;
mod trials;

pub use args::{ConfigArg, LogFormat, StateArg, StudyArg};
pub use error::CliError;

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
        Command::Resume { cfg } => resume::resume(&cfg).await,
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
        for name in ["status", "trials", "best", "gpus", "resume"] {
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
