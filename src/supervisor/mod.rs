//! The supervisor: the async loop that turns a validated config into a finished study.
//!
//! One task per parallel slot (`max_par` of them) owns at most one worker process at a time and
//! loops: ask the [`Core`] for a trial, make sure a worker is ready on the trial's device, run
//! the trial, hand back how it ended, then keep, recycle or replace the worker. The `Core` is the
//! one place that decides what runs next (budget, sampler, GPU admission, circuit breaker) and
//! the only writer of trial outcomes, so they never disagree. A housekeeping task polls the GPUs,
//! takes requests (`sweepd resume`), keeps the daemon's row current, puts back sweepd's triggers
//! when an Optuna migration dropped them, and stops the daemon when its study is deleted from the
//! database (`optuna.delete_study`): running trials are then killed at once, without grace.
//!
//! A `CancellationToken` threaded through every task carries SIGINT/SIGTERM: slots stop asking
//! for trials, give running ones `shutdown_grace`, then kill their groups; every trial
//! interrupted that way is FAILed and re-enqueued, so no work is silently lost. A second
//! token (`kill_now`, a second signal) ends the grace and the polite waits at once: the groups
//! are SIGKILLed, and the trials still recorded and re-enqueued the same way.
//!
//! The `Core` also publishes a [`Progress`] snapshot for the terminal's live display
//! (`progress`) whenever a trial starts or ends.
//!
//! Every choice is made in one pure place, `decide`: given a snapshot of the study (its tally,
//! the admission line, the devices as last read, the settings in force) it says what to do as
//! data. `core` reads the snapshot, asks, and performs the answer against the store, the
//! workers, NVML and the host's ledger.
//!
//! One file per concern, in layers: a file imports only files above it in this list, never one
//! below (`tests/python/test_architecture.py` checks that no two import each other):
//!
//! 1. `policy`: the pure rules (retry, breaker, same-error stop, infeasibility, recycling, the
//!    admission line).
//! 2. `error`: how a run ends when it fails.
//! 3. `host`: who this daemon is (host id, machine, boot, PID namespace) and whether the daemon
//!    a study's row names still runs.
//! 4. `settings`: the one `Arc<Config>` in force, swapped whole by a reload.
//! 5. `events`: what happens to workers, and why one is retired.
//! 6. `suggest`: a running trial's params as its objective defines them.
//! 7. `decide`: every decision, pure, given a snapshot (the start gate, with the owner's pause,
//!    stop and cancel and which budget ends the study; the admission line, a finish's verdict,
//!    a slot's choices).
//! 8. `reasons`: why each candidate in line waits, as the daemon publishes it (pure).
//! 9. `pool`: idle persistent workers on GPUs between trials.
//! 10. `stops`: our running trials, each stoppable from outside its conversation (a trial
//!     another process ended, a cancelled study).
//! 11. `admit`: the GPU side of the core (the admission round's readings and ledger, our
//!     claims).
//! 12. `core`: the `Core`, which acts on `decide` (starts, finishes, a running trial's
//!     questions, other processes' trials learnt, what the budgets spent).
//! 13. `shared`: what the tasks share.
//! 14. `notices`: what the daemon tells a person through `[notify]`.
//! 15. `open`: a run's start (a previous instance reconciled, the GPUs, the `Core` built).
//! 16. `workers`: starting and retiring worker processes.
//! 17. `trial`: one trial's protocol conversation and limits.
//! 18. `slot`: one slot's loop.
//! 19. `steer`: the study's control state (`sweepd pause`, `stop`, `cancel`) read at start
//!     and at each housekeeping pass and acted on (a cancelled study's trials stopped), and
//!     our trials another process ended stopped.
//! 20. `housekeeping`: the once-a-poll task and the watches beside it.
//! 21. `reload`: SIGHUP.
//!
//! This file is the top: it starts and ends a run (the lock, the tasks, the first error, the
//! idle workers left at the end).
//!
//! [`Core`]: core::Core
//! [`Progress`]: crate::progress::Progress

mod admit;
mod checkpoint;
mod core;
mod decide;
mod error;
mod events;
mod host;
mod housekeeping;
mod notices;
mod open;
mod policy;
mod pool;
mod reasons;
mod reload;
mod settings;
mod shared;
mod slot;
mod steer;
mod stops;
mod suggest;
mod trial;
mod workers;

pub use error::RunError;
pub use host::{
    heartbeat_fresh, host_id, kinship, pid_runs, this_instance, uptime, Kinship, DAEMON_GONE_AFTER,
};

use crate::config::Config;
use crate::process;
use crate::progress::Progress;
use crate::store::{self, DaemonId, DaemonLockError, Instance, Store};
use crate::study::{Counts, DaemonState};
use events::Retirement;
use settings::Settings;
use shared::Shared;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{watch, Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub counts: Counts,
    pub interrupted: bool,
    /// The study's owner stopped or cancelled it (`sweepd stop`, `sweepd cancel`): who, when.
    pub steered: Option<crate::study::StudyControl>,
}

/// What the outside world can tell a running daemon.
#[derive(Clone, Default)]
pub struct Control {
    /// SIGINT/SIGTERM: stop starting trials, give running ones the grace, exit.
    pub shutdown: CancellationToken,
    /// A second SIGINT/SIGTERM (after `shutdown`): end the grace at once, SIGKILL the workers'
    /// groups, and still record every running trial as interrupted and re-enqueue it.
    pub kill_now: CancellationToken,
    /// Where the supervisor publishes progress for the terminal's display.
    pub progress: watch::Sender<Progress>,
    /// SIGHUP: re-read the config file and apply what can change while running.
    pub reload: Arc<Notify>,
    /// `--par`: overrides `[worker] max_par`, also in configs reloaded later.
    pub par_override: Option<usize>,
}

/// Where the config's `[storage] url` points, for the store.
pub fn target(config: &Config) -> store::Target {
    match &config.storage.postgres {
        Some(url) => store::Target::Postgres {
            url: url.clone(),
            label: config.storage.path.display().to_string(),
        },
        None => store::Target::Sqlite(config.storage.path.clone()),
    }
}

/// Runs the study until its budget is spent, the sampler is exhausted or shutdown is asked.
pub async fn run(config: Config, control: Control) -> Result<RunSummary, RunError> {
    let config = Arc::new(config);
    let host = host_id()?;
    // Descriptors in reserve for the workers, whatever a neighbour makes the daemon spend.
    match crate::shortage::raise_nofile() {
        Ok((before, now)) => debug!(before, now, "soft limit on open files"),
        Err(e) => debug!("could not raise the soft limit on open files: {e}"),
    }
    let store = Store::open_target(&target(&config)).await?;
    let several_hosts = store.engine() == store::Engine::Postgres;
    if !several_hosts && crate::store::world_readable(&config.storage.path) {
        // sweepd creates the file 0640; this one was made by someone else (or an older sweepd).
        warn!(
            "database {} is readable by every user on this machine, and it holds the stderr tails of failed trials: `chmod o-rwx` it and its -wal and -shm files",
            config.storage.path.display()
        );
    }
    let study = store
        .ensure_study(
            &config.study.name,
            &config.study.directions,
            config.study.metric_names.as_deref(),
        )
        .await?;
    let me = DaemonId {
        pid: std::process::id(),
        pid_start: process::proc_stat(std::process::id() as i32).map(|s| s.start_time),
        host,
    };
    let instance = host::this_instance();
    let this = host::here(&me, &instance, &store, &config);
    let replaced = store
        .lock_daemon(&study, &me, &instance, |holder| {
            host::blocks(holder, &this, host::pid_runs).is_some()
        })
        .await
        .map_err(|e| match e {
            DaemonLockError::Store(s) => RunError::Store(s),
            DaemonLockError::Held(holder) => host::refused(&holder, &this),
        })?;
    // The workers a previous daemon left are looked up by pid only where its pids are ours
    // (not another machine's or container's, nor a boot's before this one).
    let reap = replaced.is_none_or(|r| host::pids_comparable(&r, &this));
    // The study is ours: from now on a lost connection to a PostgreSQL server is waited
    // through (no trial starts meanwhile; what workers finish is written when it is back)
    // instead of ending the run.
    store.wait_through_outages();
    let result = run_locked(
        config,
        store.clone(),
        study.clone(),
        (me.clone(), instance.clone(), reap),
        control,
    )
    .await;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    // However the run ended (housekeeping noticed, or a write failed on the missing rows),
    // a study deleted under us is said as such, not as the error it caused.
    if store.study_deleted(&study).await.unwrap_or(false) {
        // The delete's triggers took the study's sweepd rows; what we wrote while stopping
        // (worker exits, events) goes too.
        if let Err(e) = store.purge_orphans().await {
            warn!("could not delete the deleted study's worker rows: {e}");
        }
        return Err(RunError::StudyDeleted {
            name: study.name.clone(),
            path: store.path().to_owned(),
        });
    }
    // Several hosts: a run that ended on an error may leave trials RUNNING (their finish could
    // not be written). Its row then stays as it is, so that another host fails them over once
    // it has been silent for host_timeout; a STOPPED row is never failed over.
    let left_running = store.engine() == store::Engine::Postgres
        && store.sweepd_running(&study).await.map_or(true, |r| {
            r.iter().any(|(_, owner)| owner.as_ref() == Some(&me))
        });
    if left_running {
        warn!("trials of this daemon are still RUNNING in the database: another host fails them over after [storage] host_timeout, or the next start on this host re-enqueues them");
    } else {
        // The row keeps naming the last outage of the database this run rode out.
        let outage = store
            .outage()
            .borrow()
            .last
            .as_ref()
            .map(housekeeping::outage_note);
        let _ = store
            .daemon_state(
                &study,
                &me,
                &instance,
                DaemonState::Stopped,
                outage.as_deref(),
            )
            .await;
    }
    result
}

async fn run_locked(
    config: Arc<Config>,
    store: Store,
    study: crate::store::Study,
    (me, instance, reap): (DaemonId, Instance, bool),
    control: Control,
) -> Result<RunSummary, RunError> {
    open::reconcile(&store, &study, &me, reap).await?;
    // Stopped or cancelled by its owner: exit 0 at once, until `sweepd resume`.
    let (at_start, exit) = steer::at_start(&store, &study).await?;
    if exit {
        return Ok(RunSummary {
            counts: store.counts(&study).await?,
            interrupted: false,
            steered: Some(at_start),
        });
    }
    let settings = Settings::new(config.clone());
    let progress = control.progress.clone();
    let opened = open::open(&settings, &store, &study, &me, progress, at_start.state).await?;
    let notifier = crate::notify::Notifier::start(
        &config.notify,
        &study.name,
        &me.host,
        opened.metrics.clone(),
    );
    let shared = Arc::new(Shared {
        core: Mutex::new(opened.core),
        settings,
        store: store.clone(),
        study: study.clone(),
        changed: Notify::new(),
        shutdown: control.shutdown.clone(),
        kill_now: control.kill_now.clone(),
        abandon: CancellationToken::new(),
        monitor: opened.monitor,
        host: me.host.clone(),
        python_dir: python_dir(),
        me,
        instance,
        ended_by: Default::default(),
        metrics: opened.metrics,
        notifier,
        stops: Default::default(),
        par_override: control.par_override,
        progress: control.progress.subscribe(),
    });
    let slots_done = CancellationToken::new();
    let housekeeping = spawn_tasks(&shared, &config, &slots_done).await?;
    // The database is migrated and NVML read: systemd may consider us started.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let mut first_error = run_slots(&shared, &control).await;
    // Idle workers (and any handed to a trial that never ran) go with the study.
    let left = shared.core.lock().await.pool().drain();
    for c in left {
        let why = &Retirement::StudyStopped;
        if let Err(e) = workers::retire(&shared, c.worker, c.device, why).await {
            first_error.get_or_insert(e);
        }
    }
    slots_done.cancel();
    let _ = housekeeping.await;
    let ended_by = shared
        .ended_by
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let error = ended_by.or(first_error);
    let interrupted = shared.shutdown.is_cancelled();
    let by_owner = shared.core.lock().await.ended_by_owner();
    // A study its owner stopped or cancelled is no news to them, as a signal is not.
    notices::at_end(&shared, error.as_ref(), interrupted || by_owner).await;
    if let Some(e) = error {
        return Err(e);
    }
    let counts = store.counts(&study).await?;
    let steered = match by_owner {
        true => Some(store.control(&study).await?),
        false => None,
    };
    info!(
        complete = counts.complete,
        pruned = counts.pruned,
        fail = counts.fail,
        waiting = counts.waiting,
        interrupted,
        "study stopped"
    );
    Ok(RunSummary {
        counts,
        interrupted,
        steered,
    })
}

/// The tasks beside the slots, until `done`: the metrics endpoint, housekeeping (returned, to
/// be awaited at the end), the outage, ledger and settling watches, the ledger's heartbeat.
async fn spawn_tasks(
    shared: &Arc<Shared>,
    config: &Config,
    done: &CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Metrics { addr, source })?;
        info!(%addr, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(
            listener,
            shared.metrics.clone(),
            done.clone(),
        ));
    }
    let housekeeping = tokio::spawn(housekeeping::housekeep(shared.clone(), done.clone()));
    tokio::spawn(housekeeping::watch_outages(shared.clone(), done.clone()));
    tokio::spawn(housekeeping::watch_neighbours(shared.clone(), done.clone()));
    tokio::spawn(housekeeping::beat_ledger(shared.clone(), done.clone()));
    tokio::spawn(housekeeping::watch_settling(shared.clone(), done.clone()));
    Ok(housekeeping)
}

/// Runs the slot tasks until the last ends, applying SIGHUPs meanwhile; returns the first
/// error one ended with (which stops the others gracefully).
async fn run_slots(shared: &Arc<Shared>, control: &Control) -> Option<RunError> {
    // Slot tasks by index: SIGHUP may raise max_par (start the missing ones) or lower it
    // (slots past it end after their trial).
    let mut slots = tokio::task::JoinSet::new();
    let mut live = std::collections::HashSet::new();
    let spawn_missing = |slots: &mut tokio::task::JoinSet<(usize, Result<(), RunError>)>,
                         live: &mut std::collections::HashSet<usize>| {
        for slot in 0..shared.cfg().worker.max_par {
            if live.insert(slot) {
                let sh = shared.clone();
                slots.spawn(async move { (slot, slot::run_slot(slot, sh).await) });
            }
        }
    };
    spawn_missing(&mut slots, &mut live);
    let mut first_error = None;
    loop {
        let joined = tokio::select! {
            j = slots.join_next() => match j {
                Some(j) => j,
                None => break,
            },
            _ = control.reload.notified() => {
                reload::reload(shared).await;
                if !shared.shutdown.is_cancelled() {
                    spawn_missing(&mut slots, &mut live);
                }
                continue;
            }
        };
        let e = match joined {
            Ok((slot, Ok(()))) => {
                live.remove(&slot);
                continue;
            }
            Ok((slot, Err(e))) => {
                live.remove(&slot);
                if matches!(e, RunError::Store(_))
                    && shared
                        .store
                        .study_deleted(&shared.study)
                        .await
                        .unwrap_or(false)
                {
                    // A write failed because the study's rows are gone: say that instead.
                    shared.study_deleted_under_us();
                } else {
                    error!("{e}");
                }
                e
            }
            Err(e) => {
                let e = RunError::from_slot_panic(e);
                error!("{e}");
                e
            }
        };
        // One slot's fatal error stops the others gracefully.
        shared.shutdown.cancel();
        first_error.get_or_insert(e);
    }
    first_error
}

/// Where `sweepd_worker.py` lives, put on the workers' PYTHONPATH (`config::helper_dir`,
/// which `check` also asks, to refuse a `[worker.env] PYTHONPATH` that hides it).
pub fn python_dir() -> Option<PathBuf> {
    crate::config::helper_dir()
}
