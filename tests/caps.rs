//! Memory caps on the simulator (issue 41): each GPU trial is told the memory it was admitted
//! with, and a trial that grows past its estimate fails alone at its cap, not its neighbours.
//! The worker (`tests/workers/cap_worker.py`) holds each trial to its cap as a framework's
//! allocator does, and "allocates" in the fake NVML's state.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const LIMIT: Duration = GPU_LIMIT;
const MIB: u64 = 1 << 20;

fn cap_worker() -> Vec<String> {
    vec![
        python(),
        repo()
            .join("tests/workers/cap_worker.py")
            .to_string_lossy()
            .into_owned(),
    ]
}

/// What the worker recorded of each trial it ran: `{"number", "mem", "cap", "outcome", "env"}`.
fn records(sweep: &Sweep) -> Vec<Value> {
    std::fs::read_to_string(sweep.path("caps.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A study of `mode` on one `card` (1 GiB headroom, `trial_memory` 2 GiB: the first trials are
/// admitted with 2.3 GiB, at the bound, as no worker has reported a framework yet) with
/// `trials` enqueued in order, each `(mem MiB, hold s, delay s)`.
fn run_capped(mode: &'static str, card: &str, trials: &[(u64, f64, f64)]) -> (Sweep, String) {
    let params = "[params.mem]\ntype = \"categorical\"\nchoices = [1024, 6144]\n\
                  [params.hold]\ntype = \"categorical\"\nchoices = [0.2, 2.0]\n\
                  [params.delay]\ntype = \"categorical\"\nchoices = [0.0, 1.0]\n";
    let cfg = Cfg {
        n_trials: Some(trials.len() as u64),
        max_par: 3,
        mode,
        command: cap_worker(),
        params: params.into(),
        ..Cfg::default()
    };
    let gpu = "devices = \"all\"\nheadroom = \"1GiB\"\ntrial_memory = \"2GiB\"\n\
               poll_interval = \"100ms\"\n";
    let (mut sweep, _gpus) = gpu_study(&cfg, &[card], gpu);
    let record = sweep.path("caps.jsonl").to_string_lossy().into_owned();
    sweep.env.push(("CAP_RECORD".into(), record));
    let trials: Vec<Value> = trials
        .iter()
        .map(|(mem, hold, delay)| serde_json::json!({"mem": mem, "hold": hold, "delay": delay}))
        .collect();
    let err = run_enqueued(&sweep, &trials);
    (sweep, err)
}

/// Creates study `t`, enqueues `trials` (their params, in order) through Optuna, runs the daemon
/// until the budget ends and returns its log, which must end with success.
fn run_enqueued(sweep: &Sweep, trials: &[Value]) -> String {
    sweep.optuna("optuna_create.py", &["t", "minimize", "0"]);
    let enqueue: Vec<String> = trials.iter().map(Value::to_string).collect();
    let mut args = vec!["t"];
    args.extend(enqueue.iter().map(String::as_str));
    sweep.optuna("optuna_enqueue.py", &args);
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    err
}

/// A study of three trials of the stand-in PyTorch's worker (`tests/workers/torch_sim_worker.py`,
/// a 256 MiB context) on one 8 GiB card with 1 GiB headroom and `trial_memory`, its PyTorch calls
/// logged to `torch-calls.log`; `params` its space.
fn torch_study(params: &str, trial_memory: &str) -> Sweep {
    let cfg = Cfg {
        n_trials: Some(3),
        max_par: 3,
        command: vec![
            python(),
            repo()
                .join("tests/workers/torch_sim_worker.py")
                .to_string_lossy()
                .into_owned(),
        ],
        params: params.into(),
        ..Cfg::default()
    }
    .env("FAKE_TORCH_CONTEXT", "256M");
    let gpu = format!(
        "devices = \"all\"\nheadroom = \"1GiB\"\ntrial_memory = \"{trial_memory}\"\n\
         poll_interval = \"100ms\"\n"
    );
    let (mut sweep, _gpus) = gpu_study(&cfg, &["8G Fake T4"], &gpu);
    let calls = sweep.path("torch-calls.log").to_string_lossy().into_owned();
    sweep.env.push(("FAKE_TORCH_CALLS".into(), calls));
    sweep
}

/// On an 8 GiB card, three trials start at the same 2.3 GiB guess: one grows at once to 6 GiB,
/// the two others allocate 1 GiB each a second later and hold it for 2 s. Uncapped, the large
/// one took the memory its neighbours were admitted with, and a neighbour died of OOM for it.
/// Capped, it alone fails, at its own cap, as kind `cap`, and is re-run with a larger cap until
/// it completes: the budget of three trials ends with three COMPLETE, the neighbours never
/// failed, and no re-run spent a retry or the budget.
#[test]
fn a_trial_that_grows_past_its_estimate_fails_alone_at_its_cap_and_completes_re_run_larger() {
    let trials = [(1024, 2.0, 1.0), (1024, 2.0, 1.0), (6144, 2.0, 0.0)];
    let (sweep, err) = run_capped("persistent", "8G Fake T4", &trials);
    let trials = sweep.trials();
    assert_eq!(sweep.count("COMPLETE"), 3, "{err}");
    let failed: Vec<&Value> = trials.iter().filter(|t| t["state"] == "FAIL").collect();
    assert!(
        !failed.is_empty(),
        "the large trial never reached its cap: {err}"
    );
    for t in &failed {
        assert_eq!(t["fail_kind"], "cap", "{t}");
        assert_eq!(t["params"]["mem"], 6144, "a neighbour failed: {t}");
        let reason = t["fail_reason"].as_str().unwrap();
        assert!(reason.starts_with("reached its memory cap of "), "{reason}");
    }
    // What the worker was told: every trial a cap, the re-runs larger each time, the last one
    // enough for its 6 GiB; the neighbours ran within theirs.
    let ran = records(&sweep);
    let caps: Vec<(u64, String)> = ran
        .iter()
        .filter(|r| r["mem"] == 6144)
        .map(|r| {
            (
                r["cap"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(caps.len(), failed.len() + 1, "{ran:?}");
    assert!(caps.windows(2).all(|w| w[1].0 > w[0].0), "{caps:?}");
    assert!(
        caps[..caps.len() - 1].iter().all(|(_, o)| o == "cap"),
        "{caps:?}"
    );
    let (last, outcome) = caps.last().unwrap();
    assert_eq!(outcome, "complete", "{caps:?}");
    assert!(*last >= 6144 * MIB, "{caps:?}");
    // The first was admitted at the guess (2 GiB x 1.15) less its worker's 256 MiB context:
    // no worker had reported a framework yet. Its re-runs, after the workers reported theirs,
    // at the peak.
    let first = caps[0].0 as f64 / MIB as f64;
    assert!((2095.0..2105.0).contains(&first), "{caps:?}");
    assert!(
        err.contains("estimates aim at the peak: workers enforce their memory caps (sim)"),
        "{err}"
    );
    for r in ran.iter().filter(|r| r["mem"] == 1024) {
        assert_eq!(r["outcome"], "complete", "{r}");
        assert!(r["cap"].as_u64().unwrap() >= 1024 * MIB, "{r}");
    }
    // The cap each ran under is recorded with the trial.
    let recorded = sweep
        .sql("SELECT COUNT(*) FROM trial_system_attributes WHERE key = 'sweepd:memory_cap_mib'");
    assert_eq!(recorded, vec![(failed.len() + 3).to_string()], "{err}");
    // No re-run counted against the OOM retries: the retry copies say no attempt.
    let attempts =
        sweep.sql("SELECT value_json FROM trial_system_attributes WHERE key = 'sweepd:attempts'");
    assert!(
        attempts
            .iter()
            .all(|a| !a.contains("oom") && !a.contains("cap")),
        "{attempts:?}"
    );
}

/// A oneshot worker finds its cap in its environment, with JAX's variables beside it: a
/// fraction of the device's total, preallocation off.
#[test]
fn a_oneshot_trial_finds_its_cap_and_jaxs_limit_in_its_environment() {
    let (sweep, err) = run_capped("oneshot", "24G Fake A10", &[(1024, 0.2, 0.0)]);
    assert_eq!(sweep.count("COMPLETE"), 1, "{err}");
    let ran = records(&sweep);
    assert_eq!(ran.len(), 1, "{ran:?}");
    let cap = ran[0]["cap"].as_u64().expect("a cap in SWEEPD_MEMORY_CAP");
    let env = &ran[0]["env"];
    assert_eq!(env["SWEEPD_MEMORY_CAP"], cap.to_string());
    assert_eq!(env["XLA_PYTHON_CLIENT_PREALLOCATE"], "false");
    let fraction: f64 = env["XLA_PYTHON_CLIENT_MEM_FRACTION"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let want = cap as f64 / (24u64 << 30) as f64;
    assert!((fraction - want).abs() < 0.001, "{fraction} for {cap}");
}

/// The issue's card: another job holds 22 of its 24 GiB. "A device with no trial of ours always
/// takes one" started trials into the 2 GiB it left, and they failed by OOM one after another,
/// spending the budget. Now the trial waits for that job, and `sweepd gpus` says so; once the
/// job is gone, every trial runs, none failed.
#[test]
fn a_card_another_job_fills_is_waited_for_not_tried() {
    let params = "[params.mem]\ntype = \"categorical\"\nchoices = [2048]\n";
    let cfg = Cfg {
        n_trials: Some(2),
        max_par: 2,
        command: cap_worker(),
        params: params.into(),
        ..Cfg::default()
    };
    let gpu = "devices = \"all\"\nheadroom = \"1GiB\"\ntrial_memory = \"2GiB\"\n\
               poll_interval = \"100ms\"\n";
    let (sweep, gpus) = gpu_study(&cfg, &["24G Fake A10"], gpu);
    let me = std::process::id();
    gpus.append(&format!("proc 0 {me} 22G"));
    let child = sweep.spawn_run();
    let wait = || -> String {
        let out = sweep.sweepd(&["gpus", "--json"]).output().unwrap();
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        rows[0]["wait"].as_str().unwrap_or_default().to_owned()
    };
    wait_until(LIMIT, "the wait for the other job in `sweepd gpus`", || {
        wait().ends_with("other processes hold 22.0 GiB here: waiting for them")
    });
    // Some polls later, still nothing started and nothing failed.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(running(&sweep), 0, "{}", sweep.daemon_stderr());
    assert!(fails(&sweep).is_empty(), "{:?}", fails(&sweep));
    gpus.append(&format!("proc 0 {me} 0"));
    let out = wait_output(child, LIMIT);
    let err = sweep.daemon_stderr();
    assert!(out.status.success(), "{err}");
    assert_eq!(sweep.count("COMPLETE"), 2, "{err}");
    assert!(fails(&sweep).is_empty(), "{:?}", fails(&sweep));
    assert!(
        err.contains("other processes hold 22.0 GiB here: waiting for them"),
        "{err}"
    );
}

/// Three 3 GiB trials (3.25 GiB with their workers' contexts) on a card whose NVML cannot name
/// our processes (`directive` in the fake's state): each must be measured by what its framework
/// reported, and the log must say which source the card uses and why. Before, NVML's list was
/// the only source: the trials held nothing by it, no peak was measured, and the memory model
/// never learned.
fn measured_by_their_frameworks(directive: &str, why: &str) {
    let params = "[params.mem]\ntype = \"categorical\"\nchoices = [3072]\n";
    let cfg = Cfg {
        n_trials: Some(3),
        max_par: 3,
        command: cap_worker(),
        params: params.into(),
        ..Cfg::default()
    }
    .env("CAP_HOLD_S", "1.0");
    let gpu = "devices = \"all\"\nheadroom = \"1GiB\"\ntrial_memory = \"3GiB\"\n\
               poll_interval = \"100ms\"\n";
    let (sweep, gpus) = gpu_study(&cfg, &["24G Fake A10"], gpu);
    gpus.append(directive);
    let out = sweep.run(&[], LIMIT);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sweep.count("COMPLETE"), 3, "{err}");
    assert!(fails(&sweep).is_empty(), "{:?}", fails(&sweep));
    assert!(err.contains(why), "{err}");
    // `sweepd gpus` says it too.
    let out = sweep.sweepd(&["gpus", "--json"]).output().unwrap();
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let source = rows[0]["source"].as_str().unwrap_or_default();
    assert!(
        why.starts_with(source) || source.starts_with(why),
        "{source}"
    );
    let text = sweep.sweepd(&["gpus"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    // Wrapped to 100 columns: compared word by word.
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words(&text).contains(&words(&format!("gpu 0: {why}"))),
        "{text}"
    );
    let peaks = sweep
        .sql("SELECT value_json FROM trial_system_attributes WHERE key = 'sweepd:peak_memory_mib'");
    assert_eq!(peaks.len(), 3, "{err}");
    for p in peaks {
        let mib: f64 = p.parse().unwrap();
        assert!((3300.0..3400.0).contains(&mib), "peak {mib} MiB: {err}");
    }
}

#[test]
fn trials_in_a_containers_pid_namespace_are_measured_by_their_frameworks() {
    measured_by_their_frameworks(
        "pid_offset 100000",
        "memory from the workers' frameworks: NVML lists no process of ours",
    );
}

#[test]
fn trials_without_memory_per_process_in_nvml_are_measured_by_their_frameworks() {
    measured_by_their_frameworks(
        "proc_memory_unavailable",
        "memory from the workers' frameworks: NVML gives no memory per process",
    );
}

/// The two halves together: the helper (`python/sweepd_worker.py`) holds a PyTorch trial to the
/// cap sweepd sent with `torch.cuda.set_per_process_memory_fraction` (the stand-in PyTorch of
/// `tests/standin`, its caching allocator and its OOM text), reports the cap it enforced, and
/// sweepd takes the OOM for a cap hit and re-runs the trial larger. Three trials start at the
/// same 2.3 GiB guess on an 8 GiB card; one grows to 6 GiB: it alone fails, as `cap`, and
/// completes re-run; its two 1 GiB neighbours never fail.
#[test]
fn the_helper_holds_a_pytorch_trial_to_its_cap_and_sweepd_re_runs_it_larger() {
    let params = "[params.mem]\ntype = \"categorical\"\nchoices = [1024, 6144]\n\
                  [params.hold]\ntype = \"categorical\"\nchoices = [2.0]\n";
    let sweep = torch_study(params, "2GiB");
    let enqueue = [1024, 1024, 6144].map(|m| serde_json::json!({"mem": m, "hold": 2.0}));
    let err = run_enqueued(&sweep, &enqueue);
    assert_eq!(sweep.count("COMPLETE"), 3, "{err}");
    let trials = sweep.trials();
    let failed: Vec<&Value> = trials.iter().filter(|t| t["state"] == "FAIL").collect();
    assert!(
        !failed.is_empty(),
        "the large trial never reached its cap: {err}"
    );
    for t in &failed {
        assert_eq!(t["fail_kind"], "cap", "{t}\n{err}");
        assert_eq!(t["params"]["mem"], 6144, "a neighbour failed: {t}");
    }
    // The helper called PyTorch's own API to hold each trial to its cap.
    let log = std::fs::read_to_string(sweep.path("torch-calls.log")).unwrap_or_default();
    assert!(log.contains("set_per_process_memory_fraction"), "{log}");
}

/// Under caps a study's first trials start at a small prior (a quarter of `trial_memory`: 1 GiB
/// here), not at `trial_memory` × 1.15, once its workers are known to keep to their caps. The
/// first trial is admitted before any worker exists, at the bound (4.6 GiB of an 8 GiB card);
/// its worker reports PyTorch, estimates then aim at the peak, and the next two start beside it
/// at 1 GiB each. The one of 512 MiB fits; the one of 3 GiB (in 512 MiB steps, as a framework
/// allocates) hits its cap, and is re-run at 1.5 times what it was admitted with at least, until
/// it completes. A cap hit just past the cap taught the model only its level × 1.25 before: a
/// re-run per 25% of growth. The neighbours never fail, and each hit says how long its attempt
/// ran.
#[test]
fn the_first_trial_starts_at_the_small_prior_hits_its_cap_and_completes_re_run_larger() {
    let params = "[params.mem]\ntype = \"categorical\"\nchoices = [512, 3072]\n\
                  [params.steps]\ntype = \"categorical\"\nchoices = [6]\n\
                  [params.hold]\ntype = \"categorical\"\nchoices = [2.0, 3.0]\n";
    let sweep = torch_study(params, "4GiB");
    let enqueue = [(512, 3.0), (512, 2.0), (3072, 2.0)]
        .map(|(m, h)| serde_json::json!({"mem": m, "steps": 6, "hold": h}));
    let err = run_enqueued(&sweep, &enqueue);
    assert_eq!(sweep.count("COMPLETE"), 3, "{err}");
    let admitted: Vec<&str> = err.lines().filter(|l| l.contains("admitted:")).collect();
    assert!(
        admitted[0].contains("expected peak 4.6 GiB: trial_memory (4.0 GiB) x 1.15"),
        "{err}"
    );
    assert!(
        err.contains("estimates aim at the peak: workers enforce their memory caps (torch)"),
        "{err}"
    );
    let small = "expected peak 1.0 GiB: trial_memory (4.0 GiB) x 0.25";
    for n in [1, 2] {
        let at = format!(" trial={n} ");
        assert!(
            admitted
                .iter()
                .any(|l| l.contains(small) && l.contains(&at)),
            "trial {n}: {err}"
        );
    }
    let trials = sweep.trials();
    let failed: Vec<&Value> = trials.iter().filter(|t| t["state"] == "FAIL").collect();
    assert!(
        !failed.is_empty(),
        "the 3 GiB trial never hit its cap: {err}"
    );
    for t in &failed {
        assert_eq!(t["fail_kind"], "cap", "{t}\n{err}");
        assert_eq!(t["params"]["mem"], 3072, "a neighbour failed: {t}");
        let reason = t["fail_reason"].as_str().unwrap();
        assert!(
            reason.starts_with("reached its memory cap of ") && reason.contains(" s: "),
            "{reason}"
        );
    }
    // The caps its attempts ran under (MiB), in order: the first from the small prior (1 GiB
    // less a context of 256 to 512 MiB), each re-run's at least 1.5 times the one before (its
    // admitted bytes × 1.5, less the context), the last holding its 3 GiB.
    let caps: Vec<f64> = sweep
        .sql(
            "SELECT a.value_json FROM trial_system_attributes a JOIN trial_params p \
             ON p.trial_id = a.trial_id AND p.param_name = 'mem' \
             WHERE a.key = 'sweepd:memory_cap_mib' AND p.param_value = 1 ORDER BY a.trial_id",
        )
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(caps.len(), failed.len() + 1, "{caps:?}\n{err}");
    assert!((500.0..780.0).contains(&caps[0]), "{caps:?}");
    assert!(
        caps.windows(2).all(|w| w[1] >= 1.5 * w[0] - 1.0),
        "{caps:?}"
    );
    assert!(*caps.last().unwrap() >= 3072.0, "{caps:?}");
}
