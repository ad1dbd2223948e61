//! GPU studies on the fake libnvidia-ml: one study, a second daemon on the same card, and two
//! daemons sharing one card through the host's ledger (`tests/gpu.rs`, `tests/hostile/`).

use super::*;
use serde_json::Value;
use std::collections::HashSet;

/// A hang guard for a GPU study, not a speed assertion.
pub const GPU_LIMIT: Duration = Duration::from_secs(180);

pub const X_PARAM: &str = r#"
[params.x]
type = "float"
low = 0.0
high = 1.0
"#;

/// A study of simulated GPU trials on `gpus`.
pub fn gpu_sweep(
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

/// A second study on the card `gpus` simulates: another daemon of the same host.
pub fn gpu_sweep_beside(
    gpus: &FakeGpus,
    n: u64,
    max_par: usize,
    gpu_extra: &str,
    env: &[(&str, &str)],
) -> Sweep {
    let (mut sweep, _own_card) = gpu_sweep(&["24G Fake A10"], n, max_par, gpu_extra, env);
    sweep.env = gpus.env();
    sweep
}

/// Waits for two daemons of one card, each of which must finish its study without a FAIL.
pub fn both_finish(a: &Sweep, ca: std::process::Child, b: &Sweep, cb: std::process::Child) {
    let oa = wait_output(ca, GPU_LIMIT);
    let ob = wait_output(cb, GPU_LIMIT);
    assert!(oa.status.success(), "{}", a.daemon_stderr());
    assert!(ob.status.success(), "{}", b.daemon_stderr());
    assert!(fails(a).is_empty(), "{:?}", fails(a));
    assert!(fails(b).is_empty(), "{:?}", fails(b));
}

/// The FAILed trials of `sweep`.
pub fn fails(sweep: &Sweep) -> Vec<Value> {
    sweep
        .trials()
        .into_iter()
        .filter(|t| t["state"] == "FAIL")
        .collect()
}

/// Two studies of six trials each on one 24 GiB card, four slots each, their trials taking
/// 6 GiB only 3 s after they start: daemon a runs three trials (which have allocated nothing
/// yet, so NVML shows the card free) when `before_b` is called and b starts. Both must finish
/// without a FAIL. A fourth trial would not fit
/// ([`most_holding_at_once`]): only the ledger tells b of a's trials still to claim.
pub fn two_daemons_on_one_card(before_b: impl FnOnce(&FakeGpus)) -> (Sweep, Sweep, FakeGpus) {
    let env = [
        ("SIM_MEM", "6G"),
        ("SIM_CONTEXT", "256M"),
        ("SIM_DELAY_START_S", "3"),
        ("SIM_HOLD_S", "0.4"),
    ];
    let (a, gpus) = gpu_sweep(&["24G Fake A10"], 6, 4, "trial_memory = \"6GiB\"", &env);
    let b = gpu_sweep_beside(&gpus, 6, 4, "trial_memory = \"6GiB\"", &env);
    let ca = a.spawn_run();
    wait_until(GPU_LIMIT, "daemon a runs three trials", || {
        a.db.exists() && a.sql("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'") == vec!["3"]
    });
    before_b(&gpus);
    let cb = b.spawn_run();
    both_finish(&a, ca, &b, cb);
    (a, b, gpus)
}

/// The most trials that held more than 1 GiB at once, replaying the fake card's log of
/// allocations.
pub fn most_holding_at_once(gpus: &FakeGpus) -> usize {
    let state = std::fs::read_to_string(&gpus.state).unwrap();
    let (mut holding, mut most) = (HashSet::new(), 0);
    for line in state.lines().filter(|l| l.starts_with("proc ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f[3].parse::<u64>().unwrap_or(0) > 1 << 30 {
            holding.insert(f[2].to_owned());
        } else {
            holding.remove(f[2]);
        }
        most = most.max(holding.len());
    }
    most
}

/// The host's GPU ledger of the fake card `gpus` (what `SWEEPD_LEDGER` names for its daemons).
pub fn ledger_of(gpus: &FakeGpus) -> PathBuf {
    gpus.state.with_file_name("gpu-ledger")
}
