//! The study a command other than `run` and `check` names (`status`, `trials`, `best`, `gpus`,
//! and the steering commands `pause`, `resume`, `stop`, `cancel`, `kill`, `enqueue`, `logs`):
//! the config's, or one in the database a `--storage` URL names, as Optuna's own tools are
//! pointed at a study.

use super::args::StudyArg;
use super::error::CliError;
use crate::config::{self, parse_storage_url, Config};
use crate::store::{Store, Study, Target};
use crate::supervisor;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A study opened for reading, with its config when it was named by one.
pub(super) struct Opened {
    pub(super) store: Store,
    pub(super) study: Study,
    pub(super) config: Option<Config>,
    /// The database file, or the PostgreSQL URL without its password.
    pub(super) path: PathBuf,
}

impl Opened {
    /// The `[params]` names, in the order the config declares them (none without a config):
    /// columns come in the order the space defines them.
    pub(super) fn static_names(&self) -> Vec<String> {
        self.config.as_ref().map_or_else(Vec::new, |c| {
            c.space.params.iter().map(|p| p.name.clone()).collect()
        })
    }
}

/// The study a reading command names: the config's (or `--study` in the config's database),
/// or `--study` in the database of `--storage` (the only study there when not named).
pub(super) async fn open_study(arg: &StudyArg) -> Result<Opened, CliError> {
    open(arg, false).await
}

/// [`open_study`] for a command that writes sweepd's tables (the steering commands): sweepd's
/// migrations applied first, as `sweepd run` applies them, so that a database an older
/// sweepd made gains the tables they write.
pub(super) async fn open_study_to_steer(arg: &StudyArg) -> Result<Opened, CliError> {
    open(arg, true).await
}

async fn open(arg: &StudyArg, migrate: bool) -> Result<Opened, CliError> {
    let (config, target) = match &arg.storage {
        Some(url) => {
            let cwd = std::env::current_dir()
                .map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
            let (target, warning) = storage_target(url, &cwd).map_err(CliError::Usage)?;
            if let Some(w) = warning {
                let _ = writeln!(std::io::stderr(), "sweepd: warning: {w}");
            }
            (None, target)
        }
        None => {
            let config = Config::load(&arg.config)?;
            let target = supervisor::target(&config);
            (Some(config), target)
        }
    };
    let path = target.label();
    let store = if migrate {
        Store::open_existing_migrated(&target).await?
    } else {
        Store::open_existing_target(&target).await?
    };
    let name = match (&arg.study, &config) {
        (Some(name), _) => name.clone(),
        (None, Some(c)) => c.study.name.clone(),
        (None, None) => only_study(&path, &store.study_names().await?)?,
    };
    let study = store.find_study(&name).await?;
    Ok(Opened {
        store,
        study,
        config,
        path,
    })
}

/// Where a `--storage` URL points, relative paths read against `cwd`, with the warning its
/// SQLite form may carry; or why it cannot be read.
fn storage_target(url: &str, cwd: &Path) -> Result<(Target, Option<String>), String> {
    match config::postgres_url(url) {
        Some(pg) => {
            let url = pg?;
            let label = config::redact(&url);
            Ok((Target::Postgres { label, url }, None))
        }
        None => {
            let parsed = parse_storage_url(url, cwd)?;
            Ok((Target::Sqlite(parsed.path), parsed.warning))
        }
    }
}

/// The study of a database named by `--storage` alone: its only one, or a usage error.
fn only_study(path: &Path, names: &[String]) -> Result<String, CliError> {
    match names {
        [only] => Ok(only.clone()),
        [] => Err(CliError::Usage(format!(
            "{} holds no study",
            path.display()
        ))),
        many => Err(CliError::Usage(format!(
            "{} holds {} studies ({}): name one with --study",
            path.display(),
            many.len(),
            many.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_url_names_a_sqlite_file_or_a_postgresql_database_without_its_password() {
        let cwd = Path::new("/home/me/study");
        let (t, _) = storage_target("sqlite:///sweepd.db", cwd).unwrap();
        assert_eq!(t, Target::Sqlite(PathBuf::from("/home/me/study/sweepd.db")));
        let (t, _) = storage_target("sqlite:////abs/s.db", cwd).unwrap();
        assert_eq!(t, Target::Sqlite(PathBuf::from("/abs/s.db")));
        let (t, w) = storage_target("postgresql+psycopg2://me:secret@db:5432/optuna", cwd).unwrap();
        match t {
            Target::Postgres { url, label } => {
                assert_eq!(url, "postgresql://me:secret@db:5432/optuna");
                assert!(!label.contains("secret"), "{label}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(w, None);
        let e = storage_target("mysql://db/optuna", cwd).unwrap_err();
        assert!(e.contains("mysql://db/optuna"), "{e}");
        let e = storage_target("postgresql://me@db/a b", cwd).unwrap_err();
        assert!(e.contains("percent-encode"), "{e}");
    }

    #[test]
    fn a_database_named_alone_must_hold_exactly_one_study() {
        let path = Path::new("/s.db");
        let name = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            only_study(path, &names).map_err(|e| e.to_string())
        };
        assert_eq!(name(&["a"]), Ok("a".to_owned()));
        assert_eq!(name(&[]), Err("/s.db holds no study".to_owned()));
        assert_eq!(
            name(&["a", "b"]),
            Err("/s.db holds 2 studies (a, b): name one with --study".to_owned())
        );
    }
}
