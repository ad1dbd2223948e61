//! The supervisor's rules, as pure functions and small state machines: whether a failure is
//! retried, when a device is quarantined, when a study that can only fail stops, when a worker
//! is recycled or replaced, whether an OOM means the params never fit, which candidate in the
//! admission line may start. No I/O and no clock of their own (time comes in as an argument),
//! so every rule is unit-tested here directly, table-driven, instead of only through a daemon.

use crate::classify;
use crate::clock;
use crate::config::RetryConfig;
use crate::sampler::Proposal;
use crate::study::{Attempts, Distribution, Dists, FailureKind, ParamValue, Params};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A worker whose memory between trials exceeds its level after its first trial by less than
/// this is healthy enough to keep after an OOM exception.
pub(super) const OOM_HEALTH_SLACK: u64 = 256 << 20;
/// Candidates kept in line for admission (see `Core::plan`).
pub(super) const MAX_QUEUE: usize = 8;
/// Trials that may start ahead of the candidate at the head of the line before it has priority.
/// Each time it has, the card drains until the head fits: a large trial on a card of small
/// ones leaves much of it idle meanwhile. 16 rather than 8: side by side in the packing bench
/// (docs/benchmarks.md, the thirteenth) 0.71 → 0.74 of the oracle on the continuous workload,
/// the two-daemon one no worse, 32 no better. A study that runs nothing is not kept waiting by
/// it ([`head_passes`]).
pub(super) const MAX_PASSES: u32 = 16;

// ---------------------------------------------------------------------------------------------
// Failures: retries, the circuit breaker, the same error again and again.

/// Quarantines a device (or the CPU, `None`) whose failures keep coming with no success. Its
/// settings (`[retry] breaker_*`) are passed in at each call, from the config in force.
#[derive(Default)]
pub(super) struct Breaker {
    devices: HashMap<Option<u32>, BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    consecutive: u32,
    quarantines: u32,
    until: Option<Instant>,
}

impl Breaker {
    pub(super) fn success(&mut self, device: Option<u32>) {
        self.devices.insert(device, BreakerState::default());
    }

    /// Counts a failure; returns the quarantine it starts, if any.
    pub(super) fn failure(
        &mut self,
        device: Option<u32>,
        now: Instant,
        cfg: &RetryConfig,
    ) -> Option<Duration> {
        let st = self.devices.entry(device).or_default();
        st.consecutive += 1;
        if st.consecutive < cfg.breaker_threshold {
            return None;
        }
        st.consecutive = 0;
        let factor = 2u32.saturating_pow(st.quarantines.min(20));
        let wait = clock::times(cfg.breaker_backoff, factor).min(cfg.breaker_max_backoff);
        st.quarantines = st.quarantines.saturating_add(1);
        st.until = Some(clock::after(now, wait));
        Some(wait)
    }

    pub(super) fn quarantined(&self, device: Option<u32>, now: Instant) -> Option<Instant> {
        self.devices
            .get(&device)
            .and_then(|s| s.until)
            .filter(|u| *u > now)
    }

    pub(super) fn release_all(&mut self) {
        for st in self.devices.values_mut() {
            st.until = None;
            st.consecutive = 0;
        }
    }

    /// Why the whole study is paused: every device quarantined (after `threshold` failures,
    /// `[retry] breaker_threshold`).
    pub(super) fn paused(
        &self,
        devices: &[Option<u32>],
        now: Instant,
        threshold: u32,
    ) -> Option<String> {
        let untils: Vec<Instant> = devices
            .iter()
            .map(|d| self.quarantined(*d, now))
            .collect::<Option<_>>()?;
        let soonest = untils.into_iter().min()?;
        Some(format!(
            "paused: every device is quarantined after {} consecutive failures with no success; \
             resumes by itself in {}s, or now with `sweepd resume`",
            threshold,
            (soonest - now).as_secs()
        ))
    }
}

/// What makes two failures the same error: a user error's exception type and the place in the
/// user's code that raised it, or the way a value was bad.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signature {
    kind: FailureKind,
    error: Option<classify::UserError>,
    /// For a bad value: what was wrong with it ("returned NaN"), without the value itself.
    what: String,
}

impl Signature {
    /// The signature of a failure that will not clear by itself (a user error, a bad value);
    /// `None` for the others.
    pub(super) fn of(
        kind: FailureKind,
        reason: &str,
        error: Option<&classify::UserError>,
    ) -> Option<Signature> {
        match kind {
            FailureKind::UserError => Some(Signature {
                kind,
                error: error.cloned(),
                what: String::new(),
            }),
            FailureKind::BadValue => Some(Signature {
                kind,
                error: None,
                what: reason.split(':').next().unwrap_or(reason).to_owned(),
            }),
            _ => None,
        }
    }
}

/// Stops a study whose trials can only fail: `limit` trials in a row failing with the same user
/// error or bad value while nothing has succeeded since this daemon started. Such an error does
/// not clear by itself (a bug in the objective, Optuna's `report(value, step)` order): spending
/// the budget on it, or pausing and resuming as for a device fault, helps no one. `limit`
/// (`[retry] stop_after_same_error`) is passed in at each failure, from the config in force.
#[derive(Debug, Default)]
pub(super) struct SameError {
    succeeded: bool,
    signature: Option<Signature>,
    /// trial_ids of the current run of identical failures.
    pub(super) streak: Vec<i64>,
    /// The error the study stopped for: later failures with it do not spend the budget either.
    stopped: Option<Signature>,
}

impl SameError {
    pub(super) fn success(&mut self) {
        self.succeeded = true;
        self.signature = None;
        self.streak.clear();
    }

    /// A failure that will not clear by itself. True when it completes the streak of `limit`
    /// that stops the study (the streak is then `self.streak`, this trial last).
    pub(super) fn failure(&mut self, trial_id: i64, sig: &Signature, limit: u32) -> bool {
        if limit == 0 || self.succeeded || self.stopped.is_some() {
            return false;
        }
        if self.signature.as_ref() != Some(sig) {
            self.signature = Some(sig.clone());
            self.streak.clear();
        }
        self.streak.push(trial_id);
        if self.streak.len() as u64 >= u64::from(limit) {
            self.stopped = Some(sig.clone());
            return true;
        }
        false
    }

    /// Whether the study already stopped for this error.
    pub(super) fn stopped_for(&self, sig: &Signature) -> bool {
        self.stopped.as_ref() == Some(sig)
    }
}

/// Why the study stopped for a repeated error, for a person who has to fix it.
pub(super) fn same_error_message(n: usize, reason: &str, sig: &Signature) -> String {
    let mut text = format!(
        "stopped: {n} trials in a row failed with the same error, and none has succeeded since \
         sweepd started:\n  {reason}"
    );
    if let Some(at) = sig.error.as_ref().and_then(|e| e.at.as_ref()) {
        text.push_str(&format!("\n  raised at {at}"));
    }
    text.push_str(&format!(
        "\nThese {n} trials did not spend the budget: they are re-enqueued and run first when \
         sweepd starts again. Fix the error, then run sweepd again."
    ));
    text
}

/// Redraws of a proposal that resembles an infeasible trial before it is run anyway.
pub(super) const MAX_REDRAWS: u64 = 20;

/// What a proposal settles of a trial before it runs: its static params, and the relative
/// values its objective will get if it asks for them.
pub(super) fn proposed(p: &Proposal) -> Params {
    let mut all = p.params.clone();
    for (name, (_, v)) in &p.relative {
        all.entry(name.clone()).or_insert_with(|| v.clone());
    }
    all
}

/// Whether `p` resembles the infeasible `bad` (whose params have the distributions `dists`):
/// it has every param `bad` had, equal on every discrete one and within 5% of the range (in
/// log space for log params) on every continuous one. A proposal that does not settle one of
/// them (a param its objective will suggest as it runs, a branch it may not take) does not
/// resemble it: nothing is known against it.
pub(super) fn resembles(p: &Params, bad: &Params, dists: &Dists) -> bool {
    !bad.is_empty()
        && bad
            .iter()
            .all(|(name, b)| match (p.get(name), b, dists.get(name)) {
                (Some(ParamValue::Float(a)), ParamValue::Float(b), Some(dist)) => match dist {
                    Distribution::Float { step: Some(_), .. } => a == b,
                    Distribution::Float {
                        low,
                        high,
                        log: true,
                        ..
                    } => (a.ln() - b.ln()).abs() <= 0.05 * (high.ln() - low.ln()),
                    Distribution::Float { low, high, .. } => (a - b).abs() <= 0.05 * (high - low),
                    _ => a == b,
                },
                (Some(a), b, _) => a == b,
                _ => false,
            })
}

/// Whether a failure of `kind` gets another attempt, given the attempts before it.
pub(super) fn retry_allowed(kind: FailureKind, attempts: &Attempts, cfg: &RetryConfig) -> bool {
    let n = |k: FailureKind| attempts.get(&k).copied().unwrap_or(0);
    match kind {
        // sweepd's doing, or the trial's own estimate: the params are not at fault.
        FailureKind::Interrupted | FailureKind::Cap => true,
        FailureKind::Oom => n(FailureKind::Oom) < cfg.oom,
        FailureKind::CudaFatal => n(FailureKind::CudaFatal) < cfg.cuda_fatal,
        FailureKind::Killed
        | FailureKind::Timeout
        | FailureKind::Hang
        | FailureKind::WorkerDied => {
            let crashes: u32 = [
                FailureKind::Killed,
                FailureKind::Timeout,
                FailureKind::Hang,
                FailureKind::WorkerDied,
            ]
            .into_iter()
            .map(n)
            .sum();
            crashes < cfg.crash
        }
        FailureKind::UserError | FailureKind::BadValue | FailureKind::Protocol => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Workers: kept, recycled or replaced.

/// How a trial ended for the worker that ran it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Fate {
    Keep,
    /// The worker is dead or must not be trusted with another trial.
    Replace(String),
}

/// What a slot knows of its worker's history and memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct WorkerHealth {
    pub(super) successes: u64,
    /// Trials it ran, whatever their outcome (a fresh process has run none).
    pub(super) trials_run: u64,
    /// GPU memory of the worker between trials after its first success (growth baseline).
    pub(super) baseline: Option<u64>,
    /// GPU memory of the worker after its last trial (what it holds when the next one starts).
    pub(super) idle: Option<u64>,
}

impl WorkerHealth {
    /// Whether the process starts a trial as clean as a new one: it has run nothing, or its
    /// memory between trials has not grown past its level after its first success. An OOM in
    /// such a process, alone on the device, means the params themselves do not fit.
    pub(super) fn clean(&self) -> bool {
        self.trials_run == 0
            || matches!((self.baseline, self.idle), (Some(b), Some(i)) if i <= b.saturating_add(OOM_HEALTH_SLACK))
    }
}

/// After a successful trial: recycle the worker after `recycle_after` successes (0: never), or
/// when its memory between trials grew past `recycle_on_growth` over its level after the first
/// trial.
pub(super) fn recycle(
    h: &WorkerHealth,
    recycle_after: Option<u32>,
    recycle_on_growth: Option<u64>,
) -> Fate {
    if let Some(limit) = recycle_after {
        if limit > 0 && h.successes >= u64::from(limit) {
            return Fate::Replace(format!("recycled after {} successful trials", h.successes));
        }
    }
    match (recycle_on_growth, h.baseline, h.idle) {
        (Some(growth), Some(base), Some(now)) if now > base.saturating_add(growth) => {
            Fate::Replace(format!(
                "recycled early: its memory between trials grew from {} to {}",
                crate::units::whole_mib(base),
                crate::units::format_mib(now)
            ))
        }
        _ => Fate::Keep,
    }
}

/// After an OOM exception the worker stays only if its memory is back near its level after
/// its first trial; a fragmented or leaking process is replaced. Without readings: replace.
pub(super) fn after_oom(h: &WorkerHealth) -> Fate {
    match (h.idle, h.baseline) {
        (Some(now), Some(base)) if now <= base.saturating_add(OOM_HEALTH_SLACK) => Fate::Keep,
        (now, base) => Fate::Replace(format!(
            "replaced after an OOM: holds {} between trials (baseline {})",
            crate::units::format_mib(now.unwrap_or(0)),
            base.map_or("unknown".into(), crate::units::format_mib)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Out of memory: what an OOM says about the params and the device.

/// An OOM, or an OOM that turned into a device-side assert: the trial needs more memory than
/// it had, which admission and the memory model learn from.
pub(super) fn oom_like(kind: FailureKind, reason: &str) -> bool {
    kind == FailureKind::Oom
        || (kind == FailureKind::CudaFatal && reason.contains("after CUDA OOM"))
}

/// What an out-of-memory message shows a trial needed at least (`demand`: what its process held
/// plus what it tried to allocate) is more than the device can ever give one trial, its `total`
/// less `headroom`: alone on the card it would fail the same way.
pub(super) fn never_fits(demand: u64, total: u64, headroom: u64) -> bool {
    demand > total.saturating_sub(headroom)
}

/// An out-of-memory failure at no more than admission counted for the trial: what its message
/// shows its process would have held with the allocation that failed (`footprint`: all it held,
/// its allocator's cache included, plus that allocation) fits within the `bound` it was
/// admitted with. The rest of the card was held by other processes (someone else's job that
/// took memory on a shared card, a trial beyond its own bound): these params are not why, so
/// neither the memory model nor the "alone on the device" rule learns from it. Without
/// the message's figures there is no such verdict: NVML's readings come at intervals and may
/// not have seen what the trial held when it failed.
pub(super) fn memory_taken(footprint: Option<u64>, bound: u64) -> bool {
    footprint.is_some_and(|f| f <= bound)
}

/// An out-of-memory failure of a trial admitted on `[gpu] trial_memory`'s guess alone (`bound`
/// is `guess`, the guess with its margin: nothing measured said better) that needed more
/// (`reached`, by its readings or its message): the guess was wrong, not the trial, and only the
/// person who set it (or left the default) can make it right before the model has measured
/// anything. Left as it is, every study of such trials starts with a wave of them failing.
pub(super) fn outgrew_guess(bound: u64, guess: u64, reached: u64) -> bool {
    guess > 0 && bound == guess && reached > bound
}

/// What an out-of-memory failure on a device is judged from: the message's figures
/// (`classify::OomFigures`), what the readings saw, and what admission counted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OomFacts {
    /// All its process held plus the allocation that failed (`OomFigures::footprint`).
    pub(super) footprint: Option<u64>,
    /// The least it needed (`OomFigures::demand`).
    pub(super) demand: Option<u64>,
    /// The peak the readings saw.
    pub(super) peak: Option<u64>,
    /// The device's memory, and the headroom admission keeps on it.
    pub(super) total: Option<u64>,
    pub(super) headroom: u64,
    /// The estimate it was admitted with (0: none), and `trial_memory`'s guess with its margin.
    pub(super) bound: u64,
    pub(super) guess: u64,
}

/// What `Core::finish_begin` does with an out-of-memory failure on a device.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OomVerdict {
    /// Why its params are infeasible, if they are.
    pub(super) infeasible: Option<String>,
    /// Appended to its reason: what its figures showed.
    pub(super) notes: String,
    /// What the memory model raises its estimate near these params from (`MemoryModel::record_oom`),
    /// unless the memory counted for the trial was taken ([`memory_taken`]).
    pub(super) reached: Option<u64>,
    /// Its message shows other processes held the card ([`memory_taken`]): the failure is
    /// theirs, and spends neither the budget nor the trial's retries.
    pub(super) others_held: bool,
}

/// The verdict on an out-of-memory failure, starting from `alone` (the [`infeasible`] rule's
/// "out of memory while alone on the device", if it applied): [`memory_taken`] clears it;
/// [`never_fits`] makes the params infeasible whatever ran beside the trial; a message that says
/// what the process held and shows that the device could have given it what it needed clears
/// "alone" too ("alone" counts our running trials as the failure is handled, while the workers of
/// trials that failed a moment before may still hold the card); and [`outgrew_guess`] says
/// which setting to change.
pub(super) fn oom_verdict(alone: Option<String>, f: &OomFacts) -> OomVerdict {
    use crate::units::format_gib;
    let mut infeasible = alone;
    let mut notes = String::new();
    let taken = memory_taken(f.footprint, f.bound);
    if taken {
        infeasible = None;
        notes.push_str(&format!(
            " (with that allocation its process would have held {}, within the {} it was \
             admitted with: other processes held the rest of the card; on a card shared with \
             other jobs, raise [gpu] headroom)",
            format_gib(f.footprint.unwrap_or(0)),
            format_gib(f.bound)
        ));
    }
    if let (Some(need), Some(total)) = (f.demand, f.total) {
        if never_fits(need, total, f.headroom) {
            infeasible = Some(format!(
                "needs at least {} by its out-of-memory message, more than the device's {} less \
                 headroom {}",
                format_gib(need),
                format_gib(total),
                format_gib(f.headroom)
            ));
        } else if infeasible.is_some() && f.footprint.is_some() {
            infeasible = None;
            notes.push_str(&format!(
                " (not infeasible: it needed at least {} by its message, which the device's {} \
                 less headroom {} can give one trial; other processes held the rest)",
                format_gib(need),
                format_gib(total),
                format_gib(f.headroom)
            ));
        }
    }
    let reached = (!taken).then(|| f.peak.unwrap_or(0).max(f.demand.unwrap_or(0)));
    if let Some(r) = reached.filter(|r| outgrew_guess(f.bound, f.guess, *r)) {
        notes.push_str(&format!(
            " (admitted at {}, [gpu] trial_memory's guess x {}, before any trial like it was \
             measured; it needed at least {}: set trial_memory near your trials' largest peak, \
             or the first trials of every study will run out of memory like this one)",
            format_gib(f.bound),
            crate::gpu::memory_model::PRIOR_MARGIN,
            format_gib(r)
        ));
    }
    OomVerdict {
        infeasible,
        notes,
        reached,
        others_held: taken,
    }
}

/// Out of memory in a fresh process (no fragmentation of its own) with no other sweepd trial on
/// the device: these params do not fit this card.
pub(super) fn infeasible(kind: FailureKind, alone_on_device: bool, clean_worker: bool) -> bool {
    kind == FailureKind::Oom && alone_on_device && clean_worker
}

// ---------------------------------------------------------------------------------------------
// The admission line.

/// Whether the head of the line has priority: once it has been passed `MAX_PASSES` times, a
/// trial behind it starts only within what the head leaves free on the device once the trials
/// running before it end (`gpu::Capacity::backfill_room`). So a large trial waiting for room
/// cannot starve behind small ones, and the card does not stand idle while it drains for it.
pub(super) fn head_has_priority(head_passes: u32) -> bool {
    head_passes >= MAX_PASSES
}

/// How many times the head of our line has been passed: `own`, by trials behind it in our
/// line that started first, and `by_others`, trials the other daemons on this host started
/// since it began to wait. While we run no trial at all, one start by the others is enough to
/// count [`MAX_PASSES`]: a study that runs nothing while another keeps starting trials on the
/// card is starved outright, so its head holds its memory at once rather than after
/// [`MAX_PASSES`] more of their starts. With trials of minutes eight were the better part of an
/// hour with nothing of its own running; in the packing bench its learning phase then ran alone
/// at the end.
pub(super) fn head_passes(own: u32, by_others: u32, running: u64) -> u32 {
    let passes = own.saturating_add(by_others);
    if starved(by_others, running) {
        passes.max(MAX_PASSES)
    } else {
        passes
    }
}

/// Whether our study is starved outright: other daemons started trials past our head while we
/// run none (see [`head_passes`]).
pub(super) fn starved(by_others: u32, running: u64) -> bool {
    running == 0 && by_others > 0
}

/// Which of the candidates that fit now starts (`fits`: their places in line and expected
/// peaks, in line order): the head when it fits; else, of those behind it, the largest (the
/// first of equals). The small ones fill what room is left after it, and a large one does not
/// wait behind every small one for room the small ones keep taking. `None` when none fits.
pub(super) fn pick(fits: &[(usize, u64)]) -> Option<usize> {
    if fits.first().is_some_and(|(k, _)| *k == 0) {
        return Some(0);
    }
    fits.iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| a.1.cmp(&b.1).then(j.cmp(i)))
        .map(|(i, _)| i)
}

/// Whether a candidate may start ahead of `waiting_ahead` enqueued (WAITING) trials in line,
/// with `room` starts left in the budget (`None`: no trial budget). Each start spends a slot
/// of the budget: passing an enqueued trial with the last slots would leave it never run, so
/// the budget must still hold one for each of them after this start.
pub(super) fn may_pass(waiting_ahead: u64, room: Option<u64>) -> bool {
    waiting_ahead == 0 || room.is_none_or(|r| r > waiting_ahead)
}

/// Whether to draw one more candidate when none in line fits: the line is short and the
/// sampler has more. Also while the head has priority: a candidate drawn then starts only
/// beside it ([`head_has_priority`]), and without one the line ran dry behind the head and
/// the card drained for it with nothing else to run.
pub(super) fn look_further(line: usize, exhausted: bool) -> bool {
    line < MAX_QUEUE && !exhausted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg() -> RetryConfig {
        RetryConfig {
            oom: 2,
            cuda_fatal: 1,
            crash: 1,
            breaker_threshold: 3,
            breaker_backoff: Duration::from_secs(60),
            breaker_max_backoff: Duration::from_secs(600),
            oom_admission_factor: 0.75,
            oom_recovery: Duration::from_secs(600),
            stop_after_same_error: 5,
        }
    }

    #[test]
    fn a_proposal_near_an_infeasible_trial_resembles_it() {
        use crate::study::{Distribution, ParamValue};
        let dists: Dists = [
            (
                "lr".to_owned(),
                Distribution::Float {
                    low: 1e-5,
                    high: 1e-1,
                    step: None,
                    log: true,
                },
            ),
            (
                "dim".to_owned(),
                Distribution::Categorical {
                    choices: vec![json!(80), json!(512)],
                },
            ),
        ]
        .into();
        let p = |lr: f64, dim: usize| -> Params {
            [
                ("lr".to_owned(), ParamValue::Float(lr)),
                ("dim".to_owned(), ParamValue::Choice(dim)),
            ]
            .into_iter()
            .collect()
        };
        let bad = p(1e-3, 1);
        assert!(
            resembles(&p(1.2e-3, 1), &bad, &dists),
            "close in log space, same dim"
        );
        assert!(!resembles(&p(1.2e-3, 0), &bad, &dists), "another dim");
        assert!(!resembles(&p(1e-2, 1), &bad, &dists), "a decade away");
        // A proposal that leaves a param of the bad trial to its objective (another branch,
        // or one suggested as it runs) is not held against it; nor is a trial with no params.
        let mut lr_only = p(1.2e-3, 1);
        lr_only.remove("dim");
        assert!(!resembles(&lr_only, &bad, &dists), "dim unknown");
        let mut more = p(1.2e-3, 1);
        more.insert("units".into(), ParamValue::Int(64));
        assert!(
            resembles(&more, &bad, &dists),
            "a param bad lacks does not matter"
        );
        assert!(!resembles(&more, &Params::new(), &dists), "no params");
    }

    fn sig(exc: &str, line: u32) -> Signature {
        Signature {
            kind: FailureKind::UserError,
            error: Some(classify::UserError {
                exc_type: exc.into(),
                at: Some(classify::Frame {
                    file: "train.py".into(),
                    line,
                    function: "objective".into(),
                }),
            }),
            what: String::new(),
        }
    }

    #[test]
    fn the_same_error_in_a_row_with_no_success_stops_the_study() {
        // (failures as (trial_id, signature), a success before them?, limit, stops at index)
        type Case = (&'static str, Vec<Signature>, bool, u32, Option<usize>);
        let a = sig("TypeError", 20);
        let cases: Vec<Case> = vec![
            ("five identical", vec![a.clone(); 5], false, 5, Some(4)),
            ("four are not enough", vec![a.clone(); 4], false, 5, None),
            (
                "another line breaks the streak",
                vec![
                    a.clone(),
                    a.clone(),
                    sig("TypeError", 21),
                    a.clone(),
                    a.clone(),
                    a.clone(),
                ],
                false,
                3,
                Some(5),
            ),
            (
                "another type breaks it",
                vec![a.clone(), sig("KeyError", 20), a.clone()],
                false,
                2,
                None,
            ),
            (
                "a success since start: never",
                vec![a.clone(); 9],
                true,
                5,
                None,
            ),
            ("limit 0: never", vec![a.clone(); 9], false, 0, None),
        ];
        for (name, failures, succeeded, limit, stops_at) in cases {
            let mut s = SameError::default();
            if succeeded {
                s.success();
            }
            let stopped: Vec<usize> = failures
                .iter()
                .enumerate()
                .filter(|(i, f)| s.failure(*i as i64, f, limit))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(stopped.first().copied(), stops_at, "{name}");
            assert!(stopped.len() <= 1, "{name}: stops once");
            if let Some(at) = stops_at {
                assert_eq!(
                    s.streak.len() as u32,
                    limit,
                    "{name}: the streak is reported"
                );
                assert!(s.stopped_for(&failures[at]), "{name}");
            }
        }
    }

    #[test]
    fn the_breaker_counts_faults_that_may_clear_not_errors_of_the_objective() {
        for kind in FailureKind::ALL {
            let expected = !matches!(
                kind,
                FailureKind::Interrupted
                    | FailureKind::Cap
                    | FailureKind::UserError
                    | FailureKind::BadValue
                    | FailureKind::Protocol
            );
            assert_eq!(kind.may_clear(), expected, "{kind}");
        }
    }

    #[test]
    fn a_bad_value_signature_ignores_the_value_itself() {
        let a = Signature::of(
            FailureKind::BadValue,
            "the objective returned a non-number: None",
            None,
        );
        let b = Signature::of(
            FailureKind::BadValue,
            "the objective returned a non-number: 'x'",
            None,
        );
        assert_eq!(a, b);
        assert!(Signature::of(FailureKind::Oom, "out of memory", None).is_none());
    }

    #[test]
    fn breaker_quarantines_with_exponential_backoff_and_resets_on_success() {
        let mut b = Breaker::default();
        let cfg = cfg();
        let t = Instant::now();
        assert_eq!(b.failure(Some(0), t, &cfg), None);
        assert_eq!(b.failure(Some(0), t, &cfg), None);
        assert_eq!(b.failure(Some(0), t, &cfg), Some(Duration::from_secs(60)));
        assert!(b.quarantined(Some(0), t).is_some());
        assert!(b.paused(&[Some(0)], t, 3).is_some());
        assert!(
            b.paused(&[Some(0), Some(1)], t, 3).is_none(),
            "gpu1 still works"
        );
        for _ in 0..3 {
            b.failure(Some(0), t, &cfg);
        }
        assert_eq!(
            b.quarantined(Some(0), t),
            Some(t + Duration::from_secs(120)),
            "the second quarantine doubles"
        );
        b.release_all();
        assert!(b.quarantined(Some(0), t).is_none());
        b.success(Some(0));
        assert_eq!(b.failure(Some(0), t, &cfg), None);
    }

    #[test]
    fn breaker_backoff_that_overflows_when_doubled_saturates_not_panics() {
        // Validation bounds both backoffs, but the doubling and the deadline are computed at
        // run time: neither may overflow whatever the settings.
        let mut b = Breaker::default();
        let cfg = RetryConfig {
            breaker_threshold: 1,
            breaker_backoff: Duration::from_secs(u64::MAX / 2 + 1),
            breaker_max_backoff: Duration::MAX,
            ..cfg()
        };
        let t = Instant::now();
        assert_eq!(
            b.failure(None, t, &cfg),
            Some(Duration::from_secs(u64::MAX / 2 + 1))
        );
        assert_eq!(
            b.failure(None, t, &cfg),
            Some(Duration::MAX),
            "doubled, saturated"
        );
        for _ in 0..40 {
            b.failure(None, t, &cfg);
        }
        assert_eq!(b.quarantined(None, t), Some(t + clock::FAR));
        assert!(b.paused(&[None], t, 1).is_some());
    }

    #[test]
    fn retries_are_bounded_per_kind_and_crashes_share_one_limit() {
        use FailureKind::*;
        // (kind, earlier attempts by kind, allowed) with oom = 2, cuda_fatal = 1, crash = 1.
        type Case = (FailureKind, &'static [(FailureKind, u32)], bool);
        let cases: &[Case] = &[
            (Oom, &[], true),
            (Oom, &[(Oom, 1)], true),
            (Oom, &[(Oom, 2)], false),
            (Oom, &[(CudaFatal, 5)], true),
            (CudaFatal, &[], true),
            (CudaFatal, &[(CudaFatal, 1)], false),
            (CudaFatal, &[(Oom, 2)], true),
            (Killed, &[], true),
            (Killed, &[(Timeout, 1)], false),
            (Timeout, &[(Hang, 1)], false),
            (Hang, &[(WorkerDied, 1)], false),
            (WorkerDied, &[(Killed, 1)], false),
            (WorkerDied, &[(Oom, 2), (CudaFatal, 1)], true),
            (Interrupted, &[(Interrupted, 100)], true),
            (UserError, &[], false),
            (BadValue, &[], false),
            (Protocol, &[], false),
        ];
        for (kind, earlier, allowed) in cases {
            let attempts: Attempts = earlier.iter().copied().collect();
            assert_eq!(
                retry_allowed(*kind, &attempts, &cfg()),
                *allowed,
                "{kind} after {earlier:?}"
            );
        }
    }

    /// `RetryConfig::limit`, which `status` and `trials` show as the `M` of `retry N/M`, is the
    /// limit this policy applies: `M` attempts of a kind's class allow no more.
    #[test]
    fn the_limit_a_retry_is_shown_against_is_the_one_the_policy_applies() {
        use FailureKind::*;
        let cfg = RetryConfig {
            oom: 3,
            cuda_fatal: 2,
            crash: 4,
            ..cfg()
        };
        let all = [
            Oom,
            Cap,
            CudaFatal,
            Killed,
            Timeout,
            Hang,
            Protocol,
            UserError,
            BadValue,
            WorkerDied,
            Interrupted,
        ];
        for kind in all {
            let after = |n: u32| -> Attempts { [(kind, n)].into_iter().collect() };
            match cfg.limit(kind) {
                Some(m) => {
                    assert!(retry_allowed(kind, &after(m - 1), &cfg), "{kind} below {m}");
                    assert!(!retry_allowed(kind, &after(m), &cfg), "{kind} at {m}");
                }
                // No limit: retried whatever the count, or never.
                None => assert_eq!(
                    retry_allowed(kind, &after(0), &cfg),
                    retry_allowed(kind, &after(1000), &cfg),
                    "{kind}"
                ),
            }
        }
    }

    #[test]
    fn workers_are_recycled_after_their_count_or_their_growth() {
        const MIB: u64 = 1 << 20;
        let h = |successes, baseline: Option<u64>, idle: Option<u64>| WorkerHealth {
            successes,
            trials_run: successes,
            baseline,
            idle,
        };
        // (health, recycle_after, recycle_on_growth, replaced?)
        let cases = [
            (h(9, None, None), Some(10), None, false),
            (h(10, None, None), Some(10), None, true),
            (h(10, None, None), Some(0), None, false),
            (h(10, None, None), None, None, false),
            (
                h(3, Some(500 * MIB), Some(900 * MIB)),
                None,
                Some(512 * MIB),
                false,
            ),
            (
                h(3, Some(500 * MIB), Some(1100 * MIB)),
                None,
                Some(512 * MIB),
                true,
            ),
            (h(3, None, Some(u64::MAX)), None, Some(MIB), false),
            (
                h(3, Some(u64::MAX), Some(u64::MAX)),
                None,
                Some(u64::MAX),
                false,
            ),
        ];
        for (health, after, growth, replaced) in cases {
            let fate = recycle(&health, after, growth);
            assert_eq!(
                matches!(fate, Fate::Replace(_)),
                replaced,
                "{health:?} {after:?} {growth:?}: {fate:?}"
            );
        }
    }

    #[test]
    fn after_an_oom_a_worker_stays_only_if_its_memory_came_back() {
        let h = |baseline, idle| WorkerHealth {
            successes: 1,
            trials_run: 2,
            baseline,
            idle,
        };
        let base = 600 << 20;
        assert_eq!(
            after_oom(&h(Some(base), Some(base + (100 << 20)))),
            Fate::Keep
        );
        assert!(matches!(
            after_oom(&h(Some(base), Some(base + (300 << 20)))),
            Fate::Replace(_)
        ));
        assert!(
            matches!(after_oom(&h(None, Some(base))), Fate::Replace(_)),
            "no baseline"
        );
        assert!(
            matches!(after_oom(&h(Some(base), None)), Fate::Replace(_)),
            "no reading"
        );
    }

    #[test]
    fn a_replaced_worker_s_reason_gives_its_memory_in_whole_mib() {
        let h = |baseline, idle| WorkerHealth {
            successes: 3,
            trials_run: 3,
            baseline,
            idle,
        };
        let grown = h(Some(2036 << 20), Some((6644 << 20) + 1));
        assert_eq!(
            recycle(&grown, None, Some(1 << 30)),
            Fate::Replace(
                "recycled early: its memory between trials grew from 2036 to 6644 MiB".into()
            )
        );
        assert_eq!(
            after_oom(&h(Some(2036 << 20), Some(11252 << 20))),
            Fate::Replace(
                "replaced after an OOM: holds 11252 MiB between trials (baseline 2036 MiB)".into()
            )
        );
        assert_eq!(
            after_oom(&h(None, None)),
            Fate::Replace(
                "replaced after an OOM: holds 0 MiB between trials (baseline unknown)".into()
            )
        );
    }

    #[test]
    fn a_worker_is_clean_until_it_ran_something_and_then_while_it_has_not_grown() {
        let fresh = WorkerHealth::default();
        assert!(fresh.clean());
        let grown = WorkerHealth {
            successes: 1,
            trials_run: 1,
            baseline: Some(500 << 20),
            idle: Some(1 << 30),
        };
        assert!(!grown.clean());
        let steady = WorkerHealth {
            idle: Some(600 << 20),
            ..grown
        };
        assert!(steady.clean());
        let unmeasured = WorkerHealth {
            baseline: None,
            ..grown
        };
        assert!(
            !unmeasured.clean(),
            "ran a trial, never measured: not known to be clean"
        );
    }

    #[test]
    fn an_oom_alone_on_the_device_in_a_clean_worker_is_infeasible() {
        use FailureKind::*;
        // (kind, alone, clean worker, infeasible)
        let cases = [
            (Oom, true, true, true),
            (Oom, false, true, false),
            (Oom, true, false, false),
            (CudaFatal, true, true, false),
            (UserError, true, true, false),
        ];
        for (kind, alone, clean, expected) in cases {
            assert_eq!(
                infeasible(kind, alone, clean),
                expected,
                "{kind} {alone} {clean}"
            );
        }
        assert!(oom_like(Oom, "anything"));
        assert!(oom_like(
            CudaFatal,
            "CUDA fatal error: device-side assert (after CUDA OOM: …)"
        ));
        assert!(!oom_like(
            CudaFatal,
            "CUDA fatal error: illegal memory access"
        ));
        assert!(!oom_like(Killed, "after CUDA OOM"));
    }

    #[rstest::rstest]
    // (demand, total, headroom, never fits)
    #[case::a_request_larger_than_the_card(250 * G, 24 * G, G, true)]
    #[case::held_plus_requested_past_total_less_headroom(23 * G + 1, 24 * G, G, true)]
    #[case::exactly_what_the_card_gives_one_trial(23 * G, 24 * G, G, false)]
    #[case::small_beside_others(4 * G, 24 * G, G, false)]
    #[case::headroom_above_total(G, G / 2, G, true)]
    fn an_oom_whose_message_needs_more_than_the_card_never_fits(
        #[case] demand: u64,
        #[case] total: u64,
        #[case] headroom: u64,
        #[case] expected: bool,
    ) {
        assert_eq!(never_fits(demand, total, headroom), expected);
    }

    const G: u64 = 1 << 30;

    #[rstest::rstest]
    // (what the message shows it would have held, the bound it was admitted with, taken)
    #[case::needed_less_than_admitted(Some(2 * G), 3 * G, true)]
    #[case::needed_exactly_what_was_admitted(Some(3 * G), 3 * G, true)]
    #[case::needed_more_its_own_doing(Some(3 * G + 1), 3 * G, false)]
    #[case::no_figures_no_verdict(None, 3 * G, false)]
    #[case::admitted_without_a_bound(Some(G), 0, false)]
    fn an_oom_within_what_admission_counted_is_memory_taken_by_another_process(
        #[case] footprint: Option<u64>,
        #[case] bound: u64,
        #[case] expected: bool,
    ) {
        assert_eq!(memory_taken(footprint, bound), expected);
    }

    #[rstest::rstest]
    // (judged alone, footprint, demand, bound; infeasible starts with, notes contain, learns)
    #[case::alone_without_figures_stays_infeasible(
        true,
        None,
        None,
        4,
        Some("out of memory while alone"),
        "",
        true
    )]
    #[case::alone_but_its_message_shows_the_device_could_give_it(
        true,
        Some(15),
        Some(14),
        4,
        None,
        "(not infeasible: it needed at least 14.0 GiB",
        true
    )]
    #[case::alone_and_the_message_says_only_the_allocation(
        true,
        None,
        Some(14),
        4,
        Some("out of memory while alone"),
        "",
        true
    )]
    #[case::never_fits_whatever_ran_beside_it(
        false,
        Some(40),
        Some(40),
        4,
        Some("needs at least 40.0 GiB"),
        "",
        true
    )]
    #[case::within_its_bound_the_memory_was_taken(
        true,
        Some(3),
        Some(3),
        4,
        None,
        "within the 4.0 GiB it was admitted with",
        false
    )]
    #[case::beside_others_nothing_to_clear(false, Some(15), Some(14), 4, None, "", true)]
    #[case::admitted_on_the_guess_and_outgrew_it(
        false,
        Some(15),
        Some(14),
        7,
        None,
        "(admitted at 7.0 GiB, [gpu] trial_memory's guess",
        true
    )]
    fn an_oom_verdict_weighs_the_message_against_the_device_and_the_estimate(
        #[case] alone: bool,
        #[case] footprint: Option<u64>,
        #[case] demand: Option<u64>,
        #[case] bound: u64,
        #[case] infeasible: Option<&str>,
        #[case] notes: &str,
        #[case] learns: bool,
    ) {
        let facts = OomFacts {
            footprint: footprint.map(|g| g * G),
            demand: demand.map(|g| g * G),
            peak: Some(2 * G),
            total: Some(24 * G),
            headroom: G,
            bound: bound * G,
            guess: 7 * G,
        };
        let alone = alone.then(|| "out of memory while alone on the device".to_owned());
        let v = oom_verdict(alone, &facts);
        match (infeasible, &v.infeasible) {
            (None, None) => {}
            (Some(want), Some(got)) => assert!(got.starts_with(want), "{got}"),
            (want, got) => panic!("infeasible: wanted {want:?}, got {got:?}"),
        }
        assert!(v.notes.contains(notes), "{}", v.notes);
        if notes.is_empty() {
            assert_eq!(v.notes, "");
        }
        let reached = demand.map_or(2 * G, |d| (d * G).max(2 * G));
        assert_eq!(v.reached, learns.then_some(reached));
    }

    #[rstest::rstest]
    // (bound admitted with, trial_memory's guess with its margin, reached, outgrew it)
    #[case::admitted_at_the_guess_and_needed_more(6900, 6900, 14000, true)]
    #[case::admitted_at_the_guess_and_within_it(6900, 6900, 6900, false)]
    #[case::admitted_on_a_measured_estimate(16000, 6900, 17000, false)]
    #[case::no_guess(0, 0, 14000, false)]
    fn an_oom_beyond_trial_memorys_guess_blames_the_guess(
        #[case] bound: u64,
        #[case] guess: u64,
        #[case] reached: u64,
        #[case] expected: bool,
    ) {
        assert_eq!(outgrew_guess(bound, guess, reached), expected);
    }

    #[rstest::rstest]
    // (places in line and sizes of the candidates that fit, the one that starts)
    #[case::the_head_when_it_fits(&[(0, 2), (1, 9)], Some(0))]
    #[case::else_the_largest_behind_it(&[(1, 2), (3, 9), (4, 5)], Some(1))]
    #[case::the_first_of_equals(&[(2, 4), (5, 4)], Some(0))]
    #[case::none_fits(&[], None)]
    fn of_the_candidates_that_fit_the_head_else_the_largest_starts(
        #[case] fits: &[(usize, u64)],
        #[case] expected: Option<usize>,
    ) {
        assert_eq!(pick(fits), expected);
    }

    #[test]
    fn the_admission_line_lets_small_trials_pass_until_the_head_is_starved() {
        // (passes of the head, line length, exhausted) -> (head has priority, look further?)
        let cases = [
            ((0, 1, false), (false, true)),
            ((0, 3, false), (false, true)),
            ((0, MAX_QUEUE, false), (false, false)),
            ((0, 2, true), (false, false)),
            ((MAX_PASSES - 1, 3, false), (false, true)),
            ((MAX_PASSES, 3, false), (true, true)),
            ((MAX_PASSES + 5, 1, false), (true, true)),
            ((MAX_PASSES, MAX_QUEUE, false), (true, false)),
            ((MAX_PASSES, 1, true), (true, false)),
        ];
        for ((passes, line, exhausted), (priority, further)) in cases {
            assert_eq!(head_has_priority(passes), priority, "{passes} {line}");
            assert_eq!(
                look_further(line, exhausted),
                further,
                "{passes} {line} {exhausted}"
            );
        }
    }

    #[test]
    fn a_study_that_runs_nothing_is_starved_by_the_first_start_of_another_daemon() {
        // (passes by our own line, by the other daemons, ours running) -> passes
        let cases = [
            ((0, 0, 0), 0),
            ((2, 0, 0), 2),
            ((0, 1, 0), MAX_PASSES),
            ((1, 3, 0), MAX_PASSES),
            ((3, MAX_PASSES, 0), MAX_PASSES + 3),
            ((0, 1, 1), 1),
            ((2, MAX_PASSES - 3, 2), MAX_PASSES - 1),
            ((1, u32::MAX, 3), u32::MAX),
        ];
        for ((own, by_others, running), want) in cases {
            assert_eq!(
                head_passes(own, by_others, running),
                want,
                "{own} by our line, {by_others} by others, {running} of ours running"
            );
        }
    }

    #[rstest::rstest]
    #[case::nothing_enqueued_ahead(0, Some(1), true)]
    #[case::no_budget(3, None, true)]
    #[case::room_for_it_and_the_enqueued(2, Some(3), true)]
    #[case::the_last_slot_is_the_enqueued_trials(1, Some(1), false)]
    #[case::not_enough_for_every_enqueued_trial(3, Some(2), false)]
    fn an_enqueued_trial_keeps_its_slot_of_the_budget(
        #[case] waiting_ahead: u64,
        #[case] room: Option<u64>,
        #[case] pass: bool,
    ) {
        assert_eq!(may_pass(waiting_ahead, room), pass);
    }
}
