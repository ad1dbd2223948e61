//! What `sweepd run` shows on its stderr: through a pipe (or to journald), log lines as plain
//! text that say which trial ended how, with its params.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_pipe_gets_plain_log_lines_with_params_and_no_gpu_none() {
    let cfg = Cfg {
        n_trials: Some(6),
        max_par: 2,
        ..Cfg::default()
    };
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // No display, no colours: nothing a log file or `grep` would choke on.
    assert!(!err.contains('\x1b'), "control sequences in a pipe:\n{err}");
    assert!(
        !err.contains("finished ["),
        "a progress display in a pipe:\n{err}"
    );
    // A CPU study has no GPU to name, and says nothing about one.
    assert!(!err.contains("=None"), "{err}");
    assert!(!err.contains("gpu="), "{err}");
    let trials = sweep.trials();
    let mut complete = 0;
    for line in err.lines() {
        // Log lines as before: timestamp, level, target, message; then sweepd's summary.
        let level = line.split_whitespace().nth(1).unwrap_or_default();
        assert!(
            line.starts_with("sweepd: ")
                || (line.starts_with("20") && ["INFO", "WARN", "ERROR"].contains(&level)),
            "not a log line: {line:?}"
        );
        if !line.contains(" COMPLETE value=") {
            continue;
        }
        complete += 1;
        let number: i64 = line
            .split(" trial=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no trial number: {line}"));
        let params: Value = line
            .split(" params=")
            .nth(1)
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_else(|| panic!("no params: {line}"));
        let trial = trials.iter().find(|t| t["number"] == number).unwrap();
        assert_eq!(params, trial["params"], "{line}");
    }
    assert_eq!(complete, 6, "{err}");
}
