//! `[storage]` for PostgreSQL: the URL forms Optuna users write, normalised to what sqlx's
//! driver takes, and the password kept out of everything sweepd shows.

use std::time::Duration;

/// `[storage] host_timeout` when not given: a host silent this long is failed over.
pub(crate) const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const MAX_HOST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// `None` when `url` is not a PostgreSQL URL; else the URL to connect with, or why it cannot
/// be one. `postgresql+psycopg2://` (SQLAlchemy's driver suffix, as Optuna users write it, or
/// any other `+driver`) becomes `postgresql://`.
pub(crate) fn postgres_url(url: &str) -> Option<Result<String, String>> {
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
pub(crate) fn redact(url: &str) -> String {
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
