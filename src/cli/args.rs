//! The command line's shared arguments: which config or study a command reads, the trial states
//! and log formats it takes, and the output a data-printing command writes. Clap's types only:
//! what a command does with them is in its own file.

use crate::study::TrialState;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

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
    /// (relative to the current directory, as Optuna reads it), `sqlite:////ABS/PATH`, or
    /// `postgresql://USER:PASSWORD@HOST:PORT/DB` (`postgresql+psycopg2://` too, as Optuna's
    /// users write it).
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    pub storage: Option<String>,
    /// The study's name: with --storage, needed when the database holds more than one study;
    /// with a config, another study in the config's database.
    #[arg(long, value_name = "NAME")]
    pub study: Option<String>,
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

/// What a data-printing command writes: text for a person, `--json` or `--csv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Output {
    Text,
    Json,
    Csv,
}

impl Output {
    /// From the two flags (clap refuses both at once; `--json` would win).
    pub(super) fn of(json: bool, csv: bool) -> Output {
        match (json, csv) {
            (true, _) => Output::Json,
            (false, true) => Output::Csv,
            (false, false) => Output::Text,
        }
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

    #[test]
    fn the_output_flags_choose_one_rendering() {
        assert_eq!(Output::of(false, false), Output::Text);
        assert_eq!(Output::of(true, false), Output::Json);
        assert_eq!(Output::of(false, true), Output::Csv);
        assert_eq!(Output::of(true, true), Output::Json);
    }
}
