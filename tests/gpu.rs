//! GPU-aware parallelism on the simulator: the real daemon reads a fake libnvidia-ml through
//! the real nvml-wrapper path, and simulated GPU workers allocate memory in the fake's state.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

const X_PARAM: &str = r#"
[params.x]
type = "float"
low = 0.0
high = 1.0
"#;

/// A study of simulated GPU trials on `gpus`.
fn gpu_sweep(
    gpus: &[&str],
    n: u64,
    max_par: usize,
    gpu_extra: &str,
    env: &[(&str, &str)],
) -> (Sweep, FakeGpus) {
    let mut cfg = Cfg {
        n_trials: Some(n),
        max_par,
        command: gpu_sim_worker(),
        params: X_PARAM.into(),
        ..Cfg::default()
    };
    for (k, v) in env {
        cfg = cfg.env(k, v);
    }
    let gpu = format!(
        "devices = \"all\"\nheadroom = \"1GiB\"\nmax_par_per_device = 8\npoll_interval = \"100ms\"\n{gpu_extra}"
    );
    gpu_study(&cfg, gpus, &gpu)
}

fn parse_time(s: &str) -> f64 {
    let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap();
    t.and_utc().timestamp_micros() as f64 / 1e6
}

/// The most trials that ran at once on each device.
fn max_overlap_by_gpu(sweep: &Sweep) -> HashMap<i64, usize> {
    let rows = sweep.sql(
        "SELECT a.value_json || ' ' || t.datetime_start || ' ' || t.datetime_complete \
         FROM trials t JOIN trial_system_attributes a ON a.trial_id = t.trial_id AND a.key = 'sweepd:gpu' \
         WHERE t.datetime_complete IS NOT NULL",
    );
    let mut edges: HashMap<i64, Vec<(f64, i32)>> = HashMap::new();
    for r in rows {
        let parts: Vec<&str> = r.splitn(2, ' ').collect();
        let gpu: i64 = parts[0].parse().unwrap();
        // "YYYY-MM-DD HH:MM:SS.ffffff YYYY-MM-DD HH:MM:SS.ffffff"
        let times: Vec<&str> = parts[1].split(' ').collect();
        let start = parse_time(&format!("{} {}", times[0], times[1]));
        let end = parse_time(&format!("{} {}", times[2], times[3]));
        let e = edges.entry(gpu).or_default();
        e.push((start, 1));
        e.push((end, -1));
    }
    edges
        .into_iter()
        .map(|(gpu, mut e)| {
            e.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let (mut cur, mut best) = (0i32, 0i32);
            for (_, d) in e {
                cur += d;
                best = best.max(cur);
            }
            (gpu, best as usize)
        })
        .collect()
}

fn fails(sweep: &Sweep) -> Vec<Value> {
    sweep
        .trials()
        .into_iter()
        .filter(|t| t["state"] == "FAIL")
        .collect()
}

#[test]
fn par_rises_when_trials_are_small_and_falls_when_they_are_large() {
    let small_env = [
        ("SIM_MEM", "1G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.6"),
    ];
    let (small, _g1) = gpu_sweep(
        &["24G Fake A10"],
        16,
        8,
        "trial_memory = \"1GiB\"",
        &small_env,
    );
    let out = small.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let large_env = [
        ("SIM_MEM", "6G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.6"),
    ];
    let (large, _g2) = gpu_sweep(
        &["24G Fake A10"],
        8,
        8,
        "trial_memory = \"6GiB\"",
        &large_env,
    );
    let out = large.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let small_par = max_overlap_by_gpu(&small)[&0];
    let large_par = max_overlap_by_gpu(&large)[&0];
    assert!(small_par >= 5, "small trials packed {small_par} at once");
    // 24 GiB - 1 GiB headroom holds three 6.25 GiB trials, never four (which would OOM).
    assert_eq!(large_par, 3, "large trials");
    assert!(fails(&small).is_empty() && fails(&large).is_empty());
    // Every trial's peak was measured and stored.
    let peaks = large
        .sql("SELECT value_json FROM trial_system_attributes WHERE key = 'sweepd:peak_memory_mib'");
    assert_eq!(peaks.len(), 8);
    for p in peaks {
        let mib: f64 = p.parse().unwrap();
        assert!(
            (6000.0..=6400.0).contains(&mib),
            "peak {mib} MiB for a 6 GiB + 256 MiB trial"
        );
    }
    let samples = large.sql("SELECT COUNT(*) FROM sweepd_trial_memory");
    assert_ne!(samples, vec!["0"], "memory telemetry was sampled");
}

#[test]
fn a_foreign_process_taking_memory_lowers_par() {
    let env = [
        ("SIM_MEM", "6G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.5"),
    ];
    let (sweep, gpus) = gpu_sweep(&["24G Fake A10"], 4, 8, "trial_memory = \"6GiB\"", &env);
    // Someone else's job holds 12 GiB (this test's own pid, so it stays "alive").
    gpus.append(&format!("proc 0 {} 12G", std::process::id()));
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        max_overlap_by_gpu(&sweep)[&0],
        1,
        "24 - 12 - 1 GiB leaves room for one"
    );
    assert!(fails(&sweep).is_empty());
}

#[test]
fn trials_that_allocate_slowly_after_start_do_not_cause_over_admission() {
    // Nothing is allocated for the first 0.8 s of each trial: a scheduler that trusted NVML's
    // free memory alone would start all eight at once and run the card out of memory.
    let env = [
        ("SIM_MEM", "6G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_DELAY_START_S", "0.8"),
        ("SIM_HOLD_S", "0.3"),
    ];
    let (sweep, _g) = gpu_sweep(&["24G Fake A10"], 8, 8, "trial_memory = \"6GiB\"", &env);
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(fails(&sweep).is_empty(), "{:?}", fails(&sweep));
    assert!(max_overlap_by_gpu(&sweep)[&0] <= 3);
}

#[test]
fn two_devices_are_filled_independently_and_each_worker_sees_only_its_own() {
    let env = [
        ("SIM_MEM", "4G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.5"),
    ];
    let (sweep, gpus) = gpu_sweep(
        &["16G Fake T4", "16G Fake T4"],
        12,
        8,
        "trial_memory = \"4GiB\"",
        &env,
    );
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(fails(&sweep).is_empty());
    let overlap = max_overlap_by_gpu(&sweep);
    assert_eq!(overlap.len(), 2, "both devices ran trials: {overlap:?}");
    for (gpu, par) in &overlap {
        // 16 - 1 GiB holds three 4.25 GiB trials.
        assert!(*par >= 2 && *par <= 3, "gpu{gpu} ran {par} at once");
    }
    // Every worker process allocated on exactly one device: the one sweepd gave it.
    let state = std::fs::read_to_string(&gpus.state).unwrap();
    let mut devices_of: HashMap<String, HashSet<String>> = HashMap::new();
    for line in state.lines().filter(|l| l.starts_with("proc ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        devices_of
            .entry(f[2].to_owned())
            .or_default()
            .insert(f[1].to_owned());
    }
    assert!(devices_of.len() >= 2);
    for (pid, devs) in devices_of {
        assert_eq!(devs.len(), 1, "worker {pid} touched devices {devs:?}");
    }
}

#[test]
fn nvml_errors_pause_dispatch_on_that_device_and_recover() {
    let env = [
        ("SIM_MEM", "1G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "0.3"),
    ];
    let (sweep, gpus) = gpu_sweep(&["24G Fake A10"], 12, 2, "trial_memory = \"1GiB\"", &env);
    let mut child = sweep.spawn_run();
    wait_until(LIMIT, "two trials complete", || {
        sweep.db.exists() && sweep.count("COMPLETE") >= 2
    });
    // The GPU falls off the bus.
    gpus.append("fail nvmlDeviceGetMemoryInfo_v2 15");
    wait_until(LIMIT, "sweepd gpus shows the error", || {
        let out = sweep.sweepd(&["gpus", "--json"]).output().unwrap();
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        rows[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("memory"))
    });
    let started = |s: &Sweep| {
        s.sql("SELECT COUNT(*) FROM trials WHERE datetime_start IS NOT NULL")[0].clone()
    };
    // Let trials already running finish, then nothing new may start.
    std::thread::sleep(Duration::from_secs(2));
    let before = started(&sweep);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        started(&sweep),
        before,
        "no trial starts while the device cannot be read"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon is still running"
    );
    let text = String::from_utf8(sweep.sweepd(&["status"]).output().unwrap().stdout).unwrap();
    assert!(text.contains("NVML error"), "{text}");
    // Readings return: dispatch resumes and the study finishes.
    gpus.append("fail nvmlDeviceGetMemoryInfo_v2 0");
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
    assert_eq!(sweep.count("COMPLETE"), 12);
}

#[test]
fn no_driver_is_a_clear_error_and_devices_none_runs_cpu_only() {
    let (sweep, gpus) = gpu_sweep(&["24G Fake A10"], 2, 1, "", &[]);
    gpus.append("fail nvmlInit_v2 9");
    let out = sweep.run(&[], LIMIT);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("NVML could not be loaded") && err.contains("devices = \"none\""),
        "{err}"
    );
    // The same study CPU-only never touches NVML.
    let cpu = std::fs::read_to_string(&sweep.config)
        .unwrap()
        .replace("devices = \"all\"", "devices = \"none\"");
    std::fs::write(&sweep.config, cpu).unwrap();
    let out = sweep.run(&[], LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn gpus_command_shows_par_and_the_readings_it_came_from() {
    let env = [
        ("SIM_MEM", "6G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_HOLD_S", "1.0"),
    ];
    let (sweep, _g) = gpu_sweep(&["24G Fake A10"], 6, 8, "trial_memory = \"6GiB\"", &env);
    let child = sweep.spawn_run();
    wait_until(LIMIT, "three trials running", || {
        sweep.db.exists()
            && sweep.sql("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'") == vec!["3"]
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = sweep.sweepd(&["gpus", "--json"]).output().unwrap();
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &rows[0];
    assert_eq!(g["name"], "Fake A10");
    assert_eq!(g["total"].as_u64().unwrap(), 24 << 30);
    assert_eq!(g["running"], 3);
    assert_eq!(g["par_estimate"], 3);
    assert!(g["wait"].as_str().unwrap().contains("needs"), "{g}");
    let text = String::from_utf8(sweep.sweepd(&["gpus"]).output().unwrap().stdout).unwrap();
    assert!(text.contains("Fake A10") && text.contains("PAR"), "{text}");
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "{}", sweep.daemon_stderr());
}
