//! The housekeeping task: once a second (or GPU poll interval) it reads the GPUs, retires idle
//! workers past `idle_worker_timeout` (or dead), takes the CLI's requests (`sweepd resume`)
//! and the study's control state (`steer`: paused, stopped, cancelled, trials ended elsewhere),
//! learns other processes' trials (`Core::catch_up`), keeps the daemon's row, its entry in the
//! host's GPU ledger, the `systemctl status` line and the watchdog current, puts back sweepd's
//! triggers when an Optuna migration dropped them, and notices a study deleted from the
//! database. Every pass wakes the slots waiting for room. Reading the GPUs (`Shared::read_gpus`) is
//! also what a trial's end and a worker's exit do at once, so that admission does not wait for
//! the next pass.
//!
//! Another daemon's trial that ends on our GPUs frees memory too: `watch_neighbours` reads the
//! GPUs and wakes the slots when the host's ledger shows it, rather than at our next pass; it
//! also answers another daemon's new request for our idle workers' memory at once. And
//! a running trial that reaches its peak frees what its bound held back above it:
//! `watch_settling` reads the GPUs while trials ramp up, and wakes the slots when one settles.
//!
//! While the database cannot be reached that loop waits in the store like every other task;
//! `watch_outages` then speaks for the daemon: the status line, the watchdog (the daemon is
//! waiting, not wedged) and the metrics say so until the server is back.

use super::error::RunError;
use super::events::Retirement;
use super::host;
use super::notices::Watch;
use super::pool::Current;
use super::shared::Shared;
use super::steer;
use super::workers;
use crate::gpu::ledger::{self, Ledger, Neighbours};
use crate::gpu::Monitor;
use crate::store::{DaemonLockError, Engine, GpuRow};
use crate::study::reason::Line;
use crate::study::{DaemonCommand, DaemonState};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

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
    let mut news = Watch::new(&sh, Instant::now());
    // The line of waiting candidates last published (`supervisor::reasons`).
    let mut published: Option<Line> = None;
    // The study's control state as last read (`sweepd pause`, `stop`, `cancel`).
    let mut steered = None;
    loop {
        match sh.store.study_deleted(&sh.study).await {
            Ok(true) => {
                sh.study_deleted_under_us();
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
        let mut rows = Vec::new();
        if let Some(m) = &sh.monitor {
            sh.read_gpus().await;
            // After the rows: their admission round reads the other daemons' requests.
            rows = gpu_rows(&sh, m).await;
            retire_idle(&sh);
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
                            sh.core.lock().await.release_quarantines();
                            info!("resumed by `sweepd resume`: quarantines lifted");
                        }
                        Err(unknown) => warn!("{unknown} ignored"),
                    }
                }
            }
            Err(e) => warn!("could not read commands: {e}"),
        }
        let paused_by_owner = steer::pass(&sh, &mut steered).await;
        let (paused, status, line) = {
            let mut core = sh.core.lock().await;
            // Other processes' trials, also while no trial starts here (every slot busy with a
            // long trial): the pruner judges the next report against their curves.
            if core.catch_up().await.completed > 0 {
                let front = core.progress().front().map(|f| f.0);
                sh.metrics.set_best(&core.progress().bests(), front);
            }
            if core.gpu().is_none() {
                sh.metrics.set_running(None, core.running() as usize);
            }
            core.publish();
            let breaker = core.paused(Instant::now());
            // `notify`'s `breaker` event is the breaker's hold alone: a pause by hand is the
            // owner's own doing, not news to them.
            news.tick(&sh, core.summary(), &rows, breaker.as_deref());
            let paused = paused_by_owner.or(breaker);
            let line = core.waiting_line(&rows);
            (paused, core.status_line(), line)
        };
        if line.differs(published.as_ref()) {
            match sh.store.publish_line(&sh.study, &sh.host, &line).await {
                Ok(()) => published = Some(line),
                Err(e) => warn!("could not publish why trials wait: {e}"),
            }
        }
        let state = if paused.is_some() {
            DaemonState::Paused
        } else {
            DaemonState::Running
        };
        let last_outage = sh.store.outage().borrow().last.clone();
        // `status` shows the pause, else the last outage of the database this daemon rode out.
        let detail = paused
            .clone()
            .or_else(|| last_outage.as_ref().map(outage_note));
        let asked = Instant::now();
        let written = sh
            .store
            .daemon_state(&sh.study, &sh.me, &sh.instance, state, detail.as_deref())
            .await;
        // The store waits through an outage instead of failing: a heartbeat that took this
        // long was one, and every heartbeat is old at the end of one.
        if asked.elapsed() > Duration::from_secs(2) {
            last_silence = Instant::now();
        }
        if let Some(ended) = sh.store.outage().borrow().last.as_ref() {
            last_silence = last_silence.max(ended.at);
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

/// How `status` shows the last outage of the database a daemon rode out.
pub(super) fn outage_note(o: &crate::store::Ended) -> String {
    format!(
        "the database could not be reached for {} until {}; what finished meanwhile was written then",
        crate::units::format_duration(Duration::from_secs(o.lasted.as_secs().max(1))),
        o.at_wall
    )
}

/// Speaks for the daemon while the database cannot be reached (the housekeeping loop is
/// waiting in the store then, like the slots): `systemctl status` says so, the watchdog is fed
/// (the daemon is waiting for the server, not wedged: every store operation meanwhile is
/// retried with a bounded wait), and `sweepd_database_up` drops to 0.
pub(super) async fn watch_outages(sh: Arc<Shared>, done: CancellationToken) {
    let mut outage = sh.store.outage();
    loop {
        let (since, error) = {
            let o = outage.borrow_and_update();
            (o.since, o.error.clone())
        };
        sh.metrics.set_database_up(since.is_none());
        if let Some(since) = since {
            let status = format!(
                "database unreachable for {}: no trial starts until it is back; running trials go on, their results are written then ({})",
                crate::units::format_duration(Duration::from_secs(since.elapsed().as_secs())),
                error.as_deref().unwrap_or("no answer")
            );
            let _ = sd_notify::notify(&[
                sd_notify::NotifyState::Status(&status),
                sd_notify::NotifyState::Watchdog,
            ]);
        }
        tokio::select! {
            changed = outage.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(1)), if since.is_some() => {}
            _ = done.cancelled() => return,
        }
    }
}

/// Wakes our slots waiting for room when another daemon on this host frees some on a GPU we
/// share (a trial of its ended, an idle worker of its retired: `gpu::ledger::freed`), after a
/// fresh NVML reading: with trials of a minute, waiting for our next `poll_interval` reading
/// would leave the card part empty for up to that long each time. And answers, at once, a
/// request of another daemon for our idle workers' memory that the ledger did not show before
/// (`gpu::ledger::asked_anew`): its trial waits for nothing else. Without a ledger, or where
/// the file cannot be watched, the polls alone do both, as before.
pub(super) async fn watch_neighbours(sh: Arc<Shared>, done: CancellationToken) {
    let ledger = {
        let core = sh.core.lock().await;
        match core.gpu().and_then(|g| g.ledger.clone()) {
            Some(l) => l,
            None => return,
        }
    };
    let watch = match ledger.watch().and_then(|w| {
        // SAFETY: `Watch` owns its inotify descriptor, open until the `AsyncFd` drops it, and
        // always names that one.
        unsafe { AsyncFd::register_with_interest(w, Interest::READABLE) }
            .map_err(std::io::Error::from)
    }) {
        Ok(w) => w,
        Err(e) => {
            warn!(
                "cannot watch the GPU ledger {} ({e}): a trial waiting for memory that another daemon frees starts at the next poll",
                ledger.path().display()
            );
            return;
        }
    };
    // The lock may wait for another daemon's admission decision: not on the runtime's threads.
    let read = |l: Ledger| async move {
        tokio::task::spawn_blocking(move || l.read_neighbours())
            .await
            .ok()
            .and_then(Result::ok)
    };
    let mut last: Neighbours = read(ledger.clone()).await.unwrap_or_default();
    loop {
        tokio::select! {
            ready = watch.readable() => match ready {
                Ok(mut guard) => {
                    // Cleared before draining: a write after the drain is a new edge.
                    guard.clear_ready();
                    guard.get_inner().drain();
                }
                Err(_) => return,
            },
            _ = done.cancelled() => return,
        }
        let Some(now) = read(ledger.clone()).await else {
            continue;
        };
        let freed = ledger::freed(&last.claims, &now.claims);
        let asked = ledger::asked_anew(&last.requests, &now.requests);
        if freed || asked {
            // One fresh reading for both: what was freed, and what is still to free for a
            // request.
            sh.read_gpus().await;
        }
        if freed {
            sh.changed.notify_waiters();
        }
        if asked {
            let workers = {
                let mut core = sh.core.lock().await;
                if let Some(g) = core.gpu_mut() {
                    g.take_requests(now.requests.clone());
                }
                core.answer_requests()
            };
            retire(&sh, workers);
        }
        last = now;
    }
}

/// Writes our line in the host's ledger again at least every `gpu::ledger::BEAT`, with a fresh
/// heartbeat, also while no admission round writes it (every slot busy with a long trial, a
/// long `poll_interval`, the core's lock held through a database outage): the other daemons
/// drop an entry that stops beating. The lock may wait for another daemon's decision, so not
/// on the runtime's threads.
pub(super) async fn beat_ledger(sh: Arc<Shared>, done: CancellationToken) {
    let ledger = {
        let core = sh.core.lock().await;
        match core.gpu().and_then(|g| g.ledger.clone()) {
            Some(l) => l,
            None => return,
        }
    };
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ledger::BEAT / 2) => {}
            _ = done.cancelled() => return,
        }
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.beat()).await {
            Ok(Ok(())) => failing = false,
            Ok(Err(e)) if !failing => {
                failing = true;
                error!(
                    "could not write this daemon's heartbeat to the GPU ledger {} ({e}): the other daemons on this host stop counting its trials in {}s",
                    ledger.path().display(),
                    ledger::EXPIRES.as_secs()
                );
            }
            _ => {}
        }
    }
}

/// Reads the GPUs while our trials ramp up, as often as [`gpu::monitor::next_look`] asks, and
/// wakes the slots waiting for room when a reading finds a trial settled: from then on it counts
/// at what it uses, not at its expected peak (in our entry of the host's ledger too). The polls
/// alone saw a trial of a few seconds at its level late, and it then counted at its expected
/// peak until it nearly ended.
///
/// [`gpu::monitor::next_look`]: crate::gpu::monitor::next_look
pub(super) async fn watch_settling(sh: Arc<Shared>, done: CancellationToken) {
    let Some(m) = sh.monitor.clone() else { return };
    let longest = sh.cfg().gpu.poll_interval;
    loop {
        let next = m.next_look(Instant::now(), longest);
        tokio::select! {
            _ = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {}
            // A trial given to a worker or a prediction may want a reading sooner.
            _ = m.look_sooner() => continue,
            _ = done.cancelled() => return,
        }
        if sh.read_gpus().await > 0 {
            // The other daemons on the host may use what its bound held back, too.
            sh.core.lock().await.refresh_claims();
            sh.changed.notify_waiters();
        }
    }
}

/// Our daemon row was not ours any more: another host failed this one over while it could not
/// reach the database (its RUNNING trials are FAIL and re-enqueued; what they report now is not
/// recorded), the row was marked stopped, or a daemon elsewhere with our host id took it after
/// our heartbeat went silent. Take it back and go on as a live host, unless that daemon is
/// alive: then ours is the name in use elsewhere, and this daemon stops (exit 7) rather than
/// fight it for the row.
async fn row_lost(sh: &Shared) {
    let here = sh.here();
    let taken = sh
        .store
        .lock_daemon(&sh.study, &sh.me, &sh.instance, |h| {
            host::blocks(h, &here, host::pid_runs).is_some()
        })
        .await;
    match taken {
        Ok(replaced) => {
            let by = replaced
                .filter(|r| r.state != DaemonState::Gone)
                .map_or_else(
                    || {
                        "failed over by another host while this one could not reach the database?"
                            .to_owned()
                    },
                    |r| format!("by pid {} ({}), which no longer runs", r.id.pid, r.instance),
                );
            warn!(
                "this host's daemon row was taken ({by}): its running trials were re-enqueued \
                 elsewhere and their results here will not be recorded; took the row back"
            );
        }
        Err(DaemonLockError::Held(holder)) => match host::refused(&holder, &here) {
            e @ RunError::HostIdInUse(_) => {
                // Its trials were failed over when the other took the row: what they finish
                // here is not recorded, so no grace; those started since are re-enqueued.
                error!("{e}; stopping this daemon, its running trials killed");
                sh.ended_by
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                sh.shutdown.cancel();
                sh.kill_now.cancel();
            }
            e => warn!("could not take the daemon row back: {e}"),
        },
        Err(e) => warn!("could not take the daemon row back: {e}"),
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

/// Retires, each in a task of its own, the idle workers past `[gpu] idle_worker_timeout`,
/// those that died while idle and those another daemon on the host asked for. A retirement reads the GPUs and wakes waiting slots when the
/// memory is back.
fn retire_idle(sh: &Arc<Shared>) {
    let timeout = sh.cfg().gpu.idle_worker_timeout;
    let expired = match sh.core.try_lock() {
        Ok(mut core) => {
            let mut out = core.expired_workers(Instant::now(), timeout);
            out.extend(core.answer_requests());
            out
        }
        // Busy deciding: the next pass looks again.
        Err(_) => return,
    };
    retire(sh, expired);
}

/// Retires these idle workers, each in a task of its own.
fn retire(sh: &Arc<Shared>, workers: Vec<(Current, Retirement)>) {
    for (c, why) in workers {
        let sh = sh.clone();
        tokio::spawn(async move {
            if let Err(e) = workers::retire(&sh, c.worker, c.device, &why).await {
                warn!("could not record an idle worker's retirement: {e}");
            }
        });
    }
}

/// The rows `sweepd gpus` shows: the latest readings with the admission decisions, as an
/// admission round sees them (our idle workers, other daemons' claims). Writing them also
/// brings our entry in the host's ledger up to date.
pub(super) async fn gpu_rows(sh: &Shared, m: &Monitor) -> Vec<GpuRow> {
    let mut core = sh.core.lock().await;
    let now = Instant::now();
    let Some(round) = core.round(now) else {
        return Vec::new();
    };
    let Some(g) = core.gpu() else {
        return Vec::new();
    };
    let cfg = sh.cfg();
    let (expected, why) = match &g.next_expected {
        Some(e) => (e.bytes, Some(e.why.clone())),
        None => (
            cfg.gpu.trial_memory,
            Some("trial_memory: no trial waiting yet".to_owned()),
        ),
    };
    let rows = m
        .readings()
        .into_iter()
        .map(|(device, r)| {
            let on_device = round.running.iter().filter(|t| t.device == device).count();
            match r {
                Ok(r) => {
                    let view = round.views.iter().find(|v| v.index == device);
                    let headroom = cfg.gpu.headroom;
                    let decision = view.map(|v| {
                        g.capacity
                            .decide(v, &round.running, expected, headroom, now)
                    });
                    let quarantine = core.quarantined(device, now);
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
                        expected_why: why.clone(),
                        source: Some(m.source(device).to_string()),
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
        .collect();
    core.write_claims(round.ledger, None);
    rows
}
