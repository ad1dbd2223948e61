//! Storage URLs as Optuna users write them: SQLAlchemy's SQLite form, `sqlite:///NAME.db` (a
//! path relative to a base directory: the config file's, or the current one on the command
//! line) and `sqlite:////abs/NAME.db` (absolute), plus sweepd's old two-slash form
//! `sqlite://NAME.db`, still read (relative) with a deprecation warning. One parser for the
//! config's `[storage] url` and the CLI's `--storage`.

use std::path::{Path, PathBuf};

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
            "unsupported storage URL `{url}`: only SQLite URLs are supported yet, as SQLAlchemy \
             writes them: \"sqlite:///sweepd.db\" (relative to the config file's directory) or \
             \"sqlite:////abs/path/sweepd.db\" (absolute)"
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
    #[case::no_scheme("sweepd.db", "only SQLite URLs")]
    #[case::postgres("postgresql://localhost/db", "only SQLite URLs")]
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
}
