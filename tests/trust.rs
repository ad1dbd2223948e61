//! Regression tests for failures found by running sweepd as an adversary would: each test is
//! named after the failure it pins and failed before its fix.

mod common;

use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_worker_closing_its_channel_mid_trial_does_not_stall_the_study() {
    // No trial_timeout and no heartbeat_timeout: only the closed channel can end trial 1,
    // whose worker closes it and then sleeps for an hour.
    let record = tempfile::NamedTempFile::new().unwrap();
    let cfg = Cfg {
        n_trials: Some(4),
        max_par: 1,
        ..Cfg::default()
    }
    .env("SWEEPD_TEST_CLOSE_ON", "1")
    .env("SWEEPD_TEST_RECORD", record.path().to_str().unwrap());
    let sweep = Sweep::new(&cfg);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let failed = &trials[1];
    assert_eq!(failed["state"], "FAIL", "{failed}");
    assert_eq!(failed["fail_kind"], "worker_died");
    assert!(
        failed["fail_reason"]
            .as_str()
            .unwrap()
            .contains("closed its protocol channel"),
        "{failed}"
    );
    // Retried by the crash policy: the same params ran again and completed.
    assert_eq!(trials[2]["params"], failed["params"]);
    assert_eq!(trials[2]["state"], "COMPLETE");
    assert_eq!(sweep.count("COMPLETE"), 4);
    // The sleeping worker's group was killed.
    for (pid, _) in recorded(record.path()) {
        assert!(!alive(pid), "worker {pid} outlived the run");
    }
}
