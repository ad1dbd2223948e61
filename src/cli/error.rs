//! Everything that can end a command with a non-zero status, and the one place errors become
//! exit codes (what each means: `cli.rs`'s header).

use crate::config::ConfigError;
use crate::store::StoreError;
use crate::supervisor::RunError;

/// Everything that can end a command with a non-zero status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    /// A steering command the study's state refuses: a trial that is final already, a study
    /// whose budget is spent, a log that is on another host.
    #[error("{0}")]
    Refused(String),
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
            CliError::Run(_) | CliError::Refused(_) => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn each_error_has_its_documented_exit_code() {
        let s = || "why".to_owned();
        let cases = [
            (CliError::Usage(s()), 2),
            (CliError::Refused(s()), 1),
            (CliError::Config(ConfigError { problems: vec![] }), 2),
            (CliError::Run(RunError::HostId(s())), 2),
            (
                CliError::Store(StoreError::Missing(PathBuf::from("x.db"))),
                3,
            ),
            (
                CliError::Run(RunError::Store(StoreError::Missing(PathBuf::from("x.db")))),
                3,
            ),
            (CliError::Run(RunError::Locked(s())), 4),
            (
                CliError::Run(RunError::StudyDeleted {
                    name: s(),
                    path: PathBuf::from("x.db"),
                }),
                5,
            ),
            (CliError::Run(RunError::SameError(s())), 6),
            (CliError::Run(RunError::HostIdInUse(s())), 7),
            (CliError::Run(RunError::Sampler(s())), 1),
            (CliError::Run(RunError::Gpu(s())), 1),
            (CliError::Run(RunError::Panicked(s())), 1),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
        }
    }
}
