//! Storage URLs as Optuna users write them: SQLAlchemy's SQLite form, `sqlite:///NAME.db` (a
//! path relative to a base directory: the config file's, or the current one on the command
//! line) and `sqlite:////abs/NAME.db` (absolute), plus sweepd's old two-slash form
//! `sqlite://NAME.db`, still read (relative) with a deprecation warning. PostgreSQL URLs in the
//! forms Optuna users write (`postgresql://`, `postgres://`, `postgresql+psycopg2://`) are
//! normalised to what sqlx's driver takes ([`postgres_url`]), and shown without their password
//! ([`redact`]). One reader for the config's `[storage] url` and the CLI's `--storage`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default `[storage] url`: `sweepd.db` beside the config file.
pub const DEFAULT_STORAGE_URL: &str = "sqlite:///sweepd.db";

/// A storage URL read: the database file, and a warning to show when the URL is in a form
/// that is going away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageUrl {
    /// Absolute.
    pub path: PathBuf,
    pub warning: Option<String>,
}

/// Reads `url` (see the module docs); relative paths resolve against `base`, which must be
/// absolute. The error is a sentence that names the URL.
pub fn parse_storage_url(url: &str, base: &Path) -> Result<StorageUrl, String> {
    let Some(rest) = url.strip_prefix("sqlite://") else {
        return Err(format!(
            "unsupported storage URL `{url}`: only sqlite:// and postgresql:// URLs are \
             supported, as SQLAlchemy writes them: \"sqlite:///sweepd.db\" (relative to the config \
             file's directory), \"sqlite:////abs/path/sweepd.db\" (absolute) or \
             \"postgresql://user:password@host:5432/db\""
        ));
    };
    let (file, warning) = match rest.strip_prefix('/') {
        Some(file) => (file, None),
        None => (
            rest,
            Some(format!(
                "storage URL `{url}` is sweepd's old two-slash form, read as the relative path \
                 `{rest}`; write `sqlite:///{rest}` (three slashes: relative, as Optuna and \
                 SQLAlchemy read it) or `sqlite:////ABSOLUTE/PATH` (four slashes)"
            )),
        ),
    };
    if file.is_empty() {
        return Err(format!("storage URL `{url}` names no database file"));
    }
    if file == ":memory:" || file.starts_with("file:") {
        return Err(format!(
            "storage URL `{url}`: sweepd needs a database file that outlives it, not an \
             in-memory or `file:` URI database"
        ));
    }
    if file.contains('?') {
        return Err(format!(
            "storage URL `{url}`: query parameters (`?...`) are not supported; sweepd sets \
             SQLite's options itself"
        ));
    }
    if file.contains('\0') {
        return Err("the database path may not contain NUL bytes".into());
    }
    let joined = base.join(file);
    // `base` is absolute, so this only normalizes and never consults the current directory.
    let path = std::path::absolute(&joined).unwrap_or(joined);
    Ok(StorageUrl { path, warning })
}

/// For a three-slash URL whose relative reading names a directory that does not exist while
/// the absolute one does (the meaning sweepd gave it before it read URLs as SQLAlchemy does):
/// the four-slash URL to write instead.
pub fn absolute_hint(url: &str) -> Option<String> {
    let file = url.strip_prefix("sqlite:///")?;
    if file.starts_with('/') {
        return None;
    }
    let abs = Path::new("/").join(file);
    abs.parent()
        .is_some_and(Path::is_dir)
        .then(|| format!("sqlite:///{}", abs.display()))
}

/// `[storage] host_timeout` when not given: a host silent this long is failed over.
pub const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_HOST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// `None` when `url` is not a PostgreSQL URL; else the URL to connect with, or why it cannot
/// be one. `postgresql+psycopg2://` (SQLAlchemy's driver suffix, as Optuna users write it, or
/// any other `+driver`) becomes `postgresql://`.
pub fn postgres_url(url: &str) -> Option<Result<String, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let base = scheme.split_once('+').map_or(scheme, |(b, _)| b);
    if base != "postgresql" && base != "postgres" {
        return None;
    }
    if let Some(c) = url.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Some(Err(format!(
            "storage URL `{}` contains {c:?}: percent-encode it (e.g. %20 for a space)",
            redact(url)
        )));
    }
    Some(Ok(format!("{base}://{rest}")))
}

/// The URL as it may be shown: without its password.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_owned(),
    };
    // A password may also come as a query parameter.
    let tail = tail
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.trim_start_matches('?') == "password" => {
                format!("{k}=***")
            }
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::relative("sqlite:///sweepd.db", "/cfg/dir/sweepd.db", false)]
    #[case::relative_subdir("sqlite:///runs/a.db", "/cfg/dir/runs/a.db", false)]
    #[case::relative_dotdot("sqlite:///../a.db", "/cfg/dir/../a.db", false)]
    #[case::absolute("sqlite:////data/x.db", "/data/x.db", false)]
    #[case::old_two_slash("sqlite://sweepd.db", "/cfg/dir/sweepd.db", true)]
    #[case::old_two_slash_subdir("sqlite://runs/a.db", "/cfg/dir/runs/a.db", true)]
    fn urls_resolve_as_sqlalchemy_reads_them(
        #[case] url: &str,
        #[case] want: &str,
        #[case] warns: bool,
    ) {
        let got = parse_storage_url(url, Path::new("/cfg/dir")).unwrap();
        assert_eq!(got.path, Path::new(want), "{url}");
        assert_eq!(got.warning.is_some(), warns, "{url}: {:?}", got.warning);
        if let Some(w) = got.warning {
            assert!(w.contains("sqlite:///"), "{w}");
        }
    }

    #[rstest]
    #[case::no_scheme("sweepd.db", "only sqlite:// and postgresql://")]
    #[case::mysql("mysql://localhost/db", "only sqlite:// and postgresql://")]
    #[case::empty("sqlite://", "names no database file")]
    #[case::empty_three("sqlite:///", "names no database file")]
    #[case::memory("sqlite:///:memory:", "in-memory")]
    #[case::query("sqlite:///a.db?timeout=10", "query parameters")]
    #[case::nul("sqlite:///a\0b.db", "NUL")]
    fn bad_urls_are_refused_with_the_reason(#[case] url: &str, #[case] why: &str) {
        let err = parse_storage_url(url, Path::new("/cfg")).unwrap_err();
        assert!(err.contains(why), "{url}: {err}");
    }

    #[test]
    fn a_three_slash_url_meant_as_absolute_gets_the_four_slash_hint() {
        // /tmp exists; <config dir>/tmp usually does not.
        assert_eq!(
            absolute_hint("sqlite:///tmp/x.db").as_deref(),
            Some("sqlite:////tmp/x.db")
        );
        assert_eq!(absolute_hint("sqlite:////tmp/x.db"), None);
        assert_eq!(absolute_hint("sqlite:///no-such-dir-here/x.db"), None);
    }

    #[test]
    fn optunas_url_forms_are_taken_and_others_left_alone() {
        for (given, connect) in [
            ("postgresql://u:p@h:5432/db", "postgresql://u:p@h:5432/db"),
            ("postgres://h/db", "postgres://h/db"),
            ("postgresql+psycopg2://u@h/db", "postgresql://u@h/db"),
            (
                "postgresql+psycopg://u@h/db?sslmode=require",
                "postgresql://u@h/db?sslmode=require",
            ),
        ] {
            assert_eq!(postgres_url(given), Some(Ok(connect.to_owned())), "{given}");
        }
        for other in ["sqlite://x.db", "mysql://h/db", "postgresql", "x.db"] {
            assert_eq!(postgres_url(other), None, "{other}");
        }
        let e = postgres_url("postgresql://u:secret@h/my db")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("percent-encode") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn the_password_is_never_shown() {
        assert_eq!(
            redact("postgresql://sweep:s3cret@db.lab:5432/sweeps"),
            "postgresql://sweep:***@db.lab:5432/sweeps"
        );
        assert_eq!(
            redact("postgres://sweep@db/sweeps?sslmode=require&password=x"),
            "postgres://sweep@db/sweeps?sslmode=require&password=***"
        );
        assert_eq!(redact("postgresql:///sweeps"), "postgresql:///sweeps");
        assert_eq!(redact("postgresql://a:b@h"), "postgresql://a:***@h");
    }
}
