//! Idle persistent workers on GPUs, kept between trials by the `Core` rather than by a slot.
//!
//! A worker that has run a trial holds its CUDA context (hundreds of MiB) and whatever its
//! framework still caches. If every slot kept its own worker for its lifetime, a card would
//! carry `max_par` such workers, idle or not, and admission could not pack trials into that
//! memory. So on GPUs a slot owns a worker only while it runs a trial: a worker whose trial ended
//! waits here, on its device, and admission decides with the trial it admits which idle worker
//! the trial runs on (the one used most recently on that device) and which idle workers must be
//! retired first to make room (least recently used first; `gpu::Capacity::reclaim`). The
//! chosen workers are handed over with the trial: the slot that runs the trial takes them
//! (`take`), retires those it must, then runs the trial. Idle workers also go after
//! `[gpu] idle_worker_timeout`, and when their process died while idle (`expired`).

use super::decide;
use super::events::Retirement;
use super::policy::WorkerHealth;
use crate::gpu::{IdleWorker, Monitor};
use crate::process::Worker;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// A worker a slot holds (or the pool, between its trials) and what is known of it.
pub(super) struct Current {
    pub(super) worker: Worker,
    pub(super) device: Option<u32>,
    pub(super) health: WorkerHealth,
}

impl Current {
    /// A worker that has just started, on `device`.
    pub(super) fn new(worker: Worker, device: Option<u32>) -> Current {
        Current {
            worker,
            device,
            health: WorkerHealth::default(),
        }
    }
}

/// A worker waiting for its next trial.
pub(super) struct Idle {
    pub(super) current: Current,
    /// When its last trial ended.
    pub(super) since: Instant,
}

/// The workers admission gave a started trial.
#[derive(Default)]
pub(super) struct Handoff {
    /// The worker to run the trial on (none: start one).
    pub(super) reuse: Option<Current>,
    /// Idle workers to retire before the trial starts: it was admitted into their memory.
    pub(super) retire: Vec<Current>,
}

#[derive(Default)]
pub(super) struct Pool {
    idle: Vec<Idle>,
    handoffs: HashMap<i64, Handoff>,
}

impl Pool {
    /// A worker whose trial ended waits here for the next one on its device.
    pub(super) fn put(&mut self, current: Current, now: Instant) {
        self.idle.push(Idle {
            current,
            since: now,
        });
    }

    /// The idle workers as admission sees them: what each holds now per the monitor's latest
    /// reading, 0 for one whose process is gone (the driver freed its memory already, and free
    /// memory must not count it twice).
    pub(super) fn views(&self, monitor: &Monitor) -> Vec<IdleWorker> {
        self.idle
            .iter()
            .filter_map(|i| {
                let c = &i.current;
                let device = c.device?;
                let memory = if alive(c) {
                    monitor.idle_held(c.worker.pid as i32).unwrap_or(0)
                } else {
                    0
                };
                Some(IdleWorker {
                    id: c.worker.id,
                    device,
                    memory,
                    since: i.since,
                })
            })
            .collect()
    }

    /// A trial started: the workers admission chose for it leave the pool, to be taken by the
    /// slot that runs it. Ids no longer here (cannot happen under the core's lock) are skipped.
    pub(super) fn hand(&mut self, trial_id: i64, reuse: Option<i64>, retire: &[i64]) {
        let mut out = |id: i64| -> Option<Current> {
            let k = self.idle.iter().position(|i| i.current.worker.id == id)?;
            Some(self.idle.swap_remove(k).current)
        };
        let handoff = Handoff {
            reuse: reuse.and_then(&mut out),
            retire: retire.iter().filter_map(|id| out(*id)).collect(),
        };
        if handoff.reuse.is_some() || !handoff.retire.is_empty() {
            self.handoffs.insert(trial_id, handoff);
        }
    }

    /// What admission handed to this trial (nothing: start a worker for it).
    pub(super) fn take(&mut self, trial_id: i64) -> Handoff {
        self.handoffs.remove(&trial_id).unwrap_or_default()
    }

    /// Idle workers to retire now: idle for `timeout` or more, or whose process is gone.
    pub(super) fn expired(
        &mut self,
        now: Instant,
        timeout: Duration,
    ) -> Vec<(Current, Retirement)> {
        let mut out = Vec::new();
        let mut k = 0;
        while k < self.idle.len() {
            let i = &self.idle[k];
            let idle_for = now.saturating_duration_since(i.since);
            match decide::idle_expired(alive(&i.current), idle_for, timeout) {
                Some(why) => out.push((self.idle.swap_remove(k).current, why)),
                None => k += 1,
            }
        }
        out
    }

    /// Idle workers to retire for the other daemons' requests (`asked`: bytes per device): on
    /// each device, the least recently used until their memory makes up for it.
    pub(super) fn answer(
        &mut self,
        asked: &BTreeMap<u32, u64>,
        monitor: &Monitor,
    ) -> Vec<(Current, Retirement)> {
        let views = self.views(monitor);
        let mut out = Vec::new();
        for (&device, &bytes) in asked {
            for id in crate::gpu::admission::answer(&views, device, bytes) {
                if let Some(k) = self.idle.iter().position(|i| i.current.worker.id == id) {
                    let why = Retirement::Asked { device, bytes };
                    out.push((self.idle.swap_remove(k).current, why));
                }
            }
        }
        out
    }

    /// Every worker left, idle or handed over to a trial that never ran: the study is over.
    pub(super) fn drain(&mut self) -> Vec<Current> {
        let mut out: Vec<Current> = self.idle.drain(..).map(|i| i.current).collect();
        for (_, h) in self.handoffs.drain() {
            out.extend(h.reuse);
            out.extend(h.retire);
        }
        out
    }
}

/// Whether a worker's process still runs: its exit not seen yet, and its pid not a zombie (an
/// idle worker's exit is seen only when someone waits for it).
pub(super) fn alive(c: &Current) -> bool {
    c.worker.exit_status().is_none()
        && crate::process::proc_stat(c.worker.pid as i32).is_some_and(|s| s.state != 'Z')
}
