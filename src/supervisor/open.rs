//! What a run starts from, once it holds the study: what a previous instance left reconciled
//! (its workers reaped, its RUNNING trials FAILed and re-enqueued), the GPUs read, the host's
//! ledger and the memory group's peak file opened, and the `Core` built from the study's
//! history (sampler, pruner, memory model, tally, progress).

use super::admit::GpuCtl;
use super::core::{Core, Setup};
use super::error::RunError;
use super::events::WorkerEvent;
use super::settings::Settings;
use crate::config::{Config, Devices};
use crate::gpu::{Capacity, Gpu, MemoryModel, Monitor};
use crate::metrics::Metrics;
use crate::process;
use crate::progress::{Progress, Tracker};
use crate::pruner::Pruner;
use crate::sampler;
use crate::store::{self, DaemonId, Feed, Store, StoreError};
use crate::study::pareto::{self, Front};
use crate::study::{ControlState, Tally};
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{error, info, warn};

/// What a previous instance left: its workers reaped (`reap`: killed where its pids are ours),
/// and its RUNNING trials FAILed and re-enqueued. Several hosts (PostgreSQL): only this host's
/// are ours to reconcile; the others' are their daemons' (or, once silent, failed over by
/// housekeeping).
pub(super) async fn reconcile(
    store: &Store,
    study: &crate::store::Study,
    me: &DaemonId,
    reap: bool,
) -> Result<(), RunError> {
    let several_hosts = store.engine() == store::Engine::Postgres;
    let only_host = several_hosts.then_some(me.host.as_str());
    reap_previous_instance(store, study, only_host, reap).await?;
    let mut stale = Vec::new();
    for (trial_id, owner) in store.sweepd_running(study).await? {
        // This daemon holds the study's lock (on this host): every other sweepd daemon that
        // ran it (here) is gone. RUNNING trials that no sweepd started (an Optuna script's)
        // are left to their owner. This one has started none yet, so a trial that names our
        // pid and start time is a previous daemon's too (pid 1 of another container).
        let ours = only_host.is_none_or(|h| owner.as_ref().is_some_and(|o| o.host == h));
        if ours {
            let reason =
                "interrupted: the sweepd instance running this trial stopped (killed or crashed)";
            stale.extend(store.interrupt(study, trial_id, reason).await?);
        }
    }
    if !stale.is_empty() {
        store.sync().await?;
        warn!(trials = ?stale, "marked trials left RUNNING by a previous instance as FAIL and re-enqueued them");
    }
    Ok(())
}

/// A run's core, and what the run's tasks share with it.
pub(super) struct Opened {
    pub(super) core: Core,
    pub(super) monitor: Option<Arc<Monitor>>,
    pub(super) metrics: Arc<Metrics>,
}

/// Reads the GPUs, builds the sampler, the pruner and the memory model from the study's
/// history, opens the host's ledger and the memory group's peak file, and builds the core
/// (under `steer`, the study's control state as read at start).
pub(super) async fn open(
    settings: &Settings,
    store: &Store,
    study: &crate::store::Study,
    me: &DaemonId,
    progress: watch::Sender<Progress>,
    steer: ControlState,
) -> Result<Opened, RunError> {
    let config = settings.get();
    let monitor = open_gpus(&config).await?;
    let sampler = sampler::build(
        config.study.sampler,
        &config.space,
        config.sampler.seed.or(config.study.seed),
        &config.study.directions,
        &config.sampler,
    )
    .map_err(RunError::Sampler)?;
    // At the bound until a worker of ours reports a framework that enforces its cap
    // (`decide::aim`, in each admission round).
    let mut model = MemoryModel::new(&config.space, config.gpu.trial_memory);
    for (params, peak) in store.peaks(study).await? {
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
        .changes(study, me, &mut feed, pruner.uses_curves())
        .await?;
    let counts = store.counts(study).await?;
    let mut tally = Tally::default();
    store.refresh_tally(study, &mut tally).await?;
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
    let gpu = match &monitor {
        Some(m) => Some(gpu_side(&config, m, model)?),
        None => None,
    };
    let several_hosts = store.engine() == store::Engine::Postgres;
    let core = Core::new(Setup {
        store: store.clone(),
        study: study.clone(),
        settings: settings.clone(),
        me: me.clone(),
        sampler,
        pruner,
        tally,
        steer,
        gpu,
        next_key: store.next_number(study).await? as u64,
        key_offset: host_key_offset(me, several_hosts),
        progress: tracker(store, study, progress, counts.finished()).await?,
        feed,
        history,
    });
    metrics.set_best(
        &core.progress().bests(),
        core.progress().front().map(|f| f.0),
    );
    Ok(Opened {
        core,
        monitor,
        metrics,
    })
}

/// The GPU side of the core: admission's rule, the memory model, the host's ledger and the
/// memory group's peak file, with what the other studies of the group measured so far.
fn gpu_side(config: &Config, m: &Arc<Monitor>, model: MemoryModel) -> Result<GpuCtl, RunError> {
    let ledger = open_ledger(m)?;
    let peak_log = ledger.as_ref().and_then(|l| open_peak_log(config, l));
    let capacity = Capacity::new(
        config.gpu.max_par_per_device,
        config.retry.oom_admission_factor,
        config.retry.oom_recovery,
    );
    let mut gpu = GpuCtl::new(m.clone(), capacity, model, ledger, peak_log);
    if gpu.peak_log().is_some() {
        let (ended, running) = gpu.learn_from_neighbours(&config.space);
        if let Some(log) = gpu.peak_log() {
            info!(
                file = %log.path().display(),
                trials = ended,
                running,
                "memory learnt from the other studies of this memory_group on this host"
            );
        }
    }
    Ok(gpu)
}

/// The progress tracker, starting from the study's best trial (one objective) or its Pareto
/// front (several), as the database holds them.
async fn tracker(
    store: &Store,
    study: &crate::store::Study,
    tx: watch::Sender<Progress>,
    finished: u64,
) -> Result<Tracker, RunError> {
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
                WorkerEvent::KilledStale { pid }
                    .record(store, Some(worker_id), None)
                    .await?;
            }
        }
        store.worker_exited(worker_id, None, None).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
