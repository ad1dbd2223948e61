//! How a run ends when it fails: one error type for the supervisor's tasks, each variant the
//! cause a person reads (and `cli` turns into an exit code).

use crate::store::StoreError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Sampler(String),
    #[error("worker command {argv:?} could not be started: {source}")]
    Spawn {
        argv: Vec<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("workers keep failing to start ({tries} times in a row); last: {reason}\n--- last stderr lines ---\n{stderr}")]
    WorkerStart {
        tries: u32,
        reason: String,
        stderr: String,
    },
    #[error("{0}")]
    Gpu(String),
    #[error("{0}")]
    Locked(String),
    /// `[metrics] listen` could not be bound.
    #[error("[metrics] listen = {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A slot task panicked: a bug in sweepd, not in the study.
    #[error("a slot task panicked (a bug in sweepd; please report it): {0}")]
    Panicked(String),
    /// The study's trials keep failing with the same error in the objective.
    #[error("{0}")]
    SameError(String),
    #[error("{0}")]
    HostId(String),
    /// A live daemon on another machine or in another PID namespace has our host id.
    #[error("{0}")]
    HostIdInUse(String),
    #[error("study `{name}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopped, and its workers killed", path.display())]
    StudyDeleted { name: String, path: PathBuf },
}

impl RunError {
    /// The error a slot task that panicked (or was cancelled) ends the run with.
    pub(super) fn from_slot_panic(e: tokio::task::JoinError) -> RunError {
        let what = match e.try_into_panic() {
            Ok(payload) => payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned()),
            Err(e) => e.to_string(),
        };
        RunError::Panicked(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_slot_is_reported_as_a_panic_not_a_sampler_error() {
        let e = tokio::spawn(async { panic!("index out of bounds") })
            .await
            .unwrap_err();
        let e = RunError::from_slot_panic(e);
        assert!(matches!(e, RunError::Panicked(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "a slot task panicked (a bug in sweepd; please report it): index out of bounds"
        );
    }
}
