//! `[notify]` through the daemon: the command runs off the daemon's path, so one that blocks or
//! fails holds no trial back (and its failure is logged), and the events carry the study's
//! figures as JSON on the command's stdin and in `SWEEPD_*` variables: a device lost, the
//! breaker opening (not a pause by hand), the periodic summary, the study finished.

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

/// A CPU study of one slot whose objective is `body` (Python, `trial` and `gate` in scope: `gate`
/// is the path of a file the test creates to let a trial go on), with `[notify]` keeping each
/// event's stdin as `EVENT.json`, its `SWEEPD_*` environment as `EVENT.env` and its name in
/// `events`, and `tail` appended to the config. Returns the study and the gate's path.
fn cpu_study(n_trials: u64, body: &str, tail: &str) -> (Sweep, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let script = d.join("worker.py");
    let gate = d.join("gate");
    std::fs::write(
        &script,
        format!(
            "import os, sys, time\n\
             sys.path.insert(0, sys.argv[1])\n\
             import sweepd_worker\n\
             gate = sys.argv[2]\n\
             def objective(trial):\n\
             \x20   x = trial.suggest_float('x', -1.0, 1.0)\n\
             {body}\n\
             sweepd_worker.serve(objective)\n"
        ),
    )
    .unwrap();
    let cfg = gated_study(n_trials, &script, &gate);
    let keep = format!(
        "cat > \"{0}/$SWEEPD_EVENT.json\"; \
         env | grep '^SWEEPD_' | sort > \"{0}/$SWEEPD_EVENT.env\"; \
         echo \"$SWEEPD_EVENT\" >> \"{0}/events\"",
        d.display()
    );
    let config = d.join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n{tail}\n[notify]\ncommand = [\"sh\", \"-c\", {}]\ntimeout = \"1m\"\n",
            cfg.to_toml(),
            serde_json::to_string(&keep).unwrap()
        ),
    )
    .unwrap();
    let sweep = Sweep::at(dir, config, d.join("study.db"));
    (sweep, gate)
}

/// The `SWEEPD_*` variables an event's command ran with.
fn env_at(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn the_breaker_opening_on_a_cpu_study_runs_the_command_with_a_breaker_event() {
    // Every trial fails out of memory, never retried: the second failure in a row quarantines
    // the CPU "device" for a minute, and no trial starts.
    let (sweep, _gate) = cpu_study(
        10,
        "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')",
        "[retry]\noom = 0\nbreaker_threshold = 2\nbreaker_backoff = \"10m\"\n",
    );
    let mut daemon = sweep.spawn_run();
    let json = sweep.path("breaker.json");
    wait_until(LIMIT, "the breaker event to reach the command", || {
        sweep.path("breaker.env").exists() && std::fs::metadata(&json).unwrap().len() > 0
    });
    let event = json_at(&json);
    assert_eq!(event["event"], "breaker", "{event}");
    assert_eq!(event["study"], "t", "{event}");
    let message = event["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "the circuit breaker stopped the study's trials: paused: every device is \
             quarantined after 2 consecutive failures"
        ),
        "{event}"
    );
    let env = env_at(&sweep.path("breaker.env"));
    assert_eq!(env["SWEEPD_EVENT"], "breaker", "{env:?}");
    assert_eq!(env["SWEEPD_STUDY"], "t", "{env:?}");
    assert_eq!(env["SWEEPD_MESSAGE"], message, "{env:?}");
    assert_eq!(env["SWEEPD_AT"], event["at"].as_str().unwrap(), "{env:?}");
    assert_eq!(sweep.count("FAIL"), 2, "{:?}", sweep.trials());
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    assert_eq!(
        std::fs::read_to_string(sweep.path("events")).unwrap(),
        "breaker\n",
        "sent once"
    );
}

/// `[notify] summary_every`'s least allowed value is one minute (`notify.summary_every`'s
/// check), so this test runs for a little over a minute: a summary is due one period after
/// the daemon starts.
#[test]
fn a_summary_is_sent_every_summary_every_with_the_study_s_figures() {
    // Trial 0 completes; trial 1 runs until the test opens the gate.
    let (sweep, gate) = cpu_study(
        2,
        "    if trial.number == 1:\n\
         \x20       while not os.path.exists(gate):\n\
         \x20           time.sleep(0.05)\n\
         \x20   return x * x",
        "",
    );
    let mut toml = std::fs::read_to_string(&sweep.config).unwrap();
    toml.push_str("summary_every = \"1m\"\n");
    std::fs::write(&sweep.config, toml).unwrap();
    let daemon = sweep.spawn_run();
    let json = sweep.path("summary.json");
    wait_until(
        Duration::from_secs(240),
        "the summary to reach the command",
        || sweep.path("summary.env").exists() && std::fs::metadata(&json).unwrap().len() > 0,
    );
    let trials = sweep.trials();
    let done = &trials[0];
    assert_eq!(done["state"], "COMPLETE", "{trials:?}");
    assert_eq!(trials[1]["state"], "RUNNING", "{trials:?}");
    let event = json_at(&json);
    assert_eq!(event["event"], "summary", "{event}");
    assert_eq!(event["finished"], 1, "{event}");
    assert_eq!(event["n_trials"], 2, "{event}");
    assert_eq!(event["running"], 1, "{event}");
    assert_eq!(event["best_trial"], 0, "{event}");
    assert_eq!(event["best_value"], done["value"], "{event}");
    assert_eq!(
        event["gpu_hours"],
        Value::Null,
        "a CPU study counts none: {event}"
    );
    let message = format!(
        "1/2 trials finished, 1 running, best {} (trial 0)",
        done["value"].as_f64().unwrap()
    );
    assert_eq!(event["message"], message, "{event}");
    let env = env_at(&sweep.path("summary.env"));
    assert_eq!(env["SWEEPD_EVENT"], "summary", "{env:?}");
    assert_eq!(env["SWEEPD_MESSAGE"], message, "{env:?}");
    std::fs::write(&gate, "").unwrap();
    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    let events = std::fs::read_to_string(sweep.path("events")).unwrap();
    assert_eq!(events, "summary\nfinished\n", "one summary in a minute");
}

/// `sweepd pause` is the owner's doing, not the breaker's: the daemon told the notify command
/// "the circuit breaker stopped the study's trials: paused by ...".
#[test]
fn a_pause_by_hand_was_notified_as_the_breaker() {
    let (sweep, gate) = cpu_study(
        2,
        "    while not os.path.exists(gate):\n\
         \x20       time.sleep(0.05)\n\
         \x20   return x * x",
        "",
    );
    let daemon = sweep.spawn_run();
    wait_until(LIMIT, "a trial RUNNING", || running(&sweep) == 1);
    let out = sweep.sweepd(&["pause"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The daemon row says PAUSED once the housekeeping pass that read the pause has sent
    // what it was news of.
    wait_until(LIMIT, "the daemon row to say PAUSED", || {
        sweep.sql("SELECT state FROM sweepd_daemon") == vec!["PAUSED"]
    });
    let out = sweep.sweepd(&["resume"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&gate, "").unwrap();
    let out = wait_output(daemon, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    // The notifier runs its queue in order and empties it before the daemon exits.
    let events = std::fs::read_to_string(sweep.path("events")).unwrap();
    assert_eq!(events, "finished\n");
}
