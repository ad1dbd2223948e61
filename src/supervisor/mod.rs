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
//! One file per concern: this one starts and ends a run (the lock, reconciling what a previous
//! instance left RUNNING, the slot tasks, the first error, the idle workers left at the end);
//! `core` decides, `admit` is its GPU admission round; `learn` brings it the trials other
//! processes (other hosts, Optuna scripts) write; `policy` holds its pure rules; `pool`
//! keeps idle persistent workers on GPUs between trials; `slot` runs the trial loop of one
//! slot, `trial` one trial's protocol conversation, `workers` starts and retires worker
//! processes; `host` says who this daemon is (host id, machine, boot, PID namespace) and
//! whether the daemon a study's row names still runs; `housekeeping` is the once-a-poll task,
//! `steer` its reading of the study's control state (`sweepd pause`, `stop`, `cancel`) and of
//! trials another process ended, `stops` how such a trial's conversation is stopped;
//! `reload` applies SIGHUP.
//!
//! [`Core`]: core::Core
//! [`Progress`]: crate::progress::Progress

mod admit;
mod core;
mod host;
mod housekeeping;
mod learn;
mod policy;
mod pool;
mod reload;
mod slot;
mod steer;
mod stops;
mod suggest;
mod trial;
mod workers;

use crate::config::{Config, Devices};
use crate::gpu::{Capacity, Gpu, MemoryModel, Monitor};
use crate::metrics::Metrics;
use crate::process;
use crate::progress::{Progress, Tracker};
use crate::pruner::Pruner;
use crate::sampler;
use crate::store::{self, DaemonId, DaemonLockError, Feed, Instance, Store, StoreError};
use crate::study::pareto::{self, Front};
use crate::study::{Counts, DaemonState, Tally};
use admit::GpuCtl;
use core::Core;
pub use host::{heartbeat_fresh, host_id, DAEMON_GONE_AFTER};
use host::{Block, Here};
use policy::{Breaker, SameError};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// Consecutive failures of a slot's worker to start before the run gives up.
const MAX_START_FAILURES: u32 = 3;
/// Grace between SIGTERM and SIGKILL when sweepd kills a worker group.
const KILL_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Sampler(String),
    #[error("worker command {argv:?} could not be started: {source}")]
    Spawn {
        argv: Vec<String>,
        #[source]
        source: std::io::Error,
    },
    #[error("workers keep failing to start ({MAX_START_FAILURES} times in a row); last: {reason}\n--- last stderr lines ---\n{stderr}")]
    WorkerStart { reason: String, stderr: String },
    #[error("{0}")]
    Gpu(String),
    #[error("{0}")]
    Locked(String),
    /// `[metrics] listen` could not be bound.
    #[error("[metrics] listen = {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A slot task panicked: a bug in sweepd, not in the study.
    #[error("a slot task panicked (a bug in sweepd; please report it): {0}")]
    Panicked(String),
    /// The study's trials keep failing with the same error in the objective.
    #[error("{0}")]
    SameError(String),
    #[error("{0}")]
    HostId(String),
    /// A live daemon on another machine or in another PID namespace has our host id.
    #[error("{0}")]
    HostIdInUse(String),
    #[error("study `{name}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopped, and its workers killed", path.display())]
    StudyDeleted { name: String, path: PathBuf },
}

impl RunError {
    /// The error a slot task that panicked (or was cancelled) ends the run with.
    fn from_slot_panic(e: tokio::task::JoinError) -> RunError {
        let what = match e.try_into_panic() {
            Ok(payload) => payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned()),
            Err(e) => e.to_string(),
        };
        RunError::Panicked(what)
    }
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub counts: Counts,
    pub interrupted: bool,
    /// The study's owner stopped or cancelled it (`sweepd stop`, `sweepd cancel`): who, when.
    pub steered: Option<crate::study::StudyControl>,
}

/// Everything the slot tasks share.
struct Shared {
    /// The config in force; SIGHUP swaps in a new one with the keys that may change live.
    config: std::sync::RwLock<Arc<Config>>,
    store: Store,
    study: crate::store::Study,
    /// The decision point, behind a lock: slots ask it one at a time.
    core: Mutex<Core>,
    /// Woken whenever a trial ends or readings change, so waiting slots look again.
    changed: Notify,
    /// SIGINT/SIGTERM, or a fatal error in one slot: stop starting trials.
    shutdown: CancellationToken,
    /// A second SIGINT/SIGTERM: no more grace, kill the workers' groups now.
    kill_now: CancellationToken,
    /// The study was deleted from the database: kill running trials now, no grace (their rows
    /// are gone, there is nothing left to record).
    abandon: CancellationToken,
    /// The GPU monitor, when sweepd schedules on GPUs.
    monitor: Option<Arc<Monitor>>,
    host: String,
    python_dir: Option<PathBuf>,
    me: DaemonId,
    /// What our pids are relative to (`host::this_instance`), recorded in our daemon row.
    instance: Instance,
    /// An error a task other than a slot ends the run with (our host id taken by a live daemon
    /// elsewhere): it wins over what the slots then fail with.
    ended_by: std::sync::Mutex<Option<RunError>>,
    metrics: Arc<Metrics>,
    /// Our running trials, each stoppable from housekeeping (ended elsewhere, cancelled).
    stops: stops::Stops,
    /// `--par` from the command line, which reloads keep.
    par_override: Option<usize>,
}

impl Shared {
    fn cfg(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This daemon, as the single-instance rule compares a row's daemon with it.
    fn here(&self) -> Here<'_> {
        here(&self.me, &self.instance, &self.store, &self.cfg())
    }
}

/// This daemon, as the single-instance rule compares a row's daemon with it, now.
fn here<'a>(me: &'a DaemonId, instance: &'a Instance, store: &Store, config: &Config) -> Here<'a> {
    let several_hosts = store.engine() == store::Engine::Postgres;
    Here {
        id: me,
        instance,
        uptime: host::uptime(),
        several_hosts,
        gone_after: if several_hosts {
            config.storage.host_timeout
        } else {
            DAEMON_GONE_AFTER
        },
    }
}

/// The error a start refused by `holder` ends with: exit 4 for another daemon running the
/// study, exit 7 for a live daemon elsewhere with our host id.
fn refused(holder: &store::Holder, here: &Here) -> RunError {
    match host::blocks(holder, here, host::pid_runs) {
        Some(Block::HostIdInUse(kin)) => RunError::HostIdInUse(host::host_id_in_use(
            holder,
            here,
            kin,
            std::env::var_os("SWEEPD_HOST_ID").is_some(),
        )),
        _ => RunError::Locked(DaemonLockError::Held(Box::new(holder.clone())).to_string()),
    }
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
    let this = here(&me, &instance, &store, &config);
    let replaced = store
        .lock_daemon(&study, &me, &instance, |holder| {
            host::blocks(holder, &this, host::pid_runs).is_some()
        })
        .await
        .map_err(|e| match e {
            DaemonLockError::Store(s) => RunError::Store(s),
            DaemonLockError::Held(holder) => refused(&holder, &this),
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

/// The progress tracker, starting from the study's best trial (one objective) or its Pareto
/// front (several), as the database holds them.
async fn tracker(
    store: &Store,
    study: &crate::store::Study,
    control: &Control,
    finished: u64,
) -> Result<Tracker, RunError> {
    let tx = control.progress.clone();
    if !study.is_multi_objective() {
        let best = store
            .best(study)
            .await?
            .and_then(|b| Some((b.number, b.value.as_f64()?)));
        return Ok(
            Tracker::new(tx, study.directions[0], best, finished).named(study.objective_name(0))
        );
    }
    let (candidates, constrained) = store.front_candidates(study).await?;
    let mut front = Front::new(&study.directions);
    let on = pareto::best_trials(
        candidates
            .iter()
            .map(|c| (&c.values[..], &c.constraints[..])),
        &study.directions,
        constrained,
    );
    for i in on {
        front.insert(candidates[i].number, &candidates[i].values);
    }
    let names = (0..study.directions.len())
        .map(|i| study.objective_name(i))
        .collect();
    Ok(Tracker::several(tx, front, names, finished))
}

/// Stops the daemon at once when its study was deleted from the database: running trials
/// are killed (their rows are gone), and `run` exits with [`RunError::StudyDeleted`].
fn study_deleted_under_us(sh: &Shared) {
    if sh.abandon.is_cancelled() {
        return;
    }
    error!(
        "study `{}` was deleted from {} while this daemon was running it (optuna.delete_study?); stopping",
        sh.study.name,
        sh.store.path().display()
    );
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(
        "study deleted from the database; stopping",
    )]);
    sh.abandon.cancel();
    sh.shutdown.cancel();
}

async fn run_locked(
    config: Arc<Config>,
    store: Store,
    study: crate::store::Study,
    (me, instance, reap): (DaemonId, Instance, bool),
    control: Control,
) -> Result<RunSummary, RunError> {
    let shutdown = control.shutdown.clone();
    // Several hosts (PostgreSQL): only this host's workers and trials are ours to reconcile;
    // the others' are their daemons' (or, once silent, failed over by housekeeping).
    let several_hosts = store.engine() == store::Engine::Postgres;
    let only_host = several_hosts.then_some(me.host.as_str());
    reap_previous_instance(&store, &study, only_host, reap).await?;
    let mut stale = Vec::new();
    for (trial_id, owner) in store.sweepd_running(&study).await? {
        // This daemon holds the study's lock (on this host): every other sweepd daemon that
        // ran it (here) is gone. RUNNING trials that no sweepd started (an Optuna script's)
        // are left to their owner. This one has started none yet, so a trial that names our
        // pid and start time is a previous daemon's too (pid 1 of another container).
        let ours = only_host.is_none_or(|h| owner.as_ref().is_some_and(|o| o.host == h));
        if ours {
            let reason =
                "interrupted: the sweepd instance running this trial stopped (killed or crashed)";
            stale.extend(store.interrupt(&study, trial_id, reason).await?);
        }
    }
    if !stale.is_empty() {
        store.sync().await?;
        warn!(trials = ?stale, "marked trials left RUNNING by a previous instance as FAIL and re-enqueued them");
    }
    // Stopped or cancelled by its owner: exit 0 at once, until `sweepd resume`.
    let (control_at_start, exit) = steer::at_start(&store, &study).await?;
    if exit {
        return Ok(RunSummary {
            counts: store.counts(&study).await?,
            interrupted: false,
            steered: Some(control_at_start),
        });
    }
    let monitor = open_gpus(&config).await?;
    let sampler = sampler::build(
        config.study.sampler,
        &config.space,
        config.sampler.seed.or(config.study.seed),
        &config.study.directions,
        &config.sampler,
    )
    .map_err(RunError::Sampler)?;
    let mut model = MemoryModel::new(&config.space, config.gpu.trial_memory);
    for (params, peak) in store.peaks(&study).await? {
        model.record(&params, peak);
    }
    // `check` refuses a pruner with several objectives: this one is then "none".
    let pruner = Pruner::new(
        config.pruner.clone(),
        config.study.directions[0],
        &study.name,
    );
    // The whole study, read through the feed that later brings other processes' trials.
    let mut feed = Feed::default();
    let history = store
        .changes(&study, &me, &mut feed, pruner.uses_curves())
        .await?;
    let counts = store.counts(&study).await?;
    let mut tally = Tally::default();
    store.refresh_tally(&study, &mut tally).await?;
    info!(
        study = %study.name,
        db = %config.storage.path.display(),
        finished = tally.finished,
        budget = config.study.n_trials,
        max_par = config.worker.max_par,
        gpus = monitor.as_ref().map(|m| tracing::field::debug(m.devices.clone())),
        "study started"
    );
    let metrics = Arc::new(Metrics::new(&me.host));
    metrics.set_counts(&counts);
    let ledger = match &monitor {
        Some(m) => open_ledger(m)?,
        None => None,
    };
    let peak_log = ledger.as_ref().and_then(|l| open_peak_log(&config, l));
    let mut gpu = monitor.as_ref().map(|m| GpuCtl {
        monitor: m.clone(),
        capacity: Capacity::new(
            config.gpu.headroom,
            config.gpu.max_par_per_device,
            config.retry.oom_admission_factor,
            config.retry.oom_recovery,
        ),
        model,
        next_expected: None,
        failing: Default::default(),
        ledger,
        ledger_failing: false,
        peak_log,
        asking: None,
        asked: Default::default(),
        started: Default::default(),
        head_watch: None,
        hold: None,
        honoured: Default::default(),
        beside_head: None,
        levels_shared: Default::default(),
        neighbour_levels: Default::default(),
    });
    // What the other studies of our memory group measured so far.
    if let Some(g) = gpu.as_mut().filter(|g| g.peak_log.is_some()) {
        let (ended, running) = g.learn_from_neighbours(&config.space);
        if let Some(log) = &g.peak_log {
            info!(
                file = %log.path().display(),
                trials = ended,
                running,
                "memory learnt from the other studies of this memory_group on this host"
            );
        }
    }
    let shared = Arc::new(Shared {
        core: Mutex::new(Core {
            store: store.clone(),
            study: study.clone(),
            config: config.clone(),
            sampler,
            pruner,
            tally,
            me: me.clone(),
            running: 0,
            running_on: HashMap::new(),
            exhausted: false,
            started: Instant::now(),
            pending: Default::default(),
            waiting_first: false,
            next_key: store.next_number(&study).await? as u64,
            key_offset: host_key_offset(&me, several_hosts),
            gpu,
            breaker: Breaker {
                cfg: config.retry.clone(),
                devices: HashMap::new(),
            },
            infeasible: Vec::new(),
            live: HashMap::new(),
            same_error: SameError::new(config.retry.stop_after_same_error),
            fatal: None,
            halted: false,
            steer: control_at_start.state,
            progress: tracker(&store, &study, &control, counts.finished()).await?,
            pool: Default::default(),
            feed,
            fed_at: Some(Instant::now()),
        }),
        config: std::sync::RwLock::new(config.clone()),
        store: store.clone(),
        study: study.clone(),
        changed: Notify::new(),
        shutdown,
        kill_now: control.kill_now.clone(),
        abandon: CancellationToken::new(),
        monitor,
        host: me.host.clone(),
        python_dir: python_dir(),
        me,
        instance,
        ended_by: Default::default(),
        metrics: metrics.clone(),
        stops: Default::default(),
        par_override: control.par_override,
    });
    shared.core.lock().await.learn(history, true);
    {
        let core = shared.core.lock().await;
        metrics.set_best(&core.progress.bests(), core.progress.front().map(|f| f.0));
    }
    let slots_done = CancellationToken::new();
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Metrics { addr, source })?;
        info!(%addr, "serving Prometheus metrics at /metrics");
        tokio::spawn(crate::metrics::serve(
            listener,
            metrics.clone(),
            slots_done.clone(),
        ));
    }
    let housekeeping = tokio::spawn(housekeeping::housekeep(shared.clone(), slots_done.clone()));
    tokio::spawn(housekeeping::watch_outages(
        shared.clone(),
        slots_done.clone(),
    ));
    tokio::spawn(housekeeping::watch_neighbours(
        shared.clone(),
        slots_done.clone(),
    ));
    tokio::spawn(housekeeping::beat_ledger(
        shared.clone(),
        slots_done.clone(),
    ));
    tokio::spawn(housekeeping::watch_settling(
        shared.clone(),
        slots_done.clone(),
    ));
    // The database is migrated and NVML read: systemd may consider us started.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
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
                reload::reload(&shared).await;
                if !shared.shutdown.is_cancelled() {
                    spawn_missing(&mut slots, &mut live);
                }
                continue;
            }
        };
        match joined {
            Ok((slot, Ok(()))) => {
                live.remove(&slot);
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
                    study_deleted_under_us(&shared);
                } else {
                    error!("{e}");
                }
                // One slot's fatal error stops the others gracefully.
                shared.shutdown.cancel();
                first_error.get_or_insert(e);
            }
            Err(e) => {
                let e = RunError::from_slot_panic(e);
                error!("{e}");
                shared.shutdown.cancel();
                first_error.get_or_insert(e);
            }
        }
    }
    // Idle workers (and any handed to a trial that never ran) go with the study.
    let left = shared.core.lock().await.pool.drain();
    for c in left {
        if let Err(e) = workers::retire(&shared, c.worker, c.device, "study stopped").await {
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
    if let Some(e) = ended_by.or(first_error) {
        return Err(e);
    }
    let counts = store.counts(&study).await?;
    let interrupted = shared.shutdown.is_cancelled();
    let steered = if shared.core.lock().await.steer.ends_daemons() {
        Some(store.control(&study).await?)
    } else {
        None
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

/// Where this host's seed keys start. A proposal's seed key is the number its trial will most
/// likely get; hosts sampling at once guess the same numbers, and a seeded sampler would give
/// them the same params. Several hosts: each counts from its own offset (the host name's hash
/// in the high bits), so their proposals differ and each stays reproducible for its host.
fn host_key_offset(me: &DaemonId, several_hosts: bool) -> u64 {
    if !several_hosts {
        return 0;
    }
    // FNV-1a: stable across runs and builds (std's hasher is not).
    let h = me.host.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (h & 0xffff) << 32
}

/// Loads NVML and reads the devices once, when the config schedules on GPUs.
async fn open_gpus(config: &Config) -> Result<Option<Arc<Monitor>>, RunError> {
    if matches!(config.gpu.devices, Devices::None) {
        return Ok(None);
    }
    if config.gpu.gpus_per_trial != 1 {
        return Err(RunError::Gpu(
            "gpus_per_trial > 1 is not supported yet: set it to 1 (multi-GPU trials are on the roadmap)".into(),
        ));
    }
    let lib = config.gpu.nvml_lib.clone();
    let gpu = tokio::task::spawn_blocking(move || Gpu::open(lib.as_deref()))
        .await
        .map_err(|e| RunError::Gpu(e.to_string()))?
        .map_err(|e| RunError::Gpu(e.to_string()))?;
    let count = gpu
        .device_count()
        .map_err(|e| RunError::Gpu(e.to_string()))?;
    let devices: Vec<u32> = match &config.gpu.devices {
        Devices::All => (0..count).collect(),
        Devices::List(l) => {
            if let Some(bad) = l.iter().find(|d| **d >= count) {
                return Err(RunError::Gpu(format!(
                    "[gpu] devices names device {bad}, but NVML sees {count} device(s) (0..{})",
                    count.saturating_sub(1)
                )));
            }
            l.clone()
        }
        Devices::None => unreachable!("handled above"),
    };
    if devices.is_empty() {
        return Err(RunError::Gpu(
            "NVML sees no GPU; use [gpu] devices = \"none\" to run CPU-only".into(),
        ));
    }
    let monitor = Arc::new(Monitor::new(Arc::new(gpu), devices));
    monitor.poll().await;
    Ok(Some(monitor))
}

/// The host's GPU ledger (`gpu::ledger`) in its runtime directory (`gpu::runtime_dir`), or
/// `None` where the operator runs this daemon without one (`SWEEPD_LEDGER=none`, said). A
/// ledger sweepd refuses (a link, another user's file or directory, …) or cannot open stops
/// the run with what to fix: admitting as if alone would over-admit beside the other daemons
/// of the host, and the file it refused is never written.
fn open_ledger(monitor: &Monitor) -> Result<Option<crate::gpu::Ledger>, RunError> {
    use crate::gpu::runtime_dir::{self, RuntimeDir, RuntimeError, LEDGER_ENV, OFF};
    let fail = |e: String| {
        RunError::Gpu(format!(
            "{e}\n(or set {LEDGER_ENV}={OFF} to run this daemon without a ledger, counting only its own trials on its GPUs)"
        ))
    };
    let Some(place) = runtime_dir::from_env().map_err(fail)? else {
        warn!("{LEDGER_ENV}={OFF}: no GPU ledger; this daemon counts only its own trials on its GPUs, and other sweepd daemons on this host do not see them");
        return Ok(None);
    };
    let me = crate::gpu::ledger::Owner::me().ok_or_else(|| {
        fail(
            "/proc does not say this process's start time, which the GPU ledger names daemons by"
                .into(),
        )
    })?;
    let dir = RuntimeDir::open(&place.dir, place.origin).map_err(|e| fail(e.to_string()))?;
    let totals = monitor
        .readings()
        .into_iter()
        .filter_map(|(d, r)| Some((d, r.ok()?.total)));
    match crate::gpu::Ledger::open(Arc::new(dir), &place.name, me, totals) {
        Ok(l) => {
            info!(ledger = %l.path().display(), "GPU ledger shared with the other daemons on this host");
            Ok(Some(l))
        }
        // Its message names the file.
        Err(e) if e.get_ref().is_some_and(|e| e.is::<RuntimeError>()) => Err(fail(e.to_string())),
        Err(e) => Err(fail(format!(
            "the GPU ledger {}: {e}",
            place.path().display()
        ))),
    }
}

/// The file through which the studies on this host of our `[gpu] memory_group` that run our
/// command over our params share their measured peaks (`gpu::peak_log`), beside the ledger;
/// `None` without a group or where it cannot be opened or is refused (said once: this study
/// then learns memory from its own trials only, and a file refused is never written).
fn open_peak_log(config: &Config, ledger: &crate::gpu::Ledger) -> Option<crate::gpu::PeakLog> {
    use crate::gpu::peak_log::fingerprint;
    let program = program_of(config)?;
    let study = format!("{}\n{}", config.storage.path.display(), config.study.name);
    let me = crate::gpu::ledger::Owner::me();
    let (program, study) = (fingerprint(&program), fingerprint(&study));
    match crate::gpu::PeakLog::open(ledger.dir(), ledger.name(), program, study, me) {
        Ok(log) => Some(log),
        Err(e) => {
            error!("cannot use the file of peaks shared with the other studies of this memory_group on this host ({e}): this study learns memory from its own trials only");
            None
        }
    }
}

/// What names the file a study's peaks are shared through (`None` without `[gpu] memory_group`):
/// the group, which says what sweepd cannot check (that a trial's memory is a function of its
/// params alone, whatever the study's directory, environment or data: the same `train.py` may
/// be another file in each study's directory, or read another dataset), and what it can: the
/// command, how workers run and use the GPU, and the params. (`check` refuses a group without
/// declared params.)
fn program_of(config: &Config) -> Option<String> {
    let group = config.gpu.memory_group.as_ref()?;
    let w = &config.worker;
    Some(format!(
        "{:?}",
        (
            group,
            &w.command,
            &w.allocator,
            w.mode,
            config.gpu.gpus_per_trial,
            &config.space
        )
    ))
}

/// Kills worker groups that an earlier instance started and left behind (kill -9 of the
/// daemon), identified by pid *and* start time so that a reused pid is never touched; where
/// its pids are not ours (`kill` false: another machine or container, an earlier boot), only
/// marks them exited.
async fn reap_previous_instance(
    store: &Store,
    study: &crate::store::Study,
    host: Option<&str>,
    kill: bool,
) -> Result<(), StoreError> {
    for (worker_id, pid, start) in store.unfinished_workers(study, host).await? {
        if let (true, Some(pid), Some(start)) = (kill, pid, start) {
            if process::kill_stale_group(pid as i32, start as u64) {
                warn!(
                    worker_id,
                    pid, "killed a worker left running by a previous instance"
                );
                store
                    .event(Some(worker_id), None, "killed_stale", &format!("pid {pid}"))
                    .await?;
            }
        }
        store.worker_exited(worker_id, None, None).await?;
    }
    Ok(())
}

/// Where `sweepd_worker.py` lives, put on the workers' PYTHONPATH (`config::helper_dir`,
/// which `check` also asks, to refuse a `[worker.env] PYTHONPATH` that hides it).
pub fn python_dir() -> Option<PathBuf> {
    crate::config::helper_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_slot_is_reported_as_a_panic_not_a_sampler_error() {
        let e = tokio::spawn(async { panic!("index out of bounds") })
            .await
            .unwrap_err();
        let e = RunError::from_slot_panic(e);
        assert!(matches!(e, RunError::Panicked(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "a slot task panicked (a bug in sweepd; please report it): index out of bounds"
        );
    }

    /// A config in `dir` with `worker` (`python train.py` unless it sets the command) and `gpu`
    /// spliced in.
    fn config(dir: &std::path::Path, worker: &str, gpu: &str) -> Config {
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let worker = if worker.starts_with("command") {
            worker.to_owned()
        } else {
            format!("command = [\"python\", \"train.py\"]\n{worker}")
        };
        let text = format!(
            "[study]\nname = \"s\"\n[worker]\n{worker}\n\
             [params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n[gpu]\n{gpu}\n"
        );
        Config::parse(&text, &dir.join("supervisor.toml")).unwrap()
    }

    #[test]
    fn studies_of_one_memory_group_share_whatever_their_directory_and_environment_but_not_their_command(
    ) {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let group = "memory_group = \"resnet\"";
        let program = |dir: &tempfile::TempDir, worker: &str, gpu: &str| {
            program_of(&config(dir.path(), worker, gpu))
        };
        let base = program(&a, "", group).unwrap();
        // Another study's directory, its own working directory and environment: one program.
        assert_eq!(
            program(&b, "cwd = \"sub\"\n[worker.env]\nOUT = \"/tmp/b\"", group).unwrap(),
            base
        );
        // What sweepd can check, and the group itself, set them apart.
        for (worker, gpu) in [
            ("command = [\"python\", \"other.py\"]", group),
            ("mode = \"oneshot\"", group),
            ("[worker.allocator]\npreset = \"none\"", group),
            ("", "memory_group = \"bert\""),
        ] {
            let text = config(b.path(), worker, gpu);
            assert_ne!(program_of(&text), Some(base.clone()), "{worker} {gpu}");
        }
        // No group, no sharing.
        assert_eq!(program(&a, "", ""), None);
    }
}
