//! Timestamps as Optuna writes them in DATETIME columns: naive local time as text,
//! `2026-01-01 10:00:00.000000` (SQLAlchemy's format on SQLite). Every timestamp sweepd writes
//! is made here, and every one it reads (a heartbeat's age, a trial's elapsed time) is parsed
//! here.

use chrono::NaiveDateTime;
use std::time::Duration;

/// What Optuna writes; reading accepts any number of fractional digits, or none.
const FORMAT: &str = "%Y-%m-%d %H:%M:%S%.6f";
const PARSE_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.f";

/// The current local time, as Optuna writes it.
pub fn now() -> String {
    chrono::Local::now()
        .naive_local()
        .format(FORMAT)
        .to_string()
}

/// A timestamp read back; `None` when it is not one.
pub fn parse(text: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(text, PARSE_FORMAT).ok()
}

/// How long ago `text` was, by this host's clock: zero for a time in the future (a clock that
/// went back, or another host's running ahead); `None` when it is not a timestamp.
pub fn age(text: &str) -> Option<Duration> {
    let then = parse(text)?;
    let age = chrono::Local::now().naive_local() - then;
    Some(age.to_std().unwrap_or(Duration::ZERO))
}

/// Seconds from `start` to `end` (a trial's duration); `None` unless both are timestamps, zero
/// where `end` is earlier.
pub fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let ms = (parse(end)? - parse(start)?).num_milliseconds().max(0);
    Some(ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_end_minus_start_never_negative_and_none_without_both() {
        let (a, b) = ("2026-01-01 10:00:00.250000", "2026-01-01 10:01:01.5");
        assert_eq!(seconds_between(a, b), Some(61.25));
        assert_eq!(seconds_between(b, a), Some(0.0));
        assert_eq!(seconds_between(a, "soon"), None);
    }

    #[test]
    fn what_now_writes_parses_back_and_ages_from_zero() {
        let t = now();
        assert_eq!(t.len(), "2026-01-01 10:00:00.000000".len(), "{t}");
        assert!(parse(&t).is_some());
        assert!(age(&t).unwrap() < Duration::from_secs(5));
    }

    #[test]
    fn ages_of_past_future_and_malformed_timestamps() {
        let ago = |secs: i64| {
            (chrono::Local::now().naive_local() - chrono::Duration::seconds(secs))
                .format(FORMAT)
                .to_string()
        };
        let a = age(&ago(45)).unwrap();
        assert!(
            a >= Duration::from_secs(45) && a < Duration::from_secs(50),
            "{a:?}"
        );
        assert_eq!(age(&ago(-3600)), Some(Duration::ZERO));
        // Optuna's own rows: with or without a fraction.
        assert!(parse("2026-01-01 10:00:01.5").is_some());
        assert!(parse("2026-01-01 10:00:01").is_some());
        for bad in ["", "yesterday", "2026-01-01T10:00:00"] {
            assert_eq!(age(bad), None, "{bad}");
        }
    }
}
