//! `[notify]` through the daemon: the command runs off the daemon's path, so one that blocks or
//! fails holds no trial back (and its failure is logged), and the events carry the study's
//! figures as JSON on the command's stdin.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = GPU_LIMIT;

/// Appends a `[notify]` table running `script` under `sh -c` to the study's config.
fn notify_with(sweep: &Sweep, script: &str) {
    let mut toml = std::fs::read_to_string(&sweep.config).unwrap();
    toml.push_str(&format!(
        "\n[notify]\ncommand = [\"sh\", \"-c\", {}]\ntimeout = \"5m\"\n",
        serde_json::to_string(script).unwrap()
    ));
    std::fs::write(&sweep.config, toml).unwrap();
}

fn json_at(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn a_notify_command_that_blocks_then_fails_holds_no_trial_back_and_its_failure_is_logged() {
    let env = [
        ("SIM_MEM", "1G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.3"),
    ];
    let (sweep, gpus) = gpu_sweep(&["24G Fake A10"], 12, 2, "trial_memory = \"1GiB\"", &env);
    let d = sweep.dir.path().display().to_string();
    let gate = format!("{d}/gate");
    // Every event's stdin is kept; `device_lost` blocks until the test opens the gate, then
    // fails as a webhook that cannot be reached does.
    notify_with(
        &sweep,
        &format!(
            "cat > \"{d}/$SWEEPD_EVENT.json\"; echo \"$SWEEPD_EVENT\" >> \"{d}/events\"; \
             if [ \"$SWEEPD_EVENT\" = device_lost ]; then \
               while [ ! -e \"{gate}\" ]; do sleep 0.05; done; \
               echo 'hooks.example.com: connection refused' >&2; exit 7; \
             fi"
        ),
    );
    let child = sweep.spawn_run();
    wait_until(LIMIT, "two trials complete", || {
        sweep.db.exists() && sweep.count("COMPLETE") >= 2
    });
    // The GPU falls off the bus: the notify command runs, and blocks.
    gpus.append("fail nvmlDeviceGetMemoryInfo_v2 15");
    let lost = sweep.path("device_lost.json");
    wait_until(LIMIT, "the device_lost event to reach the command", || {
        lost.exists() && std::fs::metadata(&lost).unwrap().len() > 0
    });
    let before = sweep.count("COMPLETE");
    assert!(before < 12, "trials are left to run after the event");
    // The readings return: every trial left runs while the command still blocks.
    gpus.append("fail nvmlDeviceGetMemoryInfo_v2 0");
    wait_until(LIMIT, "every trial to complete", || {
        sweep.count("COMPLETE") == 12
    });
    let events = std::fs::read_to_string(sweep.path("events")).unwrap();
    assert_eq!(
        events, "device_lost\n",
        "the blocked run is still the only one"
    );
    std::fs::write(&gate, "").unwrap();
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    let log = sweep.daemon_stderr();
    let failed = log
        .lines()
        .find(|l| l.contains("notify: the command failed"))
        .unwrap_or_else(|| panic!("no failure logged in {log}"));
    assert!(
        failed.contains("exit code 7") && failed.contains("hooks.example.com: connection refused"),
        "{failed}"
    );
    let lost = json_at(&lost);
    assert_eq!(lost["event"], "device_lost");
    assert_eq!(lost["device"], 0);
    assert!(
        lost["message"]
            .as_str()
            .unwrap()
            .starts_with("GPU 0 stopped answering: "),
        "{lost}"
    );
    // The finished event followed, with the study's figures.
    let finished = json_at(&sweep.path("finished.json"));
    let best = sweep
        .trials()
        .into_iter()
        .filter(|t| t["state"] == "COMPLETE")
        .min_by(|a, b| {
            a["value"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["value"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(finished["event"], "finished");
    assert_eq!(finished["study"], "t");
    assert_eq!(finished["finished"], 12);
    assert_eq!(finished["n_trials"], 12);
    assert_eq!(finished["running"], 0);
    assert_eq!(finished["best_trial"], best["number"]);
    assert_eq!(finished["best_value"], best["value"]);
    assert_eq!(finished["dropped"], 0);
    assert!(
        finished["message"]
            .as_str()
            .unwrap()
            .starts_with("study done: 12/12 trials finished ([study] n_trials); "),
        "{finished}"
    );
    assert_eq!(
        std::fs::read_to_string(sweep.path("events")).unwrap(),
        "device_lost\nfinished\n"
    );
}
