//! A slot's worker processes: started (argv, environment, the log, a persistent worker's
//! `ready`; a oneshot worker's params and result file) and retired (asked to exit, its group
//! killed, and on a GPU its memory seen released by NVML before the slot may start another
//! there), each step recorded in `sweepd_workers` and `sweepd_worker_events`.

use super::checkpoint;
use super::error::RunError;
use super::events::{Retirement, WorkerEvent};
use super::shared::Shared;
use crate::config::{Config, WorkerMode};
use crate::process::{self, Event, Message, SpawnSpec, Worker};
use crate::study::{Claimed, WorkerState};
use crate::{shortage, units};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The newest worker protocol this sweepd speaks (`SWEEPD_PROTOCOL`): 2 answers `suggest`
/// (define-by-run) and records `user_attr`; a worker that speaks 1 works unchanged.
pub(super) const PROTOCOL: &str = "2";

/// Grace between SIGTERM and SIGKILL when sweepd kills a worker group.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(3);

/// How long a retired worker's memory may take to disappear from NVML before sweepd says so.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Environment common to every worker: protocol variables, the helper on PYTHONPATH, the
/// device, the allocator settings, then the user's `[worker.env]`, which wins.
pub(super) fn worker_env(
    cfg: &Config,
    python_dir: Option<&std::path::Path>,
    worker_id: i64,
    device: Option<u32>,
) -> Vec<(String, String)> {
    let mode = match cfg.worker.mode {
        WorkerMode::Persistent => "persistent",
        WorkerMode::Oneshot => "oneshot",
    };
    let mut env = vec![
        ("SWEEPD_MODE".to_owned(), mode.to_owned()),
        ("SWEEPD_WORKER_ID".to_owned(), worker_id.to_string()),
        ("SWEEPD_STUDY".to_owned(), cfg.study.name.clone()),
        ("SWEEPD_DIRECTIONS".to_owned(), checkpoint::directions(cfg)),
        ("SWEEPD_PROTOCOL".to_owned(), PROTOCOL.to_owned()),
        // Workers' prints reach the log as they happen, not when a buffer fills.
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
    ];
    if let Some(dir) = python_dir {
        let mut path = dir.to_string_lossy().into_owned();
        if let Ok(old) = std::env::var("PYTHONPATH") {
            if !old.is_empty() {
                path = format!("{path}:{old}");
            }
        }
        env.push(("PYTHONPATH".to_owned(), path));
    }
    if let Some(d) = device {
        // NVML numbers devices in PCI bus order; CUDA must number them the same way.
        env.push(("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()));
        env.push(("CUDA_VISIBLE_DEVICES".to_owned(), d.to_string()));
    }
    env.extend(cfg.worker.allocator.env());
    for (k, v) in &cfg.worker.env {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// What a worker started under a memory cap of `cap` bytes on a device of `total` bytes finds
/// in its environment (`docs/protocol.md`): the cap itself, for the helper and for workers with
/// no framework, and JAX's own limit, which JAX reads once, when it starts.
pub(super) fn cap_env(cap: u64, total: Option<u64>) -> Vec<(String, String)> {
    let mut env = vec![("SWEEPD_MEMORY_CAP".to_owned(), cap.to_string())];
    if let Some(total) = total.filter(|t| *t > 0) {
        let fraction = (cap as f64 / total as f64).min(1.0);
        env.push((
            "XLA_PYTHON_CLIENT_PREALLOCATE".to_owned(),
            "false".to_owned(),
        ));
        env.push((
            "XLA_PYTHON_CLIENT_MEM_FRACTION".to_owned(),
            format!("{fraction:.3}"),
        ));
    }
    env
}

/// Slots whose worker start is waiting out a shortage now: the first says so, the last to
/// get through says it is over (one warning per burst, however many slots meet it).
static SHORT: AtomicUsize = AtomicUsize::new(0);

/// Runs `start` (a step of a worker's start) until it does not fail for a shortage that passes
/// (`shortage::temporary`: no descriptor, process or memory to spare for now), waiting longer
/// after each failure. `Ok(None)`: the study is stopping meanwhile. What a person must fix (a
/// missing program, a read-only log directory) is returned at once.
async fn through_shortages<T>(
    sh: &Shared,
    mut start: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<Option<T>> {
    let mut failures = 0u32;
    let since = Instant::now();
    let result = loop {
        match start() {
            Ok(v) => break Ok(Some(v)),
            Err(e) if shortage::temporary(&e) => {
                if failures == 0 && SHORT.fetch_add(1, Ordering::Relaxed) == 0 {
                    warn!("cannot start a worker for now ({e}): trying again until it can; its trial waits, uncharged");
                }
                failures = failures.saturating_add(1);
                tokio::select! {
                    _ = tokio::time::sleep(shortage::retry_delay(failures)) => {}
                    _ = sh.shutdown.cancelled() => break Ok(None),
                }
            }
            Err(e) => break Err(e),
        }
    };
    if failures > 0 && SHORT.fetch_sub(1, Ordering::Relaxed) == 1 {
        info!(
            "workers start again after {:.1}s short of resources",
            since.elapsed().as_secs_f64()
        );
    }
    result
}

/// Registers and spawns a worker process; `None` if the study stopped while the start waited
/// out a shortage of descriptors (or processes, or memory).
pub(super) async fn spawn_worker(
    slot: usize,
    sh: &Shared,
    device: Option<u32>,
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
) -> Result<Option<Worker>, RunError> {
    // One snapshot of the config for the whole spawn: a SIGHUP meanwhile must not give the
    // worker half of one config and half of the next.
    let cfg = sh.cfg();
    let id = sh.store.worker_created(&sh.study, slot, &sh.host).await?;
    let mut argv = cfg.worker.command.clone();
    argv.extend(extra_args);
    let mut env = worker_env(&cfg, sh.python_dir.as_deref(), id, device);
    env.extend(extra_env);
    let spec = SpawnSpec {
        argv: argv.clone(),
        env,
        cwd: cfg.worker.cwd.clone(),
        log_path: process::log_path(&cfg.worker.log_dir, id),
        log_max_bytes: cfg.worker.log_max_bytes,
        log_max_total: cfg.worker.log_max_total,
    };
    let w = match through_shortages(sh, || Worker::spawn(id, &spec)).await {
        Ok(Some(w)) => w,
        Ok(None) => {
            sh.store.worker_exited(id, None, None).await?;
            let why = "the study stopped while the start waited for resources";
            WorkerEvent::SpawnFailed(why)
                .record(&sh.store, Some(id), None)
                .await?;
            return Ok(None);
        }
        Err(source) => {
            sh.store.worker_exited(id, None, None).await?;
            WorkerEvent::SpawnFailed(&source.to_string())
                .record(&sh.store, Some(id), None)
                .await?;
            return Err(RunError::Spawn { argv, source });
        }
    };
    let start = process::proc_stat(w.pid as i32).map(|s| s.start_time);
    sh.store
        .worker_spawned(id, w.pid, start, &w.log_path)
        .await?;
    let spawned = WorkerEvent::Spawned {
        pid: w.pid,
        slot,
        device,
    };
    spawned.record(&sh.store, Some(id), None).await?;
    Ok(Some(w))
}

/// Starts a persistent worker and waits for its `ready`. The inner `Err` is a start failure
/// (reason, stderr tail) the slot may retry.
/// `cap`: the memory cap of its first trial and the device's total, for its environment (a
/// framework that reads its limit once keeps this one for the worker's life).
pub(super) async fn start_persistent(
    slot: usize,
    sh: &Shared,
    device: Option<u32>,
    cap: Option<(u64, Option<u64>)>,
) -> Result<Result<Worker, (String, String)>, RunError> {
    let env = cap.map_or_else(Vec::new, |(c, total)| cap_env(c, total));
    let Some(mut w) = spawn_worker(slot, sh, device, Vec::new(), env).await? else {
        return Ok(Err(("the study is stopping".to_owned(), String::new())));
    };
    w.spawn_cap = cap.map(|(c, _)| c);
    let deadline = tokio::time::sleep(sh.cfg().worker.startup_timeout);
    tokio::pin!(deadline);
    let failure = loop {
        tokio::select! {
            ev = w.next_event() => match ev {
                Event::Msg(Message::Ready { memory }) => {
                    took_memory(sh, &mut w, memory.as_ref());
                    sh.store.worker_state(w.id, WorkerState::Ready).await?;
                    WorkerEvent::Ready.record(&sh.store, Some(w.id), None).await?;
                    return Ok(Ok(w));
                }
                Event::Msg(Message::Memory { worker, .. }) => {
                    took_memory(sh, &mut w, Some(&worker));
                    continue;
                }
                Event::Msg(_) => continue,
                Event::Garbage(why) => break format!("sent garbage before `ready`: {why}"),
                Event::Closed => break "closed its protocol channel before `ready`".to_owned(),
                Event::Exited(status) => break format!("exited before `ready` ({})", process::describe_exit(status)),
            },
            _ = &mut deadline => break format!(
                "sent no `ready` within startup_timeout ({})",
                units::format_duration(sh.cfg().worker.startup_timeout)
            ),
            _ = sh.shutdown.cancelled() => break "the study is stopping".to_owned(),
        }
    };
    warn!(worker = w.id, "worker failed to start: {failure}");
    let stderr = w.stderr_tail();
    retire(sh, w, device, &Retirement::FailedToStart(failure.clone())).await?;
    Ok(Err((failure, stderr)))
}

/// What a worker's framework said of its process's memory (`ready`, `memory` messages): kept
/// with the worker, and its context, once measured, is what new workers are taken to hold; a
/// framework named holds the worker's trials to their caps, and makes the study's estimates
/// aim at the peak (`decide::aim`).
pub(super) fn took_memory(sh: &Shared, w: &mut Worker, said: Option<&process::WorkerMemory>) {
    let Some(said) = said else { return };
    w.memory.update(said);
    if let (Some(m), Some(c)) = (&sh.monitor, said.context) {
        m.context_seen(c);
    }
    // Its framework enforces the caps of the trials it runs (a trial it runs now, too).
    if let (Some(m), Some(f)) = (&sh.monitor, &said.framework) {
        m.framework_reported(w.pid as i32, f);
    }
}

/// Spawns a oneshot worker for one trial: params as `--name=value` and as JSON in env. `None`
/// if the study stopped while the start waited out a shortage.
pub(super) async fn start_oneshot(
    slot: usize,
    sh: &Shared,
    c: &Claimed,
    device: Option<u32>,
    cap: Option<(u64, Option<u64>)>,
) -> Result<Option<(Worker, PathBuf)>, RunError> {
    let params = sh.cfg().space.external_json(&c.params);
    let args = params
        .as_object()
        .expect("params render as an object")
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("--{k}={s}"),
            other => format!("--{k}={other}"),
        })
        .collect();
    let results = sh.cfg().worker.log_dir.join("results");
    let made = through_shortages(sh, || process::create_private_dir(&results))
        .await
        .map_err(|source| RunError::Spawn {
            argv: sh.cfg().worker.command.clone(),
            source,
        })?;
    if made.is_none() {
        return Ok(None);
    }
    let result_file = results.join(format!("trial-{}.result", c.trial_id));
    let _ = std::fs::remove_file(&result_file);
    let mut env = vec![
        ("SWEEPD_TRIAL_ID".to_owned(), c.trial_id.to_string()),
        ("SWEEPD_TRIAL_NUMBER".to_owned(), c.number.to_string()),
        ("SWEEPD_PARAMS".to_owned(), params.to_string()),
        (
            "SWEEPD_RESULT_FILE".to_owned(),
            result_file.to_string_lossy().into_owned(),
        ),
    ];
    if let Some((cap, total)) = cap {
        env.extend(cap_env(cap, total));
    }
    let cfg = sh.cfg();
    let best = sh.best_value();
    env.extend(checkpoint::env(
        &cfg,
        c,
        checkpoint::prepare(&cfg, c).as_ref(),
        best,
    ));
    let w = spawn_worker(slot, sh, device, args, env).await?;
    Ok(w.map(|mut w| {
        w.spawn_cap = cap.map(|(c, _)| c);
        (w, result_file)
    }))
}

/// Ends a worker for good: asks it to exit, kills its group if it does not, and on a GPU waits
/// until NVML no longer lists any of its processes (the verified context reset) before the
/// slot may start another worker there.
pub(super) async fn retire(
    sh: &Shared,
    mut w: Worker,
    device: Option<u32>,
    why: &Retirement,
) -> Result<(), RunError> {
    let pgid = w.pid as i32;
    let mut pids: Vec<u32> = process::group_members_off_runtime(pgid)
        .await
        .into_iter()
        .map(|p| p as u32)
        .collect();
    if !pids.contains(&w.pid) {
        pids.push(w.pid);
    }
    if w.exit_status().is_none() && !sh.kill_now.is_cancelled() {
        let _ = w.send(&json!({"type": "shutdown"})).await;
        tokio::select! {
            _ = w.wait_for_exit(Duration::from_secs(5)) => {}
            _ = sh.kill_now.cancelled() => {}
        }
    }
    let survivors = kill_group(sh, &mut w).await;
    if !survivors.is_empty() {
        // After a second Ctrl-C nothing was given time to exit: no warning, only the record.
        let at_once = sh.kill_now.is_cancelled();
        if !at_once {
            warn!(
                worker = w.id,
                ?survivors,
                "killed processes of the worker's group that outlived it"
            );
        }
        let killed = WorkerEvent::Killed {
            survivors: &survivors,
            at_once,
        };
        killed.record(&sh.store, Some(w.id), None).await?;
    }
    if let (Some(m), Some(d)) = (&sh.monitor, device) {
        m.retired(pgid);
        let start = Instant::now();
        loop {
            match m.still_listed(d, &pids).await {
                Ok(left) if left.is_empty() => break,
                // Stopping now: nothing will start on this device again, so no wait for the
                // release; what NVML still lists of the group is killed without a word.
                Ok(left) if sh.kill_now.is_cancelled() => {
                    for p in &left {
                        process::kill_pid(*p);
                    }
                    break;
                }
                Err(_) if sh.kill_now.is_cancelled() => break,
                Ok(left) if start.elapsed() >= RELEASE_WAIT => {
                    warn!(
                        worker = w.id,
                        gpu = d,
                        ?left,
                        "NVML still lists processes of a retired worker; killing them"
                    );
                    for p in &left {
                        process::kill_pid(*p);
                    }
                    let timeout = WorkerEvent::ReleaseTimeout {
                        device: d,
                        pids: &left,
                    };
                    timeout.record(&sh.store, Some(w.id), None).await?;
                    break;
                }
                Err(e) if start.elapsed() >= RELEASE_WAIT => {
                    warn!(gpu = d, "cannot verify the memory release: {e}");
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    let (code, signal) = w
        .exit_status()
        .map(process::code_and_signal)
        .unwrap_or((None, None));
    if why.restarts() {
        sh.metrics.worker_restarted();
    }
    w.mark(&format!("worker {} retired: {why}", w.id)).await;
    sh.store.worker_exited(w.id, code, signal).await?;
    WorkerEvent::Exited(why)
        .record(&sh.store, Some(w.id), None)
        .await?;
    if device.is_some() && !sh.kill_now.is_cancelled() {
        // Its memory is free: a trial waiting for it may start now, not at the next poll.
        sh.read_gpus().await;
        // Ours or another daemon's: our entry in the host's ledger no longer counts it idle.
        sh.core.lock().await.refresh_claims();
        sh.changed.notify_waiters();
    }
    Ok(())
}

/// Kills `w`'s group with the usual grace between SIGTERM and SIGKILL, unless sweepd is asked
/// to stop now (before or during the grace): then SIGKILL at once.
pub(super) async fn kill_group(sh: &Shared, w: &mut Worker) -> Vec<i32> {
    if sh.kill_now.is_cancelled() {
        return w.kill_group_now().await;
    }
    tokio::select! {
        survivors = w.kill_group(KILL_GRACE) => return survivors,
        _ = sh.kill_now.cancelled() => {}
    }
    w.kill_group_now().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    pub(super) fn a_workers_environment_comes_from_one_config() {
        let text = r#"
[study]
name = "env"
[storage]
url = "sqlite:///s.db"
[worker]
command = ["python3", "w.py"]
[worker.env]
PYTORCH_CUDA_ALLOC_CONF = "mine"
EXTRA = "1"
[params.x]
type = "float"
low = 0.0
high = 1.0
"#;
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::parse(text, &dir.path().join("supervisor.toml")).unwrap();
        let env: HashMap<String, String> =
            worker_env(&cfg, Some(std::path::Path::new("/opt/py")), 7, Some(2))
                .into_iter()
                .collect();
        assert_eq!(env["SWEEPD_WORKER_ID"], "7");
        assert_eq!(env["SWEEPD_STUDY"], "env");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "2");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert!(env["PYTHONPATH"].starts_with("/opt/py"));
        // The user's [worker.env] wins over the allocator preset, once.
        assert_eq!(env["PYTORCH_CUDA_ALLOC_CONF"], "mine");
        assert_eq!(env["EXTRA"], "1");
        let cpu = worker_env(&cfg, None, 7, None);
        assert!(cpu.iter().all(|(k, _)| k != "CUDA_VISIBLE_DEVICES"));
        assert_eq!(
            cpu.iter()
                .filter(|(k, _)| k == "PYTORCH_CUDA_ALLOC_CONF")
                .count(),
            1
        );
    }

    #[test]
    fn a_capped_worker_finds_its_cap_and_jaxs_fraction_of_the_device_in_its_environment() {
        let g = 1u64 << 30;
        let env: HashMap<String, String> = cap_env(6 * g, Some(24 * g)).into_iter().collect();
        assert_eq!(env["SWEEPD_MEMORY_CAP"], (6 * g).to_string());
        assert_eq!(env["XLA_PYTHON_CLIENT_PREALLOCATE"], "false");
        assert_eq!(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.250");
        // The device's total unknown: the cap alone, no fraction of nothing.
        let env = cap_env(6 * g, None);
        assert_eq!(env, [("SWEEPD_MEMORY_CAP".to_owned(), (6 * g).to_string())]);
        // Never more than the whole device.
        let env: HashMap<String, String> = cap_env(30 * g, Some(24 * g)).into_iter().collect();
        assert_eq!(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "1.000");
    }
}
