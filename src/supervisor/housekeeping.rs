//! The housekeeping task: once a second (or GPU poll interval) it reads the GPUs, takes the
//! CLI's requests (`sweepd resume`), learns other processes' trials (`Core::catch_up`), keeps
//! the daemon's row, `systemctl status` line and the watchdog current, puts back sweepd's
//! triggers when an Optuna migration dropped them, and notices a study deleted from the
//! database. Every pass wakes the slots waiting for room.

use super::core::Core;
use super::{study_deleted_under_us, Shared};
use crate::config::Config;
use crate::gpu::Monitor;
use crate::store::{Engine, GpuRow};
use crate::study::{DaemonCommand, DaemonState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Every second (or GPU poll interval): read the GPUs, take requests, keep the daemon row
/// current; wake waiting slots when anything may have changed.
pub(super) async fn housekeep(sh: Arc<Shared>, done: CancellationToken) {
    let every = if sh.monitor.is_some() {
        sh.cfg().gpu.poll_interval
    } else {
        Duration::from_secs(1)
    };
    let mut tick = 0u64;
    // When this daemon last failed to heartbeat: after an outage of the database every host's
    // heartbeat looks old, so none fails another over until its own have been written again
    // for a whole `host_timeout`.
    let mut last_silence = Instant::now();
    loop {
        match sh.store.study_deleted(&sh.study).await {
            Ok(true) => {
                study_deleted_under_us(&sh);
                done.cancelled().await;
                return;
            }
            Ok(false) => {}
            Err(e) => warn!("could not check that the study still exists: {e}"),
        }
        match sh.store.ensure_mirror().await {
            Ok(true) => info!(
                "sweepd's triggers on Optuna's tables were missing (a table rebuilt by an Optuna migration?): re-created them and refilled sweepd_trials"
            ),
            Ok(false) => {}
            Err(e) => warn!("could not check sweepd's triggers on Optuna's tables: {e}"),
        }
        if let Some(m) = &sh.monitor {
            let report = m.poll().await;
            if let Err(e) = sh.store.write_samples(&report.samples).await {
                warn!("could not store memory samples: {e}");
            }
            for (pid, device, bytes) in &report.orphans {
                let _ = sh
                    .store
                    .event(
                        None,
                        None,
                        "orphan_killed",
                        &format!("pid {pid} held {bytes} bytes on gpu{device}"),
                    )
                    .await;
            }
            let rows = gpu_rows(&sh, m).await;
            sh.metrics.set_gpus(&rows);
            if let Err(e) = sh.store.write_gpus(&sh.study, &sh.host, &rows).await {
                warn!("could not store GPU readings: {e}");
            }
        }
        match sh.store.take_commands(&sh.study).await {
            Ok(cmds) => {
                for cmd in cmds {
                    match cmd {
                        Ok(DaemonCommand::Resume) => {
                            sh.core.lock().await.breaker.release_all();
                            info!("resumed by `sweepd resume`: quarantines lifted");
                        }
                        Err(unknown) => warn!("{unknown} ignored"),
                    }
                }
            }
            Err(e) => warn!("could not read commands: {e}"),
        }
        let (paused, status) = {
            let mut core = sh.core.lock().await;
            // Other processes' trials, also while no trial starts here (every slot busy with a
            // long trial): the pruner judges the next report against their curves.
            if core.catch_up().await.completed > 0 {
                let front = core.progress.front().map(|f| f.0);
                sh.metrics.set_best(&core.progress.bests(), front);
            }
            if core.gpu.is_none() {
                sh.metrics.set_running(None, core.running as usize);
            }
            core.publish();
            (
                core.breaker.paused(&core.devices(), Instant::now()),
                status_line(&sh.cfg(), &core),
            )
        };
        let state = if paused.is_some() {
            DaemonState::Paused
        } else {
            DaemonState::Running
        };
        let asked = Instant::now();
        let written = sh
            .store
            .daemon_state(&sh.study, &sh.me, state, paused.as_deref())
            .await;
        // The store waits through an outage instead of failing: a heartbeat that took this
        // long was one.
        if asked.elapsed() > Duration::from_secs(2) {
            last_silence = Instant::now();
        }
        match written {
            Ok(true) => {}
            // SQLite: another host took the study over (this one looked gone); nothing to
            // fight over, its trials are the other daemon's to reconcile.
            Ok(false) if sh.store.engine() == Engine::Postgres => row_lost(&sh).await,
            Ok(false) => {}
            Err(e) => {
                last_silence = Instant::now();
                warn!("could not update the daemon row: {e}");
            }
        }
        trial_heartbeats(&sh).await;
        if sh.store.engine() == Engine::Postgres
            && last_silence.elapsed() > sh.cfg().storage.host_timeout
        {
            fail_over_silent_hosts(&sh).await;
        }
        // The watchdog is fed only by a loop that just got the core lock and the database:
        // a wedged supervisor stops feeding it and systemd restarts us.
        let status = paused.as_deref().map_or(status, |p| format!("PAUSED: {p}"));
        let _ = sd_notify::notify(&[
            sd_notify::NotifyState::Status(&status),
            sd_notify::NotifyState::Watchdog,
        ]);
        if sh.cfg().metrics.listen.is_some() && tick % 10 == 0 {
            if let Ok(c) = sh.store.counts(&sh.study).await {
                sh.metrics.set_counts(&c);
            }
        }
        tick += 1;
        sh.changed.notify_waiters();
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = done.cancelled() => return,
        }
    }
}

/// Our daemon row was not ours any more: another host failed this one over while it could not
/// reach the database (its RUNNING trials are FAIL and re-enqueued; what they report now is not
/// recorded), or the row was marked stopped. Take it back and go on as a live host.
async fn row_lost(sh: &Shared) {
    warn!(
        "this host's daemon row was taken while the database could not be reached (failed over by another host?): \
         its running trials were re-enqueued elsewhere and their results here will not be recorded; taking the row back"
    );
    let me = sh.me.clone();
    if let Err(e) = sh
        .store
        .lock_daemon(&sh.study, &sh.me, |h| super::daemon_alive(h, &me, true))
        .await
    {
        warn!("could not take the daemon row back: {e}");
    }
}

/// Optuna's heartbeats of the trials this daemon runs, so that Optuna's `fail_stale_trials`
/// sees them alive (and stale once this host is gone).
async fn trial_heartbeats(sh: &Shared) {
    let ours: Vec<i64> = match sh.store.sweepd_running(&sh.study).await {
        Ok(running) => running
            .into_iter()
            .filter(|(_, owner)| owner.as_ref() == Some(&sh.me))
            .map(|(id, _)| id)
            .collect(),
        Err(e) => {
            warn!("could not list this daemon's running trials: {e}");
            return;
        }
    };
    if let Err(e) = sh.store.trial_heartbeats(&ours).await {
        warn!("could not record the running trials' heartbeats: {e}");
    }
}

/// Several hosts: fails over the hosts whose daemons have been silent for `[storage]
/// host_timeout` (their RUNNING trials FAIL and re-enqueued, once, by whichever host is first).
async fn fail_over_silent_hosts(sh: &Shared) {
    let timeout = sh.cfg().storage.host_timeout;
    match sh
        .store
        .fail_over_silent_hosts(&sh.study, &sh.me, timeout)
        .await
    {
        Ok(gone) => {
            for g in gone {
                warn!(
                    host = %g.host,
                    trials = ?g.trials,
                    "host {} sent no heartbeat for {}: failed over, its RUNNING trials marked FAIL and re-enqueued",
                    g.host,
                    crate::units::format_duration(timeout)
                );
            }
        }
        Err(e) => warn!("could not check the other hosts' heartbeats: {e}"),
    }
}

/// The line `systemctl status` shows: "running 3/4 on gpu0, 812/5000 done, best 0.388".
pub(super) fn status_line(cfg: &Config, core: &Core) -> String {
    let on = match &core.gpu {
        Some(g) => g
            .monitor
            .devices
            .iter()
            .map(|d| format!("gpu{d}"))
            .collect::<Vec<_>>()
            .join(","),
        None => "cpu".into(),
    };
    let done = match cfg.study.n_trials {
        Some(n) => format!("{}/{n} done", core.tally.finished),
        None => format!("{} done", core.tally.finished),
    };
    let best = core.progress.best_text();
    format!(
        "running {}/{} on {on}, {done}, {best}",
        core.running, cfg.worker.max_par
    )
}

/// The rows `sweepd gpus` shows: the latest readings with the admission decisions.
pub(super) async fn gpu_rows(sh: &Shared, m: &Monitor) -> Vec<GpuRow> {
    let core = sh.core.lock().await;
    let Some(g) = &core.gpu else {
        return Vec::new();
    };
    let (views, running, _) = m.views();
    let expected = g.next_expected.unwrap_or(sh.cfg().gpu.trial_memory);
    let now = Instant::now();
    m.readings()
        .into_iter()
        .map(|(device, r)| {
            let on_device = running.iter().filter(|t| t.device == device).count();
            match r {
                Ok(r) => {
                    let view = views.iter().find(|v| v.index == device);
                    let decision = view.map(|v| g.capacity.decide(v, &running, expected, now));
                    let quarantine = core.breaker.quarantined(Some(device), now);
                    let wait = match (quarantine, &decision) {
                        (Some(u), _) => Some(format!(
                            "quarantined by the circuit breaker for {}s more",
                            (u - now).as_secs()
                        )),
                        (None, Some(d)) => d.wait.as_ref().map(|w| w.to_string()),
                        _ => None,
                    };
                    GpuRow {
                        host: String::new(),
                        device,
                        name: Some(r.name.clone()),
                        total: Some(r.total),
                        free: Some(r.free),
                        used: Some(r.used),
                        util_gpu: r.util_gpu,
                        util_mem: r.util_mem,
                        running: on_device,
                        par_estimate: decision.as_ref().map(|d| d.par_estimate),
                        expected_peak: Some(expected),
                        wait,
                        error: None,
                        updated_at: String::new(),
                    }
                }
                Err(e) => GpuRow {
                    device,
                    running: on_device,
                    wait: Some("no admission until NVML readings return".into()),
                    error: Some(e),
                    ..GpuRow::default()
                },
            }
        })
        .collect()
}
