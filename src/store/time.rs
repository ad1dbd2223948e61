//! Timestamps as Optuna writes them in DATETIME columns.

/// The timestamp text Optuna (through SQLAlchemy) writes for DATETIME columns: local time.
pub fn now_text() -> String {
    chrono::Local::now()
        .naive_local()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}
