//! Faults on the simulator: every way a GPU trial dies is classified, recorded and handled
//! (retry, replace the worker, infeasible, pause), and the daemon stays up.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

fn params(extra: &str) -> String {
    format!("[params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n{extra}")
}

/// A simulated GPU study on one 24 GiB card; `tail` is appended to the config (tables such as
/// [retry]).
fn sim_sweep(
    n: u64,
    max_par: usize,
    env: &[(&str, &str)],
    params: &str,
    tail: &str,
) -> (Sweep, FakeGpus) {
    let mut cfg = Cfg {
        n_trials: Some(n),
        max_par,
        command: gpu_sim_worker(),
        params: params.into(),
        ..Cfg::default()
    };
    for (k, v) in env {
        cfg = cfg.env(k, v);
    }
    let gpu =
        format!("headroom = \"1GiB\"\ntrial_memory = \"1GiB\"\npoll_interval = \"100ms\"\n{tail}");
    gpu_study(&cfg, &["24G Fake A10"], &gpu)
}

fn by_number(trials: &[Value], n: i64) -> &Value {
    trials.iter().find(|t| t["number"] == n).expect("trial")
}

fn attr(sweep: &Sweep, number: i64, key: &str) -> Option<String> {
    sweep
        .sql(&format!(
            "SELECT a.value_json FROM trial_system_attributes a JOIN trials t USING (trial_id) \
             WHERE t.number = {number} AND a.key = '{key}'"
        ))
        .into_iter()
        .next()
}

/// Each fault, injected in trial 1 of a one-at-a-time study, is classified as `kind`.
fn fault_is_classified(
    var: &str,
    kind: &str,
    reason_has: &str,
    extra_env: &[(&str, &str)],
    tail: &str,
) {
    let mut env = vec![(var, "1"), ("SIM_MEM", "1G"), ("SIM_HOLD_S", "0.05")];
    env.extend_from_slice(extra_env);
    let (sweep, _g) = sim_sweep(4, 1, &env, &params(""), tail);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{var}: {}", stderr(&out));
    let trials = sweep.trials();
    let t = by_number(&trials, 1);
    assert_eq!(t["state"], "FAIL", "{var}: {t}");
    assert_eq!(t["fail_kind"], kind, "{var}: {t}");
    let reason = t["fail_reason"].as_str().unwrap();
    assert!(
        reason.contains(reason_has),
        "{var}: reason {reason:?} lacks {reason_has:?}"
    );
    // Nothing lost, nothing counted twice: the budget of 4 final outcomes is met exactly.
    let finals = trials
        .iter()
        .filter(|t| {
            t["state"] == "COMPLETE"
                || (t["state"] == "FAIL"
                    && attr(&sweep, t["number"].as_i64().unwrap(), "sweepd:retried_as").is_none())
        })
        .count();
    assert_eq!(finals, 4, "{var}: {trials:?}");
    assert!(trials.iter().all(|t| t["state"] != "RUNNING"));
}

#[test]
fn device_side_assert_is_cuda_fatal_and_replaces_the_worker() {
    fault_is_classified("SIM_ASSERT_ON", "cuda_fatal", "device-side assert", &[], "");
}

#[test]
fn illegal_memory_access_is_cuda_fatal() {
    fault_is_classified(
        "SIM_ILLEGAL_ON",
        "cuda_fatal",
        "illegal memory access",
        &[],
        "",
    );
}

#[test]
fn abort_after_a_device_side_assert_is_cuda_fatal_from_stderr() {
    fault_is_classified(
        "SIM_ASSERT_ON",
        "cuda_fatal",
        "device-side assert",
        &[("SIM_ABORT_AFTER_ASSERT", "1")],
        "",
    );
}

#[test]
fn segfault_is_killed() {
    fault_is_classified("SIM_SEGV_ON", "killed", "SIGSEGV", &[], "");
}

#[test]
fn kernel_oom_killer_sigkill_is_killed_with_a_hint() {
    fault_is_classified("SIM_OOMKILL_ON", "killed", "OOM killer", &[], "");
}

#[test]
fn jax_and_tensorflow_out_of_memory_are_oom() {
    fault_is_classified("SIM_JAX_OOM_ON", "oom", "", &[], "");
    fault_is_classified("SIM_TF_OOM_ON", "oom", "", &[], "");
}

#[test]
fn silent_worker_is_a_hang_after_heartbeat_timeout() {
    let tail = "";
    let mut env = vec![
        ("SIM_HANG_ON", "1"),
        ("SIM_MEM", "1G"),
        ("SIM_HOLD_S", "0.05"),
    ];
    env.push(("SIM_CONTEXT", "100M"));
    let (sweep, _g) = sim_sweep(3, 1, &env, &params(""), tail);
    let toml = std::fs::read_to_string(&sweep.config).unwrap().replace(
        "log_dir = \"logs\"",
        "log_dir = \"logs\"\nheartbeat_timeout = \"1s\"",
    );
    std::fs::write(&sweep.config, toml).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    assert_eq!(by_number(&trials, 1)["fail_kind"], "hang");
    // Retried once ([retry] crash = 1), and the copy completed.
    assert_eq!(sweep.count("COMPLETE"), 3);
}

#[test]
fn oom_is_retried_then_a_trial_too_large_alone_is_infeasible() {
    // Param `mem` in MiB: 30 GiB never fits the 24 GiB card, even alone.
    let p = params("[params.mem]\ntype = \"categorical\"\nchoices = [1024, 30720]\n");
    // The breaker is about repeated failures in general; it would pause this study for a
    // minute when several large trials OOM in a row, which is not what this test pins.
    let (sweep, _g) = sim_sweep(
        12,
        2,
        &[("SIM_HOLD_S", "0.05")],
        &p,
        "[retry]\noom = 2\nbreaker_threshold = 100\n",
    );
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    let big: Vec<&Value> = trials
        .iter()
        .filter(|t| t["params"]["mem"] == 30720)
        .collect();
    assert!(!big.is_empty(), "the sampler proposed the large config");
    // A retry copy may still wait when the budget filled up: it never ran.
    for t in big.iter().filter(|t| t["state"] != "WAITING") {
        assert_eq!(t["state"], "FAIL", "{t}");
        assert_eq!(t["fail_kind"], "oom");
        assert!(t["fail_reason"]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"));
    }
    // At least one large trial ran alone and was judged infeasible: no retry, and Optuna's
    // `constraints` attribute says so (samplers avoid the region).
    let infeasible: Vec<&&Value> = big
        .iter()
        .filter(|t| {
            t["fail_reason"]
                .as_str()
                .is_some_and(|r| r.contains("infeasible"))
        })
        .collect();
    assert!(!infeasible.is_empty(), "{big:?}");
    for t in infeasible {
        let n = t["number"].as_i64().unwrap();
        assert_eq!(attr(&sweep, n, "constraints").as_deref(), Some("[1.0]"));
        assert!(attr(&sweep, n, "sweepd:retried_as").is_none());
    }
    // Small trials all completed.
    assert!(trials
        .iter()
        .filter(|t| t["params"]["mem"] == 1024)
        .all(|t| t["state"] == "COMPLETE"));
}

#[test]
fn one_param_value_that_always_asserts_fails_only_those_trials() {
    let p =
        params("[params.act]\ntype = \"categorical\"\nchoices = [\"relu\", \"bad\", \"gelu\"]\n");
    let env = [
        ("SIM_ASSERT_PARAM", "act=bad"),
        ("SIM_MEM", "512M"),
        ("SIM_HOLD_S", "0.02"),
    ];
    let (sweep, _g) = sim_sweep(15, 2, &env, &p, "[retry]\nbreaker_threshold = 50\n");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let trials = sweep.trials();
    // A retry copy may still wait when the budget filled up: it never ran.
    for t in trials.iter().filter(|t| t["state"] != "WAITING") {
        if t["params"]["act"] == "bad" {
            assert_eq!(t["state"], "FAIL", "{t}");
            assert_eq!(t["fail_kind"], "cuda_fatal");
        } else {
            assert_eq!(t["state"], "COMPLETE", "{t}");
        }
    }
    assert!(trials.iter().any(|t| t["params"]["act"] == "bad"));
}

#[test]
fn every_trial_asserting_pauses_the_study_instead_of_looping() {
    let env = [
        (
            "SIM_ASSERT_ON",
            "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19",
        ),
        ("SIM_MEM", "512M"),
    ];
    let tail =
        "[retry]\nbreaker_threshold = 4\nbreaker_backoff = \"1h\"\nbreaker_max_backoff = \"2h\"\n";
    let (sweep, _g) = sim_sweep(100, 1, &env, &params(""), tail);
    let child = sweep.spawn_run();
    let status = || -> Value {
        let out = sweep.sweepd(&["status", "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    wait_until(LIMIT, "the study pauses", || {
        status()["daemon"]["state"] == "PAUSED"
    });
    let s = status();
    assert!(
        s["daemon"]["detail"]
            .as_str()
            .unwrap()
            .contains("sweepd resume"),
        "{s}"
    );
    let text = String::from_utf8(sweep.sweepd(&["status"]).output().unwrap().stdout).unwrap();
    assert!(
        text.contains("PAUSED") && text.contains("quarantined"),
        "{text}"
    );
    // Paused means paused: no new attempts while it is.
    let n = sweep.trials().len();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(sweep.trials().len(), n);
    assert!(n <= 6, "{n} attempts before pausing");
    // `sweepd resume` lifts it: trials run (and fail) again, then it pauses again.
    assert!(sweep.sweepd(&["resume"]).output().unwrap().status.success());
    wait_until(LIMIT, "new attempts after resume", || {
        sweep.trials().len() > n
    });
    wait_until(LIMIT, "paused again", || {
        status()["daemon"]["state"] == "PAUSED"
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    assert!(sweep.trials().iter().all(|t| t["state"] != "RUNNING"));
}

#[test]
fn a_cuda_fatal_worker_leaves_no_process_and_no_memory_behind() {
    // The worker has a DataLoader child holding 2 GiB of its own.
    let record = tempfile::NamedTempFile::new().unwrap();
    let env = [
        ("SIM_ASSERT_ON", "1"),
        ("SIM_CHILD_MEM", "2G"),
        ("SIM_MEM", "1G"),
        ("SIM_RECORD", record.path().to_str().unwrap()),
    ];
    let (sweep, gpus) = sim_sweep(3, 1, &env, &params(""), "");
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let pids: Vec<i32> = std::fs::read_to_string(record.path())
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!pids.is_empty());
    // Every pid that ever held memory on the fake GPU: workers and their children.
    let state = std::fs::read_to_string(&gpus.state).unwrap();
    let holders: Vec<i32> = state
        .lines()
        .filter(|l| l.starts_with("proc "))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .filter(|p| *p != std::process::id() as i32)
        .collect();
    assert!(holders.len() > pids.len(), "children held memory too");
    for p in holders {
        assert!(!alive(p), "process {p} of a retired worker survived");
    }
}

#[test]
fn fragmentation_ooms_without_recycling_and_runs_hundreds_with_it() {
    // Each trial peaks at 4 GiB on top of a baseline that grows 1 GiB per trial it served
    // (reserved but unallocated): a long-lived worker runs out of memory within ~20 trials.
    let env = [
        ("SIM_MEM", "4G"),
        ("SIM_FRAG_PER_TRIAL", "1G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_STEPS", "1"),
        ("SIM_RAMP_S", "0"),
        ("SIM_HOLD_S", "0"),
    ];
    let (no_recycle, _g1) = sim_sweep(
        40,
        1,
        &env,
        &params(""),
        "[retry]\noom = 0\nbreaker_threshold = 100\n",
    );
    let out = no_recycle.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let ooms = no_recycle
        .trials()
        .iter()
        .filter(|t| t["fail_kind"] == "oom")
        .count();
    assert!(
        ooms > 0,
        "fragmentation must eventually OOM without recycling"
    );
    let (recycled, _g2) = sim_sweep(200, 1, &env, &params(""), "[retry]\noom = 0\n");
    let toml = std::fs::read_to_string(&recycled.config).unwrap().replace(
        "log_dir = \"logs\"",
        "log_dir = \"logs\"\nrecycle_after = 10",
    );
    std::fs::write(&recycled.config, toml).unwrap();
    let out = recycled.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        recycled.count("COMPLETE"),
        200,
        "no OOM with recycle_after = 10"
    );
    let workers = recycled.sql("SELECT COUNT(*) FROM sweepd_workers");
    assert_eq!(workers, vec!["20"]);
}

#[test]
fn allocator_settings_reach_every_worker_unless_the_user_set_them() {
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let script = tempfile::Builder::new().suffix(".py").tempfile().unwrap();
    std::fs::write(
        script.path(),
        format!(
            "import os, sweepd_worker\n\
             keys = ['PYTORCH_CUDA_ALLOC_CONF', 'PYTORCH_ALLOC_CONF', 'XLA_PYTHON_CLIENT_PREALLOCATE', 'TF_FORCE_GPU_ALLOW_GROWTH', 'CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER']\n\
             open({:?}, 'a').write(' '.join(k + '=' + os.environ.get(k, '-') for k in keys) + '\\n')\n\
             sweepd_worker.serve(lambda t: 1.0)\n",
            out_file.path()
        ),
    )
    .unwrap();
    let cfg = Cfg {
        n_trials: Some(1),
        max_par: 1,
        command: vec![python(), script.path().to_string_lossy().into_owned()],
        params: params(""),
        ..Cfg::default()
    }
    .env("TF_FORCE_GPU_ALLOW_GROWTH", "false");
    let toml = format!("{}\n[gpu]\npoll_interval = \"100ms\"\n", cfg.to_toml());
    let mut sweep = Sweep::with_toml(&toml);
    let fake = FakeGpus::new(sweep.dir.path(), &["24G Fake A10", "24G Fake A10"]);
    sweep.env = fake.env();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = std::fs::read_to_string(out_file.path()).unwrap();
    assert!(
        seen.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{seen}"
    );
    assert!(
        seen.contains("PYTORCH_ALLOC_CONF=expandable_segments:True"),
        "{seen}"
    );
    assert!(
        seen.contains("XLA_PYTHON_CLIENT_PREALLOCATE=false"),
        "{seen}"
    );
    assert!(
        seen.contains("TF_FORCE_GPU_ALLOW_GROWTH=false"),
        "the user's value wins: {seen}"
    );
    assert!(seen.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"), "{seen}");
    assert!(
        seen.contains("CUDA_VISIBLE_DEVICES=0") || seen.contains("CUDA_VISIBLE_DEVICES=1"),
        "{seen}"
    );
    // `sweepd check` prints the final env.
    let check = sweep.sweepd(&["check"]).output().unwrap();
    let text = String::from_utf8(check.stdout).unwrap();
    assert!(
        text.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{text}"
    );
    assert!(text.contains("TF_FORCE_GPU_ALLOW_GROWTH=false"), "{text}");
}
